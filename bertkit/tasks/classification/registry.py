# coding=utf-8
"""Every task of run_classifier.py, and what GLUE adds to each of its tasks.

One record per task, read by the classifier's processors (processors.py:
the task's files and labels), the GLUE runs of run_classifier
(glue_outputs.py: dev sets, metrics, submission files) and the GLUE
suite of run_glue.py (glue/suite.py: folders, files, the leaderboard's
metrics). No TensorFlow here: run_glue.py checks its options with it before
any run.
"""

import dataclasses
from typing import Optional, Tuple

from bertkit.common.errors import UserError

# What a GLUE run of run_classifier.py writes in its --output_dir: this file
# after its evaluation, last (its presence means the run finished), and the
# leaderboard's files in this directory.
EVAL_RESULTS_FILE = "eval_results.json"
SUBMISSION_DIR = "submission"


@dataclasses.dataclass(frozen=True)
class DataFile:
  """One file of a task's --data_dir: the examples of one split.

  Attributes:
    split: the processor's name of the set: "train", "dev", "test", or a
      further one (MNLI's "dev_mismatched" and "test_mismatched").
    file_name: the file, relative to --data_dir.
    set_type: the prefix of its examples' guids, as upstream names them.
  """
  split: str
  file_name: str
  set_type: str


def _files(*splits):
  """DataFiles named `<split>.tsv`, the split also the guids' prefix."""
  return tuple(DataFile(s, s + ".tsv", s) for s in splits)


@dataclasses.dataclass(frozen=True)
class ClassifierTask:
  """A --task_name of run_classifier.py.

  Attributes:
    name: the canonical --task_name, lower case ("sst-2").
    aliases: other spellings accepted for it ("sst2": GLUE's folder names
      without the dash).
    labels: the label strings in label-id order; a single label means a
      regression task whose one output is the score (STS-B). None: given
      by flags or read from the data (the tsv task).
    files: the files its processor reads from --data_dir, one per split;
      empty when the processor finds its own (xnli's depend on the
      language).
    leaderboard: the GLUE leaderboard's name of the task ("SST-2"); None
      for a task outside GLUE.
    folder: its folder in the GLUE download (GLUE tasks only).
    metrics: what a GLUE run computes on each dev set (glue_tasks.METRICS
      names), besides eval_loss.
    leaderboard_metrics: those of `metrics` the leaderboard scores the task
      by (the task score is their mean over the dev sets); empty for a
      task without a score (AX).
    dev_sets: ((name in eval_results.json, split), ...) of a GLUE task.
    test_sets: ((submission file name, split), ...) of a GLUE task.
  """
  name: str
  aliases: Tuple[str, ...] = ()
  labels: Optional[Tuple[str, ...]] = None
  files: Tuple[DataFile, ...] = _files("train", "dev", "test")
  leaderboard: Optional[str] = None
  folder: Optional[str] = None
  metrics: Tuple[str, ...] = ()
  leaderboard_metrics: Tuple[str, ...] = ()
  dev_sets: Tuple[Tuple[str, str], ...] = ()
  test_sets: Tuple[Tuple[str, str], ...] = ()

  @property
  def is_glue(self):
    return self.leaderboard is not None

  @property
  def is_scored(self):
    """Whether the GLUE score counts the task (all but AX)."""
    return bool(self.leaderboard_metrics)

  def data_file(self, split):
    """The DataFile of `split`.

    Raises:
      KeyError: the task has no such split.
    """
    for data_file in self.files:
      if data_file.split == split:
        return data_file
    raise KeyError("task %s has no split %r" % (self.name, split))

  @property
  def eval_files(self):
    """The file names --do_train --do_eval read: train and the dev sets."""
    splits = ["train"] * bool(self.dev_sets) + [s for _, s in self.dev_sets]
    return tuple(self.data_file(s).file_name for s in splits)

  @property
  def test_files(self):
    """The file names --do_predict reads."""
    return tuple(self.data_file(s).file_name for _, s in self.test_sets)

  @property
  def submissions(self):
    """The leaderboard's file names of the task's predictions."""
    return tuple(name for name, _ in self.test_sets)

  @property
  def scored_metrics(self):
    """((dev set, metric), ...) the task score averages."""
    return tuple((dev_set, metric) for dev_set, _ in self.dev_sets
                 for metric in self.leaderboard_metrics)


