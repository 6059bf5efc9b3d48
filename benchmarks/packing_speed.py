"""Real (non-padding) tokens/sec: packed vs unpacked records, and the peer.

Makes both kinds of records of the same instances (create_pretraining_data.py
with and without --pack_sequences: same seed, same instances), then, for
--rounds rounds, times three trainings in a rotating order (so that a change
in the machine's load hits all alike):

  * ours, unpacked: run_pretraining.py on the unpacked records,
    --train_batch_size rows (= sequences) a step;
  * ours, packed: run_pretraining.py on the packed records,
    --train_batch_size rows a step (the same compute per step as unpacked:
    rows of --max_seq_length tokens; each row holds up to
    --max_sequences_per_pack sequences);
  * the peer: benchmarks/pytorch_peer.py (Hugging Face BertModel and the
    pretraining heads, sparse prediction, SDPA attention) on the unpacked
    records, --train_batch_size sequences a step like
    unpacked ours, each batch padded to its longest sequence (dynamic
    padding).

Each is timed as a user times a training command: the whole-process wall
clock of the same command with --short_steps and with --long_steps. All three
read their records in file order (ours with --tf_random_seed), so the real
tokens of the steps between the two counts are known exactly from the
records; real tokens/sec = those tokens / (difference of the two wall times).
Start-up and graph building cancel out.

Prints one line per run and the medians of real tokens/sec, and the medians
of the per-round ratios packed/unpacked and packed/peer; writes the same to
OUTPUT_DIR/packing.json.

Example (BERT-mini, seq 512, a corpus of short documents):
  python benchmarks/packing_speed.py --input_file=short_docs.txt \
    --vocab_file=vocab.txt --output_dir=/tmp/packing_speed
"""

import json
import os
import shutil
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bertkit.common import atomic_io
from bertkit.common import options as run_options
from bertkit.data import packing
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs
from bertkit.perf import sweep

CONTESTANTS = ("unpacked", "packed", "peer")
# Ours and the peer read records in file order; any fixed seed does that.
SEED = 12345


def make_records(options, kind):
  """The records of `kind` ("unpacked" or "packed"), made once per
  output directory."""
  path = os.path.join(options.output_dir, kind + ".tfrecord")
  if not os.path.exists(path):
    child_runs.wall_seconds(
        [sys.executable, "create_pretraining_data.py",
         "--input_file=" + options.input_file, "--output_file=" + path,
         "--vocab_file=" + options.vocab_file,
         "--max_seq_length=%d" % options.max_seq_length,
         "--max_predictions_per_seq=%d" % options.max_predictions_per_seq,
         "--dupe_factor=%d" % options.dupe_factor] +
        (["--pack_sequences", "--max_sequences_per_pack=%d" %
          options.max_sequences_per_pack] if kind == "packed" else []),
        child_runs.child_env(), options.timeout)
  return path


def row_counts(path):
  """(real tokens, sequences) of each record of a file, in order."""
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  counts = []
  for raw in tf.io.tf_record_iterator(path):
    feature = tf.train.Example.FromString(raw).features.feature
    weights = feature.get("next_sentence_weights")
    counts.append((sum(feature["input_mask"].int64_list.value),
                   int(sum(weights.float_list.value)) if weights else 1))
  return counts


def steps_total(counts, batch, steps):
  """Sums of (real tokens, sequences) over the first `steps` steps of
  `batch` records each, read in order epoch after epoch (a batch may span
  two epochs, as run_pretraining.py's deterministic input_fn batches)."""
  rows = [counts[i % len(counts)] for i in range(steps * batch)]
  return sum(r[0] for r in rows), sum(r[1] for r in rows)


def rate(counts, batch, short_steps, long_steps, seconds):
  """(real tokens/sec, sequences/sec) of the steps between the two runs."""
  short, long = (steps_total(counts, batch, n)
                 for n in (short_steps, long_steps))
  return tuple(child_runs.count_rate(
      short[i], long[i], seconds[short_steps], seconds[long_steps])
               for i in (0, 1))


def ours_command(options, records, run_dir, mask_width, steps):
  cell = sweep.Cell("one_device", options.bert_config_file,
                    options.max_seq_length, "off", "fp32",
                    options.train_batch_size, 1)
  return sweep.cell_command(
      cell, os.path.abspath(options.bert_config_file), records, run_dir,
      mask_width, steps, 1, "cpu") + ["--tf_random_seed=%d" % SEED]


def peer_command(options, records, steps):
  return [sys.executable, child_runs.PYTORCH_PEER,
          "--bert_config_file=%s" % options.bert_config_file,
          "--max_seq_length=%d" % options.max_seq_length,
          "--max_predictions_per_seq=%d" % options.max_predictions_per_seq,
          "--train_batch_size=%d" % options.train_batch_size,
          "--input_file=%s" % records,
          "--num_steps=%d" % steps, "--warmup_steps=0"]


