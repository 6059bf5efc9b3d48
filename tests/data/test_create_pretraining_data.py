"""Tests for create_pretraining_data.py.

The golden files under tests/fixtures/create_pretraining_data/ hold records that
google-research/bert's own create_pretraining_data.py and tokenization.py
(commit eedf5716), run outside this repository, wrote (README.md there says
how):
- golden_default.json, golden_whole_word_mask.json: corpus.txt and
  vocab.txt with the flags stored in each file ("flags"), written to two
  output files ("outputs": one list of records per file, in file order),
  each record decoded to a dict of feature lists. The whole-word file
  differs only by --do_whole_word_mask=True.
- upstream_NAME.tfrecord: upstream's output file itself, for the flags in
  upstream_NAME.flags (sequence length 128; tiny whole-word sequences;
  every token masked; a vocab with repeated lines; a one-document corpus).
"""

import collections
import dataclasses
import json
import logging
import os
import random

import pytest
import tensorflow.compat.v1 as tf

from bertkit.data import corpus_input
import create_pretraining_data as cpd
from bertkit.common import errors
from bertkit.common import options
from bertkit.data import creation_options
from bertkit.data import creation_progress
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.data import tfrecord_files
import tokenization
from conftest import run_program
from conftest import REPO_ROOT

MASKED_FEATURES = [f.name for f in pretraining_records.MASKED.features]

DATA_DIR = os.path.join(REPO_ROOT, "tests", "fixtures",
                        "create_pretraining_data")
CORPUS = os.path.join(DATA_DIR, "corpus.txt")
VOCAB = os.path.join(DATA_DIR, "vocab.txt")
GOLDEN_FILES = ("golden_default.json", "golden_whole_word_mask.json")

INT_FEATURES = ("input_ids", "input_mask", "segment_ids",
                "masked_lm_positions", "masked_lm_ids", "next_sentence_labels")

SMALL_PARAMS = pretraining_instances.InstanceParams(
    max_seq_length=32, short_seq_prob=0.3, masked_lm_prob=0.15,
    max_predictions_per_seq=5, do_whole_word_mask=False)


def load_golden(name):
  with open(os.path.join(DATA_DIR, name)) as f:
    return json.load(f)


def decode_records(path):
  """Returns the records of a TFRecord file as dicts of feature lists."""
  records = []
  for raw in tf.io.tf_record_iterator(path):
    example = tf.train.Example.FromString(raw)
    feature = example.features.feature
    assert sorted(feature.keys()) == sorted(MASKED_FEATURES)
    record = {name: list(feature[name].int64_list.value)
              for name in INT_FEATURES}
    record["masked_lm_weights"] = list(
        feature["masked_lm_weights"].float_list.value)
    records.append(record)
  return records


def params_from_golden(golden_flags):
  return pretraining_instances.InstanceParams(
      max_seq_length=golden_flags["max_seq_length"],
      short_seq_prob=golden_flags["short_seq_prob"],
      masked_lm_prob=golden_flags["masked_lm_prob"],
      max_predictions_per_seq=golden_flags["max_predictions_per_seq"],
      do_whole_word_mask=golden_flags["do_whole_word_mask"])


def run_in_process(out_dir, params=SMALL_PARAMS, random_seed=12345,
                   dupe_factor=2, num_outputs=2, input_file=CORPUS,
                   tokenizer_backend="fast"):
  """Runs faithful mode into `out_dir`; returns the output paths."""
  out_dir.mkdir(parents=True, exist_ok=True)
  outputs = [str(out_dir / ("out%d.tfrecord" % i)) for i in range(num_outputs)]
  cpd.run(creation_options.CreationOptions(
      input_file=input_file, vocab_file=VOCAB, output_file=",".join(outputs),
      random_seed=random_seed, dupe_factor=dupe_factor,
      tokenizer_backend=tokenizer_backend, **dataclasses.asdict(params)))
  return outputs


def read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


# ---------------------------------------------------------------- golden ----


@pytest.mark.parametrize("backend", ["fast", "python"])
@pytest.mark.parametrize("golden_name", GOLDEN_FILES)
def test_records_equal_upstream_golden(tmp_path, golden_name, backend):
  golden = load_golden(golden_name)
  flags = golden["flags"]
  outputs = run_in_process(tmp_path, params=params_from_golden(flags),
                           random_seed=flags["random_seed"],
                           dupe_factor=flags["dupe_factor"],
                           tokenizer_backend=backend)
  for path, expected in zip(outputs, golden["outputs"]):
    assert decode_records(path) == expected


