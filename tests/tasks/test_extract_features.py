"""extract_features.py: upstream's rules, the runner's replicas, the formats
and the errors, on a tiny random model in this process.

Equality with upstream's own program is tests/tasks/test_extract_features_
upstream.py; sentence vectors against sentence-transformers are
tests/tasks/test_sentence_embeddings.py.
"""

import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.tasks.features.options import FeatureExtractionOptions
from bertkit.common.errors import UserError
from bertkit.data import extraction_input as xi
from bertkit.data import pair_encoding
from bertkit.tasks.features import extraction as fx
from bertkit.tasks.features import pooling as sentence_pooling
import extract_features
import modeling
import tokenization
from conftest import TINY_CONFIG, options_from_args, run_in_process
from helpers.features import LINES, values, write_vocab


def save_random_bert(config_path, prefix):
  """A BertModel checkpoint of random weights (no head), and its config."""
  config = modeling.BertConfig.from_json_file(str(config_path))
  with tf.Graph().as_default():
    ids = tf.zeros([1, 2], tf.int32)
    modeling.BertModel(config, False, ids, ids, ids)
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, prefix)
  return prefix


@pytest.fixture(scope="module")
def model(tmp_path_factory):
  """{"dir", "config", "vocab", "checkpoint", "input"}: a tiny random BERT
  (TINY_CONFIG, 2 layers, H = 32) and LINES."""
  d = tmp_path_factory.mktemp("extract")
  with open(d / "tiny.json", "w") as f:
    json.dump(TINY_CONFIG, f)
  (d / "in.txt").write_text("\n".join(LINES) + "\n")
  return {"dir": d, "config": str(d / "tiny.json"),
          "vocab": write_vocab(d / "vocab.txt", TINY_CONFIG["vocab_size"]),
          "checkpoint": save_random_bert(d / "tiny.json",
                                         str(d / "ckpt" / "model.ckpt")),
          "input": str(d / "in.txt")}


def extract(model, output, *extra, input_file=None):
  """extract_features.run in this process; returns its InProcessRun."""
  args = ["--input_file=%s" % (input_file or model["input"]),
          "--output_file=%s" % output,
          "--init_checkpoint=%s" % model["checkpoint"],
          "--bert_config_file=%s" % model["config"],
          "--vocab_file=%s" % model["vocab"], "--max_seq_length=16",
          "--layers=-1,0", "--batch_size=2"] + list(extra)
  # Later flags win, as on a command line.
  by_name = {a.split("=")[0]: a for a in args}
  return run_in_process(extract_features.run, options_from_args(
      FeatureExtractionOptions, list(by_name.values())))


