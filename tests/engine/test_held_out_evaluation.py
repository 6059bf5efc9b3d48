"""Held-out evaluation during training: eval_history.jsonl, the training
clock, the target that stops the run, on records made from real text."""

import json
import os
import shutil
import time

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (REPO_ROOT, TINY_CONFIG, expect_user_error,
                      program_in_process, read_json, run_program)
from bertkit.common.errors import UserError
from bertkit.engine.loop import evaluation
from bertkit.engine.loop import training_clock
from helpers.processes import multi_worker_cluster, wait_all

DATA = os.path.join(REPO_ROOT, "tests", "fixtures", "create_pretraining_data")
VOCAB = os.path.join(DATA, "vocab.txt")
SEQ, PREDS = 32, 5


@pytest.fixture(scope="module")
def text_records(tmp_path_factory):
  """Training records (unmasked) of corpus.txt and held-out static records
  of another document, both made by create_pretraining_data.py."""
  d = tmp_path_factory.mktemp("held_out")
  config = dict(TINY_CONFIG, vocab_size=sum(1 for _ in open(VOCAB)))
  with open(d / "tiny.json", "w") as f:
    json.dump(config, f)
  common = ["--vocab_file=%s" % VOCAB, "--max_seq_length=%d" % SEQ,
            "--max_predictions_per_seq=%d" % PREDS]
  program_in_process(["create_pretraining_data.py",
                      "--input_file=%s/corpus.txt" % DATA,
                      "--output_file=%s" % (d / "train.tfrecord"),
                      "--masking=dynamic", "--dupe_factor=1"] + common)
  program_in_process(["create_pretraining_data.py",
                      "--input_file=%s/one_document.txt" % DATA,
                      "--output_file=%s" % (d / "held_out.tfrecord"),
                      "--masking=static", "--dupe_factor=10"] + common)
  return d


def train_args(d, out, *extra, steps=6):
  return ["run_pretraining.py", "--bert_config_file=%s" % (d / "tiny.json"),
          "--input_file=%s" % (d / "train.tfrecord"),
          "--eval_input_file=%s" % (d / "held_out.tfrecord"),
          "--vocab_file=%s" % VOCAB, "--output_dir=%s" % out, "--do_train",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--train_batch_size=8", "--num_train_steps=%d" % steps,
          "--warmup_proportion=0.2", "--learning_rate=1e-3",
          "--eval_batch_size=4", "--max_eval_steps=3",
          "--log_every_n_steps=2", "--tf_random_seed=1"] + list(extra)


def history(out):
  return evaluation.read_history(str(out))


def eval_results(out):
  lines = (out / "eval_results.txt").read_text().splitlines()
  return {k: float(v) for k, v in (line.split(" = ") for line in lines)}


METRICS = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
           "next_sentence_loss", "loss")


@pytest.mark.slow
def test_history_lines_resume_and_final_results(text_records, tmp_path):
  out = tmp_path / "run"
  program_in_process(train_args(text_records, out, "--eval_every_n_steps=2"))
  first = history(out)
  assert [e["step"] for e in first] == [2, 4, 6]
  for entry in first:
    assert entry["examples"] == 8 * entry["step"]
    assert entry["eval_batches"] == 3
    assert set(METRICS) <= set(entry)
    assert 0.0 <= entry["masked_lm_accuracy"] <= 1.0
    assert entry["train_seconds"] < entry["wall_seconds"]
  # The summary's figures are the last evaluation's.
  results = eval_results(out)
  assert results["global_step"] == 6
  for name in METRICS:
    assert results[name] == pytest.approx(first[-1][name], rel=1e-6)
  # TensorBoard: the same values under output_dir/eval.
  events = [e for f in tf.io.gfile.glob(str(out / "eval" / "events.*"))
            for e in tf.train.summary_iterator(f)]
  tagged = {(e.step, v.tag): v.simple_value for e in events
            for v in e.summary.value}
  assert tagged[(4, "masked_lm_accuracy")] == pytest.approx(
      first[1]["masked_lm_accuracy"])
  # Resume to step 10: the history continues, the clock too.
  program_in_process(train_args(text_records, out, "--eval_every_n_steps=2",
                                steps=10))
  resumed = history(out)
  assert resumed[:3] == first
  assert [e["step"] for e in resumed] == [2, 4, 6, 8, 10]
  clocks = [e["train_seconds"] for e in resumed]
  assert clocks == sorted(clocks) and clocks[3] > clocks[2]
  # The clock of the checkpoint the second run started from was carried on.
  recorded = training_clock.read_checkpoint_clock(str(out), 6)
  assert recorded is not None and clocks[3] > recorded[0]


