"""run_classifier.py: processors, features, head, input_fn, end-to-end runs."""

import dataclasses
import json
import os
import re
import types

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import errors
from bertkit.engine.checkpointing import run_directory
from bertkit.engine.distributed import distribution
from bertkit.engine.input import input_pipeline
from bertkit.engine.loop import engine_setup
from bertkit.tasks.classification import data as classifier_data
from bertkit.tasks.classification import features as classifier_features
from bertkit.tasks.classification import outputs as classifier_outputs
from bertkit.tasks.classification import processors as classifier_processors
from bertkit.tasks.classification import task as classifier
import modeling
from conftest import (program_in_process, read_eval_results, run_program,
                      tiny_bert_config)
from helpers.classifier import (FIXTURES, SAMPLE, classifier_args,
                                read_probabilities, read_tsv,
                                save_pretrained_checkpoint, tiny_config,
                                tsv_options, workdir)

# Final dev accuracy of the tiny model on the sample task, seeds 1-3:
# 1.0, 1.0, 1.0 (chance is 0.5).
MIN_ACCURACY = 0.9


class FakeTokenizer(object):
  """Whitespace tokens; ids are 100 + position in `vocab`."""

  def __init__(self, vocab):
    self.vocab = {token: i for i, token in enumerate(vocab)}

  def tokenize(self, text):
    return text.split()

  def convert_tokens_to_ids(self, tokens):
    return [self.vocab[t] for t in tokens]


# ---------------------------------------------------------------- processors


def test_mrpc_reads_glue_layout():
  data_dir = os.path.join(FIXTURES, "mrpc")
  processor = classifier_processors.MrpcProcessor()
  train = processor.get_train_examples(data_dir)
  assert [(e.guid, e.label) for e in train] == [
      ("train-1", "1"), ("train-2", "0"), ("train-3", "1")]
  assert train[1].text_a == "The bakery opens at six."
  assert train[1].text_b == "The library closes at six."
  assert len(processor.get_dev_examples(data_dir)) == 2
  test = processor.get_test_examples(data_dir)
  assert [(e.text_a, e.label) for e in test] == [
      ("The bell rings at noon.", "0"), ("Bees live in the hive.", "0")]
  assert processor.get_labels() == ["0", "1"]


def test_cola_train_has_no_header_but_test_has():
  data_dir = os.path.join(FIXTURES, "cola")
  processor = classifier_processors.ColaProcessor()
  train = processor.get_train_examples(data_dir)
  assert [(e.guid, e.label, e.text_b) for e in train] == [
      ("train-0", "1", None), ("train-1", "0", None), ("train-2", "1", None)]
  assert train[1].text_a == "The bread slept the oven."
  test = processor.get_test_examples(data_dir)
  assert [(e.guid, e.text_a, e.label) for e in test] == [
      ("test-1", "Jonas walked past the station.", "0"),
      ("test-2", "The bicycle rattled its way down the lane.", "0")]


def test_mnli_uses_the_last_column_as_label():
  data_dir = os.path.join(FIXTURES, "mnli")
  processor = classifier_processors.MnliProcessor()
  train = processor.get_train_examples(data_dir)
  # Row 2's label1 says entailment; gold_label (the last column) rules.
  assert [(e.guid, e.label) for e in train] == [
      ("train-0", "neutral"), ("train-1", "entailment"),
      ("train-2", "contradiction")]
  assert train[0].text_a == "The allotment has two long beds of potatoes."
  assert train[0].text_b == "Potatoes grow best in the beds nearest the shed."
  dev = processor.get_dev_examples(data_dir)
  assert [(e.guid, e.label) for e in dev] == [
      ("dev_matched-0", "neutral"), ("dev_matched-1", "contradiction")]
  test = processor.get_test_examples(data_dir)
  assert [(e.guid, e.label) for e in test] == [("test-0", "contradiction")]


