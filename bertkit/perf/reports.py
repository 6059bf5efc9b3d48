"""The benchmark's results: scaling efficiency, and results.md/.csv/.png.

Rows are the dicts of bertkit.perf.sweep (one per cell, its axes and
figures), with MFU from bertkit.perf.model_flops. The Markdown tables take
the layout of the published multi-GPU BERT tables: rows n_gpu, columns
precision(batch), examples/sec.
"""

import collections
import csv
import dataclasses
import io
import os

from bertkit.common import atomic_io
from bertkit.perf import sweep

CPU_NOTE = "CPU logical replicas, not GPUs"

# The axes that, with `replicas`, identify a cell; a "series" is all cells
# sharing the other axes, compared against its 1-replica cell.
SERIES_AXES = ("strategy", "config_file", "seq_length", "xla", "precision",
               "per_replica_batch")

CELL_FIELDS = tuple(field.name for field in dataclasses.fields(sweep.Cell))
CSV_FIELDS = list(CELL_FIELDS) + [
    "device", "global_batch", "num_train_steps", "steps_counted",
    "examples_per_sec", "examples_per_sec_per_replica", "sequences_per_sec",
    "real_tokens_per_sec", "scaling_efficiency", "model_gflop_per_example",
    "model_tflops", "peak_tflops", "mfu", "status", "note", "cell_dir"]


def series_key(row):
  """The values of the SERIES_AXES of a row: its series."""
  return tuple(row[axis] for axis in SERIES_AXES)


def add_scaling_efficiency(rows):
  """Sets row["scaling_efficiency"] = eps(N) / (N * eps(1)) for each row.

  eps(1) is the examples/sec of the row of the same series with 1 replica;
  the efficiency is None when that row or the row's own figure is missing.

  Args:
    rows: list of dicts with the SERIES_AXES keys, "replicas" and
      "examples_per_sec" (None for a failed or skipped cell).
  """
  baselines = {series_key(r): r["examples_per_sec"] for r in rows
               if r["replicas"] == 1 and r["examples_per_sec"]}
  for row in rows:
    base = baselines.get(series_key(row))
    eps = row["examples_per_sec"]
    row["scaling_efficiency"] = (eps / (row["replicas"] * base)
                                 if base and eps else None)


def _format_number(value):
  return "%.1f" % value if value >= 10 else "%.2f" % value


def _cell_text(row):
  if row is None:
    return ""
  if row["examples_per_sec"] is None:
    return row["status"]
  return _format_number(row["examples_per_sec"])


def _group_title(row):
  config = os.path.splitext(os.path.basename(row["config_file"]))[0]
  return "`%s`, %s, seq %d, XLA %s" % (row["strategy"], config,
                                       row["seq_length"], row["xla"])


def markdown_tables(rows, device):
  """The published tables' layout: one per strategy/config/seq/XLA group.

  Rows are replica counts, columns "precision(batch B)", cells steady-state
  examples/sec of the whole machine (or the cell's status if it has none).

  Args:
    rows: result dicts (see CSV_FIELDS), in sweep order.
    device: "gpu" or "cpu"; on CPU the first column says the replicas are
      logical CPU devices.

  Returns:
    Markdown text.
  """
  first_column = "n_gpu" if device == "gpu" else "n_replicas (%s)" % CPU_NOTE
  groups = collections.OrderedDict()
  for row in rows:
    key = tuple(row[a] for a in ("strategy", "config_file", "seq_length",
                                 "xla"))
    groups.setdefault(key, []).append(row)
  out = []
  for group_rows in groups.values():
    columns = list(collections.OrderedDict.fromkeys(
        (r["precision"], r["per_replica_batch"]) for r in group_rows))
    replica_counts = sorted({r["replicas"] for r in group_rows})
    by_position = {(r["replicas"], r["precision"], r["per_replica_batch"]): r
                   for r in group_rows}
    out.append("#### %s\n" % _group_title(group_rows[0]))
    header = [first_column] + ["%s(batch %d)" % c for c in columns]
    out.append(" | ".join(header))
    out.append("|".join(["---"] * len(header)))
    for n in replica_counts:
      out.append(" | ".join([str(n)] + [
          _cell_text(by_position.get((n,) + c)) for c in columns]))
    out.append("")
  return "\n".join(out)


def _percent(value):
  return "" if value is None else "%.0f%%" % (100 * value)


