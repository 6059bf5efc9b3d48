"""BytePS as the distributed engine: workers, servers that sum, a scheduler.

`--distribution_strategy=byteps` trains as horovod does (one process per
device, no tf.distribute strategy, rank 0 writes, the others follow it:
rank_zero.py), but the gradients travel through BytePS's parameter-server
design instead of an all-reduce: every worker pushes each gradient to the
servers, which sum it over the workers, and pulls the sum back
(`push_pull`). Each worker's loss is already its share of the global-batch
loss (model_spec.mean_loss_shares), so the summed gradient is the
gradient of the global-batch loss, exactly as under every other engine.

The processes find each other through ps-lite's DMLC_* environment:
DMLC_PS_ROOT_URI/PORT (the scheduler), DMLC_NUM_WORKER, DMLC_NUM_SERVER,
DMLC_ROLE and DMLC_WORKER_ID. scripts/run_pre_byteps.sh starts the
scheduler, the servers and the workers (`python -c 'import byteps.server'`
for the first two) and sets them; cluster_environment.byteps_world_size
checks a worker's before BytePS reads them.

On a machine without a GPU the worker runs in BytePS's CPU-only mode
(BYTEPS_CPU_ONLY=1, set by `init`), which patches/byteps/03-cpu-only.patch
adds: BytePS 0.2.5 otherwise sends even CPU tensors through NCCL and CUDA
copies. Build BytePS with scripts/install_byteps.sh; see docs/byteps.md.

BytePS is optional: this module imports without it, and `init` turns its
absence into one clear error line.

Module state: the byteps.tensorflow module, written once by `init` (the
handle of this process's BytePS runtime, which has no other owner) and read
by the functions below.
"""

import atexit
import os
import sys
import threading

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import errors
from bertkit.common.errors import UserError
from bertkit.engine.distributed import distribution
from bertkit.engine.distributed import rank_zero

# Where non-zero ranks keep their scratch model_dir (rank_zero.py).
SCRATCH_ROOT_ENV = rank_zero.scratch_root_variable("byteps")

_STATE = {"bps": None}


def _import_byteps():
  """byteps.tensorflow, or a UserError saying how to get it."""
  try:
    import byteps.tensorflow as bps  # pylint: disable=g-import-not-at-top
  except (ImportError, OSError, tf.errors.NotFoundError) as e:
    # OSError: the plugin's libraries (CUDA runtime, NCCL) are missing;
    # NotFoundError: it was compiled against another TensorFlow.
    reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise UserError(
        "--distribution_strategy=byteps needs BytePS built for this "
        "TensorFlow, and %s cannot load it (%s): run scripts/install_byteps.sh"
        " (see docs/byteps.md)" % (sys.executable, reason))
  return bps


def _bps():
  if _STATE["bps"] is None:
    raise RuntimeError("byteps_engine.init() must run first")
  return _STATE["bps"]


def init(plan, precision):
  """Starts this process's BytePS worker and routes the gradient sum through it.

  Args:
    plan: the distribution.StrategyPlan of the byteps strategy; its
      num_workers is the worker count of the DMLC_* environment.
    precision: the run's precision.Precision; with compress_gradients the
      gradients travel as float16 (half the traffic).

  Returns:
    The distribution.ProcessGroup of the workers, also joined as this
    process's; its rank 0 is the only rank that writes checkpoints and
    summaries.

  Raises:
    UserError: BytePS is missing, or disagrees with the environment about
      the number of workers.
  """
  os.environ.setdefault("BYTEPS_LOCAL_RANK", "0")
  os.environ.setdefault("BYTEPS_LOCAL_SIZE", "1")
  if plan.devices[0].startswith("/cpu"):
    if os.environ["BYTEPS_LOCAL_SIZE"] != "1":
      raise UserError(
          "BYTEPS_LOCAL_SIZE=%s, but without GPUs every BytePS worker is a "
          "process of its own (BYTEPS_LOCAL_SIZE=1, one DMLC_WORKER_ID "
          "each), as scripts/run_pre_byteps.sh starts them" %
          os.environ["BYTEPS_LOCAL_SIZE"])
    os.environ["BYTEPS_CPU_ONLY"] = "1"
    # A single worker would otherwise skip the servers and sum on the GPUs
    # alone, a path that CPU-only mode has not (its result would never be
    # written): through the servers it is a sum over one worker, as it
    # should be.
    os.environ["BYTEPS_FORCE_DISTRIBUTED"] = "1"
    # ps-lite's receiving threads otherwise poll without pause, a core each
    # (patches/byteps/03-cpu-only.patch).
    os.environ.setdefault("PS_ZMQ_IDLE_SLEEP_US", "100")
  bps = _import_byteps()
  # Returns at once: BytePS connects to the scheduler at the first push_pull
  # (the start-up broadcast), where the runner's stall watchdog bounds the
  # wait for workers that never start.
  bps.init()
  if bps.size() != plan.num_workers:
    raise UserError(
        "BytePS started %d worker(s) but DMLC_NUM_WORKER x BYTEPS_LOCAL_SIZE "
        "announces %d" % (bps.size(), plan.num_workers))
  _STATE["bps"] = bps
  _exit_even_if_shutdown_waits(plan.collective_timeout_seconds)
  float16_on_wire = precision.compress_gradients

  def sum_across_processes(tensors, compress):
    return sum_across_ranks(tensors, float16_on_wire and compress)

  group = distribution.ProcessGroup(
      engine="byteps", rank=bps.rank(), size=bps.size(),
      sum_across_processes=sum_across_processes)
  distribution.join_process_group(group)
  logging.info("byteps: worker %d of %d (local rank %d), %s, %s, gradient "
               "push_pull in %s", bps.rank(), bps.size(), bps.local_rank(),
               plan.devices[0], "CPU-only mode" if
               os.environ.get("BYTEPS_CPU_ONLY") == "1" else "GPU mode",
               "float16" if float16_on_wire else "float32")
  return group


