"""Estimator set-up shared by run_pretraining.py and run_classifier.py.

One place turns the distribution / precision / logging flags into a
RunConfig with its strategy, checks the output directory and the initial
checkpoint before long work starts (falling back to the newest readable
checkpoint of the output directory), and runs training with the hooks of
training_hooks.py (tf.estimator.train_and_evaluate when TF_CONFIG names a
cluster), turning a stop on a signal and each known failure into one line.
"""

import atexit
import collections
import os
import shutil
import tempfile
import uuid

from absl import flags
from absl import logging
import tensorflow as tf2
import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.util import _pywrap_util_port

import atomic_io
import checkpoint_formats
import checkpoints
import distribution
import errors
import horovod_engine
import input_pipeline
import modeling
import optimization
import preemption
import throughput
import training_hooks
from errors import UserError

MIN_FREE_DISK_BYTES = 50 * 1024 * 1024


def allow_xla_on_cpu():
  """Lets --use_xla's global_jit_level cluster CPU ops too.

  TensorFlow auto-clusters only GPU ops for XLA unless TF_XLA_FLAGS has
  --tf_xla_cpu_global_jit; without it --use_xla would silently do nothing on
  a CPU. The flag only widens what a session with global_jit_level ON_1
  compiles, so it changes nothing for runs without --use_xla. TensorFlow reads
  TF_XLA_FLAGS once, early (absl's app.run already triggers it), hence this
  runs from define_flags, before app.run.
  """
  current = os.environ.get("TF_XLA_FLAGS", "")
  if "--tf_xla_cpu_global_jit" not in current.split():
    os.environ["TF_XLA_FLAGS"] = (current + " --tf_xla_cpu_global_jit").strip()


def define_flags():
  """Distribution, precision, optimizer, logging and profiling flags.

  Called by the training programs only, before `app.run`; also enables XLA
  on CPUs (see allow_xla_on_cpu), which must happen that early.
  """
  allow_xla_on_cpu()
  distribution.define_flags()
  flags.DEFINE_bool("use_fp16", False,
                    "Mixed precision: enable_mixed_precision_graph_rewrite "
                    "with dynamic loss scaling (GPU kernels only).")
  flags.DEFINE_bool("use_bf16", False,
                    "Mixed precision: bfloat16 compute, float32 variables, "
                    "no loss scaling, through TensorFlow's oneDNN bfloat16 "
                    "graph rewrite (CPUs; fast with avx512_bf16 or amx).")
  flags.DEFINE_integer("init_loss_scale", 2**15,
                       "--use_fp16: initial dynamic loss scale.")
  flags.DEFINE_integer("loss_scale_growth_steps", 2000,
                       "--use_fp16: finite steps before the scale doubles.")
  flags.DEFINE_integer("log_every_n_steps", 100,
                       "Steps between throughput/loss log lines.")
  flags.DEFINE_integer("throughput_warmup_steps", 10,
                       "Leading steps left out of the steady-state "
                       "examples/sec figure.")
  flags.DEFINE_integer("tf_random_seed", None,
                       "Graph-level seed; also makes the input order "
                       "deterministic (no sloppy interleave, no shuffle).")
  flags.DEFINE_bool("use_xla", False, "XLA JIT compilation (level ON_1).")
  flags.DEFINE_enum("optimizer", "adamw", optimization.OPTIMIZERS,
                    "adamw: upstream's Adam with decoupled weight decay; "
                    "lamb: LAMB (layer-wise trust ratio, arXiv:1904.00962).")
  flags.DEFINE_bool("lamb_bias_correction", False,
                    "--optimizer=lamb: Adam's bias correction of the moments "
                    "(off in the LAMB paper's BERT recipe).")
  flags.DEFINE_bool("stop_on_nonfinite_loss", True,
                    "Without --use_fp16, stop at the first step whose loss "
                    "is NaN or inf (naming the step) instead of training on.")
  flags.DEFINE_bool("skip_corrupt_records", False,
                    "Leave out input records that fail their CRC check "
                    "(reads every input file once before training; the "
                    "count is logged and in throughput_summary.json) instead "
                    "of stopping at the first one.")
  flags.DEFINE_string("profile_steps", None,
                      "A,B: write a TensorFlow profiler trace of steps A..B "
                      "(counted in this run) to output_dir/plugins/profile "
                      "for TensorBoard's profile tab.")


