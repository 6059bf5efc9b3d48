"""The GLUE suite: its scores and table (bertkit/tasks/glue/suite.py), the
runner run_glue.py over fake finished runs and, slow, over a tiny checkpoint,
and the GLUE score in the time-to-accuracy table."""

import csv
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys

import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import errors
from bertkit.perf import accuracy_reports
from bertkit.tasks.glue import suite as glue_suite
from bertkit.tasks.glue import suite_results as glue_results
from bertkit.tasks.classification import registry as task_registry
import modeling
from conftest import (REPO_ROOT, expect_user_error, run_ok, run_program,
                      tiny_bert_config)

FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures", "classifier")


def eval_results(task, **dev_sets):
  """eval_results.json's content (the contract's layout)."""
  return {"task": task, "global_step": 10,
          "dev_sets": {name: dict(metrics, eval_loss=0.5, num_examples=8)
                       for name, metrics in dev_sets.items()}}


# One seed's dev-set metrics of every task, as run_classifier reports them.
SEED_1 = {
    "cola": eval_results("cola", dev={"matthews_corrcoef": 0.5,
                                      "accuracy": 0.8}),
    "sst-2": eval_results("sst-2", dev={"accuracy": 0.9}),
    "mrpc": eval_results("mrpc", dev={"f1": 0.88, "accuracy": 0.82}),
    "sts-b": eval_results("sts-b", dev={"pearson": 0.86, "spearman": 0.84}),
    "qqp": eval_results("qqp", dev={"f1": 0.7, "accuracy": 0.9}),
    "mnli": eval_results("mnli", dev_matched={"accuracy": 0.84},
                         dev_mismatched={"accuracy": 0.8}),
    "qnli": eval_results("qnli", dev={"accuracy": 0.9}),
    "rte": eval_results("rte", dev={"accuracy": 0.66}),
    "wnli": eval_results("wnli", dev={"accuracy": 0.56}),
}
# Their task scores: pairs averaged, MNLI's two dev sets averaged.
SCORES_1 = {"cola": 0.5, "sst-2": 0.9, "mrpc": 0.85, "sts-b": 0.85,
            "qqp": 0.8, "mnli": 0.82, "qnli": 0.9, "rte": 0.66, "wnli": 0.56}
GLUE_1 = 6.84 / 9


def metrics_of(task, content):
  """read_eval_results's view of an eval_results.json content."""
  return {glue_results.metric_key(d, m): content["dev_sets"][d][m]
          for d, m in task_registry.get(task).scored_metrics}


# ------------------------------------------------------------ pure helpers


def test_tasks_are_parsed_in_leaderboard_order_with_aliases():
  assert glue_suite.parse_tasks(["RTE", "sst2", "cola", "stsb", "rte"]) == [
      "cola", "sst-2", "sts-b", "rte"]
  assert glue_suite.suite_tasks(["mnli"], do_predict=True) == ["mnli", "ax"]
  assert glue_suite.suite_tasks(["mnli"], do_predict=False) == ["mnli"]
  assert glue_suite.suite_tasks(["rte"], do_predict=True) == ["rte"]
  with pytest.raises(errors.UserError) as raised:
    glue_suite.parse_tasks(["cola", "squad"])
  assert str(raised.value) == (
      "--tasks: unknown task 'squad'; expected one of cola, sst-2 (sst2), "
      "mrpc, sts-b (stsb), qqp, mnli, qnli, rte, wnli")
  with pytest.raises(errors.UserError, match="ax is not run on its own"):
    glue_suite.parse_tasks(["ax"])


def test_task_scores_average_pairs_and_mnli_and_the_glue_score_all_nine():
  for task, content in SEED_1.items():
    assert glue_results.task_score(task, metrics_of(task, content)) == (
        pytest.approx(SCORES_1[task], abs=1e-12)), task
  summaries = [glue_results.summarize_task(t, {1: metrics_of(t, c)})
               for t, c in SEED_1.items()]
  score, missing = glue_results.glue_score(summaries)
  assert score == pytest.approx(GLUE_1, abs=1e-12) and missing == []
  # AX and a missing task: no GLUE score, the missing task named.
  score, missing = glue_results.glue_score(
      [s for s in summaries if s["task"] != "rte"])
  assert score is None and missing == ["rte"]


