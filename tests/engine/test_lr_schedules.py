"""Learning-rate schedules (steps and time budget), the optimizer's
hyperparameter flags and the recipe flagfiles."""

import dataclasses
import math
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import REPO_ROOT, expect_user_error, run_program
from bertkit.engine.loop import training_clock
from bertkit.engine.report import throughput
from bertkit.engine.update import gradient_update
from bertkit.engine.update import lr_schedules
from bertkit.engine.update import optimizers

PEAK = 1e-3


def _rates(schedule, xs, start=0.0):
  """rate_tensor's values at each x, from one graph (`start` fed as a
  tensor)."""
  with tf.Graph().as_default():
    x = tf.placeholder(tf.float32, [])
    begin = tf.placeholder(tf.float32, [])
    rate = lr_schedules.rate_tensor(schedule, x, begin)
    with tf.Session() as session:
      return [float(session.run(rate, {x: v, begin: start})) for v in xs]


@pytest.mark.parametrize("x, expected", [
    (0, 0.0), (5, PEAK * 0.5), (9, PEAK * 0.9),
    # Upstream decays from step 0: at the end of warm-up, 1 - 10/100.
    (10, PEAK * 0.9), (55, PEAK * 0.45), (100, 0.0), (150, 0.0)])
def test_linear_is_upstreams_formula(x, expected):
  schedule = lr_schedules.Schedule(lr_schedules.LINEAR, PEAK, 100, 10)
  assert lr_schedules.rate_at(schedule, x) == pytest.approx(expected)
  assert _rates(schedule, [x])[0] == pytest.approx(expected, rel=1e-6,
                                                   abs=1e-12)


def upstreams_rate(learning_rate, num_train_steps, num_warmup_steps,
                   global_step):
  """The rate of upstream's create_optimizer (google-research/bert's
  optimization.py): polynomial_decay from step 0, a linear warm-up over it."""
  step = tf.cast(global_step, tf.float32)
  decayed = tf.train.polynomial_decay(
      tf.constant(learning_rate, dtype=tf.float32), global_step,
      num_train_steps, end_learning_rate=0.0, power=1.0, cycle=False)
  warmup = learning_rate * step / float(num_warmup_steps)
  return tf.where(step < float(num_warmup_steps), warmup, decayed)


def test_step_linear_equals_upstreams_polynomial_decay():
  steps = [0, 1, 7, 10, 11, 50, 99, 100, 120]
  with tf.Graph().as_default():
    step = tf.placeholder(tf.int64, [])
    upstream = upstreams_rate(PEAK, 100, 10, step)
    ours = lr_schedules.rate_tensor(
        lr_schedules.Schedule(lr_schedules.LINEAR, PEAK, 100, 10), step)
    with tf.Session() as session:
      for s in steps:
        a, b = session.run([upstream, ours], {step: s})
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("x, expected", [
    (4, PEAK * 0.4), (10, PEAK), (50, PEAK), (80, PEAK),
    # The last 20 % decay linearly to 0.
    (90, PEAK * 0.5), (95, PEAK * 0.25), (100, 0.0)])
def test_warmup_stable_decay(x, expected):
  schedule = lr_schedules.Schedule(lr_schedules.WARMUP_STABLE_DECAY, PEAK,
                                   100, 10, decay_proportion=0.2)
  assert lr_schedules.rate_at(schedule, x) == pytest.approx(expected)
  assert _rates(schedule, [x])[0] == pytest.approx(expected, rel=1e-6,
                                                   abs=1e-12)


@pytest.mark.parametrize("x", [0, 5, 10, 30, 55, 77, 100, 130])
def test_cosine(x):
  schedule = lr_schedules.Schedule(lr_schedules.COSINE, PEAK, 100, 10)
  if x < 10:
    expected = PEAK * x / 10
  else:
    expected = PEAK * 0.5 * (1 + math.cos(math.pi * min(x - 10, 90) / 90))
  assert lr_schedules.rate_at(schedule, x) == pytest.approx(expected)
  assert _rates(schedule, [x])[0] == pytest.approx(expected, rel=1e-5,
                                                   abs=1e-9)


@pytest.mark.parametrize("x, expected", [
    # Begun at 20: warm-up over 20..30, the last 20 % of the 80 s left
    # (84..100) decay to 0 at the budget's end.
    (0, 0.0), (20, 0.0), (25, PEAK * 0.5), (30, PEAK), (84, PEAK),
    (92, PEAK * 0.5), (100, 0.0), (120, 0.0)])
