"""Time to accuracy: the results table (bertkit/perf/accuracy_reports.py),
the PyTorch peer's evaluation and schedules (benchmarks/time_to_accuracy_
peer.py), the benchmark's data preparation, and a tiny end-to-end run of
benchmarks/time_to_accuracy.py --smoke. No timing is asserted: the figures
belong to docs/benchmarks.md."""

import csv
import json
import os
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT, expect_user_error, run_ok, run_program
from bertkit.common import errors
from bertkit.data import pretraining_records
from bertkit.perf import accuracy_reports
from bertkit.perf import synthetic_data

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import time_to_accuracy
import time_to_accuracy_peer
import torch


def write_run(run_dir, history, summary, info=None, target=None):
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, "eval_history.jsonl"), "w") as f:
    f.write("".join(json.dumps(e) + "\n" for e in history))
  with open(os.path.join(run_dir, "throughput_summary.json"), "w") as f:
    json.dump(summary, f)
  if info is not None:
    with open(os.path.join(run_dir, "run_info.json"), "w") as f:
      json.dump(info, f)
  if target is not None:
    with open(os.path.join(run_dir, "time_to_target.json"), "w") as f:
      json.dump({"target": target, "reached": False}, f)
  return str(run_dir)


def entry(step, accuracy, train, wall, eval_seconds):
  return {"step": step, "masked_lm_accuracy": accuracy,
          "masked_lm_loss": 7.0 - 10 * accuracy, "train_seconds": train,
          "wall_seconds": wall, "examples": 32 * step,
          "eval_seconds": eval_seconds}


@pytest.fixture
def fabricated_runs(tmp_path):
  """Two runs as the benchmark leaves them and one plain run_pretraining
  directory with its own target."""
  ours = write_run(
      tmp_path / "fast_r0",
      [entry(100, 0.21, 130.0, 136.0, 4.0), entry(200, 0.33, 250.0, 260.0,
                                                  4.0),
       entry(300, 0.41, 370.0, 384.5, 4.5)],
      {"num_replicas": 1, "precision": "float32", "global_batch_size": 32,
       "examples_per_sec": 26.5, "real_tokens_per_sec": 3300.25},
      info={"name": "fast r0", "model": "bert_mini", "recipe": "fast",
            "framework": None, "process_wall_seconds": 395.0,
            "eval_seen_seconds": [141.0, 266.25, 391.0]})
  peer = write_run(
      tmp_path / "peer_r0",
      [entry(100, 0.18, 150.0, 153.0, 3.0), entry(200, 0.29, 290.0, 293.0,
                                                  3.0)],
      {"num_replicas": 1, "precision": "float32", "global_batch_size": 32,
       "examples_per_sec": 22.0, "real_tokens_per_sec": None},
      info={"name": "peer r0", "model": "bert_mini", "recipe": "fast",
            "framework": "PyTorch peer", "process_wall_seconds": 310.0,
            "eval_seen_seconds": [170.5, 311.0]})
  plain = write_run(
      tmp_path / "plain",
      [entry(50, 0.1, 60.0, 61.0, 1.0), entry(100, 0.4, 119.0, 121.0, 1.0)],
      {"num_replicas": 2, "precision": "mixed_bfloat16",
       "global_batch_size": 64, "examples_per_sec": 40.0,
       "real_tokens_per_sec": 5000.0}, target=0.35)
  return ours, peer, plain


def test_run_rows_take_the_first_evaluation_reaching_the_target(
    fabricated_runs):
  ours, peer, plain = fabricated_runs
  row = accuracy_reports.run_row(ours, target=0.3)
  assert row == {
      "run": "fast r0", "model": "bert_mini", "replicas": 1,
      "precision": "float32", "recipe": "fast", "framework": None,
      "global_batch_size": 32, "final_step": 300,
      "masked_lm_accuracy": 0.41, "masked_lm_loss": 7.0 - 10 * 0.41,
      "target": 0.3, "target_step": 200, "target_train_seconds": 250.0,
      # The whole process's wall clock when the line appeared, not the
      # program's own clock (260 s).
      "target_wall_seconds": 266.25,
      "examples_per_sec": 26.5, "real_tokens_per_sec": 3300.25,
      "train_seconds": 370.0, "wall_seconds": 395.0, "eval_seconds": 12.5,
      "eval_overhead": 12.5 / 370.0, "evaluations": 3, "run_dir": ours}
  missed = accuracy_reports.run_row(peer, target=0.3)
  assert (missed["target_step"], missed["target_train_seconds"],
          missed["target_wall_seconds"]) == (None, None, None)
  # Without a target given, a run's own (time_to_target.json) counts, and
  # the wall seconds are the program's own without a benchmark's record.
  own = accuracy_reports.run_row(plain)
  assert (own["run"], own["target"], own["target_step"],
          own["target_wall_seconds"], own["replicas"], own["precision"],
          own["wall_seconds"]) == ("plain", 0.35, 100, 121.0, 2,
                                   "mixed_bfloat16", 121.0)


