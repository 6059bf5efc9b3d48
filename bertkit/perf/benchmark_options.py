"""What benchmark.py is told: the sweep's axes, what every cell shares, and
the modes that run no sweep (a report, a profile's top ops, the CPU peak).
TensorFlow-free, as every program's options are."""

import dataclasses
from typing import Optional, Tuple

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.common.option_fields import option


@dataclasses.dataclass(frozen=True, kw_only=True)
class BenchmarkOptions:
  """What benchmark.py is told; a sweep's cells share every field but the
  axes (sweep.parse_axes)."""
  output_dir: Optional[str] = option(
      None, "Where results.csv/.md/.png and one directory per cell "
      "(cells/<name>) go; needed but by --top_ops_of and "
      "--measure_peak_only.", unset="none")
  input_file: Optional[str] = option(
      None, "Pretraining TFRecords for every cell (comma-separated globs).",
      unset="synthetic records of the right shape, written under "
      "output_dir/data")
  bert_config_files: Tuple[str, ...] = option(("configs/bert_mini.json",),
                                              "Model configs to sweep.")
  seq_lengths: Tuple[str, ...] = option(("128",),
                                        "Sequence lengths to sweep.")
  max_predictions_per_seq: int = option(20, "Masked positions per sequence "
                                        "(P).")
  replicas: Tuple[str, ...] = option(
      ("1", "2"), "Replica counts: GPUs, or logical CPU devices without GPUs, "
      "or horovod ranks or BytePS workers.")
  precisions: Tuple[str, ...] = option(
      ("fp32",), "Any of fp32, fp16 (--use_fp16), bf16 (--use_bf16).")
  per_replica_batches: Tuple[str, ...] = option(
      ("32",), "Per-replica batch sizes; the global batch is this times the "
      "replicas.")
  strategies: Tuple[str, ...] = option(
      ("mirrored",), "Any of %s; horovod cells are launched with horovodrun "
      "-np N, byteps cells with scripts/run_pre_byteps.sh -n N (a scheduler, "
      "a server, N workers). A strategy whose engine is not installed is "
      "refused before any cell runs." % ", ".join(options.STRATEGIES))
  xla: Tuple[str, ...] = option(("off",), "off and/or on (--use_xla).")
  num_train_steps: int = option(30, "Training steps of each cell.")
  throughput_warmup_steps: int = option(
      10, "Leading steps of each cell left out of its figure.")
  peak_tflops: Optional[float] = option(
      None, "Peak TFLOP/s for MFU: of one GPU, or on a CPU-only machine of "
      "the whole CPU.", unset="on CPU: measured with a float32 matmul; on "
      "GPU: no MFU")
  peak_threads: Optional[int] = option(
      None, "Threads of the CPU peak measurement.",
      unset="the cores available to this process, as training uses")
  num_synthetic_records: int = option(
      1024, "Synthetic records of each shape (read repeatedly), split over "
      "as many files as the most replicas.")
  cell_timeout_seconds: int = option(3600, "A cell running longer is "
                                     "stopped and marked failed.")
  top_ops_of: Optional[str] = option(
      None, "Print the costliest op types of the newest profiler trace under "
      "this run's output_dir (from --profile_steps) as a Markdown table, and "
      "exit.", unset="none")
  top_ops: int = option(15, "Rows of the --top_ops_of table.")
  measure_peak_only: bool = option(
      False, "Print the CPU float32 matmul peak as JSON and exit (what the "
      "benchmark runs in its peak subprocess).")
  report: Optional[Tuple[str, ...]] = option(
      None, "Run directories of run_pretraining.py (--eval_every_n_steps): "
      "write their results table (model, replicas, precision, recipe; "
      "held-out accuracy and time to target, the GLUE score of RUN_DIR/glue "
      "(run_glue.py) if any; examples/sec, real tokens/sec; train time) as "
      "results_accuracy.md/.csv/.json in --output_dir, and exit.",
      unset="none: run the sweep")
  report_target: Optional[float] = option(
      None, "--report: the masked_lm_accuracy whose time is reported.",
      unset="each run's --target_masked_lm_accuracy")

  def __post_init__(self):
    option_fields.check_fields(self)
    if not (self.output_dir or self.top_ops_of or self.measure_peak_only):
      raise UserError("--output_dir is required")
