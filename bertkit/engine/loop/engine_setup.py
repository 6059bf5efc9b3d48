"""The engine a run trains on: strategy, horovod or BytePS, precision,
RunConfig.

`prepare` turns a run's options.RunOptions (distribution, precision,
checkpointing, logging) into a `Setup`: the strategy plan, the run's
precision.Precision (decided once, by `resolve_precision`), the tf.distribute
strategy (or the horovod or BytePS worker started in this process), the
Estimator's RunConfig and session config, whether this process is the chief,
and the output directory checked writable (falling back to its newest
readable checkpoint). runner.py runs tasks on it.
"""

import dataclasses
import os
import shutil
import uuid
from typing import Any, Optional

from absl import logging
import tensorflow as tf2
import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.util import _pywrap_util_port

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.common.options import RunOptions
from bertkit.engine.checkpointing import checkpoints
from bertkit.engine.distributed import byteps_engine
from bertkit.engine.distributed import cluster_environment
from bertkit.engine.distributed import distribution
from bertkit.engine.distributed import horovod_engine
from bertkit.engine.loop.precision import (FLOAT32, MIXED_BFLOAT16,
                                           MIXED_FLOAT16, LossScale,
                                           Precision)

MIN_FREE_DISK_BYTES = 50 * 1024 * 1024

# The engines of one process per replica (distribution.PROCESS_ENGINES), by
# strategy name. Each module has the same functions: init, visible_gpu_list,
# scratch_model_dir, broadcast_hook, barrier, lost_a_rank.
PROCESS_ENGINES = {"horovod": horovod_engine, "byteps": byteps_engine}


@dataclasses.dataclass
class Setup:
  """What the runner uses of a prepared engine.

  Attributes:
    options: the run's options.RunOptions (output_dir, batch, logging,
      profiling: read from here, never copied).
    plan: the distribution.StrategyPlan.
    strategy: the tf.distribute strategy, or None for a process engine.
    run_config: the Estimator's RunConfig.
    is_chief: whether this process writes checkpoints and summaries.
    precision: the run's precision.Precision.
    process_group: the distribution.ProcessGroup of an engine with one
      process per replica (horovod, byteps), else None.
    process_engine: that engine's module (PROCESS_ENGINES), else None.
    extra_info: the facts written into throughput_summary.json (strategy,
      precision, records skipped, ...); nothing reads decisions back from it.
  """
  options: RunOptions
  plan: distribution.StrategyPlan
  strategy: Any
  run_config: tf.estimator.RunConfig
  is_chief: bool
  precision: Precision
  process_group: Optional[distribution.ProcessGroup]
  process_engine: Any
  extra_info: dict


def check_output_dir(output_dir):
  """Creates output_dir and proves it writable and not full.

  Raises:
    UserError: it cannot be created or written, or the disk is full.
  """
  try:
    tf.io.gfile.makedirs(output_dir)
    probe = os.path.join(output_dir, ".write-test-%s" % uuid.uuid4().hex[:8])
    with tf.io.gfile.GFile(probe, "w") as f:
      f.write("ok")
    tf.io.gfile.remove(probe)
  except (tf.errors.OpError, OSError) as e:
    message = getattr(e, "message", None) or str(e)
    raise UserError("--output_dir %s is not writable: %s" %
                    (output_dir, message.splitlines()[0]))
  if not atomic_io.is_url(output_dir):
    free = shutil.disk_usage(output_dir).free
    if free < MIN_FREE_DISK_BYTES:
      raise UserError("--output_dir %s: only %.1f MB free on its disk; "
                      "checkpoints need more" % (output_dir, free / 2**20))
  atomic_io.remove_stale_partials(output_dir)


# The CPU flags (/proc/cpuinfo) that make oneDNN's bfloat16 kernels fast;
# without them oneDNN emulates bfloat16 (AVX512) or TensorFlow falls back to
# Eigen's bfloat16 kernels (AVX2), both slower than float32.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags(cpuinfo="/proc/cpuinfo"):
  """The feature flags of the first CPU in /proc/cpuinfo (empty if absent)."""
  try:
    with open(cpuinfo) as f:
      for line in f:
        if line.startswith("flags"):
          return set(line.split(":", 1)[1].split())
  except OSError:
    pass
  return set()


