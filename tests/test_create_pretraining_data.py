"""Tests for create_pretraining_data.py.

The golden files under tests/data/create_pretraining_data/ hold the records
that google-research/bert's own create_pretraining_data.py and
tokenization.py (commit eedf5716) wrote for corpus.txt and vocab.txt there,
with the flags stored in each golden file ("flags"), to two output files
("outputs": one list of records per file, in file order). Upstream was run
from a scratch directory outside the repository with only its TF 1 calls
renamed for TF 2.15 (tf.compat.v1 flags/logging/app, tf.io.gfile,
tf.io.TFRecordWriter); each record was decoded to a dict of feature lists.
The whole-word file differs only by --do_whole_word_mask=True.
"""

import json
import logging
import os
import random

import pytest
import tensorflow.compat.v1 as tf

import create_pretraining_data as cpd
import errors
import pretraining_instances
import pretraining_records
import upstream_reference as reference
from conftest import run_program

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
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
    assert sorted(feature.keys()) == sorted(pretraining_instances.FEATURE_NAMES)
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
                   dupe_factor=2, num_outputs=2, input_file=CORPUS):
  """Runs faithful mode into `out_dir`; returns the output paths."""
  out_dir.mkdir(parents=True, exist_ok=True)
  outputs = [str(out_dir / ("out%d.tfrecord" % i)) for i in range(num_outputs)]
  cpd.run_faithful_mode(input_file, ",".join(outputs), VOCAB, True, params,
                        random_seed, dupe_factor)
  return outputs


def read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


# ---------------------------------------------------------------- golden ----


