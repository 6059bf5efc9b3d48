"""LAMB (--optimizer=lamb) and gradient accumulation (--num_accumulation_steps).

The LAMB update is checked against a NumPy reference; accumulation against
the gradient (in-process) and the trained weights (end to end) of one batch
K times larger, with one and with two replicas.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

import conftest
from bertkit.engine.distributed import distribution
from bertkit.engine.loop import model_spec
from bertkit.perf import synthetic_data
from bertkit.tasks.pretraining import task as pretraining
import modeling
import optimization
from conftest import (REPO_ROOT, TINY_CONFIG, TWO_CPUS, expect_user_error,
                      fp16_training_state, load_checkpoint, run_ok,
                      run_program, two_replica_strategy)
from bertkit.common.errors import UserError

SEQ, PREDS, VOCAB = 32, 5, 128
# Masked positions of consecutive records. Every block of 4 holds 12, so
# replicas of 4 examples see equal totals (per-replica normalisation then
# equals the global one), while micro-batches of 2 see 8 and 4: the
# weighting of the micro-batch losses matters.
MASKED_COUNTS = (5, 3, 1, 3)


# ---------------------------------------------------------------------------
# LAMB against NumPy.


def numpy_lamb_step(w, g, m, v, t, lr, decay, use_decay, bias_correction):
  """One LAMB update in float64, written from the paper's formulas."""
  m = 0.9 * m + 0.1 * g
  v = 0.999 * v + 0.001 * g * g
  m_hat, v_hat = m, v
  if bias_correction:
    m_hat, v_hat = m / (1.0 - 0.9 ** t), v / (1.0 - 0.999 ** t)
  update = m_hat / (np.sqrt(v_hat) + 1e-6)
  if use_decay:
    update = update + decay * w
  w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
  ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
  return w - lr * ratio * update, m, v


LAMB_INIT_SEED = 0
DECAYED = ("layer/kernel", "head/kernel")


def lamb_problem():
  """Variables and a loss that exercise every branch of the update.

  head/kernel starts at zero (||w|| = 0: ratio 1), frozen/bias gets an
  all-zero gradient (||update|| = 0: ratio 1, it must not move or turn NaN),
  bias and LayerNorm variables get no weight decay.
  """
  rng = np.random.RandomState(LAMB_INIT_SEED)
  init = {"layer/kernel": rng.randn(4, 3), "layer/bias": rng.randn(3),
          "layer/LayerNorm/gamma": rng.randn(3),
          "head/kernel": np.zeros((4, 2)), "frozen/bias": rng.randn(2)}
  init = {n: v.astype(np.float32) for n, v in init.items()}
  variables = {}
  for name, value in init.items():
    scope, var_name = name.rsplit("/", 1)
    with tf.variable_scope(scope):
      variables[name] = tf.get_variable(var_name, initializer=value)
  x = tf.constant(rng.randn(5, 4), tf.float32)
  out = tf.matmul(x, variables["layer/kernel"]) + variables["layer/bias"]
  out = out * variables["layer/LayerNorm/gamma"]
  head = tf.matmul(x, variables["head/kernel"])
  loss = (tf.reduce_mean(tf.square(out - 1.0)) +
          tf.reduce_mean(tf.square(head - 0.5)) +
          0.0 * tf.reduce_sum(variables["frozen/bias"]))
  return init, variables, loss


def run_lamb(steps, bias_correction, lr=0.1, decay=0.01):
  """LAMB for `steps` updates: (TF values, NumPy reference, slot names)."""
  with tf.Graph().as_default():
    init, variables, loss = lamb_problem()
    names = sorted(init)
    opt = optimization.LambOptimizer(lr, weight_decay_rate=decay,
                                     bias_correction=bias_correction,
                                     clip_norm=None)
    grads_and_vars = opt.compute_gradients(loss, [variables[n] for n in names])
    grads_t = [g for g, _ in grads_and_vars]
    train_op = opt.apply_gradients(
        grads_and_vars, global_step=tf.train.get_or_create_global_step())
    expected = {n: init[n].astype(np.float64) for n in names}
    m = {n: np.zeros_like(expected[n]) for n in names}
    v = {n: np.zeros_like(expected[n]) for n in names}
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      for t in range(1, steps + 1):
        grads = dict(zip(names, sess.run(grads_t)))
        sess.run(train_op)
        for n in names:
          expected[n], m[n], v[n] = numpy_lamb_step(
              expected[n], grads[n].astype(np.float64), m[n], v[n], t, lr,
              decay, n in DECAYED, bias_correction)
      actual = dict(zip(names, sess.run([variables[n] for n in names])))
    slots = sorted(s.op.name for s in tf.global_variables()
                   if "adam" in s.op.name)
  return init, actual, expected, slots


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("bias_correction", [False, True])
def test_lamb_matches_numpy_reference(steps, bias_correction):
  init, actual, expected, slots = run_lamb(steps, bias_correction)
  for name in init:
    np.testing.assert_allclose(actual[name], expected[name], rtol=2e-5,
                               atol=1e-7, err_msg=name)
  # The guards: a zero weight moves, a zero update leaves its weight alone.
  assert np.abs(actual["head/kernel"]).min() > 0
  np.testing.assert_array_equal(actual["frozen/bias"], init["frozen/bias"])
  # Google's slot names, so checkpoints stay loadable by their tools.
  assert slots == sorted("%s/adam_%s" % (n, k) for n in init for k in "mv")


