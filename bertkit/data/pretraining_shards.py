# coding=utf-8
"""create_pretraining_data's sharded mode: corpora of any size, every core, a cluster.

Used when --num_workers, --output_dir or --dask_scheduler is given. The input
(local paths, globs, directories read recursively, or URLs through fsspec;
text, JSONL or Parquet: see corpus_input.py) is cut into shards: consecutive
small files are packed together, a large file is split into byte ranges
(moved to document boundaries when read; a compressed file stays whole). The
shard size comes from the input sizes alone (`plan_shard_bytes`): about
TARGET_NUM_SHARDS shards, none smaller than MIN_SHARD_BYTES nor larger than
--shard_size_mb, so a corpus of a few MB already keeps many workers busy, and
memory does not grow with the corpus. Nothing is read to plan but file sizes.
The plan never depends on the workers.

Each shard is one task, `make_shard`, run by one engine:
  * local (--num_workers=N, the default): N forked worker processes, each
    fed its tasks through its own pipe (a Dask LocalCluster cost more to
    start than this whole job on a 4 MB corpus, docs/benchmarks_data.md);
    a worker that dies ends the run with one line naming its shard;
  * Dask (--dask_scheduler=tcp://host:port): the workers of an existing Dask
    cluster; a task whose worker died is rerun elsewhere by Dask.
The task is the same in both: upstream's algorithm over the shard, as if it
were the whole corpus, drawing from its own
`random.Random(shard_seed(random_seed, shard_index))`, written by the worker
under a temporary name and renamed when complete; so:
  * random next-sentence segments come from documents of the same shard, and
    instances are shuffled within the shard (without next-sentence
    prediction, sequences cross the boundaries of the shard's documents
    only);
  * a document ends at the end of its file (faithful mode, like upstream,
    continues it into the next file when the file lacks a final blank line);
  * the output is deterministic whatever the engine and number of workers,
    and shard i's file depends only on its own input (flags, seed, shard
    index): it equals the faithful output for that text with
    --random_seed=shard_seed(...);
  * memory is bounded by the shard size, not by the corpus size or
    dupe_factor: a worker holds its shard's tokenized documents (about 3.5 x
    the shard's text) on top of ~50 MB of code (and, with the fast
    tokenizer, a word cache of at most 200k words), and spills the shard's
    records to a scratch file next to the output until it writes them
    shuffled (disk: about twice the shard's output while it is written);
  * one output file per shard, `<prefix>-00003-of-00012.tfrecord`, where
    the prefix is `<output_dir>/part`, or --output_file minus a `.tfrecord`
    suffix. run_pretraining.py reads them with a glob, e.g.
    --input_file='<output_dir>/*.tfrecord'. With Dask the output directory
    must be the same path on every worker (a shared file system);
  * a shard file gets its final name only once complete, and a rerun skips
    shards whose file exists (--resume, on by default).
    `<prefix>.manifest.json` records the inputs, flags and complete shards;
    resuming into an output whose inputs or flags differ is refused (use
    --noresume to start over);
  * workers never import TensorFlow: they stay small.
"""

import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import logging as std_logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import random
import signal
import sys
import time
import traceback
from typing import Optional
import zlib

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.data import corpus_input
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records

ShardPiece = corpus_input.ShardPiece


@dataclasses.dataclass(frozen=True)
class ShardedJob:
  """Where a sharded run writes its shards, and what makes them (flags).

  Attributes:
    output_file: the shards' prefix (a `.tfrecord` suffix is dropped), or
      None with `output_dir`.
    output_dir: directory for part-SSSSS-of-NNNNN.tfrecord, or None.
    num_workers: local worker processes (None: one per core); unused with
      `dask_scheduler`.
    shard_size_mb: the largest input size of a shard, in MB (1e6 bytes).
    resume: skip shards whose output file exists.
    dask_scheduler: tcp://HOST:PORT of a Dask scheduler to run the shards
      on, or None for local workers.
  """
  output_file: Optional[str] = None
  output_dir: Optional[str] = None
  num_workers: Optional[int] = None
  shard_size_mb: float = 16.0
  resume: bool = True
  dask_scheduler: Optional[str] = None