def test_xnli_reads_translated_train_and_one_language_of_dev():
  data_dir = os.path.join(FIXTURES, "xnli")
  processor = classifier_processors.XnliProcessor()
  train = processor.get_train_examples(data_dir)
  assert [e.label for e in train] == ["neutral", "entailment",
                                      "contradiction"]
  assert train[0].text_a == "菜园 里 有 两 块 土豆 地"
  dev = processor.get_dev_examples(data_dir)
  assert [(e.guid, e.text_b, e.label) for e in dev] == [
      ("dev-2", "整个下午都在下雪。", "contradiction"),
      ("dev-3", "中午以前雪化了。", "entailment")]
  with pytest.raises(errors.UserError, match="no test set"):
    processor.get_test_examples(data_dir)


def test_tsv_columns_by_name_and_labels_inferred_sorted(tmp_path):
  (tmp_path / "train.tsv").write_text(
      "id\tlabel\tfirst\tsecond\n1\tyes\ta b\tc\n2\tno\td\te\n3\tyes\tf\tg\n")
  (tmp_path / "test.tsv").write_text("id\tfirst\tsecond\n7\th\ti\n")
  processor = classifier_data.TsvProcessor("first", "label", text_b_column="3")
  assert processor.infer_labels(str(tmp_path)) == ["no", "yes"]
  processor.labels = ["yes", "no"]
  train = processor.get_train_examples(str(tmp_path))
  assert [(e.text_a, e.text_b, e.label) for e in train] == [
      ("a b", "c", "yes"), ("d", "e", "no"), ("f", "g", "yes")]
  # test.tsv needs no label column; examples carry the first label.
  processor.text_b_column = "second"
  test = processor.get_test_examples(str(tmp_path))
  assert [(e.text_a, e.text_b, e.label) for e in test] == [("h", "i", "yes")]


def test_tsv_without_header_uses_column_numbers(tmp_path):
  (tmp_path / "dev.tsv").write_text("pos\tgood film\nneg\tdull\n")
  processor = classifier_data.TsvProcessor("1", "0", has_header=False,
                                           labels=["neg", "pos"])
  dev = processor.get_dev_examples(str(tmp_path))
  assert [(e.guid, e.text_a, e.label) for e in dev] == [
      ("dev-0", "good film", "pos"), ("dev-1", "dull", "neg")]
  processor.text_a_column = "text"
  with pytest.raises(errors.UserError, match="names a column but"):
    processor.get_dev_examples(str(tmp_path))


def test_header_less_tsv_read_with_the_default_header_flag_is_refused(
    tmp_path):
  # Numbered columns would otherwise drop the first example as a "header".
  (tmp_path / "train.tsv").write_text("good film\tpos\ndull\tneg\n"
                                      "fine\tpos\n")
  processor = classifier_data.TsvProcessor("0", "1")
  with pytest.raises(errors.UserError,
                     match=r"train.tsv line 1 looks like an example.*"
                           r"'pos'.*--notsv_has_header"):
    processor.infer_labels(str(tmp_path))
  processor.labels = ["neg", "pos"]
  with pytest.raises(errors.UserError, match="line 1 looks like an example"):
    processor.get_train_examples(str(tmp_path))
  (tmp_path / "train.tsv").write_text("text\tlabel\ngood film\tpos\n"
                                      "dull\tneg\n")
  assert len(processor.get_train_examples(str(tmp_path))) == 2


def test_sample_task_is_balanced_and_inferred_labels_match():
  processor = classifier_processors.make_processor("tsv", SAMPLE, tsv_options())
  assert processor.get_labels() == ["kitchen", "weather"]
  counts = {}
  for split, size in (("train", 400), ("dev", 100), ("test", 100)):
    examples = getattr(processor, "get_%s_examples" % split)(SAMPLE)
    assert len(examples) == size
    counts[split] = sum(e.label == "weather" for e in examples)
  assert counts["train"] == 200 and counts["dev"] == 50


