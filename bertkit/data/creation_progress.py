# coding=utf-8
"""The progress of a data creation run: a bar, or a log line now and then.

create_pretraining_data.py shows one `Progress` for the whole run, in both
modes: faithful mode counts the corpus read and each --dupe_factor pass of
pretraining_instances.write_instances, sharded mode each shard's work as the
workers report it (local_workers, dask_workers) and the shards done.
"""

import time

from absl import logging

# Seconds between progress lines when stderr is not a terminal.
LOG_INTERVAL_SECONDS = 30.0


class Progress(object):
  """Progress of a run: a bar on a terminal, a log line now and then otherwise.

  Work is counted in units of input bytes: reading a byte is one unit, and
  each --dupe_factor pass over a text's documents is as many units as the
  text has bytes, so the whole run is bytes x (1 + dupe_factor) units and
  the ETA follows from the rate so far.

  Args:
    stream: where the bar is drawn (stderr).
    total_work: units of the whole run.
    num_shards: shards of the run (0: faithful mode, no shard count shown).
  """

  def __init__(self, stream, total_work, num_shards=0):
    self._stream = stream
    self._is_tty = stream.isatty()
    self._total_work = max(total_work, 1)
    self._num_shards = num_shards
    self._work = 0
    self._instances = 0
    self._shards_done = 0
    self._start = time.monotonic()
    self._last_shown = self._start

  @property
  def instances(self):
    return self._instances

  def add(self, work, num_instances):
    self._work += work
    self._instances += num_instances
    self._show(force=False)

  def shard_done(self):
    self._shards_done += 1
    self._show(force=False)

  def line(self):
    """The progress numbers: done %, instances, instances/s, ETA."""
    elapsed = max(time.monotonic() - self._start, 1e-9)
    fraction = min(self._work / self._total_work, 1.0)
    if fraction > 0:
      eta = "%d:%02d" % divmod(int(elapsed * (1 - fraction) / fraction), 60)
    else:
      eta = "?"
    shards = ("shards %d/%d | " % (self._shards_done, self._num_shards)
              if self._num_shards else "")
    return ("%s%3.0f%% | %d instances | %.0f instances/s | elapsed %d:%02d | "
            "ETA %s" % (shards, 100 * fraction, self._instances,
                        self._instances / elapsed,
                        *divmod(int(elapsed), 60), eta))

  def _show(self, force):
    now = time.monotonic()
    interval = 0.2 if self._is_tty else LOG_INTERVAL_SECONDS
    if not force and now - self._last_shown < interval:
      return
    self._last_shown = now
    if self._is_tty:
      filled = int(20 * min(self._work / self._total_work, 1.0))
      self._stream.write("\r[%s%s] %s" % ("#" * filled, "." * (20 - filled),
                                          self.line()))
      self._stream.flush()
    else:
      logging.info("%s", self.line())

  def close(self):
    """Ends the bar (on a terminal)."""
    if self._is_tty:
      self._show(force=True)
      self._stream.write("\n")
      self._stream.flush()