def test_medians_over_seeds_and_the_median_run():
  per_seed = {1: {"f1": 0.92, "accuracy": 0.60},
              2: {"f1": 0.70, "accuracy": 0.80},
              3: {"f1": 0.80, "accuracy": 0.90}}
  summary = glue_results.summarize_task("mrpc", per_seed)
  assert summary["metrics"]["f1"] == {
      "per_seed": {1: 0.92, 2: 0.70, 3: 0.80}, "median": 0.80}
  assert summary["metrics"]["accuracy"]["median"] == 0.80
  # Seed scores 0.76, 0.75, 0.85: the task score is their median, a run's
  # score (not the mean of the median metrics, 0.80), and that run is the
  # median run.
  assert summary["score"]["per_seed"] == pytest.approx(
      {1: 0.76, 2: 0.75, 3: 0.85}, abs=1e-12)
  assert summary["score"]["median"] == pytest.approx(0.76, abs=1e-12)
  assert summary["median_seed"] == 1
  # Of tied runs, the lower seed.
  assert glue_results.median_seed({1: 0.5, 2: 0.5, 3: 0.1}) == 1
  # Two seeds: medians are means; the submission's run the lower one.
  two = glue_results.summarize_task("rte", {1: {"accuracy": 0.6},
                                          2: {"accuracy": 0.7}})
  assert two["score"]["median"] == pytest.approx(0.65)
  assert two["median_seed"] == 1
  assert glue_results.median_seed({1: 0.3, 2: 0.1, 3: 0.2, 4: 0.4}) == 3


def test_results_files_hold_every_seed_the_medians_and_the_score(tmp_path):
  summaries = [
      glue_results.summarize_task("mrpc", {1: {"f1": 0.9, "accuracy": 0.8},
                                         2: {"f1": 0.8, "accuracy": 0.6}}),
      glue_results.summarize_task("mnli", {
          1: {"dev_matched/accuracy": 0.84, "dev_mismatched/accuracy": 0.8},
          2: {"dev_matched/accuracy": 0.82, "dev_mismatched/accuracy": 0.83}
      })]
  result = glue_results.results(summaries, 2, failed=["rte seed 1/2"])
  assert result["glue_score"] is None
  assert result["missing_tasks"] == ["cola", "sst-2", "sts-b", "qqp", "qnli",
                                     "rte", "wnli"]
  # Task scores: mrpc (0.85 + 0.7) / 2; mnli (0.82 + 0.825) / 2.
  assert result["average_score"] == pytest.approx((0.775 + 0.8225) / 2)
  md, csv_path, json_path = glue_results.write_results(str(tmp_path), result)
  with open(md) as f:
    lines = f.read().splitlines()
  assert lines[4:7] == [
      "| GLUE | CoLA | SST-2 | MRPC | STS-B | QQP | MNLI-m | MNLI-mm | QNLI "
      "| RTE | WNLI |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
      "| - | - | - | 85.0/70.0 | - | - | 83.0 | 81.5 | - | - | - |"]
  assert "| MRPC | f1 | 1: 90.0, 2: 80.0 | 85.0 |" in lines
  assert "| MRPC | task score | 1: 85.0, 2: 70.0 | 77.5 |" in lines
  assert ("| MNLI | dev_mismatched/accuracy | 1: 80.0, 2: 83.0 | 81.5 |"
          in lines)
  assert "no results for cola, sst-2, sts-b, qqp, qnli, rte, wnli" in (
      "\n".join(lines))
  assert lines[-1] == "Failed runs (left out): rte seed 1/2."
  with open(csv_path) as f:
    rows = list(csv.reader(f))
  assert rows[0] == ["task", "metric", "seed", "value"]
  assert rows[1:4] == [["mrpc", "f1", "1", "0.9"], ["mrpc", "f1", "2", "0.8"],
                       ["mrpc", "f1", "median", repr((0.9 + 0.8) / 2)]]
  mnli_score = [r for r in rows if r[:3] == ["mnli", "score", "median"]]
  assert float(mnli_score[0][3]) == pytest.approx(0.8225, abs=1e-12)
  assert rows[-1] == ["GLUE", "score", "median", ""]
  assert len(rows) == 1 + (2 + 1) * 3 + (2 + 1) * 3 + 1
  with open(json_path) as f:
    written = json.load(f)
  assert written["tasks"][0]["metrics"]["accuracy"] == {
      "per_seed": {"1": 0.8, "2": 0.6}, "median": 0.7}
  assert written["tasks"][1]["median_seed"] == 1
  assert written["failed_runs"] == ["rte seed 1/2"]


