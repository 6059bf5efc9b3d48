"""The GLUE tasks of run_classifier.py: processors over files in each task's
official layout, the task metrics against scikit-learn / SciPy, the
submission files, STS-B regression and its export, bad input."""

import json
import os
import types

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as sk_metrics
import tensorflow.compat.v1 as tf

from bertkit.common import errors
from bertkit.tasks.classification import task as classifier
from bertkit.tasks.classification import data as classifier_data
from bertkit.tasks.classification import processors as classifier_processors
from bertkit.tasks.classification import features as classifier_features
from bertkit.tasks.classification import glue_outputs as glue_tasks
from bertkit.tasks.classification import registry as task_registry
import modeling
from helpers.classifier import classifier_inputs, hf_classifier_logits
from conftest import (expect_user_error, read_eval_results, read_json,
                      run_ok, run_program, tiny_bert_config)

# The official GLUE download's headers, written out here (not taken from
# the code under test).
MNLI_COLUMNS = ["index", "promptID", "pairID", "genre",
                "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1",
                "sentence2"]
HEADERS = {
    ("sst-2", "train"): ["sentence", "label"],
    ("sst-2", "test"): ["index", "sentence"],
    ("qqp", "train"): ["id", "qid1", "qid2", "question1", "question2",
                       "is_duplicate"],
    ("qqp", "test"): ["id", "question1", "question2"],
    ("qnli", "train"): ["index", "question", "sentence", "label"],
    ("qnli", "test"): ["index", "question", "sentence"],
    ("rte", "train"): ["index", "sentence1", "sentence2", "label"],
    ("rte", "test"): ["index", "sentence1", "sentence2"],
    ("wnli", "train"): ["index", "sentence1", "sentence2", "label"],
    ("wnli", "test"): ["index", "sentence1", "sentence2"],
    ("sts-b", "train"): ["index", "genre", "filename", "year", "old_index",
                         "source1", "source2", "sentence1", "sentence2",
                         "score"],
    ("sts-b", "test"): ["index", "genre", "filename", "year", "old_index",
                        "source1", "source2", "sentence1", "sentence2"],
    ("mrpc", "train"): ["Quality", "#1 ID", "#2 ID", "#1 String",
                        "#2 String"],
    ("mrpc", "test"): ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
    ("mnli", "train"): MNLI_COLUMNS + ["label1", "gold_label"],
    ("mnli", "dev"): MNLI_COLUMNS + ["label1", "label2", "label3", "label4",
                                     "label5", "gold_label"],
    ("mnli", "test"): MNLI_COLUMNS,
    ("cola", "test"): ["index", "sentence"],
    ("ax", "test"): ["index", "sentence1", "sentence2"],
}


def write_tsv(path, header, rows):
  lines = ([header] if header else []) + rows
  path.write_text("".join("\t".join(map(str, l)) + "\n" for l in lines),
                  encoding="utf-8")


def glue_row(task, kind, text_a, text_b, label, index):
  """One line of `task`'s `kind` (train/dev or test) file, all columns."""
  test = kind == "test"
  if task == "sst-2":
    return [index, text_a] if test else [text_a, label]
  if task == "cola":
    return [index, text_a] if test else ["src", label, "", text_a]
  if task == "qqp":
    return ([index, text_a, text_b] if test else
            [index, 10 + index, 20 + index, text_a, text_b, label])
  if task == "mrpc":
    return [index if test else label, 100 + index, 200 + index, text_a,
            text_b]
  if task == "sts-b":
    row = [index, "main-news", "2012", "2012test", index, "none", "none",
           text_a, text_b]
    return row if test else row + [label]
  if task == "mnli":
    row = [index, 7, "%dn" % index, "fiction", "( a )", "( b )", "(ROOT a)",
           "(ROOT b)", text_a, text_b]
    if test:
      return row
    # The annotators' labels differ from gold_label: the last one rules.
    return row + (["neutral"] if kind == "train" else
                  ["neutral"] * 5) + [label]
  return [index, text_a, text_b] if test else [index, text_a, text_b, label]


