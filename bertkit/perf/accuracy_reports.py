"""Time to a good model: the results table of training runs, and their curves.

One row per run directory, in the layout of the gluon-nlp LAMB BERT report
("F1 score | throughput | train time" per cluster), with held-out masked-LM
accuracy as the quality:

  configuration  model, replicas, precision, recipe (and framework);
  quality        held-out masked_lm_accuracy of the last evaluation, and the
                 time to a target accuracy: the training seconds and wall
                 seconds of the first evaluation reaching it (the whole
                 process's, from its launch, when the benchmark that ran
                 it recorded when each evaluation appeared);
  throughput     steady-state examples/sec and real (non-padding) tokens/sec
                 of throughput_summary.json;
  train time     training seconds of the last evaluation (evaluation time
                 left out, as training_clock counts it).

A run whose model went through the GLUE suite (run_glue.py --output_dir=
RUN_DIR/glue) also gets its GLUE score as a quality figure: a glue_score
field and column, present when a run of the table has one.

A run directory is what run_pretraining.py --eval_every_n_steps leaves
(eval_history.jsonl, throughput_summary.json, time_to_target.json with a
target) or the same files from another trainer (the benchmarks' PyTorch
peer), plus, when a benchmark ran it, RUN_INFO_FILE: how it was configured
(model, recipe, framework) and its whole-process wall seconds.
"""

import csv
import io
import json
import os
import statistics

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.engine.loop import evaluation
from bertkit.engine.report import throughput
from bertkit.perf import reports
from bertkit.tasks.glue import suite_results as glue_results

# Written by benchmarks into a run directory: {"name", "model", "recipe",
# "framework", "process_wall_seconds", "eval_seen_seconds" (seconds from the
# launch at which each line of eval_history.jsonl appeared), "command"}, all
# optional.
RUN_INFO_FILE = "run_info.json"
METRIC = evaluation.TARGET_METRIC
# run_glue.py's results when its --output_dir is RUN_DIR/glue.
GLUE_RESULTS = os.path.join("glue", glue_results.RESULTS_STEM + ".json")
GLUE_FIELD = "glue_score"

CSV_FIELDS = [
    "run", "model", "replicas", "precision", "recipe", "framework",
    "global_batch_size", "final_step", "masked_lm_accuracy", "masked_lm_loss",
    "target", "target_step", "target_train_seconds", "target_wall_seconds",
    "examples_per_sec", "real_tokens_per_sec", "train_seconds",
    "wall_seconds", "eval_seconds", "eval_overhead", "evaluations", "run_dir"]


def _read_json(path):
  if not atomic_io.exists(path):
    return {}
  with atomic_io.open_file(path) as f:
    return json.load(f)


def time_to_target(history, target):
  """The first evaluation of `history` reaching `target`, or None.

  Args:
    history: eval_history.jsonl's entries, in order.
    target: a masked_lm_accuracy in (0, 1].

  Returns:
    The entry (a dict with step, train_seconds, wall_seconds, ...), or None.
  """
  return evaluation.target_reached(history, target)


def eval_overhead(history):
  """Seconds spent evaluating over seconds spent training, at the last
  evaluation (None without evaluations or training time)."""
  if not history or not history[-1].get("train_seconds"):
    return None
  return (sum(e.get("eval_seconds", 0.0) for e in history) /
          history[-1]["train_seconds"])


def _run_target(history, run_dir, target, info):
  """(target, the entry reaching it or {}): `target` if given, else the
  run's own --target_masked_lm_accuracy from time_to_target.json.

  The entry's wall_seconds is the whole process's, from its launch, when
  the benchmark that ran it saw each evaluation appear (info's
  eval_seen_seconds)."""
  if target is None:
    target = _read_json(os.path.join(run_dir, evaluation.TARGET_FILE)).get(
        "target")
  entry = None if target is None else time_to_target(history, target)
  if entry is None:
    return target, {}
  seen = info.get("eval_seen_seconds") or []
  index = history.index(entry)
  if index < len(seen):
    entry = dict(entry, wall_seconds=seen[index])
  return target, entry


