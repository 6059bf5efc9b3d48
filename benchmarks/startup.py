"""Start-up: when each program's first training step ends, and its whole run.

For every program of the toolkit, a short run as a user starts it from the
repository root (`python <program> ...`, a process of its own), timed from
outside: the first training step's end after the launch, and the whole
process's wall clock. The programs and what they run:

  pretraining       run_pretraining.py, the fast recipe
                    (configs/recipes/fast), BERT-mini (its vocab_size set to
                    the vocab's), on records create_pretraining_data.py makes
                    of --corpus with the fast recipe's flags, --steps steps;
  classifier        run_classifier.py, sample_data/classify (the tsv task);
  ner               run_ner.py, sample_data/ner;
  swag              run_swag.py, sample_data/swag;
  squad             run_squad.py on a SQuAD 1.1 file made of the corpus's
                    sentences (squad_json);
  glue              run_glue.py, SST-2 only, one seed, on a GLUE folder made
                    of sample_data/classify; its run_classifier.py child
                    does the training (and the dev evaluation, which
                    run_glue.py always asks for);
  extract_features  extract_features.py on sample_data/classify/dev.tsv's
                    sentences: no training, its whole process only;
  peer              benchmarks/pytorch_peer.py (the PyTorch peer) on records
                    of the corpus masked once at the fast recipe's rate: its
                    whole process, and its step time from its JSON line.

The fine-tuning programs start from one BERT-mini pretrained once (the fast
recipe, --pretrain_steps steps; its output directory holds the config and
vocab, so --init_checkpoint=<dir> is all they are told), --do_train only,
with --num_train_epochs chosen to make about --steps steps of
--train_batch_size. Every training program writes throughput.jsonl with
--log_every_n_steps=1: a line at each step's end with its time.time().

Per run: first step = the first line's time minus time.time() just before
the launch (imports, graph, input pipeline, session and the step itself);
steady step time = the median of the differences between consecutive lines
after the first STEADY_SKIP; overhead = whole process - steps x steady step
time (what a run costs besides its steps: start-up, and the checkpoint,
evaluation and exit at the end). --runs runs of each program, interleaved
round-robin (each round starting one program later), so that a change in the
machine's load hits every program alike; the table gives medians.

Writes to --output_dir: summary.md and summary.json (per program the
medians, and every run), runs/<program>_r<i>/ (each run's output and its
stdout.log / stderr.log, emptied before the run) and data/ (the prepared
inputs, benchmarks/startup_data.py: reused by a later run whose preparation
flags and corpus are the same).

Examples:
  python benchmarks/startup.py --output_dir=/tmp/startup
  python benchmarks/startup.py --output_dir=/tmp/startup --runs=5 \\
    --programs=pretraining,classifier,peer
  python benchmarks/startup.py --output_dir=/tmp/startup_smoke --smoke
"""

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import startup_data
import time_to_accuracy as tta

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.engine.report import throughput
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs
from bertkit.tasks.glue import suite as glue_suite
from bertkit.tasks.ner import data as ner_data
from bertkit.tasks.swag import data as swag_data

REPO_ROOT = tta.REPO_ROOT
PROGRAMS = ("pretraining", "classifier", "ner", "swag", "squad", "glue",
            "extract_features", "peer")
RECIPE = startup_data.RECIPE
# Leading steps left out of the steady step time: graph optimisation, the
# allocator's and caches' warm-up (the first differences are slower).
STEADY_SKIP = 3
# Steps a run needs: STEADY_SKIP, then two lines, one difference.
MIN_STEPS = STEADY_SKIP + 2
# --smoke's steps: two differences after the skipped ones.
SMOKE_STEPS = MIN_STEPS + 1
# The peer's untimed steps before its timed ones (its --warmup_steps).
PEER_WARMUP_STEPS = 2
NER_DIR = os.path.join(REPO_ROOT, "sample_data", "ner")
SWAG_DIR = os.path.join(REPO_ROOT, "sample_data", "swag")
# run_squad's query length and window stride, as shares of the sequence
# length (configs/fine_tuning/squad.sh: 32 and 64 at 128).
SQUAD_QUERY_SHARE, SQUAD_STRIDE_SHARE = 4, 2