# Settings of the upstream_NAME.flags / upstream_NAME.tfrecord goldens.
UPSTREAM_RUNS = ("seq128", "tiny_whole_word", "mask_all", "repeated_vocab",
                 "one_document")


def upstream_flags(name):
  """upstream_NAME.flags (one --flag=value a line) as a dict of strings."""
  with open(os.path.join(DATA_DIR, "upstream_%s.flags" % name)) as f:
    pairs = [line.strip()[len("--"):].split("=", 1) for line in f
             if line.strip()]
  return dict(pairs)


def upstream_golden_path(name):
  return os.path.join(DATA_DIR, "upstream_%s.tfrecord" % name)


def run_with_upstream_flags(out_dir, name, backend):
  """Faithful mode with upstream_NAME.flags; returns the output path."""
  flags = upstream_flags(name)
  params = pretraining_instances.InstanceParams(
      max_seq_length=int(flags["max_seq_length"]),
      short_seq_prob=float(flags["short_seq_prob"]),
      masked_lm_prob=float(flags["masked_lm_prob"]),
      max_predictions_per_seq=int(flags["max_predictions_per_seq"]),
      do_whole_word_mask=flags["do_whole_word_mask"] == "true")
  output = str(out_dir / "out.tfrecord")
  cpd.run(creation_options.CreationOptions(
      input_file=os.path.join(DATA_DIR, flags["input_file"]),
      vocab_file=os.path.join(DATA_DIR, flags["vocab_file"]),
      output_file=output, do_lower_case=flags["do_lower_case"] == "true",
      random_seed=int(flags["random_seed"]),
      dupe_factor=int(flags["dupe_factor"]), tokenizer_backend=backend,
      **dataclasses.asdict(params)))
  return output


@pytest.mark.parametrize("backend", ["fast", "python"])
@pytest.mark.parametrize("name", UPSTREAM_RUNS)
def test_output_file_equals_upstream_output_file(tmp_path, name, backend):
  output = run_with_upstream_flags(tmp_path, name, backend)
  assert read_bytes(output) == read_bytes(upstream_golden_path(name))


def golden_examples(name):
  return decode_records(upstream_golden_path(name))


def test_upstream_goldens_exercise_their_settings():
  # Guards the golden data: each setting must do what it is there for, or
  # its byte equality would prove less than it claims.
  vocab = list(tokenization.load_vocab(VOCAB))
  for name in UPSTREAM_RUNS:
    flags = upstream_flags(name)
    records = golden_examples(name)
    assert len(records) >= 5, name
    assert {len(r["input_ids"]) for r in records} == {
        int(flags["max_seq_length"])}, name
  # Sequence length 128: some records are longer than 32 tokens, and each
  # masks round(15%) of its tokens (20 at the most).
  records = golden_examples("seq128")
  assert max(sum(r["input_mask"]) for r in records) > 64
  # Tiny whole-word sequences: some masked word piece ("##...") is masked
  # together with the piece before it.
  records = golden_examples("tiny_whole_word")
  joined = 0
  for r in records:
    num_masked = int(sum(r["masked_lm_weights"]))
    positions = r["masked_lm_positions"][:num_masked]
    labels = dict(zip(positions, r["masked_lm_ids"]))
    joined += sum(1 for p in positions
                  if vocab[labels[p]].startswith("##") and p - 1 in labels)
  assert joined > 0
  # Mask all: every token but [CLS] and the two [SEP]s is predicted.
  for r in golden_examples("mask_all"):
    assert sum(r["masked_lm_weights"]) == sum(r["input_mask"]) - 3
  # A lone document: some random next is drawn from the document itself.
  assert 1 in {r["next_sentence_labels"][0]
               for r in golden_examples("one_document")}
  # Repeated vocab lines: "the" has its last line number, 150, which upstream
  # writes as its id; ids after it moved by one.
  repeated = tokenization.load_vocab(
      os.path.join(DATA_DIR, upstream_flags("repeated_vocab")["vocab_file"]))
  assert repeated["the"] == 150 and len(repeated) == len(vocab)
  ids = {i for r in golden_examples("repeated_vocab") for i in r["input_ids"]}
  assert 150 in ids and len(vocab) + 1 in ids


def test_logs_first_20_examples_and_total(tmp_path, caplog):
  # The examples at DEBUG (-v 1), the rest at INFO.
  caplog.set_level(logging.DEBUG, logger="absl")
  outputs = run_in_process(tmp_path)
  messages = [r.getMessage() for r in caplog.records]
  assert messages.count("*** Example ***") == 20
  assert messages[-1] == "Wrote 65 total instances to " + ", ".join(outputs)
  assert messages[-2].startswith("done: 100% | 65 instances | ")
  assert "instances/s" in messages[-2] and "ETA 0:00" in messages[-2]
  # The first logged example is the first record of the first file.
  first = messages.index("*** Example ***")
  record = decode_records(outputs[0])[0]
  assert messages[first + 2] == "input_ids: " + " ".join(
      str(i) for i in record["input_ids"])
  assert "Read 16 documents (52 sentences) from 1 file(s)" in messages


