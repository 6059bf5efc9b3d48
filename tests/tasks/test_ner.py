"""run_ner.py: named entities on real sentences.

sample_data/ner holds corpus.txt's sentences tagged by a fixed list of
names (sample_data/ner/make_data.py), in CoNLL-2003's layout with IOB1
tags. The data rules are tested in this process; a tiny model trains on the
sample here too; the slow tests fine-tune all-MiniLM-L6-v2 (a Hugging Face
directory as --init_checkpoint) to an entity F1 far above chance, export it
to BertForTokenClassification, compare mirrored with one device and run
scripts/run_ner.sh.
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
from bertkit.tasks.ner import data as ner_data
from bertkit.tasks.ner import task as token_classification
import export_checkpoint
import modeling
import tokenization
from conftest import (TINY_CONFIG, expect_user_error, program_in_process,
                      read_eval_results, run_ok, run_program)
from helpers.ner import (HF_DIR, LABELS, SAMPLE, VOCAB,
                         assert_weights_equal_one_device, ner_args, tiny_args,
                         tiny_config)

TOLERANCE = 1e-4
MINILM_SEQ = 64


def tokenizer():
  return tokenization.FullTokenizer(VOCAB, do_lower_case=True)


def write(path, text):
  path.write_text(text, encoding="utf-8")
  return str(path)


# ------------------------------------------------------------ reading


def test_iob1_becomes_iob2_and_iob2_stays():
  iob1 = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG", "I-LOC"]
  iob2 = ("B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG", "B-LOC")
  assert ner_data.to_iob2(iob1) == iob2
  assert ner_data.to_iob2(iob2) == iob2


def test_conll_file_with_docstart_reads_as_sentences(tmp_path):
  path = write(tmp_path / "train.txt",
               "-DOCSTART- -X- -X- O\n\n"
               "Edith NNP I-NP I-PER\nwalked NN I-NP O\nto NN I-NP O\n"
               "Ashford NNP I-NP I-LOC\nGreen NNP I-NP I-LOC\n. . O O\n\n"
               "-DOCSTART- -X- -X- O\n"
               "On NN I-NP O\nSunday NNP I-NP I-MISC\n")
  first, second = ner_data.read_sentences(path)
  assert first.words == ("Edith", "walked", "to", "Ashford", "Green", ".")
  assert first.tags == ("B-PER", "O", "O", "B-LOC", "I-LOC", "O")
  assert first.lines == (3, 4, 5, 6, 7, 8)
  assert second.words == ("On", "Sunday") and second.lines == (11, 12)
  assert second.tags == ("O", "B-MISC")


def test_the_sample_reads_with_its_labels():
  sentences = {split: ner_data.read_sentences(
      ner_data.split_path(SAMPLE, split)) for split in ner_data.SPLIT_FILES}
  assert ner_data.labels_of(sentences["train"]) == LABELS
  for split_sentences in sentences.values():
    ner_data.check_labels(split_sentences, LABELS)
  assert sum(len(s) for s in sentences.values()) == 232 + 70 + 67


def test_conll_2003_file_names_are_read(tmp_path):
  for name in ("eng.train", "valid.txt", "eng.testb"):
    write(tmp_path / name, "Edith\tB-PER\n")
  assert [os.path.basename(ner_data.split_path(str(tmp_path), split))
          for split in ("train", "dev", "test")] == [
              "eng.train", "valid.txt", "eng.testb"]
  write(tmp_path / "dev.txt", "Edith\tB-PER\n")
  assert ner_data.split_path(str(tmp_path), "dev").endswith("/dev.txt")


# ------------------------------------------------------------ windows


def test_each_word_s_first_piece_carries_its_label():
  sentence = ner_data.Sentence(
      ("Unbelievably", "Edith", "visited", "Brackenmoor", "."),
      ("O", "B-PER", "O", "B-LOC", "O"), (1, 2, 3, 4, 5), "x")
  window, = ner_data.windows_of([sentence], tokenizer(), 32)
  pieces = [tokenizer().tokenize(w) for w in sentence.words]
  assert any(len(p) > 1 for p in pieces)  # the rule is tested
  assert window.tokens == tuple(["[CLS]"] + sum(pieces, []) + ["[SEP]"])
  record = tf.train.Example.FromString(token_classification.window_record(
      window, sentence, LABELS, tokenizer(), 32)).features.feature
  labels = record["label_ids"].int64_list.value
  weights = record["label_weights"].int64_list.value
  starts = list(np.cumsum([1] + [len(p) for p in pieces[:-1]]))
  assert [i for i, w in enumerate(weights) if w] == starts
  assert [LABELS[labels[i]] for i in starts] == list(sentence.tags)
  assert sum(labels) == sum(labels[i] for i in starts)


@pytest.mark.parametrize("seq_length", [4, 6, 9, 32])
def test_windows_cover_every_word_exactly_once(seq_length):
  sentences = ner_data.read_sentences(os.path.join(SAMPLE, "dev.txt"))
  windows = ner_data.windows_of(sentences, tokenizer(), seq_length)
  for index, sentence in enumerate(sentences):
    own = [w for w in windows if w.sentence == index]
    assert all(len(w.tokens) <= seq_length for w in own)
    covered = [w.first_word + i for w in own for i in range(len(w.word_starts))]
    assert covered == list(range(len(sentence.words)))
  if seq_length < 32:
    assert len(windows) > len(sentences)


def test_a_word_longer_than_the_window_keeps_its_first_piece():
  pieces = [["a"], ["lo", "##ng", "##er", "##est"], ["b"]]
  windows = ner_data.sentence_windows(0, pieces, 5)
  assert [w.tokens for w in windows] == [
      ("[CLS]", "a", "[SEP]"), ("[CLS]", "lo", "##ng", "##er", "[SEP]"),
      ("[CLS]", "b", "[SEP]")]
  assert [w.first_word for w in windows] == [0, 1, 2]


def test_predictions_file_round_trips_through_seqeval(tmp_path):
  from seqeval import metrics
  sentences = ner_data.read_sentences(os.path.join(SAMPLE, "test.txt"))
  windows = ner_data.windows_of(sentences, tokenizer(), 8)
  # A prediction that misses every LOC.
  ids = [[0] * 8 for _ in windows]
  for window, row in zip(windows, ids):
    sentence = sentences[window.sentence]
    for offset, position in enumerate(window.word_starts):
      tag = sentence.tags[window.first_word + offset]
      row[position] = LABELS.index("O" if "LOC" in tag else tag)
  predicted = ner_data.predicted_tags(sentences, windows, ids, LABELS)
  path = str(tmp_path / "test_predictions.txt")
  ner_data.write_conll(path, sentences, predicted)
  gold, guess, current = [], [], ([], [])
  for line in open(path).read().split("\n"):
    if not line:
      if current[0]:
        gold.append(current[0])
        guess.append(current[1])
      current = ([], [])
      continue
    _, true_tag, predicted_tag = line.split(" ")
    current[0].append(true_tag)
    current[1].append(predicted_tag)
  assert gold == [list(s.tags) for s in sentences]
  figures = ner_data.entity_metrics(gold, guess)
  assert figures["precision"] == 1.0 and figures["types"]["LOC"]["f1"] == 0
  assert figures["recall"] == pytest.approx(metrics.recall_score(gold, guess))
  # Read as a tagged file, its last column is the prediction.
  assert [list(s.tags) for s in ner_data.read_sentences(path)] == guess


# ------------------------------------------------------------ the head


def test_the_head_is_detected_and_mapped_as_bert_for_token_classification():
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  with tf.Graph().as_default():
    token_classification.build_variables(config, len(LABELS))
    built = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  assert checkpoint_formats.detect_head(built) == (
      heads.TOKEN_CLASSIFICATION, len(LABELS))
  table = checkpoint_formats.weight_table(
      config, heads.TOKEN_CLASSIFICATION, len(LABELS))
  assert {name: shape for name, _, shape, _ in table} == built
  hf_names = {tf_name: hf_name for tf_name, hf_name, _, _ in table}
  assert hf_names[token_classification.OUTPUT_WEIGHTS] == "classifier.weight"
  # BertForTokenClassification has no pooler.
  assert hf_names["bert/pooler/dense/kernel"] is None
  # The sentence classifier's names stay the sentence classifier's.
  assert checkpoint_formats.detect_head(
      {"bert/embeddings/word_embeddings": [2, 2], "output_weights": [3, 2]}
  ) == (heads.CLASSIFIER, 3)


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize("name,text,message", [
    ("train.txt", "Edith NNP I-NP B-PER\nwalked NN O\n",
     "train.txt:2: 3 columns, but the file's first token line has 4"),
    ("train.txt", "Edith\tPERSON\n", "train.txt:1: tag 'PERSON' is not IOB"),
    ("train.txt", "\n-DOCSTART- -X- -X- O\n\n", "train.txt has no tagged "
     "sentence"),
    ("train.txt", "", "train.txt has no tagged sentence"),
    ("dev.txt", "Edith\tB-ORG\n", "dev.txt:1: tag B-ORG is not in the label "
     "list"),
])
def test_bad_file_is_refused_naming_it_and_nothing_is_written(
    tmp_path, name, text, message):
  data = tmp_path / "data"
  shutil.copytree(SAMPLE, data)
  write(data / name, text)
  out = tmp_path / "out"
  with pytest.raises(UserError, match=message):
    program_in_process(tiny_args(tmp_path, data, out, "--do_train",
                                 "--do_eval"))
  assert not out.exists()


def test_bad_file_exits_2_with_one_error_line(tmp_path):
  write(tmp_path / "test.txt", "Edith B-PER\nwalked\n")
  out = tmp_path / "out"
  result = run_program(ner_args(tmp_path, out, "--bert_config_file=" +
                                tiny_config(tmp_path), "--do_predict",
                                "--max_seq_length=32", "--labels=O,B-PER,I-PER"))
  expect_user_error(result, "%s:2: 1 columns, but the file's first token "
                    "line has 2" % (tmp_path / "test.txt"))
  assert not out.exists()


def test_script_help_documents_every_setting():
  from helpers import scripts
  result = scripts.run_ok("run_ner.sh", "--help")
  documented = set(re.findall(r"^  ([A-Z_]+) ", result.stdout, re.M))
  assert documented == scripts.settings_of("run_ner.sh")


def test_labels_must_be_iob_and_hold_o(tmp_path):
  with pytest.raises(UserError, match="must hold O"):
    program_in_process(tiny_args(tmp_path, SAMPLE, tmp_path / "out",
                                 "--do_train", "--labels=B-PER,I-PER"))


# ------------------------------------------------------------ a tiny run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
  work = tmp_path_factory.mktemp("ner_tiny")
  out = work / "out"
  result = program_in_process(tiny_args(work, SAMPLE, out, "--do_train",
                                        "--do_eval", "--do_predict"))
  return out, result


def read_conll_columns(path):
  """The gold and predicted tag lists of a predictions file."""
  gold, guess = [], []
  for block in open(path).read().split("\n\n"):
    rows = [line.split(" ") for line in block.splitlines()]
    if rows:
      gold.append([r[1] for r in rows])
      guess.append([r[2] for r in rows])
  return gold, guess


def test_tiny_run_writes_labels_predictions_and_seqeval_figures(tiny_run):
  from seqeval import metrics
  out, result = tiny_run
  assert (out / "labels.txt").read_text().split() == LABELS
  results = read_eval_results(out)
  figures = json.loads((out / "eval_results.json").read_text())
  for split, prefix in (("dev", "eval"), ("test", "test")):
    gold, guess = read_conll_columns(out / ("%s_predictions.txt" % split))
    sentences = ner_data.read_sentences(os.path.join(SAMPLE, split + ".txt"))
    assert gold == [list(s.tags) for s in sentences]
    assert results[prefix + "_f1"] == pytest.approx(
        metrics.f1_score(gold, guess))
    assert figures[split]["f1"] == pytest.approx(results[prefix + "_f1"])
    assert set(figures[split]["types"]) == {"LOC", "MISC", "PER"}
    for kind in ("LOC", "MISC", "PER"):
      assert "%s_%s_f1" % (prefix, kind) in results
  assert "eval eval_f1 = " in result.stdout


def test_tiny_run_exports_with_its_labels_and_reads_back(tiny_run, tmp_path):
  out, _ = tiny_run
  export_checkpoint.export(str(out), str(out.parent / "tiny.json"), VOCAB,
                           True, str(tmp_path / "export"), ["huggingface"])
  hf_dir = tmp_path / "export" / "huggingface"
  config = json.loads((hf_dir / "config.json").read_text())
  assert config["architectures"] == ["BertForTokenClassification"]
  assert config["id2label"] == {str(i): l for i, l in enumerate(LABELS)}
  weights, _ = checkpoint_formats.read_hf_weights(str(hf_dir))
  assert checkpoint_formats.detect_head(
      {name: value.shape for name, value in weights.items()}) == (
          heads.TOKEN_CLASSIFICATION, len(LABELS))


# ------------------------------------------------------------ slow


@pytest.fixture(scope="module")
def minilm_run(tmp_path_factory):
  """all-MiniLM-L6-v2 fine-tuned on the sample (the paper's lr 5e-5 is too
  slow for 58 steps of batch 16; 1e-4)."""
  work = tmp_path_factory.mktemp("ner_minilm")
  out = work / "out"
  result = program_in_process(ner_args(
      SAMPLE, out, "--init_checkpoint=" + HF_DIR, "--do_train", "--do_eval",
      "--do_predict", "--max_seq_length=%d" % MINILM_SEQ,
      "--train_batch_size=16",
      "--num_train_epochs=4", "--learning_rate=1e-4",
      "--predict_batch_size=32", "--tf_random_seed=1"))
  return work, out, result


@pytest.mark.slow
def test_minilm_learns_the_entities_far_above_chance(minilm_run):
  _, out, result = minilm_run
  results = read_eval_results(out)
  print({k: v for k, v in results.items() if k.endswith("_f1")})
  # Chance (a random tag per word) finds almost no whole entity.
  assert results["eval_f1"] > 0.6 and results["test_f1"] > 0.6
  assert "2 initialised fresh: cls/token_classification/output_weights, " \
         "cls/token_classification/output_bias" in result.stderr


def our_logits(out, inputs, num_labels):
  """token_classification.create_model's logits from out's checkpoint."""
  config = modeling.BertConfig.from_dict(
      checkpoint_formats.hf_bert_config(HF_DIR).to_dict())
  with tf.Graph().as_default(), tf.Session() as sess:
    logits = token_classification.create_model(
        config, False, *(tf.constant(inputs[name]) for name in
                         ("input_ids", "input_mask", "segment_ids")),
        num_labels)
    tf.train.Saver().restore(sess, tf.train.latest_checkpoint(str(out)))
    return sess.run(logits)


def records(path):
  """{feature: int32 [N, ...]} of a record file."""
  rows = [tf.train.Example.FromString(r).features.feature
          for r in tf.io.tf_record_iterator(str(path))]
  return {name: np.array([row[name].int64_list.value for row in rows],
                         np.int32)
          for name in ("input_ids", "input_mask", "segment_ids")}


@pytest.mark.slow
def test_export_to_bert_for_token_classification_gives_our_logits(
    minilm_run):
  import torch
  import transformers
  work, out, _ = minilm_run
  # The run's model is the Hugging Face directory's.
  config = work / "bert_config.json"
  config.write_text(checkpoint_formats.hf_bert_config(HF_DIR).to_json_string())
  export_checkpoint.export(str(out), str(config), VOCAB, True,
                           str(work / "export"), ["huggingface"])
  hf_dir = str(work / "export" / "huggingface")
  model, info = transformers.BertForTokenClassification.from_pretrained(
      hf_dir, output_loading_info=True)
  assert info["missing_keys"] == [] and info["unexpected_keys"] == []
  assert model.config.id2label == dict(enumerate(LABELS))
  assert model.config.label2id == {l: i for i, l in enumerate(LABELS)}
  # Read back (as --init_checkpoint), the head is ours again.
  weights, _ = checkpoint_formats.read_hf_weights(hf_dir)
  assert checkpoint_formats.detect_head(
      {name: value.shape for name, value in weights.items()}) == (
          heads.TOKEN_CLASSIFICATION, len(LABELS))
  inputs = records(out / "predict.tf_record")
  model.eval()
  with torch.no_grad():
    theirs = model(
        input_ids=torch.tensor(inputs["input_ids"], dtype=torch.long),
        attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        token_type_ids=torch.tensor(inputs["segment_ids"],
                                    dtype=torch.long)).logits.numpy()
  ours = our_logits(out, inputs, len(LABELS))
  mask = inputs["input_mask"].astype(bool)
  np.testing.assert_allclose(theirs[mask], ours[mask], atol=TOLERANCE,
                             rtol=0)
  # And the tags of test_predictions.txt are those argmaxes.
  sentences = ner_data.read_sentences(os.path.join(SAMPLE, "test.txt"))
  windows = ner_data.windows_of(sentences, tokenizer(), MINILM_SEQ)
  _, guess = read_conll_columns(out / "test_predictions.txt")
  assert ner_data.predicted_tags(sentences, windows, theirs.argmax(-1),
                                 LABELS) == guess


@pytest.mark.slow
def test_two_replicas_and_micro_batches_equal_one_device(tmp_path):
  """Windows hold different numbers of words: each share of the loss is
  divided by the global batch's count, so the runs add up alike."""
  runs = {}
  for name, extra in (("one", []), ("two", ["--cpu_replicas=2"]),
                      ("accumulated", ["--num_accumulation_steps=2"])):
    out = tmp_path / name
    program_in_process(tiny_args(tmp_path, SAMPLE, out, "--do_train",
                                 "--do_eval", "--train_batch_size=32",
                                 "--learning_rate=1e-4", *extra))
    runs[name] = out
  assert_weights_equal_one_device(runs)
  for other in ("two", "accumulated"):
    assert read_eval_results(runs[other])["eval_loss"] == pytest.approx(
        read_eval_results(runs["one"])["eval_loss"], abs=1e-4)


