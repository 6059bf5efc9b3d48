# coding=utf-8
"""GLUE over a checkpoint: fine-tunes every GLUE task and writes the table.

Starts one run_classifier.py process per (task, seed) on the official GLUE
download and writes, in --output_dir:

  <task>/seed_<k>/      run_classifier's --output_dir of seed k
                        (--tf_random_seed=k) and run_classifier.log, its
                        console output;
  ax/                   with --do_predict: AX predicted by the median MNLI
                        run;
  glue_results.md/.csv/.json  per task its dev-set metrics per seed, their
                        medians and its score; the GLUE score
                        (bertkit/tasks/glue/suite.py says how it is
                        computed);
  submission/           with --do_predict: the leaderboard's files (CoLA.tsv,
                        ..., MNLI-m.tsv, MNLI-mm.tsv, ..., AX.tsv), each from
                        its task's median run.

Each task's learning rate, epochs, batch and sequence length come from
--task_flags_dir/<task>.flags (configs/glue: the BERT paper's defaults).
Arguments after `--` go to every run_classifier.py process and win over the
flagfile, e.g. `-- --num_train_epochs=2 --use_fp16`.

Runs go one after another on a CPU, and in parallel over the GPUs when there
are several (one run per GPU, CUDA_VISIBLE_DEVICES set per process; the GPUs
are CUDA_VISIBLE_DEVICES's if set, else those `nvidia-smi -L` lists). A rerun
skips the runs whose eval_results.json exists and completes the others.
What every run would refuse (a missing file or GLUE folder, an
--init_checkpoint without a checkpoint, a checkpoint whose directory holds no
config or vocab without --bert_config_file or --vocab_file) is refused before
the first run: one `error:` line, exit 2, nothing written. A failing run is
named with its exit code and log; the suite goes on with the others, writes
the table of what finished and exits with 3.

Example:
  python run_glue.py --init_checkpoint=/tmp/pretrain \
    --bert_config_file=configs/bert_base.json --vocab_file=vocab.txt \
    --glue_dir=/data/glue_data --output_dir=/tmp/glue --seeds=5 --do_predict
"""

import concurrent.futures
import os
import queue
import subprocess
import sys
import time

from absl import app
from absl import flags
from absl import logging

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common.errors import UserError, main_with_user_errors, parse_flags
from bertkit.common import shared_flags
from bertkit.tasks.glue import suite as glue_suite
from bertkit.tasks.classification import registry as task_registry

REPO_ROOT = os.path.dirname(os.path.abspath(__file__))
CLASSIFIER = os.path.join(REPO_ROOT, "run_classifier.py")
LOG_FILE = "run_classifier.log"
# run_classifier flags the suite sets per run: given after `--` they would
# put every run in one directory or train where it predicts.
SUITE_FLAGS = ("task_name", "data_dir", "output_dir", "init_checkpoint",
               "vocab_file", "bert_config_file", "do_lower_case",
               "tf_random_seed", "do_train", "do_eval", "do_predict")

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string(
      "init_checkpoint", None,
      "The pretrained model: a checkpoint prefix or directory (ours or "
      "Google's layout) or a Hugging Face BERT directory; passed to every "
      "run_classifier.py run.")
  shared_flags.define_bert_config_file()
  shared_flags.define_vocab_file()
  shared_flags.define_do_lower_case()
  flags.DEFINE_string(
      "glue_dir", None,
      "The GLUE download's root: CoLA/, SST-2/, MRPC/, STS-B/, QQP/, MNLI/, "
      "QNLI/, RTE/, WNLI/ and, for --do_predict, diagnostic/.")
  flags.DEFINE_string("output_dir", None,
                      "Runs, logs and glue_results.* go here; a rerun "
                      "skips the finished runs.")
  flags.DEFINE_list("tasks", list(glue_suite.SCORED_TASKS),
                    "The GLUE tasks to run; ax follows mnli with "
                    "--do_predict.")
  flags.DEFINE_integer(
      "seeds", 1,
      "Runs per task (--tf_random_seed=1..N); the table reports their "
      "medians. The GLUE score of a paper: 5. Raising it later reuses the "
      "runs already made.")
  flags.DEFINE_bool("do_predict", False,
                    "Also predict the test sets and gather the leaderboard's "
                    "files in OUTPUT_DIR/submission.")
  flags.DEFINE_string(
      "task_flags_dir", os.path.join(REPO_ROOT, "configs", "glue"),
      "Directory of <task>.flags, each task's run_classifier flags.")


