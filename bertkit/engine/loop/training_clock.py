"""The training clock: seconds spent training, evaluation left out.

Time to a given quality is measured in training seconds: the wall clock of
the process from its start, less the seconds held-out evaluation took, plus
what earlier runs of the same output directory spent up to the checkpoint
this run resumed from. `wall_seconds` counts the same way with evaluation
included. Both go with every evaluation to eval_history.jsonl
(evaluation.py) and drive `--train_time_budget_hours` (the learning-rate
schedule's progress and the stop, lr_schedules.py).

The chief records the clock of each checkpoint it writes in
`<output_dir>/training_clock.json`, so that a resumed run continues from
the clock of the checkpoint it restores: the work lost after that
checkpoint, redone by the resumed run, is counted once. With the clock goes
the training second of the run's first step, where a budget's
learning-rate schedule begins (lr_schedules.py), so that a resumed run does
not warm up again.
"""

import json
import os
import time

from bertkit.common import atomic_io

CLOCK_FILE = "training_clock.json"
# Checkpoint clocks kept in CLOCK_FILE (a few more than checkpoints kept).
_KEPT_ENTRIES = 50

# When this module was imported: a program imports the engine at its start,
# before TensorFlow builds anything, so per-run costs (graph building,
# session start, input warm-up) count as training time.
_PROCESS_START = time.time()


class TrainingClock:
  """Training and wall seconds of a run, continued across resumes.

  Attributes:
    excluded_seconds: seconds of this process left out of training time
      so far (evaluation).
  """

  def __init__(self, start=None, now=time.time):
    """Args:
      start: time.time() of the run's start; None: the process's start.
      now: the time source (tests inject one).
    """
    self._now = now
    self._start = _PROCESS_START if start is None else start
    self._base_train = 0.0
    self._base_wall = 0.0
    self._first_step = None
    self.excluded_seconds = 0.0

  def resume_from(self, train_seconds, wall_seconds, first_step=0.0):
    """Continues the clock of the checkpoint this run starts from.

    Args:
      train_seconds: the checkpoint's training seconds.
      wall_seconds: its wall seconds.
      first_step: the training second of the first run's first step (0 for
        a checkpoint recorded without it).
    """
    self._base_train = float(train_seconds)
    self._base_wall = float(wall_seconds)
    self._first_step = float(first_step)

  def checkpoint_entry(self):
    """What training_clock.json records for a checkpoint written now:
    resume_from's arguments (no first step before the first step, at the
    checkpoint of step 0)."""
    entry = [round(self.train_seconds(), 3), round(self.wall_seconds(), 3)]
    if self._first_step is not None:
      entry.append(round(self._first_step, 3))
    return entry

  def first_step_seconds(self):
    """The training second of the run's first step: the time of the first
    call in a fresh run (the train step calls it), the first run's in a
    resumed one."""
    if self._first_step is None:
      self._first_step = self.train_seconds()
    return self._first_step

  def wall_seconds(self):
    """Seconds since the run's first start, evaluation included."""
    return self._base_wall + self._now() - self._start

  def train_seconds(self):
    """Seconds spent training since the run's first start."""
    return (self._base_train + self._now() - self._start -
            self.excluded_seconds)

  def exclude(self, seconds):
    """Leaves `seconds` (just spent on something else) out of training."""
    self.excluded_seconds += seconds


def read_checkpoint_clock(output_dir, step):
  """The clock recorded for the checkpoint of `step`.

  Returns:
    [train_seconds, wall_seconds] or [train_seconds, wall_seconds,
    first_step_seconds] (TrainingClock.resume_from's arguments), or None
    when the directory has no clock for that step (a run started before the
    clock existed, or a fresh run).
  """
  entries = _read_entries(output_dir)
  return entries.get(str(step))


def record_checkpoint_clock(output_dir, step, clock):
  """Records the clock of the checkpoint of `step` (chief only)."""
  entries = _read_entries(output_dir)
  entries[str(step)] = clock.checkpoint_entry()
  kept = sorted(entries, key=int)[-_KEPT_ENTRIES:]
  with atomic_io.atomic_open(os.path.join(output_dir, CLOCK_FILE)) as f:
    json.dump({"checkpoints": {k: entries[k] for k in kept}}, f, indent=1)
    f.write("\n")


def _read_entries(output_dir):
  path = os.path.join(output_dir, CLOCK_FILE)
  if not atomic_io.exists(path):
    return {}
  with atomic_io.open_file(path) as f:
    return dict(json.load(f).get("checkpoints", {}))
