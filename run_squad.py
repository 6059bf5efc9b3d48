# coding=utf-8
"""BERT fine-tuning on SQuAD 1.1 and 2.0 with tf.estimator.

Upstream's flags, features and output files (TPU flags dropped), run by the
task runner (bertkit/engine/loop/runner.py) as run_pretraining.py and
run_classifier.py are: one device, MirroredStrategy,
MultiWorkerMirroredStrategy, CentralStorageStrategy or horovod, --use_fp16,
--use_bf16, gradient accumulation, preemption, throughput logs, a run
summary.
`--train_batch_size` is the global batch over all replicas and
micro-batches.

Its options (flags): bertkit/tasks/squad/options.py, the fine-tuning ones
and the runner's; the task: bertkit/tasks/squad/data.py (reading the json,
sliding-window features), model.py (head, loss, the runner's task), task.py
(the records, the answers of the predictions), predictions.py (logits ->
answers) and evaluation.py (the official EM / F1), run by the fine-tuning
driver (bertkit/tasks/fine_tuning/driver.py).

Outputs in --output_dir (besides checkpoints and throughput logs):
  train.tf_record, eval.tf_record  the features of --train_file and
                    --predict_file.
  predictions.json  {question id: answer text} ("" = no answer, 2.0).
  nbest_predictions.json  {question id: [{text, probability, start_logit,
                    end_logit}]}, the --n_best_size best answers.
  null_odds.json    (--version_2_with_negative) {question id: null score -
                    best non-null score}; the answer is "" when it exceeds
                    --null_score_diff_threshold.
  eval_results.txt  when --predict_file has gold answers: `name = value`
                    lines of the official evaluation (1.1: exact_match, f1;
                    2.0: exact, f1, HasAns_*, NoAns_*, best_exact(_thresh),
                    best_f1(_thresh)), plus global_step (of the
                    checkpoint in --output_dir, when there is one).
"""

import importlib

from bertkit.common import programs
from bertkit.tasks.squad.options import SquadOptions

# Upstream's API of this module: google-research/bert's run_squad.py defines
# these names, and code written for it imports them from here.
# pylint: disable=unused-import
from bertkit.tasks.squad.data import (SquadExample,
                                      convert_examples_to_features,
                                      read_squad_examples)
from bertkit.tasks.squad.data import SquadFeatures as InputFeatures
from bertkit.tasks.squad.predictions import RawResult
# pylint: enable=unused-import
# The rest come from the bertkit/tasks module named, on first use: they
# import TensorFlow, which the flags' checks come before.
UPSTREAM_API = {"input_fn_builder": "bertkit.tasks.squad.task",
                "create_model": "bertkit.tasks.squad.model",
                "model_fn_builder": "bertkit.tasks.squad.model"}


def __getattr__(name):
  if name not in UPSTREAM_API:
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
  return getattr(importlib.import_module(UPSTREAM_API[name]), name)


def run(opts):
  """Fine-tunes on SQuAD and predicts (and evaluates) as `opts`
  (SquadOptions) say."""
  # pylint: disable=g-import-not-at-top
  from bertkit.tasks.fine_tuning import driver
  driver.check_inputs(opts)  # before TensorFlow is imported
  from bertkit.tasks.squad import task
  driver.run(task.TASK, opts)


if __name__ == "__main__":
  programs.main(SquadOptions, run)