def _exit_even_if_shutdown_waits(timeout_seconds):
  """Bounds the wait of BytePS's shutdown at exit.

  bps.init registers bps.shutdown to run at exit, and it waits for every
  other worker to shut down too. A worker that ends on an error while the
  others still train (or died) would wait there forever. Registered after
  BytePS's, this runs before it (atexit is last in, first out) and starts a
  timer that ends the process with the training-failed code if the shutdown
  takes longer than `timeout_seconds`.
  """

  def arm():
    def expire():
      print("error: BytePS's shutdown waited %d s (--collective_timeout_"
            "seconds) for the other workers, which have not finished; "
            "exiting without it" % timeout_seconds, file=sys.stderr,
            flush=True)
      os._exit(errors.EXIT_TRAINING_FAILED)  # pylint: disable=protected-access
    timer = threading.Timer(timeout_seconds, expire)
    timer.daemon = True
    timer.start()

  atexit.register(arm)


def visible_gpu_list():
  """The `gpu_options.visible_device_list` pinning this worker to one GPU
  (its BYTEPS_LOCAL_RANK), as horovod_engine.visible_gpu_list does."""
  return str(_bps().local_rank())


def sum_across_ranks(tensors, float16_on_wire=False):
  """push_pull of each of `tensors`: their SUM over all workers.

  The servers sum each tensor once every worker has pushed it; BytePS keys
  a tensor by its graph name, which is the same on every worker because
  every worker builds the same graph.

  Args:
    tensors: dense tensors of the same shapes and order on every worker
      (each worker's gradient of its share of the global mean loss).
    float16_on_wire: float tensors travel as float16 and come back in their
      own dtype; False sends them as they are.

  Returns:
    List of the summed tensors, identical on every worker, same dtypes.
  """
  bps = _bps()
  from byteps.tensorflow.ops import ReduceOps  # pylint: disable=g-import-not-at-top
  compression = (bps.Compression.fp16 if float16_on_wire
                 else bps.Compression.none)
  # Sum, not Average: the loss shares are already divided by the rank count.
  return [bps.push_pull(t, op=ReduceOps.Sum, compression=compression)
          for t in tensors]


def barrier():
  """Returns once every worker has called it (a summed scalar).

  Built in a graph of its own: in eager mode BytePS names an unnamed tensor
  at random, and a push_pull is matched across workers by name.
  """
  with tf.Graph().as_default():
    total, = sum_across_ranks([tf.constant(0.0, name="bert_byteps_barrier")])
    with tf.Session() as session:
      session.run(total)


def scratch_model_dir(output_dir):
  """A fresh model_dir for a non-zero rank (rank_zero.scratch_model_dir)."""
  return rank_zero.scratch_model_dir(output_dir, "byteps", _bps().rank())


def broadcast_hook(final_checkpoint_dir=None):
  """The hook every worker adds to training
  (rank_zero.BroadcastFromRankZeroHook).

  Args:
    final_checkpoint_dir: a non-zero rank's scratch model_dir
      (scratch_model_dir), where it saves its final weights; None on rank 0.
  """
  bps = _bps()
  return rank_zero.BroadcastFromRankZeroHook(
      lambda variables, root_rank: bps.broadcast_variables(
          variables, root_rank=root_rank),
      bps.rank(), final_checkpoint_dir)


def lost_a_rank(message):
  """Whether an OpError of a BytePS run says another worker is gone.

  BytePS reports none: a push_pull whose peer died waits, and the runner's
  stall watchdog (--collective_timeout_seconds) ends the survivors.
  """
  del message
  return False

