# coding=utf-8
"""create_pretraining_data's sharded mode: any corpus size, every core, a
cluster.

Used when --num_workers, --output_dir or --dask_scheduler is given. The input
(local paths, globs, directories read recursively, or URLs through fsspec;
text, JSONL or Parquet: see corpus_input.py) is cut into shards
(shard_plan.py), each made by one task, `shard_task.make_shard`, run by one
engine:
  * local (--num_workers=N, the default): N forked worker processes
    (local_workers.py);
  * Dask (--dask_scheduler=tcp://host:port): the workers of an existing Dask
    cluster (dask_workers.py).
The task is the same in both: upstream's algorithm over the shard, as if it
were the whole corpus, drawing from its own
`random.Random(shard_plan.shard_seed(random_seed, shard_index))`, written by
the worker under a temporary name and renamed when complete; so:
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
    shards whose file exists (--resume, on by default; shard_manifest.py);
  * workers never import TensorFlow: they stay small.
"""

import contextlib
import dataclasses
import os
import sys
from typing import List

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.data import corpus_input
from bertkit.data import creation_progress
from bertkit.data import dask_workers
from bertkit.data import local_workers
from bertkit.data import pretraining_instances
from bertkit.data import shard_manifest
from bertkit.data import shard_plan
from bertkit.data import shard_task


@dataclasses.dataclass(frozen=True)
class ShardedOutput:
  """What a sharded run leaves.

  Attributes:
    paths: every shard file, in shard order (including ones a resumed run
      skipped).
    pattern: a glob matching exactly them (for run_pretraining --input_file).
    num_instances: instances written by this run.
  """
  paths: List[str]
  pattern: str
  num_instances: int


def _output_prefix(options):
  """The shard file prefix of the options' --output_file or --output_dir.

  Raises:
    errors.UserError: the output is not one of --output_file and
      --output_dir, or is a URL.
  """
  prefix = shard_plan.output_prefix(options.output_file, options.output_dir)
  if atomic_io.is_url(prefix):
    raise errors.UserError(
        "--%s=%s is a URL, but sharded mode writes its shards to a local or "
        "mounted directory (with Dask, one every worker sees); write them "
        "there and copy them to %s" % (
            "output_dir" if options.output_dir else "output_file",
            options.output_dir or options.output_file,
            options.output_dir or os.path.dirname(options.output_file)))
  return prefix


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
  shard_manifest.remove_partial_files(prefix)
  _remove_created_dirs(os.path.dirname(prefix), created)


def _make_shards(settings, tasks, dask_scheduler, engine, completed, prefix):
  """Runs the `tasks` on the run's engine, shard files and manifest kept
  consistent however the run ends.

  Args:
    settings: the `shard_task.ShardSettings`.
    tasks: (shard index, pieces, output path) of the shards to make.
    dask_scheduler: the --dask_scheduler address, or None for local
      workers.
    engine: the number of local workers, or the connected
      `distributed.Client` with --dask_scheduler.
    completed: the `shard_manifest.CompletedShards` of the manifest.
    prefix: the shard file prefix.

  Returns:
    (the `shard_task.ShardResult`s in completion order, the closed
    `creation_progress.Progress`).
  """
  progress = creation_progress.Progress(
      sys.stderr, sum(shard_plan.shard_work(pieces, settings.dupe_factor)
                      for _, pieces, _ in tasks), num_shards=len(tasks))
  if dask_scheduler is not None:
    results = dask_workers.run_dask(settings, tasks, engine, dask_scheduler,
                                    progress)
  else:
    results = local_workers.run_local(settings, tasks, engine, progress)
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
    if dask_scheduler is None or not isinstance(e, errors.TrainingFailed):
      shard_manifest.remove_partial_files(prefix)
    raise
  completed.write()
  # Left by workers that died mid-task (their shards were made again).
  shard_manifest.remove_partial_files(prefix)
  progress.close()
  return finished, progress


def _plan(options):
  """Reads the vocab and lists the input: what the shards are made of.

  Returns:
    (the `shard_task.ShardSettings`, the number of input files, the shards
    as `shard_plan.plan_shards` gives them, the shard size in bytes).

  Raises:
    errors.UserError: the vocab or an input item is unusable.
  """
  vocab = pretraining_instances.load_checked_vocab(options.vocab_file)
  files = corpus_input.expand_corpus(options.corpus)
  shard_bytes = shard_plan.plan_shard_bytes(
      sum(f.size for f in files), max(1, int(options.shard_size_mb * 1e6)))
  settings = shard_task.ShardSettings(
      vocab, options.do_lower_case, options.tokenizer_backend,
      options.params, options.random_seed, options.num_passes,
      options.text_field, options.pack_limit)
  return (settings, len(files), shard_plan.plan_shards(files, shard_bytes),
          shard_bytes)


def run_sharded(options):
  """Sharded mode: see the module docstring.

  Everything that can be checked (vocab, inputs, the Dask scheduler) is
  before the output directory or the manifest is written; a run that ends
  on bad input before any shard is complete, or finds no usable document,
  leaves no output.

  Args:
    options: the run's `creation_options.CreationOptions`; its random_seed
      is the base of every shard's seed (`shard_plan.shard_seed`).

  Returns:
    A `ShardedOutput`.

  Raises:
    errors.UserError: on bad input.
    errors.TrainingFailed: the Dask scheduler was lost mid-run.
  """
  num_workers = options.num_workers or os.cpu_count() or 1
  prefix = _output_prefix(options)
  settings, num_files, shards, shard_bytes = _plan(options)
  paths = shard_plan.shard_paths(prefix, len(shards))
  pattern = shard_plan.shard_pattern(prefix, len(shards))
  with contextlib.ExitStack() as stack:
    engine = num_workers
    if options.dask_scheduler is not None:
      engine = stack.enter_context(
          dask_workers.connect_dask(options.dask_scheduler))
    created = _create_output_dir(options.output_dir)
    manifest = shard_manifest.manifest_of(settings, shards, shard_bytes)
    try:
      todo = shard_manifest.prepare_output(prefix, manifest, options.resume)
    except errors.UserError:
      _remove_created_dirs(os.path.dirname(prefix), created)
      raise
    logging.info("%d input file(s), %d shard(s) of <= %.2f MB; %d to make, "
                 "%d already complete; %s", num_files, len(shards),
                 shard_bytes / 1e6, len(todo), len(shards) - len(todo),
                 "Dask scheduler %s" % options.dask_scheduler
                 if options.dask_scheduler is not None else
                 "%d local worker(s)" % min(num_workers, max(len(todo), 1)))
    if not todo:
      return ShardedOutput(paths, pattern, 0)
    completed = shard_manifest.CompletedShards(
        prefix + ".manifest.json", manifest,
        set(range(len(shards))) - set(todo))
    try:
      finished, progress = _make_shards(
          settings, [(i, shards[i], paths[i]) for i in todo],
          options.dask_scheduler, engine, completed, prefix)
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
        "tokenizes to nothing" % options.input_file)
  logging.info("done: %s", progress.line())
  return ShardedOutput(paths, pattern, sum(r.num_instances for r in finished))
