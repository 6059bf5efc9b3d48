"""Comparisons that can tell: two or more arms, several seeds each, held-out
accuracy at the same steps, differences claimed only beyond the seeds'
spread.

The data are time_to_accuracy.py's (the KJV by default; --corpus,
--python_docs, --fortunes), BERT-mini at seq 128, the fast recipe's values; each run is
a whole process of --num_train_steps steps, evaluated every
--eval_every_n_steps steps on the same held-out records. Two comparisons:

  --compare=trainers   ours (run_pretraining.py) against the PyTorch peer
      (time_to_accuracy_peer.py) with common random numbers: for each seed
      both start from the same initial weights (the peer's, written as a
      Hugging Face directory, read by ours as --init_checkpoint) and train on
      the same masks in the same order (records create_pretraining_data.py
      masked once with the seed, at fast's masking rate, which both read);
      fast trains without dropout, so what differs is the trainers alone.
  --compare=mask_rules  the fast recipe with each way of drawing masks
      worth a try (--mask_rules, default: upstream's fixed count, Hugging
      Face's per-token draws, whole-word masking, [MASK] alone), each by its
      own rule; for each seed every arm starts from the same initial weights
      (ours, a step at learning rate 0 of the seed) and reads the same
      records in the same order.
  --compare=precisions  float32 against --use_bf16 (oneDNN's bfloat16
      rewrite, float32 variables and optimizer), with --recipe's values
      (fast or bert_2018); for each seed both arms start from the same
      initial weights and read the same records, masks and dropout draws in
      the same order, so what differs is the precision alone. On a CPU
      without avx512_bf16 or AMX, bfloat16 is emulated: its figures say how
      bfloat16 trains, not how fast.

A seed's runs are paired: the difference of two arms is taken seed by seed,
and an arm is said to beat another at a step only when it does in every
seed (with 5 seeds, a sign test's one-sided p = 1/32); otherwise the
difference is within the spread. Trainers with common random numbers compute
the same loss and update in another order of float sums, which can flip the
argmax of a near-tied position or two (one of ~4,800 held-out positions moves
accuracy by 0.0002): their pair is judged on the held-out loss first,
"alike" when it agrees to within LOSS_ALIKE in every seed, otherwise on the
accuracy as any pair. Writes summary.md and summary.json to
--output_dir, and each run's directory under runs/.

Example:
  python benchmarks/seeded_comparison.py --output_dir=/tmp/seeded_kjv \\
    --compare=mask_rules --seeds=1,2,3,4,5 --num_train_steps=180
  python benchmarks/seeded_comparison.py --output_dir=/tmp/seeded_bf16 \\
    --compare=precisions --recipe=bert_2018 --seeds=1,2,3,4,5
"""

import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import time_to_accuracy as tta

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.engine.loop import evaluation
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs

COMPARISONS = ("trainers", "mask_rules", "precisions")
# Each mask rule's run_pretraining.py flags beside the fast recipe's. The
# per-token draw's count varies from sequence to sequence: room for all of
# them (0.3 x 128 = 38 on average, rarely above 55).
MASK_RULES = {
    "upstream": [],
    "per_token": ["--mask_rule=per_token", "--max_predictions_per_seq=64"],
    "whole_word": ["--do_whole_word_mask"],
    "mask_only": ["--mask_rule=mask_only"],
}
# --compare=precisions: each arm's run_pretraining.py flags, the first the
# baseline.
PRECISIONS = {"fp32": [], "bf16": ["--use_bf16"]}
# The recipes --compare=precisions takes; the others compare under the
# peer's (fast).
RECIPES = ("fast", "bert_2018")
# Relative held-out loss difference two runs of the same computation stay
# within. Measured at 180 steps of BERT-mini: <= 1.2e-5 in seeds 1 and 2;
# seeds 3-5 part after step 48, by 2.5e-5 to 8.1e-4 (docs/benchmarks.md),
# and are judged on accuracy.
LOSS_ALIKE = 1e-4


