# coding=utf-8
"""run_glue.py's runs: one run_classifier.py process per (task, seed), one
per GPU at a time (one after another without GPUs), then AX from the median
MNLI run, the submission files and the table (suite.py plans them and reads
their results)."""

import concurrent.futures
import os
import queue
import subprocess
import sys
import time

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common import file_patterns
from bertkit.common.errors import UserError
from bertkit.tasks.classification import registry as task_registry
from bertkit.tasks.glue import options as glue_options
from bertkit.tasks.glue import suite as glue_suite
from bertkit.tasks.glue import suite_results as glue_results

CLASSIFIER = os.path.join(glue_options.REPO_ROOT, "run_classifier.py")
LOG_FILE = "run_classifier.log"
# run_classifier flags the suite sets per run: given after `--` they would
# put every run in one directory or train where it predicts.
SUITE_FLAGS = ("task_name", "data_dir", "output_dir", "init_checkpoint",
               "vocab_file", "bert_config_file", "do_lower_case",
               "tf_random_seed", "do_train", "do_eval", "do_predict")


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


def check_inputs(opts, extra_flags):
  """Every check that needs no run, made before anything is written.

  Args:
    opts: the GlueSuiteOptions.
    extra_flags: the arguments after `--`.

  Returns:
    The task names to run, ax included when it runs.

  Raises:
    UserError: a missing or wrong flag, file or GLUE folder, or a
      pretrained model that every run would refuse.
  """
  file_patterns.check_paths(opts)
  glue_suite.check_init_checkpoint(opts.init_checkpoint,
                                   opts.bert_config_file, opts.vocab_file)
  check_output_dir(opts.output_dir)
  # flag_parsing.parse_flags has refused an argument that is no flag,
  # after `--` as before it.
  for arg in extra_flags:
    name = arg.lstrip("-").split("=")[0]
    if name not in SUITE_FLAGS and name.startswith("no"):  # --noNAME
      name = name[2:]
    if name in SUITE_FLAGS:
      raise UserError("%s: run_glue.py sets --%s for each run; use its own "
                      "flag" % (arg, name))
  tasks = glue_suite.suite_tasks(glue_suite.parse_tasks(opts.tasks),
                                 opts.do_predict)
  missing = glue_suite.missing_inputs(opts.glue_dir, tasks, opts.do_predict,
                                      opts.task_flags_dir, os.path.exists)
  if missing:
    raise UserError("missing %s%s" % (
        missing[0], " and %d more" % (len(missing) - 1)
        if len(missing) > 1 else ""))
  return tasks


def _last_error_line(log_path):
  """The child's `error:` line, if its log ends with one."""
  with open(log_path, errors="replace") as f:
    lines = [l.strip() for l in f if l.startswith("error:")]
  return lines[-1] if lines else None


def gpus_present():
  """The GPUs to spread the runs over (glue_suite.visible_gpus)."""
  try:
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                             text=True, timeout=60).stdout
  except (OSError, subprocess.SubprocessError):
    listing = None
  return glue_suite.visible_gpus(os.environ, listing)