def test_a_schedule_begun_late_warms_up_from_its_start_and_ends_at_total(
    x, expected):
  schedule = lr_schedules.Schedule(lr_schedules.WARMUP_STABLE_DECAY, PEAK,
                                   100, 10, decay_proportion=0.2,
                                   in_seconds=True)
  assert lr_schedules.rate_at(schedule, x, start=20.0) == pytest.approx(
      expected)
  assert _rates(schedule, [x], start=20.0)[0] == pytest.approx(
      expected, rel=1e-6, abs=1e-12)


class FakeTime:
  """An injected time source."""

  def __init__(self, now):
    self.now = now

  def __call__(self):
    return self.now


def test_time_budget_schedule_follows_the_training_clock(tmp_path):
  """The rate follows injected training seconds, evaluation left out, from
  the first step (5 s of start-up spend none of the warm-up) to the budget's
  end; a resumed clock continues from the checkpoint's, first step
  included."""
  time = FakeTime(1000.0)
  clock = training_clock.TrainingClock(start=1000.0, now=time)
  budget = gradient_update.TimeBudget(seconds=100.0, warmup_seconds=10.0,
                                      clock=clock, is_chief=True)
  training_clock.record_checkpoint_clock(str(tmp_path), 0, clock)
  with tf.Graph().as_default():
    weight = tf.Variable(1.0)
    step = gradient_update.create_accumulating_optimizer(
        [lambda: tf.square(weight)], PEAK, 10**6, 0,
        lr_schedule=lr_schedules.COSINE, time_budget=budget)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())

      def rate_at_time(now):
        time.now = now
        return session.run([step.learning_rate, step.train_seconds])

      rate, seconds = rate_at_time(1005.0)  # the first step
      assert (rate, seconds) == (0.0, pytest.approx(5.0))
      rate, seconds = rate_at_time(1010.0)
      assert seconds == pytest.approx(10.0)
      assert rate == pytest.approx(PEAK * 0.5, rel=1e-5)
      clock.exclude(20.0)  # an evaluation of 20 s
      # The cosine's midpoint: 5 + 10 + (100 - 15) / 2 training seconds.
      rate, seconds = rate_at_time(1077.5)
      assert seconds == pytest.approx(57.5)
      assert rate == pytest.approx(PEAK * 0.5, rel=1e-5)
      rate, _ = rate_at_time(1120.0)
      assert rate == 0.0
  time.now = 1075.0
  training_clock.record_checkpoint_clock(str(tmp_path), 700, clock)
  # Step 0's checkpoint came before the first step: no first step to keep.
  assert training_clock.read_checkpoint_clock(str(tmp_path), 0) == [0.0, 0.0]
  resumed = training_clock.TrainingClock(start=5000.0, now=FakeTime(5010.0))
  resumed.resume_from(*training_clock.read_checkpoint_clock(str(tmp_path),
                                                            700))
  assert resumed.train_seconds() == pytest.approx(65.0)
  assert resumed.wall_seconds() == pytest.approx(85.0)
  # A resumed run does not warm up again.
  assert resumed.first_step_seconds() == 5.0
  assert training_clock.read_checkpoint_clock(str(tmp_path), 699) is None


def test_hyperparameters_reach_the_update():
  """beta_1/beta_2/epsilon/weight decay/clip flags give the AdamW update
  computed by hand."""
  hyper = optimizers.AdamHyperparameters(beta_1=0.5, beta_2=0.9,
                                         epsilon=0.1, weight_decay_rate=0.2,
                                         clip_norm=None)
  with tf.Graph().as_default():
    weight = tf.get_variable("w", initializer=tf.constant([3.0, -4.0]))
    step = gradient_update.create_accumulating_optimizer(
        [lambda: tf.reduce_sum(weight * tf.constant([1.0, 2.0]))], 0.1, 100,
        0, hyperparameters=hyper, lr_schedule=lr_schedules.WARMUP_STABLE_DECAY)
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      session.run(step.train_op)
      updated = session.run(weight)
  grad = np.array([1.0, 2.0])
  m, v = 0.5 * grad, 0.1 * grad ** 2
  w = np.array([3.0, -4.0])
  expected = w - 0.1 * (m / (np.sqrt(v) + 0.1) + 0.2 * w)
  np.testing.assert_allclose(updated, expected, rtol=1e-6)