def test_lamb_step_norm_is_lr_times_weight_norm():
  # The layer-wise trust ratio in one line: ||w' - w|| = lr * ||w||.
  init, actual, _, _ = run_lamb(1, bias_correction=False, lr=0.1)
  for name in ("layer/kernel", "layer/bias", "layer/LayerNorm/gamma"):
    moved = np.linalg.norm(actual[name] - init[name])
    assert moved == pytest.approx(0.1 * np.linalg.norm(init[name]), rel=1e-4)


def test_reference_tells_bias_correction_and_exclusion_apart():
  """The NumPy checks above can fail: each option changes the result."""
  rng = np.random.RandomState(1)
  w, grads = rng.randn(6), [rng.randn(6) for _ in range(3)]

  def three_steps(use_decay, bias_correction):
    x, m, v = w, np.zeros(6), np.zeros(6)
    for t, g in enumerate(grads, 1):
      x, m, v = numpy_lamb_step(x, g, m, v, t, 0.1, 0.01, use_decay,
                                bias_correction)
    return x

  base = three_steps(True, False)
  assert np.abs(three_steps(True, True) - base).max() > 1e-3
  assert np.abs(three_steps(False, False) - base).max() > 1e-4


def test_build_optimizer_uses_upstream_hyperparameters():
  lamb = optimization.build_optimizer("lamb", 0.5)
  assert isinstance(lamb, optimization.LambOptimizer)
  assert (lamb.weight_decay_rate, lamb.beta_1, lamb.beta_2, lamb.epsilon,
          lamb.clip_norm, lamb.bias_correction) == (0.01, 0.9, 0.999, 1e-6,
                                                    1.0, False)
  assert optimization.build_optimizer("lamb", 0.5, True).bias_correction
  adamw = optimization.build_optimizer("adamw", 0.5)
  assert type(adamw) is optimization.AdamWeightDecayOptimizer
  assert not adamw.bias_correction
  assert optimization.build_optimizer("adamw", 0.5, True).bias_correction
  with pytest.raises(ValueError):
    optimization.build_optimizer("sgd", 0.5)


