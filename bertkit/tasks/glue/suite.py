"""The GLUE suite over one checkpoint: its tasks and runs.

run_glue.py fine-tunes every task of the GLUE benchmark with run_classifier.py,
one process per (task, seed) (suite_runner.py); this module is what it plans,
without TensorFlow or processes (the tasks, their folders, files, metrics and
submission files are task_registry's); suite_results.py reads each run's
eval_results.json and computes the scores and the table:

  parse_tasks      the tasks of --tasks;
  check_init_checkpoint  what every run would refuse of the pretrained
                   model's flags;
  plan_runs        which (task, seed) runs are finished, need their test
                   predictions only, or need training;
  classifier_command  the run_classifier.py command of a run;
  visible_gpus     the GPUs the runs are spread over.
"""

import dataclasses
import os
import re
from typing import Optional, Sequence

from bertkit.common.errors import UserError
from bertkit.tasks.classification import registry as task_registry

FLAGS_SUFFIX = ".flags"
# TensorFlow's record of a directory's checkpoints, and the line naming the
# latest.
CHECKPOINT_STATE = "checkpoint"
_LATEST = re.compile(r'^model_checkpoint_path: "(.+)"$', re.M)
# The files a model directory describes its model with: a Hugging Face
# directory's config (checkpoint_formats.HF_CONFIG), ours and Google's
# config and every layout's vocab (run_directory.CONFIG_FILE, VOCAB_FILE);
# named here because those modules load TensorFlow.
HF_CONFIG = "config.json"
CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
# The tasks the GLUE score averages, in the leaderboard's order.
SCORED_TASKS = tuple(t.name for t in task_registry.scored_glue_tasks())

# What a run of the suite does.
ACTION_TRAIN, ACTION_PREDICT, ACTION_SKIP = "train", "predict", "skip"


@dataclasses.dataclass(frozen=True)
class SuiteRun:
  """One run_classifier.py run of the suite.

  Attributes:
    task: its task_registry name.
    seed: its --tf_random_seed; None for ax.
    output_dir: its --output_dir.
    action: what it does: ACTION_TRAIN, ACTION_PREDICT or, finished,
      ACTION_SKIP.
  """
  task: str
  seed: Optional[int]
  output_dir: Optional[str]
  action: Optional[str]


def parse_tasks(names):
  """The tasks of --tasks, in the leaderboard's order.

  Args:
    names: task names as given (any case; sst2 and stsb as aliases).

  Returns:
    A list of SCORED_TASKS without repeats.

  Raises:
    UserError: an unknown name, ax (it runs with mnli under --do_predict),
      or no task at all.
  """
  wanted = set()
  for name in names:
    if name.strip().lower() == "ax":
      raise UserError("--tasks: ax is not run on its own; it runs after mnli "
                      "when --do_predict is given")
    wanted.add(task_registry.get(name, "--tasks",
                                 task_registry.scored_glue_tasks()).name)
  if not wanted:
    raise UserError("--tasks is empty; expected some of %s"
                    % ",".join(SCORED_TASKS))
  return [name for name in SCORED_TASKS if name in wanted]


def _latest_checkpoint(directory):
  """The checkpoint prefix in `directory` run_classifier would start from
  (its CHECKPOINT_STATE's latest, else Google's bert_model.ckpt), or None."""
  state = os.path.join(directory, CHECKPOINT_STATE)
  candidates = []
  if os.path.isfile(state):
    with open(state, errors="replace") as f:
      match = _LATEST.search(f.read())
    if match:
      candidates.append(os.path.join(directory, match.group(1)))
  candidates.append(os.path.join(directory, "bert_model.ckpt"))
  for prefix in candidates:
    if os.path.exists(prefix + ".index"):
      return prefix
  return None