@pytest.mark.slow
def test_mirrored_evaluation_equals_evaluating_its_checkpoint(text_records,
                                                              tmp_path):
  """2 replicas evaluate in-session; a --do_eval run of the same checkpoint
  on one device gives the same figures: the weights copied are the ones
  trained."""
  out = tmp_path / "mirrored"
  program_in_process(train_args(text_records, out, "--eval_every_n_steps=3",
                                "--distribution_strategy=mirrored",
                                "--cpu_replicas=2"))
  last = history(out)[-1]
  assert last["step"] == 6
  copy = tmp_path / "evaluated"
  shutil.copytree(out, copy)
  (copy / "eval_results.txt").unlink()
  args = [a for a in train_args(text_records, copy) if a != "--do_train"]
  program_in_process(args + ["--do_eval"])
  results = eval_results(copy)
  assert results["global_step"] == 6
  for name in METRICS:
    assert results[name] == pytest.approx(last[name], rel=1e-5), name


@pytest.mark.slow
def test_target_stops_every_worker_at_the_first_evaluation_reaching_it(
    text_records, tmp_path):
  """Two multi_worker processes stop at the same step, the one of the first
  evaluation at the target, with that step's checkpoint; a rerun has
  nothing left to train."""
  out = tmp_path / "target"
  out.mkdir()
  target = "--target_masked_lm_accuracy=0.02"
  args = train_args(text_records, out, "--eval_every_n_steps=2", target,
                    "--distribution_strategy=multi_worker",
                    "--collective_timeout_seconds=60", steps=40)
  procs, logs = multi_worker_cluster(text_records, out, args, "first")
  assert wait_all(procs) == [0, 0], logs[0].read_text()[-3000:]
  entries = history(out)
  stop = entries[-1]["step"]
  assert stop < 40 and entries[-1]["masked_lm_accuracy"] >= 0.02
  assert all(e["masked_lm_accuracy"] < 0.02 for e in entries[:-1])
  for log in logs:
    assert ("masked_lm_accuracy 0.02 reached at step %d after" % stop
            in log.read_text())
  assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-%d" % stop)
  reached = read_json(out / evaluation.TARGET_FILE)
  assert reached["reached"] and reached["step"] == stop
  summary = read_json(out / "throughput_summary.json")
  assert summary["time_to_target"] == reached
  for task in ("worker-0", "worker-1"):
    assert read_json(out / ("final_weights.%s.json" % task))[
        "global_step"] == stop
  rerun = program_in_process(train_args(
      text_records, out, "--eval_every_n_steps=2", target, steps=40))
  assert "nothing left to train" in rerun.stderr
  assert tf.train.latest_checkpoint(str(out)).endswith("model.ckpt-%d" % stop)


def test_target_result_and_history_trimming(tmp_path):
  entries = [{"step": s, "train_seconds": s * 1.5, "wall_seconds": s * 2.0,
              "examples": s * 8, "masked_lm_accuracy": a}
             for s, a in ((2, 0.1), (4, 0.3), (6, 0.5), (8, 0.4))]
  with open(tmp_path / evaluation.HISTORY_FILE, "w") as f:
    for entry in entries:
      f.write(json.dumps(entry) + "\n")
  reached = evaluation.target_result(entries, 0.3, 8)
  assert reached == {"target": 0.3, "metric": "masked_lm_accuracy",
                     "reached": True, "step": 4, "train_seconds": 6.0,
                     "wall_seconds": 8.0, "examples": 32, "value": 0.3}
  assert evaluation.describe_target(reached) == (
      "masked_lm_accuracy 0.3 reached at step 4 after 6.0 s of training "
      "(8.0 s wall)")
  missed = evaluation.target_result(entries, 0.9, 8)
  assert missed == {"target": 0.9, "metric": "masked_lm_accuracy",
                    "reached": False, "step": 8, "best": 0.5}
  evaluation.keep_history_up_to(str(tmp_path), 5)
  assert [e["step"] for e in evaluation.read_history(str(tmp_path))] == [2, 4]