_NLI_LABELS = ("contradiction", "entailment", "neutral")
_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")


def _glue(name, leaderboard, labels, metrics=("accuracy",),
          leaderboard_metrics=None, aliases=()):
  """A GLUE task with one dev set and one test set in its folder's
  train/dev/test.tsv; the leaderboard scores all its metrics unless told."""
  return ClassifierTask(name, aliases, labels, leaderboard=leaderboard,
              folder=leaderboard, metrics=metrics,
              leaderboard_metrics=(metrics if leaderboard_metrics is None
                                   else leaderboard_metrics),
              dev_sets=(("dev", "dev"),),
              test_sets=((leaderboard + ".tsv", "test"),))


# GLUE first, in the leaderboard's order.
TASKS = (
    _glue("cola", "CoLA", _BINARY, ("matthews_corrcoef", "accuracy"),
          ("matthews_corrcoef",)),
    _glue("sst-2", "SST-2", _BINARY, aliases=("sst2",)),
    _glue("mrpc", "MRPC", _BINARY, ("f1", "accuracy")),
    _glue("sts-b", "STS-B", ("score",), ("pearson", "spearman"),
          aliases=("stsb",)),
    _glue("qqp", "QQP", _BINARY, ("f1", "accuracy")),
    ClassifierTask("mnli", labels=_NLI_LABELS,
         files=(DataFile("train", "train.tsv", "train"),
                DataFile("dev", "dev_matched.tsv", "dev_matched"),
                DataFile("test", "test_matched.tsv", "test"),
                DataFile("dev_mismatched", "dev_mismatched.tsv",
                         "dev_mismatched"),
                DataFile("test_mismatched", "test_mismatched.tsv",
                         "test_mismatched")),
         leaderboard="MNLI", folder="MNLI", metrics=("accuracy",),
         leaderboard_metrics=("accuracy",),
         dev_sets=(("dev_matched", "dev"),
                   ("dev_mismatched", "dev_mismatched")),
         test_sets=(("MNLI-m.tsv", "test"),
                    ("MNLI-mm.tsv", "test_mismatched"))),
    _glue("qnli", "QNLI", _ENTAILMENT),
    _glue("rte", "RTE", _ENTAILMENT),
    _glue("wnli", "WNLI", _BINARY),
    # GLUE's diagnostic set: predicted by an MNLI model, with MNLI's labels;
    # no training, no dev set, no score.
    ClassifierTask("ax", labels=_NLI_LABELS,
         files=(DataFile("test", "diagnostic.tsv", "test"),),
         leaderboard="AX", folder="diagnostic",
         test_sets=(("AX.tsv", "test"),)),
    ClassifierTask("xnli", labels=_NLI_LABELS, files=()),
    ClassifierTask("tsv"),
    ClassifierTask("rerank", labels=_BINARY),
)


def glue_tasks():
  """The GLUE tasks, in the leaderboard's order (AX last)."""
  return tuple(t for t in TASKS if t.is_glue)


def scored_glue_tasks():
  """The tasks the GLUE score averages, in the leaderboard's order."""
  return tuple(t for t in TASKS if t.is_scored)


def get(name, flag="--task_name", among=TASKS):
  """The task called `name` (any case, or one of its aliases) among `among`.

  Args:
    name: a task name as a user gave it.
    flag: the flag it came from, for the error.
    among: the tasks it may name.

  Raises:
    UserError: no task of `among` is called so; the message lists them.
  """
  key = name.strip().lower()
  for task in among:
    if key == task.name or key in task.aliases:
      return task
  choices = ", ".join(
      t.name + (" (%s)" % ", ".join(t.aliases) if t.aliases else "")
      for t in among)
  raise UserError("%s: unknown task %r; expected one of %s" % (
      flag, name, choices))