def test_runs_are_planned_from_what_the_output_dir_holds():
  out = "/o"
  exists = {"/o/mrpc/seed_1/eval_results.json",
            "/o/mrpc/seed_2/eval_results.json",
            "/o/mrpc/seed_2/submission/MRPC.tsv",
            "/o/mnli/seed_1/eval_results.json",
            "/o/mnli/seed_1/submission/MNLI-m.tsv"}.__contains__
  runs = glue_suite.plan_runs(["mrpc", "mnli"], 2, out, True, exists)
  assert [(r.task, r.seed, r.output_dir, r.action) for r in runs] == [
      ("mrpc", 1, "/o/mrpc/seed_1", "predict"),
      ("mrpc", 2, "/o/mrpc/seed_2", "skip"),
      ("mnli", 1, "/o/mnli/seed_1", "predict"),  # MNLI-mm.tsv missing
      ("mnli", 2, "/o/mnli/seed_2", "train")]
  runs = glue_suite.plan_runs(["mrpc"], 3, out, False, exists)
  assert [r.action for r in runs] == ["skip", "skip", "train"]
  assert glue_suite.plan_ax(out, exists).action == "predict"
  assert glue_suite.plan_ax(
      out, {"/o/ax/submission/AX.tsv"}.__contains__).action == "skip"


def test_classifier_commands_put_the_flagfile_first_and_extras_last():
  config = glue_suite.SuiteConfig(
      "py", "rc.py", "/f", "/g", "/ckpt", None, "/v.txt", False, True,
      ["--num_train_epochs=1"])
  train = glue_suite.SuiteRun("sts-b", 3, "/o/sts-b/seed_3", "train")
  assert glue_suite.classifier_command(train, config) == [
      "py", "rc.py", "--flagfile=/f/sts-b.flags", "--task_name=sts-b",
      "--data_dir=/g/STS-B", "--vocab_file=/v.txt", "--do_lower_case=false",
      "--output_dir=/o/sts-b/seed_3", "--do_train", "--do_eval",
      "--tf_random_seed=3", "--do_predict", "--init_checkpoint=/ckpt",
      "--num_train_epochs=1"]
  # Neither vocab nor casing given: the runs take the checkpoint's.
  described = dataclasses.replace(config, vocab_file=None, do_lower_case=None)
  assert glue_suite.classifier_command(train, described)[4:6] == [
      "--data_dir=/g/STS-B", "--output_dir=/o/sts-b/seed_3"]
  predict = glue_suite.SuiteRun("mrpc", 1, "/o/mrpc/seed_1", "predict")
  with_config = dataclasses.replace(config, bert_config_file="/c.json")
  assert glue_suite.classifier_command(predict, with_config)[7:] == [
      "--output_dir=/o/mrpc/seed_1", "--bert_config_file=/c.json",
      "--do_predict", "--num_train_epochs=1"]
  ax = glue_suite.SuiteRun("ax", None, "/o/ax", "predict")
  command = glue_suite.classifier_command(ax, config)
  assert command[2:5] + command[-3:] == [
      "--flagfile=/f/mnli.flags", "--task_name=ax", "--data_dir=/g/diagnostic",
      "--do_predict", "--init_checkpoint=/ckpt", "--num_train_epochs=1"]


def test_ax_predicts_from_the_mnli_runs_checkpoint():
  state = ('model_checkpoint_path: "model.ckpt-36"\n'
           'all_model_checkpoint_paths: "model.ckpt-36"\n')
  assert glue_suite.ax_checkpoint_state("/o/mnli/seed_2", state) == (
      'model_checkpoint_path: "/o/mnli/seed_2/model.ckpt-36"\n'
      'all_model_checkpoint_paths: "/o/mnli/seed_2/model.ckpt-36"\n')
  with pytest.raises(errors.UserError, match="seed_2 holds no checkpoint"):
    glue_suite.ax_checkpoint_state("/o/mnli/seed_2", None)


def test_gpus_come_from_cuda_visible_devices_else_nvidia_smi():
  listing = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-1)\n"
             "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-2)\n")
  assert glue_suite.visible_gpus({}, listing) == ["0", "1"]
  assert glue_suite.visible_gpus({}, None) == []
  assert glue_suite.visible_gpus({}, "") == []
  assert glue_suite.visible_gpus({"CUDA_VISIBLE_DEVICES": "3,1"},
                                 listing) == ["3", "1"]
  assert glue_suite.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, listing) == []
  assert glue_suite.visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"},
                                 listing) == []


