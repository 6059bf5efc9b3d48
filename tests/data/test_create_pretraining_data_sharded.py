# coding=utf-8
"""Tests for create_pretraining_data.py's sharded mode and fast paths.

Sharded mode must be deterministic whatever --num_workers is, apply
upstream's algorithm to each shard on its own (so each shard equals a
faithful run over its text with the shard's seed), keep memory flat as the
corpus grows, never leave a half-written file under a final name, resume,
and report bad input in one line. Its fast parts must equal the reference
code exactly: FastTokenizer vs tokenization.FullTokenizer and upstream's
golden tokens, the direct Example/TFRecord bytes vs TensorFlow's. (The
instance maker's records are pinned to upstream's own output files in
test_create_pretraining_data.py.)

Corpora are generated on the fly from sample_data/corpus.txt sentences.
"""

import dataclasses
import json
import logging
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow.compat.v1 as tf

from bertkit.data import corpus_input
import create_pretraining_data as cpd
from bertkit.common import errors
from bertkit.data import creation_options
from bertkit.data import creation_progress
from bertkit.data import fast_tokenization
from bertkit.data import local_workers
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.data import shard_plan
from bertkit.data import shard_task
from bertkit.data import sharded_mode
from bertkit.data import tfrecord_files
import tokenization
from conftest import REPO_ROOT
from conftest import partial_files
from conftest import run_program
from helpers.corpora import (CPD_DIR, CPD_VOCAB, TESTS_DIR,
                             assert_one_error_line, directory_bytes, read_bytes,
                             sample_sentences, shard_files, write_corpus)

MASKED_FEATURES = [f.name for f in pretraining_records.MASKED.features]

CPD_CORPUS = os.path.join(CPD_DIR, "corpus.txt")
TOKENIZATION_DIR = os.path.join(TESTS_DIR, "fixtures", "tokenization")
TOKENIZATION_VOCAB = os.path.join(TOKENIZATION_DIR, "vocab.txt")

PARAMS = pretraining_instances.InstanceParams(
    max_seq_length=32, short_seq_prob=0.3, masked_lm_prob=0.15,
    max_predictions_per_seq=5, do_whole_word_mask=False)


def run_sharded(input_file, output_dir, params=PARAMS, **overrides):
  """Runs sharded mode in this process (which loaded TensorFlow, so its
  workers are spawned, not forked); `overrides` are `CreationOptions`
  fields."""
  args = dict(input_file=input_file, vocab_file=CPD_VOCAB,
              output_dir=str(output_dir), dupe_factor=2, num_workers=2,
              shard_size_mb=0.004, **dataclasses.asdict(params))
  args.update(overrides)
  return sharded_mode.run_sharded(creation_options.CreationOptions(**args))


# ---------------------------------------------------- fast tokenizer ----


def golden_token_cases():
  with open(os.path.join(TOKENIZATION_DIR, "golden_tokens.json"),
            encoding="utf-8") as f:
    return json.load(f)["cases"]


@pytest.fixture(scope="module")
def tokenizer_pairs():
  """(FullTokenizer, FastTokenizer) per (vocab file, do_lower_case)."""
  pairs = {}
  for vocab_file in (TOKENIZATION_VOCAB, CPD_VOCAB):
    for lower in (True, False):
      pairs[vocab_file, lower] = (
          tokenization.FullTokenizer(vocab_file, do_lower_case=lower),
          fast_tokenization.FastTokenizer(
              tokenization.load_vocab(vocab_file), do_lower_case=lower))
  return pairs


def test_fast_tokenizer_equals_upstream_golden_tokens(tokenizer_pairs):
  cases = golden_token_cases()
  assert len(cases) >= 100
  for case in cases:
    _, fast = tokenizer_pairs[TOKENIZATION_VOCAB, case["do_lower_case"]]
    assert fast.tokenize(case["text"]) == case["tokens"], case["text"]
    assert fast.tokenize_to_ids(case["text"]) == case["ids"], case["text"]
    assert fast.basic_tokenize(case["text"]) == case["basic_tokens"]


def test_fast_tokenizer_equals_python_on_sample_corpora(tokenizer_pairs):
  lines = sample_sentences()
  with open(CPD_CORPUS, encoding="utf-8") as f:
    lines += f.read().splitlines()
  for (reference, fast) in tokenizer_pairs.values():
    for line in lines:
      assert fast.tokenize(line) == reference.tokenize(line), line


