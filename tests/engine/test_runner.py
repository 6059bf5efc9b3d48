"""The task runner (runner.py): what the programs may and may not do, and
what the runner does for every task.

The programs describe their task (model_spec.ModelSpec) and hand it to the runner,
through the two modules that run a training program: pretraining's trainer
and the fine-tuning driver. Their rules are read from the source: neither
imports the optimizer, the throughput hook, the step contract or the engine
set-up, neither registers step metrics itself, and each `run` makes at most
3 calls into the runner.
"""

import ast
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import options
from bertkit.engine.loop import model_spec
from bertkit.engine.loop import runner
from conftest import REPO_ROOT

# What runs a training program: run_pretraining.py's, and every
# fine-tuning program's.
PROGRAMS = ("bertkit/tasks/pretraining/trainer.py",
            "bertkit/tasks/fine_tuning/driver.py")
# What only the runner may reach: the optimizer, the speed measurement, the
# step contract and the engine set-up.
RUNNER_ONLY = {"optimization", "optimizers", "throughput", "train_step",
               "engine_setup"}


def parse(program):
  with open(os.path.join(REPO_ROOT, program), encoding="utf-8") as f:
    return ast.parse(f.read(), filename=program)


def imported_modules(tree):
  """The modules `tree` imports, by their last name: `runner` for both
  `import runner` and `from bertkit.engine.loop import runner`."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name.split(".")[-1] for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      names.add(node.module.split(".")[-1])
      names.update(alias.name for alias in node.names)
  return names


def calls_into(tree, module):
  """The attribute names of `module.x(...)` calls under `tree`.

  Building one of the module's records (`runner.TrainingSchedule(...)`, named in
  CapWords) hands it values and orders nothing, so it is not counted.
  """
  return [node.func.attr for node in ast.walk(tree)
          if isinstance(node, ast.Call) and
          isinstance(node.func, ast.Attribute) and
          isinstance(node.func.value, ast.Name) and
          node.func.value.id == module and not node.func.attr[:1].isupper()]


def function(tree, name):
  (found,) = [node for node in tree.body
              if isinstance(node, ast.FunctionDef) and node.name == name]
  return found


@pytest.mark.parametrize("program", PROGRAMS)
def test_programs_reach_the_optimizer_and_hooks_only_through_the_runner(
    program):
  tree = parse(program)
  assert "runner" in imported_modules(tree)
  assert not imported_modules(tree) & RUNNER_ONLY
  called = [name for node in ast.walk(tree) if isinstance(node, ast.Call)
            for name in [getattr(node.func, "attr", None) or
                         getattr(node.func, "id", None)]]
  for registration in ("register_step_metrics", "register_batch_counts",
                       "create_accumulating_optimizer", "create_optimizer"):
    assert registration not in called, (program, registration)


@pytest.mark.parametrize("program", PROGRAMS)
def test_each_main_makes_at_most_3_calls_into_the_runner(program):
  main = function(parse(program), "run")
  calls = calls_into(main, "runner")
  assert 1 <= len(calls) <= 3, calls
  assert calls[0] == "prepare" and calls[-1] == "run"


def test_the_checks_themselves_see_a_forbidden_import_and_call():
  """The two tests above on a program that breaks both rules."""
  tree = ast.parse("from bertkit.engine.report import throughput\n"
                   "from bertkit.engine.loop import runner\n"
                   "def main(argv):\n"
                   "  runner.prepare(); runner.a(); runner.b()\n"
                   "  runner.run(runner.TrainingSchedule(1, 0))\n"
                   "  throughput.register_step_metrics(step)\n")
  assert imported_modules(tree) & RUNNER_ONLY == {"throughput"}
  assert len(calls_into(function(tree, "main"), "runner")) == 4


def linear_task():
  """A Task of least squares on a [4, 1] weight: small enough to check the
  runner's update by hand."""

  def mean_loss(features):
    w = tf.get_variable("w", initializer=tf.constant([[1.0], [-1.0], [0.5],
                                                      [2.0]]))
    return tf.reduce_mean(tf.square(tf.matmul(features["x"], w)[:, 0] -
                                    features["y"]))

  return model_spec.ModelSpec(variable_shapes=None,
                     train_loss_fns=model_spec.mean_loss_shares(mean_loss),
                     eval_outputs=None)


def train_once(num_accumulation_steps):
  """Loss and weights after one update on 8 examples split into
  `num_accumulation_steps` micro-batches."""
  rng = np.random.RandomState(3)
  with tf.Graph().as_default():
    model_fn = model_spec.upstream_model_fn(
        linear_task(), None, 0.1, 10, 0,
        options.OptimizerOptions(optimizer="lamb"), num_accumulation_steps)
    features = {"x": tf.constant(rng.randn(8, 4), tf.float32),
                "y": tf.constant(rng.randn(8), tf.float32)}
    spec = model_fn(features, None, runner.TRAIN, None)
    (w,) = tf.trainable_variables()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      loss, _ = sess.run([spec.loss, spec.train_op])
      return loss, sess.run(w), sess.run(tf.train.get_global_step())


def test_accumulation_is_one_update_of_the_whole_batch():
  """The runner gives every task gradient accumulation: 4 micro-batches of 2
  make the same single update as one batch of 8."""
  loss1, weights1, step1 = train_once(1)
  loss4, weights4, step4 = train_once(4)
  assert step1 == step4 == 1
  assert loss4 == pytest.approx(loss1, rel=1e-6)
  np.testing.assert_allclose(weights4, weights1, rtol=0, atol=1e-6)
  assert np.max(np.abs(weights1 - [[1.0], [-1.0], [0.5], [2.0]])) > 1e-3


def test_a_task_without_predictions_refuses_predict_mode():
  task = model_spec.ModelSpec(variable_shapes=None, train_loss_fns=None,
                     eval_outputs=None)
  model_fn = model_spec.upstream_model_fn(task, None, 0.1, 10, 0)
  with pytest.raises(ValueError, match="no infer mode"):
    model_fn({}, None, runner.PREDICT, None)


def test_micro_batches_are_consecutive_equal_slices():
  with tf.Graph().as_default():
    features = {"x": tf.reshape(tf.range(12), [6, 2])}
    pieces = model_spec.split_micro_batches(features, 3)
    with tf.Session() as sess:
      values = sess.run([p["x"] for p in pieces])
  assert [v.tolist() for v in values] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]],
                                          [[8, 9], [10, 11]]]