def test_evaluation_time_is_left_out_of_the_training_clock(tmp_path):
  """An artificially slow evaluation (0.25 s a batch) moves wall_seconds but
  not train_seconds; the figures equal Estimator's evaluation of the same
  checkpoint."""

  def input_fn(params=None, input_context=None):
    del params, input_context
    x = np.arange(16, dtype=np.float32).reshape(16, 1) / 16.0
    return tf.data.Dataset.from_tensor_slices(
        {"x": x, "y": 3.0 * x}).batch(4)

  def eval_outputs(features, slow=True):
    w = tf.get_variable("w", [1, 1], initializer=tf.zeros_initializer())
    error = tf.squeeze(tf.matmul(features["x"], w) - features["y"])
    if slow:
      error = tf.numpy_function(lambda e: time.sleep(0.25) or e, [error],
                                tf.float32)
    loss = tf.reduce_mean(tf.square(error))
    return loss, {"masked_lm_accuracy": tf.metrics.mean(
        tf.cast(tf.abs(error) < 0.5, tf.float32))}

  def model_fn(features, labels, mode):
    del labels
    loss, metrics = eval_outputs(features, slow=False)
    if mode == tf.estimator.ModeKeys.EVAL:
      return tf.estimator.EstimatorSpec(mode, loss=loss,
                                        eval_metric_ops=metrics)
    step = tf.train.get_or_create_global_step()
    train_op = tf.train.GradientDescentOptimizer(0.5).minimize(
        loss, global_step=step)
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

  clock = training_clock.TrainingClock(start=time.time())
  hook = evaluation.HeldOutEvaluationHook(
      lambda params: input_fn(params).repeat(), eval_outputs, 5, 2,
      str(tmp_path), clock, 4, is_chief=True)
  with tf.Graph().as_default():
    estimator = tf.estimator.Estimator(model_fn, str(tmp_path))
    estimator.train(lambda: input_fn().repeat(), max_steps=20, hooks=[hook])
  entries = evaluation.read_history(str(tmp_path))
  assert [e["step"] for e in entries] == [5, 10, 15, 20]
  for before, after in zip(entries, entries[1:]):
    wall = after["wall_seconds"] - before["wall_seconds"]
    train = after["train_seconds"] - before["train_seconds"]
    assert after["eval_seconds"] >= 0.5
    # 5 tiny steps take far less than the 0.5 s evaluation left out.
    assert train < wall - 0.45
  assert clock.excluded_seconds == pytest.approx(
      sum(e["eval_seconds"] for e in entries), abs=0.01)
  with tf.Graph().as_default():
    reference = estimator.evaluate(input_fn, steps=2)
  assert hook.last_result["masked_lm_accuracy"] == pytest.approx(
      reference["masked_lm_accuracy"])
  assert hook.last_result["loss"] == pytest.approx(reference["loss"],
                                                   rel=1e-5)


@pytest.mark.parametrize("flags, fragment", [
    (["--target_masked_lm_accuracy=1.5"], "--target_masked_lm_accuracy=1.5"),
    (["--eval_every_n_steps=0"], "--eval_every_n_steps must be >= 1"),
    (["--train_time_budget_hours=0"], "--train_time_budget_hours must be > 0"),
])
def test_bad_evaluation_and_schedule_flags(text_records, tmp_path, flags,
                                           fragment):
  out = tmp_path / "bad"
  with pytest.raises(UserError) as e:
    program_in_process(train_args(text_records, out, *flags))
  assert fragment in str(e.value), str(e.value)
  assert not out.exists()