# Inputs on which the tokenizers library's own BERT normalizer differs from
# upstream (see fast_tokenization's docstring), and other hazards.
HAZARDS = [
    "ΟΔΟΣ ΑΣ.Β Σ σ ς ΣΑΣ",  # final sigma depends on context
    "private \ue000 use \U000f0000 and unassigned \U000e0080 \u0378",
    "\U0002b820\U0002b8ff\U0002b91f \U0002b920 \U0002ceaf",  # CJK block edge
    "x" * 199 + " " + "y" * 200 + " " + "z" * 201,  # WordPiece length limit
    "İstanbul ǅ ǈ ǋ ǲ ﬃ ẞ ß ŉ Ⅻ ᾈ ᾼ ῼ",  # special lower-casing
    "e\u0301\u0327 a\u0308\u0304 \u1fef\u0385 \u037e \u0344",  # NFD
    "\u00ad\u200b\u2060\ufeff soft \u200d\u200e hyphen",  # Cf
    "a\u2028b\u2029c\x85d\x1ce\x1ff\x0bg\x0ch",  # line breaks, Cc
    "\U0001f600\U0001f44d\U0001f3fd \u2764\ufe0f \U0001f1eb\U0001f1f7",
    "full\uff0cwidth\uff01 \u3001\u3002\u300c\u300d \u00bf\u00a1 \u2014",
    "$5 ^x `y` +1 <a> =b |c| ~d ¢ £ ¥ € ₹ ° ± × ÷ § ¶",
]


def char_vocab_tokenizers(texts, do_lower_case, vocab_file):
  """Tokenizers whose vocab holds every character of the texts' words.

  With every single character (and its ## form) in the vocab, wordpieces
  spell out the basic tokens exactly, so any difference shows.
  """
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  chars = sorted({c for text in texts for word in basic.tokenize(text)
                  for c in word})
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  tokens += chars + ["##" + c for c in chars] + ["ab", "##ab", "σας"]
  vocab_file.write_bytes("".join(t + "\n" for t in tokens).encode("utf-8"))
  reference = tokenization.FullTokenizer(str(vocab_file), do_lower_case)
  assert len(reference.vocab) == len(tokens)
  return reference, fast_tokenization.FastTokenizer(
      tokenization.load_vocab(str(vocab_file)), do_lower_case)


def random_texts(seed, count):
  rng = random.Random(seed)
  texts = []
  for _ in range(count):
    chars = []
    for _ in range(rng.randint(1, 40)):
      cp = rng.choice([rng.randint(0x20, 0x7e), rng.randint(0, 0x2ff),
                       rng.randint(0, 0xffff), rng.randint(0, 0x10ffff)])
      if not 0xd800 <= cp <= 0xdfff:
        chars.append(chr(cp))
    texts.append("".join(chars))
  return texts


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_fast_tokenizer_equals_python_on_hazards_and_random_unicode(
    do_lower_case, tmp_path):
  texts = HAZARDS + random_texts(seed=int(do_lower_case), count=3000)
  reference, fast = char_vocab_tokenizers(texts, do_lower_case,
                                          tmp_path / "vocab.txt")
  for text in texts:
    assert fast.tokenize(text) == reference.tokenize(text), ascii(text)
  # The vocab makes these hazards visible, so they prove something.
  assert "[UNK]" in reference.tokenize(HAZARDS[3])
  if do_lower_case:
    assert reference.tokenize("ΟΔΟΣ") == ["ο", "##δ", "##ο", "##ς"]
    assert reference.tokenize("private \ue000") == ["p", "##r", "##i", "##v",
                                                     "##a", "##t", "##e",
                                                     "\ue000"]


# ------------------------------------------------- records as bytes ----


def test_tfrecord_chunks_equal_tf_record_writer(tmp_path, monkeypatch):
  # Small batches, so that batch boundaries are crossed too.
  monkeypatch.setattr(tfrecord_files, "_BATCH_BYTES", 5000)
  rng = random.Random(3)
  records = [bytes(rng.getrandbits(8) for _ in range(n))
             for n in [0, 1, 2, 3, 7, 8, 255, 256, 3000] +
             [rng.randint(0, 900) for _ in range(200)]]
  expected = str(tmp_path / "expected.tfrecord")
  with tf.io.TFRecordWriter(expected) as writer:
    for record in records:
      writer.write(record)
  got = b"".join(tfrecord_files.tfrecord_chunks(iter(records)))
  assert got == read_bytes(expected)
  assert list(tf.io.tf_record_iterator(expected)) == records


def test_varint():
  for value in [0, 1, 127, 128, 300, 16383, 16384, 2**31, 2**63 - 1]:
    expected = tf.train.Int64List(value=[value]).SerializeToString()[1:]
    # Field 1 of an Int64List holds one packed varint: tag, length, value.
    assert pretraining_records.varint(value) == expected[1:], value


