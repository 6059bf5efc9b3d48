"""Horovod as the distributed engine: one process per device, horovodrun.

`--distribution_strategy=horovod` trains without a tf.distribute strategy.
Every process (rank) builds the same single-device graph, reads its own
share of the input (whole files, or records of fewer files than ranks: see
runner.for_this_process) and feeds a per-rank batch of global_batch / ranks.
The data-parallel optimizer (optimizers.py) sums the gradients over the
ranks through the ProcessGroup that `init` returns (`sum_across_ranks`);
since each rank's loss is already its share of the global-batch loss (see
model_spec.mean_loss_shares), the sum is the gradient of the global-batch
loss, so the learning rate means what it means on one device. Rank 0 alone
writes checkpoints and summaries to --output_dir; the other ranks start from its
variables (`broadcast_hook`) and keep their model directory in a scratch
location (rank_zero.py, shared with the BytePS engine).

horovod is optional: this module imports without it, and `init` turns its
absence into one clear error line. Build it with scripts/install_horovod.sh;
see docs/horovod.md.

Module state: the horovod handle, written once by `init` (it is the handle
of this process's horovod runtime, which has no other owner) and read by the
functions below; `init` returns the distribution.ProcessGroup that the
runner hands the optimizer.
"""

import sys

from absl import logging
import tensorflow as tf2
import tensorflow.compat.v1 as tf

from bertkit.common.errors import UserError
from bertkit.engine.distributed import distribution
from bertkit.engine.distributed import rank_zero

# Where non-zero ranks keep their scratch model_dir (rank_zero.py).
SCRATCH_ROOT_ENV = rank_zero.scratch_root_variable("horovod")

_STATE = {"hvd": None}


def _import_horovod():
  """horovod.tensorflow, or a UserError saying how to get it."""
  try:
    import horovod.tensorflow as hvd  # pylint: disable=g-import-not-at-top
  except (ImportError, tf.errors.NotFoundError) as e:
    # NotFoundError: the horovod ops were compiled against another TF build.
    reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise UserError(
        "--distribution_strategy=horovod needs horovod built for this "
        "TensorFlow, and %s cannot load it (%s): run scripts/install_horovod.sh"
        " or pip install -r requirements-horovod.txt (see docs/horovod.md)"
        % (sys.executable, reason))
  return hvd


def _hvd():
  if _STATE["hvd"] is None:
    raise RuntimeError("horovod_engine.init() must run first")
  return _STATE["hvd"]


def init(plan, precision):
  """Starts horovod in this process and routes the gradient sum through it.

  Args:
    plan: the distribution.StrategyPlan of the horovod strategy; its
      num_workers is the rank count announced by the launcher.
    precision: the run's precision.Precision; with compress_gradients the
      gradients travel as float16 in the all-reduce (half the traffic).

  Returns:
    The distribution.ProcessGroup of the ranks, also joined as this
    process's; its rank 0 is the only rank that writes checkpoints and
    summaries.

  Raises:
    UserError: horovod is missing, or disagrees with the launcher about the
      number of ranks, or a machine runs more ranks than it has GPUs.
  """
  hvd = _import_horovod()
  hvd.init()
  if hvd.size() != plan.num_workers:
    raise UserError(
        "horovod started %d rank(s) but the launcher's environment "
        "(HOROVOD_SIZE/OMPI_COMM_WORLD_SIZE/PMI_SIZE) announces %d; launch "
        "with horovodrun -np N" % (hvd.size(), plan.num_workers))
  if plan.devices[0].startswith("/gpu"):
    num_gpus = len(tf2.config.list_physical_devices("GPU"))
    if hvd.local_rank() >= num_gpus:
      raise UserError(
          "horovod rank %d is local rank %d on its machine, which has only "
          "%d GPU(s): start at most one rank per GPU (horovodrun -H "
          "host:slots)" % (hvd.rank(), hvd.local_rank(), num_gpus))
  _STATE["hvd"] = hvd
  float16_on_wire = precision.compress_gradients

  def sum_across_processes(tensors, compress):
    return sum_across_ranks(tensors, float16_on_wire and compress)

  group = distribution.ProcessGroup(
      engine="horovod", rank=hvd.rank(), size=hvd.size(),
      sum_across_processes=sum_across_processes)
  distribution.join_process_group(group)
  logging.info("horovod: rank %d of %d (local rank %d), %s, gradient "
               "all-reduce in %s", hvd.rank(), hvd.size(), hvd.local_rank(),
               plan.devices[0], "float16" if float16_on_wire else "float32")
  return group


def visible_gpu_list():
  """The `gpu_options.visible_device_list` pinning this rank to one GPU.

  The local rank picks the GPU, so "/gpu:0" inside each process is a
  different physical GPU. It has to go into the session ConfigProto:
  CUDA_VISIBLE_DEVICES is read when TensorFlow first lists the GPUs, which
  happens before horovod starts, and tf.config.set_visible_devices only
  applies to sessions created without an explicit config.
  """
  return str(_hvd().local_rank())


def sum_across_ranks(tensors, float16_on_wire=False):
  """One grouped SUM all-reduce of `tensors` over all ranks.

  Args:
    tensors: dense tensors of the same shapes and order on every rank (each
      rank's gradient of its share of the global mean loss).
    float16_on_wire: float tensors travel as float16 and come back in their
      own dtype; False sends them as they are.

  Returns:
    List of the summed tensors, identical on every rank, same dtypes.
  """
  hvd = _hvd()
  # Sum, not Average: the loss shares are already divided by the rank count.
  return list(hvd.grouped_allreduce(
      list(tensors), op=hvd.Sum,
      compression=hvd.Compression.fp16 if float16_on_wire
      else hvd.Compression.none))


def barrier():
  """Returns once every rank has called it (a summed scalar, run eagerly).

  After a stop on a signal every rank exits non-zero, and horovodrun kills
  the ranks still running when the first one exits: without this, a rank
  quick to finish could have rank 0 killed while it writes the checkpoint.
  """
  hvd = _hvd()
  hvd.allreduce(tf2.constant(0.0), op=hvd.Sum, name="barrier")


def scratch_model_dir(output_dir):
  """A fresh model_dir for a non-zero rank (rank_zero.scratch_model_dir)."""
  return rank_zero.scratch_model_dir(output_dir, "horovod", _hvd().rank())


def broadcast_hook(final_checkpoint_dir=None):
  """The hook every rank adds to training (rank_zero.BroadcastFromRankZeroHook).

  Args:
    final_checkpoint_dir: a non-zero rank's scratch model_dir
      (scratch_model_dir), where it saves its final weights; None on rank 0,
      whose checkpoints the Estimator writes.
  """
  hvd = _hvd()
  return rank_zero.BroadcastFromRankZeroHook(
      lambda variables, root_rank: hvd.broadcast_variables(
          variables, root_rank=root_rank),
      hvd.rank(), final_checkpoint_dir)


def lost_a_rank(message):
  """Whether an OpError of a horovod run says another rank is gone.

  Depending on which collective was running, a dead rank shows as horovod
  shutting down or as gloo's connection to it being reset.
  """
  return ("Horovod has been shut down" in message or
          ("gloo/transport" in message and
           ("Connection reset by peer" in message or
            "Connection closed by peer" in message)))