def test_eval_results_are_read_per_the_contract(tmp_path):
  path = tmp_path / "eval_results.json"
  path.write_text(json.dumps(SEED_1["mnli"]))
  assert glue_results.read_eval_results(str(path), "mnli") == {
      "dev_matched/accuracy": 0.84, "dev_mismatched/accuracy": 0.8}
  with pytest.raises(errors.UserError, match="holds task 'mnli'; expected "
                                             "'rte'"):
    glue_results.read_eval_results(str(path), "rte")
  path.write_text(json.dumps(eval_results("mrpc", dev={"accuracy": 0.8})))
  with pytest.raises(errors.UserError, match="has no f1 of dev set 'dev'"):
    glue_results.read_eval_results(str(path), "mrpc")
  path.write_text("{")
  with pytest.raises(errors.UserError, match="is not an eval_results.json"):
    glue_results.read_eval_results(str(path), "mrpc")


# --------------------------------------------- run_glue.py without training


GLUE_TASKS = tuple(t.name for t in task_registry.glue_tasks())


def write_glue_dir(root, tasks=GLUE_TASKS, skip=()):
  """Empty files in the GLUE download's layout (the runner checks them
  before anything runs; run_classifier reads them)."""
  for name in tasks:
    task = task_registry.get(name)
    folder = os.path.join(str(root), task.folder)
    os.makedirs(folder, exist_ok=True)
    for f in task.eval_files + task.test_files:
      if os.path.join(task.folder, f) not in skip:
        open(os.path.join(folder, f), "w").close()
  return str(root)


def finished_run(output_dir, task, seed, content, predictions=True):
  """A run directory as run_classifier leaves it."""
  run_dir = glue_suite.seed_dir(str(output_dir), task, seed)
  os.makedirs(os.path.join(run_dir, "submission"))
  with open(os.path.join(run_dir, "eval_results.json"), "w") as f:
    json.dump(content, f)
  if predictions:
    for path in glue_suite.submission_paths(task, run_dir):
      with open(path, "w") as f:
        f.write("index\tprediction\n0\tseed %d\n" % seed)
  return run_dir


BERT_CONFIG = os.path.join(REPO_ROOT, "configs", "bert_tiny.json")
VOCAB = os.path.join(REPO_ROOT, "tests", "fixtures", "squad", "vocab.txt")


def google_checkpoint_dir(root):
  """A directory run_glue.py takes for a pretrained model (Google's layout:
  bert_model.ckpt, no `checkpoint` file); it reads none of its bytes."""
  directory = root / "pretrained"
  directory.mkdir(exist_ok=True)
  (directory / "bert_model.ckpt.index").write_text("")
  return directory


def glue_args(tmp_path, *extra):
  return ["run_glue.py",
          "--init_checkpoint=%s" % google_checkpoint_dir(tmp_path),
          "--bert_config_file=%s" % BERT_CONFIG, "--vocab_file=%s" % VOCAB,
          "--glue_dir=%s" % (tmp_path / "glue"),
          "--output_dir=%s" % (tmp_path / "out")] + list(extra)


def with_accuracy(content, accuracy):
  return dict(content, dev_sets={
      name: dict(metrics, accuracy=accuracy)
      for name, metrics in content["dev_sets"].items()})


def test_finished_runs_are_skipped_and_make_the_table_and_submission(
    tmp_path):
  write_glue_dir(tmp_path / "glue")
  out = tmp_path / "out"
  for task, content in SEED_1.items():
    finished_run(out, task, 1, content)
  # RTE's second and third seeds: accuracies 0.7 and 0.6; the median run is
  # seed 1 (0.66), whose submission is copied.
  finished_run(out, "rte", 2, with_accuracy(SEED_1["rte"], 0.7))
  finished_run(out, "rte", 3, with_accuracy(SEED_1["rte"], 0.6))
  os.makedirs(out / "ax" / "submission")
  (out / "ax" / "submission" / "AX.tsv").write_text("index\tprediction\n")
  result = run_ok(glue_args(tmp_path, "--tasks=rte", "--seeds=3",
                            "--do_predict"), timeout=120)
  assert "[run_glue] 1 tasks x 3 seed(s): 0 runs to make" in result.stderr
  assert ("[run_glue] rte seed 2/3: finished before (eval_results.json "
          "found), skipped") in result.stderr
  assert "run_classifier" not in result.stderr
  written = json.loads((out / "glue_results.json").read_text())
  assert [t["task"] for t in written["tasks"]] == ["rte"]
  assert written["tasks"][0]["metrics"]["accuracy"]["median"] == 0.66
  assert (out / "submission" / "RTE.tsv").read_text().endswith("seed 1\n")
  # Every task: the GLUE score of the nine.
  result = run_ok(glue_args(tmp_path, "--do_predict"), timeout=120)
  written = json.loads((out / "glue_results.json").read_text())
  assert written["glue_score"] == pytest.approx(GLUE_1, abs=1e-12)
  assert "[run_glue] GLUE score %.1f" % (100 * GLUE_1) in result.stderr
  assert sorted(os.listdir(out / "submission")) == sorted(
      f for t in task_registry.glue_tasks() for f in t.submissions)
  assert [n for n in os.listdir(out) if ".partial-" in n] == []


