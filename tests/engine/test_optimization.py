"""Optimizer math, data-parallel invariants and fp16 overflow handling."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.engine.update import lr_schedules
from bertkit.engine.update import train_step
import optimization
from conftest import (TWO_CPUS, build_fp16_step, fp16_precision,
                      fp16_training_state, reachable_ops,
                      two_replica_strategy)


class PlainSGD(optimization.DataParallelOptimizer):
  """w -= lr * g: isolates the base class's all-reduce / clip / apply."""

  def _create_slots(self, var_list):
    del var_list

  def _apply_update(self, var, grad):
    return var.assign_sub(self.learning_rate * grad)


def run_two_replicas(targets, clip_norm, steps=1):
  """Each replica r minimises -(w . targets[r]) / 2 (its share of the mean).

  Returns:
    (per-replica values of w, global_step).
  """
  strategy = two_replica_strategy()
  with tf.Graph().as_default():
    with strategy.scope():
      w = tf.get_variable("w", initializer=tf.zeros([3]))
      global_step = tf.train.get_or_create_global_step()
      targets_t = tf.constant(targets, tf.float32)

      def step():
        ctx = tf.distribute.get_replica_context()
        t = tf.gather(targets_t, ctx.replica_id_in_sync_group)
        loss = -tf.reduce_sum(w * t) / 2.0
        opt = PlainSGD(1.0, clip_norm=clip_norm)
        return opt.apply_gradients(opt.compute_gradients(loss, [w]),
                                   global_step=global_step)

      train_op = strategy.group(strategy.extended.call_for_each_replica(step))
      with tf.Session(config=TWO_CPUS) as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(steps):
          sess.run(train_op)
        return (sess.run(strategy.experimental_local_results(w)),
                sess.run(global_step))


def test_gradients_are_averaged_then_clipped_once():
  # Mean gradient -(16.5, 22, 0) has norm 27.5 -> clipped to -(3, 4, 0).
  # Clipping per replica before the sum would give -(4.5, 6, 0) instead.
  copies, step = run_two_replicas([[3., 4., 0.], [30., 40., 0.]], clip_norm=5.0)
  for w in copies:
    np.testing.assert_allclose(w, [3., 4., 0.], rtol=1e-6)
  assert step == 1


def test_unclipped_update_is_the_mean_gradient_and_replicas_agree():
  copies, step = run_two_replicas([[1., 2., 3.], [3., 2., 1.]], clip_norm=None,
                                  steps=3)
  np.testing.assert_allclose(copies[0], 3 * np.array([2., 2., 2.]), rtol=1e-6)
  np.testing.assert_array_equal(copies[0], copies[1])
  assert step == 3


def numpy_adamw_step(w, g, m, v, lr, decay, use_decay):
  # 1 - beta in float32, as TF's fused Adam kernel computes it: for beta_2
  # that is 0.00099998713, where upstream's separate ops multiply by
  # float32(0.001), a 1.3e-5 relative difference in v.
  beta_1, beta_2 = np.float32(0.9), np.float32(0.999)
  m = beta_1 * m + (np.float32(1) - beta_1) * g
  v = beta_2 * v + (np.float32(1) - beta_2) * g * g
  update = m / (np.sqrt(v) + 1e-6)
  if use_decay:
    update = update + decay * w
  return w - lr * update, m, v


def test_adamw_matches_numpy_reference_and_excludes_layernorm_and_bias(graph):
  rng = np.random.RandomState(0)
  init = {"layer/kernel": rng.randn(4, 3), "layer/bias": rng.randn(3),
          "layer/LayerNorm/gamma": rng.randn(3)}
  x = rng.randn(5, 4)
  variables = {}
  for name, value in init.items():
    scope, var_name = name.rsplit("/", 1)
    with tf.variable_scope(scope, reuse=tf.AUTO_REUSE):
      variables[name] = tf.get_variable(var_name,
                                        initializer=value.astype(np.float32))
  out = tf.matmul(tf.constant(x, tf.float32), variables["layer/kernel"])
  out = (out + variables["layer/bias"]) * variables["layer/LayerNorm/gamma"]
  loss = tf.reduce_mean(tf.square(out))
  opt = optimization.AdamWeightDecayOptimizer(0.1, weight_decay_rate=0.01,
                                              clip_norm=None)
  names = list(init)
  grads_and_vars = opt.compute_gradients(loss, [variables[n] for n in names])
  grads_t = [g for g, _ in grads_and_vars]
  train_op = opt.apply_gradients(grads_and_vars,
                                 global_step=tf.train.get_or_create_global_step())
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    expected = {n: init[n].astype(np.float32) for n in names}
    m = {n: np.zeros_like(expected[n]) for n in names}
    v = {n: np.zeros_like(expected[n]) for n in names}
    for _ in range(3):
      grads = dict(zip(names, sess.run(grads_t)))
      sess.run(train_op)
      for n in names:
        expected[n], m[n], v[n] = numpy_adamw_step(
            expected[n], grads[n], m[n], v[n], 0.1, 0.01,
            use_decay=n == "layer/kernel")
    for n in names:
      np.testing.assert_allclose(sess.run(variables[n]), expected[n],
                                 rtol=1e-5, atol=1e-6)
    slot_names = sorted(s.op.name for s in tf.global_variables()
                        if "adam" in s.op.name)
  assert slot_names == sorted(["%s/adam_%s" % (n, k) for n in names
                               for k in "mv"])


