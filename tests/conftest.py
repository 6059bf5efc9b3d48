"""Shared test set-up: the repository root on sys.path, TF in graph mode, and
the helpers the test modules share (tiny model config, a pretraining work
directory and command, running a program, reading a checkpoint, the fp16 toy
training step, the ops a fetch depends on, the skip markers of tests that
need horovod, BytePS or Slurm)."""

import collections
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

pytest_plugins = ["slurm_cluster"]  # the `slurm_cluster` fixture
# Imported below before pytest loads it as a plugin: its asserts are
# rewritten only if pytest is told first.
pytest.register_assert_rewrite("slurm_cluster")

# The kernels the programs run, so that in-process references match them.
from bertkit.common import cpu_kernels  # noqa: E402

cpu_kernels.prefer_onednn()

import tensorflow.compat.v1 as tf  # noqa: E402

tf.disable_v2_behavior()

# Programs run in this process split the CPU for --cpu_replicas; TensorFlow
# allows it once, before its runtime starts, so it is split here for them
# all (distribution.split_cpu then keeps it). Sessions see one CPU unless
# their ConfigProto asks for more, as the programs' do.
IN_PROCESS_CPU_REPLICAS = 3
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * IN_PROCESS_CPU_REPLICAS)

from bertkit.engine.loop import engine_setup  # noqa: E402
from bertkit.engine.loop.precision import LossScale  # noqa: E402
from bertkit.perf import synthetic_data  # noqa: E402
import optimization  # noqa: E402
from slurm_cluster import SLURM_MISSING  # noqa: E402


# Tests that need horovod, BytePS or Slurm are skipped where it is missing,
# with the reason below, so that `make test` passes on a fresh machine;
# .ci/run installs all three, so none of them is skipped there. Each such test
# takes one of these markers (the `slurm_cluster` fixture skips by
# SLURM_MISSING).
def _horovod_missing():
  """Why horovod cannot run here, or None where horovod.tensorflow imports."""
  try:
    # pylint: disable-next=unused-import,import-outside-toplevel
    import horovod.tensorflow  # noqa: F401
  except (ImportError, tf.errors.NotFoundError) as e:
    # A horovod built against another TensorFlow fails with NotFoundError.
    return ("horovod is not importable (%s); build it with "
            "scripts/install_horovod.sh" % str(e).splitlines()[0])
  return None


HOROVOD_MISSING = _horovod_missing()
BYTEPS_MISSING = (None if importlib.util.find_spec("byteps") else
                  "byteps is not installed; build it with "
                  "scripts/install_byteps.sh")
requires_horovod = pytest.mark.skipif(HOROVOD_MISSING is not None,
                                      reason=HOROVOD_MISSING or "")
requires_byteps = pytest.mark.skipif(BYTEPS_MISSING is not None,
                                     reason=BYTEPS_MISSING or "")
requires_slurm = pytest.mark.skipif(SLURM_MISSING is not None,
                                    reason=SLURM_MISSING or "")
# Set by .ci/run, which installs all three: there a missing engine is a
# broken install, which must fail the run rather than skip its tests.
ENGINES_REQUIRED = "BERTKIT_TESTS_REQUIRE_ENGINES"


def pytest_configure(config):
  del config  # the hook's signature
  missing = [m for m in (HOROVOD_MISSING, BYTEPS_MISSING, SLURM_MISSING) if m]
  if os.environ.get(ENGINES_REQUIRED) and missing:
    raise pytest.UsageError("%s is set, but %s" % (ENGINES_REQUIRED,
                                                   "; ".join(missing)))


# A 2-layer BERT small enough for end-to-end runs in seconds; no dropout, so
# runs that should be equal are equal.
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0, "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 64, "max_position_embeddings": 64,
    "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
    "vocab_size": 128}


def tiny_bert_config(**overrides):
  """TINY_CONFIG with `overrides` (e.g. vocab_size=...) replacing entries."""
  unknown = set(overrides) - set(TINY_CONFIG)
  if unknown:
    raise KeyError("not BERT config keys: %s" % sorted(unknown))
  return dict(TINY_CONFIG, **overrides)


# Sequence length and masked positions of the pretraining `workdir`'s records.
SEQ, PREDS = 32, 5

