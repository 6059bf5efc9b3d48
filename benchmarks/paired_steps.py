"""Step time of two or more checkouts' models, interleaved in one process.

On a loaded machine two runs minutes apart differ by more than most single
optimisations give. This builds one BERT pretraining step graph (the model
and both heads of a checkout's bertkit/kernels.py, modeling.py and
bertkit/tasks/pretraining/task.py, the update of its
bertkit/engine/update/optimizers.py and gradient_update.py) per
CHECKOUT[:INTER_OP_THREADS] argument and runs their steps in turn (ABC ABC
..., reversed every other round), so that load changes hit all alike.
Prints per variant the median step
time and the median of its per-round speed-ups against the first variant, by
wall clock and by process CPU time.

Example (what a commit gave):
  git worktree add /tmp/before HEAD~1
  python benchmarks/paired_steps.py /tmp/before . --steps=20
  python benchmarks/paired_steps.py . .:1 .:4     # inter-op thread pools
"""

import argparse
import contextlib
import importlib.util
import os
import statistics
import sys
import time

import numpy as np
import tensorflow.compat.v1 as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
# Imported before any checkout loads: what a checkout's heads import besides
# CHECKOUT_MODULES (the runner, checkpoints, ...) is then ours already, built
# on our modeling rather than on the checkout's, bound only while they load.
from bertkit.common.errors import UserError
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs
from bertkit.tasks.pretraining import task  # noqa: F401


# The engine modules the heads and their train op are built of, lowest
# first, as bertkit/engine/ held them before its subpackages and since.
_ENGINE_MODULES = (("cluster_environment", "distributed/cluster_environment"),
                   ("distribution", "distributed/distribution"),
                   ("lr_schedules", "update/lr_schedules"),
                   ("training_clock", "loop/training_clock"),
                   ("train_step", "update/train_step"),
                   ("optimizers", "update/optimizers"),
                   ("training_update", "update/gradient_update"),
                   ("checkpoint_formats", "checkpointing/checkpoint_formats"),
                   ("checkpoints", "checkpointing/checkpoints"),
                   ("task_contract", "loop/model_spec"))
# A checkout's modules loaded as its own, lowest first: each is bound under
# its name while the later ones load. A module a checkout lacks (the
# kernels before they left modeling.py, the train op before it left
# optimizers.py, the heads before the task folders, either layout of the
# engine) is skipped.
HEADS = ("bertkit.tasks.pretraining.task", "bertkit.tasks.pretraining")
OPTIMIZERS = ("bertkit.engine.update.optimizers", "bertkit.engine.optimizers")
UPDATES = ("bertkit.engine.update.gradient_update",
           "bertkit.engine.training_update") + OPTIMIZERS
CHECKOUT_MODULES = (
    (("bertkit.kernels", "bertkit/kernels.py"),
     ("modeling", "modeling.py")) +
    tuple(("bertkit.engine." + path.replace("/", "."),
           "bertkit/engine/%s.py" % path)
          for layout in (0, 1) for path in
          [paths[layout] for paths in _ENGINE_MODULES]) +
    ((HEADS[0], "bertkit/tasks/pretraining/task.py"),
     (HEADS[1], "bertkit/tasks/pretraining.py")))


def checkout_files(checkout):
  """{module name: path} of the modules of `checkout` that it has.

  Raises:
    UserError: `checkout` predates the bertkit layout (its modules import
      each other by their old top-level names, which this process does not
      have), or is no checkout.
  """
  files = {name: os.path.join(checkout, *path.split("/"))
           for name, path in CHECKOUT_MODULES}
  files = {name: path for name, path in files.items() if os.path.exists(path)}
  if not (set(HEADS) & set(files) and set(OPTIMIZERS) & set(files)):
    raise UserError("%s has no bertkit/tasks/pretraining/task.py and "
                    "bertkit/engine/update/optimizers.py: compare checkouts "
                    "of the bertkit layout" % checkout)
  return files


def variant(text):
  """An argparse type: CHECKOUT[:INTER_OP_THREADS], checked before any
  graph is built."""
  checkout, _, inter_op = text.partition(":")
  if inter_op and not inter_op.isdigit():
    raise argparse.ArgumentTypeError(
        "%s: INTER_OP_THREADS must be a whole number" % text)
  try:
    checkout_files(checkout)
  except UserError as e:
    raise argparse.ArgumentTypeError(str(e)) from None
  return text