def test_explicit_labels_must_be_two_distinct():
  with pytest.raises(errors.UserError, match="at least two"):
    classifier_processors.make_processor("tsv", SAMPLE,
                                   tsv_options(labels=["weather"]))
  with pytest.raises(errors.UserError, match="twice"):
    classifier_processors.make_processor("tsv", SAMPLE,
                                   tsv_options(labels=["a", "a"]))
  with pytest.raises(errors.UserError,
                     match="^--task_name: unknown task 'sst9'; expected one "
                           "of cola, "):
    classifier_processors.make_processor("sst9", SAMPLE, tsv_options())


def test_rerank_reads_ids_and_ranks_each_query_by_score():
  data_dir = os.path.join(FIXTURES, "rerank")
  processor = classifier_data.RerankProcessor()
  train = processor.get_train_examples(data_dir)
  assert [(e.query_id, e.passage_id, e.label) for e in train] == [
      ("q1", "p1", "1"), ("q1", "p2", "0"), ("q2", "p3", "1"),
      ("q2", "p4", "0")]
  assert train[0].text_a == "when does the bakery open"
  test = processor.get_test_examples(data_dir)
  scores = [0.2, 0.9, 0.2, 0.1, 0.7]
  assert classifier_outputs.rank_passages(test, scores) == [
      ("q4", "p8", 0.9, 1), ("q4", "p7", 0.2, 2), ("q4", "p9", 0.2, 3),
      ("q5", "p11", 0.7, 1), ("q5", "p10", 0.1, 2)]


def test_validate_case_mismatch_is_a_user_error(tmp_path):
  model_dir = tmp_path / "cased_L-12_H-768_A-12"
  model_dir.mkdir()
  (model_dir / "bert_model.ckpt.index").write_text("")
  (model_dir / "bert_config.json").write_text(json.dumps(tiny_bert_config()))
  prefix = str(model_dir / "bert_model.ckpt")
  assert not run_directory.resolve(prefix, do_lower_case=False).do_lower_case
  # Google's directories do not state their casing: upstream's default is
  # refused by the model's name too.
  for given in (True, None):
    with pytest.raises(errors.UserError, match="do_lower_case=False"):
      run_directory.resolve(prefix, do_lower_case=given)


# ------------------------------------------------------- bad input, in-process


@pytest.mark.parametrize("train_text, message", [
    ("", r"train.tsv holds no examples"),
    ("sentence\tlabel\n", r"train.tsv has only a header line"),
    ("sentence\tlabel\nfine\tweather\nshort\n",
     r"train.tsv line 3: expected at least 2 tab-separated columns, got 1"),
])
def test_malformed_tsv_names_file_and_line(tmp_path, train_text, message):
  (tmp_path / "train.tsv").write_text(train_text)
  processor = classifier_data.TsvProcessor("0", "1",
                                           labels=["kitchen", "weather"])
  with pytest.raises(errors.UserError, match=message):
    processor.get_train_examples(str(tmp_path))


def test_unknown_label_names_file_line_and_value(tmp_path):
  (tmp_path / "dev.tsv").write_text("Quality\ta\tb\tc\td\n1\t\t\tx\ty\n"
                                    "2\t\t\tx\ty\n")
  with pytest.raises(errors.UserError,
                     match=r"dev.tsv line 3: label '2' is not one of"):
    classifier_processors.MrpcProcessor().get_dev_examples(str(tmp_path))


def test_missing_file_is_named(tmp_path):
  with pytest.raises(errors.UserError,
                     match=r"file .*test_matched.tsv does not exist"):
    classifier_processors.MnliProcessor().get_test_examples(str(tmp_path))


# ------------------------------------------------------------------ features


def test_pair_is_truncated_longer_first_and_segmented():
  tokenizer = FakeTokenizer(["[PAD]", "[CLS]", "[SEP]"] + list("abcdefghij"))
  example = classifier_data.InputExample("g", "a b c d e f", "g h", label="y")
  feature = classifier_features.convert_single_example(
      0, example, ["x", "y"], 10, tokenizer)
  # 10 - 3 special tokens = 7: A loses its last two tokens (6 -> 5).
  assert feature.input_ids == [1, 3, 4, 5, 6, 7, 2, 9, 10, 2]
  assert feature.segment_ids == [0] * 7 + [1] * 3
  assert feature.input_mask == [1] * 10
  assert feature.label_id == 1 and feature.is_real_example