# ------------------------------------------------- planning, reading ----


def test_plan_shards_packs_small_files_and_splits_large_ones():
  files = [corpus_input.InputFile(name, size, "text") for name, size in [
      ("a", 30), ("b", 50), ("c", 40), ("big", 250), ("d", 0), ("e", 100),
      ("f", 1)]]
  assert shard_plan.plan_shards(files, 100) == [
      (corpus_input.ShardPiece("a", 0, 30),
       corpus_input.ShardPiece("b", 0, 50)),
      (corpus_input.ShardPiece("c", 0, 40),),
      (corpus_input.ShardPiece("big", 0, 83),),
      (corpus_input.ShardPiece("big", 83, 166),),
      (corpus_input.ShardPiece("big", 166, 250),),
      (corpus_input.ShardPiece("d", 0, 0),
       corpus_input.ShardPiece("e", 0, 100)),
      (corpus_input.ShardPiece("f", 0, 1),),
  ]
  # A compressed file cannot be cut: one shard however large; formats are
  # kept.
  assert shard_plan.plan_shards(
      [corpus_input.InputFile("a.jsonl.gz", 250, "jsonl"),
       corpus_input.InputFile("b.parquet", 250, "parquet")], 100) == [
           (corpus_input.ShardPiece("a.jsonl.gz", 0, 250, "jsonl"),),
           (corpus_input.ShardPiece("b.parquet", 0, 83, "parquet"),),
           (corpus_input.ShardPiece("b.parquet", 83, 166, "parquet"),),
           (corpus_input.ShardPiece("b.parquet", 166, 250, "parquet"),)]


def test_shard_size_is_planned_from_the_corpus_size():
  mb = 1000000
  # Small corpora: shards of MIN_SHARD_BYTES, so 2 workers both have work
  # from 0.5 MB on.
  assert shard_plan.plan_shard_bytes(4 * mb, 16 * mb) == 250000
  assert shard_plan.plan_shard_bytes(500000, 16 * mb) == 250000
  # Larger ones: about 32 shards, up to --shard_size_mb.
  assert shard_plan.plan_shard_bytes(40 * mb, 16 * mb) == 1250000
  assert shard_plan.plan_shard_bytes(10000 * mb, 16 * mb) == 16 * mb
  # --shard_size_mb is an upper bound, even below the minimum.
  assert shard_plan.plan_shard_bytes(4 * mb, 4000) == 4000
  files = [corpus_input.InputFile("big.txt", 4 * mb, "text")]
  shards = shard_plan.plan_shards(
      files, shard_plan.plan_shard_bytes(4 * mb, 16 * mb))
  assert len(shards) == 16


def test_shard_names_and_prefixes():
  assert (shard_plan.shard_paths("/o/part", 12)[3] ==
          "/o/part-00003-of-00012.tfrecord")
  assert shard_plan.output_prefix(None, "/o") == "/o/part"
  assert shard_plan.output_prefix("/o/wiki.tfrecord", None) == "/o/wiki"
  assert shard_plan.output_prefix("/o/wiki", None) == "/o/wiki"
  for output_file, output_dir in [(None, None), ("/o/x", "/o"),
                                  ("/o/a,/o/b", None)]:
    with pytest.raises(errors.UserError):
      shard_plan.output_prefix(output_file, output_dir)


def test_shard_seed_is_fixed_and_distinct():
  # Pinned: a change would silently change every sharded output.
  assert shard_plan.shard_seed(12345, 0) == 12964827268658427022
  seeds = {shard_plan.shard_seed(seed, index)
           for seed in range(20) for index in range(200)}
  assert len(seeds) == 20 * 200


def words_of(documents):
  return [[" ".join(segment) for segment in document]
          for document in documents]


TRICKY_TEXT = (
    "\n\n  \nfirst doc line one\nline two\n\n\n\nsecond\r\n \t \r\n"
    "third doc\nwith \u00e9 accents \u4e2d\u6587\n\u3000\nfourth after an "
    "ideographic-space line\n\n\n" + "".join(
        "doc %d sentence %d\n%s" % (d, s, "\n" if s == d % 4 else "")
        for d in range(40) for s in range(5)) + "last line, no newline")