@pytest.mark.slow
def test_failing_runs_are_named_the_others_go_on_and_the_exit_is_3(tmp_path):
  write_glue_dir(tmp_path / "glue")
  out = tmp_path / "out"
  finished_run(out, "rte", 1, SEED_1["rte"])
  qnli = finished_run(out, "qnli", 1, SEED_1["qnli"])
  with open(os.path.join(qnli, "eval_results.json"), "w") as f:
    f.write("{")
  # run_classifier refuses the flag at once, before loading TensorFlow.
  result = run_program(glue_args(tmp_path, "--tasks=mrpc,rte,qnli",
                                 "--seeds=2", "--", "--eval_batch_size=0"),
                       timeout=120)
  assert result.returncode == 3, result.stderr[-2000:]
  for seed in (1, 2):
    log = out / "mrpc" / ("seed_%d" % seed) / "run_classifier.log"
    assert ("[run_glue] error: mrpc seed %d/2 failed with exit code 2 after "
            % seed) in result.stderr
    assert "(error: --eval_batch_size must be >= 1, got 0); log: %s" % log in (
        result.stderr)
  assert "rte seed 2/2 failed with exit code 2" in result.stderr
  assert ("[run_glue] error: qnli seed 1/2: %s is not an eval_results.json"
          % (out / "qnli" / "seed_1" / "eval_results.json")) in result.stderr
  failed = ["mrpc seed 1/2", "mrpc seed 2/2", "qnli seed 2/2", "rte seed 2/2",
            "qnli seed 1/2"]
  assert result.stderr.splitlines()[-1] == (
      "error: 5 run(s) failed: %s; see the lines above" % ", ".join(failed))
  written = json.loads((out / "glue_results.json").read_text())
  assert [t["task"] for t in written["tasks"]] == ["rte"]
  assert written["failed_runs"] == failed


@pytest.mark.parametrize("args, skip, fragments", [
    (["--tasks=mrpc,rte"], ["RTE/dev.tsv"], ["RTE/dev.tsv", "task rte"]),
    (["--tasks=cola,sst-3"], [], ["unknown task 'sst-3'"]),
    (["--seeds=0"], [], ["--seeds must be >= 1, got 0"]),
    pytest.param(["--tasks=mrpc", "--task_flags_dir=/nowhere"], [],
                 ["/nowhere/mrpc.flags"], marks=pytest.mark.slow),
    pytest.param(["--", "--output_dir=/x"], [],
                 ["sets --output_dir for each run"], marks=pytest.mark.slow),
    pytest.param(["--", "--nodo_predict"], [],
                 ["sets --do_predict for each run"], marks=pytest.mark.slow),
])
def test_bad_input_is_one_error_line_and_nothing_written(tmp_path, args,
                                                         skip, fragments):
  write_glue_dir(tmp_path / "glue", skip=skip)
  result = run_program(glue_args(tmp_path, *args), timeout=120)
  expect_user_error(result, *fragments)
  assert not (tmp_path / "out").exists()


def test_a_missing_task_folder_is_named(tmp_path):
  write_glue_dir(tmp_path / "glue", tasks=["cola", "mrpc"])
  result = run_program(glue_args(tmp_path, "--tasks=cola,mrpc,qnli"),
                       timeout=120)
  expect_user_error(result, "%s/ (task qnli)" % (tmp_path / "glue" / "QNLI"))
  assert not (tmp_path / "out").exists()