def test_single_sentence_is_padded_with_zeros():
  tokenizer = FakeTokenizer(["[PAD]", "[CLS]", "[SEP]", "a", "b"])
  example = classifier_data.InputExample("g", "a b", None, label="x")
  feature = classifier_features.convert_single_example(
      0, example, ["x", "y"], 6, tokenizer)
  assert feature.input_ids == [1, 3, 4, 2, 0, 0]
  assert feature.input_mask == [1, 1, 1, 1, 0, 0]
  assert feature.segment_ids == [0] * 6
  assert feature.label_id == 0


def test_padding_examples_fill_the_last_batch_only():
  examples = [classifier_data.InputExample(str(i), "a", None, "x")
              for i in range(10)]
  padded = classifier_features.pad_to_batches(examples, 4)
  assert len(padded) == 12 and padded[:10] == examples
  assert all(isinstance(e, classifier_features.PaddingInputExample)
             for e in padded[10:])
  assert classifier_features.pad_to_batches(examples[:8], 4) == examples[:8]
  feature = classifier_features.convert_single_example(
      0, padded[-1], ["x"], 5, None)
  assert feature.input_ids == [0] * 5 and feature.input_mask == [0] * 5
  assert not feature.is_real_example


def write_records(tmp_path, num_examples, seq=6):
  tokenizer = FakeTokenizer(["[PAD]", "[CLS]", "[SEP]"] +
                            ["w%d" % i for i in range(num_examples)])
  examples = [classifier_data.InputExample(str(i), "w%d" % i, None,
                                           ["x", "y"][i % 2])
              for i in range(num_examples)]
  path = str(tmp_path / "records.tf_record")
  classifier_features.file_based_convert_examples_to_features(
      classifier_features.pad_to_batches(examples, 4), ["x", "y"], seq,
      tokenizer, path)
  return path


def test_records_round_trip_through_the_input_fn(tmp_path, graph):
  path = write_records(tmp_path, 10)
  assert os.listdir(str(tmp_path)) == ["records.tf_record"]
  input_fn = input_pipeline.records_input_fn(
      path, input_pipeline.classifier_feature_spec(6), is_training=False,
      drop_remainder=True, global_batch_size=4)
  batch = tf.data.make_one_shot_iterator(input_fn()).get_next()
  rows = []
  with tf.Session() as sess:
    try:
      while True:
        rows.append(sess.run(batch))
    except tf.errors.OutOfRangeError:
      pass
  assert len(rows) == 3
  assert {k: v.dtype for k, v in rows[0].items()} == {
      "input_ids": np.int32, "input_mask": np.int32, "segment_ids": np.int32,
      "label_ids": np.int32, "is_real_example": np.int32}
  ids = np.concatenate([r["input_ids"] for r in rows])
  real = np.concatenate([r["is_real_example"] for r in rows])
  labels = np.concatenate([r["label_ids"] for r in rows])
  # In file order: example i is [CLS] w_i [SEP], then two padding rows.
  assert ids[:10, 1].tolist() == [3 + i for i in range(10)]
  assert real.tolist() == [1] * 10 + [0, 0]
  assert labels[:10].tolist() == [i % 2 for i in range(10)]
  assert ids[10:].sum() == 0


def test_training_input_is_batched_per_replica(tmp_path, graph):
  path = write_records(tmp_path, 10)
  input_fn = input_pipeline.records_input_fn(
      path, input_pipeline.classifier_feature_spec(6), is_training=True,
      drop_remainder=True, global_batch_size=8, num_replicas=2)
  dataset = input_fn()
  assert dataset.element_spec["input_ids"].shape.as_list() == [4, 6]
  assert dataset.element_spec["label_ids"].shape.as_list() == [4]
  batch = tf.data.make_one_shot_iterator(dataset).get_next()
  with tf.Session() as sess:
    seen = [sess.run(batch)["input_ids"][:, 1] for _ in range(6)]
  # Repeats forever: 6 batches of 4 cover all 12 padded records twice.
  assert len(np.concatenate(seen)) == 24