def write_glue_file(path, task, kind, examples):
  """`examples`: (text_a, text_b, label) in `task`'s official layout."""
  header = HEADERS.get((task, "train" if kind == "dev" and task != "mnli"
                        else kind))
  rows = [glue_row(task, kind, a, b, label, i)
          for i, (a, b, label) in enumerate(examples)]
  write_tsv(path, header, rows)


# ---------------------------------------------------------------- processors


@pytest.mark.parametrize("task, labels, pair", [
    ("sst-2", ["0", "1"], False), ("qnli", ["entailment", "not_entailment"],
                                   True),
    ("rte", ["entailment", "not_entailment"], True), ("wnli", ["0", "1"], True),
    ("qqp", ["0", "1"], True), ("mrpc", ["0", "1"], True),
    ("cola", ["0", "1"], False)])
def test_processor_reads_the_official_columns(tmp_path, task, labels, pair):
  rows = [("first text %d" % i, "second text %d" % i if pair else None,
           labels[i % 2]) for i in range(3)]
  for name, kind in (("train.tsv", "train"), ("dev.tsv", "dev"),
                     ("test.tsv", "test")):
    write_glue_file(tmp_path / name, task, kind, rows)
  processor = classifier_processors.make_processor(task, str(tmp_path), None)
  assert processor.get_labels() == labels
  for read in (processor.get_train_examples, processor.get_dev_examples):
    examples = read(str(tmp_path))
    assert [(e.text_a, e.text_b, e.label) for e in examples] == rows
  test = processor.get_test_examples(str(tmp_path))
  assert [(e.text_a, e.text_b, e.index) for e in test] == [
      (a, b, str(i)) for i, (a, b, _) in enumerate(rows)]
  # Test examples carry a placeholder label of the task.
  assert {e.label for e in test} <= set(labels)


def test_mnli_reads_both_dev_and_test_sets_and_ax(tmp_path):
  rows = {"train": [("p0", "h0", "entailment")],
          "dev_matched": [("p1", "h1", "neutral"),
                          ("p2", "h2", "contradiction")],
          "dev_mismatched": [("p3", "h3", "entailment")]}
  write_glue_file(tmp_path / "train.tsv", "mnli", "train", rows["train"])
  for name in ("dev_matched", "dev_mismatched"):
    write_glue_file(tmp_path / (name + ".tsv"), "mnli", "dev", rows[name])
  write_glue_file(tmp_path / "test_matched.tsv", "mnli", "test",
                  [("p4", "h4", None)] * 2)
  write_glue_file(tmp_path / "test_mismatched.tsv", "mnli", "test",
                  [("p5", "h5", None)])
  processor = classifier_processors.MnliProcessor()
  data_dir = str(tmp_path)
  assert [(e.text_a, e.text_b, e.label) for e in
          processor.get_train_examples(data_dir)] == rows["train"]
  for split in ("dev", "dev_mismatched"):
    name = "dev_matched" if split == "dev" else split
    assert [(e.text_a, e.text_b, e.label) for e in
            processor.get_split_examples(data_dir, split)] == rows[name]
  mismatched = processor.get_split_examples(data_dir, "test_mismatched")
  assert [(e.guid, e.text_a, e.index) for e in mismatched] == [
      ("test_mismatched-0", "p5", "0")]
  assert [e.index for e in processor.get_test_examples(data_dir)] == ["0",
                                                                      "1"]
  write_glue_file(tmp_path / "diagnostic.tsv", "ax", "test",
                  [("p6", "h6", None), ("p7", "h7", None)])
  ax = classifier_processors.make_processor("AX", data_dir, None)
  assert ax.get_labels() == processor.get_labels()
  assert [(e.text_a, e.text_b, e.index) for e in
          ax.get_test_examples(data_dir)] == [("p6", "h6", "0"),
                                              ("p7", "h7", "1")]
  with pytest.raises(errors.UserError, match="ax is predict only"):
    ax.get_dev_examples(data_dir)