def check_init_checkpoint(init_checkpoint, bert_config_file, vocab_file):
  """Refuses, before the first run, a pretrained model every run refuses.

  run_classifier.py starts from a Hugging Face directory, a directory
  holding a TensorFlow checkpoint or a checkpoint prefix. The directory's
  config and vocab (a training output_dir's, Google's or Hugging Face's)
  stand for --bert_config_file and --vocab_file; a directory without them
  needs the flags.

  Args:
    init_checkpoint: --init_checkpoint, a local path.
    bert_config_file: --bert_config_file, or None.
    vocab_file: --vocab_file, or None.

  Raises:
    UserError: no checkpoint is there, or a config or vocab neither given
      nor in the checkpoint's directory.
  """
  directory, config = init_checkpoint, CONFIG_FILE
  if os.path.isfile(os.path.join(init_checkpoint, HF_CONFIG)):
    config = HF_CONFIG
  elif os.path.isdir(init_checkpoint):
    if _latest_checkpoint(init_checkpoint) is None:
      raise UserError("--init_checkpoint %s is a directory with no "
                      "checkpoint in it" % init_checkpoint)
  elif not os.path.exists(init_checkpoint + ".index"):
    raise UserError("--init_checkpoint %s: no such checkpoint (expected a "
                    "directory or %s)" % (init_checkpoint,
                                          init_checkpoint + ".index"))
  else:
    directory = os.path.dirname(init_checkpoint) or "."
  for flag, given, name in (("bert_config_file", bert_config_file, config),
                            ("vocab_file", vocab_file, VOCAB_FILE)):
    if not given and not os.path.isfile(os.path.join(directory, name)):
      raise UserError("--%s is required: the directory of --init_checkpoint "
                      "%s holds no %s" % (flag, init_checkpoint, name))


def suite_tasks(tasks, do_predict):
  """The tasks run: `tasks`, then ax when predicting with mnli."""
  return list(tasks) + (["ax"] if do_predict and "mnli" in tasks else [])


def missing_inputs(glue_dir, tasks, do_predict, flags_dir, exists):
  """Every input of the suite that is not there, before anything runs.

  Args:
    glue_dir: the root of the GLUE download.
    tasks: task names, ax included when it runs.
    do_predict: whether the test files are read.
    flags_dir: the directory of the per-task flagfiles.
    exists: a path predicate (os.path.exists).

  Returns:
    A list of "path (what needs it)" strings, in task order.
  """
  missing = []
  for name in tasks:
    task = task_registry.get(name)
    folder = os.path.join(glue_dir, task.folder)
    files = task.eval_files + (task.test_files if do_predict else ())
    if not exists(folder):
      missing.append("%s/ (task %s)" % (folder, name))
    else:
      missing.extend("%s (task %s)" % (os.path.join(folder, f), name)
                     for f in files if not exists(os.path.join(folder, f)))
    flagfile = flagfile_path(flags_dir, name)
    if not exists(flagfile):
      missing.append("%s (the flags of task %s)" % (flagfile, name))
  return missing


def flagfile_path(flags_dir, task):
  """The flagfile of a task; ax predicts with the MNLI model, MNLI's."""
  return os.path.join(flags_dir, ("mnli" if task == "ax" else task)
                      + FLAGS_SUFFIX)


def seed_dir(output_dir, task, seed):
  return os.path.join(output_dir, task, "seed_%d" % seed)


def submission_paths(task, run_dir):
  """The leaderboard files a run with --do_predict leaves in run_dir."""
  return [os.path.join(run_dir, task_registry.SUBMISSION_DIR, f)
          for f in task_registry.get(task).submissions]


def plan_runs(tasks, num_seeds, output_dir, do_predict, exists):
  """One SuiteRun per (task, seed) of the scored tasks, seeds 1..num_seeds.

  A run whose eval_results.json exists is finished (ACTION_SKIP), unless
  predictions are asked for and its submission files are missing
  (ACTION_PREDICT: the fine-tuned checkpoint is there). Others ACTION_TRAIN.

  Args:
    tasks: task names (not ax).
    num_seeds: runs per task; seed k is --tf_random_seed=k.
    output_dir: the suite's output directory.
    do_predict: whether each run also writes its submission files.
    exists: a path predicate (os.path.exists).

  Returns:
    The runs, task by task, seeds in order.
  """
  runs = []
  for task in tasks:
    for seed in range(1, num_seeds + 1):
      run_dir = seed_dir(output_dir, task, seed)
      if not exists(os.path.join(run_dir, task_registry.EVAL_RESULTS_FILE)):
        action = ACTION_TRAIN
      elif do_predict and not all(
          exists(p) for p in submission_paths(task, run_dir)):
        action = ACTION_PREDICT
      else:
        action = ACTION_SKIP
      runs.append(SuiteRun(task, seed, run_dir, action))
  return runs


def plan_ax(output_dir, exists):
  """The AX run: predictions of the median MNLI run, unless already made."""
  run_dir = os.path.join(output_dir, "ax")
  done = all(exists(p) for p in submission_paths("ax", run_dir))
  return SuiteRun("ax", None, run_dir, ACTION_SKIP if done else ACTION_PREDICT)