def test_record_shards_split_the_training_file_between_ranks(tmp_path, graph):
  path = write_records(tmp_path, 10)  # 12 records: 10 real, 2 padding
  seen = {}
  for index in (0, 1):
    input_fn = input_pipeline.records_input_fn(
        path, input_pipeline.classifier_feature_spec(6), is_training=True,
        drop_remainder=True, global_batch_size=2, shuffle_seed=7)
    # What the runner hands each horovod rank (engine_setup.input_context).
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=index, num_replicas_in_sync=2)
    batch = tf.data.make_one_shot_iterator(
        input_fn(input_context=context)).get_next()
    with tf.Session() as sess:
      rows = np.concatenate([sess.run(batch)["input_ids"] for _ in range(12)])
    # Row i of the file is [CLS] w_i [SEP] with w_i = id 3 + i; padding is 0.
    seen[index] = set(rows[:, 1].tolist())
  # Rank 0 reads rows 0, 2, ..., 10 (the last is padding), rank 1 the others.
  assert seen[0] <= {3, 5, 7, 9, 11, 0} and len(seen[0]) >= 4
  assert seen[1] <= {4, 6, 8, 10, 12, 0} and len(seen[1]) >= 4


def test_only_horovod_ranks_get_an_input_context_from_the_runner():
  plan = distribution.StrategyPlan("mirrored", ["/cpu:0", "/cpu:1"], 1,
                                   "auto", 600, None)
  # Strategies: Estimator hands the input_fn its own InputContext.
  assert engine_setup.input_context(types.SimpleNamespace(plan=plan)) is None
  horovod = dataclasses.replace(plan, name="horovod", devices=["/cpu:0"],
                                num_workers=2)
  distribution.join_process_group(distribution.ProcessGroup(
      engine="horovod", rank=1, size=2, sum_across_processes=None))
  try:
    context = engine_setup.input_context(
        types.SimpleNamespace(plan=horovod))
  finally:
    distribution.leave_process_group()
  assert (context.num_input_pipelines, context.input_pipeline_id,
          context.num_replicas_in_sync) == (2, 1, 2)


# ---------------------------------------------------------------- model head


def test_head_variables_are_top_level_with_upstream_shapes(graph):
  config = modeling.BertConfig.from_dict(tiny_config(50))
  classifier.build_classifier_variables(config, num_labels=3)
  shapes = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  assert shapes["output_weights"] == [3, 64]
  assert shapes["output_bias"] == [3]
  assert sorted(n for n in shapes if not n.startswith("bert/")) == [
      "output_bias", "output_weights"]


def test_metrics_count_real_examples_only(graph):
  logits = tf.constant([[2., 0.], [0., 2.], [2., 0.], [0., 2.]])
  labels = tf.constant([0, 1, 1, 0])
  loss = tf.constant([1., 2., 3., 100.])
  real = tf.constant([1, 1, 1, 0])
  metrics = classifier.classifier_metrics(loss, labels, logits, real)
  with tf.Session() as sess:
    sess.run(tf.local_variables_initializer())
    sess.run({k: update for k, (_, update) in metrics.items()})
    values = sess.run({k: value for k, (value, _) in metrics.items()})
  assert values["eval_accuracy"] == pytest.approx(2 / 3)
  assert values["eval_loss"] == pytest.approx(2.0)


def test_eval_loss_is_the_mean_loss_under_horovod(graph):
  """Eval is unreplicated: its loss must not be divided by the rank count."""
  config = modeling.BertConfig.from_dict(tiny_config(50))
  model_fn = classifier.model_fn_builder(config, 2, None, 1e-3, 10, 1)
  features = {"input_ids": tf.constant([[1, 2, 3], [4, 5, 0]]),
              "input_mask": tf.constant([[1, 1, 1], [1, 1, 0]]),
              "segment_ids": tf.zeros([2, 3], tf.int32),
              "label_ids": tf.constant([0, 1]),
              "is_real_example": tf.constant([1, 1])}
  distribution.join_process_group(distribution.ProcessGroup(
      engine="horovod", rank=0, size=2, sum_across_processes=None))
  try:
    spec = model_fn(features, None, tf.estimator.ModeKeys.EVAL, None)
  finally:
    distribution.leave_process_group()
  per_example_loss = tf.get_default_graph().get_tensor_by_name(
      "loss/SparseSoftmaxCrossEntropyWithLogits/"
      "SparseSoftmaxCrossEntropyWithLogits:0")
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    loss, per_example = sess.run([spec.loss, per_example_loss])
  assert loss == pytest.approx(np.mean(per_example), rel=1e-6)


