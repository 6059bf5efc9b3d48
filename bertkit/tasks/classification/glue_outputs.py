# coding=utf-8
"""What a GLUE task adds to a run_classifier.py run: its metrics,
eval_results.json and the leaderboard's submission files.

The tasks (their files, labels, dev and test sets, metrics and submission
file names) are classification/registry.py's, the processors reading the
official GLUE download's files classification/processors.py's. A GLUE run
predicts its dev sets besides evaluating them (one prediction pass over the
dev and test records, after upstream's evaluation) and computes the task's
metrics from those predictions with scikit-learn and SciPy:

  cola   matthews_corrcoef, accuracy
  mrpc   f1 (positive class "1"), accuracy
  qqp    f1 (positive class "1"), accuracy
  sts-b  pearson, spearman (regression)
  others accuracy
  ax     none: predict only (an MNLI model on GLUE's diagnostic set)

Each dev set also gets eval_loss: the mean over its examples of the loss
of the predicted probabilities (the squared error for STS-B). MNLI has two
dev sets, dev_matched and dev_mismatched; every other task one, "dev".
"""

import collections
import dataclasses
import json
import math
import os
from typing import List
import warnings

import numpy as np
from scipy import stats
from sklearn import metrics as sk_metrics
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.tasks.classification import outputs as classifier_outputs
from bertkit.tasks.classification import data as classifier_data
from bertkit.tasks.classification import registry as task_registry

RESULTS_TXT = "eval_results.txt"


def _f1(labels, predicted):
  # The positive class is label "1", id 1 in the task's labels ["0", "1"].
  return sk_metrics.f1_score(labels, predicted, pos_label=1)


# name -> function(true labels, predicted labels) (ids, or scores for
# regression).
METRICS = {
    "accuracy": sk_metrics.accuracy_score,
    "f1": _f1,
    "matthews_corrcoef": sk_metrics.matthews_corrcoef,
    "pearson": lambda labels, scores: stats.pearsonr(scores, labels)[0],
    "spearman": lambda labels, scores: stats.spearmanr(scores, labels)[0],
}


def dev_metrics(task, label_list, examples, outputs):
  """The task's metrics of one dev set, from the model's outputs.

  Args:
    task: a task_registry.ClassifierTask of GLUE.
    label_list: the task's labels (one: regression).
    examples: the dev set's InputExamples.
    outputs: for each example, its class probabilities [C] (regression:
      its predicted score).

  Returns:
    {"eval_loss": ..., each of task.metrics: ..., "num_examples": N};
    a metric that is undefined on these predictions (a correlation of
    constant scores) is None.
  """
  outputs = np.asarray(outputs, np.float64)
  if len(label_list) == 1:
    labels = np.array([float(e.label) for e in examples])
    predicted = outputs
    loss = np.mean(np.square(outputs - labels))
  else:
    labels = np.array([label_list.index(e.label) for e in examples])
    predicted = outputs.argmax(axis=-1)
    tiny = np.finfo(np.float32).tiny
    loss = -np.mean(np.log(np.maximum(
        outputs[np.arange(len(labels)), labels], tiny)))
  result = {"eval_loss": float(loss)}
  for name in task.metrics:
    with warnings.catch_warnings():
      # Constant predictions: reported as None below, not as a warning.
      warnings.simplefilter("ignore")
      value = float(METRICS[name](labels, predicted))
    result[name] = value if math.isfinite(value) else None
  result["num_examples"] = len(examples)
  return result


def submission_label(label_list, output):
  """An example's prediction as the leaderboard names it: the label, or a
  regression score with 3 decimals."""
  if len(label_list) == 1:
    return "%.3f" % float(output)
  return label_list[int(np.argmax(output))]


def write_submission(path, label_list, examples, outputs):
  """A leaderboard file: `index\\tprediction`, then one line per example."""
  with atomic_io.atomic_open(path, "w") as f:
    f.write("index\tprediction\n")
    for example, output in zip(examples, outputs):
      f.write("%s\t%s\n" % (example.index,
                            submission_label(label_list, output)))


def read_results_txt(path):
  """eval_results.txt's `name = value` lines as an ordered dict of strings."""
  values = collections.OrderedDict()
  with atomic_io.open_file(path) as f:
    for line in f:
      name, sep, value = line.rstrip("\n").partition(" = ")
      if sep:
        values[name] = value
  return values


