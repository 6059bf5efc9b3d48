# coding=utf-8
"""Re-ranking records: triples and scored pairs as TFRecords, written on
every core, and a rerun that keeps what an interrupted one finished.

A record holds P query/passage pairs, each `[CLS] query [SEP] passage [SEP]`
(data/pair_encoding.py with the query capped at --max_query_length first),
unpadded: the input pipeline pads each batch to its longest pair.

  TRIPLE (training, P = 2)  one line of triples.train.small.tsv: the
      positive pair, then the negative; labels [1, 0]; the line number.
  TEACHER_TRIPLE (a Margin-MSE student's training)  a TRIPLE and its
      teacher's scores of the two pairs (teacher_logits [2], has_label 1:
      fine_tuning/distillation.py's features).
  PAIR (scoring, P = 1)     one candidate of one query: pair_index (its
      place in the candidates, queries in order, each query's candidates in
      first-stage order), its label (1: relevant in the qrels).

Features: input_ids (the P pairs' ids, one after the other), pair_lengths
[P], first_lengths [P] ([CLS] query [SEP] of each pair), labels [P]
(float), and line [1] or pair_index [1]; a feature of P values (a
teacher's score of each pair) is read with the others as [P].

The records of a split are written in chunks (one file each) by worker
processes (data/local_workers.py, as create_pretraining_data's sharded
mode), or in this process when there is one chunk. Scored pairs are
written longest first within each chunk (as sentence-transformers sorts its
input), so that a batch holds pairs of similar length; pair_index puts the
scores back. No TensorFlow here: the workers import this module.
"""

import dataclasses
import json
import os
import sys
from typing import Dict, Optional

from absl import logging

from bertkit.common import atomic_io
from bertkit.data import creation_progress
from bertkit.data import fast_tokenization
from bertkit.data import local_workers
from bertkit.data import pair_encoding
from bertkit.data import pretraining_records
from bertkit.data import tfrecord_files
from bertkit.tasks.fine_tuning import teacher_outputs

_feature = pretraining_records.RecordFeature
_PAIR_FEATURES = (_feature("input_ids", "int64", None),
                  _feature("pair_lengths", "int64", "P"),
                  _feature("first_lengths", "int64", "P"),
                  _feature("labels", "float32", "P"))
TRIPLE = pretraining_records.RecordKind(
    name="triple", features=_PAIR_FEATURES + (_feature("line", "int64", 1),),
    serialized_order=tuple(f.name for f in _PAIR_FEATURES) + ("line",),
    description="a triple: positive and negative pair, labels [1, 0]")
_TEACHER_FEATURES = (_feature(teacher_outputs.TEACHER_LOGITS, "float32", "P"),
                     _feature(teacher_outputs.HAS_LABEL, "int64", 1))
TEACHER_TRIPLE = pretraining_records.RecordKind(
    name="teacher_triple", features=TRIPLE.features + _TEACHER_FEATURES,
    serialized_order=TRIPLE.serialized_order + tuple(
        f.name for f in _TEACHER_FEATURES),
    description="a triple and its teacher's scores of its two pairs")
PAIR = pretraining_records.RecordKind(
    name="pair",
    features=_PAIR_FEATURES + (_feature("pair_index", "int64", 1),),
    serialized_order=tuple(f.name for f in _PAIR_FEATURES) + ("pair_index",),
    description="a candidate pair and its label")
# Items per chunk (one file, one worker task).
CHUNK_ITEMS = 10000
MANIFEST = "%s_records.json"


@dataclasses.dataclass(frozen=True)
class EncodingSettings:
  """What every worker needs to encode pairs (pickled to each once).

  Attributes:
    vocab: token -> id.
    do_lower_case: the model's casing.
    max_seq_length: S.
    max_query_length: the query's cap, applied first.
  """
  vocab: Dict[str, int]
  do_lower_case: bool
  max_seq_length: int
  max_query_length: int

  def fingerprint(self):
    """What records made with these settings depend on, as JSON values."""
    return {"vocab_size": len(self.vocab), "do_lower_case":
            self.do_lower_case, "max_seq_length": self.max_seq_length,
            "max_query_length": self.max_query_length}


class PairEncoder:
  """Query/passage pairs -> (ids, first segment length), the query's ids
  kept for its next pair (a query's candidates come together)."""

  def __init__(self, settings):
    self._settings = settings
    self._tokenizer = fast_tokenization.FastTokenizer(settings.vocab,
                                                      settings.do_lower_case)
    self._cls, self._sep = settings.vocab["[CLS]"], settings.vocab["[SEP]"]
    self._query, self._query_ids = None, None

  def encode(self, query, passage):
    """(ids, first_length) of one pair."""
    if query != self._query:
      self._query = query
      self._query_ids = self._tokenizer.tokenize_to_ids(query)
    ids, segment_ids = pair_encoding.encode(
        self._query_ids, self._tokenizer.tokenize_to_ids(passage),
        self._settings.max_seq_length, self._settings.max_query_length,
        self._cls, self._sep)
    return ids, segment_ids.count(0)


def triple_record(encoder, triple, teacher_scores=None):
  """The TRIPLE record of a msmarco.Triple, as bytes; with its teacher's
  scores [the positive's, the negative's], the TEACHER_TRIPLE record."""
  positive = encoder.encode(triple.query, triple.positive)
  negative = encoder.encode(triple.query, triple.negative)
  values = {"input_ids": positive[0] + negative[0],
            "pair_lengths": [len(positive[0]), len(negative[0])],
            "first_lengths": [positive[1], negative[1]],
            "labels": [1.0, 0.0], "line": [triple.line]}
  if teacher_scores is None:
    return pretraining_records.encode_example(TRIPLE, values)
  values[teacher_outputs.TEACHER_LOGITS] = [float(x) for x in teacher_scores]
  values[teacher_outputs.HAS_LABEL] = [1]
  return pretraining_records.encode_example(TEACHER_TRIPLE, values)