# ------------------------------------------------------ the figures of a run


def read_step_times(path):
  """The `time` of each line of a throughput.jsonl, in step order.

  Raises:
    RuntimeError: the file is missing or holds no step.
  """
  try:
    with open(path) as f:
      lines = [json.loads(l) for l in f if l.strip()]
  except OSError:
    lines = []
  if not lines:
    raise RuntimeError("%s holds no step: did the run train?" % path)
  return [float(l["time"]) for l in sorted(lines, key=lambda l: l["step"])]


def steady_step_seconds(times):
  """The median difference between consecutive step ends after the first
  STEADY_SKIP; None with too few steps."""
  later = times[STEADY_SKIP:]
  differences = [b - a for a, b in zip(later, later[1:])]
  return statistics.median(differences) if differences else None


def overhead_seconds(whole, steps, steady):
  """What the run cost besides its steps at the steady rate; None without
  a steady step time."""
  return None if steady is None else whole - steps * steady


def run_figures(whole, launched=None, times=None, steps=0, steady=None):
  """A run's figures, from its step ends (`times`, time.time() values;
  `launched`: time.time() before the launch) or, for the peer, its step
  count and steady step time; rounded for the summary."""
  first = None
  if times:
    first = times[0] - launched
    steps, steady = len(times), steady_step_seconds(times)
  overhead = overhead_seconds(whole, steps, steady)
  return {"steps": steps, "first_step_seconds": _rounded(first),
          "steady_step_seconds": _rounded(steady, 5),
          "whole_seconds": _rounded(whole),
          "overhead_seconds": _rounded(overhead)}


def _rounded(value, digits=3):
  return None if value is None else round(value, digits)


def epochs_for_steps(count, batch_size, steps):
  """--num_train_epochs for `steps` steps of `batch_size` from `count`
  training examples: the programs take int(count / batch x epochs) steps,
  so half a step more leaves the floor at `steps`."""
  return (steps + 0.5) * batch_size / count


def _median(rows, key):
  """The median of the rows' `key`; None if a row has none."""
  values = [r[key] for r in rows]
  return None if None in values else statistics.median(values)


def summarize(programs, rows):
  """Per program its runs' medians (first step also min and max), and the
  runs."""
  out = {}
  for program in programs:
    mine = [r for r in rows if r["program"] == program]
    firsts = [r["first_step_seconds"] for r in mine]
    out[program] = {
        "runs": len(mine), "steps": _median(mine, "steps"),
        "first_step_seconds": None if None in firsts else {
            "median": _median(mine, "first_step_seconds"),
            "min": min(firsts), "max": max(firsts)},
        "steady_step_seconds": _median(mine, "steady_step_seconds"),
        "whole_seconds": _median(mine, "whole_seconds"),
        "overhead_seconds": _median(mine, "overhead_seconds"),
        "per_run": mine}
  return out


def _shown(value, form="%.1f"):
  return "-" if value is None else form % value


def markdown(summary, command):
  """summary.md: the per-program table."""
  lines = ["# Start-up: first training step and whole process", "",
           "`%s`" % command, "",
           "Seconds after the launch; medians of the runs (first step: "
           "min-max). %d steps of batch %d, sequence length %d, %s." % (
               summary["steps"], summary["train_batch_size"],
               summary["max_seq_length"], summary["model"]), "",
           "| program | runs | first step, s | steady s/step | "
           "whole process, s | overhead, s |", "|---|---|---|---|---|---|"]
  for program, p in summary["programs"].items():
    first = p["first_step_seconds"]
    lines.append("| %s | %d | %s | %s | %s | %s |" % (
        program, p["runs"], "-" if first is None else "%.1f (%.1f-%.1f)" % (
            first["median"], first["min"], first["max"]),
        _shown(p["steady_step_seconds"], "%.3f"),
        _shown(p["whole_seconds"]), _shown(p["overhead_seconds"])))
  lines += ["", "Overhead: whole process - steps x steady s/step. The peer "
            "logs no step ends: its s/step is from its examples/sec, its "
            "steps include its %d untimed warm-up steps. extract_features "
            "trains no step." % PEER_WARMUP_STEPS]
  return "\n".join(lines) + "\n"