def onednn_enabled():
  """Whether TensorFlow's oneDNN CPU kernels are on in this process.

  TensorFlow decides once, the first time it is asked, from
  TF_ENABLE_ONEDNN_OPTS, which the programs set to 1 before importing it
  unless the user set it (cpu_kernels). Its oneDNN bfloat16 graph rewrite
  does nothing while they are off.
  """
  return bool(_pywrap_util_port.IsMklEnabled())


def resolve_precision(use_fp16, use_bf16, num_gpus, onednn_on, flags_of_cpu,
                      loss_scale=LossScale(), stop_on_nonfinite_loss=True):
  """The precision a run gets, with one line saying why.

  A pure decision: the machine's facts are handed in.

  Args:
    use_fp16: --use_fp16.
    use_bf16: --use_bf16.
    num_gpus: GPUs visible to TensorFlow.
    onednn_on: onednn_enabled().
    flags_of_cpu: cpu_flags().
    loss_scale: the LossScale of --init_loss_scale and
      --loss_scale_growth_steps, used with --use_fp16.
    stop_on_nonfinite_loss: --stop_on_nonfinite_loss (ignored with
      --use_fp16, whose loss scale skips the overflowing steps).

  Returns:
    A Precision; its `reason` is the line to log.

  Raises:
    UserError: both flags, or --use_bf16 where TensorFlow cannot run it.
  """
  if use_fp16 and use_bf16:
    raise UserError("--use_bf16 and --use_fp16 are mutually exclusive: pass "
                    "one of them")
  compute, reason = _compute_precision(use_fp16, use_bf16, num_gpus,
                                       onednn_on, flags_of_cpu)
  return Precision(
      requested="fp16" if use_fp16 else "bf16" if use_bf16 else "fp32",
      compute=compute, loss_scale=loss_scale if use_fp16 else None,
      compress_gradients=bool(use_fp16),
      stop_on_nonfinite_loss=bool(stop_on_nonfinite_loss and not use_fp16),
      reason=reason)


def _compute_precision(use_fp16, use_bf16, num_gpus, onednn_on, flags_of_cpu):
  """(what the kernels compute in, why) for resolve_precision."""
  if use_fp16:
    if not num_gpus:
      return FLOAT32, ("float32: --use_fp16's graph rewrite only changes GPU "
                       "kernels and no GPU is visible (dynamic loss scaling "
                       "still runs)")
    return MIXED_FLOAT16, ("mixed_float16: float16 GPU kernels, float32 "
                           "variables, dynamic loss scaling")
  if not use_bf16:
    return FLOAT32, "float32"
  if num_gpus:
    raise UserError(
        "--use_bf16 is not available on GPUs: TensorFlow 2.15's graph-mode "
        "mixed-precision rewrite for GPUs is float16 only (its bfloat16 "
        "rewrite is oneDNN's, for CPUs); use --use_fp16 there")
  if not onednn_on:
    return FLOAT32, (
        "float32: --use_bf16 needs TensorFlow's oneDNN CPU kernels, which "
        "are off in this process (TF_ENABLE_ONEDNN_OPTS=0 in the "
        "environment, or a TensorFlow build without them); start the program "
        "with TF_ENABLE_ONEDNN_OPTS=1 (the programs' default when it is "
        "unset) to compute in bfloat16 "
        "(emulated without bfloat16 instructions, slower than float32)")
  native = sorted(set(BF16_CPU_FLAGS) & set(flags_of_cpu))
  return MIXED_BFLOAT16, (
      "mixed_bfloat16: oneDNN bfloat16 graph rewrite, float32 variables, no "
      "loss scaling; %s" % (
          "CPU bfloat16 instructions: " + ", ".join(native) if native else
          "this CPU has no bfloat16 instructions (none of %s), so bfloat16 "
          "is emulated and slower than float32" % ", ".join(BF16_CPU_FLAGS)))


def session_config(plan, use_xla, compute=FLOAT32):
  """ConfigProto for the Estimator's sessions.

  Args:
    plan: the distribution.StrategyPlan.
    use_xla: --use_xla.
    compute: Precision.compute of the run.
  """
  config = tf.ConfigProto(allow_soft_placement=True)
  if compute == MIXED_BFLOAT16:
    # Grappler casts the inputs of allow-listed ops (MatMul, BatchMatMul,
    # ...) to bfloat16 and their outputs back as needed; variables, the
    # optimizer's update and the loss stay float32.
    config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = (
        rewriter_config_pb2.RewriterConfig.ON)
  if len(plan.devices) > 1 and plan.devices[0].startswith("/cpu"):
    # Graph-mode sessions only see logical CPUs that the ConfigProto asks for.
    config.device_count["CPU"] = len(plan.devices)
  if plan.name in PROCESS_ENGINES and plan.devices[0].startswith("/gpu"):
    config.gpu_options.visible_device_list = (
        PROCESS_ENGINES[plan.name].visible_gpu_list())
  if use_xla:
    config.graph_options.optimizer_options.global_jit_level = (
        tf.OptimizerOptions.ON_1)
  return config