# A session with two CPU devices, for two_replica_strategy.
TWO_CPUS = tf.ConfigProto(device_count={"CPU": 2})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """A directory with tiny.json (TINY_CONFIG) and data.tfrecord: 256
  synthetic pretraining records of SEQ tokens and PREDS masked positions."""
  d = tmp_path_factory.mktemp("pretrain")
  with open(d / "tiny.json", "w") as f:
    json.dump(TINY_CONFIG, f)
  synthetic_data.write_synthetic_pretraining_records(
      str(d / "data.tfrecord"), 256, SEQ, PREDS, 120)
  return d


def pretrain_args(workdir, output_dir, *extra, steps=6, batch=8,
                  learning_rate="1e-3"):
  """run_pretraining.py's arguments for a short seeded run on `workdir`."""
  return ["run_pretraining.py",
          "--bert_config_file=%s" % (workdir / "tiny.json"),
          "--input_file=%s" % (workdir / "data.tfrecord"),
          "--output_dir=%s" % output_dir, "--do_train",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--train_batch_size=%d" % batch, "--num_train_steps=%d" % steps,
          "--num_warmup_steps=2", "--learning_rate=%s" % learning_rate,
          "--log_every_n_steps=2", "--throughput_warmup_steps=2",
          "--tf_random_seed=1"] + list(extra)


# `run_program(["-c", RUN_AND_REPORT_TENSORFLOW, PROGRAM, ARGS...])` runs
# `python PROGRAM ARGS` as a user would, then says on its last stdout line
# whether TensorFlow was imported by the time it exited.
RUN_AND_REPORT_TENSORFLOW = """
import runpy, sys
sys.argv = sys.argv[1:]
sys.path.insert(0, '.')
try:
  runpy.run_path(sys.argv[0], run_name='__main__')
finally:
  print('tensorflow imported:', 'tensorflow' in sys.modules)
"""


def run_program(args, cwd=None, env=None, timeout=600):
  """Runs `python <args>` from the repository root as a user would.

  `env` entries are added to this process's environment; None removes one.

  Returns:
    The CompletedProcess, with text stdout/stderr.
  """
  full_env = dict(os.environ)
  full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  for name, value in (env or {}).items():
    if value is None:  # as a user's shell without the variable
      full_env.pop(name, None)
    else:
      full_env[name] = value
  return subprocess.run([sys.executable] + list(args), cwd=cwd or REPO_ROOT,
                        env=full_env, capture_output=True, text=True,
                        timeout=timeout)


def run_ok(args, env=None, timeout=600):
  """run_program, asserting exit code 0 (stderr's tail in the failure)."""
  result = run_program(args, env=env, timeout=timeout)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def write_real_text_records(directory, seq, preds, vocab_size, config):
  """vocab.txt, records.tfrecord and config.json in `directory`, made from
  sample_data/corpus.txt as a user makes them (create_vocab.py, then
  create_pretraining_data.py with --dupe_factor=1).

  Returns:
    The path of records.tfrecord.
  """
  corpus = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
  run_ok(["create_vocab.py", "--input_file=%s" % corpus,
          "--output_file=%s" % (directory / "vocab.txt"),
          "--vocab_size=%d" % vocab_size])
  records = str(directory / "records.tfrecord")
  run_ok(["create_pretraining_data.py", "--input_file=%s" % corpus,
          "--output_file=%s" % records,
          "--vocab_file=%s" % (directory / "vocab.txt"),
          "--max_seq_length=%d" % seq, "--max_predictions_per_seq=%d" % preds,
          "--dupe_factor=1"])
  with open(directory / "config.json", "w") as f:
    json.dump(config, f)
  return records


def expect_user_error(result, *fragments):
  """Asserts a user-error exit: code 2, one `error:` line holding every
  fragment, no traceback; returns the line."""
  assert result.returncode == 2, result.stderr[-2000:]
  errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert len(errors) == 1, result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  for fragment in fragments:
    assert fragment in errors[0], errors[0]
  return errors[0]


def load_checkpoint(path):
  """{variable name: value} of a checkpoint prefix or a directory's latest."""
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name)
          for name, _ in tf.train.list_variables(path)}


