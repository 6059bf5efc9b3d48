"""What the masks drawn in the input pipeline are, and what they cost.

Reads records through run_pretraining.py's input_fn (the deterministic
order of --tf_random_seed) and reports, as one JSON object:

  rule:  over two epochs of the unmasked records, the sequences whose number
         of masks differs from upstream's min(P, max(1, round(len * prob))),
         the masked positions on [CLS], [SEP] or padding, the split of the
         masked tokens into [MASK] / kept / random id, and the mean overlap
         of an example's masked positions from epoch 1 to epoch 2 (1.0
         for static records: their masks are in their bytes);
  disk:  the bytes of the unmasked and of the static records;
  speed: examples/sec of the input pipeline on the static records (their
         own masks) and on the unmasked ones (masks drawn), timed in turns
         (static, drawn, drawn, static, ...) so that load changes hit both
         alike: the medians and the median of the per-round ratios.

Example:
  python benchmarks/dynamic_masking.py --vocab_file=vocab.txt \\
    --unmasked=dynamic.tfrecord --static=static10.tfrecord
"""

import json
import os
import statistics
import sys
import time

import numpy as np
import tensorflow.compat.v1 as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bertkit.common import options
from bertkit.data import pretraining_instances
from bertkit.engine.input import dynamic_masking
from bertkit.engine.input import input_pipeline
from bertkit.engine.input import record_checks
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs


def dataset_iterator(path, kind, masking, args, batch):
  """get_next of the training input_fn over `path` (deterministic order)."""
  input_fn = input_pipeline.pretraining_input_fn_builder(
      [path], input_pipeline.PretrainingInput(
          args.max_seq_length, args.max_predictions_per_seq, kind,
          masking=masking, masking_seed=args.seed),
      is_training=True, global_batch_size=batch, num_replicas=1,
      deterministic=True)
  return tf.data.make_one_shot_iterator(input_fn()).get_next()