def prepare(options):
  """Decides the engine of a run and builds the Estimator's RunConfig.

  Args:
    options: the run's options.RunOptions.

  Returns:
    A Setup.

  Raises:
    UserError: options that contradict each other or the machine.
  """
  num_gpus = len(tf2.config.list_physical_devices("GPU"))
  precision = _decide_precision(options.precision, num_gpus)
  plan = distribution.plan(options.distribution, num_gpus)
  distribution.check_global_batch(plan, options.train_batch_size)
  distribution.micro_batch_size(options.train_batch_size, plan.num_replicas,
                                options.optimizer.num_accumulation_steps)
  logging.info(distribution.describe(plan, options.train_batch_size))
  check_output_dir(options.output_dir)
  checkpoints.fall_back_to_readable(options.output_dir)
  model_dir, process_group = options.output_dir, None
  process_engine = PROCESS_ENGINES.get(plan.name)
  if process_engine:
    strategy = None
    process_group = process_engine.init(plan, precision)
    is_chief = process_group.rank == 0
    if not is_chief:
      # Only rank 0 writes checkpoints and summaries; the others start from
      # its weights through the broadcast hook.
      model_dir = process_engine.scratch_model_dir(options.output_dir)
  else:
    distribution.split_cpu(len(plan.devices)
                           if plan.devices[0].startswith("/cpu") else 0)
    strategy = distribution.build_strategy(plan)
    is_chief = True
  run_config = tf.estimator.RunConfig(
      model_dir=model_dir,
      save_checkpoints_steps=options.save_checkpoints_steps
      if is_chief else None,
      save_checkpoints_secs=None,
      keep_checkpoint_max=options.keep_checkpoint_max,
      log_step_count_steps=options.log_every_n_steps,
      save_summary_steps=options.log_every_n_steps if is_chief else None,
      train_distribute=strategy,
      tf_random_seed=options.tf_random_seed,
      session_config=session_config(plan, options.precision.use_xla,
                                    precision.compute),
      # MonitoredSession treats a lost peer as recoverable and re-creates the
      # session, which would wait for the dead worker for 2 hours by default.
      session_creation_timeout_secs=max(
          options.distribution.collective_timeout_seconds, 60))
  if plan.cluster:
    is_chief = cluster_environment.cluster_task()[1]
  extra_info = dict(precision.summary(), strategy=plan.name,
                    use_xla=options.precision.use_xla,
                    devices=",".join(plan.devices),
                    num_workers=plan.num_workers)
  return Setup(options=options, plan=plan, strategy=strategy,
               run_config=run_config, is_chief=is_chief, precision=precision,
               process_group=process_group, process_engine=process_engine,
               extra_info=extra_info)


def _decide_precision(options, num_gpus):
  """The run's Precision from its options.PrecisionOptions and this
  machine, logged.

  A warning when mixed precision was asked for and the run computes float32.
  """
  precision = resolve_precision(
      options.use_fp16, options.use_bf16, num_gpus,
      options.use_bf16 and onednn_enabled(), cpu_flags(),
      LossScale(options.init_loss_scale, options.loss_scale_growth_steps),
      options.stop_on_nonfinite_loss)
  log = logging.warning if precision.fell_back else logging.info
  log("precision: %s", precision.reason)
  return precision


def input_context(setup):
  """The tf.distribute.InputContext of this process's training input.

  Strategies hand theirs to the input_fn themselves (Estimator passes one per
  worker). Horovod ranks and BytePS workers have none, so without this every
  rank would read every record, and with the same --tf_random_seed in the
  same order: N copies of one batch instead of a global batch. Each rank is
  one input pipeline of one replica; the input_fns share out files, or
  records of fewer files than pipelines, by it.

  Returns:
    An InputContext under horovod or byteps, else None.
  """
  if setup.plan.name not in PROCESS_ENGINES:
    return None
  group = distribution.process_group()
  return tf.distribute.InputContext(num_input_pipelines=group.size,
                                    input_pipeline_id=group.rank,
                                    num_replicas_in_sync=group.size)