ShardSettings = collections.namedtuple("ShardSettings", [
    "vocab", "do_lower_case", "tokenizer_backend", "params", "random_seed",
    "dupe_factor", "text_field", "max_sequences_per_pack"
], defaults=(corpus_input.DEFAULT_TEXT_FIELD, None))
ShardSettings.__doc__ = """What every worker needs to turn a shard into records.

Attributes:
  vocab: token -> id mapping (already checked).
  do_lower_case, tokenizer_backend, params, random_seed, dupe_factor,
    text_field: the flag values.
  max_sequences_per_pack: pack each shard's instances, at most this many to
    a row (None: one instance per record).
"""

ShardResult = collections.namedtuple(
    "ShardResult", ["index", "num_documents", "num_instances"])

ShardedOutput = collections.namedtuple(
    "ShardedOutput", ["paths", "pattern", "num_instances"])
ShardedOutput.__doc__ = """What a sharded run leaves.

Attributes:
  paths: every shard file, in shard order (including ones a resumed run
    skipped).
  pattern: a glob matching exactly them (for run_pretraining --input_file).
  num_instances: instances written by this run.
"""

SHARD_NAME_FORMAT = "%s-%05d-of-%05d.tfrecord"
DEFAULT_OUTPUT_BASENAME = "part"
MANIFEST_FORMAT_VERSION = 2
# Shard planning (see plan_shard_bytes): enough shards to keep the cores of
# a large machine busy and to balance the load, but none so small that its
# next-sentence negatives come from a handful of documents.
TARGET_NUM_SHARDS = 32
MIN_SHARD_BYTES = 250000
# How often workers report progress (and check that the parent is alive),
# and the client rewrites the manifest's list of complete shards.
PROGRESS_INTERVAL_SECONDS = 0.5
# How long to try to reach a Dask scheduler, at the start and after losing it.
DASK_CONNECT_SECONDS = 10


def shard_seed(random_seed, shard_index):
  """The seed of shard `shard_index`'s `random.Random`: a 64-bit int.

  Derived through a hash (`random.Random` seeds from a str via SHA-512, the
  same on every platform and Python 3 version), so that different
  (random_seed, shard_index) pairs do not collide as random_seed +
  shard_index would.
  """
  return random.Random("%d:%d" % (random_seed, shard_index)).getrandbits(64)


def shard_paths(prefix, num_shards):
  """The final output paths of the shards, in shard order."""
  return [SHARD_NAME_FORMAT % (prefix, i, num_shards)
          for i in range(num_shards)]


def shard_pattern(prefix, num_shards):
  """The glob of the shard files (prefix-*-of-NNNNN.tfrecord)."""
  return "%s-*-of-%05d.tfrecord" % (prefix, num_shards)


def output_prefix(output_file, output_dir):
  """The shard file prefix from --output_file or --output_dir.

  Raises:
    errors.UserError: both or neither are given, or --output_file is a list.
  """
  if bool(output_file) == bool(output_dir):
    raise errors.UserError(
        "sharded mode needs exactly one of --output_dir (shards go to "
        "<output_dir>/part-SSSSS-of-NNNNN.tfrecord) or --output_file (used as "
        "the shards' prefix); got %s" % (
            "both" if output_file else "neither"))
  if output_dir:
    return os.path.join(output_dir, DEFAULT_OUTPUT_BASENAME)
  if "," in output_file:
    raise errors.UserError(
        "--output_file=%s: sharded mode writes one file per shard, named "
        "from a single prefix; give one path (or --output_dir)" % output_file)
  root, extension = os.path.splitext(output_file)
  return root if extension == ".tfrecord" else output_file


