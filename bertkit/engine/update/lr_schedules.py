"""Learning-rate schedules, in optimizer steps or in training seconds.

The one module of the learning rate's schedules: every training program's
update (gradient_update.py), upstream's `create_optimizer` among them, and
the PyTorch peer of benchmarks/time_to_accuracy.py follow them.

Every schedule warms up linearly from 0 to `learning_rate` (--learning_rate,
the rate at the end of warm-up) over the first `warmup` units, then:
  linear               upstream's decay: learning_rate * (1 - x / total), to
                       0 at `total` (upstream decays from x = 0, so the rate
                       drops to learning_rate * (1 - warmup / total) as
                       warm-up ends; kept for checkpoints' sake);
  warmup_stable_decay  holds learning_rate, then decays linearly to 0 over
                       the last `decay_proportion` of `total` (the
                       "trapezoid" of Cramming and of the WSD schedule);
  cosine               learning_rate * (1 + cos(pi * t)) / 2, t going from 0
                       at the end of warm-up to 1 at `total`.

x is the optimizer step, or with --train_time_budget_hours the training
seconds of training_clock.py (then `total` is the budget and `warmup` a
share of it): a schedule sized to a time budget, as in Izsak et al. and
Cramming. Past `total` the rate is 0.

A schedule can begin at `start` on x's axis instead of 0. A budget's
schedule begins at the training second of the run's first step: its clock
counts start-up (graph building, session start), and a warm-up of a small
budget's 2 % would otherwise be over before the first step. The rate still
reaches 0 at `total`, the budget's end.

`rate_at` is the formula in plain Python (tests, reports and the PyTorch
peer of benchmarks/time_to_accuracy.py use it); `rate_tensor` builds the
same on a tensor.
"""

import dataclasses
import math

from bertkit.common import options

# The --lr_schedule choices (common/options.py).
LINEAR = options.LINEAR
WARMUP_STABLE_DECAY = options.WARMUP_STABLE_DECAY
COSINE = options.COSINE
SCHEDULES = options.SCHEDULES
DEFAULT_DECAY_PROPORTION = options.DEFAULT_DECAY_PROPORTION


@dataclasses.dataclass(frozen=True)
class Schedule:
  """A learning-rate schedule.

  Attributes:
    kind: one of SCHEDULES.
    learning_rate: the rate at the end of warm-up (--learning_rate).
    total: where the rate reaches 0: steps, or seconds when `in_seconds`.
    warmup: warm-up length in the same unit (0: none).
    decay_proportion: warmup_stable_decay: the share of `total` the final
      decay takes.
    in_seconds: x is training seconds instead of the optimizer step.
  """
  kind: str
  learning_rate: float
  total: float
  warmup: float = 0.0
  decay_proportion: float = DEFAULT_DECAY_PROPORTION
  in_seconds: bool = False

  def __post_init__(self):
    if self.kind not in SCHEDULES:
      raise ValueError("Unknown learning-rate schedule %r; expected one of "
                       "%s" % (self.kind, ", ".join(SCHEDULES)))


def rate_at(schedule, x, start=0.0):
  """The learning rate at step (or training second) `x`, as a float, for a
  schedule beginning at `start` (see the module's docstring)."""
  x = x - start
  total = max(schedule.total - start, 1e-12)
  if schedule.warmup and x < schedule.warmup:
    return schedule.learning_rate * max(x, 0.0) / schedule.warmup
  progress = min(x, total)
  if schedule.kind == LINEAR:
    return schedule.learning_rate * (1.0 - progress / total)
  if schedule.kind == WARMUP_STABLE_DECAY:
    decay_start = total * (1.0 - schedule.decay_proportion)
    if progress <= decay_start:
      return schedule.learning_rate
    return (schedule.learning_rate * (total - progress) /
            (total - decay_start))
  span = max(total - schedule.warmup, 1e-12)
  t = min(max((progress - schedule.warmup) / span, 0.0), 1.0)
  return schedule.learning_rate * 0.5 * (1.0 + math.cos(math.pi * t))


def rate_tensor(schedule, x, start=0.0):
  """`rate_at` on a scalar tensor `x` (cast to float32); `start` a float or
  a float32 scalar tensor.

  Returns:
    A float32 scalar tensor.
  """
  # Here rather than at the top: the PyTorch peer of the time-to-accuracy
  # benchmark uses `rate_at` in a process without TensorFlow.
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  x = tf.cast(x, tf.float32) - start
  learning_rate = float(schedule.learning_rate)
  total = tf.maximum(float(schedule.total) - start, 1e-12)
  progress = tf.minimum(x, total)
  if schedule.kind == LINEAR:
    after = learning_rate * (1.0 - progress / total)
  elif schedule.kind == WARMUP_STABLE_DECAY:
    decay_start = total * (1.0 - schedule.decay_proportion)
    after = tf.where(progress <= decay_start, tf.constant(learning_rate),
                     learning_rate * (total - progress) /
                     tf.maximum(total - decay_start, 1e-12))
  else:
    span = tf.maximum(total - schedule.warmup, 1e-12)
    t = tf.clip_by_value((progress - schedule.warmup) / span, 0.0, 1.0)
    after = learning_rate * 0.5 * (1.0 + tf.cos(math.pi * t))
  if not schedule.warmup:
    return after
  return tf.where(
      x < schedule.warmup,
      learning_rate * tf.maximum(x, 0.0) / float(schedule.warmup), after)
