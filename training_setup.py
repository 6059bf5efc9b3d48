"""Estimator set-up shared by run_pretraining.py and run_classifier.py.

One place turns the distribution / precision / logging flags into a
RunConfig with its strategy, checks the output directory and the initial
checkpoint before long work starts, and runs training with the throughput
hook (tf.estimator.train_and_evaluate when TF_CONFIG names a cluster).
"""

import collections
import hashlib
import json
import os
import shutil
import sys
import threading
import time
import uuid

from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf2
import tensorflow.compat.v1 as tf

import atomic_io
import checkpoint_formats
import distribution
import errors
import horovod_engine
import modeling
import optimization
import throughput
from errors import UserError

MIN_FREE_DISK_BYTES = 50 * 1024 * 1024


def allow_xla_on_cpu():
  """Lets --use_xla's global_jit_level cluster CPU ops too.

  TensorFlow auto-clusters only GPU ops for XLA unless TF_XLA_FLAGS has
  --tf_xla_cpu_global_jit; without it --use_xla would silently do nothing on
  a CPU. The flag only widens what a session with global_jit_level ON_1
  compiles, so it changes nothing for runs without --use_xla. TensorFlow reads
  TF_XLA_FLAGS once, early (absl's app.run already triggers it), hence this
  runs when the module is imported.
  """
  current = os.environ.get("TF_XLA_FLAGS", "")
  if "--tf_xla_cpu_global_jit" not in current.split():
    os.environ["TF_XLA_FLAGS"] = (current + " --tf_xla_cpu_global_jit").strip()


allow_xla_on_cpu()


def define_flags():
  """Distribution, precision, logging and profiling flags."""
  distribution.define_flags()
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
  flags.DEFINE_string("profile_steps", None,
                      "A,B: write a TensorFlow profiler trace of steps A..B "
                      "(counted in this run) to output_dir/plugins/profile "
                      "for TensorBoard's profile tab.")


Setup = collections.namedtuple(
    "Setup", ["plan", "strategy", "run_config", "optimizer_options",
              "is_chief", "output_dir", "global_batch_size", "profile_steps",
              "log_every", "warmup_steps", "extra_info",
              "stop_on_nonfinite_loss"])


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
  if "://" not in output_dir:
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


def session_config(plan, use_xla):
  """ConfigProto for the Estimator's sessions."""
  config = tf.ConfigProto(allow_soft_placement=True)
  if len(plan.devices) > 1 and plan.devices[0].startswith("/cpu"):
    # Graph-mode sessions only see logical CPUs that the ConfigProto asks for.
    config.device_count["CPU"] = len(plan.devices)
  if plan.name == "horovod" and plan.devices[0].startswith("/gpu"):
    config.gpu_options.visible_device_list = horovod_engine.visible_gpu_list()
  if use_xla:
    config.graph_options.optimizer_options.global_jit_level = (
        tf.OptimizerOptions.ON_1)
  return config