def test_adamw_bias_correction_equals_torch_adamw():
  """--adam_bias_correction: five updates of a weight with a changing
  gradient equal torch.optim.AdamW's (decoupled decay, moments corrected,
  epsilon added to sqrt(v_hat)), with an epsilon large enough to matter;
  without it the first update is upstream's."""
  torch = pytest.importorskip("torch")
  hyper = optimizers.AdamHyperparameters(beta_1=0.8, beta_2=0.95,
                                         epsilon=0.05, weight_decay_rate=0.1,
                                         clip_norm=None)
  start, scale, steps = [0.5, -1.5, 2.0], [1.0, 0.3, -2.0], 5

  def ours(bias_correction):
    with tf.Graph().as_default():
      weight = tf.get_variable("w", initializer=tf.constant(start))
      step = gradient_update.create_accumulating_optimizer(
          [lambda: tf.reduce_sum(tf.square(weight) * tf.constant(scale))],
          0.1, 100, 0, hyperparameters=hyper, bias_correction=bias_correction,
          lr_schedule=lr_schedules.WARMUP_STABLE_DECAY)
      with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        history = []
        for _ in range(steps):
          session.run(step.train_op)
          history.append(session.run(weight))
        return history

  weight = torch.nn.Parameter(torch.tensor(start, dtype=torch.float64))
  adamw = torch.optim.AdamW([weight], lr=0.1, betas=(0.8, 0.95), eps=0.05,
                            weight_decay=0.1)
  expected = []
  for _ in range(steps):
    adamw.zero_grad()
    (weight ** 2 * torch.tensor(scale, dtype=torch.float64)).sum().backward()
    adamw.step()
    expected.append(weight.detach().numpy().copy())
  np.testing.assert_allclose(ours(True), expected, rtol=1e-5)
  grad = 2 * np.array(start) * np.array(scale)
  upstream = np.array(start) * (1 - 0.1 * 0.1) - 0.1 * (
      0.2 * grad / (np.sqrt(0.05 * grad ** 2) + 0.05))
  np.testing.assert_allclose(ours(False)[0], upstream, rtol=1e-5)


def test_clip_norm_flag_clips():
  hyper = dataclasses.replace(optimizers.UPSTREAM_HYPERPARAMETERS,
                              clip_norm=0.5, weight_decay_rate=0.0)
  with tf.Graph().as_default():
    tf.get_variable("w", initializer=tf.constant([0.0, 0.0]))
    opt = optimizers.build_optimizer("adamw", 0.1, hyperparameters=hyper)
    assert (opt.clip_norm, opt.beta_2) == (0.5, 0.999)


RECIPES = os.path.join(REPO_ROOT, "configs", "recipes")


@pytest.mark.parametrize("recipe", ["bert_2018", "fast"])
def test_recipe_flagfiles_parse_and_later_flags_win(recipe, tmp_path):
  """Both programs read the recipe; a flag given after it overrides it (the
  value in the error line is the user's, not the recipe's)."""
  created = run_program([
      "create_pretraining_data.py",
      "--flagfile=%s" % os.path.join(RECIPES, recipe,
                                     "create_pretraining_data.flags"),
      "--input_file=sample_data/corpus.txt",
      "--output_file=%s" % (tmp_path / "out.tfrecord"),
      "--vocab_file=tests/fixtures/create_pretraining_data/vocab.txt",
      "--masked_lm_prob=1.5"])
  expect_user_error(created, "--masked_lm_prob=1.5")
  assert not os.listdir(tmp_path)
  trained = run_program([
      "run_pretraining.py",
      "--flagfile=%s" % os.path.join(RECIPES, recipe,
                                     "run_pretraining.flags"),
      "--bert_config_file=configs/bert_tiny.json",
      "--input_file=%s" % (tmp_path / "none.tfrecord"),
      "--output_dir=%s" % (tmp_path / "out"), "--do_train",
      "--adam_beta_2=1.0"])
  expect_user_error(trained, "--adam_beta_2=1.0")


@pytest.mark.parametrize("budget_left, expected", [
    (None, (40.0, False)),     # no budget: the steps decide
    (100.0, (40.0, False)),    # the last step comes first
    (12.5, (12.5, True)),      # the budget runs out first
    (-3.0, (0.0, True)),       # spent: the hook stops the run next step
])
def test_eta_is_the_sooner_of_the_last_step_and_the_budgets_end(budget_left,
                                                                 expected):
  """A budget run's ETA is its budget's end, not --num_train_steps's (a
  budget run sets a step count it will never reach)."""
  assert throughput.eta_seconds(60, 100, 1.0, budget_left) == expected
  assert throughput.eta_seconds(100, 100, 1.0, budget_left)[0] == 0.0