def test_qqp_skips_malformed_lines_and_logs_their_count_once(
    tmp_path, monkeypatch):
  header = "\t".join(HEADERS[("qqp", "train")])
  (tmp_path / "train.tsv").write_text(
      header + "\n0\t1\t2\tq a\tq b\t1\n1\t3\t4\tcut short\n"
      "2\t5\t6\tq c\tq d\t0\n3\t7\n", encoding="utf-8")
  warnings = []
  monkeypatch.setattr(classifier_processors.logging, "warning",
                      lambda *args: warnings.append(args[0] % args[1:]))
  examples = classifier_processors.QqpProcessor().get_train_examples(
      str(tmp_path))
  assert [(e.text_a, e.text_b, e.label) for e in examples] == [
      ("q a", "q b", "1"), ("q c", "q d", "0")]
  assert len(warnings) == 1
  assert "skipped 2 malformed line(s)" in warnings[0]
  assert "the first at line 3" in warnings[0]


def test_stsb_reads_scores_and_regresses(tmp_path):
  rows = [("a cat", "a dog", "3.800"), ("one", "two", "0.5")]
  write_glue_file(tmp_path / "train.tsv", "sts-b", "train", rows)
  write_glue_file(tmp_path / "test.tsv", "sts-b", "test", rows)
  processor = classifier_processors.make_processor("stsb", str(tmp_path), None)
  labels = processor.get_labels()
  assert classifier_data.is_regression(labels)
  train = processor.get_train_examples(str(tmp_path))
  assert [(e.text_a, e.text_b, e.label) for e in train] == rows
  tokenizer = types.SimpleNamespace(
      tokenize=str.split,
      convert_tokens_to_ids=lambda tokens: list(range(len(tokens))))
  feature = classifier_features.convert_single_example(0, train[0], labels,
                                                       8, tokenizer)
  assert feature.label_id == 3.8
  test = processor.get_test_examples(str(tmp_path))
  assert [e.index for e in test] == ["0", "1"]


@pytest.mark.parametrize("task, other", [("rte", "qnli"), ("sts-b", "mrpc"),
                                         ("mrpc", "rte"), ("mnli", "rte"),
                                         ("sst-2", "cola")])
def test_a_file_with_another_tasks_columns_is_refused(tmp_path, task, other):
  rows = [("text one", "text two", "0")]
  name = "dev_matched.tsv" if task == "mnli" else "dev.tsv"
  kind = "dev" if other != "cola" else "test"
  write_glue_file(tmp_path / name, other, kind, rows)
  processor = classifier_processors.make_processor(task, str(tmp_path), None)
  expected = HEADERS[(task, "dev" if task == "mnli" else "train")]
  with pytest.raises(errors.UserError) as raised:
    processor.get_dev_examples(str(tmp_path))
  message = str(raised.value)
  assert message.startswith(str(tmp_path / name) + " line 1: ")
  assert "not the header of a GLUE %s file" % task in message
  assert repr("\t".join(expected)) in message


def test_non_numeric_score_names_file_and_line(tmp_path):
  write_glue_file(tmp_path / "dev.tsv", "sts-b", "dev",
                  [("a", "b", "1.0"), ("c", "d", "high")])
  with pytest.raises(errors.UserError,
                     match=r"dev.tsv line 3: the score 'high' is not a "
                           r"number"):
    classifier_processors.StsbProcessor().get_dev_examples(str(tmp_path))


def test_unknown_task_lists_the_names():
  with pytest.raises(errors.UserError) as raised:
    classifier_processors.make_processor("glue", "/nowhere")
  assert str(raised.value) == (
      "--task_name: unknown task 'glue'; expected one of cola, sst-2 (sst2), "
      "mrpc, sts-b (stsb), qqp, mnli, qnli, rte, wnli, ax, xnli, tsv, rerank")


def test_every_task_has_its_processor_and_names_are_case_blind():
  assert sorted(classifier_processors.PROCESSORS) == sorted(
      t.name for t in task_registry.TASKS)
  assert task_registry.get(" SST2 ").name == "sst-2"
  assert task_registry.get("STS-B").name == "sts-b"
  assert [t.name for t in task_registry.glue_tasks()] == [
      "cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "qnli", "rte", "wnli",
      "ax"]