# --------------------------------------------------------------- end to end


@pytest.mark.slow
def test_fine_tuning_learns_the_sample_task(workdir, tmp_path):
  output_dir = tmp_path / "out"
  program_in_process(classifier_args(
      workdir, output_dir, "--do_train", "--do_eval", "--do_predict",
      "--num_train_epochs=4", "--tf_random_seed=1"))
  results = read_eval_results(output_dir)
  assert results["global_step"] == 50  # int(400 / 32 * 4)
  assert results["eval_accuracy"] >= MIN_ACCURACY
  # 100 test examples at predict_batch_size 8: the last batch is padded,
  # and each example still gets exactly one row.
  probabilities = read_probabilities(output_dir / "test_results.tsv")
  assert probabilities.shape == (100, 2)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
  expected = [["kitchen", "weather"].index(row[1])
              for row in read_tsv(os.path.join(SAMPLE, "test.tsv"))[1:]]
  accuracy = np.mean(probabilities.argmax(axis=1) == expected)
  assert accuracy >= MIN_ACCURACY
  shapes = dict(tf.train.list_variables(str(output_dir)))
  assert shapes["output_weights"] == [2, 64]
  assert shapes["output_bias"] == [2]
  assert sorted(os.path.basename(p) for p in
                tf.io.gfile.glob(str(output_dir / "*.tf_record"))) == [
                    "eval.tf_record", "predict.tf_record", "train.tf_record"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["mirrored", "central_storage"])
def test_two_cpu_replicas_train_eval_and_predict(workdir, tmp_path, strategy):
  pretrained = tmp_path / "pretrained"
  save_pretrained_checkpoint(workdir, str(pretrained / "model.ckpt"))
  output_dir = tmp_path / "out"
  result = program_in_process(classifier_args(
      workdir, output_dir, "--do_train", "--do_eval", "--do_predict",
      "--cpu_replicas=2", "--distribution_strategy=%s" % strategy,
      "--num_train_epochs=0.5", "--eval_batch_size=16",
      "--predict_batch_size=7", "--init_checkpoint=%s" % pretrained,
      "--tf_random_seed=2"))
  assert "strategy=%s replicas=2" % strategy in result.stderr
  assert "per_replica_batch=16" in result.stderr
  assert "2 initialised fresh: output_weights, output_bias" in result.stderr
  results = read_eval_results(output_dir)
  assert results["global_step"] == 6  # int(400 / 32 * 0.5)
  assert 0.0 <= results["eval_accuracy"] <= 1.0
  assert sorted(results) == ["eval_accuracy", "eval_loss", "global_step",
                             "loss"]
  assert read_probabilities(output_dir / "test_results.tsv").shape == (100, 2)