def test_split_pieces_read_each_document_exactly_once(tmp_path):
  path = tmp_path / "corpus.txt"
  path.write_bytes(TRICKY_TEXT.encode("utf-8"))
  size = os.path.getsize(str(path))
  whole = words_of(corpus_input.read_documents(
      [corpus_input.ShardPiece(str(path), 0, size)], str.split,
      lambda *args: None))
  assert len(whole) > 40
  for shard_bytes in list(range(1, 60)) + [97, 128, 333, size - 1, size]:
    shards = shard_plan.plan_shards(
        [corpus_input.InputFile(str(path), size, "text")], shard_bytes)
    documents = []
    for pieces in shards:
      documents += corpus_input.read_documents(pieces, str.split,
                                               lambda *args: None)
    assert words_of(documents) == whole, shard_bytes


def test_files_of_a_shard_end_their_documents(tmp_path):
  first, second = tmp_path / "1.txt", tmp_path / "2.txt"
  first.write_text("a\n\nb\n", encoding="utf-8")
  second.write_text("c\n\nd\n", encoding="utf-8")
  pieces = [corpus_input.ShardPiece(str(first), 0, 4),
            corpus_input.ShardPiece(str(second), 0, 4)]
  assert corpus_input.read_documents(
      pieces, str.split, lambda *args: None) == [
          [["a"]], [["b"]], [["c"]], [["d"]]]


def test_expand_sharded_inputs(tmp_path):
  (tmp_path / "d" / "sub").mkdir(parents=True)
  (tmp_path / "d" / ".hidden").mkdir()
  for name in ["d/b.txt", "d/a.txt", "d/sub/c", "d/.hidden/x", "d/.y",
               "top.txt"]:
    (tmp_path / name).write_text("x\n", encoding="utf-8")
  got = corpus_input.expand_inputs(
      "%s,%s" % (tmp_path / "d", tmp_path / "t*.txt"))
  assert got == [(str(tmp_path / "d" / "a.txt"), 2, "text"),
                 (str(tmp_path / "d" / "b.txt"), 2, "text"),
                 (str(tmp_path / "d" / "sub" / "c"), 2, "text"),
                 (str(tmp_path / "top.txt"), 2, "text")]


# -------------------------------------------------- sharded end to end ----


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
  """Three files and a directory of two more (at 4 KB a shard: b.txt is
  split, small files are packed together)."""
  root = tmp_path_factory.mktemp("corpus")
  (root / "more").mkdir()
  for i, (name, size) in enumerate([("a.txt", 2000), ("b.txt", 9000),
                                    ("c.txt", 2500), ("more/d.txt", 1000),
                                    ("more/e.txt", 1000)]):
    write_corpus(root / name, size, seed=i)
  return root


def corpus_flag(corpus_dir):
  return "%s/[ab].txt,%s,%s/more" % (corpus_dir, corpus_dir / "c.txt",
                                     corpus_dir)


def planned_shards(input_file, shard_bytes=4000):
  return shard_plan.plan_shards(
      corpus_input.expand_inputs(input_file), shard_bytes)


@pytest.mark.slow
def test_output_is_identical_for_one_and_two_workers(corpus_dir, tmp_path):
  for workers in (1, 2):
    run_sharded(corpus_flag(corpus_dir), tmp_path / str(workers),
                num_workers=workers)
  one, two = directory_bytes(tmp_path / "1"), directory_bytes(tmp_path / "2")
  shards = planned_shards(corpus_flag(corpus_dir))
  assert len(shards) >= 6
  assert max(len(pieces) for pieces in shards) == 2  # Small files packed.
  assert list(one) == ["part-%05d-of-%05d.tfrecord" % (i, len(shards))
                       for i in range(len(shards))] + ["part.manifest.json"]
  assert one == two
  for name in shard_files(tmp_path / "1"):
    records = list(tf.io.tf_record_iterator(str(tmp_path / "1" / name)))
    assert len(records) > 10
    tf.train.Example.FromString(records[0])


@pytest.mark.slow
def test_each_shard_equals_a_faithful_run_of_its_text(tmp_path):
  # Files of 3-4.6 KB with 5 KB shards: one file per shard.
  paths = [write_corpus(tmp_path / ("%d.txt" % i), 3000 + 200 * i, seed=i)
           for i in range(3)]
  assert planned_shards(",".join(paths), 5000) == [
      (corpus_input.ShardPiece(path, 0, os.path.getsize(path)),)
      for path in paths]
  params = dataclasses.replace(PARAMS, do_whole_word_mask=True)
  run_sharded(",".join(paths), tmp_path / "out", params=params, random_seed=7,
              shard_size_mb=0.005)
  for index, path in enumerate(paths):
    faithful = str(tmp_path / ("faithful%d.tfrecord" % index))
    cpd.run(creation_options.CreationOptions(
        input_file=path, vocab_file=CPD_VOCAB, output_file=faithful,
        random_seed=shard_plan.shard_seed(7, index), dupe_factor=2,
        **dataclasses.asdict(params)))
    shard = tmp_path / "out" / ("part-%05d-of-00003.tfrecord" % index)
    assert read_bytes(str(shard)) == read_bytes(faithful)


