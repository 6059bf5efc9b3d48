"""The GLUE suite's results: each run's eval_results.json read, the task
scores, the GLUE score and the table (glue_results.md, .csv, .json), the
submission files gathered.

Scores follow the GLUE leaderboard (Wang et al., 2019): a task's score is its
metric, or the unweighted mean of its two metrics (MRPC and QQP: F1 and
accuracy; STS-B: Pearson and Spearman correlation; MNLI: matched and
mismatched accuracy); the GLUE score is the mean of the nine task scores.
The diagnostic set AX has no labels here and no part in the score. Values
stay fractions as eval_results.json has them (the table prints them x 100).

With several seeds, each metric and the task score are the medians over the
seeds (the task score's median over the per-seed task scores, so that it
is the score of a run when the number of seeds is odd); the submission files
come from the median run: the run of the lower median task score.
"""

import collections
import csv
import io
import json
import os
import shutil
import statistics

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.tasks.classification import registry as task_registry
from bertkit.tasks.glue import suite as glue_suite

RESULTS_STEM = "glue_results"


def metric_key(dev_set, metric):
  """A metric's name in the results: "f1", or "dev_matched/accuracy"."""
  return metric if dev_set == "dev" else "%s/%s" % (dev_set, metric)


def metric_names(task):
  return [metric_key(d, m)
          for d, m in task_registry.get(task).scored_metrics]


def read_eval_results(path, task):
  """A run's metrics from its eval_results.json.

  Args:
    path: the file (run_classifier.py's; docs/glue.md, "The contract").
    task: the task_registry name of the run.

  Returns:
    {metric name (metric_names): value} of the task's metrics.

  Raises:
    UserError: the file is not JSON, is another task's or lacks a metric.
  """
  try:
    with atomic_io.open_file(path) as f:
      results = json.load(f)
    dev_sets = results["dev_sets"]
  except (ValueError, KeyError, TypeError) as e:
    raise UserError("%s is not an eval_results.json of run_classifier.py "
                    "(%s)" % (path, e))
  if results.get("task") not in (None, task):
    raise UserError("%s holds task %r; expected %r" % (
        path, results.get("task"), task))
  metrics = {}
  for dev_set, metric in task_registry.get(task).scored_metrics:
    value = dev_sets.get(dev_set, {}).get(metric, "missing")
    if value is None and metric in ("pearson", "spearman"):
      # run_classifier writes null for the correlation of constant
      # predictions: no correlation, scored as 0 (not a failed run).
      value = 0.0
    if not isinstance(value, (int, float)):
      raise UserError("%s has no %s of dev set %r; expected the metrics %s" % (
          path, metric, dev_set, ", ".join(metric_names(task))))
    metrics[metric_key(dev_set, metric)] = float(value)
  return metrics


def task_score(task, metrics):
  """A run's score on the leaderboard: its metric, or the mean of two.

  Args:
    task: a task name.
    metrics: {metric name: value} (read_eval_results).

  Returns:
    float.
  """
  names = metric_names(task)
  return sum(metrics[n] for n in names) / len(names)