def _read(path):
  """A text file's content, None if it is not there."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return f.read()


class SuiteRunner:
  """Runs the suite's runs and reads what they leave.

  Attributes:
    opts: the GlueSuiteOptions.
    config: the glue_suite.SuiteConfig every command shares.
    gpus: the GPUs the runs are spread over (none: one at a time).
  """

  def __init__(self, opts, config, gpus):
    self.opts, self.config, self.gpus = opts, config, gpus

  def label(self, run):
    """How the log names a run: its task, and its seed of how many."""
    if run.seed is None:
      return run.task
    return "%s seed %d/%d" % (run.task, run.seed, self.opts.seeds)

  def metrics_text(self, run):
    if run.task == "ax":
      return "AX predicted"
    metrics = glue_results.read_eval_results(
        os.path.join(run.output_dir, task_registry.EVAL_RESULTS_FILE),
        run.task)
    return ", ".join("%s %.4f" % item for item in metrics.items())

  def run_one(self, run, command, devices):
    """Runs one run_classifier.py process on a free device and logs it.

    Args:
      run: a glue_suite.SuiteRun.
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
      logging.info("%s: %s%s (log: %s)", self.label(run),
                   "training" if run.action == glue_suite.ACTION_TRAIN else
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
        logging.info("%s: done in %.0f s, %s", self.label(run), seconds,
                     self.metrics_text(run))
      except UserError as e:
        logging.error("%s ended after %.0f s without its results: %s",
                      self.label(run), seconds, e)
        return -1
    else:
      reason = _last_error_line(log_path)
      logging.error("%s failed with exit code %d after %.0f s%s; log: %s",
                    self.label(run), code, seconds,
                    " (%s)" % reason if reason else "", log_path)
    return code

  def run_all(self, runs):
    """Runs the runs that are not finished, one per GPU at a time (one at a
    time without GPUs).

    Returns:
      The labels of the runs that failed.
    """
    devices = queue.Queue()
    for device in self.gpus or [None]:
      devices.put(device)
    with concurrent.futures.ThreadPoolExecutor(max(1, len(self.gpus))) as pool:
      futures = {}
      for run in runs:
        if run.action == glue_suite.ACTION_SKIP:
          logging.info("%s: finished before (%s found), skipped",
                       self.label(run),
                       task_registry.EVAL_RESULTS_FILE if run.seed else
                       "submission file")
          continue
        command = glue_suite.classifier_command(run, self.config)
        futures[pool.submit(self.run_one, run, command, devices)] = run
    # In plan order, whichever finished first.
    return [self.label(run) for future, run in futures.items()
            if future.result() != 0]

  def summarize(self, tasks, failed):
    """Task summaries of the finished runs of `tasks` (none for a task
    without one).

    Args:
      tasks: task names.
      failed: labels of the failed runs; a run whose results cannot be read
        is added (once).

    Returns:
      glue_results.summarize_task results.
    """
    summaries = []
    for task in tasks:
      per_seed = {}
      for seed in range(1, self.opts.seeds + 1):
        path = os.path.join(
            glue_suite.seed_dir(self.opts.output_dir, task, seed),
            task_registry.EVAL_RESULTS_FILE)
        if not os.path.exists(path):
          continue
        try:
          per_seed[seed] = glue_results.read_eval_results(path, task)
        except UserError as e:
          label = self.label(glue_suite.SuiteRun(task, seed, None, None))
          if label not in failed:
            logging.error("%s: %s; left out", label, e)
            failed.append(label)
      if per_seed:
        summaries.append(glue_results.summarize_task(task, per_seed))
    return summaries

  def predict_ax(self, summaries):
    """AX with the median MNLI run's model, after the MNLI runs.

    Returns:
      (the ax run, None if it failed; labels of failed runs).
    """
    mnli = [s for s in summaries if s["task"] == "mnli"]
    if not mnli:
      logging.error("ax: no finished mnli run to predict it with; skipped")
      return None, ["ax"]
    mnli_dir = glue_suite.seed_dir(self.opts.output_dir, "mnli",
                                   mnli[0]["median_seed"])
    run = glue_suite.plan_ax(self.opts.output_dir, os.path.exists)
    if run.action != glue_suite.ACTION_SKIP:
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
    failed = self.run_all([run])
    return (None if failed else run), failed

  def gather_submissions(self, summaries, ax_run, failed):
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
      run_dir = glue_suite.seed_dir(self.opts.output_dir, summary["task"],
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
    copied = glue_results.copy_submissions(self.opts.output_dir, present)
    logging.info("%d submission files in %s", len(copied), os.path.join(
        self.opts.output_dir, task_registry.SUBMISSION_DIR))
    return missing


def run(opts, extra_flags):
  """Runs the GLUE suite `opts` (GlueSuiteOptions) ask for; `extra_flags`,
  the arguments after `--`, go to every run_classifier.py.

  Raises:
    UserError: what every run would refuse, before any run.
    errors.TrainingFailed: a run failed (the others went on, the table of
      what finished is written).
  """
  tasks = check_inputs(opts, extra_flags)
  scored = [t for t in tasks if t != "ax"]
  config = glue_suite.SuiteConfig(
      sys.executable, CLASSIFIER, os.path.abspath(opts.task_flags_dir),
      os.path.abspath(opts.glue_dir), opts.init_checkpoint,
      opts.bert_config_file, opts.vocab_file, opts.do_lower_case,
      opts.do_predict, list(extra_flags))
  runner = SuiteRunner(opts, config, gpus_present())
  runs = glue_suite.plan_runs(scored, opts.seeds, opts.output_dir,
                              opts.do_predict, os.path.exists)
  logging.info("%d tasks x %d seed(s): %d runs to make, %s", len(scored),
               opts.seeds,
               sum(r.action != glue_suite.ACTION_SKIP for r in runs),
               "%d at a time over GPUs %s" % (
                   len(runner.gpus), ",".join(runner.gpus))
               if runner.gpus else "one after another (no GPU)")
  os.makedirs(opts.output_dir, exist_ok=True)
  failed = runner.run_all(runs)
  summaries = runner.summarize(scored, failed)
  ax_run = None
  if "ax" in tasks:
    ax_run, ax_failed = runner.predict_ax(summaries)
    failed += ax_failed
  if opts.do_predict:
    failed += runner.gather_submissions(summaries, ax_run, failed)
  result = glue_results.results(summaries, opts.seeds, failed)
  paths = glue_results.write_results(opts.output_dir, result)
  logging.info("GLUE score %s; table: %s", "%.1f" % (
      100 * result["glue_score"]) if result["glue_score"] is not None else
      "- (missing %s)" % ",".join(result["missing_tasks"]), paths[0])
  if failed:
    raise errors.TrainingFailed("%d run(s) failed: %s; see the lines above"
                                % (len(failed), ", ".join(failed)))
