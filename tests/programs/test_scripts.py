"""scripts/run_create.sh, run_pre.sh, run_classify.sh, run as a user would."""

import json
import os
import re

import pytest
import tensorflow.compat.v1 as tf

from conftest import REPO_ROOT
from helpers.scripts import run_ok, run_script, settings_of

SCRIPTS = ("run_create.sh", "run_pre.sh", "run_classify.sh")
NUM_TEST_EXAMPLES = 100  # sample_data/classify/test.tsv


def global_step(checkpoint_dir):
  return int(tf.train.load_variable(checkpoint_dir, "global_step"))


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_help_exits_0_and_documents_every_setting(name):
  result = run_script(name, "--help")
  assert result.returncode == 0
  settings = settings_of(name)
  assert len(settings) >= 10 and "PYTHON" in settings
  documented = set(re.findall(r"^  ([A-Z_]+) ", result.stdout, re.M))
  assert documented == settings


@pytest.mark.slow
@pytest.mark.parametrize("name, args, message", [
    ("run_create.sh", ["INPUT_FILE=/no/such/corpus.txt"],
     "run_create.sh: error: INPUT_FILE: no file matches '/no/such/corpus.txt'"),
    ("run_create.sh", ["VOCAB_FILE=/no/vocab.txt"],
     "run_create.sh: error: VOCAB_FILE=/no/vocab.txt does not exist"),
    ("run_pre.sh", ["WORK_DIR={tmp}"],
     "run_pre.sh: error: INPUT_FILE: no file matches '{tmp}/data/"
     "pretrain.tfrecord'; run scripts/run_create.sh first"),
    ("run_classify.sh", ["WORK_DIR={tmp}"],
     "run_classify.sh: error: VOCAB_FILE={tmp}/data/vocab.txt does not "
     "exist; run scripts/run_create.sh first"),
    ("run_classify.sh", ["VOCAB_FILE={vocab}", "INIT_CHECKPOINT={tmp}/x"],
     "run_classify.sh: error: INIT_CHECKPOINT={tmp}/x is neither a "
     "directory nor a checkpoint prefix"),
    ("run_classify.sh", ["NUM_EPOCHS=3"],
     "run_classify.sh: error: unknown setting NUM_EPOCHS"),
])
def test_missing_input_is_one_line_and_exit_2(tmp_path, name, args, message):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n")
  fill = {"tmp": str(tmp_path), "vocab": str(vocab)}
  result = run_script(name, *[a.format(**fill) for a in args])
  assert result.returncode == 2
  assert result.stdout == ""
  lines = result.stderr.splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith(message.format(**fill)), lines[0]


UNKNOWN_FORMAT = ("unknown format onnx; choose from google,huggingface,"
                  "saved_model")


def disagree(script, setting, value, flag, other):
  return ("%s: error: %s=%s and --%s=%s disagree (%s passes %s as --%s); "
          "give one of them" % (script, setting, value, flag, other, script,
                                setting, flag))


# Settings a script checks before its first program starts: the script,
# its arguments ({tmp}: the test's directory, holding vocab.txt and
# records.tfrecord) and its one line.
CHECKED_FIRST = {
    "an export format, classify": (
        "run_classify.sh", ["EXPORT_FORMAT=onnx"],
        "run_classify.sh: error: EXPORT_FORMAT=onnx: " + UNKNOWN_FORMAT),
    "an export format, pretraining": (
        "run_pre.sh", ["EXPORT_FORMAT=google,onnx"],
        "run_pre.sh: error: EXPORT_FORMAT=google,onnx: " + UNKNOWN_FORMAT),
    "two casings, NER": (
        "run_ner.sh", ["DO_LOWER_CASE=true", "--nodo_lower_case"],
        disagree("run_ner.sh", "DO_LOWER_CASE", "true", "do_lower_case",
                 "false")),
    # Equal values are one value: the next check speaks.
    "equal values": (
        "run_classify.sh", ["OUTPUT_DIR={tmp}/a", "--output_dir={tmp}/a/",
                            "LEARNING_RATE=1e-4", "--learning_rate=0.0001",
                            "EXPORT_FORMAT=onnx"],
        "run_classify.sh: error: EXPORT_FORMAT=onnx: " + UNKNOWN_FORMAT),
    # A flag alone is its setting's value.
    "a length beyond the config": (
        "run_swag.sh", ["--max_seq_length=1024"],
        "run_swag.sh: error: MAX_SEQ_LENGTH=1024 exceeds the "
        "max_position_embeddings 512 of BERT_CONFIG_FILE=%s; use a config "
        "that covers it, or MAX_SEQ_LENGTH <= 512" % os.path.join(
            REPO_ROOT, "configs", "bert_tiny.json")),
    # The records' settings, before the vocab is trained.
    "a setting create_pretraining_data.py refuses": (
        "run_create.sh", ["MASKED_LM_PROB=2"],
        "run_create.sh: error: create_pretraining_data.py: --masked_lm_prob="
        "2.0 is out of range; expected 0 < masked_lm_prob <= 1"),
    "another vocab for the records": (
        "run_create.sh", ["--vocab_file={tmp}/vocab.txt"],
        "run_create.sh: error: --vocab_file={tmp}/vocab.txt: run_create.sh "
        "passes --vocab_file={tmp}/work/data/vocab.txt, made from VOCAB_FILE; "
        "set VOCAB_FILE instead"),
}
CHECKED_FIRST.update({
    "two output dirs, " + script: (
        script, ["OUTPUT_DIR={tmp}/a", "--output_dir={tmp}/b"],
        disagree(script, "OUTPUT_DIR", "{tmp}/a", "output_dir", "{tmp}/b"))
    for script in ("run_classify.sh", "run_pre.sh", "run_glue.sh")})