@pytest.mark.slow
def test_rerank_predict_writes_ranked_results(workdir, tmp_path):
  output_dir = tmp_path / "out"
  program_in_process(classifier_args(
      workdir, output_dir, "--do_train", "--do_predict",
      "--train_batch_size=2", "--predict_batch_size=2",
      "--num_train_epochs=1", "--tf_random_seed=1",
      data_dir=os.path.join(FIXTURES, "rerank"), task="rerank"))
  probabilities = read_probabilities(output_dir / "test_results.tsv")
  assert probabilities.shape == (5, 2)
  ranked = read_tsv(str(output_dir / "ranked_results.tsv"))
  assert ranked[0] == ["query_id", "passage_id", "score", "rank"]
  test_rows = read_tsv(os.path.join(FIXTURES, "rerank", "test.tsv"))[1:]
  score_of = {(row[0], row[1]): p[1]
              for row, p in zip(test_rows, probabilities)}
  rows = ranked[1:]
  assert sorted((r[0], r[1]) for r in rows) == sorted(score_of)
  for query in ("q4", "q5"):
    mine = [r for r in rows if r[0] == query]
    assert [int(r[3]) for r in mine] == list(range(1, len(mine) + 1))
    scores = [float(r[2]) for r in mine]
    assert scores == sorted(scores, reverse=True)
    for r in mine:
      assert float(r[2]) == pytest.approx(score_of[(r[0], r[1])], abs=1e-6)
  assert [r[0] for r in rows] == ["q4"] * 3 + ["q5"] * 2


def write_bad_data_dir(tmp_path, case):
  """A copy of a tiny tsv task with one defect."""
  files = {"train.tsv": "sentence\tlabel\nrain\tweather\nbread\tkitchen\n",
           "dev.tsv": "sentence\tlabel\nsnow\tweather\nsoup\tkitchen\n"}
  if case == "missing":
    del files["dev.tsv"]
  elif case == "empty":
    files["dev.tsv"] = ""
  elif case == "header_only":
    files["dev.tsv"] = "sentence\tlabel\n"
  elif case == "unknown_label":
    files["dev.tsv"] += "a match\tsports\n"
  elif case == "short_row":
    files["dev.tsv"] += "no label here\n"
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  for name, text in files.items():
    (data_dir / name).write_text(text)
  return data_dir


@pytest.mark.parametrize("case, message", [
    ("missing", r"--data_dir file \S+/dev.tsv does not exist"),
    ("empty", r"\S+/dev.tsv holds no examples"),
    ("header_only", r"\S+/dev.tsv has only a header line and no examples"),
    ("unknown_label", r"\S+/dev.tsv line 4: label 'sports' is not one of "
                      r"the task's labels kitchen,weather"),
    ("short_row", r"\S+/dev.tsv line 4: expected at least 2 tab-separated "
                  r"columns, got 1"),
], ids=["missing", "empty", "header_only", "unknown_label", "short_row"])
def test_bad_input_is_a_user_error_before_any_output(workdir, tmp_path, case,
                                                     message):
  data_dir = write_bad_data_dir(tmp_path, case)
  with pytest.raises(errors.UserError) as error:
    program_in_process(classifier_args(
        workdir, tmp_path / "out", "--do_train", "--do_eval",
        data_dir=str(data_dir)))
  assert tf.io.gfile.exists(str(tmp_path / "out")) is False
  assert re.match(message, str(error.value)), str(error.value)


@pytest.mark.slow
def test_bad_input_is_one_error_line_and_exit_2(workdir, tmp_path):
  """As a user sees it: the last stderr line, the only `error:` one."""
  data_dir = write_bad_data_dir(tmp_path, "unknown_label")
  result = run_program(classifier_args(
      workdir, tmp_path / "out", "--do_train", "--do_eval",
      data_dir=str(data_dir)))
  assert result.returncode == 2, result.stderr[-2000:]
  error_lines = [l for l in result.stderr.splitlines()
                 if l.startswith("error:")]
  assert len(error_lines) == 1, result.stderr[-2000:]
  assert result.stderr.rstrip().splitlines()[-1] == error_lines[0]
  assert tf.io.gfile.exists(str(tmp_path / "out")) is False
  assert re.match(r"error: \S+/dev.tsv line 4: label 'sports' is not one of "
                  r"the task's labels kitchen,weather", error_lines[0]), \
      error_lines[0]


def test_predict_without_training_needs_a_checkpoint(workdir, tmp_path):
  with pytest.raises(errors.UserError) as error:
    program_in_process(classifier_args(workdir, tmp_path / "out",
                                       "--do_predict"))
  assert str(error.value) == (
      "--do_eval/--do_predict without --do_train need a fine-tuned "
      "checkpoint in --output_dir %s; there is none" % (tmp_path / "out"))
