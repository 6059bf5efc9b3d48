"""run_swag.py: multiple choice on real sentences.

sample_data/swag holds SWAG-layout examples made from corpus.txt
(sample_data/swag/make_data.py): the right ending is the rest of the
sentence that really follows sent1, the three others come from other
documents. Reading, encoding and bad input are tested in this process, a
tiny model trains here too; the slow tests fine-tune all-MiniLM-L6-v2 (a
Hugging Face directory as --init_checkpoint) far above chance, export it to
BertForMultipleChoice, compare mirrored with one device and run
scripts/run_swag.sh.
"""

import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.tasks.swag import data as swag_data
from bertkit.tasks.swag import task as multiple_choice
import export_checkpoint
import modeling
import tokenization
from conftest import (TINY_CONFIG, expect_user_error, load_checkpoint,
                      program_in_process, read_eval_results, run_ok,
                      run_program)
from helpers.swag import (HF_DIR, SAMPLE, SEQ, VOCAB, sample_rows, swag_args,
                          tiny_args, tiny_config, write_rows)

TOLERANCE = 1e-4


def tokenizer():
  return tokenization.FullTokenizer(VOCAB, do_lower_case=True)


# ------------------------------------------------------------ reading


def test_swag_csv_reads_with_its_header_and_quoted_commas():
  examples = swag_data.read_examples(os.path.join(SAMPLE, "train.csv"))
  rows = sample_rows("train.csv")
  assert rows[0] == ["video-id", "fold-ind", "startphrase", "sent1", "sent2",
                     "gold-source", "ending0", "ending1", "ending2",
                     "ending3", "label"]
  assert len(examples) == len(rows) - 1 == 480
  first = examples[0]
  assert (first.context, first.start) == (rows[1][3], rows[1][4])
  assert first.endings == tuple(rows[1][6:10]) and first.label == int(
      rows[1][10])
  assert any("," in e for e in first.endings)
  assert sorted({e.label for e in examples}) == [0, 1, 2, 3]


def test_jsonl_reads_question_choices_and_optional_label(tmp_path):
  path = tmp_path / "test.jsonl"
  path.write_text(
      json.dumps({"id": "q1", "question": "Where do otters live?",
                  "choices": ["In rivers.", "On the Moon."], "label": 0}) +
      "\n\n" + json.dumps({"question": "Which is a month?",
                           "choices": ["July", "Carrow"]}) + "\n")
  first, second = swag_data.read_examples(str(path))
  assert first == swag_data.MultipleChoiceExample(
      "q1", "Where do otters live?", "", ("In rivers.", "On the Moon."), 0)
  assert second.label is None and second.example_id == "3"


def test_each_choice_is_encoded_with_its_context_as_transformers_does():
  import transformers
  hf = transformers.AutoTokenizer.from_pretrained(HF_DIR)
  example = swag_data.read_examples(os.path.join(SAMPLE, "val.csv"))[0]
  ids, masks, segments = swag_data.encode_choices(example, tokenizer(), 96)
  for choice, ending in enumerate(example.endings):
    expected = hf(example.context, example.start + " " + ending)
    length = len(expected["input_ids"])
    assert ids[choice][:length] == expected["input_ids"]
    assert segments[choice][:length] == expected["token_type_ids"]
    assert sum(masks[choice]) == length and not any(ids[choice][length:])


def test_a_long_pair_loses_tokens_from_its_longer_part():
  assert swag_data.truncate_pair("abcdef", "xyz", 6) == (
      list("abc"), list("xyz"))
  assert swag_data.truncate_pair("ab", "vwxyz", 4) == (list("ab"),
                                                        list("vw"))


# ------------------------------------------------------------ the head


def test_the_head_is_detected_and_mapped_as_bert_for_multiple_choice():
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  with tf.Graph().as_default():
    multiple_choice.build_variables(config)
    built = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  assert checkpoint_formats.detect_head(built) == (
      heads.MULTIPLE_CHOICE, None)
  table = checkpoint_formats.weight_table(config,
                                          heads.MULTIPLE_CHOICE)
  assert {name: shape for name, _, shape, _ in table} == built
  hf_names = {tf_name: hf_name for tf_name, hf_name, _, _ in table}
  assert hf_names[multiple_choice.OUTPUT_WEIGHTS] == "classifier.weight"
  assert hf_names["bert/pooler/dense/kernel"] == "bert.pooler.dense.weight"


# ------------------------------------------------------------ bad input


def bad_rows(case):
  rows = [list(r) for r in sample_rows("train.csv")[:4]]
  if case == "missing ending":
    rows[2][8] = ""
  elif case == "short row":
    rows[3] = rows[3][:8]
  elif case == "label":
    rows[1][10] = "4"
  elif case == "header":
    rows[0][9] = "ending_3"
  elif case == "header only":
    rows = rows[:1]
  elif case == "empty":
    rows = []
  return rows