def check_output_dir(path):
  """Refuses an --output_dir that cannot become a directory: it, or the
  nearest of its parents that exists, is not one.

  Raises:
    UserError: naming the flag and the path in the way.
  """
  existing = os.path.abspath(path)
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  if not os.path.isdir(existing):
    raise UserError("--output_dir %s: %s is a file, not a directory" % (
        path, existing))


def check_flags(extra_flags):
  """Every check that needs no run, made before anything is written.

  Args:
    extra_flags: the arguments after `--`.

  Returns:
    The task names to run, ax included when it runs.

  Raises:
    UserError: a missing or wrong flag, file or GLUE folder, or a
      pretrained model that every run would refuse.
  """
  shared_flags.require(FLAGS, ("init_checkpoint", "glue_dir", "output_dir"))
  shared_flags.check_local_files(FLAGS, ("bert_config_file", "vocab_file"))
  glue_suite.check_init_checkpoint(FLAGS.init_checkpoint,
                                   FLAGS.bert_config_file, FLAGS.vocab_file)
  if FLAGS.seeds < 1:
    raise UserError("--seeds must be >= 1, got %d" % FLAGS.seeds)
  if not os.path.isdir(FLAGS.glue_dir):
    raise UserError("--glue_dir %s is not a directory" % FLAGS.glue_dir)
  check_output_dir(FLAGS.output_dir)
  # errors.parse_flags has refused an argument that is no flag, after `--`
  # as before it.
  for arg in extra_flags:
    name = arg.lstrip("-").split("=")[0]
    if name not in SUITE_FLAGS and name.startswith("no"):  # --noNAME
      name = name[2:]
    if name in SUITE_FLAGS:
      raise UserError("%s: run_glue.py sets --%s for each run; use its own "
                      "flag" % (arg, name))
  tasks = glue_suite.suite_tasks(glue_suite.parse_tasks(FLAGS.tasks),
                                 FLAGS.do_predict)
  missing = glue_suite.missing_inputs(FLAGS.glue_dir, tasks, FLAGS.do_predict,
                                      FLAGS.task_flags_dir, os.path.exists)
  if missing:
    raise UserError("missing %s%s" % (
        missing[0], " and %d more" % (len(missing) - 1)
        if len(missing) > 1 else ""))
  return tasks


def _label(run):
  if run.seed is None:
    return run.task
  return "%s seed %d/%d" % (run.task, run.seed, FLAGS.seeds)


def _last_error_line(log_path):
  """The child's `error:` line, if its log ends with one."""
  with open(log_path, errors="replace") as f:
    lines = [l.strip() for l in f if l.startswith("error:")]
  return lines[-1] if lines else None


def _metrics_text(run):
  if run.task == "ax":
    return "AX predicted"
  metrics = glue_suite.read_eval_results(
      os.path.join(run.output_dir, task_registry.EVAL_RESULTS_FILE),
      run.task)
  return ", ".join("%s %.4f" % item for item in metrics.items())