def read_lines(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


# ------------------------------------------------------------ upstream's rules


def test_a_pair_splits_at_the_spaced_separator_only():
  assert xi.parse_line(0, "a b ||| c", "x") == xi.Example(0, "a b", "c")
  assert xi.parse_line(1, "a|||b", "x") == xi.Example(1, "a|||b")
  assert xi.parse_line(2, "", "x") == xi.Example(2, "")


def test_a_line_with_two_separators_is_refused():
  with pytest.raises(UserError) as e:
    xi.parse_line(4, "a ||| b ||| c", "input file in.txt line 5")
  assert str(e.value) == (
      "input file in.txt line 5 holds 2 '|||' separators; expected one "
      "text, or two as 'text_a ||| text_b'")


def test_truncation_drops_from_the_longer_text_and_from_b_on_a_tie():
  # The one pair encoder's (bertkit/data/pair_encoding.py) upstream rule.
  a, b = pair_encoding.truncate_pair(list("abcde"), list("xy"), 5)
  assert (a, b) == (list("abc"), list("xy"))
  a, b = pair_encoding.truncate_pair(list("ab"), list("xy"), 3)
  assert (a, b) == (list("ab"), list("x"))


def test_features_have_cls_sep_segments_and_padding(model):
  tokenizer = tokenization.FullTokenizer(model["vocab"], True)
  pair = fx.convert_example(xi.Example(3, "Hello world", "is it"), 10,
                            tokenizer)
  assert pair.tokens == ["[CLS]", "hello", "world", "[SEP]", "is", "it",
                         "[SEP]"]
  assert pair.segment_ids == [0, 0, 0, 0, 1, 1, 1]
  assert pair.input_mask == [1] * 7
  assert pair.input_ids == tokenizer.convert_tokens_to_ids(pair.tokens)
  single = fx.convert_example(xi.Example(0, "the cat sat on the mat"), 5,
                              tokenizer)
  assert single.tokens == ["[CLS]", "the", "cat", "sat", "[SEP]"]


def feature_of_length(unique_id, length):
  return fx.Feature(unique_id, ["x"] * length, [5] * length, [1] * length,
                    [0] * length)


def test_batches_are_sorted_longest_first_within_windows():
  features = [feature_of_length(i, n) for i, n in enumerate([2, 5, 3, 5, 9])]
  assert fx.batch_order(features, 1) == [0, 1, 2, 3, 4]
  assert fx.batch_order(features, 4) == [1, 3, 2, 0, 4]
  assert fx.batch_order(features, 10) == [4, 1, 3, 2, 0]


def test_each_batch_is_padded_to_its_longest_row(graph):
  features = [feature_of_length(i, n) for i, n in enumerate([2, 5, 3])]
  dataset = fx.input_fn_builder(features, [1, 0, 2], 2)()
  batches = tf.data.make_one_shot_iterator(dataset).get_next()
  with tf.Session() as sess:
    first, second = sess.run(batches), sess.run(batches)
  assert first["unique_ids"].tolist() == [1, 0]
  assert first["input_mask"].tolist() == [[1] * 5, [1, 1, 0, 0, 0]]
  assert second["input_ids"].tolist() == [[5, 5, 5]]


def test_predictions_go_back_to_input_order_and_are_checked():
  features = [feature_of_length(i, 1) for i in range(4)]
  order = [2, 0, 3, 1]
  predictions = [{"unique_id": i} for i in order]
  assert [(f.unique_id, p["unique_id"]) for f, p in fx.in_input_order(
      predictions, features, order)] == [(0, 0), (1, 1), (2, 2), (3, 3)]
  with pytest.raises(RuntimeError):
    list(fx.in_input_order([{"unique_id": 0}], features, order))
  with pytest.raises(RuntimeError):
    list(fx.in_input_order(predictions[:3], features, order))


def test_json_line_keys_and_rounding_are_upstreams():
  feature = fx.Feature(7, ["[CLS]", "[SEP]"], [2, 3], [1, 1], [0, 0])
  prediction = {"layer_output_0": np.array([[0.12345678, -1.0],
                                            [2.5e-7, 3.0]], np.float32),
                "layer_output_1": np.zeros([2, 2], np.float32)}
  line = fx.token_features_line(feature, prediction, (-1, 0))
  assert line == (
      '{"linex_index": 7, "features": [{"token": "[CLS]", "layers": '
      '[{"index": -1, "values": [0.123457, -1.0]}, {"index": 0, "values": '
      '[0.0, 0.0]}]}, {"token": "[SEP]", "layers": [{"index": -1, '
      '"values": [0.0, 3.0]}, {"index": 0, "values": [0.0, 0.0]}]}]}')


def test_progress_says_lines_rate_and_eta():
  assert fx.progress_line(250, 1000, 5.0) == (
      "250/1000 lines (25.0 %), 50.0 lines/sec, ETA 15 s")
  assert fx.progress_line(0, 10, 0.0).endswith("ETA unknown")


def test_progress_is_logged_every_ten_seconds_and_at_the_end(
    monkeypatch):
  said = []
  monkeypatch.setattr(fx.logging, "info", lambda *a: said.append(a[0] % a[1:]))
  times = iter([100.0, 100.0, 104.0, 111.0, 112.0, 113.0])
  progress = fx.ExtractionProgress(5, clock=lambda: next(times))
  for _ in range(5):
    progress.add()
  assert said == ["extracted 3/5 lines (60.0 %), 0.3 lines/sec, ETA 7 s",
                  "extracted 5/5 lines (100.0 %), 0.4 lines/sec, ETA 0 s"]


def test_start_up_before_the_first_line_logs_no_progress_line(monkeypatch):
  """The first line done ends start-up (model building): a line then would
  say 0.0 lines/sec and an ETA of hours; the next comes an interval later."""
  said = []
  monkeypatch.setattr(fx.logging, "info", lambda *a: said.append(a[0] % a[1:]))
  times = iter([0.0, 30.0, 31.0, 45.0, 46.0, 47.0])
  progress = fx.ExtractionProgress(5, clock=lambda: next(times))
  for _ in range(5):
    progress.add()
  assert said == ["extracted " + fx.progress_line(3, 5, 45.0),
                  "extracted " + fx.progress_line(5, 5, 47.0)]


# ------------------------------------------------------------ the program


def test_token_features_have_upstreams_layout(model, tmp_path):
  output = tmp_path / "out.jsonl"
  result = extract(model, output)
  lines = read_lines(output)
  assert [line["linex_index"] for line in lines] == list(range(len(LINES)))
  assert all(list(line) == ["linex_index", "features"] for line in lines)
  assert [t["token"] for t in lines[2]["features"]] == ["[CLS]", "[SEP]"]
  assert [t["token"] for t in lines[4]["features"]] == [
      "[CLS]", "e", "##c", "##o", "##l", "##e", "[SEP]", "z", "##o", "##e",
      "[SEP]"]
  assert len(lines[3]["features"]) == 16  # truncated to max_seq_length
  assert [layer["index"] for layer in lines[0]["features"][0]["layers"]] == [
      -1, 0]
  assert values(lines[0]).shape == (9, 2, 32)
  assert "extracted 6/6 lines (100.0 %)" in result.stderr
  assert os.listdir(tmp_path) == ["out.jsonl"]


@pytest.mark.parametrize("strategy", [
    "mirrored", pytest.param("central_storage", marks=pytest.mark.slow)])
def test_two_replicas_give_one_devices_output_in_order(model, tmp_path,
                                                       strategy):
  # 7 lines in batches of 2: the last batch leaves the second replica none.
  seven = tmp_path / "seven.txt"
  seven.write_text("\n".join(LINES + ["the end"]) + "\n")
  one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
  extract(model, one, input_file=seven)
  result = extract(model, two, "--cpu_replicas=2",
                   "--distribution_strategy=%s" % strategy, input_file=seven)
  assert "strategy=%s replicas=2" % strategy in result.stderr
  first, second = read_lines(one), read_lines(two)
  assert len(first) == len(second) == 7
  for a, b in zip(first, second):
    assert a["linex_index"] == b["linex_index"]
    assert [t["token"] for t in a["features"]] == [
        t["token"] for t in b["features"]]
    np.testing.assert_allclose(values(a), values(b), atol=1e-5, rtol=0)


def test_jsonl_and_parquet_records_are_lines(model, tmp_path):
  import pyarrow  # pylint: disable=g-import-not-at-top
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  texts = [l for l in LINES if l]
  plain = tmp_path / "plain.txt"
  plain.write_text("\n".join(texts) + "\n")
  records = tmp_path / "in.jsonl"
  records.write_text("".join(json.dumps({"body": t, "id": i}) + "\n"
                             for i, t in enumerate(texts)))
  table = tmp_path / "in.parquet"
  pq.write_table(pyarrow.table({"body": texts}), str(table))
  expected = tmp_path / "plain.npy"
  extract(model, expected, "--pooling=mean", "--layers=-1",
          input_file=plain)
  for source in (records, table):
    output = tmp_path / (source.name + ".npy")
    extract(model, output, "--pooling=mean", "--layers=-1",
            "--text_field=body", input_file=source)
    np.testing.assert_array_equal(np.load(output), np.load(expected))


def test_pooled_vectors_as_npy_and_jsonl(model, tmp_path):
  npy, jsonl = tmp_path / "v.npy", tmp_path / "v.jsonl"
  extract(model, npy, "--pooling=max", "--normalize", "--layers=0")
  extract(model, jsonl, "--pooling=max", "--normalize", "--layers=0")
  vectors = np.load(npy)
  assert vectors.dtype == np.float32 and vectors.shape == (len(LINES), 32)
  np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0,
                             atol=1e-6)
  lines = read_lines(jsonl)
  assert [list(line) for line in lines] == [["linex_index", "embedding"]] * 6
  np.testing.assert_allclose([line["embedding"] for line in lines], vectors,
                             atol=1e-6, rtol=0)