def prepare(values, output_dir, global_batch_size):
  """Validates the distribution flags and builds the Estimator's RunConfig.

  Args:
    values: parsed FLAGS.
    output_dir: model_dir of the Estimator.
    global_batch_size: training batch over all replicas.

  Returns:
    A Setup.
  """
  num_gpus = len(tf2.config.list_physical_devices("GPU"))
  plan = distribution.plan_from_flags(values, num_gpus)
  distribution.check_global_batch(plan, global_batch_size)
  logging.info(distribution.describe(plan, global_batch_size))
  profile_steps = _parse_profile_steps(values.profile_steps)
  check_output_dir(output_dir)
  if values.use_fp16 and num_gpus == 0:
    logging.warning(
        "--use_fp16: no GPU is visible, and the mixed-precision graph rewrite "
        "only changes GPU kernels, so this run computes in float32 (dynamic "
        "loss scaling still runs).")
  model_dir = output_dir
  if plan.name == "horovod":
    strategy = None
    is_chief = horovod_engine.init(plan, values.use_fp16)
    if not is_chief:
      # Only rank 0 writes checkpoints and summaries; the others start from
      # its weights through the broadcast hook.
      model_dir = horovod_engine.scratch_model_dir(output_dir)
  else:
    distribution.split_cpu(len(plan.devices)
                           if plan.devices[0].startswith("/cpu") else 0)
    strategy = distribution.build_strategy(plan)
    is_chief = True
  run_config = tf.estimator.RunConfig(
      model_dir=model_dir,
      save_checkpoints_steps=values.save_checkpoints_steps
      if is_chief else None,
      save_checkpoints_secs=None,
      keep_checkpoint_max=values.keep_checkpoint_max,
      log_step_count_steps=values.log_every_n_steps,
      save_summary_steps=values.log_every_n_steps if is_chief else None,
      train_distribute=strategy,
      tf_random_seed=values.tf_random_seed,
      session_config=session_config(plan, values.use_xla),
      # MonitoredSession treats a lost peer as recoverable and re-creates the
      # session, which would wait for the dead worker for 2 hours by default.
      session_creation_timeout_secs=max(values.collective_timeout_seconds,
                                        60))
  if plan.cluster:
    is_chief = distribution.cluster_task()[1]
  optimizer_options = {
      "use_fp16": values.use_fp16,
      "init_loss_scale": values.init_loss_scale,
      "loss_scale_growth_steps": values.loss_scale_growth_steps,
      "optimizer_name": values.optimizer,
      "lamb_bias_correction": values.lamb_bias_correction,
  }
  if values.lamb_bias_correction and values.optimizer != "lamb":
    raise UserError("--lamb_bias_correction needs --optimizer=lamb; upstream's "
                    "AdamW has no bias correction")
  extra_info = {"strategy": plan.name, "use_fp16": values.use_fp16,
                "use_xla": values.use_xla,
                "devices": ",".join(plan.devices),
                "num_workers": plan.num_workers}
  return Setup(plan=plan, strategy=strategy, run_config=run_config,
               optimizer_options=optimizer_options, is_chief=is_chief,
               output_dir=output_dir, global_batch_size=global_batch_size,
               profile_steps=profile_steps,
               log_every=values.log_every_n_steps,
               warmup_steps=values.throughput_warmup_steps,
               extra_info=extra_info,
               stop_on_nonfinite_loss=(values.stop_on_nonfinite_loss and
                                       not values.use_fp16))


def input_files_for_this_worker(setup, input_files):
  """Horovod ranks each read their own files; strategies shard internally."""
  if setup.plan.name == "horovod":
    return horovod_engine.shard_files(input_files)
  return input_files


def record_shard_for_this_worker(setup):
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
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    google_style = os.path.join(path, "bert_model.ckpt")
    if not latest and tf.io.gfile.exists(google_style + ".index"):
      # Google's released zips have bert_model.ckpt but no `checkpoint` file.
      latest = google_style
    if not latest:
      raise UserError("--init_checkpoint %s is a directory with no "
                      "checkpoint in it" % path)
    return latest
  if not tf.io.gfile.exists(path + ".index"):
    raise UserError("--init_checkpoint %s: no such checkpoint (expected %s)"
                    % (path, path + ".index"))
  return path


def check_init_checkpoint(init_checkpoint, build_variables_fn):
  """Compares the checkpoint's shapes with the model's, before training.

  Args:
    init_checkpoint: checkpoint prefix or directory.
    build_variables_fn: builds the model's variables in the default graph.

  Raises:
    UserError: a variable both have differs in shape.
  """
  path = resolve_checkpoint(init_checkpoint)
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
        "differ in shape, e.g. %s is %s in the checkpoint but %s in the model"
        % (path, len(mismatched), name, ckpt_shape, model_shape))
  loaded = [n for n in model_shapes if n in ckpt_shapes]
  fresh = [n for n in model_shapes if n not in ckpt_shapes]
  logging.info("--init_checkpoint %s: %d variable(s) loaded, %d initialised "
               "fresh%s", path, len(loaded), len(fresh),
               (": " + ", ".join(fresh[:10])) if fresh else "")


def init_from_checkpoint(init_checkpoint):
  """Inside model_fn: initialise matching trainable variables from it."""
  path = resolve_checkpoint(init_checkpoint)
  tvars = tf.trainable_variables()
  assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, path)
  tf.train.init_from_checkpoint(path, assignment_map)