def run_row(run_dir, target=None):
  """The results-table row of one run directory.

  Args:
    run_dir: a run's output directory.
    target: the accuracy whose time is reported; None: the run's own
      target (time_to_target.json), if any.

  Returns:
    A dict with the CSV_FIELDS keys (None where the run has no figure),
    and GLUE_FIELD when the run has a GLUE_RESULTS file.
  """
  history = evaluation.read_history(run_dir)
  summary = _read_json(os.path.join(run_dir, throughput.SUMMARY_FILE))
  info = _read_json(os.path.join(run_dir, RUN_INFO_FILE))
  last = history[-1] if history else {}
  target, reached = _run_target(history, run_dir, target, info)
  row = {
      "run": info.get("name") or os.path.basename(os.path.normpath(run_dir)),
      "model": info.get("model"),
      "replicas": summary.get("num_replicas"),
      "precision": summary.get("precision"),
      "recipe": info.get("recipe"),
      "framework": info.get("framework"),
      "global_batch_size": summary.get("global_batch_size"),
      "final_step": last.get("step"),
      "masked_lm_accuracy": last.get(METRIC),
      "masked_lm_loss": last.get("masked_lm_loss"),
      "target": target,
      "target_step": reached.get("step"),
      "target_train_seconds": reached.get("train_seconds"),
      "target_wall_seconds": reached.get("wall_seconds"),
      "examples_per_sec": summary.get("examples_per_sec"),
      "real_tokens_per_sec": summary.get("real_tokens_per_sec"),
      "train_seconds": last.get("train_seconds"),
      "wall_seconds": info.get("process_wall_seconds",
                               last.get("wall_seconds")),
      "eval_seconds": sum(e.get("eval_seconds", 0.0) for e in history)
                      if history else None,
      "eval_overhead": eval_overhead(history),
      "evaluations": len(history),
      "run_dir": run_dir,
  }
  glue_path = os.path.join(run_dir, GLUE_RESULTS)
  if atomic_io.exists(glue_path):
    row[GLUE_FIELD] = glue_results.read_glue_score(glue_path)
  return row


def table_fields(rows):
  """CSV_FIELDS, and GLUE_FIELD after the accuracy if a row has it."""
  if not any(GLUE_FIELD in row for row in rows):
    return CSV_FIELDS
  at = CSV_FIELDS.index("masked_lm_loss") + 1
  return CSV_FIELDS[:at] + [GLUE_FIELD] + CSV_FIELDS[at:]


def format_duration(seconds):
  """h:mm:ss of a number of seconds ("" for None)."""
  if seconds is None:
    return ""
  seconds = int(round(seconds))
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def _number(value, pattern):
  return "" if value is None else pattern % value


def _target_cell(row):
  if row["target"] is None:
    return ""
  if row["target_step"] is None:
    return "not reached"
  return "%.0f s / %.0f s (step %d)" % (
      row["target_train_seconds"], row["target_wall_seconds"],
      row["target_step"])