def test_results_table_is_written_as_markdown_csv_and_json(fabricated_runs,
                                                           tmp_path):
  rows = [accuracy_reports.run_row(d, target=0.3) for d in fabricated_runs]
  md, csv_path, json_path = accuracy_reports.write_table(str(tmp_path),
                                                         rows)
  with open(md) as f:
    lines = f.read().splitlines()
  assert lines[2] == (
      "| run | model | replicas | precision | recipe | held-out MLM accuracy "
      "(end) | time to 0.3: train / wall | examples/sec | real tokens/sec | "
      "train time |")
  assert lines[4:] == [
      "| fast r0 | bert_mini | 1 | float32 | fast | 0.4100 | 250 s / 266 s "
      "(step 200) | 26.50 | 3300 | 0:06:10 |",
      "| peer r0 | bert_mini | 1 | float32 | fast (PyTorch peer) | 0.2900 | "
      "not reached | 22.00 |  | 0:04:50 |",
      "| plain |  | 2 | mixed_bfloat16 |  | 0.4000 | 119 s / 121 s (step "
      "100) | 40.00 | 5000 | 0:01:59 |"]
  with open(csv_path) as f:
    table = list(csv.DictReader(f))
  assert [r["run"] for r in table] == ["fast r0", "peer r0", "plain"]
  assert table[0]["target_wall_seconds"] == "266.25"
  assert table[1]["target_step"] == "" and table[1]["framework"] == (
      "PyTorch peer")
  assert list(table[0]) == accuracy_reports.CSV_FIELDS
  with open(json_path) as f:
    assert json.load(f) == rows


def test_report_of_run_directories(fabricated_runs, tmp_path):
  out = str(tmp_path / "table")
  text = accuracy_reports.write_report(out, list(fabricated_runs), 0.3)
  with open(os.path.join(out, "results_accuracy.md")) as f:
    assert f.read() == text
  assert "| peer r0 |" in text and "not reached" in text
  with pytest.raises(errors.UserError, match="holds no eval_history.jsonl"):
    accuracy_reports.write_report(out, [str(tmp_path)], 0.3)
  with pytest.raises(errors.UserError, match="--report_target=1.5"):
    accuracy_reports.write_report(out, list(fabricated_runs), 1.5)


def test_medians_over_repeats_and_speedups():
  def row(seconds, accuracy, eps):
    return {"target_step": None if seconds is None else 1,
            "target_train_seconds": seconds,
            "target_wall_seconds": None if seconds is None else seconds + 10,
            "masked_lm_accuracy": accuracy, "examples_per_sec": eps,
            "eval_overhead": 0.05}

  fast = accuracy_reports.contestant_summary(
      [row(100.0, 0.4, 20.0), row(140.0, 0.5, 22.0), row(None, 0.3, 21.0)])
  assert fast == {"repeats": 3, "reached": 2, "target_train_seconds": 120.0,
                  "target_wall_seconds": 130.0, "masked_lm_accuracy": 0.4,
                  "examples_per_sec": 21.0, "eval_overhead": 0.05}
  slow = accuracy_reports.contestant_summary([row(300.0, 0.3, 20.0)])
  assert accuracy_reports.speedup(slow, fast) == 2.5
  # Half the repeats or fewer reaching the target: no median time.
  half = accuracy_reports.contestant_summary([row(100.0, 0.4, 20.0),
                                              row(None, 0.3, 20.0)])
  assert half["target_train_seconds"] is None
  assert accuracy_reports.speedup(half, fast) is None