def markdown_details(rows):
  """Every cell's figures in one Markdown table."""
  header = ["cell", "global batch", "examples/sec", "per replica",
            "sequences/sec", "real tokens/sec", "scaling eff.",
            "model TFLOP/s", "MFU", "status"]
  out = [" | ".join(header), "|".join(["---"] * len(header))]
  for row in rows:
    eps = row["examples_per_sec"]
    out.append(" | ".join([
        "`%s`" % sweep.cell_name(sweep.Cell(
            **{f: row[f] for f in CELL_FIELDS})),
        str(row["global_batch"]),
        _format_number(eps) if eps else "",
        _format_number(row["examples_per_sec_per_replica"]) if eps else "",
        _format_number(row["sequences_per_sec"])
        if row.get("sequences_per_sec") else "",
        "%.0f" % row["real_tokens_per_sec"]
        if row.get("real_tokens_per_sec") else "",
        _percent(row["scaling_efficiency"]),
        "%.3f" % row["model_tflops"] if row["model_tflops"] else "",
        _percent(row["mfu"]),
        row["status"] + (": " + row["note"] if row["note"] else "")]))
  return "\n".join(out) + "\n"


def results_markdown(rows, device, peak_description, command):
  """The whole results.md text.

  Args:
    rows: result dicts with efficiency and MFU, in sweep order.
    device: "gpu" or "cpu".
    peak_description: what the MFU column divides by, in words.
    command: the command line that ran the sweep.

  Returns:
    Markdown text.
  """
  parts = ["# Pretraining throughput\n",
           "Steady-state examples/sec of the whole machine (warm-up steps "
           "excluded).\n"]
  if device == "cpu":
    parts.append("No GPU: every replica is a logical CPU device (%s); all of "
                 "them share the same cores.\n" % CPU_NOTE)
  parts.append("MFU peak: %s.\n" % peak_description)
  parts.append("Command: `%s`\n" % command)
  parts.append(markdown_tables(rows, device))
  parts.append("#### Per cell\n")
  parts.append(markdown_details(rows))
  return "\n".join(parts)


def write_csv(path, rows):
  """Writes the CSV_FIELDS of each row to `path` (None as empty)."""
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS,
                          extrasaction="ignore", lineterminator="\n")
  writer.writeheader()
  for row in rows:
    writer.writerow({k: "" if row.get(k) is None else row[k]
                     for k in CSV_FIELDS})
  with atomic_io.atomic_open(path) as f:
    f.write(buffer.getvalue())


def _series_label(row):
  config = os.path.splitext(os.path.basename(row["config_file"]))[0]
  return "%s %s s%d %s b%d%s" % (
      row["strategy"], config, row["seq_length"], row["precision"],
      row["per_replica_batch"], " XLA" if row["xla"] == "on" else "")


def write_plot(path, rows, device):
  """examples/sec and scaling efficiency against replicas, one line a series."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  series = collections.OrderedDict()
  for row in rows:
    if row["examples_per_sec"]:
      series.setdefault(series_key(row), []).append(row)
  fig, (ax_eps, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.5))
  for points in series.values():
    points = sorted(points, key=lambda r: r["replicas"])
    x = [r["replicas"] for r in points]
    ax_eps.plot(x, [r["examples_per_sec"] for r in points], marker="o",
                label=_series_label(points[0]))
    eff = [(r["replicas"], 100 * r["scaling_efficiency"]) for r in points
           if r["scaling_efficiency"] is not None]
    if eff:
      ax_eff.plot(*zip(*eff), marker="o", label=_series_label(points[0]))
  xlabel = "GPUs" if device == "gpu" else "replicas (%s)" % CPU_NOTE
  counts = sorted({r["replicas"] for r in rows})
  for ax, ylabel in ((ax_eps, "examples/sec (steady state)"),
                     (ax_eff, "scaling efficiency (%)")):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks(counts)
    ax.grid(True, alpha=0.3)
  ax_eff.axhline(100, color="gray", linestyle=":")
  ax_eps.set_ylim(bottom=0)
  ax_eff.set_ylim(bottom=0)
  if series:
    ax_eps.legend(fontsize="small")
  save_png(fig, path)


def save_png(fig, path):
  """Writes a matplotlib figure to `path` as a PNG (atomically), closes it."""
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  fig.tight_layout()
  with atomic_io.atomic_path(path) as tmp:
    fig.savefig(tmp, format="png", dpi=100)
  plt.close(fig)


def write_results(output_dir, rows, device, peak_description, command):
  """Writes results.csv, results.md and results.png of a sweep.

  Args:
    output_dir: the sweep's output directory.
    rows: result dicts with efficiency and MFU, in sweep order.
    device: "gpu" or "cpu".
    peak_description: what the MFU column divides by, in words.
    command: the command line that ran the sweep.
  """
  write_csv(os.path.join(output_dir, "results.csv"), rows)
  with atomic_io.atomic_open(os.path.join(output_dir, "results.md")) as f:
    f.write(results_markdown(rows, device, peak_description, command))
  write_plot(os.path.join(output_dir, "results.png"), rows, device)