def markdown_table(rows):
  """The LAMB report's layout, one line per row.

  Args:
    rows: run_row dicts.

  Returns:
    Markdown text: a header naming the target, then the table.
  """
  targets = sorted({r["target"] for r in rows if r["target"] is not None})
  target_text = (" / ".join("%g" % t for t in targets) if targets
                 else "(none)")
  header = ["run", "model", "replicas", "precision", "recipe",
            "held-out MLM accuracy (end)",
            "time to %s: train / wall" % target_text, "examples/sec",
            "real tokens/sec", "train time"]
  with_glue = GLUE_FIELD in table_fields(rows)
  if with_glue:
    header.insert(6, "GLUE score")
  out = ["Configuration: model, replicas, precision, recipe. Quality: "
         "held-out masked-LM accuracy of the last evaluation; %stime to the "
         "target accuracy %s (training seconds, evaluation excluded / wall "
         "seconds). Throughput: steady-state figures. Train time: training "
         "seconds (h:mm:ss).\n" % (
             "the GLUE score of run_glue.py over the run's model (dev-set "
             "medians, x 100); " if with_glue else "", target_text),
         "| " + " | ".join(header) + " |",
         "|" + "|".join(["---"] * len(header)) + "|"]
  for row in rows:
    recipe = row["recipe"] or ""
    if row["framework"]:
      recipe = "%s (%s)" % (recipe, row["framework"]) if recipe else (
          row["framework"])
    cells = [
        row["run"], row["model"] or "", _number(row["replicas"], "%d"),
        row["precision"] or "", recipe,
        _number(row["masked_lm_accuracy"], "%.4f"), _target_cell(row),
        _number(row["examples_per_sec"], "%.2f"),
        _number(row["real_tokens_per_sec"], "%.0f"),
        format_duration(row["train_seconds"])]
    if with_glue:
      score = row.get(GLUE_FIELD)
      cells.insert(6, _number(None if score is None else 100 * score,
                              "%.1f"))
    out.append("| " + " | ".join(cells) + " |")
  return "\n".join(out) + "\n"


def _csv_text(fields, rows):
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore",
                          lineterminator="\n")
  writer.writeheader()
  for row in rows:
    writer.writerow({k: "" if row.get(k) is None else row[k]
                     for k in fields})
  return buffer.getvalue()


def write_table(output_dir, rows, stem="results"):
  """Writes STEM.md, STEM.csv and STEM.json of the rows to output_dir.

  Returns:
    The three paths.
  """
  paths = [os.path.join(output_dir, stem + ext)
           for ext in (".md", ".csv", ".json")]
  fields = table_fields(rows)
  texts = [markdown_table(rows), _csv_text(fields, rows),
           json.dumps([{k: row.get(k) for k in fields} for row in rows],
                      indent=2) + "\n"]
  for path, text in zip(paths, texts):
    with atomic_io.atomic_open(path) as f:
      f.write(text)
  return paths


def median_or_none(values):
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def contestant_summary(rows):
  """Medians over the repeats of one contestant.

  Args:
    rows: run_row dicts of the same contestant, one per repeat, with the
      same target.

  Returns:
    dict: repeats, reached (how many reached the target), the medians of
    the time to target (over the repeats that reached it; None unless more
    than half did), of the final accuracy, of examples/sec and of the eval
    overhead.
  """
  reached = [r for r in rows if r["target_step"] is not None]
  enough = 2 * len(reached) > len(rows)
  return {
      "repeats": len(rows),
      "reached": len(reached),
      "target_train_seconds": median_or_none(
          [r["target_train_seconds"] for r in reached]) if enough else None,
      "target_wall_seconds": median_or_none(
          [r["target_wall_seconds"] for r in reached]) if enough else None,
      "masked_lm_accuracy": median_or_none(
          [r["masked_lm_accuracy"] for r in rows]),
      "examples_per_sec": median_or_none([r["examples_per_sec"]
                                          for r in rows]),
      "eval_overhead": median_or_none([r["eval_overhead"] for r in rows]),
  }


def speedup(slow, fast, key="target_train_seconds"):
  """slow[key] / fast[key]: how many times sooner `fast` got there (None
  when either has no figure)."""
  if slow.get(key) is None or not fast.get(key):
    return None
  return slow[key] / fast[key]


def eval_points(runs):
  """Every evaluation of every run, as flat rows.

  Args:
    runs: list of (label, run_dir) pairs.

  Returns:
    list of dicts: label, run_dir, then the history entry's fields.
  """
  points = []
  for label, run_dir in runs:
    for entry in evaluation.read_history(run_dir):
      points.append(dict(entry, label=label, run_dir=run_dir))
  return points