# The values `prepare` needs: the flags of define_flags (the distribution
# ones under the names distribution.plan_from_flags reads) plus the
# program's output directory and global training batch.
TrainingOptions = collections.namedtuple(
    "TrainingOptions",
    ["output_dir", "global_batch_size", "distribution_strategy", "multi_gpu",
     "num_gpus", "cpu_replicas", "all_reduce_alg",
     "collective_timeout_seconds", "use_fp16", "use_bf16", "init_loss_scale",
     "loss_scale_growth_steps", "optimizer", "lamb_bias_correction",
     "save_checkpoints_steps", "keep_checkpoint_max", "log_every_n_steps",
     "throughput_warmup_steps", "tf_random_seed", "use_xla",
     "stop_on_nonfinite_loss", "profile_steps"])


def options_from_flags(values, output_dir, global_batch_size):
  """TrainingOptions from the parsed flags of define_flags.

  Args:
    values: the parsed absl FLAGS (or any object with those attributes).
    output_dir: the program's --output_dir.
    global_batch_size: the program's training batch over all replicas.
  """
  return TrainingOptions(
      output_dir=output_dir, global_batch_size=global_batch_size,
      **{name: getattr(values, name)
         for name in TrainingOptions._fields[2:]})


# What the programs and train() use of a prepared run. `extra_info` holds the
# facts written into throughput_summary.json (strategy, precision, records
# skipped, ...); nothing reads decisions back from it.
Setup = collections.namedtuple(
    "Setup", ["plan", "strategy", "run_config", "optimizer_options",
              "is_chief", "output_dir", "global_batch_size", "profile_steps",
              "log_every", "warmup_steps", "use_fp16", "precision",
              "extra_info", "stop_on_nonfinite_loss"])


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


def _parse_profile_steps(value):
  if not value:
    return None
  try:
    first, last = [int(x) for x in value.split(",")]
  except ValueError:
    raise UserError("--profile_steps must be two step numbers A,B, got %r" %
                    value)
  if not 1 <= first <= last:
    raise UserError("--profile_steps needs 1 <= A <= B, got %r" % value)
  return first, last


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

  TensorFlow decides once, when it is imported: on by default on CPUs with
  AVX512 (or if TF_ENABLE_ONEDNN_OPTS=1), off otherwise. Its oneDNN bfloat16
  graph rewrite does nothing while they are off.
  """
  return bool(_pywrap_util_port.IsMklEnabled())


def resolve_precision(use_fp16, use_bf16, num_gpus, onednn_on, flags_of_cpu):
  """The compute precision a run gets, and one line saying why.

  Args:
    use_fp16: --use_fp16.
    use_bf16: --use_bf16.
    num_gpus: GPUs visible to TensorFlow.
    onednn_on: onednn_enabled().
    flags_of_cpu: cpu_flags().

  Returns:
    (precision, description): precision is "float32", "mixed_float16" or
    "mixed_bfloat16" (variables are float32 in every case).

  Raises:
    UserError: both flags, or --use_bf16 where TensorFlow cannot run it.
  """
  if use_fp16 and use_bf16:
    raise UserError("--use_bf16 and --use_fp16 are mutually exclusive: pass "
                    "one of them")
  if use_fp16:
    if not num_gpus:
      return "float32", ("float32: --use_fp16's graph rewrite only changes GPU "
                         "kernels and no GPU is visible (dynamic loss scaling "
                         "still runs)")
    return "mixed_float16", ("mixed_float16: float16 GPU kernels, float32 "
                             "variables, dynamic loss scaling")
  if not use_bf16:
    return "float32", "float32"
  if num_gpus:
    raise UserError(
        "--use_bf16 is not available on GPUs: TensorFlow 2.15's graph-mode "
        "mixed-precision rewrite for GPUs is float16 only (its bfloat16 "
        "rewrite is oneDNN's, for CPUs); use --use_fp16 there")
  if not onednn_on:
    return "float32", (
        "float32: --use_bf16 needs TensorFlow's oneDNN CPU kernels, which "
        "are off in this process (TensorFlow turns them on at import on CPUs "
        "with AVX512, or with TF_ENABLE_ONEDNN_OPTS=1); set "
        "TF_ENABLE_ONEDNN_OPTS=1 before starting the program to compute in "
        "bfloat16 anyway (emulated without bfloat16 instructions, slower "
        "than float32)")
  native = sorted(set(BF16_CPU_FLAGS) & set(flags_of_cpu))
  return "mixed_bfloat16", (
      "mixed_bfloat16: oneDNN bfloat16 graph rewrite, float32 variables, no "
      "loss scaling; %s" % (
          "CPU bfloat16 instructions: " + ", ".join(native) if native else
          "this CPU has no bfloat16 instructions (none of %s), so bfloat16 "
          "is emulated and slower than float32" % ", ".join(BF16_CPU_FLAGS)))


def session_config(plan, use_xla, precision="float32"):
  """ConfigProto for the Estimator's sessions."""
  config = tf.ConfigProto(allow_soft_placement=True)
  if precision == "mixed_bfloat16":
    # Grappler casts the inputs of allow-listed ops (MatMul, BatchMatMul,
    # ...) to bfloat16 and their outputs back as needed; variables, the
    # optimizer's update and the loss stay float32.
    config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = (
        rewriter_config_pb2.RewriterConfig.ON)
  if len(plan.devices) > 1 and plan.devices[0].startswith("/cpu"):
    # Graph-mode sessions only see logical CPUs that the ConfigProto asks for.
    config.device_count["CPU"] = len(plan.devices)
  if plan.name == "horovod" and plan.devices[0].startswith("/gpu"):
    config.gpu_options.visible_device_list = horovod_engine.visible_gpu_list()
  if use_xla:
    config.graph_options.optimizer_options.global_jit_level = (
        tf.OptimizerOptions.ON_1)
  return config


