"""run_pretraining.py against its PyTorch peer, back to back, with MFU.

In one run on one machine:

  1. training records made the way users make them: create_vocab.py and
     create_pretraining_data.py on real text (--corpus, default
     sample_data/corpus.txt), or --input_file records of your own;
  2. the best float32 matmul rate NumPy reaches (2048 x 2048 np.matmul, best
     of --numpy_trials, measured before the first round and after each one,
     the best of all counting): the yardstick of model FLOP utilisation
     (MFU), from a library that is neither of the two contestants;
  3. --rounds rounds per precision (--precisions: fp32, and bf16 =
     run_pretraining.py --use_bf16 against the peer under
     torch.autocast("cpu", dtype=torch.bfloat16)), each timing our
     run_pretraining.py (one device, fresh output directories) and the
     PyTorch peer (benchmarks/pytorch_peer.py: BertModel and the heads,
     sparse prediction, SDPA attention; --peer_compile: torch.compile),
     in alternating order (ours
     first in even rounds), so that a change in the machine's load hits both
     alike.

Both contestants are timed as a user times a training command: the
whole-process wall clock of the same command with --short_steps and with
--long_steps; examples/sec = batch x (long - short) / (difference of the two
wall times). Start-up and graph building cancel out; every cost that grows
with the steps or comes with a longer run (input pipeline, hooks,
checkpoints, the session's close) counts.

Ours runs with the environment as it is: the programs turn TensorFlow's
oneDNN kernels on (which the bfloat16 rewrite needs) unless
TF_ENABLE_ONEDNN_OPTS is set. The CPU's model and flags that decide bfloat16
speed (avx512_bf16, amx_bf16, amx_tile, avx512f) are recorded beside the
figures.

Prints one line per run and a summary per precision: the medians of both,
the median of the per-round ratios, and MFU = examples/sec x model FLOPs per
example (bertkit.perf.model_flops.pretraining_flops) / NumPy's rate. Writes
the same to OUTPUT_DIR/comparison.json.

Example (BERT-mini, seq 128, batch 32, 20 predictions):
  python benchmarks/compare_pytorch.py --output_dir=/tmp/vs_torch
"""

import json
import os
import statistics
import shutil
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bertkit.common import atomic_io
from bertkit.engine.loop import engine_setup
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs
from bertkit.perf import cpu_peak
from bertkit.perf import model_flops
from bertkit.perf import sweep
import modeling

CPU_FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "amx_bf16",
                         "amx_tile")


def numpy_matmul_gflops(size=cpu_peak.PEAK_MATMUL_SIZE, trials=5):
  """Best float32 GFLOP/s of one size x size np.matmul over `trials` calls."""
  rng = np.random.RandomState(0)
  a = rng.standard_normal((size, size)).astype(np.float32)
  b = rng.standard_normal((size, size)).astype(np.float32)
  np.matmul(a, b)
  best = float("inf")
  for _ in range(trials):
    start = time.perf_counter()
    np.matmul(a, b)
    best = min(best, time.perf_counter() - start)
  return 2.0 * size ** 3 / best / 1e9


def cpu_description():
  """The CPU's model name and its flags that matter to bfloat16 speed."""
  model = ""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          model = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  flags = engine_setup.cpu_flags()
  return {"model": model, "cores": len(os.sched_getaffinity(0)),
          "flags": {name: name in flags for name in CPU_FLAGS_OF_INTEREST}}


def make_records(args, vocab_size):
  """Records from --corpus by create_vocab.py + create_pretraining_data.py
  (once per output directory); returns the record file."""
  data_dir = os.path.join(args.output_dir, "data")
  records = os.path.join(data_dir, "pretraining.tfrecord")
  if os.path.exists(records):
    return records
  os.makedirs(data_dir, exist_ok=True)
  vocab = os.path.join(data_dir, "vocab.txt")
  for argv in (
      ["create_vocab.py", "--input_file=%s" % args.corpus,
       "--output_file=%s" % vocab, "--vocab_size=%d" % vocab_size],
      ["create_pretraining_data.py", "--input_file=%s" % args.corpus,
       "--output_file=%s" % records, "--vocab_file=%s" % vocab,
       "--max_seq_length=%d" % args.max_seq_length,
       "--max_predictions_per_seq=%d" % args.max_predictions_per_seq]):
    child_runs.wall_seconds([sys.executable] + argv, child_runs.child_env(),
                            args.timeout)
  return records