def run_glue_with(tmp_path, init_checkpoint, *extra):
  """run_glue.py with --init_checkpoint=init_checkpoint and no
  --bert_config_file, on a GLUE download it would run every task of."""
  write_glue_dir(tmp_path / "glue")
  args = [a for a in glue_args(tmp_path, *extra)
          if not a.startswith(("--init_checkpoint=", "--bert_config_file="))]
  return run_program(args + ["--init_checkpoint=%s" % init_checkpoint],
                     timeout=120)


def test_a_directory_without_a_checkpoint_is_refused_before_any_run(
    tmp_path):
  empty = tmp_path / "empty"
  empty.mkdir()
  result = run_glue_with(tmp_path, empty, "--bert_config_file=%s" %
                         BERT_CONFIG)
  line = expect_user_error(result)
  assert line == ("error: --init_checkpoint %s is a directory with no "
                  "checkpoint in it" % empty)
  assert "run_classifier" not in result.stderr
  assert not (tmp_path / "out").exists()


def test_a_tensorflow_checkpoint_needs_the_bert_config_file(tmp_path):
  training = tmp_path / "pretrain"
  training.mkdir()
  (training / "checkpoint").write_text(
      'model_checkpoint_path: "model.ckpt-20"\n'
      'all_model_checkpoint_paths: "model.ckpt-20"\n')
  (training / "model.ckpt-20.index").write_text("")
  for path in (training, training / "model.ckpt-20"):
    result = run_glue_with(tmp_path, path)
    line = expect_user_error(result)
    assert line == ("error: --bert_config_file is required: the directory "
                    "of --init_checkpoint %s holds no bert_config.json" % path)
    assert not (tmp_path / "out").exists()
  # The state file names a checkpoint that is gone: no checkpoint.
  (training / "model.ckpt-20.index").unlink()
  expect_user_error(run_glue_with(tmp_path, training),
                    "is a directory with no checkpoint in it")
  expect_user_error(run_glue_with(tmp_path, tmp_path / "model.ckpt"),
                    "model.ckpt: no such checkpoint (expected a directory or "
                    "%s)" % (tmp_path / "model.ckpt.index"))


def test_a_hugging_face_directory_needs_no_bert_config_file(tmp_path):
  (tmp_path / "config.json").write_text('{"model_type": "bert"}')
  glue_suite.check_init_checkpoint(str(tmp_path), None, "v.txt")
  (tmp_path / "config.json").unlink()
  with pytest.raises(errors.UserError, match="is a directory with no "
                                             "checkpoint in it"):
    glue_suite.check_init_checkpoint(str(tmp_path), None, "v.txt")


def test_a_described_directory_needs_neither_config_nor_vocab(tmp_path):
  """A run directory (or Google's) holds bert_config.json and vocab.txt;
  its checkpoint prefix is described by its directory."""
  (tmp_path / "bert_model.ckpt.index").write_text("")
  prefix = str(tmp_path / "bert_model.ckpt")
  (tmp_path / "bert_config.json").write_text("{}")
  for path in (str(tmp_path), prefix):
    with pytest.raises(errors.UserError) as raised:
      glue_suite.check_init_checkpoint(path, None, None)
    assert str(raised.value) == (
        "--vocab_file is required: the directory of --init_checkpoint %s "
        "holds no vocab.txt" % path)
    glue_suite.check_init_checkpoint(path, None, "v.txt")
  (tmp_path / "vocab.txt").write_text("[PAD]\n")
  for path in (str(tmp_path), prefix):
    glue_suite.check_init_checkpoint(path, None, None)


@pytest.mark.parametrize("where", ["output_dir", "parent"])
def test_an_output_dir_that_is_a_file_is_one_error_line(tmp_path, where):
  write_glue_dir(tmp_path / "glue")
  blocker = tmp_path / "taken"
  blocker.write_text("a file\n")
  output_dir = blocker if where == "output_dir" else blocker / "glue"
  args = [a for a in glue_args(tmp_path) if not a.startswith("--output_dir")]
  result = run_program(args + ["--output_dir=%s" % output_dir], timeout=120)
  line = expect_user_error(result)
  assert line == "error: --output_dir %s: %s is a file, not a directory" % (
      output_dir, blocker)
  assert blocker.read_text() == "a file\n"


