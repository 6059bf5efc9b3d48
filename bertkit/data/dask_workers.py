# coding=utf-8
"""Sharded mode's Dask engine: the workers of an existing Dask cluster.

A task whose worker died is rerun elsewhere by Dask (the rerun writes the
same bytes). The output directory must be the same path on every worker (a
shared file system).
"""

import concurrent.futures
import logging as std_logging
import os
import random

from absl import logging

from bertkit.common import errors
from bertkit.data import shard_plan
from bertkit.data import shard_task

# How long to try to reach a Dask scheduler, at the start and after losing it.
DASK_CONNECT_SECONDS = 10


def dask_task(settings, task):
  """shard_task.make_shard on a Dask worker (progress is counted per
  finished shard)."""
  return shard_task.make_shard(settings, task,
                               lambda work, num_instances: None)


def _quiet_dask_client_log(package_dir):
  """Drops the log records of distributed's code in this process.

  Its client logs each reconnection attempt with tracebacks (through the
  loggers of whatever module failed: distributed's, tornado's, asyncio's),
  which would bury the one line this program prints when the scheduler is
  lost.
  """
  std_logging.getLogger("distributed").setLevel(std_logging.CRITICAL)
  from_dask = lambda record: not record.pathname.startswith(package_dir)
  for handler in std_logging.getLogger().handlers:
    handler.addFilter(from_dask)


def connect_dask(address):
  """A distributed.Client of the scheduler at `address` (checked by
  `creation_options.check_dask_address`), its reconnection logs muted.

  Raises:
    errors.UserError: the scheduler cannot be reached.
  """
  import distributed  # pylint: disable=g-import-not-at-top
  _quiet_dask_client_log(os.path.dirname(distributed.__file__))
  try:
    return distributed.Client(address, timeout=DASK_CONNECT_SECONDS,
                              set_as_default=False)
  except (OSError, ValueError, TypeError) as e:
    raise errors.UserError(
        "--dask_scheduler=%s: cannot reach a Dask scheduler there (%s); "
        "expected the address `dask scheduler` prints, tcp://HOST:PORT" % (
            address, e)) from None


def _dask_result(future, address):
  """The `shard_task.ShardResult` of a finished Dask future, or its task's
  error.

  Raises:
    errors.UserError: the scheduler or workers cannot import this
      repository, or the task's own UserError.
  """
  try:
    return future.result()
  except ModuleNotFoundError as e:
    raise errors.UserError(
        "the Dask workers of %s cannot import %s: start them with this "
        "repository on PYTHONPATH" % (address, e.name)) from None
  except RuntimeError as e:
    # The scheduler unpickles each task, whose function lives here.
    if "deserialization of the task graph" not in str(e):
      raise
    raise errors.UserError(
        "the Dask scheduler at %s cannot import this repository's modules: "
        "start `dask scheduler` (and the workers) with this repository on "
        "PYTHONPATH" % address) from None


def _scheduler_alive(client):
  try:
    client.scheduler_info()
    client.run_on_scheduler(os.getpid)
    return True
  except Exception:  # pylint: disable=broad-except
    return False


def run_dask(settings, tasks, client, address, progress):
  """The Dask engine: `shard_task.make_shard` over `tasks` on a cluster.

  Every worker must import this repository (shard_task and what it
  imports), read the input at the same path or URL and write the output
  directory at the same path. A worker that dies mid-task: Dask reruns its
  tasks on the others (the rerun writes the same bytes).

  Args:
    settings: the `shard_task.ShardSettings` (sent to every worker once).
    tasks: (shard index, pieces, output path) tuples.
    client: the `distributed.Client` (`connect_dask`; closed by the
      caller).
    address: the scheduler, tcp://HOST:PORT, for the messages.
    progress: a `creation_progress.Progress`.

  Yields:
    The `shard_task.ShardResult`s, in completion order.

  Raises:
    errors.UserError: the workers cannot import this repository, or a
      task's input is bad.
    errors.TrainingFailed: the scheduler was lost during the run.
  """
  # pylint: disable=g-import-not-at-top
  import asyncio  # 6 MB: only for Dask's exceptions.
  import distributed
  futures = []
  try:
    logging.info("Dask scheduler %s: %d worker(s)", address,
                 len(client.scheduler_info()["workers"]))
    shared_settings = client.scatter(settings, broadcast=True, hash=False)
    run_id = "%016x" % random.getrandbits(64)
    futures = [client.submit(dask_task, shared_settings, task, pure=False,
                             key="shard-%05d-%s" % (task[0], run_id))
               for task in tasks]
    work = {f.key: shard_plan.shard_work(task[1], settings.dupe_factor)
            for f, task in zip(futures, tasks)}
    lost = errors.TrainingFailed(
        "lost the Dask scheduler at %s during the run; complete shard files "
        "are kept: rerun the same command (with a running scheduler, or "
        "--num_workers) to make the others" % address)
    try:
      for future in distributed.as_completed(futures, loop=client.loop):
        if future.status == "cancelled" or client.status != "running":
          raise lost
        result = _dask_result(future, address)
        progress.add(work[future.key], result.num_instances)
        yield result
    except (OSError, concurrent.futures.CancelledError, asyncio.CancelledError,
            asyncio.TimeoutError) as e:
      # A task's own OSError (a full disk) comes with a live scheduler.
      if client.status == "running" and _scheduler_alive(client):
        raise
      raise lost from e
  finally:
    if client.status == "running":
      client.cancel(futures)