def test_eval_points_are_every_evaluation_of_every_run(fabricated_runs,
                                                      tmp_path):
  ours, peer, _ = fabricated_runs
  runs = [("fast", ours), ("peer", peer)]
  stem = str(tmp_path / "points")
  accuracy_reports.write_eval_points(stem, runs)
  with open(stem + ".csv") as f:
    points = list(csv.DictReader(f))
  assert [(p["label"], p["step"]) for p in points] == [
      ("fast", "100"), ("fast", "200"), ("fast", "300"), ("peer", "100"),
      ("peer", "200")]
  assert points[2]["train_seconds"] == "370.0"
  with open(stem + ".json") as f:
    assert [p["masked_lm_accuracy"] for p in json.load(f)] == [
        0.21, 0.33, 0.41, 0.18, 0.29]


def test_the_peer_evaluates_as_numpy_does_on_records(tmp_path):
  """Masked-LM accuracy over the weight-1 positions, argmax == label, and
  the mean cross-entropy over them: the peer's batched, trimmed, gathered
  evaluation against the full model's logits in NumPy."""
  path = str(tmp_path / "heldout.tfrecord")
  vocab, seq, preds = 40, 16, 12
  synthetic_data.write_synthetic_pretraining_records(path, 7, seq, preds,
                                                     vocab, seed=3)
  heldout = time_to_accuracy.heldout_arrays(
      time_to_accuracy.read_examples(path))
  # Short rows have predictions of weight 0 (padding).
  assert heldout["masked_lm_weights"].min() == 0.0
  config = time_to_accuracy_peer.pytorch_peer.hf_config(
      _tiny_config_file(tmp_path, vocab, seq), hidden_dropout_prob=0.0,
      attention_probs_dropout_prob=0.0)
  torch.manual_seed(0)
  model = time_to_accuracy_peer.transformers.BertForMaskedLM._from_config(
      config)
  with torch.no_grad():
    logits = model(
        input_ids=torch.from_numpy(heldout["input_ids"]),
        attention_mask=torch.from_numpy(heldout["input_mask"]),
        token_type_ids=torch.from_numpy(heldout["segment_ids"])
    ).logits.numpy()
  rows = np.arange(len(logits))[:, None]
  at_masks = logits[rows, heldout["masked_lm_positions"]]  # [N, P, V]
  # Half the labels set to the model's own argmax: an accuracy near 1/2.
  best = at_masks.argmax(-1)
  labels = np.where((rows + np.arange(preds)) % 2 == 0, best,
                    heldout["masked_lm_ids"])
  heldout["masked_lm_ids"] = labels
  weights = heldout["masked_lm_weights"]
  log_probs = at_masks - np.log(np.exp(at_masks).sum(-1, keepdims=True))
  cross_entropy = -np.take_along_axis(log_probs, labels[..., None],
                                      -1)[..., 0]
  expected_accuracy = (weights * (best == labels)).sum() / weights.sum()
  expected_loss = (weights * cross_entropy).sum() / weights.sum()
  assert 0.4 < expected_accuracy < 0.8
  model.train()
  result = time_to_accuracy_peer.evaluate(model, heldout, batch_size=3)
  assert result["masked_lm_accuracy"] == pytest.approx(expected_accuracy,
                                                       abs=1e-12)
  assert result["masked_lm_loss"] == pytest.approx(expected_loss, rel=1e-5)
  assert model.training  # evaluation leaves the training mode as it was


def _tiny_config_file(tmp_path, vocab, seq):
  path = str(tmp_path / "tiny.json")
  with open(path, "w") as f:
    json.dump(dict(time_to_accuracy.SMOKE_CONFIG, vocab_size=vocab,
                   max_position_embeddings=seq), f)
  return path