def test_golden_runs_differ_by_whole_word_mask():
  # Guards the golden data itself: the two settings must not coincide, or
  # the whole-word test would prove nothing.
  default, wwm = [load_golden(name) for name in GOLDEN_FILES]
  assert default["outputs"] != wwm["outputs"]
  assert not default["flags"]["do_whole_word_mask"]
  assert wwm["flags"]["do_whole_word_mask"]


@pytest.mark.slow
def test_program_records_equal_upstream_golden(tmp_path):
  # Its flags (every instance flag) reach the records through the program;
  # golden_default.json, which differs only by do_whole_word_mask, is
  # checked in process (test_records_equal_upstream_golden).
  golden = load_golden("golden_whole_word_mask.json")
  flags = golden["flags"]
  outputs = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
  args = ["create_pretraining_data.py", "--input_file=" + CORPUS,
          "--vocab_file=" + VOCAB, "--output_file=" + ",".join(outputs)]
  args += ["--%s=%s" % (k, v) for k, v in sorted(flags.items())]
  result = run_program(args)
  assert result.returncode == 0, result.stderr
  num_records = sum(len(o) for o in golden["outputs"])
  assert "Wrote %d total instances" % num_records in result.stderr
  for path, expected in zip(outputs, golden["outputs"]):
    assert decode_records(path) == expected
  assert sorted(os.listdir(str(tmp_path))) == ["a.tfrecord", "b.tfrecord"]


# Runs the program as __main__ and reports, at exit, whether TensorFlow
# (~430 MB, ~5 s) was ever imported.
MAIN_WITHOUT_TENSORFLOW = """
import atexit, runpy, sys
atexit.register(lambda: print("tensorflow imported:",
                              "tensorflow" in sys.modules))
sys.argv = ["create_pretraining_data.py"] + sys.argv[1:]
runpy.run_path("create_pretraining_data.py", run_name="__main__")
"""


@pytest.mark.slow
def test_faithful_mode_never_imports_tensorflow_for_local_files(tmp_path):
  output = str(tmp_path / "out.tfrecord")
  result = run_program(["-c", MAIN_WITHOUT_TENSORFLOW,
                        "--input_file=" + CORPUS, "--vocab_file=" + VOCAB,
                        "--output_file=" + output, "--max_seq_length=32",
                        "--dupe_factor=1"])
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "tensorflow imported: False"
  assert "Wrote " in result.stderr and os.path.exists(output)


# ----------------------------------------------------------- determinism ----


def test_same_seed_gives_identical_bytes(tmp_path):
  first = run_in_process(tmp_path / "first", random_seed=7)
  second = run_in_process(tmp_path / "second", random_seed=7)
  for a, b in zip(first, second):
    assert read_bytes(a) == read_bytes(b)


def test_different_seed_gives_different_records(tmp_path):
  first = run_in_process(tmp_path / "first", random_seed=7)
  second = run_in_process(tmp_path / "second", random_seed=8)
  assert decode_records(first[0]) != decode_records(second[0])


# -------------------------------------------------------- feature format ----


def test_features_parse_with_the_pretraining_reader_spec(tmp_path, graph):
  # The dtypes and shapes run_pretraining.py declares (upstream's feature spec).
  seq, preds = SMALL_PARAMS.max_seq_length, SMALL_PARAMS.max_predictions_per_seq
  spec = {
      "input_ids": tf.FixedLenFeature([seq], tf.int64),
      "input_mask": tf.FixedLenFeature([seq], tf.int64),
      "segment_ids": tf.FixedLenFeature([seq], tf.int64),
      "masked_lm_positions": tf.FixedLenFeature([preds], tf.int64),
      "masked_lm_ids": tf.FixedLenFeature([preds], tf.int64),
      "masked_lm_weights": tf.FixedLenFeature([preds], tf.float32),
      "next_sentence_labels": tf.FixedLenFeature([1], tf.int64),
  }
  (path,) = run_in_process(tmp_path, num_outputs=1)
  raw = next(tf.io.tf_record_iterator(path))
  parsed = tf.io.parse_single_example(raw, spec)
  with tf.Session(graph=graph) as sess:
    values = sess.run(parsed)
  assert values["input_ids"].shape == (seq,)
  assert values["masked_lm_weights"].dtype.name == "float32"
  assert list(values["input_ids"]) == decode_records(path)[0]["input_ids"]