@pytest.mark.slow
def test_a_shard_does_not_depend_on_other_shards(corpus_dir, tmp_path):
  changed = tmp_path / "changed"
  changed.mkdir()
  for name in ("a.txt", "b.txt"):
    (changed / name).write_bytes(read_bytes(str(corpus_dir / name)))
  text = read_bytes(str(corpus_dir / "b.txt")).decode("utf-8")
  # Same size (same plan), different words at the end of b.txt.
  (changed / "b.txt").write_text(text[:-8] + "zzzzzz\n\n", encoding="utf-8")
  run_sharded("%s/a.txt,%s/b.txt" % (corpus_dir, corpus_dir), tmp_path / "1")
  run_sharded("%s/a.txt,%s/b.txt" % (changed, changed), tmp_path / "2")
  before, after = directory_bytes(tmp_path / "1"), directory_bytes(
      tmp_path / "2")
  names = shard_files(tmp_path / "1")
  assert len(names) >= 3  # a.txt, then b.txt in pieces.
  assert [before[n] == after[n] for n in names] == [True] * (
      len(names) - 1) + [False]


@pytest.mark.slow
def test_python_and_fast_backends_write_identical_shards(corpus_dir, tmp_path):
  for backend in ("python", "fast"):
    run_sharded(str(corpus_dir / "a.txt"), tmp_path / backend,
                tokenizer_backend=backend, num_workers=1)
  assert (directory_bytes(tmp_path / "python") ==
          directory_bytes(tmp_path / "fast"))


@pytest.mark.slow
def test_resume_skips_complete_shards_and_redoes_missing_ones(corpus_dir,
                                                              tmp_path):
  out = tmp_path / "out"
  run_sharded(corpus_flag(corpus_dir), out)
  first = directory_bytes(out)
  names = shard_files(out)
  mtimes = {n: os.stat(str(out / n)).st_mtime_ns for n in names}
  os.remove(str(out / names[2]))
  (out / (names[4] + ".partial-0badf00d")).write_bytes(b"half a shard")
  time.sleep(0.05)
  run_sharded(corpus_flag(corpus_dir), out)
  assert directory_bytes(out) == first  # Partial file gone too.
  for name in names:
    if name != names[2]:
      assert os.stat(str(out / name)).st_mtime_ns == mtimes[name], name
  assert os.stat(str(out / names[2])).st_mtime_ns > mtimes[names[0]]
  # --noresume rewrites everything.
  run_sharded(corpus_flag(corpus_dir), out, resume=False)
  assert directory_bytes(out) == first
  assert all(os.stat(str(out / n)).st_mtime_ns > mtimes[n] for n in names
             if n != names[2])


@pytest.mark.slow
def test_resume_refuses_output_of_other_flags(corpus_dir, tmp_path):
  out = tmp_path / "out"
  run_sharded(str(corpus_dir / "b.txt"), out)
  with pytest.raises(errors.UserError, match="--noresume"):
    run_sharded(str(corpus_dir / "b.txt"), out, dupe_factor=3)
  # Starting over with --noresume removes the old run's shards, even those
  # of a different shard count.
  run_sharded(str(corpus_dir / "a.txt"), out, dupe_factor=3, resume=False)
  assert shard_files(out) == ["part-00000-of-00001.tfrecord"]


# --------------------------------------------- interruption and kill ----


def command_flags(input_file, output_dir, **flags):
  args = {"input_file": input_file, "output_dir": str(output_dir),
          "vocab_file": CPD_VOCAB, "max_seq_length": 32,
          "max_predictions_per_seq": 5, "dupe_factor": 2, "num_workers": 2,
          "shard_size_mb": 0.05, "tokenizer_backend": "fast"}
  args.update(flags)
  return args


def sharded_command(input_file, output_dir, **flags):
  """The program's command line for `command_flags`."""
  return [sys.executable, "create_pretraining_data.py"] + [
      "--%s=%s" % item
      for item in sorted(command_flags(input_file, output_dir,
                                       **flags).items())]


def run_command_in_process(input_file, output_dir, **flags):
  """What `sharded_command` runs, run here (the program's `run`)."""
  cpd.run(creation_options.CreationOptions(
      **command_flags(input_file, output_dir, **flags)))


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory):
  """A corpus of ~48 shards of 50 KB, and the complete output for it (the
  program's: its forked workers make it faster than this process's spawned
  ones)."""
  root = tmp_path_factory.mktemp("big")
  path = write_corpus(root / "corpus.txt", 2400000, seed=5)
  subprocess.run(sharded_command(path, root / "complete"), cwd=REPO_ROOT,
                 check=True, capture_output=True)
  return path, directory_bytes(root / "complete")