def test_missing_file_is_named(tmp_path):
  with pytest.raises(errors.UserError,
                     match=r"file \S+/dev_mismatched.tsv does not exist"):
    classifier_processors.MnliProcessor().get_split_examples(str(tmp_path),
                                                       "dev_mismatched")


# ------------------------------------------------------------------- metrics


def examples_of(labels):
  return [classifier_data.InputExample(str(i), "x", None, label)
          for i, label in enumerate(labels)]


@pytest.mark.parametrize("task", ["cola", "mrpc", "qqp", "rte"])
def test_classification_metrics_equal_sklearn(task):
  rng = np.random.RandomState(5)
  label_list = (["entailment", "not_entailment"] if task == "rte"
                else ["0", "1"])
  truth = [label_list[i] for i in rng.randint(0, 2, 40)]
  probabilities = rng.dirichlet([1, 1], 40)
  predicted = [label_list[i] for i in probabilities.argmax(axis=1)]
  result = glue_tasks.dev_metrics(task_registry.get(task), label_list,
                                  examples_of(truth), probabilities)
  expected = {"accuracy": sk_metrics.accuracy_score(truth, predicted),
              "num_examples": 40}
  if task in ("mrpc", "qqp"):
    expected["f1"] = sk_metrics.f1_score(truth, predicted, pos_label="1")
  if task == "cola":
    expected["matthews_corrcoef"] = sk_metrics.matthews_corrcoef(truth,
                                                                 predicted)
  ids = [label_list.index(t) for t in truth]
  expected["eval_loss"] = pytest.approx(
      -np.mean(np.log(probabilities[np.arange(40), ids])), rel=1e-12)
  assert result == expected


def test_matthews_of_a_known_confusion_matrix():
  # tp=3, tn=2, fp=1, fn=1: (6 - 1) / sqrt(4 * 4 * 3 * 3) = 5 / 12.
  truth = ["1", "1", "1", "1", "0", "0", "0"]
  predicted = ["1", "1", "1", "0", "0", "0", "1"]
  outputs = [[0.2, 0.8] if p == "1" else [0.7, 0.3] for p in predicted]
  result = glue_tasks.dev_metrics(task_registry.get("cola"), ["0", "1"],
                                  examples_of(truth), outputs)
  assert result["matthews_corrcoef"] == pytest.approx(5 / 12, abs=1e-12)
  assert result["accuracy"] == 5 / 7


def test_stsb_metrics_equal_scipy_and_constant_scores_give_none():
  rng = np.random.RandomState(2)
  truth = rng.uniform(0, 5, 30).round(3)
  scores = truth + rng.normal(0, 1, 30)
  task = task_registry.get("sts-b")
  result = glue_tasks.dev_metrics(task, ["score"],
                                  examples_of(["%.3f" % t for t in truth]),
                                  scores)
  assert result == {
      "pearson": stats.pearsonr(truth, scores)[0],
      "spearman": stats.spearmanr(truth, scores)[0],
      "eval_loss": pytest.approx(np.mean((scores - truth) ** 2), rel=1e-12),
      "num_examples": 30}
  flat = glue_tasks.dev_metrics(task, ["score"],
                                examples_of(["%.3f" % t for t in truth]),
                                np.full(30, 2.5))
  assert flat["pearson"] is None and flat["spearman"] is None


# ---------------------------------------------------- predictions and files


