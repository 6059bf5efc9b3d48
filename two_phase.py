"""Steps and LAMB hyperparameters of one phase of two-phase pretraining.

Two-phase pretraining (You et al. 2019, arXiv:1904.00962): phase 1
trains on short sequences (128) for most of the steps, phase 2 on long ones
(512), starting from phase 1's weights with its own warm-up. A run whose
batch differs from the baseline's keeps the baseline's number of examples in
each phase (gluon-nlp's horovod BERT recipe):

  nsteps = baseline_batch * baseline_steps
           / (batch_per_gpu * gpus * accumulation)

The denominator is the global batch of one update (`--train_batch_size` of
run_pretraining.py). nsteps is rounded up: a phase never sees fewer examples
than the baseline's.

Unless given, the learning rate and the warm-up ratio follow the LAMB paper's
untuned rule for its global batch B, from which gluon-nlp's recipe picks its
own:

  learning_rate = 5e-3 * sqrt(B / 32768)   (0.00354 at 16K, 0.00125 at 2K)
  warmup_ratio  = 0.2 * B / 32768          (0.1 at 16K, 0.0125 at 2K)

Prints one line for scripts/run_two_phase.sh:

  train_batch_size=B num_train_steps=N num_warmup_steps=W learning_rate=LR

Usage:
  python two_phase.py --baseline_batch=512 --baseline_steps=900000 \\
      --batch_per_gpu=64 --num_gpus=8 --accumulation=1
"""

import collections
import dataclasses
import math
from typing import Optional

from bertkit.common import option_fields
from bertkit.common import programs
from bertkit.common.errors import UserError
from bertkit.common.option_fields import REQUIRED, option

LAMB_REFERENCE_BATCH = 32768
LAMB_REFERENCE_LEARNING_RATE = 5e-3
LAMB_REFERENCE_WARMUP_RATIO = 0.2

PhasePlan = collections.namedtuple(
    "PhasePlan", ["train_batch_size", "num_train_steps", "num_warmup_steps",
                  "learning_rate"])


def global_batch(batch_per_gpu, num_gpus, accumulation):
  """Examples per update: per-replica micro-batch x replicas x micro-batches."""
  return batch_per_gpu * num_gpus * accumulation


def phase_steps(baseline_batch, baseline_steps, batch_per_gpu, num_gpus,
                accumulation):
  """The baseline's examples at this run's global batch (gluon-nlp's rule).

  Args:
    baseline_batch: global batch of the baseline (LAMB paper: 512).
    baseline_steps: the baseline's steps in this phase (900k, then 100k).
    batch_per_gpu: examples per replica per micro-batch.
    num_gpus: replicas.
    accumulation: micro-batches per update (--num_accumulation_steps).

  Returns:
    The number of updates, rounded up.

  Raises:
    UserError: a value is not a positive integer.
  """
  for name, value in (("baseline_batch", baseline_batch),
                      ("baseline_steps", baseline_steps),
                      ("batch_per_gpu", batch_per_gpu),
                      ("num_gpus", num_gpus),
                      ("accumulation", accumulation)):
    if not isinstance(value, int) or value < 1:
      raise UserError("--%s must be a positive integer, got %r" %
                      (name, value))
  examples = baseline_batch * baseline_steps
  # Integer ceiling division: exact for any size, unlike float division.
  return -(-examples // global_batch(batch_per_gpu, num_gpus, accumulation))


def lamb_learning_rate(batch):
  """The LAMB paper's untuned learning rate for a global batch."""
  return LAMB_REFERENCE_LEARNING_RATE * math.sqrt(
      batch / float(LAMB_REFERENCE_BATCH))


def lamb_warmup_ratio(batch):
  """The LAMB paper's warm-up fraction of the steps for a global batch."""
  return LAMB_REFERENCE_WARMUP_RATIO * batch / float(LAMB_REFERENCE_BATCH)


def plan_phase(baseline_batch, baseline_steps, batch_per_gpu, num_gpus,
               accumulation, learning_rate=None, warmup_ratio=None):
  """Everything run_pretraining.py needs for one phase.

  Args:
    baseline_batch, baseline_steps, batch_per_gpu, num_gpus, accumulation:
      see phase_steps.
    learning_rate: peak rate, or None for lamb_learning_rate.
    warmup_ratio: warm-up steps / steps, or None for lamb_warmup_ratio.

  Returns:
    A PhasePlan; warm-up steps are rounded to the nearest step.

  Raises:
    UserError: a value is out of range.
  """
  steps = phase_steps(baseline_batch, baseline_steps, batch_per_gpu,
                      num_gpus, accumulation)
  batch = global_batch(batch_per_gpu, num_gpus, accumulation)
  if learning_rate is None:
    learning_rate = lamb_learning_rate(batch)
  if warmup_ratio is None:
    warmup_ratio = lamb_warmup_ratio(batch)
  if not learning_rate > 0:
    raise UserError("--learning_rate must be > 0, got %r" % learning_rate)
  if not 0 <= warmup_ratio <= 1:
    raise UserError("--warmup_ratio must be in [0, 1], got %r" %
                    warmup_ratio)
  return PhasePlan(train_batch_size=batch, num_train_steps=steps,
                   num_warmup_steps=int(math.floor(warmup_ratio * steps + 0.5)),
                   learning_rate=learning_rate)


def format_plan(plan):
  """The one-line `key=value ...` form printed for the shell script."""
  return ("train_batch_size=%d num_train_steps=%d num_warmup_steps=%d "
          "learning_rate=%.6g" % plan)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TwoPhaseOptions:
  """What two_phase.py is told: the baseline's phase, this run's batch."""
  baseline_batch: int = option(512, "Global batch of the baseline run.")
  baseline_steps: int = option(REQUIRED, "Steps of this phase in the "
                               "baseline run.")
  batch_per_gpu: int = option(REQUIRED, "Examples per replica per "
                              "micro-batch.")
  num_gpus: int = option(1, "Replicas (GPUs or CPU replicas).")
  accumulation: int = option(1, "Micro-batches per update "
                             "(--num_accumulation_steps).")
  learning_rate: Optional[float] = option(
      None, "Peak learning rate.", unset="the LAMB paper's rule")
  warmup_ratio: Optional[float] = option(
      None, "Warm-up fraction of the steps.", unset="the LAMB paper's rule")

  def __post_init__(self):
    option_fields.check_fields(self)


def run(opts):
  """The plan's line for scripts/run_two_phase.sh."""
  return format_plan(plan_phase(
      opts.baseline_batch, opts.baseline_steps, opts.batch_per_gpu,
      opts.num_gpus, opts.accumulation, opts.learning_rate,
      opts.warmup_ratio))


if __name__ == "__main__":
  programs.main(TwoPhaseOptions, run)
