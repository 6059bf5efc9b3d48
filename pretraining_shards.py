# coding=utf-8
"""create_pretraining_data's sharded mode: corpora of any size, every core.

Used when --num_workers or --output_dir is given. The input (globs, comma
lists, directories, read recursively) is cut into shards: consecutive small
files are packed together, a large file is split into byte ranges that are
moved to document boundaries (blank lines). The shard size comes from the
corpus size (`plan_shard_bytes`): about TARGET_NUM_SHARDS shards, none
smaller than MIN_SHARD_BYTES nor larger than --shard_size_mb, so a corpus
of a few MB already keeps many workers busy, and memory does not grow with
the corpus. The plan never depends on --num_workers.

Each shard is processed by one of --num_workers processes with upstream's
algorithm, as if it were the whole corpus, drawing from its own
`random.Random(shard_seed(random_seed, shard_index))`; so:
  * random next-sentence segments come from documents of the same shard, and
    instances are shuffled within the shard;
  * a document ends at the end of its file (faithful mode, like upstream,
    continues it into the next file when the file lacks a final blank line);
  * the output is deterministic whatever --num_workers is, and shard i's
    file depends only on its own input (flags, seed, shard index): it equals
    the faithful output for that text with --random_seed=shard_seed(...);
  * memory is bounded by the shard size, not by the corpus size or
    dupe_factor: a worker holds its shard's tokenized documents (about 3.5 x
    the shard's text) on top of ~50 MB of code (and, with the fast
    tokenizer, a word cache of at most 200k words), and spills the shard's
    records to a scratch file next to the output until it writes them
    shuffled (disk: about twice the shard's output while it is written);
  * one output file per shard, `<prefix>-00003-of-00012.tfrecord`, where
    the prefix is `<output_dir>/part`, or --output_file minus a `.tfrecord`
    suffix. run_pretraining.py reads them with a glob, e.g.
    --input_file='<output_dir>/*.tfrecord';
  * a shard file gets its final name only once complete, and a rerun skips
    shards whose file exists (--resume, on by default). `<prefix>.manifest.json`
    records the inputs and flags; resuming into an output whose manifest
    differs is refused (use --noresume to start over);
  * local files only, and TensorFlow is never imported: workers stay small.
"""

import collections
import json
import multiprocessing
import os
import random
import signal
import sys
import time
import zlib

from absl import logging

import atomic_io
import errors
import file_patterns
import pretraining_instances
import pretraining_records

ShardPiece = collections.namedtuple("ShardPiece", ["path", "start", "end"])
ShardPiece.__doc__ = """The documents of `path` beginning in bytes [start, end).

A piece starting inside a file owns the documents after the first blank line
at or after `start`; it ends at the first blank line at or after `end` (the
next piece's start), so consecutive pieces cut a file exactly once at each
boundary and never split a document.
"""