def test_glue_run_splits_predictions_and_writes_every_file(tmp_path):
  """MNLI: two dev sets and two test sets predicted in one padded pass."""
  labels = ["contradiction", "entailment", "neutral"]

  def indexed(count, label="neutral"):
    return [classifier_data.InputExample(str(i), "p", "h", label,
                                         index=str(100 + i))
            for i in range(count)]

  examples = {"dev": indexed(3), "dev_mismatched": indexed(2, "entailment"),
              "test": indexed(3), "test_mismatched": indexed(1)}
  # Records padded to batches of 4 (dev) and 2 (test).
  counts = {"dev": 4, "dev_mismatched": 4, "test": 4, "test_mismatched": 2}
  files = {split: ["%s.tf_record" % split] for split in examples}
  run = glue_tasks.GlueRun("mnli", labels, examples, files, counts, False)
  assert run.prediction_files() == ["dev.tf_record",
                                    "dev_mismatched.tf_record",
                                    "test.tf_record",
                                    "test_mismatched.tf_record"]
  one_hot = np.eye(3) * 0.9 + 0.1 / 3
  # dev: 2 of 3 right; dev_mismatched: 1 of 2; padding predicts anything.
  classes = [2, 2, 0, 1] + [1, 0, 1, 1] + [0, 1, 2, 0] + [1, 2]
  predictions = [{"probabilities": one_hot[c]} for c in classes]
  assert run.use_predictions(str(tmp_path), predictions) is None
  (tmp_path / "eval_results.txt").write_text(
      "eval_accuracy = 0.6666667\neval_loss = 0.5\nglobal_step = 12\n"
      "loss = 0.5\n")
  run.write_results(str(tmp_path))
  submission = tmp_path / "submission"
  assert sorted(os.listdir(submission)) == ["MNLI-m.tsv", "MNLI-mm.tsv"]
  assert (submission / "MNLI-m.tsv").read_text() == (
      "index\tprediction\n100\tcontradiction\n101\tentailment\n"
      "102\tneutral\n")
  assert (submission / "MNLI-mm.tsv").read_text() == (
      "index\tprediction\n100\tentailment\n")
  assert len((tmp_path / "test_results.tsv").read_text().splitlines()) == 3
  assert len((tmp_path / "test_results_test_mismatched.tsv").read_text()
             .splitlines()) == 1
  loss = -np.log(0.9 + 0.1 / 3)
  wrong = -np.log(0.1 / 3)
  summary = read_json(tmp_path / "eval_results.json")
  assert summary == {
      "task": "mnli", "global_step": 12, "dev_sets": {
          "dev_matched": {"accuracy": 2 / 3, "num_examples": 3,
                          "eval_loss": pytest.approx((2 * loss + wrong) / 3)},
          "dev_mismatched": {"accuracy": 0.5, "num_examples": 2,
                             "eval_loss": pytest.approx((loss + wrong) / 2)}}}
  txt = read_eval_results(tmp_path)
  # Upstream's lines stay as written; mismatched's are added.
  assert txt["eval_accuracy"] == 0.6666667 and txt["eval_loss"] == 0.5
  assert txt["eval_dev_mismatched_accuracy"] == 0.5
  assert sorted(txt) == ["eval_accuracy", "eval_dev_mismatched_accuracy",
                         "eval_dev_mismatched_loss", "eval_loss",
                         "global_step", "loss"]


def test_stsb_submission_prints_scores_with_three_decimals(tmp_path):
  examples = [classifier_data.InputExample(str(i), "a", "b", "0",
                                           index=str(i)) for i in range(2)]
  glue_tasks.write_submission(str(tmp_path / "STS-B.tsv"), ["score"],
                              examples, [np.float32(3.14159), -0.0004])
  assert (tmp_path / "STS-B.tsv").read_text() == (
      "index\tprediction\n0\t3.142\n1\t-0.000\n")


# ------------------------------------------------------------ regression head


def test_regression_head_has_one_output_and_mean_squared_error(graph):
  config = modeling.BertConfig.from_dict(tiny_bert_config())
  ids = tf.constant([[2, 5, 6, 3], [2, 7, 3, 0]])
  mask = tf.constant([[1, 1, 1, 1], [1, 1, 1, 0]])
  scores = tf.constant([1.5, 4.0])
  loss, per_example, logits, predictions = classifier.create_model(
      config, False, ids, mask, tf.zeros_like(ids), scores, 1)
  shapes = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  assert shapes["output_weights"] == [1, 32]
  assert shapes["output_bias"] == [1]
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    loss, per_example, logits, predictions = sess.run(
        [loss, per_example, logits, predictions])
  assert logits.shape == (2, 1) and predictions.shape == (2,)
  np.testing.assert_array_equal(predictions, logits[:, 0])
  np.testing.assert_allclose(per_example, (predictions - [1.5, 4.0]) ** 2,
                             rtol=1e-6)
  assert loss == pytest.approx(per_example.mean(), rel=1e-6)