# ------------------------------------------------------------ bad input


def refusal(model, tmp_path, *extra, input_lines=None, output="out.jsonl"):
  """The UserError message of a run, checking no output was left."""
  input_file = None
  if input_lines is not None:
    input_file = tmp_path / "bad.txt"
    input_file.write_text(input_lines)
  before = set(os.listdir(tmp_path))
  with pytest.raises(UserError) as e:
    extract(model, tmp_path / output, *extra, input_file=input_file)
  assert set(os.listdir(tmp_path)) == before
  return str(e.value)


def test_an_empty_input_file_is_refused(model, tmp_path):
  assert refusal(model, tmp_path, input_lines="") == (
      "--input_file %s holds no lines; expected one text (or 'text_a ||| "
      "text_b') per line" % (tmp_path / "bad.txt"))


def test_a_line_with_two_separators_is_refused_naming_file_and_line(
    model, tmp_path):
  assert refusal(model, tmp_path, input_lines="a\nb ||| c ||| d\n") == (
      "input file %s line 2 holds 2 '|||' separators; expected one text, or "
      "two as 'text_a ||| text_b'" % (tmp_path / "bad.txt"))


@pytest.mark.parametrize("layers,message", [
    ("-3", "--layers: -3 is out of range for a model of 2 encoder layers; "
           "expected indexes from -2 to 1 (negative: from the last)"),
    ("-1,2", "--layers: 2 is out of range for a model of 2 encoder layers; "
             "expected indexes from -2 to 1 (negative: from the last)"),
    ("-1,last", "--layers=-1,last: 'last' is not an integer; expected "
                "comma-separated encoder layer indexes such as -1,-2,-3,-4 "
                "(negative: from the last)")])