def pair_record(encoded, pair_index, label):
  """The PAIR record of an encoded pair, as bytes."""
  ids, first_length = encoded
  return pretraining_records.encode_example(PAIR, {
      "input_ids": ids, "pair_lengths": [len(ids)],
      "first_lengths": [first_length], "labels": [float(label)],
      "pair_index": [pair_index]})


def make_chunk(settings, task, report):
  """One chunk's file: a worker's task (local_workers.run_local).

  Args:
    settings: the EncodingSettings.
    task: (chunk index, kind name, items, path); items are msmarco.Triples
      (TRIPLE), (msmarco.Triple, teacher scores) (TEACHER_TRIPLE) or
      (pair_index, query, passage, label) tuples (PAIR).
    report: function(work, records) the progress is told.

  Returns:
    (chunk index, records written).
  """
  index, kind, items, path = task
  encoder = PairEncoder(settings)
  if kind == TRIPLE.name:
    records = [triple_record(encoder, triple) for triple in items]
  elif kind == TEACHER_TRIPLE.name:
    records = [triple_record(encoder, *item) for item in items]
  else:
    encoded = [(encoder.encode(query, passage), pair_index, label)
               for pair_index, query, passage, label in items]
    encoded.sort(key=lambda item: -len(item[0][0]))
    records = [pair_record(*item) for item in encoded]
  with atomic_io.atomic_path(path) as partial:
    tfrecord_files.write_tfrecord_file(partial, records)
  report(len(items), len(records))
  return index, len(records)


def chunk_path(output_dir, split, index):
  """The file of chunk `index` of `split` in output_dir."""
  return os.path.join(output_dir, "%s-%05d.tf_record" % (split, index))


def _chunks(items, size):
  """Lists of `size` consecutive items (the last may be shorter)."""
  chunk = []
  for item in items:
    chunk.append(item)
    if len(chunk) == size:
      yield chunk
      chunk = []
  if chunk:
    yield chunk


def _read_manifest(path):
  if not atomic_io.exists(path):
    return None
  with atomic_io.open_file(path) as f:
    return json.load(f)


def _write_manifest(path, manifest):
  with atomic_io.atomic_open(path) as f:
    f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def write_split(output_dir, split, kind, items, settings, num_workers,
                expected, identity=None):
  """Writes the records of `items` in chunks of CHUNK_ITEMS, on
  `num_workers` processes, reading `items` no further ahead than the
  workers (bounded memory, however long the input).

  A chunk whose file exists was finished by an earlier run of the same
  `identity` (the input, the settings, how many items), which the split's
  manifest records; it is kept, the items it holds are passed over without
  being encoded, and the run goes on from the first chunk not written.

  Args:
    output_dir: where the files go.
    split: their name's prefix ("train", "eval", "predict").
    kind: TRIPLE, TEACHER_TRIPLE or PAIR.
    items: an iterable of the items (make_chunk), read once, in order.
    settings: the EncodingSettings.
    num_workers: worker processes (1: this process).
    expected: the number of items, for the progress.
    identity: a JSON-able value naming the input, or None: no resume.

  Returns:
    (the files in order, the number of records).
  """
  manifest_path = os.path.join(output_dir, MANIFEST % split)
  manifest = {"identity": identity, "settings": settings.fingerprint(),
              "kind": kind.name, "chunk_items": CHUNK_ITEMS}
  keep = identity is not None and _read_manifest(manifest_path) == manifest
  os.makedirs(output_dir, exist_ok=True)
  atomic_io.remove_stale_partials(output_dir, split + "-")
  _write_manifest(manifest_path, manifest)
  files, counts = [], {"records": 0, "kept": 0}

  def tasks():
    for index, chunk in enumerate(_chunks(items, CHUNK_ITEMS)):
      path = chunk_path(output_dir, split, index)
      files.append(path)
      counts["records"] += len(chunk)
      if keep and atomic_io.exists(path):
        counts["kept"] += 1
        progress.add(len(chunk), 0)
        continue
      yield index, kind.name, chunk, path

  progress = creation_progress.Progress(
      sys.stderr, expected, -(-expected // CHUNK_ITEMS))
  if num_workers > 1 and expected > CHUNK_ITEMS:
    for _ in local_workers.run_local(settings, tasks(), num_workers,
                                     progress, make=make_chunk):
      progress.shard_done()
  else:
    for task in tasks():
      make_chunk(settings, task, progress.add)
      progress.shard_done()
  progress.close()
  _remove_beyond(output_dir, split, len(files))
  if counts["kept"]:
    logging.info("%s records: %d of %d chunk(s) kept from an earlier run",
                 split, counts["kept"], len(files))
  return files, counts["records"]


def _remove_beyond(output_dir, split, count):
  """Removes chunk files of `split` numbered `count` and up (an earlier run
  of more items)."""
  index = count
  while atomic_io.exists(chunk_path(output_dir, split, index)):
    atomic_io.remove(chunk_path(output_dir, split, index))
    index += 1


def num_workers_default(num_workers: Optional[int]):
  """--num_workers, or every core."""
  return num_workers or os.cpu_count() or 1
