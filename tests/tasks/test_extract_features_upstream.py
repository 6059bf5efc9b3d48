"""extract_features.py against upstream's own program, and as launched.

Upstream's program is bert-tensorflow 1.0.4's extract_features.py
(google-research/bert's code as a wheel, requirements-dev.txt), run on
TensorFlow 2.15 by tests/tasks/upstream_extract_features.py, which puts
contrib's layer_norm back and changes nothing else. Both read the same
checkpoint, written by our run_pretraining.py, and the same lines (pairs,
an empty line, accents, unknown words, lines truncated alone and in
pairs); the JSON lines must agree key for key and token for token, and
every value within 1e-5.

bert-tensorflow 1.0.4's tokenization.load_vocab keeps a repeated token's
first line where google-research/bert's (and ours) keep its last: the
vocab here has no repeated token, as real vocabs have none.
"""

import json
import os

import numpy as np
import pytest

from bertkit.tasks.features.options import FeatureExtractionOptions
import extract_features
from conftest import (RUN_AND_REPORT_TENSORFLOW, expect_user_error,
                      options_from_args, pretrain_in_process, run_in_process,
                      run_program, run_ok)
from helpers.features import LINES, values, write_vocab

UPSTREAM = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "upstream_extract_features.py")
MORE_LINES = LINES + [
    "Jacksonville is not the dog, said she ||| and the cat was happy",
    "they they they they they they they they they they they they they they "
    "they they they ||| we",
    "   hello   world   "]


@pytest.fixture(scope="module")
def pretrained(workdir, tmp_path_factory):
  """{"checkpoint", "config", "vocab", "input"}: a few steps of
  run_pretraining on the tiny model, its vocab and MORE_LINES."""
  d = tmp_path_factory.mktemp("upstream")
  pretrain_in_process(workdir, d / "pretrain", steps=3)
  (d / "in.txt").write_text("\n".join(MORE_LINES) + "\n")
  return {"checkpoint": str(d / "pretrain" / "model.ckpt-3"),
          "output_dir": str(d / "pretrain"),
          "config": str(workdir / "tiny.json"),
          "vocab": write_vocab(d / "vocab.txt", 128),
          "input": str(d / "in.txt")}


def common_args(pretrained, output, *extra):
  return ["--input_file=%s" % pretrained["input"],
          "--output_file=%s" % output,
          "--init_checkpoint=%s" % pretrained["checkpoint"],
          "--bert_config_file=%s" % pretrained["config"],
          "--vocab_file=%s" % pretrained["vocab"],
          "--max_seq_length=32"] + list(extra)


def read_lines(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [
    ["--layers=-1,-2", "--max_seq_length=12", "--batch_size=3"],
    ["--layers=0,-1,1", "--max_seq_length=20", "--batch_size=32",
     "--nodo_lower_case"]])
def test_our_json_lines_equal_upstreams_programs(pretrained, tmp_path, extra):
  theirs, ours = tmp_path / "upstream.jsonl", tmp_path / "ours.jsonl"
  run_ok([UPSTREAM] + common_args(pretrained, theirs, *extra))
  run_in_process(extract_features.run, options_from_args(
      FeatureExtractionOptions,
      common_args(pretrained, ours, *extra)))
  expected, actual = read_lines(theirs), read_lines(ours)
  assert len(expected) == len(actual) == len(MORE_LINES)
  for upstream_line, our_line in zip(expected, actual):
    assert list(our_line) == list(upstream_line) == ["linex_index",
                                                     "features"]
    assert our_line["linex_index"] == upstream_line["linex_index"]
    assert [t["token"] for t in our_line["features"]] == [
        t["token"] for t in upstream_line["features"]]
    assert [[(layer["index"], len(layer["values"])) for layer in t["layers"]]
            for t in our_line["features"]] == [
                [(layer["index"], len(layer["values"]))
                 for layer in t["layers"]]
                for t in upstream_line["features"]]
    np.testing.assert_allclose(values(our_line), values(upstream_line),
                               atol=1e-5, rtol=0)


@pytest.mark.slow
def test_the_program_writes_features_with_two_replicas(pretrained, tmp_path):
  output = tmp_path / "out.jsonl"
  result = run_ok(["extract_features.py"] + common_args(
      pretrained, output, "--layers=-1", "--cpu_replicas=2", "--batch_size=4",
      "--init_checkpoint=%s" % pretrained["output_dir"]))  # its latest
  assert "strategy=mirrored replicas=2" in result.stderr
  assert "extracted %d/%d lines (100.0 %%)" % (len(MORE_LINES),
                                               len(MORE_LINES)) in (
      result.stderr)
  assert [line["linex_index"] for line in read_lines(output)] == list(
      range(len(MORE_LINES)))


# The input and the flags are refused before TensorFlow is imported; a layer
# out of the model's range once its config is read (with TensorFlow).
@pytest.mark.slow
@pytest.mark.parametrize("extra,lines,message,with_tensorflow", [
    ([], "", "holds no lines; expected one text (or 'text_a ||| text_b') "
             "per line", False),
    ([], "a ||| b ||| c\n", "line 1 holds 2 '|||' separators", False),
    (["--layers=-1,x"], "a\n", "--layers=-1,x: 'x' is not an integer",
     False),
    (["--layers=5"], "a\n", "--layers: 5 is out of range for a model of 2 "
                            "encoder layers", True),
    (["--pooling=median"], "a\n", "flag --pooling=median: value should be "
                                  "one of <cls|mean|max|model>", False),
    (["--pooling=mean", "--layers=-1"], "a\n",
     "expected a name ending in .npy or .jsonl", False)])
def test_bad_input_is_one_error_line_exit_2_and_no_output(
    pretrained, tmp_path, extra, lines, message, with_tensorflow):
  bad = tmp_path / "bad.txt"
  bad.write_text(lines)
  output = tmp_path / "out.txt"
  args = common_args(pretrained, output, "--layers=-1", *extra)
  args[0] = "--input_file=%s" % bad
  result = run_program(["-c", RUN_AND_REPORT_TENSORFLOW,
                        "extract_features.py"] + args)
  expect_user_error(result, message)
  assert result.stdout.splitlines()[-1] == (
      "tensorflow imported: %s" % with_tensorflow)
  assert sorted(os.listdir(tmp_path)) == ["bad.txt"]