def children_of(pid):
  found = []
  for entry in os.listdir("/proc"):
    if entry.isdigit():
      try:
        with open("/proc/%s/stat" % entry) as f:
          if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
      except OSError:
        pass
  return found


def start_and_wait_for_shards(command, output_dir, num_complete):
  """Starts `command`; returns it once `num_complete` shard files exist."""
  process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
  deadline = time.time() + 120
  while time.time() < deadline:
    if (os.path.isdir(str(output_dir)) and
        len(shard_files(output_dir)) >= num_complete):
      return process
    assert process.poll() is None, process.communicate()
    time.sleep(0.01)
  process.kill()
  process.communicate()
  raise AssertionError("no shard appeared")


def stderr_or_kill(process, timeout=60):
  """`process`'s stderr once it ends; kills it and its workers if it hangs."""
  try:
    return process.communicate(timeout=timeout)[1]
  except subprocess.TimeoutExpired:
    for pid in children_of(process.pid) + [process.pid]:
      os.kill(pid, signal.SIGKILL)
    process.communicate()
    raise


def assert_final_files_are_complete(output_dir, complete):
  for name in shard_files(output_dir):
    assert read_bytes(str(output_dir / name)) == complete[name], name


@pytest.mark.slow
def test_ctrl_c_leaves_complete_shards_only(big_corpus, tmp_path):
  path, complete = big_corpus
  out = tmp_path / "out"
  process = start_and_wait_for_shards(sharded_command(path, out), out, 2)
  process.send_signal(signal.SIGINT)
  stderr = stderr_or_kill(process)
  assert process.returncode == 130, stderr
  assert "rerun" in stderr.decode().splitlines()[-1]
  assert_final_files_are_complete(out, complete)
  assert 2 <= len(shard_files(out)) < len(complete) - 1
  assert not partial_files(out)
  subprocess.run(sharded_command(path, out), cwd=REPO_ROOT, check=True,
                 capture_output=True)
  assert directory_bytes(out) == complete


@pytest.mark.slow
def test_kill_leaves_no_partial_shard_under_a_final_name(big_corpus,
                                                         tmp_path):
  path, complete = big_corpus
  out = tmp_path / "out"
  process = start_and_wait_for_shards(sharded_command(path, out), out, 1)
  workers = children_of(process.pid)
  process.kill()
  process.communicate()
  # Orphaned workers notice that their parent died and stop.
  deadline = time.time() + 20
  while any(os.path.exists("/proc/%d" % w) for w in workers):
    assert time.time() < deadline, "workers outlived their parent"
    time.sleep(0.05)
  assert_final_files_are_complete(out, complete)
  assert len(shard_files(out)) < len(complete) - 1
  subprocess.run(sharded_command(path, out), cwd=REPO_ROOT, check=True,
                 capture_output=True)
  assert directory_bytes(out) == complete


@pytest.mark.slow
def test_a_worker_killed_mid_run_ends_it_with_one_line(big_corpus, tmp_path):
  # As the out-of-memory killer does. A multiprocessing pool used to start
  # a new worker and wait for the lost shard forever.
  path, complete = big_corpus
  out = tmp_path / "out"
  process = start_and_wait_for_shards(sharded_command(path, out), out, 1)
  workers = children_of(process.pid)
  victim = workers[0]
  os.kill(victim, signal.SIGKILL)
  stderr = stderr_or_kill(process)
  assert process.returncode == errors.EXIT_TRAINING_FAILED, stderr[-3000:]
  last = stderr.decode().splitlines()[-1]
  assert re.fullmatch(
      r"error: a local worker \(pid %d\) was killed by SIGKILL \(out of "
      r"memory\?\) while making shard \d+; complete shards are kept: rerun "
      r"the same command to make the rest" % victim, last), last
  assert not [w for w in workers if os.path.exists("/proc/%d" % w)]
  assert not partial_files(out)
  assert_final_files_are_complete(out, complete)
  assert len(shard_files(out)) < len(complete) - 1
  subprocess.run(sharded_command(path, out), cwd=REPO_ROOT, check=True,
                 capture_output=True)
  assert directory_bytes(out) == complete