@pytest.mark.slow
def test_fp16_with_two_replicas_and_accumulation_runs(tmp_path):
  # A launch: --use_fp16's graph rewrite is process-global state.
  out = tmp_path / "out"
  result = run_ok(tiny_args(tmp_path, SAMPLE, out, "--do_train",
                            "--do_predict", "--cpu_replicas=2",
                            "--num_accumulation_steps=2", "--use_fp16"))
  assert "strategy=mirrored replicas=2" in result.stderr
  assert read_eval_results(out)["test_support"] == 46
  assert json.loads((out / "final_weights.local.json").read_text())[
      "replicas_identical"] is True


@pytest.mark.slow
def test_script_trains_predicts_and_exports(tmp_path):
  from helpers import scripts
  result = scripts.run_ok(
      "run_ner.sh", "WORK_DIR=%s" % tmp_path, "VOCAB_FILE=" + VOCAB,
      "BERT_CONFIG_FILE=" + tiny_config(tmp_path), "INIT_CHECKPOINT=",
      "MAX_SEQ_LENGTH=32", "NUM_TRAIN_EPOCHS=1", "EXPORT_FORMAT=huggingface")
  out = tmp_path / "ner"
  assert "test_predictions.txt" in result.stdout
  assert read_eval_results(out)["test_support"] > 0
  config = json.loads((out / "export" / "huggingface" /
                       "config.json").read_text())
  assert config["architectures"] == ["BertForTokenClassification"]
  assert config["id2label"]["1"] == "B-LOC"