def write_eval_points(path_stem, runs):
  """Writes PATH_STEM.csv and PATH_STEM.json of eval_points(runs)."""
  points = eval_points(runs)
  fields = ["label", "step", "train_seconds", "wall_seconds", "examples",
            METRIC, "masked_lm_loss", "eval_seconds", "run_dir"]
  extra = sorted({k for p in points for k in p} - set(fields))
  with atomic_io.atomic_open(path_stem + ".csv") as f:
    f.write(_csv_text(fields + extra, points))
  with atomic_io.atomic_open(path_stem + ".json") as f:
    f.write(json.dumps(points, indent=1) + "\n")


def write_curves_plot(path, runs, target=None, title=None):
  """Held-out masked-LM accuracy against training seconds, a line a run.

  Args:
    path: the PNG to write.
    runs: list of (label, run_dir); runs sharing a label share a colour.
    target: drawn as a horizontal line when given.
    title: the plot's title.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(8, 5))
  colours = {}
  for label, run_dir in runs:
    history = evaluation.read_history(run_dir)
    if not history:
      continue
    first = label not in colours
    colours.setdefault(label, "C%d" % len(colours))
    ax.plot([e["train_seconds"] / 60 for e in history],
            [e[METRIC] for e in history], marker=".", color=colours[label],
            label=label if first else None, alpha=0.85)
  if target is not None:
    ax.axhline(target, color="gray", linestyle=":",
               label="target %g" % target)
  ax.set_xlabel("training minutes (evaluation excluded)")
  ax.set_ylabel("held-out masked-LM accuracy")
  ax.grid(True, alpha=0.3)
  if title:
    ax.set_title(title)
  if colours:
    ax.legend(loc="lower right")
  reports.save_png(fig, path)


def write_budget_plot(path, curves, budget_minutes, target, title=None):
  """Final held-out accuracy against the training budget, a line a
  contestant.

  Args:
    path: the PNG to write.
    curves: {contestant: [(budget minutes, final accuracy)]}.
    budget_minutes: B, drawn as a vertical line.
    target: the accuracy to reach, drawn as a horizontal line.
    title: the plot's title.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(8, 5))
  for label, points in curves.items():
    points = sorted(points)
    ax.plot([b for b, _ in points], [a for _, a in points], marker="o",
            label=label)
  ax.axhline(target, color="gray", linestyle=":", label="target %.4f" % target)
  ax.axvline(budget_minutes, color="gray", linestyle="--", alpha=0.5)
  ax.set_xlabel("training budget, minutes (schedule completed)")
  ax.set_ylabel("final held-out masked-LM accuracy")
  ax.grid(True, alpha=0.3)
  if title:
    ax.set_title(title)
  ax.legend(loc="lower right")
  reports.save_png(fig, path)


def write_report(output_dir, run_dirs, target=None):
  """The results table of run directories (benchmark.py --report).

  Args:
    output_dir: where results_accuracy.md/.csv/.json go (created).
    run_dirs: run output directories, in the table's order.
    target: the accuracy whose time is reported; None: each run's own.

  Returns:
    The Markdown text.

  Raises:
    UserError: a directory holds neither eval_history.jsonl nor
      throughput_summary.json, or the target is outside (0, 1].
  """
  if target is not None and not 0.0 < target <= 1.0:
    raise UserError("--report_target=%r is out of range; expected 0 < A <= "
                    "1" % target)
  for run_dir in run_dirs:
    if not any(atomic_io.exists(os.path.join(run_dir, name)) for name in (
        evaluation.HISTORY_FILE, throughput.SUMMARY_FILE)):
      raise UserError("--report: %s holds no %s or %s; expected the "
                      "--output_dir of a run_pretraining.py run" % (
                          run_dir, evaluation.HISTORY_FILE,
                          throughput.SUMMARY_FILE))
  rows = [run_row(run_dir, target) for run_dir in run_dirs]
  os.makedirs(output_dir, exist_ok=True)
  write_table(output_dir, rows, stem="results_accuracy")
  return markdown_table(rows)
