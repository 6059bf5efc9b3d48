"""Corpora and records for the pretraining-data tests: the fixture vocab and
sample corpus, corpora written on the fly in each input format, reading
shards and records back, and the one-line refusal of bad input."""

import gzip
import json
import os
import random

import blingfire
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from bertkit.common import errors
from bertkit.data import corpus_input
from bertkit.data import shard_plan
from conftest import REPO_ROOT


TESTS_DIR = os.path.join(REPO_ROOT, "tests")
CPD_DIR = os.path.join(TESTS_DIR, "fixtures", "create_pretraining_data")
CPD_VOCAB = os.path.join(CPD_DIR, "vocab.txt")
SAMPLE_CORPUS = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")


def read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


def sample_sentences():
  with open(SAMPLE_CORPUS, encoding="utf-8") as f:
    return [line.strip() for line in f if line.strip()]


def write_corpus(path, num_bytes, seed):
  """Writes a corpus of about `num_bytes` of varied documents.

  Documents are random runs of sample_data sentences, some with a number
  inserted, so that no two documents are alike.
  """
  rng = random.Random(seed)
  sentences = sample_sentences()
  blocks = []
  size = 0
  while size < num_bytes:
    document = []
    for _ in range(rng.randint(2, 12)):
      words = rng.choice(sentences).split()
      if rng.random() < 0.3:
        words.insert(rng.randrange(len(words) + 1), str(rng.randint(0, 9999)))
      document.append(" ".join(words))
    block = "\n".join(document) + "\n\n"
    blocks.append(block)
    size += len(block.encode("utf-8"))
  with open(str(path), "w", encoding="utf-8") as f:
    f.write("".join(blocks))
  return str(path)


def shard_files(directory):
  return sorted(name for name in os.listdir(str(directory))
                if name.endswith(".tfrecord"))


def directory_bytes(directory):
  return {name: read_bytes(os.path.join(str(directory), name))
          for name in sorted(os.listdir(str(directory)))}


def assert_one_error_line(result, *expected):
  assert result.returncode == errors.EXIT_USER_ERROR, result.stderr
  assert "Traceback" not in result.stderr
  lines = result.stderr.strip().splitlines()
  assert [l for l in lines if l.startswith("error:")] == [lines[-1]]
  for text in expected:
    assert text in lines[-1]


def sample_paragraphs():
  """sample_data's documents, each as one paragraph (sentences joined)."""
  with open(SAMPLE_CORPUS, encoding="utf-8") as f:
    blocks = f.read().split("\n\n")
  return [" ".join(line.strip() for line in block.splitlines()
                   if line.strip()) for block in blocks if block.strip()]


def write_jsonl(path, paragraphs, text_field="text"):
  lines = "".join(json.dumps({"id": i, text_field: text}) + "\n"
                  for i, text in enumerate(paragraphs)).encode("utf-8")
  if str(path).endswith(".gz"):
    lines = gzip.compress(lines)
  elif str(path).endswith(".zst"):
    lines = zstandard.ZstdCompressor().compress(lines)
  with open(str(path), "wb") as f:
    f.write(lines)
  return str(path)


def write_parquet(path, paragraphs, row_group_size=7):
  table = pa.table({"id": list(range(len(paragraphs))), "text": paragraphs})
  pq.write_table(table, str(path), row_group_size=row_group_size)
  return str(path)


def write_segmented_text(path, paragraphs):
  """The text-format equivalent: the segmenter's sentences, one a line."""
  blocks = ["".join(s.strip() + "\n" for s in
                    blingfire.text_to_sentences(text).split("\n"))
            for text in paragraphs]
  with open(str(path), "w", encoding="utf-8") as f:
    f.write("\n".join(blocks))
  return str(path)


def read_all(input_file, shard_bytes=None, **kwargs):
  """Documents (as word lists) of `input_file`, whole or in shards."""
  files = corpus_input.expand_inputs(input_file, **kwargs)
  if shard_bytes is None:
    shards = [[corpus_input.ShardPiece(f.path, 0, f.size, f.format)
               for f in files]]
  else:
    shards = shard_plan.plan_shards(files, shard_bytes)
  documents = []
  for pieces in shards:
    documents += corpus_input.read_documents(pieces, str.split,
                                             lambda *args: None)
  return documents


def command(input_file, output_dir, **flags):
  args = {"input_file": input_file, "output_dir": str(output_dir),
          "vocab_file": CPD_VOCAB, "max_seq_length": 32,
          "max_predictions_per_seq": 5, "dupe_factor": 2,
          "shard_size_mb": 0.02}
  args.update(flags)
  return ["create_pretraining_data.py"] + [
      "--%s=%s" % item for item in sorted(args.items())]