def test_every_record_is_well_formed(tmp_path):
  vocab = [line.strip() for line in open(VOCAB)]
  seq, preds = SMALL_PARAMS.max_seq_length, SMALL_PARAMS.max_predictions_per_seq
  records = []
  for path in run_in_process(tmp_path):
    records.extend(decode_records(path))
  assert len(records) > 30
  labels = set()
  for r in records:
    assert [len(r[name]) for name in MASKED_FEATURES] == [
        seq, seq, seq, preds, preds, preds, 1]
    length = sum(r["input_mask"])
    assert r["input_mask"] == [1] * length + [0] * (seq - length)
    assert r["input_ids"][length:] == [0] * (seq - length)
    num_masked = int(sum(r["masked_lm_weights"]))
    positions = r["masked_lm_positions"][:num_masked]
    # Undo the masking: a random replacement may be any vocab token.
    original_ids = list(r["input_ids"][:length])
    for p, i in zip(positions, r["masked_lm_ids"]):
      original_ids[p] = i
    assert 0 not in original_ids
    tokens = [vocab[i] for i in original_ids]
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    first_sep = tokens.index("[SEP]")
    assert tokens.count("[SEP]") == 2
    assert r["segment_ids"] == ([0] * (first_sep + 1) +
                                [1] * (length - first_sep - 1) +
                                [0] * (seq - length))
    assert r["masked_lm_weights"] == [1.0] * num_masked + [0.0] * (
        preds - num_masked)
    assert num_masked == min(preds, max(1, int(round(length * 0.15))))
    assert positions == sorted(set(positions))
    assert all(0 < p < length and tokens[p] != "[SEP]" for p in positions)
    assert r["masked_lm_positions"][num_masked:] == [0] * (preds - num_masked)
    assert r["masked_lm_ids"][num_masked:] == [0] * (preds - num_masked)
    assert all(vocab[i] not in ("[CLS]", "[SEP]", "[MASK]")
               for i in r["masked_lm_ids"][:num_masked])
    labels.add(r["next_sentence_labels"][0])
  assert labels == {0, 1}


def test_records_round_robin_over_output_files(tmp_path):
  (single,) = run_in_process(tmp_path / "first", num_outputs=1)
  three = run_in_process(tmp_path / "second", num_outputs=3)
  all_records = decode_records(single)
  for k, path in enumerate(three):
    assert decode_records(path) == all_records[k::3]


# ---------------------------------------------------------------- masking ----
# These drive pretraining_instances.InstanceMaker (the code that writes the
# records) on small vocabularies and read its records back.

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class Instances(object):
  """An InstanceMaker over a vocab of SPECIAL_TOKENS + `words`, on tokens."""

  def __init__(self, words, params, rng):
    self.vocab_list = SPECIAL_TOKENS + list(words)
    vocab = {token: i for i, token in enumerate(self.vocab_list)}
    encoder = pretraining_instances.make_encoder(vocab, params)
    self._vocab, self._codes = vocab, encoder.token_codes
    self.maker = pretraining_instances.InstanceMaker(rng, params, vocab,
                                                     encoder)

  def encode(self, tokens):
    return [self._codes[self._vocab[t]] for t in tokens]

  def record(self, tokens_a, tokens_b, is_random_next=False):
    """One instance of the pair, truncated and masked, read back."""
    return self.read(self.maker._record(  # pylint: disable=protected-access
        self.encode(tokens_a), self.encode(tokens_b), is_random_next))

  def document_records(self, documents, index):
    """The instances cut from documents[index], read back."""
    records = []
    self.maker._document_records(  # pylint: disable=protected-access
        [[self.encode(s) for s in d] for d in documents], index, records)
    return [self.read(r) for r in records]

  def read(self, record):
    """(masked tokens, original tokens, positions, segment_ids, is_next)."""
    features = pretraining_records.parse_example(record)
    length = sum(features["input_mask"])
    count = int(sum(features["masked_lm_weights"]))
    tokens = [self.vocab_list[i] for i in features["input_ids"][:length]]
    positions = features["masked_lm_positions"][:count]
    original = list(tokens)
    for p, i in zip(positions, features["masked_lm_ids"][:count]):
      original[p] = self.vocab_list[i]
    return (tokens, original, positions, features["segment_ids"][:length],
            features["next_sentence_labels"][0] == 0)


WORDS = ["w%d" % i for i in range(200)]