def test_layers_out_of_range_or_not_integers_are_refused(model, tmp_path,
                                                         layers, message):
  assert refusal(model, tmp_path, "--layers=%s" % layers) == message


def test_pooling_refuses_an_unknown_rule_a_bad_suffix_and_several_layers(
    model, tmp_path):
  assert refusal(model, tmp_path, "--pooling=median") == (
      "flag --pooling=median: value should be one of <cls|mean|max|model>")
  assert refusal(model, tmp_path, "--pooling=mean", "--layers=-1",
                 output="vectors.txt") == (
      "--output_file %s: with --pooling the sentence vectors are written as "
      ".npy (float32 [lines, hidden size]) or .jsonl (one JSON line per "
      "input line); expected a name ending in .npy or .jsonl" %
      (tmp_path / "vectors.txt"))
  assert refusal(model, tmp_path, "--pooling=mean", output="v.npy") == (
      "--layers=-1,0 names 2 layers, but --pooling pools one; name one "
      "layer (default: the last, -1)")
  assert refusal(model, tmp_path, "--pooling=model", "--layers=-1",
                 output="v.npy") == (
      "--pooling=model takes the pooling of a sentence-transformers "
      "directory (modules.json), but --init_checkpoint %s is none; pass "
      "--pooling=cls|mean|max" % model["checkpoint"])