def static_records(args, data, seed):
  """The fast recipe's training records masked once with `seed`
  (--compare=trainers: both trainers read these masks)."""
  path = os.path.join(data.dir, "fast_static_seed%d.tfrecord" % seed)
  if not os.path.exists(path):
    values = tta.read_flagfile(tta.recipe_file(args, tta.PEER_RECIPE,
                                               "run_pretraining"))
    tta.run_checked([
        sys.executable, "create_pretraining_data.py",
        "--flagfile=%s" % tta.recipe_file(args, tta.PEER_RECIPE,
                                          "create_pretraining_data"),
        "--input_file=%s" % data.train_text, "--vocab_file=%s" % data.vocab,
        "--output_file=%s" % path,
        "--max_seq_length=%d" % args.max_seq_length, "--masking=static",
        "--dupe_factor=1", "--random_seed=%d" % seed,
        "--masked_lm_prob=%s" % values["masked_lm_prob"],
        "--max_predictions_per_seq=%s" % values["max_predictions_per_seq"]],
                    "create_pretraining_data.py (masked with seed %d)" % seed)
  return path


def ours(args, data, run_dir, records, seed, extra):
  """run_pretraining.py with --recipe, for --num_train_steps."""
  return [sys.executable, child_runs.RUN_PRETRAINING,
          "--flagfile=%s" % tta.recipe_file(args, args.recipe,
                                            "run_pretraining"),
          "--bert_config_file=%s" % data.model_config,
          "--input_file=%s" % records, "--vocab_file=%s" % data.vocab,
          "--output_dir=%s" % run_dir, "--do_train",
          "--max_seq_length=%d" % args.max_seq_length,
          "--eval_input_file=%s" % data.heldout,
          "--eval_every_n_steps=%d" % args.eval_every_n_steps,
          "--eval_batch_size=%d" % args.eval_batch_size,
          "--max_eval_steps=%d" % (args.heldout_rows // args.eval_batch_size),
          "--num_train_steps=%d" % args.num_train_steps,
          "--tf_random_seed=%d" % seed, "--log_every_n_steps=60"] + extra


def peer(args, data, run_dir, records, seed, initial_weights):
  """The PyTorch peer on the masks of `records`, writing its initial
  weights to `initial_weights` first."""
  values = tta.peer_recipe_values(args)
  return [sys.executable, tta.PEER,
          "--bert_config_file=%s" % data.model_config,
          "--vocab_file=%s" % data.vocab, "--train_records=%s" % records,
          "--heldout=%s" % data.heldout_arrays, "--output_dir=%s" % run_dir,
          "--eval_every_n_steps=%d" % args.eval_every_n_steps,
          "--eval_batch_size=%d" % args.eval_batch_size,
          "--num_train_steps=%d" % args.num_train_steps,
          "--save_initial_weights=%s" % initial_weights,
          "--seed=%d" % seed] + ["--%s=%s" % item
                                 for item in sorted(values.items())]


def run(argv, run_dir, label):
  """Runs one arm's process (reused when the same command finished);
  returns {step: held-out accuracy}."""
  done = os.path.join(run_dir, "command.json")
  if os.path.exists(done):
    with open(done) as f:
      if json.load(f) == argv[1:]:
        return held_out(run_dir)
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  seconds, _ = tta.run_watched(argv, run_dir, 3600)
  with atomic_io.atomic_open(done) as f:
    json.dump(argv[1:], f)
  result = held_out(run_dir)
  print("%-12s %s in %.0f s" % (label, ", ".join(
      "%d: %.4f" % item for item in sorted(result.items())), seconds),
        flush=True)
  return result


def held_out(run_dir, metric="masked_lm_accuracy"):
  """{step: the held-out `metric`} of a run's evaluations."""
  return {int(e["step"]): float(e[metric])
          for e in evaluation.read_history(run_dir)}


def trainer_losses(args):
  """{seed: {arm: {step: held-out masked-LM loss}}} of the trainers' runs."""
  runs_dir = os.path.join(args.output_dir, "runs")
  return {seed: {arm: held_out(os.path.join(runs_dir, "%s_seed%d" % (
      arm, seed)), "masked_lm_loss") for arm in ("peer", "ours")}
          for seed in args.seeds}


def seed_runs(args, data, seed, unmasked_records):
  """{arm: {step: accuracy}} of one seed's runs."""
  runs_dir = os.path.join(args.output_dir, "runs")
  if args.compare == "trainers":
    records = static_records(args, data, seed)
    initial = os.path.join(runs_dir, "initial_seed%d" % seed)
    result = {"peer": run(peer(args, data, os.path.join(
        runs_dir, "peer_seed%d" % seed), records, seed, initial),
                          os.path.join(runs_dir, "peer_seed%d" % seed),
                          "peer s%d" % seed)}
    result["ours"] = run(ours(args, data, os.path.join(
        runs_dir, "ours_seed%d" % seed), records, seed,
                              ["--init_checkpoint=%s" % initial]),
                         os.path.join(runs_dir, "ours_seed%d" % seed),
                         "ours s%d" % seed)
    return result
  # The seed's initial weights, written once: a step at learning rate 0
  # changes none of them.
  initial = os.path.join(runs_dir, "initial_seed%d" % seed)
  run(ours(args, data, initial, unmasked_records, seed,
           ["--learning_rate=0", "--num_train_steps=1"]), initial,
      "initial s%d" % seed)
  arms = (PRECISIONS if args.compare == "precisions" else
          {rule: MASK_RULES[rule] for rule in args.mask_rules})
  result = {}
  for arm, flags in arms.items():
    run_dir = os.path.join(runs_dir, "%s_seed%d" % (arm, seed))
    result[arm] = run(ours(args, data, run_dir, unmasked_records, seed,
                           flags + ["--init_checkpoint=%s" % initial]),
                      run_dir, "%s s%d" % (arm, seed))
  return result


def spread(values):
  return {"mean": statistics.mean(values), "min": min(values),
          "max": max(values),
          "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
          "values": values}


def summarize(args, per_seed, losses=None):
  """Per arm and step the seeds' spread; per pair of arms and step the
  seed-by-seed differences and the verdict.

  Args:
    args: the parsed flags (seeds, comparison).
    per_seed: {seed: {arm: {step: held-out accuracy}}}, the first arm the
      baseline.
    losses: for common random numbers, the same shape holding held-out
      losses: a pair whose losses agree within LOSS_ALIKE in every seed is
      "alike", whatever its accuracies' signs.
  """
  arms = list(per_seed[args.seeds[0]])
  steps = sorted(set.intersection(*[set(per_seed[s][a]) for s in args.seeds
                                    for a in arms]))
  summary = {"compare": args.compare, "seeds": args.seeds, "steps": steps,
             "arms": {a: {step: spread([per_seed[s][a][step]
                                        for s in args.seeds])
                          for step in steps} for a in arms},
             "pairs": []}
  baseline = arms[0]
  for other in arms[1:]:
    for step in steps:
      differences = [per_seed[s][other][step] - per_seed[s][baseline][step]
                     for s in args.seeds]
      if losses and all(
          abs(losses[s][other][step] - losses[s][baseline][step]) <=
          LOSS_ALIKE * abs(losses[s][baseline][step]) for s in args.seeds):
        verdict = "alike: held-out loss within %g in every seed" % (
            LOSS_ALIKE)
      elif min(differences) > 0:
        verdict = "%s above %s in every seed" % (other, baseline)
      elif max(differences) < 0:
        verdict = "%s below %s in every seed" % (other, baseline)
      else:
        verdict = "within the spread"
      summary["pairs"].append(dict(spread(differences), arm=other,
                                   baseline=baseline, step=step,
                                   verdict=verdict))
  return summary


def markdown(summary, command):
  lines = ["# Seeded comparison: %s" % summary["compare"], "",
           "`%s`" % command, "",
           "Held-out masked-LM accuracy, seeds %s: mean (min-max, sd)." % (
               ",".join(map(str, summary["seeds"]))), "",
           "arm | " + " | ".join("step %d" % s for s in summary["steps"]),
           "---|" + "---|" * len(summary["steps"])]
  for arm, by_step in summary["arms"].items():
    lines.append(arm + " | " + " | ".join(
        "%.4f (%.4f-%.4f, %.4f)" % (by_step[s]["mean"], by_step[s]["min"],
                                    by_step[s]["max"], by_step[s]["sd"])
        for s in summary["steps"]))
  lines += ["", "Seed by seed, against %s:" % (
      summary["pairs"][0]["baseline"] if summary["pairs"] else "-"), "",
            "arm | step | mean difference | min | max | verdict",
            "---|---|---|---|---|---"]
  for pair in summary["pairs"]:
    lines.append("%s | %d | %+.4f | %+.4f | %+.4f | %s" % (
        pair["arm"], pair["step"], pair["mean"], pair["min"], pair["max"],
        pair["verdict"]))
  return "\n".join(lines) + "\n"


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.splitlines()[0])
  add = parser.add_argument
  add("--output_dir", required=True)
  add("--compare", choices=COMPARISONS, required=True)
  add("--seeds", type=benchmark_args.integers, default="1,2,3,4,5",
      help="comma-separated")
  add("--recipe", choices=RECIPES, default=tta.PEER_RECIPE,
      help="--compare=precisions: the recipe both arms train with (the "
      "other comparisons: the peer's, fast)")
  add("--mask_rules", default=",".join(MASK_RULES),
      help="--compare=mask_rules: the arms, the first the baseline")
  add("--num_train_steps", type=int, default=180)
  add("--eval_every_n_steps", type=int, default=60)
  add("--eval_batch_size", type=int, default=32)
  add("--max_eval_steps", type=int)
  # The corpora and the model: as benchmarks/time_to_accuracy.py's.
  add("--corpus", type=benchmark_args.existing_file)
  add("--python_docs", type=benchmark_args.existing_dir)
  add("--fortunes", type=benchmark_args.existing_dir)
  add("--heldout_every", type=int, default=20)
  add("--bible", default="bible")
  add("--bert_config_file", type=benchmark_args.existing_file,
      default=os.path.join(tta.REPO_ROOT, "configs", "bert_mini.json"))
  add("--max_seq_length", type=int, default=128)
  add("--heldout_predictions", type=int, default=20)
  add("--vocab_size", type=int, default=30522)
  add("--recipes_dir", type=benchmark_args.existing_dir,
      default=tta.RECIPES_DIR)
  add("--smoke", action="store_true",
      help="a seconds-long check: a 2-layer model on sample_data/corpus.txt")
  args = parser.parse_args(argv)
  args.mask_rules = [r for r in args.mask_rules.split(",") if r]
  unknown = sorted(set(args.mask_rules) - set(MASK_RULES))
  if unknown or len(args.mask_rules) < 2 or len(args.seeds) < 2:
    raise UserError("expected at least two seeds and two of --mask_rules "
                    "%s; got seeds %s, rules %s" % (
                        ",".join(MASK_RULES), args.seeds, args.mask_rules))
  if args.compare != "precisions" and args.recipe != tta.PEER_RECIPE:
    raise UserError("--recipe=%s: --compare=%s compares under the peer's "
                    "recipe, %s" % (args.recipe, args.compare,
                                    tta.PEER_RECIPE))
  # What time_to_accuracy's preparation reads of its own flags.
  args.train_batch_size = args.dupe_factor = None
  if args.smoke:
    args.corpus = os.path.join(tta.REPO_ROOT, "sample_data", "corpus.txt")
    args.heldout_every, args.max_seq_length = 8, 64
    args.heldout_predictions, args.vocab_size = 10, 1000
    args.num_train_steps, args.eval_every_n_steps = 6, 3
    args.eval_batch_size, args.max_eval_steps = 8, 2
  return args


def main(args):
  started = time.perf_counter()
  data = tta.Data(os.path.join(args.output_dir, "data"))
  tta.prepare_text_and_model(args, data)
  args.heldout_rows = tta.prepare_heldout(args, data)
  unmasked = tta.prepare_records(args, data, args.recipe)
  data.mark_made_by(args)
  per_seed = {seed: seed_runs(args, data, seed, unmasked)
              for seed in args.seeds}
  summary = summarize(args, per_seed, trainer_losses(args)
                      if args.compare == "trainers" else None)
  command = " ".join(["python", "benchmarks/seeded_comparison.py"] +
                     sys.argv[1:])
  with atomic_io.atomic_open(os.path.join(args.output_dir,
                                          "summary.json")) as f:
    json.dump(dict(summary, command=command), f, indent=2)
  text = markdown(summary, command)
  with atomic_io.atomic_open(os.path.join(args.output_dir,
                                          "summary.md")) as f:
    f.write(text)
  print(text + "\n%.0f s in all" % (time.perf_counter() - started))


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
