"""Pretraining throughput benchmark: the published multi-GPU BERT tables,
measured here.

Runs a sweep of short `run_pretraining.py` trainings, one subprocess and one
output directory per cell, over the axes given on the command line (replicas,
precision, per-replica batch, distribution strategy, model config, sequence
length, XLA), and writes to --output_dir:

  results.csv   one row per cell (every axis and every measured figure);
  results.md    the published tables' layout: rows n_gpu, columns
                precision(batch), examples/sec; then per-cell details
                (efficiency, MFU);
  results.png   examples/sec and scaling efficiency against replicas.

Each cell's figure is the steady-state examples/sec of the run's
throughput_summary.json (warm-up steps and checkpoint steps excluded, see
throughput.py). Scaling efficiency compares with the 1-replica cell of the
same series; model FLOP utilisation (MFU) divides the model FLOPs of
`pretraining_flops` by a peak: --peak_tflops per GPU, or on a CPU-only machine
the whole CPU's float32 matmul rate, measured in a subprocess with the
training's thread count unless --peak_tflops gives it.

Without GPUs every replica is a logical CPU device (--cpu_replicas N); the
replicas then share the same cores, and the tables say so.

Example:
  python benchmark.py --output_dir=/tmp/bench --replicas=1,2 \
    --precisions=fp32,fp16 --per_replica_batches=8 \
    --bert_config_files=configs/bert_mini.json --seq_lengths=128
"""

import collections
import csv
import glob
import importlib.util
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time

from bertkit.common import console

# Before TensorFlow is imported: its C++ runtime reads its log level then.
console.quiet_native_logs(sys.argv)
# pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app
from absl import flags
from absl import logging

from bertkit.common import atomic_io
from bertkit.engine import distribution
import modeling
from bertkit.common.errors import UserError, main_with_user_errors

REPO_ROOT = os.path.dirname(os.path.abspath(__file__))
RUN_PRETRAINING = os.path.join(REPO_ROOT, "run_pretraining.py")
STRATEGIES = distribution.STRATEGIES
PRECISIONS = ("fp32", "fp16", "bf16")
# What run_pretraining's throughput_summary.json calls each cell's precision
# when it takes effect (--use_fp16 needs a GPU, --use_bf16 oneDNN's kernels).
SUMMARY_PRECISION = {"fp32": "float32", "fp16": "mixed_float16",
                     "bf16": "mixed_bfloat16"}
CPU_NOTE = "CPU logical replicas, not GPUs"
PEAK_MATMUL_SIZE = 2048

FLAGS = flags.FLAGS

