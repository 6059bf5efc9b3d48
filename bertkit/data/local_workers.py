# coding=utf-8
"""Sharded mode's local engine: forked worker processes, one pipe each.

Each worker is fed its tasks (`shard_task.make_shard`) through its own pipe
(a Dask LocalCluster cost more to start than a whole job on a 4 MB corpus,
docs/benchmarks_data.md); a worker that dies ends the run with one line
naming its shard.
"""

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
import traceback

from bertkit.common import errors
from bertkit.data import shard_task

# How often workers report progress (and check that the parent is alive).
PROGRESS_INTERVAL_SECONDS = 0.5


class _Reporter(object):
  """Accumulates a worker's progress and sends it to the parent now and then.

  Also stops the worker if the parent died (a killed parent cannot stop its
  workers, which would otherwise run on as orphans).
  """

  def __init__(self, connection, parent_pid):
    self._connection = connection
    self._parent_pid = parent_pid
    self._pending = [0, 0]
    self._last_sent = time.monotonic()

  def __call__(self, work, num_instances):
    pending = self._pending
    pending[0] += work
    pending[1] += num_instances
    if time.monotonic() - self._last_sent >= PROGRESS_INTERVAL_SECONDS:
      self.flush()

  def flush(self):
    if os.getppid() != self._parent_pid:
      raise SystemExit("parent process died")
    if any(self._pending):
      self._connection.send(("progress",) + tuple(self._pending))
      self._pending = [0, 0]
    self._last_sent = time.monotonic()


def set_worker_signals():
  """A local worker's signal dispositions (see `_local_worker`)."""
  # Ctrl-C goes to the whole process group: the parent alone handles it.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  # The parent stops workers with SIGTERM, whose default action ends the
  # process in the kernel whatever it is doing. A Python handler would run
  # only in the main thread between bytecodes: a SIGTERM landing on another
  # thread, or just before the main thread blocks, would never be handled.
  signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _local_worker(settings, connection, parent_pid, make=None):
  """A local worker process: makes the shards it is sent until sent None.

  Each task is answered on `connection` by ("progress", work, instances)
  messages, then ("done", shard_task.ShardResult) or ("error", exception,
  traceback).
  A worker shares no lock with anyone, so it can be stopped or killed (the
  parent's SIGTERM, the kernel's out-of-memory killer) at any moment without
  blocking the parent; the partial file of a task it was making is removed
  by the parent (`sharded_mode`).
  """
  set_worker_signals()
  report = _Reporter(connection, parent_pid)
  while True:
    while not connection.poll(PROGRESS_INTERVAL_SECONDS):
      if os.getppid() != parent_pid:
        return
    task = connection.recv()
    if task is None:
      return
    try:
      result = (make or shard_task.make_shard)(settings, task, report)
      report.flush()
    except Exception as e:  # pylint: disable=broad-except
      connection.send(("error", _picklable(e), traceback.format_exc()))
    else:
      connection.send(("done", result))


def _picklable(exception):
  """`exception`, or a RuntimeError with its text if it cannot be pickled."""
  try:
    pickle.loads(pickle.dumps(exception))
    return exception
  except Exception:  # pylint: disable=broad-except
    return RuntimeError("%s: %s" % (type(exception).__name__, exception))


class WorkerTraceback(Exception):
  """The traceback of an exception raised in a local worker, as its cause."""


def _worker_died(process, shard_index):
  """The error for a worker that died while making `shard_index` (reaped)."""
  process.join()
  if process.exitcode < 0:
    how = "was killed by %s" % signal.Signals(-process.exitcode).name
    if process.exitcode == -signal.SIGKILL:
      how += " (out of memory?)"
  else:
    how = "exited with code %s" % process.exitcode
  return errors.TrainingFailed(
      "a local worker (pid %d) %s while making shard %d; complete shards are "
      "kept: rerun the same command to make the rest" % (
          process.pid, how, shard_index))


def _receive(connection, process, task, ready):
  """The worker's next message, None if it has none yet.

  Raises:
    errors.TrainingFailed: the worker died (its pipe ended, or its process
      sentinel is in `ready` with nothing left to read).
  """
  if connection.poll():
    try:
      return connection.recv()
    except EOFError:
      pass
  elif process.sentinel not in ready:
    return None
  raise _worker_died(process, task[0])


def _send_task(running, connection, process, task):
  """Sends `task` to a worker and records it in `running`."""
  running[connection] = (process, task)
  try:
    connection.send(task)
  except OSError:  # The worker died since its last message.
    raise _worker_died(process, task[0]) from None


def run_local(settings, tasks, num_workers, progress, make=None):
  """The local engine: `shard_task.make_shard` (or `make`) over `tasks` in
  workers.

  On any exception (a worker's UserError, KeyboardInterrupt, a worker that
  died) every worker is stopped before it propagates.

  Args:
    settings: the `shard_task.ShardSettings`.
    tasks: (shard index, pieces, output path) tuples; an iterable, taken
      one task at a time as workers are free (a stream of tasks is read no
      further ahead than the workers).
    num_workers: worker processes.
    progress: a `creation_progress.Progress`.
    make: function(settings, task, report) -> result, run in the workers
      (importable by name: spawned workers unpickle it); None:
      `shard_task.make_shard`.

  Yields:
    The `shard_task.ShardResult`s, in completion order.

  Raises:
    errors.TrainingFailed: a worker died (killed, out of memory).
    Whatever a task raised (errors.UserError on bad input).
  """
  # Forked workers start at once (no interpreter to start, nothing to
  # re-import): the program's process holds only the plan and the vocab
  # (~20 MB; neither TensorFlow nor numpy). A process that loaded TensorFlow
  # (a test, a notebook) has native threads that a fork could catch holding
  # a lock: spawn there.
  context = multiprocessing.get_context(
      "spawn" if "tensorflow" in sys.modules else "fork")
  todo = iter(tasks)
  workers = []  # (process, connection)
  running = {}  # connection -> (process, task)
  try:
    for _ in range(num_workers):
      task = next(todo, None)
      if task is None:
        break
      ours, theirs = context.Pipe()
      process = context.Process(target=_local_worker,
                                args=(settings, theirs, os.getpid(), make),
                                daemon=True)
      process.start()
      theirs.close()
      workers.append((process, ours))
      _send_task(running, ours, process, task)
    while running:
      ready = multiprocessing.connection.wait(
          list(running) + [process.sentinel for process, _ in running.values()])
      for connection, (process, task) in list(running.items()):
        message = _receive(connection, process, task, ready)
        while message is not None and message[0] == "progress":
          progress.add(*message[1:])
          message = _receive(connection, process, task, ready)
        if message is None:
          continue
        if message[0] == "error":
          _, exception, text = message
          raise exception from WorkerTraceback(text)
        task = next(todo, None)
        if task is not None:
          _send_task(running, connection, process, task)
        else:
          del running[connection]
        yield message[1]
    for _, connection in workers:
      with contextlib.suppress(OSError):  # A worker that died idle.
        connection.send(None)
  except BaseException:
    for process, _ in workers:
      if process.exitcode is None:
        process.terminate()
    raise
  finally:
    for process, connection in workers:
      process.join()
      connection.close()