@pytest.mark.parametrize("case,message", [
    ("missing ending", "train.csv:3: ending2 is empty or missing"),
    ("short row", "train.csv:4: ending2 is empty or missing"),
    ("label", "train.csv:2: label '4' is not a choice \\(0..3\\)"),
    ("header", "train.csv: the header has no ending3 column"),
    ("header only", "train.csv has no example"),
    ("empty", "train.csv has no example \\(it is empty\\)"),
])
def test_bad_swag_file_is_refused_and_nothing_is_written(tmp_path, case,
                                                         message):
  data = tmp_path / "data"
  shutil.copytree(SAMPLE, data)
  write_rows(data / "train.csv", bad_rows(case))
  out = tmp_path / "out"
  with pytest.raises(UserError, match=message):
    program_in_process(tiny_args(tmp_path, data, out, "--do_train"))
  assert not out.exists()


def test_jsonl_with_another_number_of_choices_is_refused(tmp_path):
  lines = [{"question": "q", "choices": ["a", "b", "c"], "label": 1},
           {"question": "q", "choices": ["a", "b"], "label": 1}]
  (tmp_path / "train.jsonl").write_text(
      "".join(json.dumps(line) + "\n" for line in lines))
  with pytest.raises(UserError, match="train.jsonl:2: 2 choices, but the "
                     "first example has 3"):
    program_in_process(tiny_args(tmp_path, tmp_path, tmp_path / "out",
                                 "--do_train"))


def test_bad_file_exits_2_with_one_error_line(tmp_path):
  write_rows(tmp_path / "val.csv", bad_rows("label"))
  out = tmp_path / "out"
  result = run_program(swag_args(tmp_path, out, "--do_eval",
                                 "--init_checkpoint=" + HF_DIR))
  expect_user_error(result, "%s:2: label '4' is not a choice (0..3)" %
                    (tmp_path / "val.csv"))
  assert not out.exists()


def test_script_help_documents_every_setting():
  from helpers import scripts
  result = scripts.run_ok("run_swag.sh", "--help")
  documented = set(re.findall(r"^  ([A-Z_]+) ", result.stdout, re.M))
  assert documented == scripts.settings_of("run_swag.sh")


# ------------------------------------------------------------ a tiny run


def read_probabilities(path):
  return np.array([[float(p) for p in line.split("\t")]
                   for line in open(path).read().splitlines()])


def test_tiny_run_writes_probabilities_and_accuracy(tmp_path):
  out = tmp_path / "out"
  result = program_in_process(tiny_args(tmp_path, SAMPLE, out, "--do_train",
                                        "--do_eval", "--do_predict"))
  results = read_eval_results(out)
  for split, prefix in (("val.csv", "eval"), ("test.csv", "test")):
    probabilities = read_probabilities(
        out / ("%s_results.tsv" % ("dev" if prefix == "eval" else "test")))
    labels = [e.label for e in swag_data.read_examples(
        os.path.join(SAMPLE, split))]
    assert probabilities.shape == (len(labels), 4)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    assert results[prefix + "_accuracy"] == pytest.approx(
        np.mean(probabilities.argmax(-1) == labels))
  assert "Training: 480 examples of 4 choices" in result.stderr


# ------------------------------------------------------------ slow


@pytest.fixture(scope="module")
def minilm_run(tmp_path_factory):
  """all-MiniLM-L6-v2 fine-tuned on the sample for one epoch (30 steps of
  16; lr 5e-5, the paper's 2e-5 being for 3 epochs of SWAG's 73k): two
  minutes on 2 cores; two epochs at 64 pieces take seven and reach 0.58
  (docs/fine_tuning.md)."""
  work = tmp_path_factory.mktemp("swag_minilm")
  out = work / "out"
  program_in_process(swag_args(
      SAMPLE, out, "--init_checkpoint=" + HF_DIR, "--do_train", "--do_eval",
      "--train_batch_size=16", "--num_train_epochs=1",
      "--learning_rate=5e-5", "--predict_batch_size=32",
      "--tf_random_seed=1"))
  return work, out


@pytest.mark.slow
def test_minilm_picks_the_following_sentence_far_above_chance(minilm_run):
  _, out = minilm_run
  results = read_eval_results(out)
  print(results)
  # Chance is 0.25; over 160 examples its standard deviation is 0.034.
  assert results["eval_accuracy"] > 0.35