def define_flags():
  """Defines the command-line flags (only when run as a program, so that
  tests can import several programs into one process)."""
  flags.DEFINE_string("output_dir", None,
                      "Where results.csv/.md/.png and one directory per cell "
                      "(cells/<name>) go.")
  flags.DEFINE_string("input_file", None,
                      "Pretraining TFRecords for every cell (comma-separated "
                      "globs). Default: synthetic records of the right shape, "
                      "written under output_dir/data.")
  flags.DEFINE_list("bert_config_files", ["configs/bert_mini.json"],
                    "Model configs to sweep.")
  flags.DEFINE_list("seq_lengths", ["128"], "Sequence lengths to sweep.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Masked positions per sequence (P).")
  flags.DEFINE_list("replicas", ["1", "2"],
                    "Replica counts: GPUs, or logical CPU devices without GPUs, "
                    "or horovod processes.")
  flags.DEFINE_list("precisions", ["fp32"],
                    "Any of fp32, fp16 (--use_fp16), bf16 (--use_bf16).")
  flags.DEFINE_list("per_replica_batches", ["32"],
                    "Per-replica batch sizes; the global batch is this times "
                    "the replicas.")
  flags.DEFINE_list("strategies", ["mirrored"],
                    "Any of %s; horovod cells are launched with horovodrun "
                    "-np N and skipped if horovod is not installed." %
                    ", ".join(STRATEGIES))
  flags.DEFINE_list("xla", ["off"], "off and/or on (--use_xla).")
  flags.DEFINE_integer("num_train_steps", 30, "Training steps of each cell.")
  flags.DEFINE_integer("throughput_warmup_steps", 10,
                       "Leading steps of each cell left out of its figure.")
  flags.DEFINE_float("peak_tflops", None,
                     "Peak TFLOP/s for MFU: of one GPU, or on a CPU-only "
                     "machine of the whole CPU. Default on CPU: measured with "
                     "a float32 matmul; on GPU: no MFU.")
  flags.DEFINE_integer("peak_threads", None,
                       "Threads of the CPU peak measurement; default the cores "
                       "available to this process, as training uses.")
  flags.DEFINE_integer("num_synthetic_records", 1024,
                       "Synthetic records of each shape (read repeatedly), "
                       "split over as many files as the most replicas.")
  flags.DEFINE_integer("cell_timeout_seconds", 3600,
                       "A cell running longer is stopped and marked failed.")
  flags.DEFINE_string("top_ops_of", None,
                      "Print the costliest op types of the newest profiler "
                      "trace under this run's output_dir (from --profile_steps) "
                      "as a Markdown table, and exit.")
  flags.DEFINE_integer("top_ops", 15, "Rows of the --top_ops_of table.")
  flags.DEFINE_bool("measure_peak_only", False,
                    "Print the CPU float32 matmul peak as JSON and exit (what "
                    "the benchmark runs in its peak subprocess).")

Cell = collections.namedtuple(
    "Cell", ["strategy", "config_file", "seq_length", "xla", "precision",
             "per_replica_batch", "replicas"])

# The axes that, with `replicas`, identify a cell; a "series" is all cells
# sharing the other axes, compared against its 1-replica cell.
SERIES_AXES = ("strategy", "config_file", "seq_length", "xla", "precision",
               "per_replica_batch")

CSV_FIELDS = list(Cell._fields) + [
    "device", "global_batch", "num_train_steps", "steps_counted",
    "examples_per_sec", "examples_per_sec_per_replica", "sequences_per_sec",
    "real_tokens_per_sec", "scaling_efficiency", "model_gflop_per_example",
    "model_tflops", "peak_tflops", "mfu", "status", "note", "cell_dir"]


def pretraining_flops(hidden_size, num_layers, intermediate_size, vocab_size,
                      seq_length, max_predictions_per_seq):
  """Model FLOPs of one pretraining example, forward and backward.

  Counts the matrix multiplications only, each multiply-add as 2 FLOPs, and
  the backward pass as twice the forward (one product for the input gradient,
  one for the weight gradient):

    encoder   = 6 * W * S,  W = L * (4 H^2 + 2 H I)
                (query, key, value and attention-output kernels, H x H each;
                intermediate and output kernels, H x I each)
    attention = 3 * L * (2 S^2 H + 2 S^2 H) = 12 * L * S^2 * H
                (Q K^T and probs V over all heads, forward + backward)
    mlm_head  = 6 * P * (H^2 + H V)
                (transform dense and tied vocab projection, on the P masked
                positions only, as run_pretraining.get_masked_lm_output does)

  Embedding lookups, biases, layer norms, softmax, the pooler and the
  next-sentence head are left out (< 1% for the released shapes).

  Args:
    hidden_size: H.
    num_layers: L.
    intermediate_size: I.
    vocab_size: V.
    seq_length: S.
    max_predictions_per_seq: P.

  Returns:
    dict of ints: encoder, attention, mlm_head and total FLOPs per example.
  """
  h, s, p = hidden_size, seq_length, max_predictions_per_seq
  encoder_weights = num_layers * (4 * h * h + 2 * h * intermediate_size)
  result = {
      "encoder": 6 * encoder_weights * s,
      "attention": 12 * num_layers * s * s * h,
      "mlm_head": 6 * p * (h * h + h * vocab_size),
  }
  result["total"] = sum(result.values())
  return result