def rate_from_two_runs(batch, short_steps, long_steps, short_seconds,
                       long_seconds):
  """examples/sec from the wall times of a short and a long run."""
  return child_runs.count_rate(batch * short_steps, batch * long_steps,
                              short_seconds, long_seconds)


def ours_command(args, input_file, run_dir, precision, steps):
  cell = sweep.Cell("one_device", args.bert_config_file, args.max_seq_length,
                    "off", precision, args.train_batch_size, 1)
  return sweep.cell_command(
      cell, os.path.abspath(args.bert_config_file), input_file, run_dir,
      args.max_predictions_per_seq, steps, 1, "cpu")


def peer_command(args, precision, steps):
  return [sys.executable, child_runs.PYTORCH_PEER,
          "--bert_config_file=%s" % args.bert_config_file,
          "--max_seq_length=%d" % args.max_seq_length,
          "--max_predictions_per_seq=%d" % args.max_predictions_per_seq,
          "--train_batch_size=%d" % args.train_batch_size,
          "--num_steps=%d" % steps, "--warmup_steps=0"] + (
              ["--bf16"] if precision == "bf16" else []) + (
                  ["--compile"] if args.peer_compile else [])


def run_ours(args, input_file, run_dir, precision):
  """Our whole-process examples/sec: the --short_steps and --long_steps runs."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  seconds = {}
  for steps in (args.short_steps, args.long_steps):
    directory = "%s_%dsteps" % (run_dir, steps)
    shutil.rmtree(directory, ignore_errors=True)
    seconds[steps] = child_runs.wall_seconds(
        ours_command(args, input_file, directory, precision, steps), env,
        args.timeout)
  return seconds


def run_peer(args, precision):
  """The peer's whole-process wall times of the two step counts."""
  return {steps: child_runs.wall_seconds(peer_command(args, precision, steps),
                                         dict(os.environ), args.timeout)
          for steps in (args.short_steps, args.long_steps)}


def summarize(rounds, numpy_gflops, gflop_per_example):
  """Medians, the median per-round ratio and MFU of both against NumPy."""
  ours = statistics.median(r["ours"] for r in rounds)
  peer = statistics.median(r["pytorch"] for r in rounds)
  return {
      "ours_examples_per_sec": ours,
      "pytorch_examples_per_sec": peer,
      "ratio": statistics.median(r["ours"] / r["pytorch"] for r in rounds),
      "numpy_matmul_gflops": numpy_gflops,
      "model_gflop_per_example": gflop_per_example,
      "ours_mfu": ours * gflop_per_example / numpy_gflops,
      "pytorch_mfu": peer * gflop_per_example / numpy_gflops,
  }


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--bert_config_file", type=benchmark_args.existing_file,
                      default=os.path.join(REPO_ROOT, "configs",
                                           "bert_mini.json"))
  parser.add_argument("--corpus", type=benchmark_args.existing_file,
                      default=os.path.join(REPO_ROOT, "sample_data",
                                           "corpus.txt"),
                      help="text to make the training records from")
  parser.add_argument("--input_file", type=benchmark_args.existing_file,
                      help="pretraining records to use instead of --corpus")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--precisions", default="fp32,bf16",
                      help="fp32 and/or bf16, comma-separated")
  parser.add_argument("--peer_compile", action="store_true",
                      help="the peer's encoder through torch.compile")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--short_steps", type=int, default=10)
  parser.add_argument("--long_steps", type=int, default=40)
  parser.add_argument("--numpy_trials", type=int, default=10)
  parser.add_argument("--timeout", type=int, default=3600,
                      help="seconds allowed to one training")
  args = parser.parse_args(argv)
  args.precisions = args.precisions.split(",")
  if any(p not in ("fp32", "bf16") for p in args.precisions):
    parser.error("--precisions: fp32 and/or bf16, got %s" %
                 ",".join(args.precisions))
  if not 0 < args.short_steps < args.long_steps:
    parser.error("need 0 < --short_steps < --long_steps")
  return args