def test_regression_records_round_trip_float_scores(tmp_path, graph):
  examples = [classifier_data.InputExample("0", "a", "b", "2.25")]
  tokenizer = types.SimpleNamespace(
      tokenize=str.split,
      convert_tokens_to_ids=lambda tokens: list(range(len(tokens))))
  path, count = classifier_features.write_features(
      str(tmp_path / "eval.tf_record"), examples, ["score"], 8, tokenizer,
      batch_size=2)
  assert count == 2
  input_fn = classifier.input_fn_maker(8, regression=True)(
      [path], tf.estimator.ModeKeys.EVAL, 2, 1)
  batch = tf.data.make_one_shot_iterator(input_fn()).get_next()
  with tf.Session() as sess:
    values = sess.run(batch)
  assert values["label_ids"].dtype == np.float32
  np.testing.assert_array_equal(values["label_ids"], [2.25, 0.0])
  np.testing.assert_array_equal(values["is_real_example"], [1, 0])


# ------------------------------------------------------------- end to end

WORDS = ["red", "blue", "green", "cat", "dog", "bird", "sun", "moon", "tree",
         "rock", "lake", "hill"]


def separable_rows(rng, count, keywords):
  """Pairs whose second text holds the keyword of their label."""
  rows = []
  for i in range(count):
    label = list(keywords)[i % len(keywords)]
    a = " ".join(rng.choice(WORDS, 4))
    b = " ".join([rng.choice(WORDS)] + [keywords[label]] * 3)
    rows.append((a, b, label))
  return rows