def rule_figures(args, masking, vocab):
  """Checks two epochs of drawn masks against upstream's rule."""
  path = args.unmasked
  originals = []
  for raw in tf.io.tf_record_iterator(path):
    feature = tf.train.Example.FromString(raw).features.feature
    originals.append((np.array(feature["input_ids"].int64_list.value),
                      int(sum(feature["input_mask"].int64_list.value))))
  if args.max_sequences:
    originals = originals[:args.max_sequences]
  batch = 64
  num_read = 2 * len(record_checks.record_frames(path))
  kind, _ = record_checks.check_pretraining_records(
      [path], args.max_seq_length, args.max_predictions_per_seq)
  specials = {vocab["[CLS]"], vocab["[SEP]"]}
  counts = {"[MASK]": 0, "kept": 0, "random id": 0}
  wrong_count = on_special = 0
  epoch_positions = [[], []]
  with tf.Graph().as_default():
    next_batch = dataset_iterator(path, kind, masking, args, batch)
    with tf.Session() as sess:
      index = 0
      while index < num_read:
        values = sess.run(next_batch)
        for row in range(batch):
          epoch, record = divmod(index, num_read // 2)
          index += 1
          if record >= len(originals):
            continue
          ids, length = originals[record]
          num = int(values["masked_lm_weights"][row].sum())
          positions = values["masked_lm_positions"][row][:num]
          wrong_count += num != dynamic_masking.num_to_predict(
              length, args.max_predictions_per_seq, args.masked_lm_prob)
          on_special += sum(int(p >= length or ids[p] in specials)
                            for p in positions)
          drawn = values["input_ids"][row][positions]
          counts["[MASK]"] += int((drawn == vocab["[MASK]"]).sum())
          kept = int((drawn == ids[positions]).sum())
          counts["kept"] += kept
          counts["random id"] += int(num - kept -
                                     (drawn == vocab["[MASK]"]).sum())
          epoch_positions[epoch].append(set(positions.tolist()))
          if index >= num_read:
            break
  total = sum(counts.values())
  overlap = [len(a & b) / len(a) for a, b in zip(*epoch_positions)]
  return {
      "sequences": len(epoch_positions[1]),
      "sequences_with_a_count_other_than_upstreams": wrong_count,
      "masks_on_cls_sep_or_padding": on_special,
      "masked_tokens": total,
      "split_percent": {k: round(100.0 * v / total, 2)
                        for k, v in counts.items()},
      "epoch_1_to_2_overlap_of_masked_positions": round(
          float(np.mean(overlap)), 4),
  }


def examples_per_sec(path, kind, masking, args):
  """Examples/sec of the input pipeline, after a warm-up."""
  with tf.Graph().as_default():
    next_batch = dataset_iterator(path, kind, masking, args,
                                  args.batch_size)
    with tf.Session() as sess:
      for _ in range(20):
        sess.run(next_batch)
      start = time.perf_counter()
      for _ in range(args.speed_batches):
        sess.run(next_batch)
      return args.speed_batches * args.batch_size / (
          time.perf_counter() - start)


def speed_figures(args, masking):
  static_kind, _ = record_checks.check_pretraining_records(
      [args.static], args.max_seq_length, args.max_predictions_per_seq)
  unmasked_kind, _ = record_checks.check_pretraining_records(
      [args.unmasked], args.max_seq_length, args.max_predictions_per_seq)
  static, drawn, ratios = [], [], []
  for round_index in range(args.rounds):
    pair = {}
    order = ("static", "drawn") if round_index % 2 == 0 else ("drawn",
                                                              "static")
    for name in order:
      if name == "static":
        pair[name] = examples_per_sec(args.static, static_kind, None, args)
      else:
        pair[name] = examples_per_sec(args.unmasked, unmasked_kind, masking,
                                      args)
    static.append(pair["static"])
    drawn.append(pair["drawn"])
    ratios.append(pair["drawn"] / pair["static"])
    print("round %d: static %.0f, drawn %.0f examples/sec" % (
        round_index, pair["static"], pair["drawn"]), file=sys.stderr)
  return {
      "batch_size": args.batch_size, "rounds": args.rounds,
      "static_records_examples_per_sec_median": round(
          statistics.median(static)),
      "drawn_masks_examples_per_sec_median": round(statistics.median(drawn)),
      "drawn_over_static_median_ratio": round(statistics.median(ratios), 3),
  }


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--vocab_file", required=True,
                      type=benchmark_args.existing_file)
  parser.add_argument("--unmasked", required=True,
                      type=benchmark_args.existing_file,
                      help="create_pretraining_data.py --masking=dynamic "
                      "records")
  parser.add_argument("--static", required=True,
                      type=benchmark_args.existing_file,
                      help="create_pretraining_data.py records (static)")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--masked_lm_prob", type=float,
                      default=options.MASKED_LM_PROB)
  parser.add_argument("--seed", type=int, default=12345)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--speed_batches", type=int, default=300)
  parser.add_argument("--rounds", type=int, default=6)
  parser.add_argument("--max_sequences", type=int, default=0,
                      help="check the rule on the first N sequences only "
                      "(0: all)")
  parser.add_argument("--skip", default="",
                      help="comma-separated parts to leave out: rule, speed")
  return parser.parse_args(argv)


def main(args):
  tf.disable_v2_behavior()
  vocab = pretraining_instances.load_checked_vocab(args.vocab_file)
  masking = dynamic_masking.masking_params_from_vocab(
      vocab, args.max_seq_length, args.max_predictions_per_seq,
      args.masked_lm_prob, False)
  skip = set(filter(None, args.skip.split(",")))
  report = {"disk": {
      "unmasked_bytes": os.path.getsize(args.unmasked),
      "static_bytes": os.path.getsize(args.static),
      "unmasked_over_static": round(os.path.getsize(args.unmasked) /
                                    os.path.getsize(args.static), 4)}}
  if "rule" not in skip:
    report["rule"] = rule_figures(args, masking, vocab)
  if "speed" not in skip:
    report["speed"] = speed_figures(args, masking)
  print(json.dumps(report, indent=2))


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