@pytest.mark.parametrize("length,prob,max_pred,expected", [
    (20, 0.15, 20, 3),    # round(3.0)
    (30, 0.15, 20, 4),    # round(4.5) rounds half to even
    (50, 0.15, 20, 8),    # round(7.5) rounds half to even
    (5, 0.15, 20, 1),     # round(0.75) = 1
    (5, 0.09, 20, 1),     # round(0.45) = 0, raised to the floor of 1
    (100, 0.5, 20, 20),   # capped by max_predictions_per_seq
    (10, 1.0, 20, 7),     # every token but [CLS] and the two [SEP]
])
def test_number_of_masked_tokens(length, prob, max_pred, expected):
  params = dataclasses.replace(
      SMALL_PARAMS, max_seq_length=128, masked_lm_prob=prob,
      max_predictions_per_seq=max_pred)
  instances = Instances(WORDS, params, random.Random(3))
  tokens, _, positions, _, _ = instances.record(WORDS[:length - 4], ["w199"])
  assert len(tokens) == length
  assert len(positions) == expected


def test_masking_changes_only_masked_positions():
  params = dataclasses.replace(
      SMALL_PARAMS, max_seq_length=32, masked_lm_prob=0.3,
      max_predictions_per_seq=6)
  instances = Instances(WORDS, params, random.Random(5))
  pair = (WORDS[:10], WORDS[10:20])
  expected = ["[CLS]"] + pair[0] + ["[SEP]"] + pair[1] + ["[SEP]"]
  for _ in range(50):
    tokens, original, positions, segment_ids, _ = instances.record(*pair)
    assert original == expected
    assert segment_ids == [0] * 12 + [1] * 11
    assert positions == sorted(set(positions)) and len(positions) == 6
    assert all(expected[p] not in ("[CLS]", "[SEP]") for p in positions)
    for i, (before, after) in enumerate(zip(expected, tokens)):
      if i not in positions:
        assert after == before


def test_masked_token_is_mask_80_keep_10_random_10_percent():
  params = dataclasses.replace(
      SMALL_PARAMS, max_seq_length=64, masked_lm_prob=0.5,
      max_predictions_per_seq=30)
  instances = Instances(WORDS, params, random.Random(11))
  outcomes = collections.Counter()
  while sum(outcomes.values()) < 20000:
    tokens, original, positions, _, _ = instances.record(WORDS[:30],
                                                         WORDS[30:60])
    for p in positions:
      outcomes["mask" if tokens[p] == "[MASK]" else
               "keep" if tokens[p] == original[p] else "random"] += 1
  total = sum(outcomes.values())
  # Fixed seed: the counts are reproducible; the bounds document the split
  # (a random replacement equal to the original counts as kept, 1 in 205).
  assert 0.79 < outcomes["mask"] / total < 0.81
  assert 0.09 < outcomes["keep"] / total < 0.11
  assert 0.09 < outcomes["random"] / total < 0.11


PIECES = ["un", "##pack", "##ing", "the", "light", "##house", "box", "grand",
          "##father", "end", "##game", "##s", "old"]


def words_of(tokens):
  """Position -> index of the word ("##" pieces join the word before)."""
  word_of, word = {}, -1
  for position, token in enumerate(tokens):
    if token in ("[CLS]", "[SEP]"):
      continue
    if not token.startswith("##"):
      word += 1
    word_of[position] = word
  return word_of


def test_whole_word_mask_masks_all_pieces_of_a_word():
  params = dataclasses.replace(
      SMALL_PARAMS, max_seq_length=32, masked_lm_prob=0.3,
      max_predictions_per_seq=5, do_whole_word_mask=True)
  instances = Instances(PIECES, params, random.Random(1))
  for _ in range(100):
    _, original, positions, _, _ = instances.record(PIECES[:6], PIECES[6:])
    word_of = words_of(original)
    assert 1 <= len(positions) <= 5
    masked_words = {word_of[p] for p in positions}
    assert positions == sorted(p for p, w in word_of.items()
                               if w in masked_words)


def test_whole_word_mask_joins_a_piece_after_sep_to_the_word_before():
  # Upstream quirk: B may start with a "##" piece after front truncation;
  # it then joins the last word of A.
  params = dataclasses.replace(
      SMALL_PARAMS, max_seq_length=16, masked_lm_prob=0.25,
      do_whole_word_mask=True)
  instances = Instances(["a", "##b", "c", "d", "e"], params, random.Random(0))
  masked_together = 0
  for _ in range(50):
    _, _, positions, _, _ = instances.record(["a"], ["##b", "c", "d", "e"])
    assert len(positions) == 2
    assert (1 in positions) == (3 in positions)
    masked_together += positions == [1, 3]
  assert masked_together > 0