def run_lamb_toy(strategy, session_config, steps=3):
  """Linear regression on 8 fixed rows, split evenly over the replicas."""
  rng = np.random.RandomState(2)
  x_all, y_all = rng.randn(8, 4), rng.randn(8, 3)
  with tf.Graph().as_default():
    with strategy.scope():
      kernel = tf.get_variable("dense/kernel",
                               initializer=rng.randn(4, 3).astype(np.float32))
      bias = tf.get_variable("dense/bias", initializer=tf.zeros([3]))
      x_t, y_t = tf.constant(x_all, tf.float32), tf.constant(y_all, tf.float32)

      def step():
        ctx = tf.distribute.get_replica_context()
        n = ctx.num_replicas_in_sync
        rows = tf.range(8 // n) + ctx.replica_id_in_sync_group * (8 // n)
        pred = tf.matmul(tf.gather(x_t, rows), kernel) + bias
        loss = tf.reduce_mean(tf.square(pred - tf.gather(y_t, rows)))
        return optimization.create_optimizer(
            distribution.replica_share(loss), 0.1, 10, 0,
            optimizer_name="lamb", bias_correction=True)

      train_op = strategy.group(strategy.extended.call_for_each_replica(step))
      with tf.Session(config=session_config) as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(steps):
          sess.run(train_op)
        return ([sess.run(strategy.experimental_local_results(v))
                 for v in (kernel, bias)],
                sess.run(tf.train.get_global_step()))


def test_lamb_on_two_replicas_equals_one_device_with_the_whole_batch():
  single, step1 = run_lamb_toy(tf.distribute.OneDeviceStrategy("/cpu:0"),
                               None)
  double, step2 = run_lamb_toy(two_replica_strategy(), TWO_CPUS)
  assert step1 == step2 == 3
  for one, two in zip(single, double):
    for copy in two:
      np.testing.assert_allclose(copy, one[0], rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(two[0], two[1])
  # Three steps moved the zero bias (ratio 1 at first, then ||w|| > 0).
  assert np.abs(single[1][0]).min() > 0


# ---------------------------------------------------------------------------
# Gradient accumulation, in-process.


def masked_features(batch, seed=3):
  """Numpy pretraining features whose masked counts cycle MASKED_COUNTS."""
  rng = np.random.RandomState(seed)
  counts = np.array([MASKED_COUNTS[i % 4] for i in range(batch)])
  weights = (np.arange(PREDS)[None, :] < counts[:, None]).astype(np.float32)
  return {
      "input_ids": rng.randint(5, VOCAB, (batch, SEQ)).astype(np.int32),
      "input_mask": np.ones((batch, SEQ), np.int32),
      "segment_ids": (np.arange(SEQ)[None, :] >= SEQ // 2).repeat(
          batch, 0).astype(np.int32),
      "masked_lm_positions": rng.randint(1, SEQ, (batch, PREDS)).astype(
          np.int32) * weights.astype(np.int32),
      "masked_lm_ids": rng.randint(5, VOCAB, (batch, PREDS)).astype(
          np.int32) * weights.astype(np.int32),
      "masked_lm_weights": weights,
      "next_sentence_labels": rng.randint(0, 2, (batch, 1)).astype(np.int32),
  }


def accumulated(features, k, record_ops=None):
  """(summed gradients, summed loss) of k micro-batches of `features`."""
  fns = pretraining.micro_batch_loss_fns(
      modeling.BertConfig.from_dict(TINY_CONFIG), features, k)
  if record_ops is not None:
    fns = [record_ops(fn) for fn in fns]
  opt = optimization.AdamWeightDecayOptimizer(0.1)
  grads_and_vars, losses = optimization.accumulate_gradients(opt, fns)
  return [g for g, _ in grads_and_vars], tf.add_n(losses)


@pytest.mark.slow
def test_micro_batch_gradients_sum_to_the_whole_batch_gradient(graph):
  tf.set_random_seed(0)
  features = {k: tf.constant(v) for k, v in masked_features(8).items()}
  whole_grads, whole_loss = accumulated(features, 1)
  num_vars = len(tf.trainable_variables())
  results = {}
  with tf.variable_scope(tf.get_variable_scope(), reuse=True):
    for k in (2, 4):
      results[k] = accumulated(features, k)
    # The naive alternative: the mean of each micro-batch's own mean loss.
    config = modeling.BertConfig.from_dict(TINY_CONFIG)
    naive_loss = tf.add_n([
        m[0] + n[0] for m, n in (
            pretraining.pretraining_model(config, micro, True)
            for micro in model_spec.split_micro_batches(features, 4))
    ]) / 4.0
    naive_grads = tf.gradients(naive_loss, tf.trainable_variables())
  # Micro-batches reuse the variables: none was added or renamed.
  assert len(tf.trainable_variables()) == num_vars
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    whole = sess.run(whole_grads)
    loss = sess.run(whole_loss)
    for k, (grads_t, loss_t) in results.items():
      grads, micro_loss = sess.run([grads_t, loss_t])
      assert micro_loss == pytest.approx(loss, rel=1e-6)
      diff = max(np.abs(g - w).max() for g, w in zip(grads, whole))
      scale = max(np.abs(w).max() for w in whole)
      print("K=%d: max |grad diff| = %.3g (max |grad| %.3g)" % (k, diff, scale))
      assert diff < 1e-6 * scale
    naive = sess.run(naive_grads)
  naive_diff = max(np.abs(g - w).max() for g, w in zip(naive, whole))
  print("naive mean of micro-batch losses: max |grad diff| = %.3g" %
        naive_diff)
  # Without the whole-batch weighting the gradient is measurably different.
  assert naive_diff > 1e-3 * scale


def ancestors_reach(op, targets, memo):
  """Whether `op` depends (by data or control) on an op in `targets`."""
  stack = [op]
  order = []
  while stack:
    current = stack.pop()
    if current in memo:
      continue
    order.append(current)
    memo[current] = None
    stack.extend(t.op for t in current.inputs)
    stack.extend(current.control_inputs)
  for current in reversed(order):
    parents = [t.op for t in current.inputs] + list(current.control_inputs)
    memo[current] = current in targets or any(memo.get(p) for p in parents)
  return memo[op]


def test_each_micro_batch_starts_after_the_previous_gradients(graph):
  features = {k: tf.constant(v) for k, v in masked_features(8).items()}
  regions = []  # ops created by each micro-batch's forward, then its grads

  def record_ops(fn):
    def wrapped():
      before = len(graph.get_operations())
      loss = fn()
      regions.append((before, len(graph.get_operations())))
      return loss
    return wrapped

  accumulated(features, 4, record_ops)
  ops = graph.get_operations()
  for i in (1, 2):
    # Between the end of forward i-1 and the start of forward i: the
    # gradients of micro-batch i-1 and their running sum.
    previous_gradients = set(ops[regions[i - 1][1]:regions[i][0]])
    forward = ops[regions[i][0]:regions[i][1]]
    assert len(forward) > 100 and len(previous_gradients) > 100
    memo = {}
    late = [op.name for op in forward
            if not ancestors_reach(op, previous_gradients, memo)]
    assert not late, late[:5]


@pytest.mark.parametrize("make_strategy", [
    two_replica_strategy,
    # Variables once on the CPU, the replicas on two logical CPUs.
    lambda: tf.distribute.experimental.CentralStorageStrategy(
        ["/cpu:0", "/cpu:1"])], ids=["mirrored", "central_storage"])
def test_fp16_nonfinite_micro_batch_skips_the_whole_update(mixed_precision,
                                                           make_strategy):
  strategy = make_strategy()
  with tf.Graph().as_default():
    inject = tf.placeholder_with_default(False, [])
    with strategy.scope():
      w = tf.get_variable("dense/kernel", initializer=tf.constant([1.0, 2.0]))
      global_step = tf.train.get_or_create_global_step()

      def step():
        ctx = tf.distribute.get_replica_context()
        # Only the second micro-batch of replica 1 overflows.
        poisoned = tf.logical_and(
            inject, tf.equal(ctx.replica_id_in_sync_group, 1))
        scales = [1.0, tf.where(poisoned, np.inf, 1.0)]
        fns = [lambda s=s: tf.reduce_sum(tf.square(w)) * s for s in scales]
        train_op = optimization.create_accumulating_optimizer(
            fns, 0.1, 10, 0, precision=conftest.fp16_precision(1024, 2),
            optimizer_name="lamb").train_op
        return train_op

      train_op = strategy.group(strategy.extended.call_for_each_replica(step))
    state = fp16_training_state(w, global_step)
    with tf.Session(config=TWO_CPUS) as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(train_op)
      before = sess.run(state)
      assert before[1] == 1 and before[2] == 1024
      sess.run(train_op, {inject: True})
      after = sess.run(state)
      assert after[1] == 1 and after[2] == 512
      for b, a in zip([before[0]] + before[3:], [after[0]] + after[3:]):
        np.testing.assert_array_equal(a, b)
      for copy in sess.run(strategy.experimental_local_results(w)):
        np.testing.assert_array_equal(copy, before[0])
      sess.run(train_op)
      assert sess.run(global_step) == 2
      assert not np.array_equal(sess.run(w), before[0])


@pytest.mark.parametrize("batch,replicas,k,expected", [
    (8, 1, 1, 8), (8, 1, 4, 2), (8, 2, 2, 2), (32, 4, 8, 1)])
def test_micro_batch_size(batch, replicas, k, expected):
  assert distribution.micro_batch_size(batch, replicas, k) == expected


def test_micro_batch_size_must_divide():
  with pytest.raises(UserError) as e:
    distribution.micro_batch_size(8, 2, 3)
  assert str(e.value) == (
      "--train_batch_size=8 (the global batch per update) must divide by 2 "
      "replicas x --num_accumulation_steps=3 = 6")


# ---------------------------------------------------------------------------
# End to end: run_pretraining.py with --optimizer=lamb and accumulation.


def write_masked_records(path, num_records, seed=0):
  """Synthetic records whose masked counts cycle MASKED_COUNTS."""
  rng = np.random.RandomState(seed)
  with tf.io.TFRecordWriter(path) as writer:
    for i in range(num_records):
      example = synthetic_data.synthetic_example(rng, SEQ, PREDS, VOCAB)
      count = MASKED_COUNTS[i % len(MASKED_COUNTS)]
      feature = example.features.feature
      for name in ("masked_lm_positions", "masked_lm_ids"):
        values = feature[name].int64_list.value
        values[count:] = [0] * (PREDS - count)
      weights = feature["masked_lm_weights"].float_list.value
      weights[count:] = [0.0] * (PREDS - count)
      writer.write(example.SerializeToString())
  return path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  d = tmp_path_factory.mktemp("lamb_accumulation")
  with open(d / "tiny.json", "w") as f:
    json.dump(TINY_CONFIG, f)
  write_masked_records(str(d / "data.tfrecord"), 256)
  return d


def pretrain_args(workdir, output_dir, *extra, steps=6, batch=8):
  return conftest.pretrain_args(workdir, output_dir, "--optimizer=lamb",
                                *extra, steps=steps, batch=batch,
                                learning_rate="1e-2")


def pretrain_here(workdir, output_dir, *extra, steps=6, batch=8):
  """run_pretraining.run in this process with pretrain_args' arguments."""
  return conftest.pretrain_in_process(workdir, output_dir, "--optimizer=lamb",
                                      *extra, steps=steps, batch=batch,
                                      learning_rate="1e-2")


RUNS = {
    "one_device": [],
    "one_device_k4": ["--num_accumulation_steps=4"],
    "mirrored": ["--cpu_replicas=2"],
    "mirrored_k2": ["--cpu_replicas=2", "--num_accumulation_steps=2"],
    "multi_worker_k2": ["--distribution_strategy=multi_worker",
                        "--cpu_replicas=2", "--num_accumulation_steps=2"],
    "mirrored_k2_fp16": ["--cpu_replicas=2", "--num_accumulation_steps=2",
                         "--use_fp16", "--init_loss_scale=1024",
                         "--loss_scale_growth_steps=2"],
}


@pytest.fixture(scope="module")
def runs(workdir):
  """Every run trains 6 LAMB updates of global batch 8 on the same data: in
  this process (one process, no cluster), but the --use_fp16 run (its graph
  rewrite is process-global) is launched."""
  results = {}
  with pytest.MonkeyPatch.context() as patch:
    patch.delenv("TF_CONFIG", raising=False)
    for name, extra in RUNS.items():
      out = workdir / name
      if "--use_fp16" in extra:
        result = run_ok(pretrain_args(workdir, out, *extra))
      else:
        result = pretrain_here(workdir, out, *extra)
      results[name] = (load_checkpoint(str(out)), result)
  return results


def max_abs_diff(a, b):
  return max(float(np.abs(a[n] - b[n]).max()) for n in a
             if n.startswith(("bert/", "cls/")))


@pytest.mark.slow
@pytest.mark.parametrize("run,reference", [
    ("one_device_k4", "one_device"),    # 4 micro-batches of 2 = 1 batch of 8
    ("mirrored_k2", "mirrored"),        # per replica: 2 x 2 = 1 x 4
    ("mirrored", "one_device"),         # LAMB's math is replica-independent
    ("multi_worker_k2", "one_device"),
    ("mirrored_k2_fp16", "mirrored_k2"),  # loss scaling by 2**k is exact
])
def test_runs_end_with_the_same_weights(runs, run, reference):
  actual, expected = runs[run][0], runs[reference][0]
  assert set(actual) - {"current_loss_scale", "good_steps"} == set(expected)
  assert actual["global_step"] == expected["global_step"] == 6
  print("%s vs %s: max |weight diff| = %.3g" % (
      run, reference, max_abs_diff(actual, expected)))
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=1e-4, atol=1e-6,
                               err_msg=name)
  # Updates happened (a LAMB step moves w by lr * ||w||, far beyond the
  # tolerance): the equality is not that of untouched initial values.
  assert np.abs(expected["bert/pooler/dense/kernel/adam_m"]).max() > 0


@pytest.mark.slow
def test_accumulation_is_logged_and_keeps_the_global_batch(runs):
  stderr = runs["mirrored_k2"][1].stderr
  assert "global_batch=8 per_replica_batch=4" in stderr
  assert ("gradient accumulation: 2 micro-batches of 2 examples per replica, "
          "one update per 8 examples") in stderr


@pytest.mark.slow
def test_the_model_is_built_once_per_micro_batch(workdir, runs):
  def bert_scopes(run):
    graph = (workdir / run / "graph.pbtxt").read_text()
    return sorted(set(re.findall(r'name: "(bert(?:_\d+)?)/encoder/', graph)))

  assert bert_scopes("one_device") == ["bert"]
  assert bert_scopes("one_device_k4") == ["bert", "bert_1", "bert_2",
                                          "bert_3"]


@pytest.mark.slow
def test_fp16_accumulation_keeps_growing_the_loss_scale(runs):
  # 6 finite updates (not 12 micro-steps) with growth every 2: 1024 * 2**3.
  assert runs["mirrored_k2_fp16"][0]["current_loss_scale"] == 8192



BAD_ACCUMULATION_OR_OPTIMIZER_FLAGS = [
    (["--cpu_replicas=2", "--num_accumulation_steps=3"],
     ["--train_batch_size=8", "2 replicas x --num_accumulation_steps=3"]),
    (["--num_accumulation_steps=0"], ["--num_accumulation_steps must be >= 1"]),
    (["--optimizer=adamw", "--lamb_bias_correction"],
     ["--lamb_bias_correction needs --optimizer=lamb"]),
    (["--optimizer=lamb", "--adam_bias_correction"],
     ["--adam_bias_correction needs --optimizer=adamw"]),
]


@pytest.mark.parametrize("extra,fragments",
                         BAD_ACCUMULATION_OR_OPTIMIZER_FLAGS)
def test_bad_accumulation_or_optimizer_flags_are_refused(workdir, extra,
                                                         fragments):
  out = workdir / "refused"
  with pytest.raises(UserError) as e:
    pretrain_here(workdir, out, *extra)
  assert "\n" not in str(e.value), str(e.value)
  for fragment in fragments:
    assert fragment in str(e.value), str(e.value)
  assert not (out / "checkpoint").exists()


@pytest.mark.slow
def test_batch_not_dividing_by_replicas_and_micro_batches_exits_2(workdir):
  """As a user sees it: exit code 2 and one error line, no traceback."""
  extra, fragments = BAD_ACCUMULATION_OR_OPTIMIZER_FLAGS[0]
  out = workdir / "refused_launch"
  expect_user_error(run_program(pretrain_args(workdir, out, *extra)),
                    *fragments)
  assert not (out / "checkpoint").exists()


# ---------------------------------------------------------------------------
# Horovod: the same base class, so LAMB + accumulation on 2 ranks equals one
# process with the whole batch.

@pytest.mark.slow
@conftest.requires_horovod
def test_horovod_lamb_accumulation_equals_one_process(workdir, tmp_path):
  # Rank r reads file r in order; `combined` interleaves blocks of 4 so that
  # its k-th batch of 8 is rank 0's k-th batch followed by rank 1's.
  records = list(tf.io.tf_record_iterator(str(workdir / "data.tfrecord")))
  per_rank = [records[0:64], records[64:128]]
  combined = [r for start in range(0, 64, 4) for rank in per_rank
              for r in rank[start:start + 4]]
  paths = {}
  for name, chunk in (("rank0", per_rank[0]), ("rank1", per_rank[1]),
                      ("combined", combined)):
    paths[name] = str(tmp_path / (name + ".tfrecord"))
    with tf.io.TFRecordWriter(paths[name]) as writer:
      for record in chunk:
        writer.write(record)
  pretrain_here(workdir, tmp_path / "single",
                "--input_file=%s" % paths["combined"], steps=4)
  env = dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2",
             BERT_HOROVOD_SCRATCH_ROOT=str(tmp_path / "scratch"))
  command = [
      os.path.join(REPO_ROOT, "scripts", "run_pre_horovod.sh"), "-n", "2",
      "-c", str(workdir / "tiny.json"),
      "-i", "%s,%s" % (paths["rank0"], paths["rank1"]),
      "-o", str(tmp_path / "horovod"), "-b", "8", "-s", str(SEQ),
      "-p", str(PREDS), "-t", "4", "-w", "2", "-l", "1e-2", "--",
      "--tf_random_seed", "1", "--optimizer", "lamb",
      "--num_accumulation_steps", "2"]
  result = subprocess.run(command, capture_output=True, text=True,
                          timeout=600, env=env, cwd=REPO_ROOT)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  single = load_checkpoint(str(tmp_path / "single"))
  ranks = load_checkpoint(str(tmp_path / "horovod"))
  assert ranks["global_step"] == single["global_step"] == 4
  print("horovod k2 vs one process: max |weight diff| = %.3g" %
        max_abs_diff(ranks, single))
  for name, value in single.items():
    np.testing.assert_allclose(ranks[name], value, rtol=1e-4, atol=1e-6,
                               err_msg=name)