def prepare(options):
  """Validates the options and builds the Estimator's RunConfig.

  Args:
    options: TrainingOptions.

  Returns:
    A Setup.

  Raises:
    UserError: options that contradict each other or the machine.
  """
  num_gpus = len(tf2.config.list_physical_devices("GPU"))
  precision, description = resolve_precision(
      options.use_fp16, options.use_bf16, num_gpus,
      options.use_bf16 and onednn_enabled(), cpu_flags())
  if (options.use_fp16 or options.use_bf16) and precision == "float32":
    logging.warning("precision: %s", description)
  else:
    logging.info("precision: %s", description)
  plan = distribution.plan_from_flags(options, num_gpus)
  distribution.check_global_batch(plan, options.global_batch_size)
  logging.info(distribution.describe(plan, options.global_batch_size))
  profile_steps = _parse_profile_steps(options.profile_steps)
  check_output_dir(options.output_dir)
  checkpoints.fall_back_to_readable(options.output_dir)
  model_dir = options.output_dir
  if plan.name == "horovod":
    strategy = None
    is_chief = horovod_engine.init(plan, options.use_fp16)
    if not is_chief:
      # Only rank 0 writes checkpoints and summaries; the others start from
      # its weights through the broadcast hook.
      model_dir = horovod_engine.scratch_model_dir(options.output_dir)
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
      session_config=session_config(plan, options.use_xla, precision),
      # MonitoredSession treats a lost peer as recoverable and re-creates the
      # session, which would wait for the dead worker for 2 hours by default.
      session_creation_timeout_secs=max(options.collective_timeout_seconds,
                                        60))
  if plan.cluster:
    is_chief = distribution.cluster_task()[1]
  optimizer_options = {
      "use_fp16": options.use_fp16,
      "init_loss_scale": options.init_loss_scale,
      "loss_scale_growth_steps": options.loss_scale_growth_steps,
      "optimizer_name": options.optimizer,
      "lamb_bias_correction": options.lamb_bias_correction,
  }
  if options.lamb_bias_correction and options.optimizer != "lamb":
    raise UserError("--lamb_bias_correction needs --optimizer=lamb; upstream's "
                    "AdamW has no bias correction")
  extra_info = {"strategy": plan.name, "precision": precision,
                "use_fp16": options.use_fp16, "use_bf16": options.use_bf16,
                "use_xla": options.use_xla,
                "devices": ",".join(plan.devices),
                "num_workers": plan.num_workers}
  return Setup(plan=plan, strategy=strategy, run_config=run_config,
               optimizer_options=optimizer_options, is_chief=is_chief,
               output_dir=options.output_dir,
               global_batch_size=options.global_batch_size,
               profile_steps=profile_steps,
               log_every=options.log_every_n_steps,
               warmup_steps=options.throughput_warmup_steps,
               use_fp16=options.use_fp16, precision=precision,
               extra_info=extra_info,
               stop_on_nonfinite_loss=(options.stop_on_nonfinite_loss and
                                       not options.use_fp16))