@pytest.mark.parametrize("golden_name", GOLDEN_FILES)
def test_records_equal_upstream_golden(tmp_path, golden_name):
  golden = load_golden(golden_name)
  flags = golden["flags"]
  outputs = run_in_process(tmp_path, params=params_from_golden(flags),
                           random_seed=flags["random_seed"],
                           dupe_factor=flags["dupe_factor"])
  for path, expected in zip(outputs, golden["outputs"]):
    assert decode_records(path) == expected


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
@pytest.mark.parametrize("golden_name", GOLDEN_FILES)
def test_program_records_equal_upstream_golden(tmp_path, golden_name):
  golden = load_golden(golden_name)
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
    assert [len(r[name]) for name in pretraining_instances.FEATURE_NAMES] == [
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


@pytest.mark.parametrize("length,prob,max_pred,expected", [
    (20, 0.15, 20, 3),    # round(3.0)
    (30, 0.15, 20, 4),    # round(4.5) rounds half to even
    (50, 0.15, 20, 8),    # round(7.5) rounds half to even
    (5, 0.15, 20, 1),     # round(0.75) = 1
    (4, 0.1, 20, 1),      # round(0.4) = 0, raised to the floor of 1
    (100, 0.5, 20, 20),   # capped by max_predictions_per_seq
    (10, 1.0, 20, 8),     # every non-special token ([CLS] + 8 + [SEP])
])
def test_number_of_masked_tokens(length, prob, max_pred, expected):
  tokens = ["[CLS]"] + ["w%d" % i for i in range(length - 2)] + ["[SEP]"]
  _, positions, labels = reference.create_masked_lm_predictions(
      tokens, prob, max_pred, ["[MASK]", "x"], random.Random(3))
  assert len(positions) == expected
  assert len(labels) == expected


def test_masking_changes_only_masked_positions():
  tokens = (["[CLS]"] + ["a%d" % i for i in range(10)] + ["[SEP]"] +
            ["b%d" % i for i in range(10)] + ["[SEP]"])
  vocab_words = ["[MASK]", "zz"]
  rng = random.Random(5)
  for _ in range(50):
    output, positions, labels = reference.create_masked_lm_predictions(
        tokens, 0.3, 6, vocab_words, rng)
    assert positions == sorted(positions)
    assert labels == [tokens[p] for p in positions]
    for i, (before, after) in enumerate(zip(tokens, output)):
      if i not in positions:
        assert after == before
      else:
        assert after in ("[MASK]", before, "zz")
    assert len(output) == len(tokens)


def test_masked_token_is_mask_80_keep_10_random_10_percent():
  rng = random.Random(11)
  draws = [reference._masked_token("tok", ["rand"], rng) for _ in range(20000)]
  # Fixed seed: the counts are exact and reproducible; the bounds document
  # that they match the 80/10/10 split.
  assert 0.79 < draws.count("[MASK]") / 20000 < 0.81
  assert 0.09 < draws.count("tok") / 20000 < 0.11
  assert 0.09 < draws.count("rand") / 20000 < 0.11


def test_whole_word_mask_masks_all_pieces_of_a_word():
  words = [["un", "##pack", "##ing"], ["the"], ["light", "##house"], ["box"],
           ["grand", "##father"], ["end", "##game", "##s"], ["old"]]
  tokens = ["[CLS]"] + [p for w in words for p in w] + ["[SEP]"]
  word_of = {}
  position = 1
  for word_index, word in enumerate(words):
    for _ in word:
      word_of[position] = word_index
      position += 1
  rng = random.Random(1)
  for _ in range(100):
    _, positions, _ = reference.create_masked_lm_predictions(
        tokens, 0.3, 5, ["[MASK]"], rng, do_whole_word_mask=True)
    assert 1 <= len(positions) <= 5
    masked_words = {word_of[p] for p in positions}
    assert sorted(positions) == sorted(
        p for p, w in word_of.items() if w in masked_words)


def test_whole_word_mask_joins_a_piece_after_sep_to_the_word_before():
  # Upstream quirk: B may start with a "##" piece after front truncation;
  # it then joins the last word of A.
  tokens = ["[CLS]", "a", "[SEP]", "##b", "c", "d", "e", "[SEP]"]
  rng = random.Random(0)
  masked_together = 0
  for _ in range(50):
    _, positions, _ = reference.create_masked_lm_predictions(
        tokens, 0.25, 5, ["[MASK]"], rng, do_whole_word_mask=True)
    assert len(positions) == 2
    assert (1 in positions) == (3 in positions)
    masked_together += positions == [1, 3]
  assert masked_together > 0


def test_without_whole_word_mask_pieces_are_masked_alone():
  tokens = ["[CLS]", "un", "##pack", "##ing", "light", "##house", "[SEP]"]
  seen_partial = False
  rng = random.Random(2)
  for _ in range(50):
    _, positions, _ = reference.create_masked_lm_predictions(
        tokens, 0.15, 5, ["[MASK]"], rng)
    assert len(positions) == 1
    seen_partial |= positions[0] in (2, 3, 5)
  assert seen_partial


# ------------------------------------------------------------ truncation ----


class ScriptedRandom(object):
  """Returns the given `random()` values in order."""

  def __init__(self, values):
    self.values = list(values)

  def random(self):
    return self.values.pop(0)


def test_truncate_seq_pair_trims_longer_side_from_front_or_back():
  a = list("abcdef")
  b = list("xyz")
  reference.truncate_seq_pair(a, b, 6, ScriptedRandom([0.1, 0.9, 0.2]))
  # A (longer) loses its first token, its last, then its first again.
  assert a == list("cde")
  assert b == list("xyz")


def test_truncate_seq_pair_trims_b_on_a_tie():
  a = list("abc")
  b = list("xyz")
  reference.truncate_seq_pair(a, b, 5, ScriptedRandom([0.7]))
  assert a == list("abc")
  assert b == list("xy")


def test_truncate_seq_pair_draws_nothing_when_short_enough():
  a, b = list("ab"), list("c")
  reference.truncate_seq_pair(a, b, 3, ScriptedRandom([]))
  assert (a, b) == (list("ab"), list("c"))


# --------------------------------------------------- instances from docs ----


def test_instances_respect_length_and_segments():
  documents = [[["s%d_%d" % (d, i)] * (3 + i % 4) for i in range(6)]
               for d in range(4)]
  params = SMALL_PARAMS._replace(max_seq_length=16)
  rng = random.Random(4)
  for index in range(len(documents)):
    for instance in reference.create_instances_from_document(
        documents, index, rng, ["[MASK]"], params):
      assert len(instance.tokens) <= 16
      assert len(instance.segment_ids) == len(instance.tokens)
      assert instance.tokens[0] == "[CLS]"
      assert instance.tokens[-1] == "[SEP]"
      if not instance.is_random_next:
        # An actual next segment comes from this same document.
        restored = list(instance.tokens)
        for p, label in zip(instance.masked_lm_positions,
                            instance.masked_lm_labels):
          restored[p] = label
        assert all(t.startswith("s%d_" % index) for t in restored
                   if t not in ("[CLS]", "[SEP]"))


def test_one_segment_document_is_always_random_next():
  documents = [[["only", "one", "sentence"]],
               [["other", "words", "here"], ["and", "more"]]]
  rng = random.Random(0)
  instances = reference.create_instances_from_document(
      documents, 0, rng, ["[MASK]"], SMALL_PARAMS._replace(short_seq_prob=0.0))
  assert len(instances) == 1
  assert instances[0].is_random_next


class RecordingRandom(random.Random):
  """A `random.Random` that logs the calls the algorithm makes."""

  def __init__(self, seed):
    super().__init__(seed)
    self.calls = []

  def random(self):
    self.calls.append(("random",))
    return super().random()

  def getrandbits(self, k):
    # Defined so that random.Random keeps drawing integers from getrandbits
    # (a subclass overriding only random() would derive them from random()
    # and change the stream).
    return super().getrandbits(k)

  def randint(self, a, b):
    self.calls.append(("randint", a, b))
    return super().randint(a, b)

  def shuffle(self, x):
    self.calls.append(("shuffle", len(x)))
    super().shuffle(x)


def test_rng_call_order_for_a_lone_one_sentence_document():
  # The only document: the random-next draw hits it 10 times, then upstream
  # gives up and uses it anyway.
  rng = RecordingRandom(0)
  (instance,) = reference.create_instances_from_document(
      [[["a", "b", "c"]]], 0, rng, ["[MASK]"], SMALL_PARAMS)
  assert instance.is_random_next
  assert rng.calls[:13] == ([("random",)] + [("randint", 0, 0)] * 11 +
                            [("shuffle", 6)])
  assert instance.tokens.count("[SEP]") == 2


def test_rng_call_order_for_an_actual_next_pair():
  # Two 2-token sentences reach the target of 4 tokens: a 2-segment chunk,
  # so a_end = randint(1, 1) is drawn, then the random-next coin.
  params = SMALL_PARAMS._replace(max_seq_length=7, short_seq_prob=0.0)
  seed = next(s for s in range(100) if _random_next_coin(s) >= 0.5)
  rng = RecordingRandom(seed)
  (instance,) = reference.create_instances_from_document(
      [[["a", "b"], ["c", "d"]], [["e"]]], 0, rng, ["[MASK]"], params)
  assert not instance.is_random_next
  assert rng.calls[:4] == [("random",), ("randint", 1, 1), ("random",),
                           ("shuffle", 4)]
  assert instance.segment_ids == [0, 0, 0, 0, 1, 1, 1]


def _random_next_coin(seed):
  """The coin drawn after the short-sequence draw and a_end = randint(1, 1)."""
  rng = random.Random(seed)
  rng.random()
  rng.randint(1, 1)
  return rng.random()


def test_create_training_instances_leaves_documents_untouched():
  documents = [[["a", "b"], ["c"]], [["d"]], [["e", "f"]]]
  copy = json.loads(json.dumps(documents))
  instances = reference.create_training_instances(
      documents, random.Random(1), ["[MASK]"], SMALL_PARAMS, dupe_factor=3)
  assert documents == copy
  assert len(instances) >= 3 * len(documents)


# --------------------------------------------------------------- reading ----


def test_read_documents_splits_on_blank_lines(tmp_path):
  path = tmp_path / "in.txt"
  path.write_text("a b\nc\n\n  \n\nd e f\n\n\n", encoding="utf-8")
  assert cpd.read_documents([str(path)], str.split) == [
      [["a", "b"], ["c"]], [["d", "e", "f"]]]


def test_read_documents_continues_a_document_across_files(tmp_path):
  # As upstream: only a blank line ends a document, not the end of a file.
  first, second = tmp_path / "1.txt", tmp_path / "2.txt"
  first.write_text("a\n\nb\n", encoding="utf-8")
  second.write_text("c\n\nd\n", encoding="utf-8")
  assert cpd.read_documents([str(first), str(second)], str.split) == [
      [["a"]], [["b"], ["c"]], [["d"]]]


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

    monkeypatch.setattr(pretraining_instances.Progress, "add",
                        interrupt_at_the_first_instance)
  else:
    real_write = pretraining_records.write_tfrecord_file
    calls = []

    def interrupted_write(path, records):
      calls.append(path)
      if len(calls) == 2:  # The first file is complete, the second half.
        with open(path, "wb") as f:
          f.write(b"partial")
        raise KeyboardInterrupt()
      return real_write(path, records)

    monkeypatch.setattr(pretraining_records, "write_tfrecord_file",
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
  for root, _, files in os.walk(str(tmp_path)):
    for name in files:
      assert not name.endswith(".tfrecord") and ".partial" not in name, (
          os.path.join(root, name))


def run_with(tmp_path, **overrides):
  args = {"input_file": CORPUS, "vocab_file": VOCAB,
          "output_file": str(tmp_path / "out.tfrecord"),
          "max_seq_length": 32, "dupe_factor": 1}
  args.update(overrides)
  return run_program(["create_pretraining_data.py"] +
                     ["--%s=%s" % item for item in sorted(args.items())])


@pytest.mark.slow
def test_bad_input_glob_matching_nothing(tmp_path):
  pattern = str(tmp_path / "nothing-*.txt")
  assert_user_error(run_with(tmp_path, input_file=pattern), tmp_path, pattern)


@pytest.mark.slow
def test_bad_input_directory_as_input(tmp_path):
  assert_user_error(run_with(tmp_path, input_file=DATA_DIR), tmp_path,
                    DATA_DIR, "is a directory")


@pytest.mark.slow
def test_bad_input_not_utf8(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes(b"fine line\n\nsecond fine\ncaf\xe9 au lait\n")
  assert_user_error(run_with(tmp_path, input_file=str(path)), tmp_path,
                    str(path), "line 4", "UTF-8")


@pytest.mark.slow
def test_bad_input_no_usable_document(tmp_path):
  path = tmp_path / "blank.txt"
  path.write_text("\n   \n\t\n\n", encoding="utf-8")
  assert_user_error(run_with(tmp_path, input_file=str(path)), tmp_path,
                    str(path), "no usable document")


@pytest.mark.slow
def test_bad_input_missing_vocab(tmp_path):
  vocab = str(tmp_path / "no-vocab.txt")
  assert_user_error(run_with(tmp_path, vocab_file=vocab), tmp_path, vocab)


@pytest.mark.slow
def test_bad_input_empty_vocab(tmp_path):
  vocab = tmp_path / "empty-vocab.txt"
  vocab.write_text("", encoding="utf-8")
  assert_user_error(run_with(tmp_path, vocab_file=str(vocab)), tmp_path,
                    str(vocab))


@pytest.mark.slow
def test_bad_input_vocab_without_special_tokens(tmp_path):
  vocab = tmp_path / "words.txt"
  vocab.write_text("[PAD]\n[UNK]\nthe\n", encoding="utf-8")
  assert_user_error(run_with(tmp_path, vocab_file=str(vocab)), tmp_path,
                    str(vocab), "[CLS]", "[MASK]")


@pytest.mark.slow
@pytest.mark.parametrize("flag,value", [
    ("max_seq_length", 4),
    ("max_seq_length", 100000),
    ("masked_lm_prob", 0.0),
    ("masked_lm_prob", 1.5),
    ("max_predictions_per_seq", 0),
    ("dupe_factor", 0),
])
def test_bad_input_flag_out_of_range(tmp_path, flag, value):
  assert_user_error(run_with(tmp_path, **{flag: value}), tmp_path,
                    "--%s=%s" % (flag, value))


@pytest.mark.slow
def test_bad_input_output_directory_missing(tmp_path):
  missing = str(tmp_path / "no" / "such" / "dir")
  assert_user_error(
      run_with(tmp_path, output_file=missing + "/out.tfrecord"), tmp_path,
      missing, "does not exist")


@pytest.mark.slow
def test_bad_input_output_directory_not_writable(tmp_path):
  # /proc refuses new files even to root (chmod would not stop root).
  good = str(tmp_path / "out.tfrecord")
  assert_user_error(
      run_with(tmp_path, output_file=good + ",/proc/out.tfrecord"), tmp_path,
      "/proc", "cannot write")
