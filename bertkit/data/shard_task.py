# coding=utf-8
"""Sharded mode's task, the same on every engine: one shard's records.

`make_shard` runs upstream's algorithm over the shard as if it were the
whole corpus, drawing from its own
`random.Random(shard_plan.shard_seed(random_seed, shard_index))`, and writes
the shard's file under a temporary name, renamed when complete. Workers
never import TensorFlow: they stay small.

Module state: a worker process's tools (its tokenizer) and the settings they
were built for. `make_shard` builds them at its first task of a run
(`_shard_tools`) and reads them at every later one: a worker is a process,
which the engines hand tasks to, not objects.
"""

import dataclasses
import random
from typing import Dict, Optional

from bertkit.data import corpus_input
from bertkit.data import pretraining_instances
from bertkit.data import shard_plan
from bertkit.data import tfrecord_files


@dataclasses.dataclass(frozen=True)
class ShardSettings:
  """What every worker needs to turn a shard into records (sent to each
  worker process or Dask worker once, pickled).

  Attributes:
    vocab: token -> id mapping (already checked).
    do_lower_case: lower-case the text (uncased models).
    tokenizer_backend: "fast" or "python" (same tokens).
    params: the `pretraining_instances.InstanceParams`.
    random_seed: the base of every shard's seed (`shard_plan.shard_seed`).
    dupe_factor: passes over each shard's documents.
    text_field: the JSON field / Parquet column holding a document.
    max_sequences_per_pack: pack each shard's instances, at most this many
      to a row (None: one instance per record).
  """
  vocab: Dict[str, int]
  do_lower_case: bool
  tokenizer_backend: str
  params: pretraining_instances.InstanceParams
  random_seed: int
  dupe_factor: int
  text_field: str = corpus_input.DEFAULT_TEXT_FIELD
  max_sequences_per_pack: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class ShardResult:
  """What making one shard gave.

  Attributes:
    index: the shard's index in the plan.
    num_documents: usable documents the shard held.
    num_instances: records written to its file.
  """
  index: int
  num_documents: int
  num_instances: int


# What a worker builds once for the run's settings (the tokenizer, ...):
# the settings it was built for, and the tools.
_tools = {}


def _shard_tools(settings):
  """The tokenize function for `settings`, built once per worker process.

  Returns:
    text -> list of token codes (see pretraining_instances.make_encoder).
  """
  if _tools.get("settings") is not settings:
    tfrecord_files.load_numpy()
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
    task: (shard index, tuple of `corpus_input.ShardPiece`s, output path).
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
      documents, random.Random(
          shard_plan.shard_seed(settings.random_seed, shard_index)),
      settings.vocab, settings.params, settings.dupe_factor, [output_path],
      report, pass_work=sum(p.end - p.start for p in pieces),
      max_sequences_per_pack=settings.max_sequences_per_pack)
  return ShardResult(shard_index, num_documents, num_instances)