def test_without_whole_word_mask_pieces_are_masked_alone():
  instances = Instances(PIECES, SMALL_PARAMS, random.Random(2))
  seen_partial = False
  for _ in range(50):
    _, original, positions, _, _ = instances.record(["un", "##pack"],
                                                    ["##ing", "light"])
    assert len(positions) == 1
    seen_partial |= original[positions[0]].startswith("##")
  assert seen_partial


# ------------------------------------------------------------ truncation ----


class ScriptedRandom(random.Random):
  """random() returns the given values first, then the seeded stream."""

  def __init__(self, values, seed=0):
    super().__init__(seed)
    self.values = list(values)

  def random(self):
    return self.values.pop(0) if self.values else super().random()

  def getrandbits(self, k):
    # Defined so that random.Random keeps drawing integers from getrandbits.
    return super().getrandbits(k)


def truncated_pair(tokens_a, tokens_b, max_num_tokens, draws):
  params = dataclasses.replace(SMALL_PARAMS, max_seq_length=max_num_tokens + 3)
  instances = Instances(sorted(set(tokens_a + tokens_b)), params,
                        ScriptedRandom(draws))
  _, original, _, segment_ids, _ = instances.record(tokens_a, tokens_b)
  num_a = segment_ids.count(0) - 2
  return original[1:1 + num_a], original[2 + num_a:-1]


def test_truncate_seq_pair_trims_longer_side_from_front_or_back():
  # A (longer) loses its first token, its last, then its first again.
  assert truncated_pair(list("abcdef"), list("xyz"), 6, [0.1, 0.9, 0.2]) == (
      list("cde"), list("xyz"))


def test_truncate_seq_pair_trims_b_on_a_tie():
  assert truncated_pair(list("abc"), list("xyz"), 5, [0.7]) == (
      list("abc"), list("xy"))


def test_truncate_seq_pair_leaves_a_short_enough_pair_alone():
  # A 0.0 would cut a front token if a draw were made.
  assert truncated_pair(list("ab"), list("c"), 3, [0.0, 0.0]) == (
      list("ab"), list("c"))


# --------------------------------------------------- instances from docs ----


def test_instances_respect_length_and_segments():
  documents = [[["s%d_%d" % (d, i)] * (3 + i % 4) for i in range(6)]
               for d in range(4)]
  words = sorted({t for d in documents for s in d for t in s})
  params = dataclasses.replace(SMALL_PARAMS, max_seq_length=16)
  instances = Instances(words, params, random.Random(4))
  seen_next = set()
  for index in range(len(documents)):
    for tokens, original, _, segment_ids, is_next in (
        instances.document_records(documents, index)):
      assert len(tokens) <= 16 and len(segment_ids) == len(tokens)
      assert original[0] == "[CLS]" and original[-1] == "[SEP]"
      first_sep = original.index("[SEP]")
      assert segment_ids == ([0] * (first_sep + 1) +
                             [1] * (len(tokens) - first_sep - 1))
      seen_next.add(is_next)
      if is_next:
        # An actual next segment comes from this same document.
        assert all(t.startswith("s%d_" % index) for t in original
                   if t not in ("[CLS]", "[SEP]"))
  assert seen_next == {True, False}


def test_one_segment_document_is_always_random_next():
  documents = [[["only", "one", "sentence"]],
               [["other", "words", "here"], ["and", "more"]]]
  words = sorted({t for d in documents for s in d for t in s})
  for seed in range(10):
    instances = Instances(words, dataclasses.replace(
        SMALL_PARAMS, short_seq_prob=0.0), random.Random(seed))
    (record,) = instances.document_records(documents, 0)
    assert not record[4]


def test_a_lone_one_sentence_document_is_its_own_random_next():
  # With no other document, the random-next draw keeps hitting this one;
  # after 10 tries upstream takes it anyway.
  instances = Instances(["a", "b", "c"], SMALL_PARAMS, random.Random(0))
  (record,) = instances.document_records([[["a", "b", "c"]]], 0)
  assert record[1] == ["[CLS]", "a", "b", "c", "[SEP]", "a", "b", "c",
                       "[SEP]"]
  assert not record[4]


def test_make_records_leaves_documents_untouched():
  documents = [[["a", "b"], ["c"]], [["d"]], [["e", "f"]]]
  instances = Instances(list("abcdef"), SMALL_PARAMS, random.Random(1))
  codes = [[instances.encode(s) for s in d] for d in documents]
  copy = [[list(s) for s in d] for d in codes]
  records = []
  num_records = instances.maker.make_records(codes, 3, records.append,
                                             lambda *args: None)
  assert codes == copy
  assert num_records == len(records) >= 3 * len(documents)


# --------------------------------------------------------------- reading ----


