"""run_pretraining.py against its PyTorch peer, back to back, with MFU.

In one run on one machine:

  1. the best float32 matmul rate NumPy reaches (2048 x 2048 np.matmul, best
     of --numpy_trials, measured before the first round and after each one,
     the best of all counting): the yardstick of model FLOP utilisation
     (MFU), from a library that is neither of the two contestants;
  2. --rounds rounds, each training our run_pretraining.py (one device, a
     fresh output directory, synthetic records of the shape) and the PyTorch
     peer (benchmarks/pytorch_peer.py) with the same shapes, in alternating
     order (ours first in even rounds), so that a change in the machine's
     load hits both alike.

Prints one line per run and a summary: the medians of both, the median of
the per-round ratios, and MFU = examples/sec x model FLOPs per example
(benchmark.pretraining_flops) / NumPy's rate. Writes the same to
OUTPUT_DIR/comparison.json.

Example (BERT-mini, seq 128, batch 32, 20 predictions):
  python benchmarks/compare_pytorch.py --output_dir=/tmp/vs_torch
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import atomic_io  # pylint: disable=g-import-not-at-top,wrong-import-position
import benchmark  # pylint: disable=g-import-not-at-top,wrong-import-position
import modeling  # pylint: disable=g-import-not-at-top,wrong-import-position

PEER = os.path.join(REPO_ROOT, "benchmarks", "pytorch_peer.py")


def numpy_matmul_gflops(size=benchmark.PEAK_MATMUL_SIZE, trials=5):
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


def run_ours(args, input_file, run_dir):
  """One run_pretraining.py training; returns its steady-state examples/sec."""
  cell = benchmark.Cell("one_device", args.bert_config_file,
                        args.max_seq_length, "off", "fp32",
                        args.train_batch_size, 1)
  command = benchmark.cell_command(
      cell, os.path.abspath(args.bert_config_file), input_file, run_dir,
      args.max_predictions_per_seq, args.num_steps + args.warmup_steps,
      args.warmup_steps, "cpu")
  summary, note = benchmark.run_cell(command, run_dir, args.timeout)
  if summary is None:
    raise RuntimeError("run_pretraining.py failed: %s" % note)
  return summary["examples_per_sec"]


def run_peer(args):
  """One PyTorch peer training; returns its examples/sec."""
  result = subprocess.run(
      [sys.executable, PEER, "--bert_config_file=%s" % args.bert_config_file,
       "--max_seq_length=%d" % args.max_seq_length,
       "--max_predictions_per_seq=%d" % args.max_predictions_per_seq,
       "--train_batch_size=%d" % args.train_batch_size,
       "--num_steps=%d" % args.num_steps,
       "--warmup_steps=%d" % args.warmup_steps],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=args.timeout,
      check=False)
  if result.returncode != 0:
    raise RuntimeError("pytorch_peer.py failed:\n%s" % result.stderr[-2000:])
  return json.loads(result.stdout.strip().splitlines()[-1])["examples_per_sec"]


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
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--bert_config_file",
                      default=os.path.join(REPO_ROOT, "configs",
                                           "bert_mini.json"))
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--num_steps", type=int, default=20,
                      help="timed steps of each training")
  parser.add_argument("--warmup_steps", type=int, default=10,
                      help="untimed steps before them")
  parser.add_argument("--numpy_trials", type=int, default=10)
  parser.add_argument("--timeout", type=int, default=3600,
                      help="seconds allowed to one training")
  return parser.parse_args(argv)


def main(args):
  config = modeling.BertConfig.from_json_file(args.bert_config_file)
  gflop_per_example = benchmark.flops_for_config(
      config, args.max_seq_length, args.max_predictions_per_seq) / 1e9
  input_file = benchmark.synthetic_input(
      os.path.join(args.output_dir, "data"), args.max_seq_length,
      args.max_predictions_per_seq, config.vocab_size,
      num_records=max(1024, 4 * args.train_batch_size), num_files=1)
  numpy_rates = [numpy_matmul_gflops(trials=args.numpy_trials)]
  print("model: %.3f GFLOP/example; numpy float32 matmul (2048x2048, best "
        "of %d): %.1f GFLOP/s" % (gflop_per_example, args.numpy_trials,
                                  numpy_rates[0]), flush=True)
  rounds = []
  for i in range(args.rounds):
    result = {}
    order = ("ours", "pytorch") if i % 2 == 0 else ("pytorch", "ours")
    for who in order:
      if who == "ours":
        result[who] = run_ours(args, input_file, os.path.join(
            args.output_dir, "ours_round%d" % i))
      else:
        result[who] = run_peer(args)
      print("round %d %-7s %6.2f examples/sec" % (i, who, result[who]),
            flush=True)
    numpy_rates.append(numpy_matmul_gflops(trials=args.numpy_trials))
    print("round %d numpy   %6.1f GFLOP/s" % (i, numpy_rates[-1]), flush=True)
    rounds.append(result)
  numpy_gflops = max(numpy_rates)
  summary = summarize(rounds, numpy_gflops, gflop_per_example)
  summary["rounds"] = rounds
  print("ours %.2f examples/sec, pytorch %.2f (medians of %d rounds); "
        "ratio %.2fx (median per round)" % (
            summary["ours_examples_per_sec"],
            summary["pytorch_examples_per_sec"], args.rounds,
            summary["ratio"]))
  print("MFU against numpy's %.1f GFLOP/s: ours %.0f%%, pytorch %.0f%%" % (
      numpy_gflops, 100 * summary["ours_mfu"], 100 * summary["pytorch_mfu"]))
  with atomic_io.atomic_open(os.path.join(args.output_dir,
                                           "comparison.json")) as f:
    json.dump(summary, f, indent=2)
  return summary


if __name__ == "__main__":
  main(parse_args())