def flops_for_config(config, seq_length, max_predictions_per_seq):
  """`pretraining_flops` of a BertConfig; returns the total per example."""
  return pretraining_flops(
      config.hidden_size, config.num_hidden_layers, config.intermediate_size,
      config.vocab_size, seq_length, max_predictions_per_seq)["total"]


def expand_cells(strategies, config_files, seq_lengths, xla, precisions,
                 per_replica_batches, replicas):
  """The Cartesian product of the axes, in the order given, as Cells."""
  return [Cell(*values) for values in itertools.product(
      strategies, config_files, seq_lengths, xla, precisions,
      per_replica_batches, replicas)]


def cell_name(cell):
  """A directory name such as mirrored-bert_mini-s128-xla_off-fp32-b32-r2."""
  config = os.path.splitext(os.path.basename(cell.config_file))[0]
  return "%s-%s-s%d-xla_%s-%s-b%d-r%d" % (
      cell.strategy, config, cell.seq_length, cell.xla, cell.precision,
      cell.per_replica_batch, cell.replicas)


def series_key(row):
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


def add_mfu(row, flops_per_example, peak_tflops, peak_scales_with_replicas):
  """Sets model_tflops (achieved) and mfu of a row.

  Args:
    row: dict with examples_per_sec and replicas.
    flops_per_example: from `pretraining_flops`.
    peak_tflops: peak of one device, or None (no MFU).
    peak_scales_with_replicas: True when every replica has its own device
      (GPUs); False when the replicas share one CPU whose peak is given.
  """
  eps = row["examples_per_sec"]
  row["model_gflop_per_example"] = flops_per_example / 1e9
  row["model_tflops"] = eps * flops_per_example / 1e12 if eps else None
  peak = None
  if peak_tflops:
    peak = peak_tflops * (row["replicas"] if peak_scales_with_replicas else 1)
  row["peak_tflops"] = peak
  row["mfu"] = row["model_tflops"] / peak if peak and eps else None


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
  """Seed 000's tables: one per strategy/config/seq/XLA group.

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
        "`%s`" % cell_name(Cell(*[row[f] for f in Cell._fields])),
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
  """The whole results.md text."""
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
  fig.tight_layout()
  with atomic_io.atomic_path(path) as tmp:
    fig.savefig(tmp, format="png", dpi=100)
  plt.close(fig)


def available_cores():
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def matmul_peak_gflops(threads, size=PEAK_MATMUL_SIZE, chain=10, trials=5):
  """The best float32 GFLOP/s of chained size x size matmuls, in-process.

  The matmuls are chained (each multiplies the previous product) so that no
  graph optimisation can merge or skip them.

  Args:
    threads: intra- and inter-op threads, as TensorFlow uses for training.
    size: matrix side.
    chain: matmuls per timed call.
    trials: timed calls; the fastest counts.

  Returns:
    GFLOP/s (float).
  """
  import tensorflow as tf2  # pylint: disable=g-import-not-at-top
  tf2.config.threading.set_intra_op_parallelism_threads(threads)
  tf2.config.threading.set_inter_op_parallelism_threads(threads)
  a = tf2.random.normal([size, size])
  # Scaled so that repeated products keep their magnitude.
  b = tf2.random.normal([size, size]) / float(size) ** 0.5

  @tf2.function
  def chained(x):
    for _ in range(chain):
      x = tf2.matmul(x, b)
    return x

  chained(a).numpy()
  best = float("inf")
  for _ in range(trials):
    start = time.perf_counter()
    chained(a).numpy()
    best = min(best, time.perf_counter() - start)
  return chain * 2.0 * size ** 3 / best / 1e9


def measure_cpu_peak(threads):
  """Runs `matmul_peak_gflops` in a fresh subprocess; returns GFLOP/s."""
  result = subprocess.run(
      [sys.executable, os.path.abspath(__file__), "--measure_peak_only",
       "--peak_threads=%d" % threads],
      cwd=REPO_ROOT, env=_child_env(), capture_output=True, text=True,
      timeout=600, check=False)
  if result.returncode != 0:
    raise RuntimeError("CPU peak measurement failed:\n%s" %
                       result.stderr[-2000:])
  return json.loads(result.stdout.strip().splitlines()[-1])["gflops"]


def _child_env():
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return env


def horovod_available():
  """(True, "") or (False, why) for launching horovod cells."""
  if importlib.util.find_spec("horovod") is None:
    return False, ("horovod is not installed (scripts/install_horovod.sh); "
                   "cell skipped")
  if not _horovodrun_path():
    return False, "horovodrun is not on PATH; cell skipped"
  return True, ""


def _horovodrun_path():
  beside_python = os.path.join(os.path.dirname(sys.executable), "horovodrun")
  if os.path.exists(beside_python):
    return beside_python
  return shutil.which("horovodrun")


def cell_command(cell, config_path, input_file, cell_dir, max_predictions,
                 num_steps, warmup_steps, device):
  """The argv that runs one cell.

  Args:
    cell: the Cell.
    config_path: absolute path of its bert_config.json.
    input_file: the records for its sequence length.
    cell_dir: its output directory.
    max_predictions: P of the records.
    num_steps: training steps.
    warmup_steps: steps left out of the throughput figure.
    device: "gpu" or "cpu".

  Returns:
    list of str.
  """
  args = [
      RUN_PRETRAINING, "--do_train",
      "--bert_config_file=%s" % config_path,
      "--input_file=%s" % input_file,
      "--output_dir=%s" % cell_dir,
      "--max_seq_length=%d" % cell.seq_length,
      "--max_predictions_per_seq=%d" % max_predictions,
      "--train_batch_size=%d" % (cell.per_replica_batch * cell.replicas),
      "--num_train_steps=%d" % num_steps,
      # No checkpoint but the last (the Estimator always writes that one).
      "--save_checkpoints_steps=%d" % (num_steps + 1),
      "--keep_checkpoint_max=1",
      "--log_every_n_steps=%d" % max(1, min(10, num_steps)),
      "--throughput_warmup_steps=%d" % warmup_steps,
      "--distribution_strategy=%s" % cell.strategy,
      "--use_fp16=%s" % (cell.precision == "fp16"),
      "--use_bf16=%s" % (cell.precision == "bf16"),
      "--use_xla=%s" % (cell.xla == "on"),
  ]
  if cell.strategy == "horovod":
    return [_horovodrun_path(), "-np", str(cell.replicas), sys.executable
           ] + args
  if device == "gpu":
    args.append("--num_gpus=%d" % cell.replicas)
  else:
    args.append("--cpu_replicas=%d" % cell.replicas)
  return [sys.executable] + args


def _last_error_line(log_path):
  """The most telling line of a failed cell's log: a program's `error: ...`
  (a UserError, possibly behind horovodrun's rank prefix), else the last
  exception line, else the last line."""
  with open(log_path, errors="replace") as f:
    lines = [l.strip() for l in f if l.strip()]
  for line in reversed(lines):
    if "error: " in line:
      return line[line.index("error: "):][:300]
  for line in reversed(lines):
    if "Error" in line:
      return line[:300]
  return lines[-1][:300] if lines else "no output"


def run_cell(command, cell_dir, timeout):
  """Runs one cell in a fresh cell_dir; returns (summary dict or None, note).

  The directory is emptied first: left over from an earlier sweep, its
  checkpoint would make the run resume at its last step and train nothing.
  """
  if os.path.isdir(cell_dir):
    shutil.rmtree(cell_dir)
  os.makedirs(cell_dir)
  log_path = os.path.join(cell_dir, "run.log")
  logging.info("Cell %s: %s", os.path.basename(cell_dir), " ".join(command))
  with open(log_path, "w") as log:
    try:
      result = subprocess.run(command, cwd=REPO_ROOT, env=_child_env(),
                              stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
      return None, "timed out after %d s (log: %s)" % (timeout, log_path)
  if result.returncode != 0:
    return None, "exit %d: %s" % (result.returncode,
                                  _last_error_line(log_path))
  summary_path = os.path.join(cell_dir, "throughput_summary.json")
  if not os.path.exists(summary_path):
    return None, "no throughput_summary.json (log: %s)" % log_path
  with open(summary_path) as f:
    summary = json.load(f)
  if not summary.get("examples_per_sec"):
    return None, ("no steady-state figure: %d steps run, %d warm-up" %
                  (summary.get("steps_run", 0),
                   summary.get("steps_excluded_warmup", 0)))
  return summary, ""


def base_row(cell, device, num_steps):
  """A result row of `cell` with no measurement yet."""
  row = cell._asdict()
  row.update({"device": device,
              "global_batch": cell.per_replica_batch * cell.replicas,
              "num_train_steps": num_steps, "steps_counted": None,
              "examples_per_sec": None, "examples_per_sec_per_replica": None,
              "sequences_per_sec": None, "real_tokens_per_sec": None,
              "status": "ok", "note": "", "cell_dir": ""})
  return row


def synthetic_input(data_dir, seq_length, max_predictions, vocab_size,
                    num_records, num_files):
  """Writes (once) synthetic record files of this shape; returns their glob.

  Several files, because each horovod rank reads whole files of its own.
  """
  from bertkit.perf import synthetic_data  # pylint: disable=g-import-not-at-top
  directory = os.path.join(data_dir, "synthetic_s%d_p%d_v%d" %
                           (seq_length, max_predictions, vocab_size))
  paths = [os.path.join(directory, "part-%05d-of-%05d.tfrecord" %
                        (i, num_files)) for i in range(num_files)]
  os.makedirs(directory, exist_ok=True)
  for seed, path in enumerate(paths):
    if not os.path.exists(path):
      logging.info("Writing %d synthetic records to %s",
                   num_records // num_files, path)
      synthetic_data.write_synthetic_pretraining_records(
          path, max(1, num_records // num_files), seq_length,
          max_predictions, vocab_size, seed=seed)
  return os.path.join(directory, "part-*-of-%05d.tfrecord" % num_files)


def _int_list(values, name):
  raw = getattr(values, name)
  try:
    result = [int(v) for v in raw]
  except ValueError:
    raise UserError("--%s must be a comma-separated list of integers, got %s"
                    % (name, ",".join(raw)))
  if not result or min(result) < 1:
    raise UserError("--%s needs positive integers, got %s" %
                    (name, ",".join(raw)))
  return result


def _choice_list(values, name, allowed):
  result = list(getattr(values, name))
  bad = [v for v in result if v not in allowed] or ([""] if not result else [])
  if bad:
    raise UserError("--%s: %r is not one of %s" %
                    (name, bad[0], ", ".join(allowed)))
  return result


def parse_axes(values):
  """Validates the sweep flags.

  Args:
    values: the parsed FLAGS.

  Returns:
    The list of Cells to run.

  Raises:
    UserError: a bad axis value, a missing config, too few steps.
  """
  for path in values.bert_config_files:
    if not os.path.exists(os.path.join(REPO_ROOT, path)):
      raise UserError("--bert_config_files: %s does not exist" % path)
  if values.num_train_steps <= values.throughput_warmup_steps:
    raise UserError("--num_train_steps=%d must exceed "
                    "--throughput_warmup_steps=%d, or no step is measured" %
                    (values.num_train_steps, values.throughput_warmup_steps))
  return expand_cells(
      _choice_list(values, "strategies", STRATEGIES),
      list(values.bert_config_files), _int_list(values, "seq_lengths"),
      _choice_list(values, "xla", ("off", "on")),
      _choice_list(values, "precisions", PRECISIONS),
      _int_list(values, "per_replica_batches"),
      _int_list(values, "replicas"))


def resolve_peak(device, peak_tflops, peak_threads):
  """(peak TFLOP/s or None, description) for the MFU column."""
  if peak_tflops:
    return peak_tflops, "%.3f TFLOP/s per %s (--peak_tflops)" % (
        peak_tflops, "GPU" if device == "gpu" else "machine")
  if device == "gpu":
    return None, "none given (--peak_tflops), so no MFU"
  threads = peak_threads or available_cores()
  gflops = measure_cpu_peak(threads)
  logging.info("CPU float32 matmul peak: %.1f GFLOP/s (%d threads)", gflops,
               threads)
  return gflops / 1e3, (
      "%.1f GFLOP/s, the best float32 %dx%d matmul rate of this CPU measured "
      "with %d threads (whole machine, shared by the logical replicas)" %
      (gflops, PEAK_MATMUL_SIZE, PEAK_MATMUL_SIZE, threads))


def run_sweep(cells, device, values):
  """Runs every cell; returns the result rows (without efficiency/MFU).

  Args:
    cells: the Cells.
    device: "gpu" or "cpu".
    values: the parsed FLAGS (output_dir, input_file, steps, ...).
  """
  horovod_ok, horovod_note = horovod_available()
  data_dir = os.path.join(values.output_dir, "data")
  num_files = max(cell.replicas for cell in cells)
  rows = []
  for index, cell in enumerate(cells):
    config_path = os.path.join(REPO_ROOT, cell.config_file)
    config = modeling.BertConfig.from_json_file(config_path)
    row = base_row(cell, device, values.num_train_steps)
    row["flops_per_example"] = flops_for_config(
        config, cell.seq_length, values.max_predictions_per_seq)
    rows.append(row)
    if cell.strategy == "horovod" and not horovod_ok:
      row.update(status="skipped", note=horovod_note)
      continue
    if cell.strategy == "one_device" and cell.replicas > 1:
      row.update(status="skipped", note="one_device runs 1 replica")
      continue
    input_file = values.input_file or synthetic_input(
        data_dir, cell.seq_length, values.max_predictions_per_seq,
        config.vocab_size, values.num_synthetic_records, num_files)
    cell_dir = os.path.join(values.output_dir, "cells", cell_name(cell))
    row["cell_dir"] = cell_dir
    logging.info("Cell %d/%d", index + 1, len(cells))
    summary, note = run_cell(
        cell_command(cell, config_path, input_file, cell_dir,
                     values.max_predictions_per_seq, values.num_train_steps,
                     values.throughput_warmup_steps, device),
        cell_dir, values.cell_timeout_seconds)
    if summary is None:
      row.update(status="failed", note=note)
      logging.warning("Cell %s failed: %s", cell_name(cell), note)
      continue
    # Packed records hold several sequences per example (row), and real
    # tokens are what packing improves: both come from the run's summary.
    row.update(examples_per_sec=summary["examples_per_sec"],
               examples_per_sec_per_replica=summary[
                   "examples_per_sec_per_replica"],
               sequences_per_sec=summary.get("sequences_per_sec"),
               real_tokens_per_sec=summary.get("real_tokens_per_sec"),
               steps_counted=summary["steps_counted"])
    computed = summary.get("precision")
    if computed and computed != SUMMARY_PRECISION[cell.precision]:
      row.update(note="computed in %s (the run's `precision:` log line "
                 "says why)" % computed)
    logging.info("Cell %s: %.2f examples/sec", cell_name(cell),
                 row["examples_per_sec"])
  return rows


def op_totals(events):
  """Sums TensorFlow op executions by op type.

  Args:
    events: iterable of (event name, duration in picoseconds). Op executions
      are named "<node name>:<OpType>"; other events (executor and thread
      pool bookkeeping such as "ExecutorState::Process") are skipped.

  Returns:
    list of (op type, milliseconds, executions), most time first. Ops that
    run concurrently each count their own wall time.
  """
  totals = collections.defaultdict(lambda: [0, 0])
  for name, duration_ps in events:
    node, _, op_type = name.rpartition(":")
    if not node or node.endswith(":") or not re.fullmatch(
        r"[A-Za-z_]\w*", op_type):
      continue
    totals[op_type][0] += duration_ps
    totals[op_type][1] += 1
  ranked = sorted(totals.items(), key=lambda item: -item[1][0])
  return [(op, ps / 1e9, count) for op, (ps, count) in ranked]


def trace_events(xplane_path):
  """Yields (name, duration_ps) of the TF op threads of a profiler trace."""
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  space = xplane_pb2.XSpace()
  with open(xplane_path, "rb") as f:
    space.ParseFromString(f.read())
  for plane in space.planes:
    for line in plane.lines:
      if not line.name.startswith("tf_Compute"):
        continue
      for event in line.events:
        yield plane.event_metadata[event.metadata_id].name, event.duration_ps


def top_ops_markdown(totals, limit):
  """A Markdown table of the `limit` costliest op types of `op_totals`."""
  overall = sum(ms for _, ms, _ in totals) or 1.0
  out = ["op type | ms | share | executions", "---|---|---|---"]
  for op, ms, count in totals[:limit]:
    out.append("%s | %.1f | %.1f%% | %d" % (op, ms, 100 * ms / overall, count))
  out.append("all ops | %.1f | 100%% | %d" % (overall, sum(
      c for _, _, c in totals)))
  return "\n".join(out) + "\n"


def latest_trace(profile_dir):
  """The newest *.xplane.pb under <dir>/plugins/profile (or <dir> itself).

  Raises:
    UserError: there is none.
  """
  patterns = [os.path.join(profile_dir, "plugins", "profile", "*",
                           "*.xplane.pb"),
              os.path.join(profile_dir, "*.xplane.pb")]
  paths = [p for pattern in patterns for p in glob.glob(pattern)]
  if not paths:
    raise UserError("--top_ops_of %s: no *.xplane.pb under it or its "
                    "plugins/profile/<run>/ (train with --profile_steps A,B)"
                    % profile_dir)
  return max(paths, key=os.path.getmtime)


def detect_device():
  import tensorflow as tf2  # pylint: disable=g-import-not-at-top
  return "gpu" if tf2.config.list_physical_devices("GPU") else "cpu"


def main(argv):
  del argv
  if FLAGS.measure_peak_only:
    print(json.dumps({"gflops": matmul_peak_gflops(
        FLAGS.peak_threads or available_cores())}))
    return
  if FLAGS.top_ops_of:
    path = latest_trace(FLAGS.top_ops_of)
    print("Trace: %s\n" % path)
    print(top_ops_markdown(op_totals(trace_events(path)), FLAGS.top_ops))
    return
  if not FLAGS.output_dir:
    raise UserError("--output_dir is required")
  cells = parse_axes(FLAGS)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  device = detect_device()
  if device == "cpu":
    logging.info("No GPU visible: replicas are logical CPU devices "
                 "(--cpu_replicas)")
  peak_tflops, peak_description = resolve_peak(device, FLAGS.peak_tflops,
                                               FLAGS.peak_threads)
  rows = run_sweep(cells, device, FLAGS)
  add_scaling_efficiency(rows)
  for row in rows:
    add_mfu(row, row["flops_per_example"], peak_tflops,
            peak_scales_with_replicas=device == "gpu")
  command = " ".join(["python"] + [os.path.basename(sys.argv[0])] +
                     sys.argv[1:])
  write_csv(os.path.join(FLAGS.output_dir, "results.csv"), rows)
  with atomic_io.atomic_open(os.path.join(FLAGS.output_dir,
                                          "results.md")) as f:
    f.write(results_markdown(rows, device, peak_description, command))
  write_plot(os.path.join(FLAGS.output_dir, "results.png"), rows, device)
  logging.info("Wrote results.csv, results.md and results.png to %s",
               FLAGS.output_dir)
  failed = [r for r in rows if r["status"] == "failed"]
  if failed:
    logging.warning("%d cell(s) failed; see results.md", len(failed))


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main))