def test_read_documents_splits_on_blank_lines(tmp_path):
  path = tmp_path / "in.txt"
  path.write_text("a b\nc\n\n  \n\nd e f\n\n\n", encoding="utf-8")
  assert cpd.read_corpus_documents(
      corpus_input.expand_inputs(str(path)), str.split, lambda *args: None,
      "text") == [[["a", "b"], ["c"]], [["d", "e", "f"]]]


def test_read_documents_continues_a_document_across_files(tmp_path):
  # As upstream: only a blank line ends a document, not the end of a file.
  first, second = tmp_path / "1.txt", tmp_path / "2.txt"
  first.write_text("a\n\nb\n", encoding="utf-8")
  second.write_text("c\n\nd\n", encoding="utf-8")
  assert cpd.read_corpus_documents(
      corpus_input.expand_inputs("%s,%s" % (first, second)), str.split,
      lambda *args: None, "text") == [[["a"]], [["b"], ["c"]], [["d"]]]


def test_comma_list_and_glob_read_files_in_order(tmp_path):
  corpus = open(CORPUS, encoding="utf-8").read()
  documents = corpus.split("\n\n")
  half = len(documents) // 2
  parts = tmp_path / "parts"
  parts.mkdir()
  (parts / "part-1.txt").write_text(
      "\n\n".join(documents[:half]) + "\n\n", encoding="utf-8")
  (parts / "part-2.txt").write_text(
      "\n\n".join(documents[half:]), encoding="utf-8")
  whole = run_in_process(tmp_path / "whole", num_outputs=1)
  split = run_in_process(
      tmp_path / "split", num_outputs=1,
      input_file=str(parts / "part-1.txt") + "," +
      str(parts / "part-[2-9].txt"))
  assert read_bytes(whole[0]) == read_bytes(split[0])


# ----------------------------------------------------------- atomic output --


@pytest.mark.parametrize("stage", ["making", "writing"])
def test_interrupt_leaves_no_output(tmp_path, monkeypatch, stage):
  if stage == "making":
    def interrupt_at_the_first_instance(self, work, num_instances):
      del self, work  # Unused.
      if num_instances:
        raise KeyboardInterrupt()

    monkeypatch.setattr(creation_progress.Progress, "add",
                        interrupt_at_the_first_instance)
  else:
    real_write = tfrecord_files.write_tfrecord_file
    calls = []

    def interrupted_write(path, records):
      calls.append(path)
      if len(calls) == 2:  # The first file is complete, the second half.
        with open(path, "wb") as f:
          f.write(b"partial")
        raise KeyboardInterrupt()
      return real_write(path, records)

    monkeypatch.setattr(tfrecord_files, "write_tfrecord_file",
                        interrupted_write)
  with pytest.raises(KeyboardInterrupt):
    run_in_process(tmp_path)
  assert os.listdir(str(tmp_path)) == []


# ------------------------------------------------------------- bad input ----


def assert_user_error(result, tmp_path, *expected_substrings):
  """Exit 2, one `error:` line naming the problem, no output files."""
  assert result.returncode == errors.EXIT_USER_ERROR, result.stderr
  assert "Traceback" not in result.stderr
  lines = result.stderr.strip().splitlines()
  error_lines = [line for line in lines if line.startswith("error:")]
  assert error_lines == [lines[-1]]
  for expected in expected_substrings:
    assert expected in error_lines[0]
  assert_no_output_files(tmp_path)


def flag_values(tmp_path, **overrides):
  """The bad-input tests' flags: a small valid run, with `overrides`."""
  args = {"input_file": CORPUS, "vocab_file": VOCAB,
          "output_file": str(tmp_path / "out.tfrecord"),
          "max_seq_length": 32, "dupe_factor": 1}
  args.update(overrides)
  return args


def options_with(tmp_path, **overrides):
  return creation_options.CreationOptions(
      **flag_values(tmp_path, **overrides))


def run_with(tmp_path, **overrides):
  """The program, launched with those flags."""
  return run_program(["create_pretraining_data.py"] + [
      "--%s=%s" % item
      for item in sorted(flag_values(tmp_path, **overrides).items())])


def assert_refused(tmp_path, *expected_substrings, **overrides):
  """In process: a one-line UserError naming the problem, no output files
  (the program prints it as its `error:` line: see the launches below)."""
  with pytest.raises(errors.UserError) as raised:
    cpd.run(options_with(tmp_path, **overrides))
  message = str(raised.value)
  assert "\n" not in message
  for expected in expected_substrings:
    assert expected in message
  assert_no_output_files(tmp_path)