def wall_times(options, command_of_steps, run_dir):
  """Whole-process wall seconds of the command at both step counts."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  seconds = {}
  for steps in (options.short_steps, options.long_steps):
    directory = "%s_%dsteps" % (run_dir, steps)
    shutil.rmtree(directory, ignore_errors=True)
    seconds[steps] = child_runs.wall_seconds(
        command_of_steps(directory, steps), env, options.timeout)
  return seconds


def summarize(rounds):
  """Medians of each contestant's real tokens/sec and of the per-round
  ratios packed/unpacked and packed/peer (rounds where all three count)."""
  counted = [r for r in rounds
             if all(r[who]["real_tokens_per_sec"] for who in CONTESTANTS)]
  if not counted:
    return {}
  summary = {"rounds_counted": len(counted)}
  for who in CONTESTANTS:
    summary["median_real_tokens_per_sec_" + who] = statistics.median(
        r[who]["real_tokens_per_sec"] for r in counted)
  for other in ("unpacked", "peer"):
    summary["median_ratio_packed_over_" + other] = statistics.median(
        r["packed"]["real_tokens_per_sec"] / r[other]["real_tokens_per_sec"]
        for r in counted)
  return summary


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--input_file", required=True,
                      type=benchmark_args.existing_file,
                      help="the text corpus to make both records of")
  parser.add_argument("--vocab_file", required=True,
                      type=benchmark_args.existing_file)
  parser.add_argument("--output_dir", required=True)
  parser.add_argument("--bert_config_file", type=benchmark_args.existing_file,
                      default=os.path.join(REPO_ROOT, "configs",
                                           "bert_mini.json"))
  parser.add_argument("--max_seq_length", type=int, default=512)
  parser.add_argument("--max_predictions_per_seq", type=int, default=80)
  parser.add_argument("--max_sequences_per_pack", type=int, default=3)
  parser.add_argument("--dupe_factor", type=int, default=5)
  parser.add_argument("--train_batch_size", type=int, default=8,
                      help="rows a step for ours (packed and unpacked), "
                           "sequences a step for the peer")
  parser.add_argument("--short_steps", type=int, default=10)
  parser.add_argument("--long_steps", type=int, default=40)
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--timeout", type=int, default=3600,
                      help="seconds allowed to one training")
  options = parser.parse_args(argv)
  if not 0 < options.short_steps < options.long_steps:
    parser.error("need 0 < --short_steps < --long_steps")
  return options


def main(options):
  os.makedirs(options.output_dir, exist_ok=True)
  records = {kind: make_records(options, kind)
             for kind in ("unpacked", "packed")}
  records["peer"] = records["unpacked"]
  counts = {who: row_counts(records[who]) for who in CONTESTANTS}
  widths = {"unpacked": options.max_predictions_per_seq,
            "packed": packing.masked_positions_per_row(
                options.max_seq_length, options.max_predictions_per_seq,
                run_options.MASKED_LM_PROB,
                options.max_sequences_per_pack)}
  padding = {kind: 1.0 - sum(c[0] for c in counts[kind]) / float(
      options.max_seq_length * len(counts[kind]))
             for kind in ("unpacked", "packed")}
  print("records: %d sequences, %.1f %% padding unpacked; %d rows, %.1f %% "
        "padding packed" % (len(counts["unpacked"]), 100 * padding["unpacked"],
                            len(counts["packed"]), 100 * padding["packed"]),
        flush=True)
  rounds = []
  for i in range(options.rounds):
    result = {}
    shift = i % len(CONTESTANTS)
    for who in CONTESTANTS[shift:] + CONTESTANTS[:shift]:
      run_dir = os.path.join(options.output_dir, "round%d_%s" % (i, who))
      if who == "peer":
        command = lambda _, steps: peer_command(options, records["peer"],
                                                steps)
      else:
        command = (lambda directory, steps, who=who: ours_command(
            options, records[who], directory, widths[who], steps))
      seconds = wall_times(options, command, run_dir)
      tokens_per_sec, sequences_per_sec = rate(
          counts[who], options.train_batch_size, options.short_steps,
          options.long_steps, seconds)
      result[who] = {"wall_seconds": seconds,
                     "real_tokens_per_sec": tokens_per_sec,
                     "sequences_per_sec": sequences_per_sec}
      print("round %d %-8s %d steps %.1f s, %d steps %.1f s: %s real "
            "tokens/sec" % (
                i, who, options.short_steps, seconds[options.short_steps],
                options.long_steps, seconds[options.long_steps],
                "%.1f" % tokens_per_sec if tokens_per_sec else "n/a"),
            flush=True)
    rounds.append(result)
  report = {"options": vars(options), "padding_fraction": padding,
            "timing": "whole-process wall, %d minus %d steps" % (
                options.long_steps, options.short_steps),
            "rounds": rounds}
  report.update(summarize(rounds))
  if "rounds_counted" in report:
    print("median real tokens/sec: packed %.1f, unpacked %.1f, peer %.1f; "
          "median per-round ratios: packed/unpacked %.2fx, packed/peer "
          "%.2fx (%d rounds)" % tuple(
              report[k] for k in (
                  "median_real_tokens_per_sec_packed",
                  "median_real_tokens_per_sec_unpacked",
                  "median_real_tokens_per_sec_peer",
                  "median_ratio_packed_over_unpacked",
                  "median_ratio_packed_over_peer", "rounds_counted")))
  with atomic_io.atomic_open(os.path.join(options.output_dir,
                                          "packing.json")) as f:
    f.write(json.dumps(report, indent=2, sort_keys=True) + "\n")
  return report


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