WRITE_OPS = {"Assign", "AssignSub", "ApplyAdam", "AssignVariableOp",
             "AssignSubVariableOp", "ResourceApplyAdam"}


@pytest.mark.parametrize("optimizer_name", optimization.OPTIMIZERS)
def test_every_weight_write_waits_for_every_gradient(graph, optimizer_name):
  # A write that nothing orders after the gradients (the weight decay reads
  # and writes only the weight) may run before another gradient reads that
  # weight; a race a numeric test catches only now and then.
  with tf.variable_scope("layer", use_resource=True):
    kernel = tf.get_variable("kernel", initializer=tf.ones([4, 3]))
    bias = tf.get_variable("bias", initializer=tf.ones([3]))
  loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([2, 4]), kernel) + bias))
  opt = optimization.build_optimizer(optimizer_name, 0.1)
  opt.clip_norm = None
  grads_and_vars = opt.compute_gradients(loss, [kernel, bias])
  train_op = opt.apply_gradients(grads_and_vars)
  writes = [op for op in reachable_ops([train_op])
            if op.type in WRITE_OPS]
  assert {op.type for op in writes} >= {
      "adamw": {"AssignSubVariableOp", "ResourceApplyAdam"},
      "lamb": {"AssignVariableOp"}}[optimizer_name]
  for write in writes:
    before = reachable_ops([write])
    for grad, _ in grads_and_vars:
      assert grad.op in before, (write.name, grad.name)


def test_adamw_converges_on_a_toy_problem(graph):
  w = tf.get_variable("w", initializer=tf.constant([0.1, -0.2, 0.3]))
  loss = tf.reduce_sum(tf.square(w - tf.constant([0.4, 0.2, -0.5])))
  train_op = optimization.create_optimizer(loss, 0.2, 100, 10)
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for _ in range(100):
      sess.run(train_op)
    assert sess.run(loss) < 1e-4
    assert sess.run(tf.train.get_global_step()) == 100


@pytest.mark.parametrize("step,expected", [
    # Upstream: the decay runs from step 0, warm-up only overrides it before
    # num_warmup_steps, so step 10 is already at 1 - 10/100.
    (0, 0.0), (5, 0.5), (9, 0.9), (10, 0.9), (55, 0.45), (100, 0.0)])
def test_learning_rate_schedule_warmup_then_linear_decay(graph, step,
                                                          expected):
  step_t = tf.constant(step, tf.int64)
  lr = lr_schedules.rate_tensor(
      lr_schedules.Schedule(lr_schedules.LINEAR, 1.0, 100, 10), step_t)
  with tf.Session() as sess:
    assert sess.run(lr) == pytest.approx(expected, abs=1e-6)


def test_fp16_overflow_step_is_skipped_and_loss_scale_halves(mixed_precision):
  strategy = two_replica_strategy()
  with tf.Graph().as_default():
    inject, w, global_step, steps = build_fp16_step(strategy, [1])
    train_op = strategy.group(steps.train_op)
    losses = strategy.experimental_local_results(steps.loss)
    state = fp16_training_state(w, global_step)
    with tf.Session(config=TWO_CPUS) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(train_op)
      before = sess.run(state)
      assert before[1] == 1 and before[2] == 1024
      # Only replica 1 overflows: both replicas must skip together, and the
      # skipped step still reports its loss, summed over the replicas.
      _, skipped_losses = sess.run([train_op, losses], {inject: True})
      after = sess.run(state)
      expected = 2 * float(np.sum(np.square(before[0])))
      assert list(skipped_losses) == [pytest.approx(expected)] * 2
      np.testing.assert_array_equal(after[0], before[0])
      assert after[1] == 1
      for b, a in zip(before[3:], after[3:]):
        np.testing.assert_array_equal(a, b)
      assert after[2] == 512
      for copy in sess.run(strategy.experimental_local_results(w)):
        np.testing.assert_array_equal(copy, before[0])
      # Two finite steps in a row double the scale again.
      sess.run(train_op)
      sess.run(train_op)
      assert sess.run(global_step) == 3
      assert sess.run(state[2]) == 1024


def test_fp16_checkpoint_holds_the_loss_scale(mixed_precision, tmp_path):
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  with tf.Graph().as_default():
    build_fp16_step(strategy, [0])
    names = {v.op.name for v in tf.global_variables()}
  assert "current_loss_scale" in names and "good_steps" in names


def test_the_train_step_reaches_the_hooks_only_through_register_step_metrics(
    mixed_precision, graph):
  w = tf.get_variable("w", initializer=tf.constant([1.0, 2.0]))
  step = optimization.create_accumulating_optimizer(
      [lambda: tf.reduce_sum(tf.square(w))], 0.1, 10, 2,
      precision=fp16_precision(1024))
  # A model_fn that forgets the hand-over disables no guard silently.
  with pytest.raises(ValueError, match="register_step_metrics"):
    train_step.step_metrics()
  assert train_step.register_step_metrics(step) is step.loss_share
  metrics = train_step.step_metrics()
  # Without a time budget no step carries training seconds.
  assert metrics.train_seconds is None
  fetches = metrics._replace(train_seconds=tf.constant(0.0))
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    before = sess.run(fetches)
    sess.run(step.train_op)
    after = sess.run(fetches)
  assert before.loss == pytest.approx(5.0)
  assert before.learning_rate == 0.0
  assert after.learning_rate == pytest.approx(0.05)
  assert before.loss_scale == after.loss_scale == 1024