def test_without_pooling_any_output_name_gets_json_lines(model, tmp_path):
  extract(model, tmp_path / "features.out")
  assert len(read_lines(tmp_path / "features.out")) == len(LINES)


def test_missing_files_are_refused(model, tmp_path):
  assert refusal(model, tmp_path, "--input_file=%s/none.txt" % tmp_path) == (
      "--input_file pattern %s/none.txt matches no file" % tmp_path)
  assert refusal(model, tmp_path, "--vocab_file=%s/none.txt" % tmp_path) == (
      "--vocab_file %s/none.txt: no such file" % tmp_path)
  assert refusal(model, tmp_path,
                 "--init_checkpoint=%s/none.ckpt" % tmp_path) == (
      "--init_checkpoint %s/none.ckpt: no such checkpoint (expected a "
      "training output directory or %s/none.ckpt.index)" % (tmp_path,
                                                            tmp_path))
  assert refusal(model, tmp_path,
                 "--output_file=%s/no/dir/out.jsonl" % tmp_path) == (
      "--output_file %s/no/dir/out.jsonl: the directory %s/no/dir does not "
      "exist" % (tmp_path, tmp_path))
  assert refusal(model, tmp_path, "--output_file=%s" % tmp_path) == (
      "--output_file %s is a directory; expected a file name" % tmp_path)


# ------------------------------------------------------------ pooling config


@pytest.mark.parametrize("config,rule", [
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False},
     "cls"),
    ({"pooling_mode_mean_tokens": False}, "mean"),  # none on: the mean
    ({"pooling_mode": "max"}, "max"),
    ({"pooling_mode": ["mean"]}, "mean")])
def test_a_sentence_transformers_pooling_config_names_its_rule(
    tmp_path, config, rule):
  write_sentence_transformers_dir(tmp_path, config, normalize=False)
  assert sentence_pooling.model_pooling(str(tmp_path)) == (
      sentence_pooling.ModelPooling(rule, False, 128, None))


def test_a_pooling_this_program_does_not_compute_is_named(tmp_path):
  write_sentence_transformers_dir(
      tmp_path, {"pooling_mode": ["mean", "max"]}, normalize=True)
  assert sentence_pooling.model_pooling(str(tmp_path)) == (
      sentence_pooling.ModelPooling(
          None, True, 128,
          "%s/1_Pooling/config.json asks for pooling mean+max; this program "
          "computes one of cls, mean, max: pass --pooling=cls|mean|max to "
          "choose one" % tmp_path))


def test_modules_this_program_does_not_compute_are_named(tmp_path):
  write_sentence_transformers_dir(tmp_path, {}, normalize=False)
  modules = json.loads((tmp_path / "modules.json").read_text())
  modules.append({"idx": 2, "name": "2", "path": "2_Dense",
                  "type": "sentence_transformers.models.Dense"})
  (tmp_path / "modules.json").write_text(json.dumps(modules))
  assert sentence_pooling.model_pooling(str(tmp_path)).unsupported == (
      "%s/modules.json lists the modules Transformer, Pooling, Dense; "
      "--pooling=model computes a Transformer at the directory's root, then "
      "Pooling, then optionally Normalize: pass --pooling=cls|mean|max to "
      "pool the Transformer's output yourself" % tmp_path)


def write_sentence_transformers_dir(path, pooling_config, normalize):
  modules = [{"idx": 0, "name": "0", "path": "",
              "type": "sentence_transformers.models.Transformer"},
             {"idx": 1, "name": "1", "path": "1_Pooling",
              "type": "sentence_transformers.models.Pooling"}]
  if normalize:
    modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize"})
  (path / "modules.json").write_text(json.dumps(modules))
  (path / "1_Pooling").mkdir()
  (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config))
  (path / "sentence_bert_config.json").write_text(
      json.dumps({"max_seq_length": 128}))