# ---------------------------------------------------------- the commands


def training_count(program, data):
  """The number a fine-tuning program counts its steps from: examples
  (classifier, glue, swag), sentences (ner: its windows, one a sentence at
  these lengths), questions (squad)."""
  if program in ("classifier", "glue"):
    return len(startup_data.tsv_rows(os.path.join(
        startup_data.CLASSIFY_DIR, "train.tsv")))
  if program == "ner":
    return len(ner_data.read_sentences(ner_data.split_path(NER_DIR,
                                                           "train")))
  if program == "swag":
    return len(swag_data.read_examples(swag_data.split_path(SWAG_DIR,
                                                            "train")))
  with open(data.squad_questions) as f:
    return int(f.read())


def fine_tuning_flags(args, data, program):
  """What every fine-tuning run is told: batch, length, epochs for about
  --steps steps, a log line per step."""
  epochs = epochs_for_steps(training_count(program, data),
                            args.train_batch_size, args.steps)
  return ["--train_batch_size=%d" % args.train_batch_size,
          "--max_seq_length=%d" % args.max_seq_length,
          "--num_train_epochs=%.6g" % epochs, "--log_every_n_steps=1"]


def fine_tuning_command(args, data, program, output_dir):
  """run_classifier.py, run_ner.py, run_swag.py or run_squad.py, --do_train
  from the pretrained model."""
  task = {"classifier": ["run_classifier.py", "--task_name=tsv",
                         "--data_dir=%s" % startup_data.CLASSIFY_DIR],
          "ner": ["run_ner.py", "--data_dir=%s" % NER_DIR],
          "swag": ["run_swag.py", "--data_dir=%s" % SWAG_DIR],
          "squad": ["run_squad.py", "--train_file=%s" % data.squad,
                    "--max_query_length=%d" % (
                        args.max_seq_length // SQUAD_QUERY_SHARE),
                    "--doc_stride=%d" % (
                        args.max_seq_length // SQUAD_STRIDE_SHARE)]}[program]
  return [sys.executable] + task + [
      "--init_checkpoint=%s" % data.pretrained,
      "--output_dir=%s" % output_dir, "--do_train"] + fine_tuning_flags(
          args, data, program)


def glue_command(args, data, output_dir):
  """run_glue.py on SST-2, one seed; the fine-tuning flags go after `--`
  to its run_classifier.py."""
  return [sys.executable, "run_glue.py",
          "--init_checkpoint=%s" % data.pretrained,
          "--glue_dir=%s" % data.glue, "--output_dir=%s" % output_dir,
          "--tasks=%s" % startup_data.GLUE_TASK, "--seeds=1",
          "--"] + fine_tuning_flags(args, data, "glue")


def extract_features_command(args, data, run_dir):
  """extract_features.py, token features of upstream's last four layers
  (the smoke model has two)."""
  with open(data.model_config) as f:
    layers = min(4, json.load(f)["num_hidden_layers"])
  return [sys.executable, "extract_features.py",
          "--input_file=%s" % data.extract_input,
          "--output_file=%s" % os.path.join(run_dir, "features.jsonl"),
          "--init_checkpoint=%s" % data.pretrained,
          "--layers=%s" % ",".join(str(-i) for i in range(1, layers + 1)),
          "--max_seq_length=%d" % args.max_seq_length,
          "--batch_size=%d" % args.train_batch_size]


def peer_command(args, data):
  """The PyTorch peer on the static-masked records, the fast recipe's
  masked positions and learning rate, masked LM only as the recipe."""
  values = tta.read_flagfile(tta.recipe_file(args, RECIPE, "run_pretraining"))
  threads = ["--threads=%d" % args.peer_threads] if args.peer_threads else []
  return [sys.executable, os.path.join("benchmarks", "pytorch_peer.py"),
          "--bert_config_file=%s" % data.peer_config,
          "--input_file=%s" % data.static_records,
          "--max_seq_length=%d" % args.max_seq_length,
          "--max_predictions_per_seq=%s" % values["max_predictions_per_seq"],
          "--train_batch_size=%d" % args.train_batch_size,
          "--learning_rate=%s" % values["learning_rate"], "--masked_lm_only",
          "--num_steps=%d" % args.steps,
          "--warmup_steps=%d" % PEER_WARMUP_STEPS] + threads


def command(args, data, program, run_dir):
  """The command of a run and the throughput.jsonl its steps go to (None:
  no training step to time; run_glue's is its run_classifier's)."""
  out = os.path.join(run_dir, "output")
  steps_file = os.path.join(out, throughput.STEPS_FILE)
  if program == "pretraining":
    return startup_data.pretraining_command(args, data, out,
                                            args.steps), steps_file
  if program == "glue":
    return glue_command(args, data, out), os.path.join(
        glue_suite.seed_dir(out, startup_data.GLUE_TASK, 1),
        throughput.STEPS_FILE)
  if program == "extract_features":
    return extract_features_command(args, data, run_dir), None
  if program == "peer":
    return peer_command(args, data), None
  return fine_tuning_command(args, data, program, out), steps_file


# ------------------------------------------------------------- the runs


def _tail(path, chars=2000):
  with open(path, errors="replace") as f:
    return f.read()[-chars:]


def timed_run(argv, run_dir, timeout):
  """Runs `argv` from the repository root, its output to run_dir's
  stdout.log and stderr.log.

  Returns:
    (time.time() just before the launch, whole-process wall seconds).

  Raises:
    RuntimeError: it failed or ran past `timeout` seconds (its stderr's
      tail printed first).
  """
  logs = [os.path.join(run_dir, name) for name in ("stdout.log",
                                                   "stderr.log")]
  with open(logs[0], "w") as out, open(logs[1], "w") as err:
    # The step ends in throughput.jsonl are the child's time.time(): the
    # launch on the same clock; the whole process on a monotonic one.
    launched = time.time()
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=err,
                               env=child_runs.child_env())
    try:
      code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
      code = "killed after %d s" % timeout
    seconds = time.perf_counter() - start
  if code != 0:
    sys.stderr.write(_tail(logs[1]) + "\n")
    raise RuntimeError("%s failed (%s); its output: %s" % (
        os.path.basename(argv[1]), "exit code %s" % code
        if isinstance(code, int) else code, run_dir))
  return launched, seconds


def peer_step(run_dir, batch_size):
  """The peer's steady step time: its JSON line's examples_per_sec."""
  with open(os.path.join(run_dir, "stdout.log")) as f:
    lines = [l for l in f if l.startswith("{")]
  if not lines:
    raise RuntimeError("the peer printed no JSON line; see %s" % run_dir)
  return batch_size / json.loads(lines[-1])["examples_per_sec"]


def run_one(args, data, program, repeat):
  """One run of `program` in a fresh directory; returns its row."""
  run_dir = os.path.join(args.output_dir, "runs", "%s_r%d" % (program,
                                                              repeat))
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  argv, steps_file = command(args, data, program, run_dir)
  launched, whole = timed_run(argv, run_dir, args.timeout_minutes * 60)
  if program == "peer":
    figures = run_figures(whole, steps=args.steps + PEER_WARMUP_STEPS,
                          steady=peer_step(run_dir, args.train_batch_size))
  elif steps_file is None:
    figures = run_figures(whole)
  else:
    figures = run_figures(whole, launched, read_step_times(steps_file))
  row = dict(program=program, run=repeat, **figures)
  print("%-16s r%d: first step %s s, steady %s s/step, whole %.1f s, "
        "overhead %s s (%d steps)" % (
            program, repeat, _shown(row["first_step_seconds"]),
            _shown(row["steady_step_seconds"], "%.3f"), whole,
            _shown(row["overhead_seconds"]), row["steps"]), flush=True)
  return row


def parse_args(argv=None):
  """The benchmark's flags (--smoke fills in a seconds-long run)."""
  parser = benchmark_args.ArgumentParser(description=__doc__.splitlines()[0])
  add = parser.add_argument
  add("--output_dir", required=True)
  add("--runs", type=int, default=3, help="runs of each program")
  add("--programs", default=",".join(PROGRAMS),
      help="comma-separated, of %s" % ",".join(PROGRAMS))
  add("--corpus", default=os.path.join(REPO_ROOT, "sample_data",
                                       "corpus.txt"),
      help="text (a sentence a line, blank lines between documents): the "
      "vocab, the pretraining records, the SQuAD file")
  add("--steps", type=int, default=10,
      help="training steps of each run (fine-tuning: about)")
  add("--train_batch_size", type=int, default=32)
  add("--max_seq_length", type=int, default=128)
  add("--bert_config_file", type=benchmark_args.existing_file,
      default=os.path.join(REPO_ROOT, "configs", "bert_mini.json"))
  add("--vocab_size", type=int, default=30522,
      help="create_vocab.py's (the corpus may give fewer)")
  add("--pretrain_steps", type=int, default=20,
      help="steps of the model the fine-tuning programs start from")
  add("--peer_threads", type=int,
      help="the peer's intra-op threads (default: its own, the usable "
      "cores, as TensorFlow uses; --smoke: 1, as PyTorch's threads wait "
      "spinning on a busy machine, which a seconds-long check cannot "
      "afford)")
  add("--recipes_dir", type=benchmark_args.existing_dir,
      default=tta.RECIPES_DIR)
  add("--timeout_minutes", type=float, default=30.0, help="per run")
  add("--smoke", action="store_true",
      help="a seconds-long check: a 2-layer model, seq 64, a 1000-word "
      "vocab, one run of %d steps" % SMOKE_STEPS)
  args = parser.parse_args(argv)
  if args.smoke:
    benchmark_args.fill_defaults(parser, args, dict(
        max_seq_length=64, vocab_size=1000, runs=1, steps=SMOKE_STEPS,
        pretrain_steps=4, peer_threads=1))
  return checked(args)


def checked(args):
  """The parsed flags, checked and completed.

  Raises:
    UserError: an unknown program, a missing corpus, a count out of range.
  """
  programs = [p.strip() for p in args.programs.split(",") if p.strip()]
  unknown = [p for p in programs if p not in PROGRAMS]
  if unknown or not programs:
    raise UserError("--programs: %s; expected some of %s" % (
        "unknown %s" % ",".join(unknown) if unknown else "none given",
        ",".join(PROGRAMS)))
  args.programs = [p for p in PROGRAMS if p in programs]
  if not os.path.isfile(args.corpus):
    raise UserError("--corpus %s: no such file" % args.corpus)
  args.corpus = os.path.abspath(args.corpus)
  # What time_to_accuracy's preparation reads of its own flags: the
  # recipe's dupe factor.
  args.dupe_factor = None
  for name, low in (("runs", 1), ("steps", MIN_STEPS),
                    ("train_batch_size", 1), ("pretrain_steps", 1)):
    if getattr(args, name) < low:
      raise UserError("--%s must be >= %d, got %d%s" % (
          name, low, getattr(args, name), " (the steady step time needs "
          "%d steps after the first %d)" % (2, STEADY_SKIP)
          if name == "steps" else ""))
  missing = [m for m in ("torch", "transformers")
             if importlib.util.find_spec(m) is None]
  if "peer" in args.programs and missing:
    raise UserError("the peer needs %s (pip install -r requirements-dev.txt)"
                    "; or leave it out of --programs" % " and ".join(missing))
  return args


def main(args):
  data = startup_data.prepare(args)
  rows = []
  for repeat in range(args.runs):
    shift = repeat % len(args.programs)
    for program in args.programs[shift:] + args.programs[:shift]:
      rows.append(run_one(args, data, program, repeat))
  command_line = " ".join(["python", "benchmarks/startup.py"] + sys.argv[1:])
  summary = {"command": command_line, "steps": args.steps,
             "train_batch_size": args.train_batch_size,
             "max_seq_length": args.max_seq_length,
             "model": "tiny (2x32)" if args.smoke else os.path.splitext(
                 os.path.basename(args.bert_config_file))[0],
             "corpus": args.corpus, "steady_skip": STEADY_SKIP,
             "programs": summarize(args.programs, rows)}
  text = markdown(summary, command_line)
  with atomic_io.atomic_open(os.path.join(args.output_dir,
                                          "summary.json")) as f:
    json.dump(summary, f, indent=2)
  with atomic_io.atomic_open(os.path.join(args.output_dir,
                                          "summary.md")) as f:
    f.write(text)
  print(text)
  return summary


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