def results_txt_lines(dev_results):
  """The task metrics' eval_results.txt names and values.

  The first dev set's metrics are `eval_<metric>` (its eval_loss is
  upstream's line), the others' `eval_<dev set>_<metric>`
  (eval_dev_mismatched_loss, ...); num_examples is not a line.
  """
  lines = collections.OrderedDict()
  for position, (dev_set, result) in enumerate(dev_results.items()):
    prefix = "eval_" if position == 0 else "eval_%s_" % dev_set
    for name, value in result.items():
      if name != "num_examples":
        metric = name[len("eval_"):] if name.startswith("eval_") else name
        lines[prefix + metric] = value
  return lines


@dataclasses.dataclass(frozen=True)
class Split:
  """A dev or test set of a GLUE run, and its records.

  Attributes:
    name: its name in eval_results.json (a dev set) or its submission file
      name (a test set).
    split: the processor's split.
    examples: its InputExamples.
    num_records: the records written of them (padded or packed).
  """
  name: str
  split: str
  examples: List[classifier_data.InputExample]
  num_records: int


class GlueRun(object):
  """What a GLUE task adds to a run_classifier run.

  Its dev and test records are predicted in one pass (the files in
  `prediction_files` order); `use_predictions` takes those predictions (on
  the chief), computes the dev sets' metrics and writes the test results
  and the submission files; `write_results` then adds the metrics to
  eval_results.txt and writes eval_results.json, last.
  """

  def __init__(self, task_name, label_list, examples, files, counts,
               packed):
    """Args:
      task_name: the task_registry name of a GLUE task.
      label_list: the task's labels.
      examples: {processor split: InputExamples} of the sets read.
      files: {processor split: [record file]} (classifier.write_inputs).
      counts: {processor split: number of records}.
      packed: the records are packed rows.
    """
    self.task_name = task_name
    self.task = task_registry.get(task_name)
    self.label_list = label_list
    self.packed = packed
    self.dev_sets = [Split(name, split, examples[split], counts[split])
                     for name, split in self.task.dev_sets
                     if split in examples]
    self.test_sets = [Split(name, split, examples[split], counts[split])
                      for name, split in self.task.test_sets
                      if split in examples]
    self.files = [files[s.split][0] for s in self.dev_sets + self.test_sets]
    self.dev_results = collections.OrderedDict()

  def prediction_files(self):
    """The record files to predict: the dev sets', then the test sets'."""
    return list(self.files)

  def use_predictions(self, output_dir, predictions):
    """The runner's PredictStage.use_predictions (on the chief).

    Computes the dev sets' metrics; writes test_results.tsv (the first
    test set's; test_results_<split>.tsv for another) and
    submission/<task file>.

    Returns:
      None: eval_results.txt keeps upstream's figures; write_results adds
      the task's.
    """
    start = 0
    for number, part in enumerate(self.dev_sets + self.test_sets):
      chunk = predictions[start:start + part.num_records]
      start += part.num_records
      outputs = classifier_outputs.outputs_in_input_order(
          chunk, len(part.examples), self.packed)
      if number < len(self.dev_sets):
        self.dev_results[part.name] = dev_metrics(
            self.task, self.label_list, part.examples, outputs)
        continue
      results_name = "test_results.tsv"
      if part.split != "test":
        results_name = "test_results_%s.tsv" % part.split
      classifier_outputs.write_test_results(
          os.path.join(output_dir, results_name), outputs)
      submission_dir = os.path.join(output_dir, task_registry.SUBMISSION_DIR)
      tf.io.gfile.makedirs(submission_dir)
      write_submission(os.path.join(submission_dir, part.name),
                       self.label_list, part.examples, outputs)
    return None

  def remove_stale_results(self, output_dir):
    """Deletes the eval_results.json of an earlier run in output_dir: until
    this run's evaluation finishes, none may say it has."""
    path = os.path.join(output_dir, task_registry.EVAL_RESULTS_FILE)
    if atomic_io.exists(path):
      atomic_io.remove(path)

  def write_results(self, output_dir):
    """Adds the task's metrics to eval_results.txt and writes
    eval_results.json (atomically, last: its presence means the evaluation
    finished). Nothing when no dev set was predicted."""
    if not self.dev_results:
      return
    txt = os.path.join(output_dir, RESULTS_TXT)
    values = read_results_txt(txt)
    for name, value in results_txt_lines(self.dev_results).items():
      values.setdefault(name, str(value))
    with atomic_io.atomic_open(txt, "w") as f:
      for name in sorted(values):
        f.write("%s = %s\n" % (name, values[name]))
    summary = {"task": self.task_name,
               "global_step": int(values["global_step"]),
               "dev_sets": self.dev_results}
    with atomic_io.atomic_open(
        os.path.join(output_dir, task_registry.EVAL_RESULTS_FILE), "w") as f:
      json.dump(summary, f, indent=2, sort_keys=True)
      f.write("\n")