def test_missing_inputs_follow_the_steps_run(tmp_path):
  root = write_glue_dir(tmp_path, skip=["MNLI/test_mismatched.tsv",
                                        "diagnostic/diagnostic.tsv"])
  flags_dir = os.path.join(REPO_ROOT, "configs", "glue")
  tasks = glue_suite.suite_tasks(["mnli"], do_predict=True)
  assert glue_suite.missing_inputs(root, tasks, True, flags_dir,
                                   os.path.exists) == [
      "%s/MNLI/test_mismatched.tsv (task mnli)" % root,
      "%s/diagnostic/diagnostic.tsv (task ax)" % root]
  # Without --do_predict no test file is read.
  assert glue_suite.missing_inputs(root, ["mnli"], False, flags_dir,
                                   os.path.exists) == []
  # Every task has its flagfile in configs/glue (ax: MNLI's).
  assert glue_suite.missing_inputs(
      write_glue_dir(tmp_path / "all"), list(GLUE_TASKS), True,
      flags_dir, os.path.exists) == []


def run_script(*args):
  return subprocess.run(
      ["bash", os.path.join(REPO_ROOT, "scripts", "run_glue.sh")] +
      list(args), env=dict(os.environ, PYTHON=sys.executable),
      capture_output=True, text=True, timeout=120)


def test_run_glue_sh_documents_its_settings_and_passes_flags_on(tmp_path):
  result = run_script("--help")
  assert result.returncode == 0
  with open(os.path.join(REPO_ROOT, "scripts", "run_glue.sh")) as f:
    settings = set(re.findall(r"\$\{([A-Z_]+):?-", f.read()))
  assert set(re.findall(r"^  ([A-Z_]+) ", result.stdout, re.M)) == settings
  write_glue_dir(tmp_path / "glue")
  finished_run(tmp_path / "out", "rte", 1, SEED_1["rte"])
  common = ["GLUE_DIR=%s" % (tmp_path / "glue"),
            "OUTPUT_DIR=%s" % (tmp_path / "out"),
            "INIT_CHECKPOINT=%s" % google_checkpoint_dir(tmp_path),
            "BERT_CONFIG_FILE=%s" % BERT_CONFIG, "VOCAB_FILE=%s" % VOCAB,
            "TASKS=rte"]
  result = run_script(*common)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "[run_glue] rte seed 1/1: finished before" in result.stderr
  assert (tmp_path / "out" / "glue_results.md").exists()
  # --flags go to run_glue.py, those after a lone -- on to run_classifier.
  result = run_script(*common + ["--seeds=0"])
  assert "error: --seeds must be >= 1, got 0" in result.stderr
  result = run_script(*common + ["--", "--task_name=cola"])
  assert "sets --task_name for each run" in result.stderr


# ------------------------------------- the GLUE score in the results table


def test_the_time_to_accuracy_table_takes_the_glue_score(tmp_path):
  run_dir = tmp_path / "run"
  os.makedirs(run_dir / "glue")
  (run_dir / "eval_history.jsonl").write_text(json.dumps(
      {"step": 10, "masked_lm_accuracy": 0.4, "train_seconds": 60.0}) + "\n")
  plain = tmp_path / "plain"
  os.makedirs(plain)
  (plain / "eval_history.jsonl").write_text(json.dumps(
      {"step": 10, "masked_lm_accuracy": 0.3, "train_seconds": 60.0}) + "\n")
  summaries = [glue_results.summarize_task(t, {1: metrics_of(t, c)})
               for t, c in SEED_1.items()]
  glue_results.write_results(str(run_dir / "glue"),
                           glue_results.results(summaries, 1))
  text = accuracy_reports.write_report(str(tmp_path / "table"),
                                       [str(run_dir), str(plain)])
  lines = text.splitlines()
  assert lines[2].startswith("| run | model | replicas | precision | recipe |"
                             " held-out MLM accuracy (end) | GLUE score |")
  assert lines[4].startswith("| run |  |  |  |  | 0.4000 | %.1f |" % (
      100 * GLUE_1))
  assert lines[5].startswith("| plain |  |  |  |  | 0.3000 |  |")
  with open(tmp_path / "table" / "results_accuracy.csv") as f:
    table = list(csv.DictReader(f))
  assert float(table[0]["glue_score"]) == pytest.approx(GLUE_1, abs=1e-12)
  assert table[1]["glue_score"] == ""
  # Runs without GLUE results: the table as before, no GLUE column.
  assert "GLUE" not in accuracy_reports.markdown_table(
      [accuracy_reports.run_row(str(plain))])


# ------------------------------------------- end to end, tiny checkpoint