def input_files_for_this_worker(setup, input_files):
  """Horovod ranks each read their own files; strategies shard internally."""
  if setup.plan.name == "horovod":
    return horovod_engine.shard_files(input_files)
  return input_files


def record_shard_for_this_worker():
  """(num_shards, index) of the records this process reads from one file.

  Horovod ranks have no tf.distribute input_context, so without this every
  rank would read the whole file, and with the same --tf_random_seed in the
  same order: N copies of one batch instead of a global batch. Strategies
  shard through input_context and get None.
  """
  group = distribution.process_group()
  if group:
    return group.size, group.rank
  return None


def skip_corrupt_records(setup, input_files):
  """The input files without their corrupt records (--skip_corrupt_records).

  Cleaned copies of the affected files live in a temporary directory removed
  at exit; the count goes to the log and the throughput summary.
  """
  scratch = tempfile.mkdtemp(prefix="bert-clean-records-")
  atexit.register(shutil.rmtree, scratch, True)
  files, skipped = input_pipeline.without_corrupt_records(input_files,
                                                          scratch)
  setup.extra_info["corrupt_records_skipped"] = len(skipped)
  if skipped:
    logging.warning("--skip_corrupt_records: skipped %d corrupt record(s): %s",
                    len(skipped), "; ".join(
                        "%s record %d (byte %d)" % s for s in skipped))
  else:
    logging.info("--skip_corrupt_records: no corrupt record in %d file(s)",
                 len(input_files))
  return files


def resolve_checkpoint(path):
  """A checkpoint prefix from a prefix or a directory.

  A directory may be a training output_dir, a Google model directory
  (bert_model.ckpt) or a Hugging Face BERT directory (config.json +
  model.safetensors), which is converted to a checkpoint first.

  Raises:
    UserError: nothing checkpoint-like is there.
  """
  if checkpoint_formats.is_hf_dir(path):
    return checkpoint_formats.converted_hf_checkpoint(path)
  return checkpoints.resolve(path, "init_checkpoint")


def check_init_checkpoint(init_checkpoint, build_variables_fn):
  """Compares the checkpoint's shapes with the model's, before training.

  Args:
    init_checkpoint: checkpoint prefix or directory.
    build_variables_fn: builds the model's variables in the default graph.

  Raises:
    UserError: a variable both have differs in shape.
  """
  path = resolve_checkpoint(init_checkpoint)
  # A Hugging Face directory's converted checkpoint is a private file in a
  # temporary directory: the messages name the directory the user gave.
  shown = (init_checkpoint if checkpoint_formats.is_hf_dir(init_checkpoint)
           else path)
  with tf.Graph().as_default():
    build_variables_fn()
    model_shapes = {v.op.name: v.shape.as_list()
                    for v in tf.trainable_variables()}
  ckpt_shapes = dict(tf.train.list_variables(path))
  mismatched = [(name, shape, ckpt_shapes[name])
                for name, shape in sorted(model_shapes.items())
                if name in ckpt_shapes and list(ckpt_shapes[name]) != shape]
  if mismatched:
    name, model_shape, ckpt_shape = mismatched[0]
    raise UserError(
        "--init_checkpoint %s does not fit --bert_config_file: %d variable(s) "
        "differ in shape, first %s: %s in the checkpoint but %s in the model"
        % (shown, len(mismatched), name, ckpt_shape, model_shape))
  loaded = [n for n in model_shapes if n in ckpt_shapes]
  fresh = [n for n in model_shapes if n not in ckpt_shapes]
  logging.info("--init_checkpoint %s: %d variable(s) loaded, %d initialised "
               "fresh%s", shown, len(loaded), len(fresh),
               (": " + ", ".join(fresh[:10])) if fresh else "")


