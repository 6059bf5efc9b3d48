"""Real (non-padding) tokens/sec of training on packed vs unpacked records.

Makes both kinds of records of the same instances (create_pretraining_data.py
with and without --pack_sequences: same seed, same instances), then trains
run_pretraining.py on each for --rounds rounds in alternating order (unpacked
first in even rounds), so that a change in the machine's load hits both
alike. Prints one line per run and the medians of real tokens/sec and
sequences/sec (the steady-state figures of throughput_summary.json) and the
median of the per-round ratios; writes the same to OUTPUT_DIR/packing.json.

Example (BERT-mini, seq 512, a corpus of short documents):
  python benchmarks/packing_speed.py --input_file=short_docs.txt \
    --vocab_file=vocab.txt --output_dir=/tmp/packing_speed
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import atomic_io  # pylint: disable=g-import-not-at-top,wrong-import-position
import packing  # pylint: disable=g-import-not-at-top,wrong-import-position

KINDS = ("unpacked", "packed")


def run(args):
  subprocess.run([sys.executable] + args, cwd=REPO_ROOT, check=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_records(options, kind):
  path = os.path.join(options.output_dir, kind + ".tfrecord")
  if not os.path.exists(path):
    run(["create_pretraining_data.py", "--input_file=" + options.input_file,
         "--output_file=" + path, "--vocab_file=" + options.vocab_file,
         "--max_seq_length=%d" % options.max_seq_length,
         "--max_predictions_per_seq=%d" % options.max_predictions_per_seq,
         "--dupe_factor=%d" % options.dupe_factor] +
        (["--pack_sequences", "--max_sequences_per_pack=%d" %
          options.max_sequences_per_pack] if kind == "packed" else []))
  return path


def train(options, records, output_dir, mask_width):
  run(["run_pretraining.py", "--bert_config_file=" + options.bert_config_file,
       "--input_file=" + records, "--output_dir=" + output_dir, "--do_train",
       "--max_seq_length=%d" % options.max_seq_length,
       "--max_predictions_per_seq=%d" % mask_width,
       "--train_batch_size=%d" % options.train_batch_size,
       "--num_train_steps=%d" % options.steps, "--num_warmup_steps=0",
       "--save_checkpoints_steps=100000", "--log_every_n_steps=10",
       "--throughput_warmup_steps=%d" % options.warmup_steps])
  with open(os.path.join(output_dir, "throughput_summary.json")) as f:
    return json.load(f)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--input_file", required=True)
  parser.add_argument("--vocab_file", required=True)
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--bert_config_file",
                      default=os.path.join(REPO_ROOT, "configs",
                                           "bert_mini.json"))
  parser.add_argument("--max_seq_length", type=int, default=512)
  parser.add_argument("--max_predictions_per_seq", type=int, default=80)
  parser.add_argument("--max_sequences_per_pack", type=int, default=3)
  parser.add_argument("--dupe_factor", type=int, default=5)
  parser.add_argument("--train_batch_size", type=int, default=8)
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--warmup_steps", type=int, default=10)
  parser.add_argument("--rounds", type=int, default=3)
  options = parser.parse_args()
  os.makedirs(options.output_dir, exist_ok=True)
  records = {kind: make_records(options, kind) for kind in KINDS}
  widths = {"unpacked": options.max_predictions_per_seq,
            "packed": packing.masked_positions_per_row(
                options.max_seq_length, options.max_predictions_per_seq, 0.15,
                options.max_sequences_per_pack)}
  results = {kind: [] for kind in KINDS}
  for i in range(options.rounds):
    for kind in KINDS if i % 2 == 0 else KINDS[::-1]:
      out = os.path.join(options.output_dir, "round%d_%s" % (i, kind))
      summary = train(options, records[kind], out, widths[kind])
      results[kind].append(summary)
      print("round %d %-8s %8.1f real tokens/sec %7.2f sequences/sec "
            "%6.2f rows/sec" % (i, kind, summary["real_tokens_per_sec"],
                                summary["sequences_per_sec"],
                                summary["examples_per_sec"]), flush=True)
  report = {"options": vars(options), "runs": results}
  for key in ("real_tokens_per_sec", "sequences_per_sec", "examples_per_sec"):
    report["median_" + key] = {
        kind: statistics.median(r[key] for r in results[kind])
        for kind in KINDS}
  report["median_ratio_real_tokens_per_sec"] = statistics.median(
      p["real_tokens_per_sec"] / u["real_tokens_per_sec"]
      for p, u in zip(results["packed"], results["unpacked"]))
  print("median real tokens/sec: packed %.1f, unpacked %.1f; median of the "
        "per-round ratios %.3fx" % (
            report["median_real_tokens_per_sec"]["packed"],
            report["median_real_tokens_per_sec"]["unpacked"],
            report["median_ratio_real_tokens_per_sec"]))
  with atomic_io.atomic_open(os.path.join(options.output_dir,
                                          "packing.json")) as f:
    f.write(json.dumps(report, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
  main()