def test_a_task_sent_to_a_dead_worker_names_its_shard():
  context = multiprocessing.get_context("spawn")
  ours, theirs = context.Pipe()
  process = context.Process(target=time.sleep, args=(60,), daemon=True)
  process.start()
  theirs.close()
  process.kill()
  process.join()
  running = {}
  with pytest.raises(errors.TrainingFailed) as raised:
    local_workers._send_task(running, ours, process, (7, (), "unused"))
  assert str(raised.value).startswith(
      "a local worker (pid %d) was killed by SIGKILL (out of memory?) while "
      "making shard 7;" % process.pid)
  assert running == {ours: (process, (7, (), "unused"))}


def test_interrupt_while_writing_a_shard_leaves_no_file(tmp_path,
                                                        monkeypatch):
  path = write_corpus(tmp_path / "c.txt", 3000, seed=1)
  vocab = tokenization.load_vocab(CPD_VOCAB)
  settings = shard_task.ShardSettings(vocab, True, "fast", PARAMS, 1,
                                              2)

  calls = []
  real_frame = tfrecord_files._frame

  def interrupt_second_batch(records):
    calls.append(1)
    if len(calls) == 2:
      raise KeyboardInterrupt()
    return real_frame(records)

  monkeypatch.setattr(tfrecord_files, "_BATCH_BYTES", 2000)
  monkeypatch.setattr(tfrecord_files, "_frame", interrupt_second_batch)
  output = str(tmp_path / "out" / "part-00000-of-00001.tfrecord")
  os.mkdir(str(tmp_path / "out"))
  with pytest.raises(KeyboardInterrupt):
    shard_task.make_shard(
        settings, (0, (corpus_input.ShardPiece(path, 0, 3000),), output),
        lambda work, num_instances: None)
  assert os.listdir(str(tmp_path / "out")) == []


SIGTERM_WHILE_BLOCKED = """
import multiprocessing, os, signal, sys, threading, time
sys.path.insert(0, %r)
from bertkit.data import local_workers
signal.signal(signal.SIGTERM, lambda *args: None)  # A caller's handler.
local_workers.set_worker_signals()
# The main thread blocks on a lock with SIGTERM masked, so the signal lands
# on another thread: a Python handler would then never run, as when it
# lands just before the main thread blocks.
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
lock = multiprocessing.Lock()
lock.acquire()
print("blocked", flush=True)
lock.acquire()
"""