class ProfilerHook(tf.train.SessionRunHook):
  """Traces steps first..last of this run with the TensorFlow profiler."""

  def __init__(self, output_dir, first, last):
    self._logdir = output_dir
    self._first, self._last = first, last
    self._step = 0

  def before_run(self, run_context):
    self._step += 1
    if self._step == self._first:
      tf2.profiler.experimental.start(self._logdir)
      logging.info("Profiler: tracing steps %d..%d", self._first, self._last)

  def after_run(self, run_context, run_values):
    if self._step == self._last:
      tf2.profiler.experimental.stop()
      logging.info("Profiler: trace written under %s/plugins/profile",
                   self._logdir)

  def end(self, session):
    if self._first <= self._step < self._last:
      tf2.profiler.experimental.stop()


class NonFiniteLossHook(tf.train.SessionRunHook):
  """Watches the training loss for NaN or inf, naming the step.

  stop=True (the default without --use_fp16): raise TrainingFailed at once,
  before a checkpoint of the diverged weights is written; otherwise a diverged
  run trains on NaN weights for hours. stop=False (--use_fp16, where the loss
  scale skips overflowing steps, or --nostop_on_nonfinite_loss): log a warning.
  """

  def __init__(self, stop, use_fp16):
    self._stop = stop
    self._use_fp16 = use_fp16

  def begin(self):
    shares = tf.get_collection(throughput.LOSS_SHARES)
    self._fetches = None
    if shares:
      self._fetches = {"loss": tf.add_n(shares),
                       "step": tf.train.get_global_step()}

  def before_run(self, run_context):
    del run_context
    return tf.train.SessionRunArgs(self._fetches) if self._fetches else None

  def after_run(self, run_context, run_values):
    del run_context
    if not self._fetches:
      return
    loss, step = run_values.results["loss"], run_values.results["step"]
    if np.isfinite(loss):
      return
    if self._stop:
      raise errors.TrainingFailed(
          "the training loss is %s at step %d; stopping (no checkpoint of "
          "this step is written). Lower --learning_rate, check the data, or "
          "pass --nostop_on_nonfinite_loss to train on regardless"
          % (loss, step))
    logging.warning("Training loss is %s at step %d%s", loss, step,
                    ": the update is skipped and the loss scale lowered"
                    if self._use_fp16 else "")


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


class StallWatchdogHook(tf.train.SessionRunHook):
  """Ends the process when training stops making progress (a peer died).

  With several worker processes a dead peer leaves the others blocked inside
  a collective, and MonitoredSession even re-creates the session on a lost
  connection and waits again. Once the first step has run, a step that does
  not finish within `timeout_seconds` ends this process with one error line;
  rerunning every worker resumes from the last checkpoint.
  """

  def __init__(self, timeout_seconds):
    self._timeout = timeout_seconds
    self._last_step_time = None
    self._stop = threading.Event()
    self._thread = None

  def after_run(self, run_context, run_values):
    del run_context, run_values
    self._last_step_time = time.time()
    if self._thread is None:
      self._thread = threading.Thread(target=self._watch, daemon=True)
      self._thread.start()

  def _watch(self):
    while not self._stop.wait(1.0):
      stalled = time.time() - self._last_step_time
      if stalled > self._timeout:
        print("error: no training step finished for %d s (--collective_"
              "timeout_seconds=%d): another worker probably died. Rerun every "
              "worker with the same command to resume from the last "
              "checkpoint" % (stalled, self._timeout), file=sys.stderr,
              flush=True)
        os._exit(errors.EXIT_TRAINING_FAILED)  # pylint: disable=protected-access

  def end(self, session):
    del session
    self._stop.set()


class WeightsFingerprintHook(tf.train.SessionRunHook):
  """At the end of training, fingerprints this process's weights.

  Writes `final_weights.<task>.json` in output_dir: global_step, a sha256 of
  every trainable variable's bytes, and whether all local replicas hold
  identical copies. Comparing the files of several workers (or horovod ranks)
  proves they ended with the same weights.
  """

  def __init__(self, output_dir, task_name, strategy):
    self._path = os.path.join(output_dir, "final_weights.%s.json" % task_name)
    self._strategy = strategy

  def begin(self):
    self._step = tf.train.get_global_step()
    self._vars = sorted(tf.trainable_variables(), key=lambda v: v.name)

  def _copies(self, var):
    if self._strategy is None:
      return [var]
    return list(self._strategy.experimental_local_results(var))

  def end(self, session):
    digest = hashlib.sha256()
    replicas_identical = True
    for var in self._vars:
      values = session.run(self._copies(var))
      digest.update(var.name.encode("utf-8"))
      digest.update(values[0].tobytes())
      replicas_identical &= all(np.array_equal(values[0], v)
                                for v in values[1:])
    record = {"global_step": int(session.run(self._step)),
              "sha256": digest.hexdigest(),
              "num_variables": len(self._vars),
              "local_replicas": len(self._copies(self._vars[0])),
              "replicas_identical": bool(replicas_identical)}
    tf.io.gfile.makedirs(os.path.dirname(self._path))
    with atomic_io.atomic_open(self._path) as f:
      f.write(json.dumps(record, sort_keys=True) + "\n")
    if not replicas_identical:
      logging.error("Replica weights differ at the end of training: the "
                    "all-reduce is broken (%s)", self._path)


