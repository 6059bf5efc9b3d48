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
bertkit/engine/throughput.py). Scaling efficiency compares with the 1-replica
cell of the same series; model FLOP utilisation (MFU) divides the model FLOPs
of bertkit.perf.model_flops.pretraining_flops by a peak: --peak_tflops per
GPU, or on a CPU-only machine the whole CPU's float32 matmul rate, measured
in a subprocess with the training's thread count unless --peak_tflops gives
it.

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

from bertkit.common import console

# Before TensorFlow is imported: its C++ runtime reads its log level then.
console.quiet_native_logs(sys.argv)
# pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app
from absl import flags
from absl import logging

from bertkit.common.errors import main_with_user_errors, parse_flags
from bertkit.common import shared_flags
from bertkit.perf import accuracy_reports
from bertkit.perf import cpu_peak
from bertkit.perf import model_flops
from bertkit.perf import profiles
from bertkit.perf import reports
from bertkit.perf import sweep

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
                    "Replica counts: GPUs, or logical CPU devices without "
                    "GPUs, or horovod ranks or BytePS workers.")
  flags.DEFINE_list("precisions", ["fp32"],
                    "Any of fp32, fp16 (--use_fp16), bf16 (--use_bf16).")
  flags.DEFINE_list("per_replica_batches", ["32"],
                    "Per-replica batch sizes; the global batch is this times "
                    "the replicas.")
  flags.DEFINE_list("strategies", ["mirrored"],
                    "Any of %s; horovod cells are launched with horovodrun "
                    "-np N, byteps cells with scripts/run_pre_byteps.sh -n N "
                    "(a scheduler, a server, N workers). A strategy whose "
                    "engine is not installed is refused before any cell "
                    "runs." %
                    ", ".join(sweep.STRATEGIES))
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
                      "trace under this run's output_dir (from "
                      "--profile_steps) as a Markdown table, and exit.")
  flags.DEFINE_integer("top_ops", 15, "Rows of the --top_ops_of table.")
  flags.DEFINE_bool("measure_peak_only", False,
                    "Print the CPU float32 matmul peak as JSON and exit (what "
                    "the benchmark runs in its peak subprocess).")
  flags.DEFINE_list("report", None,
                    "Run directories of run_pretraining.py "
                    "(--eval_every_n_steps): write their results table "
                    "(model, replicas, precision, recipe; held-out accuracy "
                    "and time to target, the GLUE score of RUN_DIR/glue "
                    "(run_glue.py) if any; examples/sec, real tokens/sec; "
                    "train time) as results_accuracy.md/.csv/.json in "
                    "--output_dir, and exit.")
  flags.DEFINE_float("report_target", None,
                     "--report: the masked_lm_accuracy whose time is "
                     "reported (default: each run's "
                     "--target_masked_lm_accuracy).")


def main(argv):
  del argv
  if FLAGS.measure_peak_only:
    print(json.dumps({"gflops": cpu_peak.matmul_peak_gflops(
        FLAGS.peak_threads or cpu_peak.available_cores())}))
    return
  if FLAGS.top_ops_of:
    path = profiles.latest_trace(FLAGS.top_ops_of)
    print("Trace: %s\n" % path)
    print(profiles.trace_report(path, FLAGS.top_ops))
    return
  shared_flags.require(FLAGS, ("output_dir",))
  if FLAGS.report:
    print(accuracy_reports.write_report(FLAGS.output_dir, FLAGS.report,
                                        FLAGS.report_target))
    return
  cells = sweep.parse_axes(
      FLAGS.strategies, FLAGS.bert_config_files, FLAGS.seq_lengths,
      FLAGS.xla, FLAGS.precisions, FLAGS.per_replica_batches, FLAGS.replicas,
      FLAGS.num_train_steps, FLAGS.throughput_warmup_steps)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  device = cpu_peak.detect_device()
  if device == "cpu":
    logging.info("No GPU visible: replicas are logical CPU devices "
                 "(--cpu_replicas)")
  peak_tflops, peak_description = cpu_peak.resolve_peak(
      device, FLAGS.peak_tflops, FLAGS.peak_threads)
  rows = sweep.run_sweep(cells, device, sweep.SweepOptions(
      output_dir=FLAGS.output_dir, input_file=FLAGS.input_file,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      num_train_steps=FLAGS.num_train_steps,
      throughput_warmup_steps=FLAGS.throughput_warmup_steps,
      num_synthetic_records=FLAGS.num_synthetic_records,
      cell_timeout_seconds=FLAGS.cell_timeout_seconds))
  reports.add_scaling_efficiency(rows)
  for row in rows:
    model_flops.add_mfu(row, row["flops_per_example"], peak_tflops,
                        peak_scales_with_replicas=device == "gpu")
  command = " ".join(["python"] + [os.path.basename(sys.argv[0])] +
                     sys.argv[1:])
  reports.write_results(FLAGS.output_dir, rows, device, peak_description,
                        command)
  logging.info("Wrote results.csv, results.md and results.png to %s",
               FLAGS.output_dir)
  failed = [r for r in rows if r["status"] == "failed"]
  if failed:
    logging.warning("%d cell(s) failed; see results.md", len(failed))


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main), flags_parser=parse_flags)