@contextlib.contextmanager
def bound(modules):
  """Within it, importing a name of `modules` ({name: module}) gives its
  module: sys.modules and the parent package's attribute point there."""
  saved = []
  for name, module in modules.items():
    parent, _, child = name.rpartition(".")
    package = importlib.import_module(parent) if parent else None
    saved.append((name, sys.modules.get(name), package, child,
                  getattr(package, child, None)))
    sys.modules[name] = module
    if package is not None:
      setattr(package, child, module)
  try:
    yield
  finally:
    for name, module, package, child, attribute in reversed(saved):
      sys.modules[name] = module
      if package is not None:
        setattr(package, child, attribute)


def load_checkout(checkout, index):
  """The pretraining heads of `checkout` and its optimizers, built on its own
  kernels and modeling.py.

  Each of CHECKOUT_MODULES is loaded as a module of its own (its gradient
  registry names, which follow __name__, its own too); while one loads, its
  imports of the earlier ones pick up the checkout's. Every other import is
  this checkout's.

  Returns:
    (the heads' module, the module of its `create_optimizer`).
  """
  def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

  modules = {}
  for name, path in checkout_files(checkout).items():
    with bound(modules):
      modules[name] = load("%s_%d" % (name.replace(".", "_"), index), path)
  update = next(modules[name] for name in UPDATES if name in modules)
  heads = modules.get(HEADS[0]) or modules[HEADS[1]]
  return heads, update


def build_step(heads, update, config_file, batch, seq_length,
               predictions):
  """Train op of one pretraining step on fixed random inputs; returns it.

  Args:
    heads: a checkout's pretraining heads module (see load_checkout).
    update: the module of a checkout's create_optimizer (see load_checkout).
    config_file: bert_config.json.
    batch, seq_length, predictions: B, S and the masked positions P.
  """
  rng = np.random.RandomState(0)
  positions = np.stack([np.sort(rng.choice(np.arange(1, seq_length),
                                           predictions, replace=False))
                        for _ in range(batch)])
  segments = np.arange(seq_length) >= seq_length // 2
  features = {
      "input_ids": rng.randint(5, 30522, (batch, seq_length)),
      "input_mask": np.ones((batch, seq_length)),
      "segment_ids": np.tile(segments, (batch, 1)),
      "masked_lm_positions": positions,
      "masked_lm_ids": rng.randint(5, 30522, (batch, predictions)),
      "next_sentence_labels": np.zeros((batch, 1)),
  }
  features = {name: tf.constant(value, tf.int32)
              for name, value in features.items()}
  features["masked_lm_weights"] = tf.ones([batch, predictions])
  config = heads.modeling.BertConfig.from_json_file(config_file)
  (masked_lm_loss, _, _), (next_sentence_loss, _, _) = (
      heads.pretraining_model(config, features, is_training=True))
  return update.create_optimizer(
      masked_lm_loss + next_sentence_loss, 1e-4, 1000, 10)


def main(args):
  sessions = []
  for index, variant in enumerate(args.variants):
    checkout, _, inter_op = variant.partition(":")
    heads, update = load_checkout(checkout, index)
    graph = tf.Graph()
    with graph.as_default():
      train_op = build_step(heads, update, args.bert_config_file,
                            args.batch, args.seq_length, args.predictions)
      config = tf.ConfigProto()
      if inter_op:
        config.inter_op_parallelism_threads = int(inter_op)
      session = tf.Session(graph=graph, config=config)
      session.run(tf.global_variables_initializer())
      for _ in range(args.warmup_steps):
        session.run(train_op)
    sessions.append((session, train_op))
  wall = [[] for _ in sessions]
  cpu = [[] for _ in sessions]
  for step in range(args.steps):
    order = list(range(len(sessions)))
    for k in (order if step % 2 == 0 else reversed(order)):
      session, train_op = sessions[k]
      start_wall, start_cpu = time.perf_counter(), time.process_time()
      session.run(train_op)
      wall[k].append(time.perf_counter() - start_wall)
      cpu[k].append(time.process_time() - start_cpu)
  for k, variant in enumerate(args.variants):
    print("%-28s step %.3f s (%.1f examples/sec), speed-up %.3f; "
          "CPU %.3f s/step, speed-up %.3f" % (
              variant, statistics.median(wall[k]),
              args.batch / statistics.median(wall[k]),
              statistics.median(a / b for a, b in zip(wall[0], wall[k])),
              statistics.median(cpu[k]),
              statistics.median(a / b for a, b in zip(cpu[0], cpu[k]))))


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("variants", nargs="+", type=variant,
                      help="CHECKOUT or CHECKOUT:INTER_OP_THREADS")
  parser.add_argument("--bert_config_file", type=benchmark_args.existing_file,
                      default=os.path.join(REPO_ROOT, "configs",
                                           "bert_mini.json"))
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--predictions", type=int, default=20)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--warmup_steps", type=int, default=3)
  return parser.parse_args(argv)


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