def two_replica_strategy():
  """MirroredStrategy over the two CPU devices of a TWO_CPUS session."""
  return tf.distribute.MirroredStrategy(
      ["/cpu:0", "/cpu:1"],
      cross_device_ops=tf.distribute.ReductionToOneDevice())


@pytest.fixture
def mixed_precision():
  """Undoes the process-wide mixed-precision graph rewrite after a test."""
  yield
  tf.train.experimental.disable_mixed_precision_graph_rewrite()


def fp16_precision(initial_scale, growth_steps=2000):
  """The Precision --use_fp16 resolves to here (no GPU), with that scale."""
  return engine_setup.resolve_precision(
      True, False, 0, False, set(), LossScale(initial_scale, growth_steps))


def build_fp16_step(strategy, replicas_with_inf):
  """A toy fp16 step whose gradient is not finite on the replicas listed
  when `inject` is fed True; its loss stays sum(w^2) on every replica.

  Returns:
    (inject placeholder, w, global_step, the TrainStep of each replica).
  """
  inject = tf.placeholder_with_default(False, [])
  with strategy.scope():
    w = tf.get_variable("w", initializer=tf.constant([1.0, 2.0]))
    global_step = tf.train.get_or_create_global_step()

    def step():
      ctx = tf.distribute.get_replica_context()
      poisoned = tf.logical_and(
          inject, tf.reduce_any(tf.equal(ctx.replica_id_in_sync_group,
                                         replicas_with_inf)))
      gradient_factor = tf.where(poisoned, np.inf, 1.0)

      @tf.custom_gradient
      def overflowing_gradient(x):
        return tf.identity(x), lambda dy: dy * gradient_factor

      loss = tf.reduce_sum(tf.square(overflowing_gradient(w)))
      return optimization.create_accumulating_optimizer(
          [lambda: loss], 0.1, 10, 0, precision=fp16_precision(1024, 2))

    steps = strategy.extended.call_for_each_replica(step)
  return inject, w, global_step, steps


def fp16_training_state(weights, global_step):
  """What an fp16 step that overflows must leave unchanged, and the scale.

  Returns:
    [weights, global_step, the dynamic loss-scale variable, every Adam slot]
    of the default graph, for `sess.run`.
  """
  scale = [v for v in tf.global_variables()
           if v.op.name.endswith("current_loss_scale")]
  assert len(scale) == 1, [v.op.name for v in tf.global_variables()]
  slots = [v for v in tf.global_variables() if "adam" in v.op.name]
  return [weights, global_step, scale[0]] + slots


def read_eval_results(output_dir):
  """eval_results.txt of a fine-tuning run as {name: float}."""
  results = {}
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    for line in f:
      key, value = line.split(" = ")
      results[key] = float(value)
  return results


def read_json(path):
  with open(path) as f:
    return json.load(f)


def partial_files(directory):
  """The temporary `*.partial-*` files (atomic_io) left in `directory`."""
  return [n for n in os.listdir(str(directory)) if ".partial-" in n]


def reachable_ops(fetches):
  """All ops the fetches depend on, through data and control inputs."""
  seen = set()
  stack = [t if isinstance(t, tf.Operation) else t.op for t in fetches]
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    stack.extend(t.op for t in op.inputs)
    stack.extend(op.control_inputs)
  return seen


@pytest.fixture
def graph():
  """A fresh default graph for a test."""
  with tf.Graph().as_default() as g:
    yield g


def options_from_args(cls, args):
  """A program's options dataclass from its command-line arguments
  ("--name=value", "--flag", "--noflag"), for running it in this process:
  parsed by absl into flags made from `cls`'s fields, as the program parses
  them (option_flags.options_from_args)."""
  from bertkit.common import option_flags
  return option_flags.options_from_args(cls, args)


class InProcessRun:
  """What a program run in this process logged, as `run_program`'s result
  holds it: the log lines in `stderr` (`stdout` holds the run summary)."""

  def __init__(self, stdout, stderr):
    self.stdout, self.stderr, self.returncode = stdout, stderr, 0


