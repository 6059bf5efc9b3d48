"""Stopping training cleanly on SIGTERM or SIGINT (preemption, Ctrl-C).

Cloud preemption, Slurm and Kubernetes send SIGTERM (and a user's Ctrl-C
SIGINT) some seconds before they kill a job. While `catching_stop_signals` is
active, the first such signal only records a stop request: the step in flight
finishes, training_hooks.StopOnSignalHook ends training after it, and the
Estimator's CheckpointSaverHook writes a checkpoint of that step when the
session closes. A second signal ends the process at once.

With several processes (multi_worker, horovod) the processes must stop after
the SAME step, or the ones still training wait forever in the next
all-reduce. So every process also casts a vote in each step: the runner
makes one `StopVote` per run and hands it to the optimizer (inside a
distribution.Replicas) and to StopOnSignalHook. Its `cast` is 1 when this
process has a stop request, and it rides in the optimizer's batched gradient
all-reduce (optimizers.DataParallelOptimizer.all_reduce), so its sum over
all replicas arrives on every process at the same step, with the gradients,
at no extra collective. Its `record` keeps that sum for the hook; a positive
sum stops every process after that step.

The signal is read by a thread woken through signal.set_wakeup_fd, not by a
Python-level handler: Python runs those only between bytecodes of the main
thread, which sits inside session.run for the whole of a step, so a second
signal could not end the process "at once" otherwise.

Module state: the first stop signal received. The watcher thread writes it
(`catching_stop_signals` clears it on entry); `requested_signal` reads it,
for StopVote.cast, StopOnSignalHook, runner.train and `stop_message`. It is
module state because a signal reaches the process, not a run.
"""

import contextlib
import os
import signal
import sys
import threading

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_STATE = {"signum": None}
_LOCK = threading.Lock()


def signal_name(signum):
  return signal.Signals(signum).name


def requested_signal():
  """The first stop signal this process received, or None."""
  return _STATE["signum"]


def reset():
  """Forgets the stop request (a new training run in this process)."""
  with _LOCK:
    _STATE["signum"] = None


def _on_signal(signum):
  """Runs in the watcher thread for every stop signal received."""
  with _LOCK:
    first = _STATE["signum"] is None
    if first:
      _STATE["signum"] = signum
  if first:
    logging.warning(
        "%s received: finishing the step in flight, then writing a "
        "checkpoint of it and stopping (send it again to exit at once, "
        "without that checkpoint)", signal_name(signum))
    return
  print("stopped by a second %s: exiting at once without a checkpoint of the "
        "step in flight; rerun the same command to continue from the last "
        "checkpoint written" % signal_name(signum), file=sys.stderr,
        flush=True)
  os._exit(128 + signum)  # pylint: disable=protected-access


def _watch(read_fd):
  while True:
    try:
      data = os.read(read_fd, 64)
    except OSError:
      return
    if not data:
      return
    for signum in data:
      if signum in STOP_SIGNALS:
        _on_signal(signum)


@contextlib.contextmanager
def catching_stop_signals():
  """Within the block, SIGTERM/SIGINT request a stop instead of killing.

  Must be entered from the main thread. On leaving, the previous handlers
  come back (a signal after training, e.g. during evaluation, acts as before).
  """
  reset()
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  # A Python-level handler must be installed for the wakeup fd to be written;
  # it has nothing to do, the watcher thread acts.
  previous = {s: signal.signal(s, lambda signum, frame: None)
              for s in STOP_SIGNALS}
  previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  watcher = threading.Thread(target=_watch, args=(read_fd,), daemon=True,
                             name="stop-signal-watcher")
  watcher.start()
  try:
    yield
  finally:
    signal.set_wakeup_fd(previous_fd)
    for s, handler in previous.items():
      signal.signal(s, handler)
    os.close(write_fd)  # the watcher reads EOF and ends
    watcher.join(timeout=5)
    os.close(read_fd)


class StopVote(object):
  """One run's stop vote, summed over every process in each step.

  `agreed` turns True once a finished step's summed vote showed a stop
  request; StopOnSignalHook reads it.
  """

  def __init__(self):
    self.agreed = False

  def cast(self):
    """Scalar float32 tensor: 1 when this process was asked to stop, else 0.

    Read when the step runs; sum it over replicas with the gradients.
    """
    vote = tf.py_func(self._vote, [], tf.float32, stateful=True,
                      name="stop_vote")
    vote.set_shape([])
    return vote

  def record(self, total):
    """Keeps the summed vote of a step in `agreed`.

    Args:
      total: scalar float32, `cast()` summed over every replica.

    Returns:
      A tensor that the step's update must depend on, so that the vote is
      recorded by the time session.run of the step returns.
    """
    recorded = tf.py_func(self._record, [total], tf.float32, stateful=True,
                          name="record_stop_votes")
    recorded.set_shape([])
    return recorded

  @staticmethod
  def _vote():
    return np.float32(1.0 if requested_signal() is not None else 0.0)

  def _record(self, total):
    if total > 0:
      self.agreed = True
    return total


def stop_message(step, checkpoint, is_chief):
  """The one line a stopped process prints.

  Args:
    step: the global step training stopped at.
    checkpoint: basename of the checkpoint of that step (written by this
      process, or by the chief).
    is_chief: whether this process writes checkpoints.
  """
  signum = requested_signal()
  cause = ("stopped by %s" % signal_name(signum) if signum is not None else
           "stopped because another worker received a stop signal")
  written = "written" if is_chief else "written by the chief"
  return ("%s at step %d: checkpoint %s %s; rerun the same command to "
          "continue" % (cause, step, checkpoint, written))