ShardSettings = collections.namedtuple("ShardSettings", [
    "vocab", "do_lower_case", "tokenizer_backend", "params", "random_seed",
    "dupe_factor", "max_sequences_per_pack"
], defaults=(None,))
ShardSettings.__doc__ = """What every worker needs to turn a shard into records.

Attributes:
  vocab: token -> id mapping (already checked).
  do_lower_case, tokenizer_backend, params, random_seed, dupe_factor: the
    flag values.
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
MANIFEST_FORMAT_VERSION = 1
# Shard planning (see plan_shard_bytes): enough shards to keep the cores of
# a large machine busy and to balance the load, but none so small that its
# next-sentence negatives come from a handful of documents.
TARGET_NUM_SHARDS = 32
MIN_SHARD_BYTES = 250000
# How often workers report progress (and check that the parent is alive).
PROGRESS_INTERVAL_SECONDS = 0.5
# The shell's status for a command ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


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


def expand_sharded_inputs(input_file):
  """Expands --input_file for sharded mode: globs, lists, directories.

  Args:
    input_file: comma-separated files, globs (matches sorted) or
      directories (their non-hidden files, recursively, sorted).

  Returns:
    The list of (path, size in bytes), in order.

  Raises:
    errors.UserError: an item matches nothing, a directory holds no file,
      or a path is not local.
  """
  for pattern in file_patterns.split_file_list(input_file, "input_file"):
    if atomic_io.is_url(pattern):
      raise errors.UserError(
          "--input_file %s: sharded mode reads local files only; copy the "
          "corpus locally or use faithful mode (no --num_workers/--output_dir)"
          % pattern)
  paths = file_patterns.expand_file_patterns(input_file, read_directories=True)
  return [(path, os.path.getsize(path)) for path in paths]


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
  larger file gets ceil(size / shard_bytes) shards of equal byte ranges. The
  plan depends only on the files and `shard_bytes`, never on the number of
  workers.

  Args:
    files: list of (path, size), in order.
    shard_bytes: target shard size in bytes (> 0).

  Returns:
    A list of shards, each a tuple of `ShardPiece`s read in order.
  """
  shards = []
  pack = []
  pack_bytes = 0
  for path, size in files:
    if size > shard_bytes:
      if pack:
        shards.append(tuple(pack))
        pack, pack_bytes = [], 0
      num_chunks = -(-size // shard_bytes)
      bounds = [size * i // num_chunks for i in range(num_chunks + 1)]
      shards.extend((ShardPiece(path, start, end),)
                    for start, end in zip(bounds, bounds[1:]))
      continue
    if pack and pack_bytes + size > shard_bytes:
      shards.append(tuple(pack))
      pack, pack_bytes = [], 0
    pack.append(ShardPiece(path, 0, size))
    pack_bytes += size
  if pack:
    shards.append(tuple(pack))
  return shards


def _line_number(path, offset):
  """1-based number of the line that starts at byte `offset` of `path`."""
  count = 0
  with open(path, "rb") as f:
    remaining = offset
    while remaining > 0:
      block = f.read(min(remaining, 1 << 20))
      if not block:
        break
      count += block.count(b"\n")
      remaining -= len(block)
  return count + 1


def _decode_line(raw, path, line_start):
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise errors.UserError(
        "input file %s line %d is not valid UTF-8 (bad byte 0x%02x at byte "
        "%d of the line); expected UTF-8 text" % (
            path, _line_number(path, line_start), raw[e.start], e.start + 1)
    ) from None


def _is_blank(raw):
  # Lenient decoding: a bad line is reported by the piece that owns it.
  return not raw.decode("utf-8", "replace").strip()


def iter_piece_lines(piece):
  """Yields the stripped lines of the documents a `ShardPiece` owns.

  Args:
    piece: the `ShardPiece`.

  Yields:
    (stripped text, size of the line in bytes); an empty text is a document
    boundary.

  Raises:
    errors.UserError: a line is not valid UTF-8 (names file and line).
  """
  with open(piece.path, "rb") as f:
    offset = piece.start
    if piece.start > 0:
      # Move to the first line starting at or after `start`, then past the
      # first blank line from there: documents before it belong to the
      # previous piece.
      f.seek(piece.start - 1)
      offset += len(f.readline()) - 1
      for raw in f:
        line_start, offset = offset, offset + len(raw)
        if _is_blank(raw):
          break
      else:
        return
      if line_start >= piece.end:
        return
    for raw in f:
      line_start, offset = offset, offset + len(raw)
      line = _decode_line(raw, piece.path, line_start).strip()
      if not line and line_start >= piece.end:
        return
      yield line, len(raw)


def read_shard_documents(pieces, tokenize, report):
  """Reads and tokenizes the documents of a shard.

  As create_pretraining_data.read_documents, except that every piece (file)
  ends a document.

  Args:
    pieces: the shard's `ShardPiece`s.
    tokenize: text -> list of tokens (in any representation).
    report: called as report(num_bytes, 0) with the bytes read since its
      previous call.

  Returns:
    The non-empty documents: lists of segments (lists of tokens).
  """
  documents = []
  for piece in pieces:
    documents.append([])
    # Progress counts the piece's own bytes: the lines skipped at its start
    # are added at its end, those read past its end (to finish its last
    # document) are not, so that progress adds up to the input size.
    unreported = piece.end - piece.start
    for line, num_bytes in iter_piece_lines(piece):
      if not line:
        documents.append([])
      else:
        tokens = tokenize(line)
        if tokens:
          documents[-1].append(tokens)
      num_bytes = min(num_bytes, unreported)
      unreported -= num_bytes
      report(num_bytes, 0)
    report(unreported, 0)
  return [d for d in documents if d]


# The state of a worker process, set once by _init_worker.
_worker = {}


def _init_worker(settings, progress_queue, parent_pid):
  """Pool initializer: builds the tokenizer once per worker process."""
  # Ctrl-C goes to the whole process group: the parent alone handles it and
  # stops the workers with SIGTERM, which unwinds them (removing any
  # partial file) instead of killing them mid-write.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  # The pool's SIGTERM must reach this process's main thread. Delivered to a
  # native thread (OpenBLAS starts one when numpy is imported), only the C
  # part of the handler runs, and a main thread blocked on the task queue's
  # lock never wakes: the parent then waits for the worker forever. Threads
  # started while SIGTERM is blocked keep it blocked; a worker needs no BLAS
  # threads anyway.
  os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
  signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
  pretraining_records.load_numpy()
  tokenizer = pretraining_instances.make_tokenizer(
      settings.vocab, settings.do_lower_case, settings.tokenizer_backend)
  encoder = pretraining_instances.make_encoder(settings.vocab, settings.params)
  signal.signal(signal.SIGTERM, _exit_on_signal)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
  _worker.update(settings=settings, tokenizer=tokenizer,
                 token_codes=encoder.token_codes,
                 progress_queue=progress_queue, parent_pid=parent_pid)


def _exit_on_signal(signum, frame):
  """SIGTERM in a worker: unwind a running task, else leave at once.

  Inside make_shard the SystemExit unwinds the task, whose context managers
  remove its partial file. Anywhere else (idle, or already exiting when the
  pool is stopped) there is nothing to clean up, and a SystemExit raised in
  threading's or logging's shutdown would print a traceback.
  """
  del frame  # Unused.
  if _worker.get("in_task"):
    raise SystemExit(128 + signum)
  os._exit(128 + signum)  # pylint: disable=protected-access


class _Reporter(object):
  """Accumulates a worker's progress and sends it to the parent now and then.

  Also stops the worker if the parent died (a killed parent cannot stop its
  workers, which would otherwise run on as orphans).
  """

  def __init__(self, progress_queue, parent_pid):
    self._queue = progress_queue
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
      self._queue.put(tuple(self._pending))
      self._pending = [0, 0]
    self._last_sent = time.monotonic()


def make_shard(task):
  """Worker task: one shard's records, written to its output file.

  Args:
    task: (shard index, tuple of `ShardPiece`s, output path).

  Returns:
    A `ShardResult`.
  """
  _worker["in_task"] = True
  try:
    return _write_shard(task)
  finally:
    _worker["in_task"] = False


def _write_shard(task):
  """make_shard's work, while SIGTERM unwinds it (see _exit_on_signal)."""
  shard_index, pieces, output_path = task
  settings = _worker["settings"]
  report = _Reporter(_worker["progress_queue"], _worker["parent_pid"])
  tokenize_to_ids = _worker["tokenizer"].tokenize_to_ids
  codes = _worker["token_codes"]
  documents = read_shard_documents(
      pieces, lambda text: [codes[i] for i in tokenize_to_ids(text)], report)
  num_documents = len(documents)
  num_instances = pretraining_instances.write_instances(
      documents, random.Random(shard_seed(settings.random_seed, shard_index)),
      settings.vocab, settings.params, settings.dupe_factor, [output_path],
      report, pass_work=sum(p.end - p.start for p in pieces),
      max_sequences_per_pack=settings.max_sequences_per_pack)
  report.flush()
  return ShardResult(shard_index, num_documents, num_instances)


def _manifest(settings, shards, shard_bytes):
  """What a run's shard files depend on (inputs and flags), as JSON data."""
  vocab_text = "\n".join("%s\t%d" % item for item in settings.vocab.items())
  manifest = {
      "format": MANIFEST_FORMAT_VERSION,
      "vocab_crc32": zlib.crc32(vocab_text.encode("utf-8")),
      "do_lower_case": settings.do_lower_case,
      "params": settings.params._asdict(),
      "random_seed": settings.random_seed,
      "dupe_factor": settings.dupe_factor,
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
  try:
    with atomic_io.atomic_open(manifest_path, "w") as f:
      json.dump(manifest, f, indent=1)
  except OSError as e:
    raise errors.UserError("cannot write to output directory %s: %s" % (
        directory, e.strerror)) from None
  paths = shard_paths(prefix, len(manifest["shards"]))
  return [i for i, path in enumerate(paths)
          if not (resume and os.path.exists(path))]


def _run_pool(settings, tasks, num_workers, progress, prefix):
  """Runs `make_shard` over `tasks` in worker processes.

  On any exception (a worker's UserError, KeyboardInterrupt) the workers are
  stopped and the partial files of `prefix` removed before it propagates.

  Returns:
    The `ShardResult`s, in completion order.
  """
  # Forked workers start at once (no interpreter to start, nothing to
  # re-import) and need no resource-tracker process: the program's process
  # holds only the plan and the vocab (~20 MB; neither TensorFlow nor
  # numpy). A process that loaded TensorFlow (a test, a notebook) has
  # native threads that a fork could catch holding a lock: spawn there.
  context = multiprocessing.get_context(
      "spawn" if "tensorflow" in sys.modules else "fork")
  # A SimpleQueue writes synchronously: a worker's progress is in the pipe
  # before its result is sent.
  progress_queue = context.SimpleQueue()
  pool = context.Pool(min(num_workers, len(tasks)), initializer=_init_worker,
                      initargs=(settings, progress_queue, os.getpid()))
  results = []
  try:
    pending = pool.imap_unordered(make_shard, tasks)
    while len(results) < len(tasks):
      try:
        result = pending.next(timeout=0.1)
      except multiprocessing.TimeoutError:
        result = None
      while not progress_queue.empty():
        progress.add(*progress_queue.get())
      if result is not None:
        results.append(result)
        progress.shard_done()
    pool.close()
  except BaseException:
    pool.terminate()
    pool.join()
    remove_partial_files(prefix)
    raise
  pool.join()
  return results


def run_sharded(input_file, output_file, output_dir, vocab_file,
                do_lower_case, params, random_seed, dupe_factor,
                num_workers=None, shard_size_mb=16.0,
                tokenizer_backend="fast", resume=True,
                max_sequences_per_pack=None):
  """Sharded mode: see the module docstring.

  Args:
    input_file: comma-separated files, globs or directories.
    output_file: the shards' prefix (a `.tfrecord` suffix is dropped), or
      None with `output_dir`.
    output_dir: directory for part-SSSSS-of-NNNNN.tfrecord, or None.
    vocab_file: the vocab file.
    do_lower_case: lower-case the input (uncased models).
    params: an `InstanceParams`.
    random_seed: base of every shard's seed (`shard_seed`).
    dupe_factor: passes over each shard's documents.
    num_workers: worker processes (None: one per core).
    shard_size_mb: the largest input size of a shard, in MB (1e6 bytes).
    tokenizer_backend: "fast" or "python" (same tokens).
    resume: skip shards whose output file exists.
    max_sequences_per_pack: pack each shard's instances, at most this many
      to a row (None: one instance per record).

  Returns:
    A `ShardedOutput`.

  Raises:
    errors.UserError: on bad input.
  """
  pretraining_instances.validate_params(params, dupe_factor)
  if num_workers is None:
    num_workers = os.cpu_count() or 1
  if num_workers < 1:
    raise errors.UserError("--num_workers=%d must be at least 1" % num_workers)
  if not shard_size_mb > 0:
    raise errors.UserError(
        "--shard_size_mb=%r must be positive" % shard_size_mb)
  prefix = output_prefix(output_file, output_dir)
  if output_dir:
    try:
      os.makedirs(output_dir, exist_ok=True)
    except OSError as e:
      raise errors.UserError("cannot create --output_dir %s: %s" % (
          output_dir, e.strerror)) from None
  vocab = pretraining_instances.load_checked_vocab(vocab_file)
  files = expand_sharded_inputs(input_file)
  shard_bytes = plan_shard_bytes(sum(size for _, size in files),
                                 max(1, int(shard_size_mb * 1e6)))
  shards = plan_shards(files, shard_bytes)
  settings = ShardSettings(vocab, do_lower_case, tokenizer_backend, params,
                           random_seed, dupe_factor, max_sequences_per_pack)
  todo = prepare_output(prefix, _manifest(settings, shards, shard_bytes),
                        resume)
  paths = shard_paths(prefix, len(shards))
  logging.info("%d input file(s), %d shard(s) of <= %.2f MB; %d to make, %d "
               "already complete; %d worker(s)", len(files), len(shards),
               shard_bytes / 1e6, len(todo), len(shards) - len(todo),
               min(num_workers, max(len(todo), 1)))
  pattern = shard_pattern(prefix, len(shards))
  if not todo:
    return ShardedOutput(paths, pattern, 0)
  todo_bytes = sum(p.end - p.start for i in todo for p in shards[i])
  progress = pretraining_instances.Progress(
      sys.stderr, todo_bytes * (1 + dupe_factor), num_shards=len(todo))
  results = _run_pool(settings, [(i, shards[i], paths[i]) for i in todo],
                      num_workers, progress, prefix)
  progress.close()
  for result in results:
    if not result.num_documents:
      logging.warning("shard %d (%s) holds no usable document: its file "
                      "has no records", result.index, paths[result.index])
  if not any(r.num_documents for r in results) and len(todo) == len(shards):
    raise errors.UserError(
        "no usable document in --input_file %s: every line is empty or "
        "tokenizes to nothing" % input_file)
  logging.info("done: %s", progress.line())
  return ShardedOutput(paths, pattern, sum(r.num_instances for r in results))