def init_from_checkpoint(init_checkpoint):
  """Inside model_fn: initialise matching trainable variables from it."""
  path = resolve_checkpoint(init_checkpoint)
  tvars = tf.trainable_variables()
  assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, path)
  tf.train.init_from_checkpoint(path, assignment_map)


def make_estimator(model_fn, setup, params=None):
  """The Estimator of a training program, with the loss Estimator watches.

  Estimator always stops on a NaN loss through its own NanTensorHook. Where a
  non-finite loss must not stop the run (fp16 overflow steps, or
  --nostop_on_nonfinite_loss), it is shown a finite stand-in; NonFiniteLossHook
  reports the real value.
  """
  if setup.stop_on_nonfinite_loss:
    wrapped = model_fn
  else:
    def wrapped(features, labels, mode, params):
      spec = model_fn(features, labels, mode, params)
      if mode != tf.estimator.ModeKeys.TRAIN:
        return spec
      finite = tf.where(tf.is_finite(spec.loss), spec.loss,
                        tf.zeros_like(spec.loss))
      return spec._replace(loss=finite)
  return tf.estimator.Estimator(model_fn=wrapped, config=setup.run_config,
                                params=params)


def task_name(plan):
  """`worker-0`, `chief-0`, `rank-1`, or `local` for naming per-task files."""
  group = distribution.process_group()
  if group:
    return "rank-%d" % group.rank
  if plan.cluster:
    return distribution.cluster_task()[0]
  return "local"


def train(estimator, setup, train_input_fn, eval_input_fn, max_steps,
          eval_steps, input_files=None):
  """Trains to `max_steps` global steps with throughput logging.

  SIGTERM/SIGINT stop training after the step in flight (preemption.py).

  Args:
    estimator: from make_estimator.
    setup: from prepare.
    train_input_fn: training input.
    eval_input_fn: evaluation input (train_and_evaluate under TF_CONFIG).
    max_steps: the global step to train to.
    eval_steps: evaluation steps under TF_CONFIG.
    input_files: the TFRecord files train_input_fn reads, to name the one
      holding a corrupt record.

  Returns:
    The throughput summary dict (see throughput.ThroughputHook).

  Raises:
    errors.TrainingStopped: a stop signal ended training (checkpoint written).
    errors.TrainingFailed: training cannot go on (one line says why).
  """
  hook = throughput.ThroughputHook(
      setup.output_dir, setup.global_batch_size, setup.plan.num_replicas,
      max_steps, log_every=setup.log_every, warmup_steps=setup.warmup_steps,
      is_chief=setup.is_chief, extra_info=setup.extra_info)
  stop_hook = training_hooks.StopOnSignalHook(
      multi_process=setup.plan.num_workers > 1)
  hooks = [hook, training_hooks.WeightsFingerprintHook(
      setup.output_dir, task_name(setup.plan), setup.strategy), stop_hook]
  hooks.append(training_hooks.NonFiniteLossHook(
      stop=setup.stop_on_nonfinite_loss,
      use_fp16=setup.use_fp16))
  if setup.plan.num_workers > 1 and setup.plan.collective_timeout_seconds:
    hooks.append(training_hooks.StallWatchdogHook(
        setup.plan.collective_timeout_seconds))
  if setup.profile_steps:
    hooks.append(training_hooks.ProfilerHook(setup.output_dir,
                                             *setup.profile_steps))
  listeners = [throughput.CheckpointMarker(hook)]
  if setup.plan.name == "horovod":
    hooks.append(horovod_engine.broadcast_hook())
    if not setup.is_chief:
      # Saving listeners need a CheckpointSaverHook; only rank 0 has one.
      listeners = []
  try:
    with preemption.catching_stop_signals():
      if setup.plan.cluster:
        tf.estimator.train_and_evaluate(
            estimator,
            tf.estimator.TrainSpec(train_input_fn, max_steps=max_steps,
                                   hooks=hooks, saving_listeners=listeners),
            tf.estimator.EvalSpec(eval_input_fn, steps=eval_steps,
                                  start_delay_secs=0, throttle_secs=60))
      else:
        estimator.train(train_input_fn, max_steps=max_steps, hooks=hooks,
                        saving_listeners=listeners)
  except tf.train.NanLossDuringTrainingError:
    raise errors.TrainingFailed(
        "the training loss became NaN; stopping without checkpointing it. "
        "Lower --learning_rate or check the data") from None
  except tf.errors.OpError as e:
    raise _training_failure(e, setup, input_files) from None
  if stop_hook.stopped_at_step is not None or preemption.requested_signal():
    if setup.plan.name == "horovod":
      horovod_engine.barrier()
    raise errors.TrainingStopped(_stop_message(setup, stop_hook.final_step))
  return getattr(hook, "summary", None)