def test_sigterm_ends_a_local_worker_whatever_it_is_blocked_in():
  process = subprocess.Popen(
      [sys.executable, "-c", SIGTERM_WHILE_BLOCKED % REPO_ROOT],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    assert process.stdout.readline() == "blocked\n", process.stderr.read()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == -signal.SIGTERM
  finally:
    process.kill()
    process.communicate()


# ----------------------------------------------------------- progress ----


@pytest.mark.slow
def test_progress_bar_on_a_terminal_and_log_lines_otherwise(corpus_dir,
                                                            tmp_path, caplog,
                                                            capsys):
  import pty  # pylint: disable=g-import-not-at-top
  master, slave = pty.openpty()
  command = sharded_command(str(corpus_dir / "b.txt"), tmp_path / "tty",
                            shard_size_mb=0.004)
  num_shards = len(planned_shards(str(corpus_dir / "b.txt")))
  process = subprocess.Popen(command, cwd=REPO_ROOT, stderr=slave,
                             stdout=subprocess.DEVNULL)
  os.close(slave)
  output = b""
  while True:
    try:
      chunk = os.read(master, 4096)
    except OSError:
      break
    if not chunk:
      break
    output += chunk
  assert process.wait() == 0
  os.close(master)
  text = output.decode("utf-8", "replace")
  assert "\r[####################] shards %d/%d" % (num_shards,
                                                   num_shards) in text
  assert "instances/s" in text and "ETA" in text

  # Not on a terminal (here, in process): log lines, no bar.
  caplog.set_level(logging.INFO, logger="absl")
  run_command_in_process(str(corpus_dir / "b.txt"), tmp_path / "log",
                         shard_size_mb=0.004)
  assert "\r" not in capsys.readouterr().err
  messages = "\n".join(r.getMessage() for r in caplog.records)
  assert "done: shards %d/%d" % (num_shards, num_shards) in messages
  pattern = str(tmp_path / "log" / ("part-*-of-%05d.tfrecord" % num_shards))
  num_records = sum(
      len(list(tf.io.tf_record_iterator(path)))
      for path in tf.io.gfile.glob(pattern))
  assert "Wrote %d total instances to %s" % (num_records, pattern) in (
      messages)


# ---------------------------------------------------------- bad input ----


def assert_refused(input_file, output_dir, *expected, **flags):
  """In process: a one-line UserError holding each of `expected`."""
  with pytest.raises(errors.UserError) as raised:
    run_command_in_process(input_file, output_dir, **flags)
  assert "\n" not in str(raised.value)
  for text in expected:
    assert text in str(raised.value)


def test_bad_input_no_file_matches(tmp_path):
  pattern = str(tmp_path / "none-*.txt")
  assert_refused(pattern, tmp_path / "out", pattern, "matches no file")


def test_bad_input_directory_without_files(tmp_path):
  (tmp_path / "empty" / ".hidden").mkdir(parents=True)
  (tmp_path / "empty" / ".hidden" / "x.txt").write_text("x\n")
  assert_refused(str(tmp_path / "empty"), tmp_path / "out",
                 str(tmp_path / "empty"), "holds no")


@pytest.mark.slow
def test_bad_input_not_utf8_names_file_and_line(tmp_path):
  path = tmp_path / "latin1.txt"
  good = "".join("line %d of the text\n" % i for i in range(3000))
  path.write_bytes(good.encode() + b"caf\xe9 au lait\n\nmore\n")
  # Several times: the workers are stopped while the other one makes a
  # shard or waits for a task. A multiprocessing pool's stop hung in about
  # one run of 300 (a SIGTERM handled too late, or a worker killed holding
  # the pool's result lock).
  # The first run is the program's (forked workers, the error line), the
  # others in process (spawned workers).
  expected = (str(path), "line 3001", "0xe9", "UTF-8")
  for attempt in range(6):
    out = tmp_path / ("out%d" % attempt)
    if attempt == 0:
      result = run_program(sharded_command(str(path), out,
                                           shard_size_mb=0.01)[1:],
                           timeout=120)
      assert_one_error_line(result, *expected)
    else:
      assert_refused(str(path), out, *expected, shard_size_mb=0.01)
    # The directory is gone if the error came before any shard was done.
    assert not os.path.exists(str(out)) or not partial_files(out)


# ------------------------------------------------------------- memory ----


def peak_rss_kb(command):
  """Largest RSS of any process of `command`'s tree, in KB.

  Measured from a fresh intermediate process: RUSAGE_CHILDREN covers the
  command and the workers it waited for, and nothing else.
  """
  probe = ("import resource, subprocess, sys; "
           "subprocess.run(sys.argv[1:], check=True, capture_output=True); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
  result = subprocess.run([sys.executable, "-c", probe] + command,
                          cwd=REPO_ROOT, capture_output=True, text=True,
                          check=True)
  return int(result.stdout)


@pytest.mark.slow
def test_peak_memory_stays_flat_as_the_corpus_grows(tmp_path):
  small = write_corpus(tmp_path / "small.txt", 2000000, seed=1)
  large = write_corpus(tmp_path / "large.txt", 8000000, seed=2)
  flags = dict(dupe_factor=1, max_seq_length=128, max_predictions_per_seq=20)
  # As a user types it (default --shard_size_mb): shards planned from the
  # corpus size.
  sharded = [peak_rss_kb(sharded_command(path, tmp_path / name,
                                         shard_size_mb=16, **flags))
             for path, name in ((small, "s"), (large, "l"))]
  assert sharded[1] < 1.2 * sharded[0], sharded
  # No process imported TensorFlow (~430 MB) or held the whole corpus.
  assert sharded[1] < 100 * 1024, sharded
  # The measurement can tell: faithful mode, which holds the whole corpus's
  # documents, grows.
  faithful = [peak_rss_kb([sys.executable, "create_pretraining_data.py",
                           "--input_file=" + path, "--vocab_file=" + CPD_VOCAB,
                           "--output_file=%s" % (tmp_path / name)] +
                          ["--%s=%s" % item for item in sorted(flags.items())])
              for path, name in ((small, "s.tfrecord"), (large, "l.tfrecord"))]
  assert faithful[1] > 1.2 * faithful[0], faithful


def test_an_exception_in_a_worker_ends_the_run_with_its_traceback():
  settings = shard_task.ShardSettings(
      tokenization.load_vocab(CPD_VOCAB), True, "fast", None, 1, 1)
  progress = creation_progress.Progress(sys.stderr, 1, num_shards=1)
  tasks = [(0, (), "unused"), (1, (), "unused")]
  with pytest.raises(AttributeError) as raised:
    list(local_workers.run_local(settings, tasks, 2, progress))
  assert str(raised.value).startswith("'NoneType' object has no attribute")
  assert type(raised.value.__cause__).__name__ == "WorkerTraceback"
  assert "in make_shard" in str(raised.value.__cause__)
  assert len(multiprocessing.active_children()) == 0
