"""Horovod as the distributed engine: one process per device, horovodrun.

`--distribution_strategy=horovod` trains without a tf.distribute strategy.
Every process (rank) builds the same single-device graph, reads its own
share of the input (whole files, or records of fewer files than ranks: see
runner.for_this_process) and feeds a per-rank batch of global_batch / ranks.
The data-parallel optimizer (optimizers.py) sums the gradients over the
ranks through the ProcessGroup that `init` returns (`sum_across_ranks`);
since each rank's loss is already its share of the global-batch loss (see
runner.mean_loss_shares), the sum is the gradient of the global-batch loss,
so the learning rate means what it means on one device. Rank 0 alone writes
checkpoints and summaries to --output_dir; the other ranks start from its
variables (`broadcast_hook`) and keep their model directory in a scratch
location.

horovod is optional: this module imports without it, and `init` turns its
absence into one clear error line. Build it with scripts/install_horovod.sh;
see docs/horovod.md.

Module state: the horovod handle, written once by `init` (it is the handle
of this process's horovod runtime, which has no other owner) and read by the
functions below; `init` returns the distribution.ProcessGroup that the
runner hands the optimizer.
"""

import atexit
import os
import shutil
import sys
import tempfile

from absl import logging
import tensorflow as tf2
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.engine import distribution

# Directory under which non-zero ranks create their scratch model_dir. When
# set, the scratch directories are kept after the run (for inspection and
# tests); by default they live in the system temp directory and are removed
# at exit.
SCRATCH_ROOT_ENV = "BERT_HOROVOD_SCRATCH_ROOT"

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
  """A fresh model_dir for a non-zero rank, outside output_dir.

  It starts with a checkpoint state file naming output_dir's latest
  checkpoint (when this machine can see it), so that this rank resumes, or
  finds training already finished, exactly as rank 0 does. At the end of
  training the rank saves its final weights here (the runner hands it to
  broadcast_hook), which `Estimator.evaluate` then reads.

  Args:
    output_dir: rank 0's --output_dir.

  Returns:
    The directory path.
  """
  rank = _hvd().rank()
  root = os.environ.get(SCRATCH_ROOT_ENV)
  if root:
    tf.io.gfile.makedirs(root)
  path = tempfile.mkdtemp(prefix="bert-horovod-rank%d-" % rank, dir=root)
  if not root:
    atexit.register(shutil.rmtree, path, True)
  latest = tf.train.latest_checkpoint(output_dir)
  if latest:
    if not atomic_io.is_url(latest):
      latest = os.path.abspath(latest)
    tf.train.update_checkpoint_state(path, latest,
                                     all_model_checkpoint_paths=[latest])
  logging.info("horovod rank %d: scratch model_dir %s (starts from %s)",
               rank, path, latest or "rank 0's broadcast")
  return path


class BroadcastFromRankZeroHook(tf.train.SessionRunHook):
  """Makes every rank start from rank 0's variables.

  The broadcast runs after session creation, i.e. after rank 0 restored its
  checkpoint (or initialised fresh weights), and covers every global
  variable: weights, optimizer slots, loss scale and global_step. A rank
  given a `final_checkpoint_dir` saves its final variables there at the end.
  """

  def __init__(self, hvd, final_checkpoint_dir=None):
    self._hvd = hvd
    self._final_dir = final_checkpoint_dir
    self._broadcast = None
    self._saver = None
    self._global_step = None

  def begin(self):
    self._broadcast = self._hvd.broadcast_variables(tf.global_variables(),
                                                    root_rank=0)
    if self._final_dir:
      self._global_step = tf.train.get_global_step()
      self._saver = tf.train.Saver(sharded=True, max_to_keep=1)

  def after_create_session(self, session, coord):
    del coord
    session.run(self._broadcast)

  def end(self, session):
    if self._saver is None:
      return
    step = int(session.run(self._global_step))
    path = self._saver.save(session, os.path.join(self._final_dir,
                                                  "model.ckpt"),
                            global_step=step, write_meta_graph=False)
    logging.info("horovod rank %d: final weights of step %d in %s",
                 self._hvd.rank(), step, path)


def broadcast_hook(final_checkpoint_dir=None):
  """The hook every rank adds to training (see BroadcastFromRankZeroHook).

  Args:
    final_checkpoint_dir: a non-zero rank's scratch model_dir
      (scratch_model_dir), where it saves its final weights; None on rank 0,
      whose checkpoints the Estimator writes.
  """
  return BroadcastFromRankZeroHook(_hvd(), final_checkpoint_dir)