def run_in_process(run_fn, options_value):
  """Calls a program's run(options) here; returns an InProcessRun of what it
  logged and printed (user errors propagate as exceptions)."""
  import contextlib
  import io
  import logging as py_logging
  from absl import logging as absl_logging
  lines = []

  class Collect(py_logging.Handler):
    def emit(self, record):
      lines.append(record.getMessage())

  handler = Collect(level=py_logging.INFO)
  logger = absl_logging.get_absl_logger()
  previous = logger.level
  logger.addHandler(handler)
  logger.setLevel(py_logging.INFO)
  stdout = io.StringIO()
  try:
    with contextlib.redirect_stdout(stdout):
      run_fn(options_value)
  finally:
    logger.removeHandler(handler)
    logger.setLevel(previous)
  return InProcessRun(stdout.getvalue(), "\n".join(lines))


def program_in_process(args):
  """run_program(args) in this process: the program's run() with the
  options of its arguments; returns an InProcessRun (user errors raise)."""
  import importlib
  module = importlib.import_module(args[0][:-len(".py")])
  return run_in_process(module.run, options_from_args(
      PROGRAM_OPTIONS[module.__name__](), args[1:]))


def _options_class(module_name, class_name):
  def load():
    import importlib
    return getattr(importlib.import_module(module_name), class_name)
  return load


# Each program's options dataclass (a program is its options and `run`).
PROGRAM_OPTIONS = {
    "run_pretraining": _options_class("bertkit.tasks.pretraining.options",
                                      "PretrainingOptions"),
    "run_classifier": _options_class("bertkit.tasks.classification.options",
                                     "ClassifierOptions"),
    "run_squad": _options_class("bertkit.tasks.squad.options",
                                "SquadOptions"),
    "run_ner": _options_class("bertkit.tasks.ner.options", "NerOptions"),
    "run_swag": _options_class("bertkit.tasks.swag.options",
                               "MultipleChoiceOptions"),
    "run_rerank": _options_class("bertkit.tasks.reranking.options",
                                 "RerankOptions"),
    "run_bm25": _options_class("run_bm25", "Bm25Options"),
    "run_glue": _options_class("bertkit.tasks.glue.options",
                               "GlueSuiteOptions"),
    "extract_features": _options_class("bertkit.tasks.features.options",
                                       "FeatureExtractionOptions"),
    "create_pretraining_data": _options_class(
        "bertkit.data.creation_options", "CreationOptions"),
    "create_vocab": _options_class("create_vocab", "VocabOptions"),
    "export_checkpoint": _options_class("export_checkpoint",
                                        "ExportOptions"),
    "two_phase": _options_class("two_phase", "TwoPhaseOptions"),
    "benchmark": _options_class("bertkit.perf.benchmark_options",
                                "BenchmarkOptions"),
}


def pretrain_in_process(workdir, output_dir, *extra, **kwargs):
  """run_pretraining.run in this process, with pretrain_args' arguments."""
  return program_in_process(pretrain_args(workdir, output_dir, *extra,
                                          **kwargs))


def pytest_collection_modifyitems(config, items):
  """Under pytest-xdist (the Makefile's -n 2), modules with more slow tests
  come first: handed out first, the two workers end close together instead
  of one waiting on a last long module."""
  del config  # the hook's signature
  if "PYTEST_XDIST_WORKER" not in os.environ:
    return
  slow_tests = collections.Counter(
      item.module.__name__ for item in items
      if item.get_closest_marker("slow") is not None)
  # A stable sort: each module's tests stay together, in collection order.
  items.sort(key=lambda item: -slow_tests[item.module.__name__])


def xdist_work_unit(nodeid):
  """The pytest-xdist work unit of a test: its module, so module fixtures
  (trained runs, records, clusters) are built once; the Slurm modules form
  one unit, sharing the session's one Slurm cluster on one worker."""
  module = nodeid.split("::", 1)[0]
  return "slurm" if os.path.basename(module).startswith("test_slurm") \
      else module


@pytest.hookimpl(optionalhook=True)  # pytest runs without xdist too
def pytest_xdist_make_scheduler(config, log):
  """Work units by xdist_work_unit, in collection order."""
  from xdist.scheduler import LoadScopeScheduling

  class ByModule(LoadScopeScheduling):
    def _split_scope(self, nodeid):
      return xdist_work_unit(nodeid)

  config.option.loadscopereorder = False
  return ByModule(config, log)