def main(args):
  config = modeling.BertConfig.from_json_file(args.bert_config_file)
  gflop_per_example = model_flops.flops_for_config(
      config, args.max_seq_length, args.max_predictions_per_seq) / 1e9
  input_file = args.input_file or make_records(args, config.vocab_size)
  cpu = cpu_description()
  numpy_rates = [numpy_matmul_gflops(trials=args.numpy_trials)]
  print("cpu: %s, %d cores, %s" % (
      cpu["model"], cpu["cores"], ", ".join(
          "%s %s" % (k, "yes" if v else "no")
          for k, v in cpu["flags"].items())))
  print("records: %s; model: %.3f GFLOP/example; numpy float32 matmul "
        "(2048x2048, best of %d): %.1f GFLOP/s" % (
            input_file, gflop_per_example, args.numpy_trials, numpy_rates[0]),
        flush=True)
  rounds = {precision: [] for precision in args.precisions}
  for i in range(args.rounds):
    for precision in args.precisions:
      result = {}
      order = ("ours", "pytorch") if i % 2 == 0 else ("pytorch", "ours")
      for who in order:
        if who == "ours":
          seconds = run_ours(args, input_file, os.path.join(
              args.output_dir, "ours_%s_round%d" % (precision, i)), precision)
        else:
          seconds = run_peer(args, precision)
        result[who] = rate_from_two_runs(
            args.train_batch_size, args.short_steps, args.long_steps,
            seconds[args.short_steps], seconds[args.long_steps])
        result[who + "_wall_seconds"] = seconds
        print("round %d %s %-7s %d steps %.1f s, %d steps %.1f s: %s "
              "examples/sec" % (
                  i, precision, who, args.short_steps,
                  seconds[args.short_steps], args.long_steps,
                  seconds[args.long_steps],
                  "%.2f" % result[who] if result[who] else "n/a"), flush=True)
      rounds[precision].append(result)
    numpy_rates.append(numpy_matmul_gflops(trials=args.numpy_trials))
    print("round %d numpy   %6.1f GFLOP/s" % (i, numpy_rates[-1]), flush=True)
  numpy_gflops = max(numpy_rates)
  report = {"cpu": cpu, "records": input_file,
            "peer_compile": args.peer_compile,
            "timing": "whole-process wall, %d minus %d steps" % (
                args.long_steps, args.short_steps),
            "numpy_matmul_gflops_each": numpy_rates}
  for precision, results in rounds.items():
    counted = [r for r in results if r["ours"] and r["pytorch"]]
    summary = summarize(counted, numpy_gflops, gflop_per_example) if (
        counted) else {}
    summary["rounds"] = results
    report[precision] = summary
    if counted:
      print("%s: ours %.2f examples/sec, pytorch %.2f (medians of %d rounds); "
            "ratio %.2fx (median per round); MFU against numpy's %.1f "
            "GFLOP/s: ours %.0f%%, pytorch %.0f%%" % (
                precision, summary["ours_examples_per_sec"],
                summary["pytorch_examples_per_sec"], len(counted),
                summary["ratio"], numpy_gflops, 100 * summary["ours_mfu"],
                100 * summary["pytorch_mfu"]))
  if "fp32" in report and "bf16" in report and report["fp32"].get(
      "ours_examples_per_sec") and report["bf16"].get("ours_examples_per_sec"):
    report["ours_bf16_over_fp32"] = (report["bf16"]["ours_examples_per_sec"] /
                                     report["fp32"]["ours_examples_per_sec"])
    print("ours bf16 / fp32: %.2fx" % report["ours_bf16_over_fp32"])
  with atomic_io.atomic_open(os.path.join(args.output_dir,
                                           "comparison.json")) as f:
    json.dump(report, f, indent=2)
  return report


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