def test_training_sequences_give_masked_tokens_back(tmp_path):
  """The peer trains on the records' text: masked positions get their
  tokens back, padding is cut, file order is kept."""
  records = str(tmp_path / "train.tfrecord")
  vocab_file = str(tmp_path / "vocab.txt")
  with open(vocab_file, "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                      ["w%d" % i for i in range(20)]) + "\n")
  values = [
      {"input_ids": [2, 4, 7, 3, 9, 4, 3, 0], "input_mask": [1] * 7 + [0],
       "segment_ids": [0, 0, 0, 0, 1, 1, 1, 0],
       "masked_lm_positions": [1, 5, 0], "masked_lm_ids": [11, 12, 0],
       "masked_lm_weights": [1.0, 1.0, 0.0], "next_sentence_labels": [1]},
      {"input_ids": [2, 5, 6, 3, 0, 0, 0, 0], "input_mask": [1] * 4 + [0] * 4,
       "segment_ids": [0] * 8, "masked_lm_positions": [2, 0, 0],
       "masked_lm_ids": [13, 0, 0], "masked_lm_weights": [1.0, 0.0, 0.0],
       "next_sentence_labels": [0]}]
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  with tf.io.TFRecordWriter(records) as writer:
    for v in values:
      writer.write(pretraining_records.tf_example(
          pretraining_records.MASKED, v).SerializeToString())
  npz = time_to_accuracy.training_sequences(
      records, str(tmp_path / "train.npz"), vocab_file)
  sequences = time_to_accuracy_peer.load_train_sequences(npz)
  assert [s["input_ids"].tolist() for s in sequences] == [
      [2, 11, 7, 3, 9, 12, 3], [2, 5, 13, 3]]
  assert [s["token_type_ids"].tolist() for s in sequences] == [
      [0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0]]
  assert [s["special_tokens_mask"].tolist() for s in sequences] == [
      [1, 0, 0, 1, 0, 0, 1], [1, 0, 0, 1]]
  assert [s["next_sentence_label"] for s in sequences] == [1, 0]


def test_default_evaluation_interval_is_the_share_of_training_allowed():
  """Held-out rows / (3 x share x batch), rounded up: 288 rows at batch 32
  is exactly 30 steps, although the float quotient is 29.999999999999996;
  a given --eval_every_n_steps wins."""
  args = time_to_accuracy.parse_args(["--output_dir=/tmp/unused",
                                      "--protocol=target"])
  assert time_to_accuracy.EVAL_SHARE == 0.1
  assert time_to_accuracy.eval_every_n_steps(args, 288, 32) == 30
  assert time_to_accuracy.eval_every_n_steps(args, 289, 32) == 31
  assert time_to_accuracy.eval_every_n_steps(args, 8, 32) == 1
  # The budget protocol judges the last evaluation: half as many on the way.
  args.protocol = "budget"
  assert time_to_accuracy.eval_every_n_steps(args, 288, 32) == 60
  args.eval_every_n_steps = 7
  assert time_to_accuracy.eval_every_n_steps(args, 288, 32) == 7


def test_budget_ladder_goes_down_while_reached_and_up_while_missed():
  ladder = [1, 2, 3, 4]
  step = time_to_accuracy.next_divisor
  assert step(ladder, 2, {}) == 2
  assert step(ladder, 2, {2: True}) == 3
  assert step(ladder, 2, {2: True, 3: True}) == 4
  assert step(ladder, 2, {2: True, 3: True, 4: True}) is None  # below it
  assert step(ladder, 2, {2: True, 3: False}) is None
  assert step(ladder, 2, {2: False}) == 1
  assert step(ladder, 2, {2: False, 1: True}) is None
  assert step(ladder, 2, {2: False, 1: False}) is None
  # The peer starts where fast's smallest budget was.
  assert step(ladder, 4, {4: False}) == 3
  assert step(ladder, 4, {4: False, 3: True}) is None


def test_crossing_budget_interpolates_between_the_rungs_around_it():
  points = [(7.5, 0.30), (5.0, 0.26), (3.75, 0.22)]
  # 0.25 lies a quarter of the way from 0.22 (3.75 min) to 0.26 (5 min).
  assert time_to_accuracy.crossing_budget(points, 0.23) == pytest.approx(
      3.75 + 0.25 * 1.25)
  assert time_to_accuracy.crossing_budget(points, 0.31) is None
  assert time_to_accuracy.crossing_budget(points, 0.20) is None  # all reach


def test_budget_summary_figures_and_ratios():
  def rows(accuracy):
    return [{"masked_lm_accuracy": accuracy, "final_step": 100,
             "examples_per_sec": 27.0, "wall_seconds": 60.0}]
  results = {"fast": {2: rows(0.30), 3: rows(0.27), 4: rows(0.24)},
             "peer": {3: rows(0.25), 2: rows(0.28)}}
  summary = time_to_accuracy.budget_summary(15.0, 0.26, results,
                                            rows(0.26))
  fast, peer = summary["contestants"]["fast"], summary["contestants"]["peer"]
  assert [r["divisor"] for r in fast["rungs"]] == [2, 3, 4]
  assert [r["reached"] for r in fast["rungs"]] == [True, True, False]
  assert fast["speedup_ladder"] == 3.0 and peer["speedup_ladder"] == 2.0
  # fast crosses 0.26 at 3.75 + (0.02 / 0.03) x 1.25 minutes.
  assert fast["crossing_minutes"] == pytest.approx(3.75 + 1.25 * 2 / 3)
  assert peer["crossing_minutes"] == pytest.approx(5.0 + 2.5 / 3)
  speedups = summary["speedups"]
  assert speedups["fast against bert_2018"]["speedup_ladder"] == 3.0
  assert speedups["ours (fast) against the peer"]["speedup_ladder"] == 1.5
  assert speedups["ours (fast) against the peer"][
      "speedup_interpolated"] == pytest.approx(
          peer["crossing_minutes"] / fast["crossing_minutes"])
  assert not fast["below_ladder"]


def test_the_peer_takes_the_fast_recipe_and_refuses_uncorrected_adam(
    tmp_path):
  """The repository's fast recipe reaches the peer with its values; a
  recipe whose AdamW leaves the moments uncorrected cannot be compared with
  torch.optim.AdamW, which always corrects them."""
  args = time_to_accuracy.parse_args(["--output_dir=%s" % tmp_path])
  values = time_to_accuracy.peer_recipe_values(args)
  assert (values["learning_rate"], values["lr_schedule"],
          values["masked_lm_prob"], values["hidden_dropout_prob"]) == (
              "5e-4", "warmup_stable_decay", "0.3", "0")
  fast = tmp_path / "recipes" / "fast"
  fast.mkdir(parents=True)
  (fast / "create_pretraining_data.flags").write_text("--masking=dynamic\n")
  (fast / "run_pretraining.flags").write_text("--learning_rate=5e-4\n")
  args.recipes_dir = str(tmp_path / "recipes")
  with pytest.raises(errors.UserError,
                     match="without --adam_bias_correction"):
    time_to_accuracy.peer_recipe_values(args)


def test_recipe_flagfiles_are_read_as_absl_reads_them(tmp_path):
  path = str(tmp_path / "r.flags")
  with open(path, "w") as f:
    f.write("# a comment\n--learning_rate=1e-3\n\n--nodo_lower_case\n"
            "--do_train\n  --lr_schedule=cosine  \n// another\n")
  assert time_to_accuracy.read_flagfile(path) == {
      "learning_rate": "1e-3", "do_lower_case": "false", "do_train": "true",
      "lr_schedule": "cosine"}


def test_prepared_data_is_reused_only_with_the_same_flags(tmp_path):
  data = time_to_accuracy.Data(str(tmp_path / "data"))
  args = time_to_accuracy.parse_args(["--output_dir=%s" % tmp_path])
  data.check_made_by(args)
  data.make()
  (tmp_path / "data" / "vocab.txt").write_text("half-made")
  data.check_made_by(args)  # never finished: emptied
  assert not os.path.exists(str(tmp_path / "data"))
  data.make()
  data.mark_made_by(args)
  data.check_made_by(args)
  args.max_seq_length = 64
  with pytest.raises(errors.UserError, match="other --max_seq_length;"):
    data.check_made_by(args)
  # Made before --fortunes existed: its data.json lacks the flag, which
  # was as good as unset.
  args.max_seq_length = 128
  made = tmp_path / "data" / "data.json"
  recorded = json.loads(made.read_text())
  del recorded["fortunes"]
  made.write_text(json.dumps(recorded))
  data.check_made_by(args)
  args.fortunes = "/usr/share/games/fortunes"
  with pytest.raises(errors.UserError, match="other --fortunes;"):
    data.check_made_by(args)


def test_fortunes_are_documents_of_consecutive_fortunes_of_one_file(
    tmp_path, monkeypatch):
  """Ten fortunes of a file to a document, each fortune's wrapped lines one
  text, the index files beside them left out; the held-out split takes every
  --heldout_every-th document."""
  monkeypatch.setattr(time_to_accuracy, "FORTUNES_MIN_DOCUMENTS", 1)
  fortunes = ["Fortune %d of a,\n  wrapped. Second sentence %d." % (i, i)
              for i in range(12)]
  (tmp_path / "aphorisms").write_text("\n%\n".join(fortunes) + "\n%\n")
  (tmp_path / "aphorisms.dat").write_bytes(b"\0\x02index")
  (tmp_path / "zen").write_text("Only one.\n%\n")
  (tmp_path / "zen.u8").symlink_to(tmp_path / "zen")
  documents = time_to_accuracy.fortunes_documents(str(tmp_path))
  sentences = lambda i: ["Fortune %d of a, wrapped." % i,
                         "Second sentence %d." % i]
  assert documents == [
      [s for i in range(10) for s in sentences(i)],
      sentences(10) + sentences(11),
      ["Only one."]]
  args = time_to_accuracy.parse_args([
      "--output_dir=%s" % tmp_path, "--fortunes=%s" % tmp_path,
      "--heldout_every=3"])
  train, heldout = time_to_accuracy.split_corpus(args)
  assert (train, heldout) == (documents[:2], documents[2:])
  monkeypatch.setattr(time_to_accuracy, "FORTUNES_MIN_DOCUMENTS", 100)
  with pytest.raises(errors.UserError, match="holds 3 documents of fortunes"):
    time_to_accuracy.fortunes_documents(str(tmp_path))
  with pytest.raises(errors.UserError, match="give one corpus"):
    time_to_accuracy.parse_args(["--output_dir=x", "--fortunes=%s" % tmp_path,
                                 "--corpus=%s" % (tmp_path / "zen")])


def test_a_data_folder_no_preparation_made_is_never_deleted(tmp_path):
  """--output_dir naming a folder of the user's whose data/ holds files of
  their own: refused, nothing deleted (an unfinished preparation's folder,
  marked when it was made, is emptied: the test above)."""
  (tmp_path / "data").mkdir()
  (tmp_path / "data" / "mine.txt").write_text("mine")
  data = time_to_accuracy.Data(str(tmp_path / "data"))
  with pytest.raises(errors.UserError) as raised:
    data.check_made_by(time_to_accuracy.parse_args([
        "--output_dir=%s" % tmp_path]))
  assert str(raised.value) == (
      "%s holds files no preparation of the benchmarks made; pass another "
      "--output_dir (nothing was deleted)" % (tmp_path / "data"))
  assert os.listdir(str(tmp_path / "data")) == ["mine.txt"]


def test_a_corpus_that_is_not_there_is_one_line_and_makes_nothing(tmp_path):
  """As launched: before the output's data folder is made."""
  out, missing = tmp_path / "out", tmp_path / "no_fortunes"
  expect_user_error(
      run_program(["benchmarks/time_to_accuracy.py",
                   "--output_dir=%s" % out, "--fortunes=%s" % missing]),
      "error: argument --fortunes: no such directory: %s" % missing)
  assert not out.exists()


@pytest.mark.slow
def test_smoke_run_of_the_whole_benchmark_to_a_target(tmp_path):
  out = str(tmp_path / "tta")
  run_ok(["benchmarks/time_to_accuracy.py", "--output_dir=%s" % out,
          "--smoke", "--protocol=target"], timeout=900)
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  with open(os.path.join(out, "results.csv")) as f:
    table = {r["run"]: r for r in csv.DictReader(f)}
  assert sorted(table) == ["bert_2018 r0", "fast r0", "peer r0"]
  histories = {}
  for name in ("bert_2018", "fast", "peer"):
    run_dir = os.path.join(out, "runs", "%s_r0" % name)
    history = [json.loads(l) for l in open(os.path.join(
        run_dir, "eval_history.jsonl"))]
    histories[name] = history
    # Every 10 of 30 steps; every contestant answers the same 2 batches.
    assert [e["step"] for e in history] == [10, 20, 30]
    assert {e["eval_batches"] for e in history} == {2}
    row = table["%s r0" % name]
    assert float(row["masked_lm_accuracy"]) == history[-1][
        "masked_lm_accuracy"]
    assert float(row["examples_per_sec"]) > 0
  best = min(max(e["masked_lm_accuracy"] for e in histories["bert_2018"]),
             1.0)
  target = summary["target"]
  assert target == (np.floor(best * 100) / 100 or None)
  if target is not None:
    first = [e for e in histories["fast"]
             if e["masked_lm_accuracy"] >= target]
    assert table["fast r0"]["target_step"] == (
        str(first[0]["step"]) if first else "")
  # bert_2018 trains with next-sentence labels and reads the same held-out
  # records as the others, which have none.
  with open(os.path.join(out, "runs", "bert_2018_r0", "run_info.json")) as f:
    command = json.load(f)["command"]
  assert "--eval_input_file=%s" % os.path.join(
      out, "data", "heldout.tfrecord") in command
  assert "next_sentence_accuracy" not in histories["bert_2018"][-1]
  assert not os.path.exists(os.path.join(out, "data", "heldout_nsp.tfrecord"))
  # benchmark.py --report: the same table of the same runs.
  report_dir = str(tmp_path / "report")
  run_ok(["benchmark.py", "--output_dir=%s" % report_dir, "--report=%s" %
          ",".join(os.path.join(out, "runs", "%s_r0" % name)
                   for name in ("bert_2018", "fast", "peer"))] +
         (["--report_target=%r" % target] if target else []))
  with open(os.path.join(report_dir, "results_accuracy.md")) as f:
    reported = f.read()
  with open(os.path.join(out, "results.md")) as f:
    assert reported == f.read()
  for name in ("summary.md", "eval_points.csv"):
    assert os.path.getsize(os.path.join(out, name)) > 0
  with open(os.path.join(out, "curves.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_smoke_run_of_the_budget_protocol(tmp_path):
  """bert_2018 for B (30 steps in --smoke), its final accuracy the target;
  fast and the peer down their ladders of B/k with their schedules
  completed; each figure from the runs' own final evaluations."""
  out = str(tmp_path / "budget")
  run_ok(["benchmarks/time_to_accuracy.py", "--output_dir=%s" % out,
          "--smoke"], timeout=900)
  with open(os.path.join(out, "summary.json")) as f:
    summary = json.load(f)
  def final(name):
    with open(os.path.join(out, "runs", name, "eval_history.jsonl")) as f:
      return [json.loads(l) for l in f][-1]
  judge = final("bert_2018_B1_r0")
  assert judge["step"] == 30
  assert summary["target"] == judge["masked_lm_accuracy"]
  ladder = [1, 2, 3]
  for name, contestant in summary["contestants"].items():
    reached = {}
    for rung in contestant["rungs"]:
      last = final("%s_B%d_r0" % (name, rung["divisor"]))
      # The schedule completed: B/k of the 30 steps.
      assert last["step"] == round(30 / rung["divisor"])
      assert rung["masked_lm_accuracy"] == last["masked_lm_accuracy"]
      assert rung["reached"] == (last["masked_lm_accuracy"] >=
                                 summary["target"])
      reached[rung["divisor"]] = rung["reached"]
    # The ladder ran as next_divisor says, from fast's start (B/2) or, for
    # the peer, from fast's smallest budget reaching the target.
    hits = [k for k, hit in reached.items() if hit]
    assert contestant["speedup_ladder"] == (float(max(hits)) if hits
                                             else None)
    start = 2
    if name == "peer":
      fast_hits = summary["contestants"]["fast"]["smallest_divisor_reaching"]
      start = fast_hits or 2
    tried, so_far = [], {}
    k = time_to_accuracy.next_divisor(ladder, start, so_far)
    while k is not None:
      tried.append(k)
      so_far[k] = reached[k]
      k = time_to_accuracy.next_divisor(ladder, start, so_far)
    assert sorted(tried) == sorted(reached)
  with open(os.path.join(out, "summary.md")) as f:
    assert "Time to quality by budget" in f.read()
  # Each run's points are labelled by its contestant and rung.
  with open(os.path.join(out, "eval_points.json")) as f:
    labels = {p["label"] for p in json.load(f)}
  # A contestant missing at B/2 steps back to the whole budget, "B".
  assert labels == {"bert_2018 B"} | {
      "%s %s" % (name, time_to_accuracy.rung_label(rung["divisor"]))
      for name, contestant in summary["contestants"].items()
      for rung in contestant["rungs"]}
  for name in ("curves.png", "budget_curves.png"):
    with open(os.path.join(out, name), "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_rerun_reuses_only_runs_of_the_same_command(tmp_path):
  run_dir = str(tmp_path / "fast_B2_r0")
  argv = ["python", "run_pretraining.py", "--train_time_budget_hours=0.125"]
  assert not time_to_accuracy.finished_run(run_dir, argv)
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, "run_info.json"), "w") as f:
    json.dump({"command": " ".join(argv[1:])}, f)
  assert time_to_accuracy.finished_run(run_dir, argv)
  assert not time_to_accuracy.finished_run(
      run_dir, argv[:2] + ["--train_time_budget_hours=0.0625"])