def run_one(run, command, devices):
  """Runs one run_classifier.py process on a free device and logs it.

  Args:
    run: a glue_suite.Run.
    command: its argument list.
    devices: a queue of CUDA_VISIBLE_DEVICES values (None: leave it).

  Returns:
    The process's exit code; -1 when it exits with 0 but its results
    cannot be read.
  """
  device = devices.get()
  try:
    os.makedirs(run.output_dir, exist_ok=True)
    log_path = os.path.join(run.output_dir, LOG_FILE)
    env = dict(os.environ)
    if device is not None:
      env["CUDA_VISIBLE_DEVICES"] = device
    logging.info("%s: %s%s (log: %s)", _label(run),
                 "training" if run.action == glue_suite.TRAIN else
                 "predicting", "" if device is None else " on GPU " + device,
                 log_path)
    start = time.time()
    with open(log_path, "a") as log:
      log.write("$ %s\n" % " ".join(command))
      log.flush()
      code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT,
                             env=env)
  finally:
    devices.put(device)
  seconds = time.time() - start
  if code == 0:
    try:
      logging.info("%s: done in %.0f s, %s", _label(run), seconds,
                   _metrics_text(run))
    except UserError as e:
      logging.error("%s ended after %.0f s without its results: %s",
                    _label(run), seconds, e)
      return -1
  else:
    reason = _last_error_line(log_path)
    logging.error("%s failed with exit code %d after %.0f s%s; log: %s",
                  _label(run), code, seconds,
                  " (%s)" % reason if reason else "", log_path)
  return code


def run_all(runs, config, gpus):
  """Runs the runs that are not finished, one per GPU at a time (one at a
  time without GPUs).

  Returns:
    The labels of the runs that failed.
  """
  devices = queue.Queue()
  for device in gpus or [None]:
    devices.put(device)
  with concurrent.futures.ThreadPoolExecutor(max(1, len(gpus))) as pool:
    futures = {}
    for run in runs:
      if run.action == glue_suite.SKIP:
        logging.info("%s: finished before (%s found), skipped", _label(run),
                     task_registry.EVAL_RESULTS_FILE if run.seed else
                     "submission file")
        continue
      command = glue_suite.classifier_command(run, config)
      futures[pool.submit(run_one, run, command, devices)] = run
  # In plan order, whichever finished first.
  return [_label(run) for future, run in futures.items()
          if future.result() != 0]


def gpus_present():
  """The GPUs to spread the runs over (glue_suite.visible_gpus)."""
  try:
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                             text=True, timeout=60).stdout
  except (OSError, subprocess.SubprocessError):
    listing = None
  return glue_suite.visible_gpus(os.environ, listing)


def summarize(tasks, failed):
  """Task summaries of the finished runs of `tasks` (none for a task
  without one).

  Args:
    tasks: task names.
    failed: labels of the failed runs; a run whose results cannot be read
      is added (once).

  Returns:
    glue_suite.summarize_task results.
  """
  summaries = []
  for task in tasks:
    per_seed = {}
    for seed in range(1, FLAGS.seeds + 1):
      path = os.path.join(glue_suite.seed_dir(FLAGS.output_dir, task, seed),
                          task_registry.EVAL_RESULTS_FILE)
      if not os.path.exists(path):
        continue
      try:
        per_seed[seed] = glue_suite.read_eval_results(path, task)
      except UserError as e:
        label = _label(glue_suite.Run(task, seed, None, None))
        if label not in failed:
          logging.error("%s: %s; left out", label, e)
          failed.append(label)
    if per_seed:
      summaries.append(glue_suite.summarize_task(task, per_seed))
  return summaries