@pytest.mark.parametrize("case", sorted(CHECKED_FIRST))
def test_settings_are_checked_before_the_first_program(tmp_path, case):
  """One line, exit 2, no program started (no line of the script's own),
  nothing written."""
  name, args, message = CHECKED_FIRST[case]
  (tmp_path / "vocab.txt").write_text("[PAD]\n")
  (tmp_path / "records.tfrecord").write_bytes(b"")
  # The inputs from the environment: not every script has every setting.
  result = run_script(name, *[a.format(tmp=tmp_path) for a in args], env={
      "WORK_DIR": str(tmp_path / "work"), "INIT_CHECKPOINT": "",
      "VOCAB_FILE": str(tmp_path / "vocab.txt"),
      "INPUT_FILE": str(tmp_path / "records.tfrecord")})
  assert (result.returncode, result.stdout) == (2, "")
  assert result.stderr.splitlines() == [message.format(tmp=tmp_path)]
  assert sorted(os.listdir(tmp_path)) == ["records.tfrecord", "vocab.txt"]


@pytest.mark.slow
def test_the_three_scripts_chain_on_the_sample(tmp_path):
  work_dir = str(tmp_path / "work")
  env = {"WORK_DIR": work_dir,
         # Arguments take precedence over the environment.
         "NUM_TRAIN_STEPS": "999", "MAX_SEQ_LENGTH": "999"}
  run_ok("run_create.sh", "MAX_SEQ_LENGTH=32", "MAX_PREDICTIONS_PER_SEQ=5",
         "DUPE_FACTOR=1", "VOCAB_SIZE=1000", env=env)
  data_dir = os.path.join(work_dir, "data")
  with open(os.path.join(data_dir, "vocab.txt")) as f:
    assert 500 < len(f.read().splitlines()) <= 1000
  records = list(tf.io.tf_record_iterator(
      os.path.join(data_dir, "pretrain.tfrecord")))
  assert len(records) > 100
  first = tf.train.Example.FromString(records[0]).features.feature
  assert len(first["input_ids"].int64_list.value) == 32

  result = run_ok("run_pre.sh", "MAX_SEQ_LENGTH=32",
                  "MAX_PREDICTIONS_PER_SEQ=5", "NUM_TRAIN_STEPS=4",
                  "NUM_WARMUP_STEPS=1", "TRAIN_BATCH_SIZE=8",
                  "SAVE_CHECKPOINTS_STEPS=4", "MAX_EVAL_STEPS=2",
                  "EXPORT_FORMAT=google,huggingface", env=env)
  pretrain_dir = os.path.join(work_dir, "pretrain")
  assert global_step(pretrain_dir) == 4
  assert os.path.exists(os.path.join(pretrain_dir, "eval_results.txt"))
  export_dir = os.path.join(pretrain_dir, "export")
  assert sorted(os.listdir(export_dir)) == ["google", "huggingface"]
  assert ("Hugging Face model: %s/huggingface" % export_dir) in result.stdout

  # INIT_CHECKPOINT defaults to run_pre.sh's output directory.
  result = run_ok("run_classify.sh", "MAX_SEQ_LENGTH=32",
                  "TRAIN_BATCH_SIZE=8", "NUM_TRAIN_EPOCHS=0.1",
                  "PREDICT_BATCH_SIZE=8", "EXPORT_FORMAT=huggingface",
                  "--log_every_n_steps=1", env=env)
  assert ("--init_checkpoint %s/model.ckpt-4:" % pretrain_dir
          in result.stderr)
  assert "initialised fresh: output_weights, output_bias" in result.stderr
  classify_dir = os.path.join(work_dir, "classify")
  assert global_step(classify_dir) == 5  # int(400 / 8 * 0.1)
  with open(os.path.join(classify_dir, "eval_results.txt")) as f:
    assert "eval_accuracy = " in f.read()
  with open(os.path.join(classify_dir, "test_results.tsv")) as f:
    rows = [line.split("\t") for line in f.read().splitlines()]
  assert len(rows) == NUM_TEST_EXAMPLES
  assert all(len(row) == 2 for row in rows)
  # The export names the classes after the labels run_classifier.py used.
  with open(os.path.join(classify_dir, "export", "huggingface",
                         "config.json")) as f:
    config = json.load(f)
  assert config["architectures"] == ["BertForSequenceClassification"]
  with open(os.path.join(classify_dir, "labels.txt")) as f:
    labels = f.read().splitlines()
  assert len(labels) == 2
  assert config["id2label"] == {str(i): l for i, l in enumerate(labels)}