def median_seed(scores):
  """The seed of the lower median of the task scores.

  Args:
    scores: {seed: task score}.

  Returns:
    The seed whose run's score is the median (odd counts) or the lower of
    the two middle ones (even counts); ties by the lower seed.
  """
  ranked = sorted(scores, key=lambda seed: (scores[seed], seed))
  return ranked[(len(ranked) - 1) // 2]


def summarize_task(task, per_seed):
  """A task's line of the results.

  Args:
    task: a task name (not ax).
    per_seed: {seed: {metric name: value}} of its finished runs.

  Returns:
    dict: task, leaderboard, seeds, metrics {name: {"per_seed": {seed:
    value}, "median": value}}, score {"per_seed", "median"}, median_seed.
  """
  seeds = sorted(per_seed)
  metrics = collections.OrderedDict()
  for name in metric_names(task):
    values = {s: per_seed[s][name] for s in seeds}
    metrics[name] = {"per_seed": values,
                     "median": statistics.median(values.values())}
  scores = {s: task_score(task, per_seed[s]) for s in seeds}
  return {"task": task, "leaderboard": task_registry.get(task).leaderboard,
          "seeds": seeds, "metrics": metrics,
          "score": {"per_seed": scores,
                    "median": statistics.median(scores.values())},
          "median_seed": median_seed(scores)}


def glue_score(summaries):
  """The GLUE score of task summaries: the mean of the nine task scores.

  Args:
    summaries: summarize_task results.

  Returns:
    (score, missing): score is None unless every scored task is there;
    missing lists the scored tasks that are not.
  """
  scores = {s["task"]: s["score"]["median"] for s in summaries}
  missing = [t for t in glue_suite.SCORED_TASKS if t not in scores]
  if missing:
    return None, missing
  return statistics.fmean(scores[t] for t in glue_suite.SCORED_TASKS), []


def results(summaries, num_seeds, failed=()):
  """The content of glue_results.json.

  Args:
    summaries: summarize_task results, in task order.
    num_seeds: the seeds asked for per task.
    failed: "task seed k" strings of runs that failed.

  Returns:
    dict: glue_score (None unless all nine tasks are there), missing_tasks,
    average_score (mean of the task scores present), seeds_per_task,
    failed_runs, tasks (the summaries).
  """
  score, missing = glue_score(summaries)
  present = [s["score"]["median"] for s in summaries]
  return {"glue_score": score, "missing_tasks": missing,
          "average_score": statistics.fmean(present) if present else None,
          "seeds_per_task": num_seeds, "failed_runs": list(failed),
          "tasks": summaries}


def _percent(value):
  return "" if value is None else "%.1f" % (100 * value)


def leaderboard_cells(summary):
  """A task's cell(s) as the leaderboard prints them: "88.9/84.8" for a
  pair; MNLI as two columns, MNLI-m and MNLI-mm."""
  values = [_percent(m["median"]) for m in summary["metrics"].values()]
  if summary["task"] == "mnli":
    return values
  return ["/".join(values)]


def _leaderboard_header():
  names = []
  for name in glue_suite.SCORED_TASKS:
    names += (["MNLI-m", "MNLI-mm"] if name == "mnli"
              else [task_registry.get(name).leaderboard])
  return names


def markdown(result):
  """glue_results.md: the leaderboard line, then each task's seeds."""
  by_task = {s["task"]: s for s in result["tasks"]}
  header = ["GLUE"] + _leaderboard_header()
  cells = [_percent(result["glue_score"]) or "-"]
  for name in glue_suite.SCORED_TASKS:
    width = 2 if name == "mnli" else 1
    cells += (leaderboard_cells(by_task[name]) if name in by_task
              else ["-"] * width)
  out = ["# GLUE results\n",
         "Dev-set medians over %d seed(s) per task, x 100. Pairs are F1/"
         "accuracy (MRPC, QQP) and Pearson/Spearman (STS-B); CoLA is "
         "Matthews correlation; the GLUE score is the mean of the nine task "
         "scores, a pair counting as its mean and MNLI as the mean of "
         "matched and mismatched.\n" % result["seeds_per_task"],
         "| " + " | ".join(header) + " |",
         "|" + "|".join(["---:"] * len(header)) + "|",
         "| " + " | ".join(cells) + " |", ""]
  if result["missing_tasks"]:
    out.append("No GLUE score: no results for %s. Mean of the task scores "
               "present: %s.\n" % (", ".join(result["missing_tasks"]),
                                   _percent(result["average_score"]) or "-"))
  out += ["| task | metric | " + "per seed (seed: value)" +
          " | median |", "|---|---|---|---:|"]
  for summary in result["tasks"]:
    rows = list(summary["metrics"].items()) + [("task score",
                                                summary["score"])]
    for name, values in rows:
      seeds = ", ".join("%d: %s" % (s, _percent(v))
                        for s, v in values["per_seed"].items())
      out.append("| %s | %s | %s | %s |" % (
          summary["leaderboard"], name, seeds, _percent(values["median"])))
  if result["failed_runs"]:
    out += ["", "Failed runs (left out): %s." % ", ".join(
        result["failed_runs"])]
  return "\n".join(out) + "\n"


CSV_FIELDS = ["task", "metric", "seed", "value"]


def csv_text(result):
  """glue_results.csv: one row per (task, metric, seed), then the median
  (seed "median"); each task's "score" rows; a last "GLUE" row."""
  buffer = io.StringIO()
  writer = csv.writer(buffer, lineterminator="\n")
  writer.writerow(CSV_FIELDS)
  for summary in result["tasks"]:
    rows = list(summary["metrics"].items()) + [("score", summary["score"])]
    for name, values in rows:
      for seed, value in values["per_seed"].items():
        writer.writerow([summary["task"], name, seed, repr(value)])
      writer.writerow([summary["task"], name, "median",
                       repr(values["median"])])
  score = result["glue_score"]
  writer.writerow(["GLUE", "score", "median",
                   "" if score is None else repr(score)])
  return buffer.getvalue()


def json_text(result):
  """glue_results.json; seeds become strings, as JSON keys are."""
  return json.dumps(result, indent=2) + "\n"


def write_results(output_dir, result):
  """Writes glue_results.md, .csv and .json atomically.

  Returns:
    The three paths.
  """
  paths = [os.path.join(output_dir, RESULTS_STEM + ext)
           for ext in (".md", ".csv", ".json")]
  for path, text in zip(paths, (markdown(result), csv_text(result),
                                json_text(result))):
    with atomic_io.atomic_open(path) as f:
      f.write(text)
  return paths


def read_glue_score(path):
  """The GLUE score in a glue_results.json (None if it has none).

  Raises:
    UserError: the file is not a glue_results.json.
  """
  try:
    with atomic_io.open_file(path) as f:
      score = json.load(f)["glue_score"]
  except (ValueError, KeyError, TypeError) as e:
    raise UserError("%s is not a glue_results.json of run_glue.py (%s)" % (
        path, e))
  return score


def copy_submissions(output_dir, sources):
  """Copies the leaderboard files into OUTPUT_DIR/submission, each whole.

  Args:
    output_dir: the suite's output directory.
    sources: the run directories whose files to copy, e.g. each task's
      median run.

  Returns:
    The copied files' new paths.
  """
  target = os.path.join(output_dir, task_registry.SUBMISSION_DIR)
  os.makedirs(target, exist_ok=True)
  copied = []
  for task, run_dir in sources:
    for path in glue_suite.submission_paths(task, run_dir):
      final = os.path.join(target, os.path.basename(path))
      with atomic_io.atomic_path(final) as tmp:
        shutil.copyfile(path, tmp)
      copied.append(final)
  return copied