def _training_failure(error, setup, input_files):
  """The TrainingFailed for an OpError that ended training, or `error`."""
  saving = checkpoints.save_failure_message(error, setup.run_config.model_dir)
  if saving:
    return errors.TrainingFailed(saving)
  reason = errors.op_error_reason(error.message)
  if isinstance(error, (tf.errors.DeadlineExceededError,
                        tf.errors.UnavailableError)):
    return errors.TrainingFailed(
        "lost contact with another worker (%s: %s); rerun every worker with "
        "the same command to resume from the last checkpoint" %
        (type(error).__name__, reason))
  if setup.plan.name == "horovod" and _lost_a_horovod_rank(error.message):
    return errors.TrainingFailed(
        "another horovod rank failed or died, and horovod shut down; rerun "
        "the same command to resume every rank from the last checkpoint")
  if isinstance(error, tf.errors.DataLossError):
    return errors.TrainingFailed(input_pipeline.corrupt_input_message(
        input_files or [], reason))
  return error


def _lost_a_horovod_rank(message):
  """Whether an OpError of a horovod run says another rank is gone.

  Depending on which collective was running, a dead rank shows as horovod
  shutting down or as gloo's connection to it being reset.
  """
  return ("Horovod has been shut down" in message or
          ("gloo/transport" in message and
           ("Connection reset by peer" in message or
            "Connection closed by peer" in message)))


def _stop_message(setup, step):
  """The line of a process that stopped on a signal at global step `step`
  (None: no training step ran, e.g. the run was already complete)."""
  latest = tf.train.latest_checkpoint(setup.run_config.model_dir)
  if step is None:
    step = int(tf.train.load_variable(latest, "global_step")) if latest else 0
  checkpoint = "model.ckpt-%d" % step
  if setup.is_chief and latest:
    checkpoint = os.path.basename(latest)
  return preemption.stop_message(step, checkpoint, setup.is_chief)


def write_eval_results(output_dir, result, log=True):
  """Writes eval_results.txt as upstream does, and logs the metrics unless
  `log` is False (a run summary that prints them follows)."""
  path = os.path.join(output_dir, "eval_results.txt")
  if log:
    logging.info("***** Eval results *****")
  with atomic_io.atomic_open(path, "w") as writer:
    for key in sorted(result.keys()):
      if log:
        logging.info("  %s = %s", key, str(result[key]))
      writer.write("%s = %s\n" % (key, str(result[key])))
  return path


def print_run_summary(output_dir, throughput_summary, eval_result):
  """The numbers a user came for, on stdout at the end of a run."""
  lines = ["***** Run summary: %s *****" % output_dir]
  if throughput_summary:
    eps = throughput_summary.get("examples_per_sec")
    lines.append(
        "throughput: %s (%s per replica)%s, %s x%d, steps %d..%d; excluded "
        "%d warm-up step(s) and %d with a checkpoint save" % (
            "%.2f examples/sec" % eps if eps else "n/a (too few steps)",
            "%.2f" % (eps / throughput_summary["num_replicas"]) if eps
            else "n/a", throughput.describe_counts(throughput_summary),
            throughput_summary.get("strategy"),
            throughput_summary["num_replicas"],
            throughput_summary["first_step"],
            throughput_summary["final_step"],
            throughput_summary["steps_excluded_warmup"],
            throughput_summary["steps_excluded_checkpoint"]))
  if throughput_summary and "corrupt_records_skipped" in throughput_summary:
    lines.append("corrupt input records skipped: %d" %
                 throughput_summary["corrupt_records_skipped"])
  for key in sorted(eval_result or {}):
    lines.append("eval %s = %s" % (key, eval_result[key]))
  print("\n".join(lines), flush=True)