@pytest.fixture(scope="module")
def glue_work(tmp_path_factory):
  d = tmp_path_factory.mktemp("glue")
  vocab = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS +
           ["yes", "no", "maybe", "zero", "half", "full", "p", "h"])
  (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
  (d / "tiny.json").write_text(json.dumps(tiny_bert_config(
      vocab_size=len(vocab))))
  return d


def glue_args(work, task, data_dir, output_dir, *extra):
  return ["run_classifier.py", "--task_name=%s" % task,
          "--data_dir=%s" % data_dir,
          "--vocab_file=%s" % (work / "vocab.txt"),
          "--bert_config_file=%s" % (work / "tiny.json"),
          "--output_dir=%s" % output_dir, "--max_seq_length=16",
          "--learning_rate=2e-3", "--train_batch_size=16",
          "--eval_batch_size=8", "--predict_batch_size=8",
          "--tf_random_seed=1", "--warmup_proportion=0.1"] + list(extra)


@pytest.mark.slow
def test_mnli_learns_a_separable_task_and_ax_predicts_with_it(glue_work):
  rng = np.random.RandomState(0)
  keywords = {"contradiction": "no", "entailment": "yes", "neutral": "maybe"}
  data = glue_work / "MNLI"
  data.mkdir()
  write_glue_file(data / "train.tsv", "mnli", "train",
                  separable_rows(rng, 96, keywords))
  for name in ("dev_matched", "dev_mismatched"):
    write_glue_file(data / (name + ".tsv"), "mnli", "dev",
                    separable_rows(rng, 18, keywords))
  test_rows = separable_rows(rng, 9, keywords)
  for name in ("test_matched", "test_mismatched"):
    write_glue_file(data / (name + ".tsv"), "mnli", "test", test_rows)
  out = glue_work / "mnli_out"
  run_ok(glue_args(glue_work, "mnli", data, out, "--do_train", "--do_eval",
                   "--do_predict", "--num_train_epochs=8"))
  summary = read_json(out / "eval_results.json")
  # Seed 1: accuracy 1.0 on both dev sets (lr 2e-3 and 3e-3 alike).
  assert summary["task"] == "mnli" and summary["global_step"] == 48
  assert sorted(summary["dev_sets"]) == ["dev_matched", "dev_mismatched"]
  for dev_set in summary["dev_sets"].values():
    assert dev_set["num_examples"] == 18
    assert dev_set["accuracy"] >= 0.9, summary  # chance: 1/3
  txt = read_eval_results(out)
  assert txt["eval_accuracy"] == pytest.approx(
      summary["dev_sets"]["dev_matched"]["accuracy"], abs=1e-6)
  assert txt["eval_loss"] == pytest.approx(
      summary["dev_sets"]["dev_matched"]["eval_loss"], rel=1e-4)
  for name in ("MNLI-m.tsv", "MNLI-mm.tsv"):
    lines = (out / "submission" / name).read_text().splitlines()
    assert lines[0] == "index\tprediction"
    assert [l.split("\t")[0] for l in lines[1:]] == [str(i) for i in
                                                     range(9)]
    right = [l.split("\t")[1] == row[2] for l, row in zip(lines[1:],
                                                          test_rows)]
    assert np.mean(right) >= 0.8
  ax_data = glue_work / "diagnostic"
  ax_data.mkdir()
  write_glue_file(ax_data / "diagnostic.tsv", "ax", "test", test_rows)
  ax_out = glue_work / "ax_out"
  run_ok(glue_args(glue_work, "ax", ax_data, ax_out, "--do_predict",
                   "--init_checkpoint=%s" % out))
  assert (ax_out / "submission" / "AX.tsv").read_text() == (
      out / "submission" / "MNLI-m.tsv").read_text()
  assert not (ax_out / "eval_results.json").exists()


# The classification tasks besides MNLI (above), each from its own official
# layout: the metric the leaderboard scores it by, and a floor well above
# chance (accuracy 1/2, F1 of always "1" 2/3, Matthews 0).
LEARNED = [("cola", "matthews_corrcoef", 0.7), ("sst-2", "accuracy", 0.9),
           ("mrpc", "f1", 0.9), ("qqp", "f1", 0.9), ("qnli", "accuracy", 0.9),
           ("rte", "accuracy", 0.9), ("wnli", "accuracy", 0.9)]


@pytest.mark.slow
@pytest.mark.parametrize("task, metric, floor", LEARNED)
def test_each_classification_task_learns_a_separable_version(
    glue_work, task, metric, floor):
  rng = np.random.RandomState(2)
  labels = (["entailment", "not_entailment"] if task in ("qnli", "rte")
            else ["0", "1"])
  keywords = dict(zip(labels, ["yes", "no"]))
  single = task in ("cola", "sst-2")
  data = glue_work / task
  data.mkdir()
  for name, count in (("train", 96), ("dev", 20)):
    rows = separable_rows(rng, count, keywords)
    if single:  # one text: it holds the keyword
      rows = [(b, None, label) for _, b, label in rows]
    write_glue_file(data / (name + ".tsv"), task, name, rows)
  out = glue_work / (task + "_out")
  run_ok(glue_args(glue_work, task, data, out, "--do_train", "--do_eval",
                   "--num_train_epochs=8"))
  dev = read_json(out / "eval_results.json")["dev_sets"]["dev"]
  assert dev["num_examples"] == 20
  assert dev[metric] >= floor, dev
  expected = {"cola": {"matthews_corrcoef", "accuracy"},
              "mrpc": {"f1", "accuracy"},
              "qqp": {"f1", "accuracy"}}.get(task, {"accuracy"})
  assert set(dev) == expected | {"eval_loss", "num_examples"}


@pytest.mark.slow
def test_stsb_learns_scores_and_its_export_predicts_the_same(glue_work):
  import transformers
  rng = np.random.RandomState(1)
  keywords = {"0.0": "zero", "2.5": "half", "5.0": "full"}
  data = glue_work / "STS-B"
  data.mkdir()
  write_glue_file(data / "train.tsv", "sts-b", "train",
                  separable_rows(rng, 96, keywords))
  write_glue_file(data / "dev.tsv", "sts-b", "dev",
                  separable_rows(rng, 18, keywords))
  write_glue_file(data / "test.tsv", "sts-b", "test",
                  separable_rows(rng, 7, keywords))
  out = glue_work / "stsb_out"
  run_ok(glue_args(glue_work, "sts-b", data, out, "--do_train", "--do_eval",
                   "--do_predict", "--num_train_epochs=8"))
  summary = read_json(out / "eval_results.json")
  dev = summary["dev_sets"]["dev"]
  # Seed 1: pearson 0.97, spearman 0.94 (three distinct scores: ties).
  assert sorted(dev) == ["eval_loss", "num_examples", "pearson", "spearman"]
  assert dev["pearson"] >= 0.8 and dev["spearman"] >= 0.8, summary
  txt = read_eval_results(out)
  assert "eval_accuracy" not in txt
  assert txt["eval_pearson"] == pytest.approx(dev["pearson"], abs=1e-6)
  scores = np.array([float(l) for l in
                     (out / "test_results.tsv").read_text().splitlines()])
  assert scores.shape == (7,)
  submitted = (out / "submission" / "STS-B.tsv").read_text().splitlines()
  assert submitted[1:] == ["%d\t%.3f" % (i, s) for i, s in enumerate(scores)]
  shapes = dict(tf.train.list_variables(str(out)))
  assert shapes["output_weights"] == [1, 32] and shapes["output_bias"] == [1]

  export = glue_work / "stsb_export"
  run_ok(["export_checkpoint.py", "--checkpoint=%s" % out,
          "--bert_config_file=%s" % (glue_work / "tiny.json"),
          "--vocab_file=%s" % (glue_work / "vocab.txt"),
          "--output_dir=%s" % export, "--format=huggingface,saved_model"])
  model = transformers.BertForSequenceClassification.from_pretrained(
      str(export / "huggingface"))
  assert model.config.num_labels == 1
  assert model.config.problem_type == "regression"
  inputs = classifier_inputs(out)  # the 7 test examples' features
  logits = hf_classifier_logits(model, inputs)
  np.testing.assert_allclose(logits.numpy()[:, 0], scores, atol=1e-4, rtol=0)
  with tf.Graph().as_default(), tf.Session() as sess:
    meta = tf.saved_model.loader.load(sess, ["serve"],
                                      str(export / "saved_model"))
    signature = meta.signature_def["serving_default"]
    assert sorted(signature.outputs) == ["predictions"]
    served = sess.run(signature.outputs["predictions"].name,
                      {signature.inputs[n].name: v
                       for n, v in inputs.items()})
  np.testing.assert_allclose(served, scores, atol=1e-4, rtol=0)


def bad_glue_dir(tmp_path, case):
  data = tmp_path / "data"
  data.mkdir()
  rows = [("a b", "c d", "1.0"), ("e f", "g h", "2.0")]
  write_glue_file(data / "train.tsv", "sts-b", "train", rows)
  write_glue_file(data / "dev.tsv", "rte" if case == "wrong_columns"
                  else "sts-b", "dev", rows)
  return data


# A missing file and a non-numeric score: the same exit, their lines are
# checked in-process above.
@pytest.mark.slow
@pytest.mark.parametrize("case, task, fragments", [
    ("wrong_columns", "sts-b",
     ["/dev.tsv line 1: not the header of a GLUE sts-b file; expected "
      "'index\\tgenre\\tfilename"]),
    ("unknown_task", "glue", ["--task_name: unknown task 'glue'; expected "
                              "one of cola, sst-2 (sst2)"]),
])
def test_bad_glue_input_is_one_error_line_and_exit_2(glue_work, tmp_path,
                                                     case, task, fragments):
  data = bad_glue_dir(tmp_path, case)
  out = tmp_path / "out"
  result = run_program(glue_args(glue_work, task, data, out, "--do_train",
                                 "--do_eval"))
  expect_user_error(result, *fragments)
  assert not out.exists()