def ax_checkpoint_state(mnli_dir, mnli_state):
  """The checkpoint state that makes the AX run's directory predict with
  the MNLI run's model.

  The AX run predicts as a fine-tuned run does, from the checkpoint of its
  --output_dir, which is the MNLI run's; its --init_checkpoint stays the
  pretrained model's, so that a Hugging Face directory still gives the
  config, and its weights are not read (a directory with a checkpoint
  resumes from it).

  Args:
    mnli_dir: the median MNLI run's directory.
    mnli_state: the text of its CHECKPOINT_STATE file.

  Returns:
    The text of the AX directory's CHECKPOINT_STATE file.

  Raises:
    UserError: the MNLI run records no checkpoint.
  """
  match = _LATEST.search(mnli_state or "")
  if not match:
    raise UserError("%s holds no checkpoint to predict AX with" % mnli_dir)
  prefix = os.path.join(os.path.abspath(mnli_dir), match.group(1))
  return ('model_checkpoint_path: "%s"\nall_model_checkpoint_paths: "%s"\n'
          % (prefix, prefix))


@dataclasses.dataclass(frozen=True)
class SuiteConfig:
  """What every run_classifier.py command of the suite shares.

  Attributes:
    python: the interpreter.
    program: run_classifier.py's path.
    flags_dir: the directory of the per-task flagfiles.
    glue_dir: the root of the GLUE download.
    init_checkpoint: the pretrained model (--init_checkpoint), or None.
    bert_config_file: its --bert_config_file, or None.
    vocab_file: its --vocab_file, or None (the checkpoint directory's).
    do_lower_case: its --do_lower_case when given, else None (the
      checkpoint directory's casing, else True).
    do_predict: whether the runs also predict the test sets.
    extra_flags: the arguments after `--`, given to every run last.
  """
  python: str
  program: str
  flags_dir: str
  glue_dir: str
  init_checkpoint: Optional[str]
  bert_config_file: Optional[str]
  vocab_file: Optional[str]
  do_lower_case: Optional[bool]
  do_predict: bool
  extra_flags: Sequence[str]


def classifier_command(run, config):
  """The run_classifier.py command line of a run.

  The task's flagfile comes first so that the suite's own flags and then
  config.extra_flags (absl: the last value of a flag wins) override it.

  Args:
    run: a SuiteRun (ACTION_TRAIN or ACTION_PREDICT; ax: ACTION_PREDICT,
      see ax_checkpoint_state).
    config: a SuiteConfig.

  Returns:
    The argument list, the interpreter first.
  """
  task = task_registry.get(run.task)
  args = [config.python, config.program,
          "--flagfile=%s" % flagfile_path(config.flags_dir, run.task),
          "--task_name=%s" % run.task,
          "--data_dir=%s" % os.path.join(config.glue_dir, task.folder)]
  # What is not given comes from the pretrained model's directory.
  if config.vocab_file:
    args.append("--vocab_file=%s" % config.vocab_file)
  if config.do_lower_case is not None:
    args.append("--do_lower_case=%s" % str(config.do_lower_case).lower())
  args.append("--output_dir=%s" % run.output_dir)
  if config.bert_config_file:
    args.append("--bert_config_file=%s" % config.bert_config_file)
  if run.task == "ax":
    args.append("--do_predict")
    if config.init_checkpoint:
      args.append("--init_checkpoint=%s" % config.init_checkpoint)
  elif run.action == ACTION_PREDICT:
    args.append("--do_predict")
  else:
    args += ["--do_train", "--do_eval", "--tf_random_seed=%d" % run.seed]
    if config.do_predict:
      args.append("--do_predict")
    if config.init_checkpoint:
      args.append("--init_checkpoint=%s" % config.init_checkpoint)
  return args + list(config.extra_flags)


def visible_gpus(environ, nvidia_smi_listing):
  """The GPUs the suite spreads its runs over, one run per GPU at a time.

  Args:
    environ: the environment; a CUDA_VISIBLE_DEVICES in it is obeyed (its
      entries, "" or -1 meaning none).
    nvidia_smi_listing: the output of `nvidia-smi -L` (None: no nvidia-smi).

  Returns:
    The CUDA_VISIBLE_DEVICES value of each GPU (["0", "1"]); [] on a
    machine without GPUs, where the runs go one after another.
  """
  visible = environ.get("CUDA_VISIBLE_DEVICES")
  if visible is not None:
    ids = [d.strip() for d in visible.split(",") if d.strip()]
    return [] if not ids or ids[0].startswith("-") else ids
  if not nvidia_smi_listing:
    return []
  return [m.group(1) for m in re.finditer(r"^GPU (\d+):",
                                          nvidia_smi_listing, re.M)]
