"""The benchmark's sweep: one short run_pretraining.py per cell.

A cell is one point of the axes (strategy, model config, sequence length,
XLA, precision, per-replica batch, replicas); each runs in a subprocess of
its own, in a fresh directory, and its figures are those of the run's
throughput_summary.json. The rows returned here carry the measurements;
bertkit.perf.reports adds efficiency and writes them out.
"""

import dataclasses
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys

from absl import logging

from bertkit.common.errors import UserError
from bertkit.engine.distributed import distribution
from bertkit.engine.report import throughput
from bertkit.perf import child_runs
from bertkit.perf import model_flops
from bertkit.perf import synthetic_data
import modeling

STRATEGIES = distribution.STRATEGIES
# The strategies whose cells need an engine of their own, and what installs
# it for the interpreter the cells run with.
INSTALL_SCRIPTS = {"horovod": "scripts/install_horovod.sh",
                   "byteps": "scripts/install_byteps.sh"}
RUN_PRE_BYTEPS = os.path.join(child_runs.REPO_ROOT, "scripts",
                              "run_pre_byteps.sh")
PRECISIONS = ("fp32", "fp16", "bf16")
# What run_pretraining's throughput_summary.json calls each cell's precision
# when it takes effect (--use_fp16 needs a GPU, --use_bf16 oneDNN's kernels).
SUMMARY_PRECISION = {"fp32": "float32", "fp16": "mixed_float16",
                     "bf16": "mixed_bfloat16"}


@dataclasses.dataclass(frozen=True)
class Cell:
  """One point of the sweep's axes: one run.

  Attributes:
    strategy: its --distribution_strategy, one of STRATEGIES.
    config_file: its bert_config.json, relative to the repository.
    seq_length: its --max_seq_length.
    xla: "on" or "off" (--use_xla).
    precision: one of PRECISIONS.
    per_replica_batch: examples per replica per step.
    replicas: GPUs, logical CPU devices, horovod ranks or BytePS workers.
  """
  strategy: str
  config_file: str
  seq_length: int
  xla: str
  precision: str
  per_replica_batch: int
  replicas: int


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


def _int_list(raw, name):
  """The positive integers of the list flag --`name` (strings `raw`)."""
  try:
    result = [int(v) for v in raw]
  except ValueError:
    raise UserError("--%s must be a comma-separated list of integers, got %s"
                    % (name, ",".join(raw)))
  if not result or min(result) < 1:
    raise UserError("--%s needs positive integers, got %s" %
                    (name, ",".join(raw)))
  return result


def _choice_list(raw, name, allowed):
  """The list flag --`name` (strings `raw`), each one of `allowed`."""
  result = list(raw)
  bad = [v for v in result if v not in allowed] or ([""] if not result else [])
  if bad:
    raise UserError("--%s: %r is not one of %s" %
                    (name, bad[0], ", ".join(allowed)))
  return result


def parse_axes(strategies, bert_config_files, seq_lengths, xla, precisions,
               per_replica_batches, replicas, num_train_steps,
               throughput_warmup_steps):
  """Validates the sweep's flags, each given as its flag's value.

  Args:
    strategies, bert_config_files, seq_lengths, xla, precisions,
      per_replica_batches, replicas: the axes, lists of strings (config
      paths relative to the repository).
    num_train_steps: steps of each cell.
    throughput_warmup_steps: its leading steps left out of the figure.

  Returns:
    The list of Cells to run.

  Raises:
    UserError: a bad axis value, a missing config, too few steps, a
      strategy whose engine is not installed here.
  """
  for path in bert_config_files:
    if not os.path.exists(os.path.join(child_runs.REPO_ROOT, path)):
      raise UserError("--bert_config_files: %s does not exist" % path)
  if num_train_steps <= throughput_warmup_steps:
    raise UserError("--num_train_steps=%d must exceed "
                    "--throughput_warmup_steps=%d, or no step is measured" %
                    (num_train_steps, throughput_warmup_steps))
  strategies = _choice_list(strategies, "strategies", STRATEGIES)
  # Here, not at a cell's turn: a sweep must not stop halfway, after hours of
  # cells, at the first cell of an engine that was never installed.
  check_engines(strategies, missing_engines())
  return expand_cells(
      strategies, list(bert_config_files),
      _int_list(seq_lengths, "seq_lengths"),
      _choice_list(xla, "xla", ("off", "on")),
      _choice_list(precisions, "precisions", PRECISIONS),
      _int_list(per_replica_batches, "per_replica_batches"),
      _int_list(replicas, "replicas"))


def missing_engines():
  """What the strategies of engines of their own lack here.

  Returns:
    {strategy: what is missing, for the interpreter the cells run with} for
    horovod (the package or its horovodrun) and byteps; a strategy that can
    run here is absent.
  """
  missing = {}
  if importlib.util.find_spec("horovod") is None:
    missing["horovod"] = "horovod is not installed for %s" % sys.executable
  elif not _horovodrun_path():
    missing["horovod"] = ("horovodrun is neither beside %s nor on PATH" %
                          sys.executable)
  if importlib.util.find_spec("byteps") is None:
    missing["byteps"] = "byteps is not installed for %s" % sys.executable
  return missing