def _read(path):
  """A text file's content, None if it is not there."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return f.read()


def predict_ax(summaries, config, gpus):
  """AX with the median MNLI run's model, after the MNLI runs.

  Returns:
    (the ax run, None if it failed; labels of failed runs).
  """
  mnli = [s for s in summaries if s["task"] == "mnli"]
  if not mnli:
    logging.error("ax: no finished mnli run to predict it with; skipped")
    return None, ["ax"]
  mnli_dir = glue_suite.seed_dir(FLAGS.output_dir, "mnli",
                                 mnli[0]["median_seed"])
  run = glue_suite.plan_ax(FLAGS.output_dir, os.path.exists)
  if run.action != glue_suite.SKIP:
    state = os.path.join(mnli_dir, glue_suite.CHECKPOINT_STATE)
    try:
      text = glue_suite.ax_checkpoint_state(mnli_dir, _read(state))
    except UserError as e:
      logging.error("ax: %s; skipped", e)
      return None, ["ax"]
    os.makedirs(run.output_dir, exist_ok=True)
    with atomic_io.atomic_open(os.path.join(
        run.output_dir, glue_suite.CHECKPOINT_STATE)) as f:
      f.write(text)
    logging.info("ax: predicting with %s's model", mnli_dir)
  failed = run_all([run], config, gpus)
  return (None if failed else run), failed


def gather_submissions(summaries, ax_run, failed):
  """Copies each task's median-run files into OUTPUT_DIR/submission.

  Args:
    summaries: the task summaries (their median runs).
    ax_run: the AX run, None if it did not succeed.
    failed: labels of the failed runs, each starting with its task.

  Returns:
    Labels of the tasks whose median run has no submission files though
    none of the task's runs failed.
  """
  sources, missing = [], []
  for summary in summaries:
    run_dir = glue_suite.seed_dir(FLAGS.output_dir, summary["task"],
                                  summary["median_seed"])
    sources.append((summary["task"], run_dir))
  if ax_run is not None:
    sources.append(("ax", ax_run.output_dir))
  present = []
  for task, run_dir in sources:
    if all(os.path.exists(p)
           for p in glue_suite.submission_paths(task, run_dir)):
      present.append((task, run_dir))
    elif not any(f.split()[0] == task for f in failed):
      missing.append("%s submission" % task)
  copied = glue_suite.copy_submissions(FLAGS.output_dir, present)
  logging.info("%d submission files in %s", len(copied),
               os.path.join(FLAGS.output_dir, task_registry.SUBMISSION_DIR))
  return missing


def main(argv):
  tasks = check_flags(argv[1:])
  scored = [t for t in tasks if t != "ax"]
  config = glue_suite.SuiteConfig(
      sys.executable, CLASSIFIER, os.path.abspath(FLAGS.task_flags_dir),
      os.path.abspath(FLAGS.glue_dir), FLAGS.init_checkpoint,
      FLAGS.bert_config_file, FLAGS.vocab_file,
      shared_flags.given(FLAGS, "do_lower_case"),
      FLAGS.do_predict, argv[1:])
  gpus = gpus_present()
  runs = glue_suite.plan_runs(scored, FLAGS.seeds, FLAGS.output_dir,
                              FLAGS.do_predict, os.path.exists)
  logging.info("%d tasks x %d seed(s): %d runs to make, %s", len(scored),
               FLAGS.seeds, sum(r.action != glue_suite.SKIP for r in runs),
               "%d at a time over GPUs %s" % (len(gpus), ",".join(gpus))
               if gpus else "one after another (no GPU)")
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  failed = run_all(runs, config, gpus)
  summaries = summarize(scored, failed)
  ax_run = None
  if "ax" in tasks:
    ax_run, ax_failed = predict_ax(summaries, config, gpus)
    failed += ax_failed
  if FLAGS.do_predict:
    failed += gather_submissions(summaries, ax_run, failed)
  result = glue_suite.results(summaries, FLAGS.seeds, failed)
  paths = glue_suite.write_results(FLAGS.output_dir, result)
  logging.info("GLUE score %s; table: %s", "%.1f" % (
      100 * result["glue_score"]) if result["glue_score"] is not None else
      "- (missing %s)" % ",".join(result["missing_tasks"]), paths[0])
  if failed:
    raise errors.TrainingFailed("%d run(s) failed: %s; see the lines above"
                                % (len(failed), ", ".join(failed)))


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main), flags_parser=parse_flags)