def plan_shard_bytes(total_bytes, max_shard_bytes):
  """The shard size for a corpus: from its size, at most `max_shard_bytes`.

  About TARGET_NUM_SHARDS shards, but none under MIN_SHARD_BYTES (unless
  --shard_size_mb asks for less): a 4 MB corpus gets 16 shards of 250 KB, a
  40 MB one 32 of 1.25 MB, a 1 GB one 64 of 16 MB (the default
  --shard_size_mb). Independent of --num_workers, so that the output is too.

  Args:
    total_bytes: size of the whole input.
    max_shard_bytes: --shard_size_mb in bytes.

  Returns:
    The target shard size in bytes (>= 1).
  """
  wanted = max(MIN_SHARD_BYTES, -(-total_bytes // TARGET_NUM_SHARDS))
  return max(1, min(max_shard_bytes, wanted))


def plan_shards(files, shard_bytes):
  """Cuts the input into shards of about `shard_bytes` bytes.

  Consecutive files smaller than `shard_bytes` are packed into one shard; a
  larger file gets ceil(size / shard_bytes) shards of equal byte ranges
  (unless compressed: one shard). The plan depends only on the files and
  `shard_bytes`, never on the number of workers.

  Args:
    files: list of `corpus_input.InputFile`s, in order.
    shard_bytes: target shard size in bytes (> 0).

  Returns:
    A list of shards, each a tuple of `ShardPiece`s read in order.
  """
  shards = []
  pack = []
  pack_bytes = 0
  for path, size, file_format in files:
    if size > shard_bytes and corpus_input.is_splittable(path):
      if pack:
        shards.append(tuple(pack))
        pack, pack_bytes = [], 0
      num_chunks = -(-size // shard_bytes)
      bounds = [size * i // num_chunks for i in range(num_chunks + 1)]
      shards.extend((ShardPiece(path, start, end, file_format),)
                    for start, end in zip(bounds, bounds[1:]))
      continue
    if pack and pack_bytes + size > shard_bytes:
      shards.append(tuple(pack))
      pack, pack_bytes = [], 0
    pack.append(ShardPiece(path, 0, size, file_format))
    pack_bytes += size
  if pack:
    shards.append(tuple(pack))
  return shards


# What a worker builds once for the run's settings (the tokenizer, ...):
# the settings it was built for, and the tools.
_tools = {}


def _shard_tools(settings):
  """The tokenize function for `settings`, built once per worker process.

  Returns:
    text -> list of token codes (see pretraining_instances.make_encoder).
  """
  if _tools.get("settings") is not settings:
    pretraining_records.load_numpy()
    tokenizer = pretraining_instances.make_tokenizer(
        settings.vocab, settings.do_lower_case, settings.tokenizer_backend)
    codes = pretraining_instances.make_encoder(settings.vocab,
                                               settings.params).token_codes
    tokenize_to_ids = tokenizer.tokenize_to_ids
    _tools.clear()
    _tools.update(settings=settings,
                  tokenize=lambda text: [codes[i] for i in
                                         tokenize_to_ids(text)])
  return _tools["tokenize"]


def make_shard(settings, task, report):
  """The task of every engine: one shard's records, written to its file.

  The file is written under a temporary name and renamed when complete
  (pretraining_instances.write_instances), so that a worker killed mid-task
  leaves at most a `*.partial-*` file, never a truncated shard.

  Args:
    settings: the run's `ShardSettings`.
    task: (shard index, tuple of `ShardPiece`s, output path).
    report: called as report(work, num_instances) as the work progresses.

  Returns:
    A `ShardResult`.

  Raises:
    errors.UserError: the shard's input is unreadable or malformed.
  """
  shard_index, pieces, output_path = task
  documents = corpus_input.read_documents(
      pieces, _shard_tools(settings), report, settings.text_field)
  num_documents = len(documents)
  num_instances = pretraining_instances.write_instances(
      documents, random.Random(shard_seed(settings.random_seed, shard_index)),
      settings.vocab, settings.params, settings.dupe_factor, [output_path],
      report, pass_work=sum(p.end - p.start for p in pieces),
      max_sequences_per_pack=settings.max_sequences_per_pack)
  return ShardResult(shard_index, num_documents, num_instances)


def shard_work(pieces, dupe_factor):
  """The progress units of a shard: its bytes, once read and per pass."""
  return sum(p.end - p.start for p in pieces) * (1 + dupe_factor)


# ------------------------------------------------------------ local ----


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


def _local_worker(settings, connection, parent_pid):
  """A local worker process: makes the shards it is sent until sent None.

  Each task is answered on `connection` by ("progress", work, instances)
  messages, then ("done", ShardResult) or ("error", exception, traceback).
  A worker shares no lock with anyone, so it can be stopped or killed (the
  parent's SIGTERM, the kernel's out-of-memory killer) at any moment without
  blocking the parent; the partial file of a task it was making is removed
  by the parent (`_make_shards`).
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
      result = make_shard(settings, task, report)
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


def run_local(settings, tasks, num_workers, progress):
  """The local engine: `make_shard` over `tasks` in worker processes.

  On any exception (a worker's UserError, KeyboardInterrupt, a worker that
  died) every worker is stopped before it propagates.

  Args:
    settings: the `ShardSettings`.
    tasks: (shard index, pieces, output path) tuples.
    num_workers: worker processes.
    progress: a `pretraining_instances.Progress`.

  Yields:
    The `ShardResult`s, in completion order.

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
  todo = collections.deque(tasks)
  workers = []  # (process, connection)
  running = {}  # connection -> (process, task)
  try:
    for _ in range(min(num_workers, len(tasks))):
      ours, theirs = context.Pipe()
      process = context.Process(target=_local_worker,
                                args=(settings, theirs, os.getpid()),
                                daemon=True)
      process.start()
      theirs.close()
      workers.append((process, ours))
      _send_task(running, ours, process, todo.popleft())
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
        if todo:
          _send_task(running, connection, process, todo.popleft())
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


# ------------------------------------------------------------- Dask ----


def dask_task(settings, task):
  """make_shard on a Dask worker (progress is counted per finished shard)."""
  return make_shard(settings, task, lambda work, num_instances: None)


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


def check_dask_address(address):
  """Refuses a --dask_scheduler that is not a TCP address with a port.

  Checked before connecting: distributed's Client, given such an address,
  fails only after starting, and then spends 20 s and a traceback closing
  at exit.

  Args:
    address: the flag's value: tcp://HOST:PORT (or HOST:PORT).

  Raises:
    errors.UserError: another protocol, no host, or no port number.
  """
  expected = "expected the address `dask scheduler` prints, tcp://HOST:PORT"
  scheme, has_scheme, location = address.partition("://")
  if has_scheme and scheme != "tcp":
    raise errors.UserError(
        "--dask_scheduler=%s: a Dask scheduler does not speak %s://; %s" % (
            address, scheme, expected))
  host, has_port, port = (location if has_scheme else address).rpartition(":")
  if not has_port or not host:
    raise errors.UserError("--dask_scheduler=%r has no %s; %s" % (
        address, "port" if host or not has_port else "host", expected))
  if not port.isdigit() or not 0 < int(port) < 65536:
    raise errors.UserError(
        "--dask_scheduler=%s: the port %r is not a number from 1 to 65535; "
        "%s" % (address, port, expected))


def _connect_dask(address):
  """A distributed.Client of the scheduler at `address` (checked by
  `check_dask_address`), its reconnection logs muted.

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
  """The `ShardResult` of a finished Dask future, or its task's error.

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
  """The Dask engine: `make_shard` over `tasks` on a Dask cluster.

  Every worker must import this repository (pretraining_shards and what it
  imports), read the input at the same path or URL and write the output
  directory at the same path. A worker that dies mid-task: Dask reruns its
  tasks on the others (the rerun writes the same bytes).

  Args:
    settings: the `ShardSettings` (sent to every worker once).
    tasks: (shard index, pieces, output path) tuples.
    client: the `distributed.Client` (`_connect_dask`; closed by the
      caller).
    address: the scheduler, tcp://HOST:PORT, for the messages.
    progress: a `pretraining_instances.Progress`.

  Yields:
    The `ShardResult`s, in completion order.

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
    work = {f.key: shard_work(task[1], settings.dupe_factor)
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


def _manifest(settings, shards, shard_bytes):
  """What a run's shard files depend on (inputs and flags), as JSON data.

  The written manifest also lists the complete shards ("complete", see
  `CompletedShards`), which is not part of what a run depends on.
  """
  vocab_text = "\n".join("%s\t%d" % item for item in settings.vocab.items())
  manifest = {
      "format": MANIFEST_FORMAT_VERSION,
      "vocab_crc32": zlib.crc32(vocab_text.encode("utf-8")),
      "do_lower_case": settings.do_lower_case,
      "params": settings.params._asdict(),
      "random_seed": settings.random_seed,
      "dupe_factor": settings.dupe_factor,
      "text_field": settings.text_field,
      "shard_bytes": shard_bytes,
      "shards": [[list(piece) for piece in pieces] for pieces in shards],
  }
  if settings.max_sequences_per_pack is not None:
    manifest["max_sequences_per_pack"] = settings.max_sequences_per_pack
  return manifest


def _read_json(path):
  try:
    with open(path) as f:
      return json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as e:
    raise errors.UserError("cannot read %s: %s" % (path, e)) from None


def remove_partial_files(prefix):
  """Deletes the temporary files of shards of `prefix` (of stopped runs)."""
  atomic_io.remove_stale_partials(os.path.dirname(prefix) or ".",
                                  os.path.basename(prefix) + "-")


def prepare_output(prefix, manifest, resume):
  """Checks/writes the manifest and lists the shards still to make.

  Args:
    prefix: the shard file prefix.
    manifest: this run's manifest (`_manifest`).
    resume: the --resume value.

  Returns:
    The indices of the shards to make.

  Raises:
    errors.UserError: the output directory is missing or not writable, or
      resuming into the output of a run with other inputs or flags.
  """
  directory = os.path.dirname(prefix) or "."
  if not os.path.isdir(directory):
    raise errors.UserError("output directory %s does not exist" % directory)
  manifest_path = prefix + ".manifest.json"
  previous = _read_json(manifest_path)
  if previous is not None:
    previous.pop("complete", None)
  if previous is not None and previous != manifest:
    if resume:
      raise errors.UserError(
          "%s belongs to a run with other input files or flags; resuming it "
          "would mix their shards. Use another --output_dir/--output_file, or "
          "--noresume to replace its shards" % manifest_path)
    for path in shard_paths(prefix, len(previous.get("shards", []))):
      if os.path.exists(path):
        os.remove(path)
  remove_partial_files(prefix)  # Left by a killed run.
  paths = shard_paths(prefix, len(manifest["shards"]))
  complete = [i for i, path in enumerate(paths)
              if resume and os.path.exists(path)]
  try:
    write_manifest(manifest_path, manifest, complete)
  except OSError as e:
    raise errors.UserError("cannot write to output directory %s: %s" % (
        directory, e.strerror)) from None
  return [i for i in range(len(paths)) if i not in set(complete)]


def write_manifest(path, manifest, complete):
  """Writes the manifest with the sorted list of complete shard indices."""
  with atomic_io.atomic_open(path, "w") as f:
    json.dump(dict(manifest, complete=sorted(complete)), f, indent=1)


class CompletedShards(object):
  """Records complete shards in the manifest as their results arrive.

  A shard's file is complete as soon as it has its final name (that is what
  a rerun checks); the manifest's list says the same for whoever watches a
  run, rewritten at most every PROGRESS_INTERVAL_SECONDS and at the end.
  """

  def __init__(self, path, manifest, complete):
    self._path = path
    self._manifest = manifest
    self._complete = set(complete)
    self._written = time.monotonic()

  def add(self, index):
    self._complete.add(index)
    if time.monotonic() - self._written >= PROGRESS_INTERVAL_SECONDS:
      self.write()

  def write(self):
    write_manifest(self._path, self._manifest, self._complete)
    self._written = time.monotonic()


def _check_job(job):
  """Checks the job's values, before anything is read or written.

  Returns:
    (local workers, the shard file prefix).

  Raises:
    errors.UserError: a value is out of range, the output is not one of
      --output_file and --output_dir or is a URL, or --dask_scheduler is
      not an address.
  """
  num_workers = job.num_workers
  if num_workers is None:
    num_workers = os.cpu_count() or 1
  if num_workers < 1:
    raise errors.UserError("--num_workers=%d must be at least 1" % num_workers)
  if not job.shard_size_mb > 0:
    raise errors.UserError(
        "--shard_size_mb=%r must be positive" % job.shard_size_mb)
  prefix = output_prefix(job.output_file, job.output_dir)
  if atomic_io.is_url(prefix):
    raise errors.UserError(
        "--%s=%s is a URL, but sharded mode writes its shards to a local or "
        "mounted directory (with Dask, one every worker sees); write them "
        "there and copy them to %s" % (
            "output_dir" if job.output_dir else "output_file",
            job.output_dir or job.output_file,
            job.output_dir or os.path.dirname(job.output_file)))
  if job.dask_scheduler is not None:
    check_dask_address(job.dask_scheduler)
  return num_workers, prefix


def _create_output_dir(output_dir):
  """Creates --output_dir and its missing parents.

  Returns:
    The outermost directory this created (to remove if the run leaves
    nothing in it), or None.

  Raises:
    errors.UserError: it cannot be created.
  """
  if not output_dir:
    return None
  created = None
  path = os.path.abspath(output_dir)
  while not os.path.exists(path):
    created, path = path, os.path.dirname(path)
  try:
    os.makedirs(output_dir, exist_ok=True)
  except OSError as e:
    raise errors.UserError("cannot create --output_dir %s: %s" % (
        output_dir, e.strerror)) from None
  return created


def _remove_created_dirs(directory, created):
  """Removes `directory` and its parents up to `created` (from
  `_create_output_dir`; None: nothing), those that are empty."""
  if created is None:
    return
  directory = os.path.abspath(directory)
  with contextlib.suppress(OSError):  # Not empty: someone else's files.
    while True:
      os.rmdir(directory)
      if directory == created:
        return
      directory = os.path.dirname(directory)


def _discard_output(prefix, paths, created):
  """Removes what a run that made no usable shard wrote: the shard files
  `paths`, their temporary files, the manifest, and the directories it
  created."""
  for path in paths + [prefix + ".manifest.json"]:
    if os.path.exists(path):
      os.remove(path)
  remove_partial_files(prefix)
  _remove_created_dirs(os.path.dirname(prefix), created)


def _make_shards(settings, tasks, job, engine, completed, prefix):
  """Runs the `tasks` on the job's engine, shard files and manifest kept
  consistent however the run ends.

  Args:
    settings: the `ShardSettings`.
    tasks: (shard index, pieces, output path) of the shards to make.
    job: the `ShardedJob` (its dask_scheduler picks the engine).
    engine: the number of local workers, or the connected
      `distributed.Client` with --dask_scheduler.
    completed: the `CompletedShards` of the manifest.
    prefix: the shard file prefix.

  Returns:
    (the `ShardResult`s in completion order, the closed
    `pretraining_instances.Progress`).
  """
  progress = pretraining_instances.Progress(
      sys.stderr, sum(shard_work(pieces, settings.dupe_factor)
                      for _, pieces, _ in tasks), num_shards=len(tasks))
  if job.dask_scheduler is not None:
    results = run_dask(settings, tasks, engine, job.dask_scheduler, progress)
  else:
    results = run_local(settings, tasks, engine, progress)
  finished = []
  try:
    with contextlib.closing(results):
      for result in results:
        finished.append(result)
        completed.add(result.index)
        progress.shard_done()
  except BaseException as e:
    completed.write()
    # Local workers are stopped by now. Dask workers that lost their
    # scheduler may still be writing: their files are complete or
    # temporary, and a rerun removes the temporary ones.
    if job.dask_scheduler is None or not isinstance(e, errors.TrainingFailed):
      remove_partial_files(prefix)
    raise
  completed.write()
  # Left by workers that died mid-task (their shards were made again).
  remove_partial_files(prefix)
  progress.close()
  return finished, progress


def _plan_job(corpus, recipe, shard_size_mb):
  """Reads the vocab and lists the input: what the shards are made of.

  Returns:
    (the `ShardSettings`, the number of input files, the shards as
    `plan_shards` gives them, the shard size in bytes).

  Raises:
    errors.UserError: the vocab or an input item is unusable.
  """
  vocab = pretraining_instances.load_checked_vocab(recipe.vocab_file)
  files = corpus_input.expand_corpus(corpus)
  shard_bytes = plan_shard_bytes(sum(f.size for f in files),
                                 max(1, int(shard_size_mb * 1e6)))
  settings = ShardSettings(vocab, recipe.do_lower_case,
                           recipe.tokenizer_backend, recipe.params,
                           recipe.random_seed, recipe.dupe_factor,
                           corpus.text_field, recipe.max_sequences_per_pack)
  return settings, len(files), plan_shards(files, shard_bytes), shard_bytes


def run_sharded(corpus, recipe, job):
  """Sharded mode: see the module docstring.

  Everything that can be checked (flags, vocab, inputs, the Dask
  scheduler) is before the output directory or the manifest is written; a
  run that ends on bad input before any shard is complete, or finds no
  usable document, leaves no output.

  Args:
    corpus: the `corpus_input.Corpus` (its directories are read).
    recipe: the `pretraining_instances.RecordRecipe`; its random_seed is
      the base of every shard's seed (`shard_seed`).
    job: the `ShardedJob`.

  Returns:
    A `ShardedOutput`.

  Raises:
    errors.UserError: on bad input.
    errors.TrainingFailed: the Dask scheduler was lost mid-run.
  """
  pretraining_instances.validate_params(recipe.params, recipe.dupe_factor)
  num_workers, prefix = _check_job(job)
  settings, num_files, shards, shard_bytes = _plan_job(corpus, recipe,
                                                        job.shard_size_mb)
  paths = shard_paths(prefix, len(shards))
  pattern = shard_pattern(prefix, len(shards))
  with contextlib.ExitStack() as stack:
    engine = num_workers
    if job.dask_scheduler is not None:
      engine = stack.enter_context(_connect_dask(job.dask_scheduler))
    created = _create_output_dir(job.output_dir)
    manifest = _manifest(settings, shards, shard_bytes)
    try:
      todo = prepare_output(prefix, manifest, job.resume)
    except errors.UserError:
      _remove_created_dirs(os.path.dirname(prefix), created)
      raise
    logging.info("%d input file(s), %d shard(s) of <= %.2f MB; %d to make, "
                 "%d already complete; %s", num_files, len(shards),
                 shard_bytes / 1e6, len(todo), len(shards) - len(todo),
                 "Dask scheduler %s" % job.dask_scheduler
                 if job.dask_scheduler is not None else
                 "%d local worker(s)" % min(num_workers, max(len(todo), 1)))
    if not todo:
      return ShardedOutput(paths, pattern, 0)
    completed = CompletedShards(prefix + ".manifest.json", manifest,
                                set(range(len(shards))) - set(todo))
    try:
      finished, progress = _make_shards(
          settings, [(i, shards[i], paths[i]) for i in todo], job, engine,
          completed, prefix)
    except errors.UserError:
      if not any(os.path.exists(path) for path in paths):
        _discard_output(prefix, [], created)
      raise
  for result in finished:
    if not result.num_documents:
      logging.warning("shard %d (%s) holds no usable document: its file "
                      "has no records", result.index, paths[result.index])
  if not any(r.num_documents for r in finished) and len(todo) == len(shards):
    # Empty shard files would pass for a finished run on the next one.
    _discard_output(prefix, paths, created)
    raise errors.UserError(
        "no usable document in --input_file %s: every line is empty or "
        "tokenizes to nothing" % corpus.input_file)
  logging.info("done: %s", progress.line())
  return ShardedOutput(paths, pattern, sum(r.num_instances for r in finished))