def check_engines(strategies, missing):
  """Refuses strategies whose engine is missing, all of them in one line.

  Args:
    strategies: the sweep's --strategies.
    missing: `missing_engines()`.

  Raises:
    UserError: a strategy of `strategies` is in `missing`.
  """
  refused = ["--strategies has %s, but %s: run %s, or leave %s out of "
             "--strategies" % (strategy, missing[strategy],
                               INSTALL_SCRIPTS[strategy], strategy)
             for strategy in dict.fromkeys(strategies) if strategy in missing]
  if refused:
    raise UserError("; ".join(refused))


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

  Raises:
    UserError: a horovod cell where horovodrun is not installed.
  """
  args = [
      child_runs.RUN_PRETRAINING, "--do_train",
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
    horovodrun = _horovodrun_path()
    if not horovodrun:
      check_engines([cell.strategy], missing_engines())
    return [horovodrun, "-np", str(cell.replicas), sys.executable] + args
  if cell.strategy == "byteps":
    # The launcher's own flags first; the cell's, after `--`, override them.
    return ["env", "PYTHON=%s" % sys.executable, RUN_PRE_BYTEPS,
            "-n", str(cell.replicas), "-c", config_path, "-i", input_file,
            "-o", cell_dir, "--"] + args[1:]
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
      result = subprocess.run(command, cwd=child_runs.REPO_ROOT,
                              env=child_runs.child_env(), stdout=log,
                              stderr=subprocess.STDOUT, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
      return None, "timed out after %d s (log: %s)" % (timeout, log_path)
  if result.returncode != 0:
    return None, "exit %d: %s" % (result.returncode,
                                  _last_error_line(log_path))
  summary_path = os.path.join(cell_dir, throughput.SUMMARY_FILE)
  if not os.path.exists(summary_path):
    return None, "no %s (log: %s)" % (throughput.SUMMARY_FILE, log_path)
  with open(summary_path) as f:
    summary = json.load(f)
  if not summary.get("examples_per_sec"):
    return None, ("no steady-state figure: %d steps run, %d warm-up" %
                  (summary.get("steps_run", 0),
                   summary.get("steps_excluded_warmup", 0)))
  return summary, ""


def base_row(cell, device, num_steps):
  """A result row of `cell` with no measurement yet."""
  row = dataclasses.asdict(cell)
  row.update({"device": device,
              "global_batch": cell.per_replica_batch * cell.replicas,
              "num_train_steps": num_steps, "steps_counted": None,
              "examples_per_sec": None, "examples_per_sec_per_replica": None,
              "sequences_per_sec": None, "real_tokens_per_sec": None,
              "status": "ok", "note": "", "cell_dir": ""})
  return row


def _skip_reason(cell):
  """Why `cell` is left out of the sweep, or "" when it runs."""
  if cell.strategy == "one_device" and cell.replicas > 1:
    return "one_device runs 1 replica"
  return ""


def _measure(row, cell, config_path, input_file, device, options):
  """Runs `cell` and puts its figures (or why it failed) into `row`.

  Args:
    row: the cell's `base_row`, updated in place.
    cell: the Cell.
    config_path: absolute path of its bert_config.json.
    input_file: its records.
    device: "gpu" or "cpu".
    options: the benchmark_options.BenchmarkOptions.
  """
  cell_dir = os.path.join(options.output_dir, "cells", cell_name(cell))
  row["cell_dir"] = cell_dir
  summary, note = run_cell(
      cell_command(cell, config_path, input_file, cell_dir,
                   options.max_predictions_per_seq, options.num_train_steps,
                   options.throughput_warmup_steps, device),
      cell_dir, options.cell_timeout_seconds)
  if summary is None:
    row.update(status="failed", note=note)
    logging.warning("Cell %s failed: %s", cell_name(cell), note)
    return
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


def run_sweep(cells, device, options):
  """Runs every cell; returns the result rows (without efficiency/MFU).

  Args:
    cells: the Cells.
    device: "gpu" or "cpu".
    options: the BenchmarkOptions. Without an input_file, each shape's synthetic
      records are written once under output_dir/data.

  Returns:
    list of row dicts, one per cell in order: `base_row`'s keys, the
    measured figures and flops_per_example.
  """
  data_dir = os.path.join(options.output_dir, "data")
  num_files = max(cell.replicas for cell in cells)
  rows = []
  for index, cell in enumerate(cells):
    config_path = os.path.join(child_runs.REPO_ROOT, cell.config_file)
    config = modeling.BertConfig.from_json_file(config_path)
    row = base_row(cell, device, options.num_train_steps)
    row["flops_per_example"] = model_flops.flops_for_config(
        config, cell.seq_length, options.max_predictions_per_seq)
    rows.append(row)
    skip = _skip_reason(cell)
    if skip:
      row.update(status="skipped", note=skip)
      continue
    input_file = options.input_file or synthetic_data.synthetic_input(
        data_dir, cell.seq_length, options.max_predictions_per_seq,
        config.vocab_size, options.num_synthetic_records, num_files)
    logging.info("Cell %d/%d", index + 1, len(cells))
    _measure(row, cell, config_path, input_file, device, options)
  return rows
