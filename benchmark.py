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
bertkit/engine/report/throughput.py). Scaling efficiency compares with the
1-replica cell of the same series; model FLOP utilisation (MFU) divides the
model FLOPs of bertkit.perf.model_flops.pretraining_flops by a peak:
--peak_tflops per GPU, or on a CPU-only machine the whole CPU's float32 matmul
rate, measured in a subprocess with the training's thread count unless
--peak_tflops gives it.

Without GPUs every replica is a logical CPU device (--cpu_replicas N); the
replicas then share the same cores, and the tables say so.

With --report=RUN_DIRS it runs nothing: it writes the results table of
finished runs (bertkit/perf/accuracy_reports.py: configuration, held-out
masked-LM accuracy and time to target, the GLUE score when run_glue.py
wrote RUN_DIR/glue/glue_results.json, throughput, train time) as
results_accuracy.md/.csv/.json.

Examples:
  python benchmark.py --output_dir=/tmp/bench --replicas=1,2 \
    --precisions=fp32,fp16 --per_replica_batches=8 \
    --bert_config_files=configs/bert_mini.json --seq_lengths=128
  python benchmark.py --output_dir=/tmp/table --report=/tmp/run_a,/tmp/run_b \
    --report_target=0.3
"""

import json
import os
import sys

from absl import logging

from bertkit.common import programs
from bertkit.perf.benchmark_options import BenchmarkOptions


def run(opts):
  """Runs the sweep (or the report, the top ops, the peak) `opts`
  (BenchmarkOptions) ask for."""
  if opts.measure_peak_only:
    print_peak(opts)
  elif opts.top_ops_of:
    print_top_ops(opts)
  elif opts.report:
    print_accuracy_report(opts)
  else:
    run_sweep(opts)


# pylint: disable=g-import-not-at-top
def print_peak(opts):
  from bertkit.perf import cpu_peak
  print(json.dumps({"gflops": cpu_peak.matmul_peak_gflops(
      opts.peak_threads or cpu_peak.available_cores())}))


def print_top_ops(opts):
  from bertkit.perf import profiles
  path = profiles.latest_trace(opts.top_ops_of)
  print("Trace: %s\n" % path)
  print(profiles.trace_report(path, opts.top_ops))


def print_accuracy_report(opts):
  from bertkit.perf import accuracy_reports
  print(accuracy_reports.write_report(opts.output_dir, opts.report,
                                      opts.report_target))


def run_sweep(opts):
  """Every cell of the sweep's axes, each a whole process; results.csv, .md
  and .png in --output_dir."""
  from bertkit.perf import cpu_peak
  from bertkit.perf import model_flops
  from bertkit.perf import reports
  from bertkit.perf import sweep
  cells = sweep.parse_axes(
      opts.strategies, opts.bert_config_files, opts.seq_lengths, opts.xla,
      opts.precisions, opts.per_replica_batches, opts.replicas,
      opts.num_train_steps, opts.throughput_warmup_steps)
  os.makedirs(opts.output_dir, exist_ok=True)
  device = cpu_peak.detect_device()
  if device == "cpu":
    logging.info("No GPU visible: replicas are logical CPU devices "
                 "(--cpu_replicas)")
  peak_tflops, peak_description = cpu_peak.resolve_peak(
      device, opts.peak_tflops, opts.peak_threads)
  rows = sweep.run_sweep(cells, device, opts)
  reports.add_scaling_efficiency(rows)
  for row in rows:
    model_flops.add_mfu(row, row["flops_per_example"], peak_tflops,
                        peak_scales_with_replicas=device == "gpu")
  command = " ".join(["python"] + [os.path.basename(sys.argv[0])] +
                     sys.argv[1:])
  reports.write_results(opts.output_dir, rows, device, peak_description,
                        command)
  logging.info("Wrote results.csv, results.md and results.png to %s",
               opts.output_dir)
  failed = [r for r in rows if r["status"] == "failed"]
  if failed:
    logging.warning("%d cell(s) failed; see results.md", len(failed))


if __name__ == "__main__":
  programs.main(BenchmarkOptions, run)