def our_logits(out, inputs):
  config = checkpoint_formats.hf_bert_config(HF_DIR)
  with tf.Graph().as_default(), tf.Session() as sess:
    logits = multiple_choice.create_model(
        config, False, *(tf.constant(inputs[name]) for name in
                         multiple_choice.SEQUENCE_FEATURES))
    tf.train.Saver().restore(sess, tf.train.latest_checkpoint(str(out)))
    return sess.run(logits)


@pytest.mark.slow
def test_export_to_bert_for_multiple_choice_gives_our_logits(minilm_run):
  import torch
  import transformers
  work, out = minilm_run
  config = work / "bert_config.json"
  config.write_text(checkpoint_formats.hf_bert_config(HF_DIR).to_json_string())
  export_checkpoint.export(str(out), str(config), VOCAB, True,
                           str(work / "export"), ["huggingface"])
  model, info = transformers.BertForMultipleChoice.from_pretrained(
      str(work / "export" / "huggingface"), output_loading_info=True)
  assert info["missing_keys"] == [] and info["unexpected_keys"] == []
  # Read back (as --init_checkpoint), the head is ours again.
  weights, _ = checkpoint_formats.read_hf_weights(
      str(work / "export" / "huggingface"))
  assert checkpoint_formats.detect_head(
      {name: value.shape for name, value in weights.items()}) == (
          heads.MULTIPLE_CHOICE, None)
  rows = [tf.train.Example.FromString(r).features.feature
          for r in tf.io.tf_record_iterator(str(out / "eval.tf_record"))]
  inputs = {name: np.array([row[name].int64_list.value for row in rows[:48]],
                           np.int32).reshape([-1, 4, SEQ])
            for name in multiple_choice.SEQUENCE_FEATURES}
  model.eval()
  with torch.no_grad():
    theirs = model(
        input_ids=torch.tensor(inputs["input_ids"], dtype=torch.long),
        attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        token_type_ids=torch.tensor(inputs["segment_ids"],
                                    dtype=torch.long)).logits.numpy()
  np.testing.assert_allclose(theirs, our_logits(out, inputs), atol=TOLERANCE,
                             rtol=0)
  expected = read_probabilities(out / "dev_results.tsv")[:48]
  np.testing.assert_allclose(
      torch.softmax(torch.tensor(theirs), -1).numpy(), expected,
      atol=TOLERANCE, rtol=0)


@pytest.mark.slow
def test_two_replicas_equal_one_device(tmp_path):
  runs = {}
  for name, extra in (("one", []), ("two", ["--cpu_replicas=2"])):
    runs[name] = tmp_path / name
    program_in_process(tiny_args(tmp_path, SAMPLE, runs[name], "--do_train",
                                 "--do_eval", "--learning_rate=1e-4",
                                 *extra))
  one, two = (load_checkpoint(str(runs[n])) for n in ("one", "two"))
  assert one["global_step"] == two["global_step"] == 30
  for name, value in one.items():
    if "adam" not in name and name in two:
      np.testing.assert_allclose(two[name], value, atol=1e-5, rtol=0,
                                 err_msg=name)
  first, second = (read_eval_results(runs[n]) for n in ("one", "two"))
  assert first["eval_loss"] == pytest.approx(second["eval_loss"], abs=1e-4)


@pytest.mark.slow
def test_fp16_with_two_replicas_and_accumulation_runs(tmp_path):
  # A launch: --use_fp16's graph rewrite is process-global state.
  out = tmp_path / "out"
  result = run_ok(tiny_args(tmp_path, SAMPLE, out, "--do_train",
                            "--do_eval", "--cpu_replicas=2",
                            "--num_accumulation_steps=2", "--use_fp16"))
  assert "strategy=mirrored replicas=2" in result.stderr
  assert 0 <= read_eval_results(out)["eval_accuracy"] <= 1
  assert json.loads((out / "final_weights.local.json").read_text())[
      "replicas_identical"] is True


@pytest.mark.slow
def test_script_trains_predicts_and_exports(tmp_path):
  from helpers import scripts
  scripts.run_ok(
      "run_swag.sh", "WORK_DIR=%s" % tmp_path, "VOCAB_FILE=" + VOCAB,
      "BERT_CONFIG_FILE=" + tiny_config(tmp_path), "INIT_CHECKPOINT=",
      "MAX_SEQ_LENGTH=%d" % SEQ, "NUM_TRAIN_EPOCHS=1",
      "EXPORT_FORMAT=huggingface,saved_model")
  out = tmp_path / "swag"
  assert read_eval_results(out)["test_accuracy"] >= 0
  config = json.loads((out / "export" / "huggingface" /
                       "config.json").read_text())
  assert config["architectures"] == ["BertForMultipleChoice"]
  assert (out / "export" / "saved_model" / "saved_model.pb").exists()