def save_tiny_checkpoint(directory, vocab_size):
  config = tiny_bert_config(vocab_size=vocab_size)
  os.makedirs(directory)
  path = os.path.join(directory, "bert_config.json")
  with open(path, "w") as f:
    json.dump(config, f)
  with tf.Graph().as_default():
    ids = tf.zeros([1, 2], tf.int32)
    modeling.BertModel(modeling.BertConfig.from_dict(config), False, ids,
                       ids, ids)
    tf.train.get_or_create_global_step()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, os.path.join(directory, "model.ckpt"))
  return path


@pytest.mark.slow
def test_suite_over_a_tiny_checkpoint_makes_every_file_and_resumes(tmp_path):
  """MNLI (two dev sets, two test sets) over two seeds, then AX predicted
  by the median MNLI run."""
  glue = tmp_path / "glue"
  os.makedirs(glue / "MNLI")
  os.makedirs(glue / "diagnostic")
  words = set()
  for name, source in [("train.tsv", "train.tsv"),
                       ("dev_matched.tsv", "dev_matched.tsv"),
                       ("dev_mismatched.tsv", "dev_matched.tsv"),
                       ("test_matched.tsv", "test_matched.tsv"),
                       ("test_mismatched.tsv", "test_matched.tsv")]:
    text = open(os.path.join(FIXTURES, "mnli", source)).read()
    (glue / "MNLI" / name).write_text(text)
    words.update(re.findall(r"\w+|[^\w\s]", text.lower()))
  (glue / "diagnostic" / "diagnostic.tsv").write_text(
      "index\tsentence1\tsentence2\n0\tThe station is warm.\t"
      "The station keeps a list.\n")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words)
  (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
  config = save_tiny_checkpoint(str(tmp_path / "ckpt"), len(vocab))
  args = ["run_glue.py", "--init_checkpoint=%s" % (tmp_path / "ckpt"),
          "--bert_config_file=%s" % config,
          "--vocab_file=%s" % (tmp_path / "vocab.txt"),
          "--glue_dir=%s" % glue, "--output_dir=%s" % (tmp_path / "out"),
          "--tasks=mnli", "--seeds=2", "--do_predict", "--",
          "--max_seq_length=32", "--num_train_epochs=1",
          "--train_batch_size=2", "--learning_rate=1e-3"]
  result = run_ok(args, timeout=300)
  out = tmp_path / "out"
  assert "[run_glue] mnli seed 2/2: done in " in result.stderr
  seeds = {}
  for seed in (1, 2):
    run_dir = out / "mnli" / ("seed_%d" % seed)
    assert "--tf_random_seed=%d" % seed in (
        run_dir / "run_classifier.log").read_text()
    seeds[seed] = glue_results.read_eval_results(
        str(run_dir / "eval_results.json"), "mnli")
  # The seeds are the runs' --tf_random_seed: other initial heads.
  assert (out / "mnli" / "seed_1" / "test_results.tsv").read_text() != (
      out / "mnli" / "seed_2" / "test_results.tsv").read_text()
  written = json.loads((out / "glue_results.json").read_text())
  mnli = written["tasks"][0]
  for name in ("dev_matched/accuracy", "dev_mismatched/accuracy"):
    assert mnli["metrics"][name]["per_seed"] == {
        str(s): seeds[s][name] for s in (1, 2)}
    assert mnli["metrics"][name]["median"] == statistics.median(
        [seeds[1][name], seeds[2][name]])
  assert written["glue_score"] is None
  for ext in ("md", "csv"):
    assert (out / ("glue_results." + ext)).stat().st_size > 0
  median_dir = out / "mnli" / ("seed_%d" % mnli["median_seed"])
  for name in ("MNLI-m.tsv", "MNLI-mm.tsv"):
    assert (out / "submission" / name).read_text() == (
        median_dir / "submission" / name).read_text()
  # AX: the median MNLI run's model, MNLI's labels.
  assert str(median_dir / "model.ckpt-") in (
      out / "ax" / "checkpoint").read_text()
  ax = (out / "submission" / "AX.tsv").read_text().splitlines()
  assert ax[0] == "index\tprediction" and ax[1].split("\t")[0] == "0"
  assert ax[1].split("\t")[1] in ("contradiction", "entailment", "neutral")
  # A rerun starts no run_classifier and leaves the runs untouched.
  mtimes = {p: os.stat(p).st_mtime_ns
            for p in tf.io.gfile.glob(str(out / "*" / "*" / "*"))}
  result = run_ok(args, timeout=120)
  assert result.stderr.count("finished before") == 3
  assert "training" not in result.stderr
  assert {p: os.stat(p).st_mtime_ns for p in mtimes} == mtimes