def test_bad_schedule_flag_exits_with_one_error_line(text_records, tmp_path):
  """Launched: the flag's own parsing names it as typed (in this process,
  options name it with quotes), and the exit is code 2 with one line."""
  out = tmp_path / "bad"
  expect_user_error(run_program(train_args(text_records, out,
                                           "--lr_schedule=triangle")),
                    "--lr_schedule=triangle")
  assert not out.exists()


@pytest.mark.parametrize("what", ["nothing", "other_length"])
def test_bad_held_out_records(text_records, tmp_path, what):
  out = tmp_path / "bad"
  args = train_args(text_records, out)
  if what == "nothing":
    args.append("--eval_input_file=%s" % (tmp_path / "missing*.tfrecord"))
    fragment = "--eval_input_file pattern"
  else:
    other = tmp_path / "seq64.tfrecord"
    program_in_process(["create_pretraining_data.py",
                        "--input_file=%s/one_document.txt" % DATA,
                        "--output_file=%s" % other, "--vocab_file=%s" % VOCAB,
                        "--max_seq_length=64", "--masking=dynamic"])
    args.append("--eval_input_file=%s" % other)
    fragment = "input_ids has length 64 but --max_seq_length=32"
  with pytest.raises(UserError) as e:
    program_in_process(args)
  assert fragment in str(e.value), str(e.value)
  assert not out.exists()


def _without_next_sentence(source, target):
  """A copy of masked records with next_sentence_labels dropped: records
  of the other kind asking the same masked-LM questions, byte for byte."""
  with tf.io.TFRecordWriter(str(target)) as writer:
    for raw in tf.io.tf_record_iterator(str(source)):
      example = tf.train.Example.FromString(raw)
      del example.features.feature["next_sentence_labels"]
      writer.write(example.SerializeToString())


@pytest.mark.slow
@pytest.mark.parametrize("trained_with_next_sentence", [True, False])
def test_held_out_records_of_either_kind_evaluate_either_model(
    text_records, tmp_path, trained_with_next_sentence):
  """The same masked-LM questions with and without next-sentence labels
  give the same masked-LM figures for one checkpoint; next-sentence
  figures exist only where the model and the records both have them."""
  d = text_records
  with_labels = d / "held_out.tfrecord"
  without = tmp_path / "held_out_single.tfrecord"
  _without_next_sentence(with_labels, without)
  train = d / "train.tfrecord"
  if not trained_with_next_sentence:
    train = tmp_path / "train_single.tfrecord"
    program_in_process(["create_pretraining_data.py",
                        "--input_file=%s/corpus.txt" % DATA,
                        "--output_file=%s" % train, "--vocab_file=%s" % VOCAB,
                        "--max_seq_length=%d" % SEQ, "--masking=dynamic",
                        "--next_sentence_prediction=false",
                        "--dupe_factor=1"])
  out = tmp_path / "run"
  # Trained while evaluating the other kind of records.
  other = without if trained_with_next_sentence else with_labels
  args = [a for a in train_args(d, out, steps=4)
          if not a.startswith(("--input_file", "--eval_input_file"))]
  program_in_process(args + ["--input_file=%s" % train,
                             "--eval_input_file=%s" % other])
  during = history(out)[-1]
  assert during["step"] == 4
  evaluate = [a for a in args if a != "--do_train"] + [
      "--do_eval", "--input_file=%s" % train]
  figures = {}
  for name, records in (("with", with_labels), ("without", without)):
    program_in_process(evaluate + ["--eval_input_file=%s" % records])
    figures[name] = eval_results(out)
    assert figures[name]["global_step"] == 4
  for metric in ("masked_lm_accuracy", "masked_lm_loss"):
    assert figures["with"][metric] == figures["without"][metric], metric
    assert during[metric] == pytest.approx(figures["without"][metric],
                                           rel=1e-5), metric
  assert "next_sentence_accuracy" not in figures["without"]
  assert ("next_sentence_accuracy" in figures["with"]) == (
      trained_with_next_sentence)
  assert "next_sentence_accuracy" not in during