def assert_no_output_files(tmp_path):
  for root, _, files in os.walk(str(tmp_path)):
    for name in files:
      assert not name.endswith(".tfrecord") and ".partial" not in name, (
          os.path.join(root, name))


def test_bad_input_glob_matching_nothing(tmp_path):
  pattern = str(tmp_path / "nothing-*.txt")
  assert_refused(tmp_path, pattern, input_file=pattern)


def test_bad_input_directory_as_input(tmp_path):
  assert_refused(tmp_path, DATA_DIR, "is a directory", input_file=DATA_DIR)


LATIN1 = b"fine line\n\nsecond fine\ncaf\xe9 au lait\n"


def test_bad_input_not_utf8(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes(LATIN1)
  assert_refused(tmp_path, str(path), "line 4", "UTF-8",
                 input_file=str(path))


@pytest.mark.slow
def test_program_prints_bad_input_as_one_error_line(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes(LATIN1)
  assert_user_error(run_with(tmp_path, input_file=str(path)), tmp_path,
                    str(path), "line 4", "UTF-8")


def test_bad_input_no_usable_document(tmp_path):
  path = tmp_path / "blank.txt"
  path.write_text("\n   \n\t\n\n", encoding="utf-8")
  assert_refused(tmp_path, str(path), "no usable document",
                 input_file=str(path))


def test_bad_input_missing_vocab(tmp_path):
  vocab = str(tmp_path / "no-vocab.txt")
  assert_refused(tmp_path, vocab, vocab_file=vocab)


def test_bad_input_empty_vocab(tmp_path):
  vocab = tmp_path / "empty-vocab.txt"
  vocab.write_text("", encoding="utf-8")
  assert_refused(tmp_path, str(vocab), vocab_file=str(vocab))


def test_bad_input_vocab_without_special_tokens(tmp_path):
  vocab = tmp_path / "words.txt"
  vocab.write_text("[PAD]\n[UNK]\nthe\n", encoding="utf-8")
  assert_refused(tmp_path, str(vocab), "[CLS]", "[MASK]",
                 vocab_file=str(vocab))


@pytest.mark.parametrize("flag,value", [
    ("max_seq_length", 4),
    ("max_seq_length", 100000),
    ("masked_lm_prob", 0.0),
    ("masked_lm_prob", 1.5),
    ("max_predictions_per_seq", 0),
    ("dupe_factor", 0),
])
def test_bad_input_flag_out_of_range(tmp_path, flag, value):
  # The masking rate's options are run_pretraining's too, with its message.
  named = ("--%s must be >= 1, got %s" if flag == "max_predictions_per_seq"
           else "--%s=%s")
  assert_refused(tmp_path, named % (flag, value), **{flag: value})


@pytest.mark.parametrize("flag,value", [
    ("masked_lm_prob", float("nan")),
    ("short_seq_prob", float("inf")),
    ("shard_size_mb", float("inf")),
    ("shard_size_mb", float("nan")),
])
def test_bad_input_float_flag_not_finite(tmp_path, flag, value):
  with pytest.raises(errors.UserError) as raised:
    options_with(tmp_path, **{flag: value})
  assert str(raised.value) == "--%s=%r is not a finite number" % (flag,
                                                                   value)


@pytest.mark.slow
def test_program_prints_a_bad_flag_as_one_error_line(tmp_path):
  assert_user_error(run_with(tmp_path, masked_lm_prob=float("nan")),
                    tmp_path, "--masked_lm_prob=nan is not a finite number")


def test_option_defaults_are_the_masked_lm_defaults():
  # The program's flags are made from CreationOptions' fields.
  defaults = creation_options.CreationOptions(input_file="in.txt",
                                              vocab_file="vocab.txt")
  assert defaults.masked_lm_prob == options.MASKED_LM_PROB
  assert (defaults.max_predictions_per_seq ==
          options.MAX_PREDICTIONS_PER_SEQ)
  assert defaults.do_lower_case is True and not defaults.do_whole_word_mask
  assert defaults.num_passes == 10 and defaults.pack_limit is None
  assert dataclasses.replace(defaults, masking="dynamic").num_passes == 1
  assert not defaults.sharded
  assert dataclasses.replace(defaults, output_dir="out").sharded


def test_bad_input_output_directory_missing(tmp_path):
  missing = str(tmp_path / "no" / "such" / "dir")
  assert_refused(tmp_path, missing, "does not exist",
                 output_file=missing + "/out.tfrecord")


def test_bad_input_output_directory_not_writable(tmp_path):
  # /proc refuses new files even to root (chmod would not stop root).
  good = str(tmp_path / "out.tfrecord")
  assert_refused(tmp_path, "/proc", "cannot write",
                 output_file=good + ",/proc/out.tfrecord")