def task_name(plan):
  """`worker-0`, `chief-0`, `rank-1`, or `local` for naming per-task files."""
  group = distribution.process_group()
  if group:
    return "rank-%d" % group.rank
  if plan.cluster:
    return distribution.cluster_task()[0]
  return "local"


def train(estimator, setup, train_input_fn, eval_input_fn, max_steps,
          eval_steps):
  """Trains to `max_steps` global steps with throughput logging.

  Returns:
    The throughput summary dict (see throughput.ThroughputHook).
  """
  hook = throughput.ThroughputHook(
      setup.output_dir, setup.global_batch_size, setup.plan.num_replicas,
      max_steps, log_every=setup.log_every, warmup_steps=setup.warmup_steps,
      is_chief=setup.is_chief, extra_info=setup.extra_info)
  hooks = [hook, WeightsFingerprintHook(
      setup.output_dir, task_name(setup.plan),
      setup.strategy)]
  hooks.append(NonFiniteLossHook(stop=setup.stop_on_nonfinite_loss,
                                 use_fp16=setup.extra_info["use_fp16"]))
  if setup.plan.num_workers > 1 and setup.plan.collective_timeout_seconds:
    hooks.append(StallWatchdogHook(setup.plan.collective_timeout_seconds))
  if setup.profile_steps:
    hooks.append(ProfilerHook(setup.output_dir, *setup.profile_steps))
  listeners = [throughput.CheckpointMarker(hook)]
  if setup.plan.name == "horovod":
    hooks.append(horovod_engine.broadcast_hook())
    if not setup.is_chief:
      # Saving listeners need a CheckpointSaverHook; only rank 0 has one.
      listeners = []
  try:
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
        "Lower --learning_rate or check the data")
  except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as e:
    raise errors.TrainingFailed(
        "lost contact with another worker (%s: %s); rerun every worker with "
        "the same command to resume from the last checkpoint" %
        (type(e).__name__, _first_line(e.message)))
  except tf.errors.DataLossError as e:
    raise errors.TrainingFailed(
        "the input data is corrupt (%s); recreate the affected file(s)"
        % _first_line(e.message))
  return getattr(hook, "summary", None)


def _first_line(text):
  return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def write_eval_results(output_dir, result):
  """Logs eval metrics and writes eval_results.txt as upstream does."""
  path = os.path.join(output_dir, "eval_results.txt")
  logging.info("***** Eval results *****")
  with atomic_io.atomic_open(path, "w") as writer:
    for key in sorted(result.keys()):
      logging.info("  %s = %s", key, str(result[key]))
      writer.write("%s = %s\n" % (key, str(result[key])))
  return path


def print_run_summary(output_dir, throughput_summary, eval_result):
  """The numbers a user came for, on stdout at the end of a run."""
  lines = ["***** Run summary: %s *****" % output_dir]
  if throughput_summary:
    eps = throughput_summary.get("examples_per_sec")
    lines.append(
        "throughput: %s (%s per replica), %s x%d, steps %d..%d; excluded %d "
        "warm-up step(s) and %d with a checkpoint save" % (
            "%.2f examples/sec" % eps if eps else "n/a (too few steps)",
            "%.2f" % (eps / throughput_summary["num_replicas"]) if eps
            else "n/a", throughput_summary.get("strategy"),
            throughput_summary["num_replicas"],
            throughput_summary["first_step"],
            throughput_summary["final_step"],
            throughput_summary["steps_excluded_warmup"],
            throughput_summary["steps_excluded_checkpoint"]))
  for key in sorted(eval_result or {}):
    lines.append("eval %s = %s" % (key, eval_result[key]))
  print("\n".join(lines), flush=True)
