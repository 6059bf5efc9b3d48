# coding=utf-8
"""BERT fine-tuning on SQuAD 1.1 and 2.0 with tf.estimator.

Upstream's flags, features and output files (TPU flags dropped), run by the
task runner (bertkit/engine/runner.py) as run_pretraining.py and
run_classifier.py are: one device, MirroredStrategy,
MultiWorkerMirroredStrategy, CentralStorageStrategy or horovod, --use_fp16,
--use_bf16, gradient accumulation, preemption, throughput logs, a run
summary.
`--train_batch_size` is the global batch over all replicas and
micro-batches.

This program holds the flags and their checks; the task lives in
bertkit/tasks: squad/data.py (reading the json, sliding-window features),
squad/task.py (head, loss, records, the task), squad/records.py (writing and
reading the records, the answers of the predictions), squad/predictions.py
(logits -> answers) and squad/evaluation.py (the official EM / F1).

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

import functools
import importlib
import sys

from absl import app
from absl import flags
from absl import logging

from bertkit.common import console
from bertkit.common import cpu_kernels
from bertkit.common.errors import UserError, main_with_user_errors, parse_flags
from bertkit.common import options
from bertkit.common import shared_flags
from bertkit.common import training_flags
from bertkit.tasks.squad import data as squad_data
import tokenization

# Nothing above imports TensorFlow: the flags and files are checked
# (check_flags) before it is, in the functions that need it, so that a bad
# flag is refused at once. Before it is imported: its C++ runtime reads its
# log level and its choice of CPU kernels then.
console.quiet_native_logs(sys.argv)
cpu_kernels.prefer_onednn()
# pylint: disable=g-import-not-at-top

# Upstream's API of this module: google-research/bert's run_squad.py defines
# these names, and code written for it imports them from here.
# pylint: disable=unused-import
from bertkit.tasks.squad.data import (InputFeatures, SquadExample,
                                      convert_examples_to_features,
                                      read_squad_examples)
from bertkit.tasks.squad.predictions import RawResult
# pylint: enable=unused-import
# The rest come from the bertkit/tasks module named, on first use: they
# import TensorFlow.
UPSTREAM_API = {"input_fn_builder": "bertkit.tasks.squad.records",
                "create_model": "bertkit.tasks.squad.task",
                "model_fn_builder": "bertkit.tasks.squad.task"}


def __getattr__(name):
  if name not in UPSTREAM_API:
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
  return getattr(importlib.import_module(UPSTREAM_API[name]), name)


FLAGS = flags.FLAGS


def define_flags():
  """Upstream's run_squad flags beyond the runner's
  (training_flags.define_runner_flags).

  Called by the program only: importing this module defines no flags.
  """
  training_flags.define_runner_flags()
  flags.DEFINE_string("train_file", None,
                      "SQuAD json for training, e.g. train-v1.1.json.")
  flags.DEFINE_string("predict_file", None,
                      "SQuAD json to predict, e.g. dev-v1.1.json; with gold "
                      "answers it is also evaluated.")
  shared_flags.define_do_lower_case()
  # Query and context window together.
  shared_flags.define_max_seq_length(384)
  flags.DEFINE_integer("doc_stride", 128,
                       "Sub-tokens between the starts of consecutive "
                       "windows over a long context.")
  flags.DEFINE_integer("max_query_length", 64,
                       "Questions are cut to this many sub-tokens.")
  shared_flags.define_fine_tuning()
  flags.DEFINE_integer("n_best_size", 20,
                       "Answers kept per question in nbest_predictions.json "
                       "(and start/end positions tried per window).")
  flags.DEFINE_integer("max_answer_length", 30,
                       "Longest answer, in sub-tokens (start and end are "
                       "predicted independently).")
  flags.DEFINE_bool("verbose_logging", False,
                    "Log every answer whose text could not be aligned back "
                    "to the original words.")
  flags.DEFINE_bool("version_2_with_negative", False,
                    "SQuAD 2.0: questions may have no answer.")
  flags.DEFINE_float("null_score_diff_threshold", 0.0,
                     "SQuAD 2.0: answer \"\" when null score - best non-null "
                     "score exceeds this.")


def options_from_flags():
  """The run's options.SquadOptions, from the parsed flags."""
  return training_flags.options_from_flags(
      options.SquadOptions, FLAGS,
      run=training_flags.run_options_from_flags(FLAGS),
      do_lower_case=shared_flags.given(FLAGS, "do_lower_case"))


def check_files(opts):
  """The files named, checked before TensorFlow is imported."""
  files = ["bert_config_file", "vocab_file"]
  if opts.do_train:
    files.append("train_file")
  if opts.do_predict:
    files.append("predict_file")
  shared_flags.check_local_files(opts, files)


def validate(opts):
  """Checks the rest of the flags (with TensorFlow) and reads the SQuAD files
  before any long work.

  Returns:
    (model, train_examples or None, predict_examples or None): model is the
    run_directory.Model.
  """
  import tensorflow.compat.v1 as tf
  from bertkit.tasks.fine_tuning.driver import load_checked_model
  model = load_checked_model(opts)
  train_examples = predict_examples = None
  if opts.do_train:
    train_examples, _ = squad_data.read_squad_examples(
        opts.train_file, True, opts.version_2_with_negative)
    if not train_examples:
      raise UserError("--train_file %s has no usable training question" %
                      opts.train_file)
  if opts.do_predict:
    predict_examples, _ = squad_data.read_squad_examples(
        opts.predict_file, False, opts.version_2_with_negative)
    if not predict_examples:
      raise UserError("--predict_file %s has no question" %
                      opts.predict_file)
    if not opts.do_train and not tf.train.latest_checkpoint(
        opts.run.output_dir):
      check_fine_tuned(opts.run.init_checkpoint, opts.run.output_dir)
  return model, train_examples, predict_examples


def check_fine_tuned(init_checkpoint, output_dir):
  """Predicting without training needs a SQuAD model to start from.

  Without a checkpoint in output_dir, Estimator.predict runs the variables'
  initialisers, which --init_checkpoint has pointed at its weights (as
  upstream predicts from a fine-tuned --init_checkpoint).

  Raises:
    UserError: there is no --init_checkpoint, or it has no SQuAD head.
  """
  import tensorflow.compat.v1 as tf
  from bertkit.engine import checkpoints
  from bertkit.tasks.squad import task as squad_task
  if not init_checkpoint:
    raise UserError("--do_predict without --do_train needs a fine-tuned "
                    "checkpoint in --output_dir %s (there is none) or a "
                    "fine-tuned SQuAD --init_checkpoint" % output_dir)
  path = checkpoints.resolve_init_checkpoint(init_checkpoint)
  if squad_task.OUTPUT_WEIGHTS not in dict(tf.train.list_variables(path)):
    raise UserError("--do_predict without --do_train: --init_checkpoint %s "
                    "has no SQuAD head (%s), so its answers would be random; "
                    "fine-tune it with --do_train first" %
                    (init_checkpoint, squad_task.OUTPUT_WEIGHTS))


def run(opts):
  """Fine-tunes on SQuAD and predicts (and evaluates) as `opts` say.

  Args:
    opts: an options.SquadOptions.
  """
  # --verbose_logging: also the answers whose text could not be aligned back
  # to the original words (squad_predictions.final_text's debug lines).
  if opts.verbose_logging:
    logging.set_verbosity(logging.DEBUG)
  check_files(opts)
  from bertkit.engine import runner
  from bertkit.engine import distribution
  distribution.use_slurm_cluster(opts.run.distribution)  # before the strategy
  from bertkit.tasks.fine_tuning.driver import train_steps
  from bertkit.tasks.squad.records import answers, input_fn_maker, write_inputs
  from bertkit.tasks.squad.task import question_answering_task
  model, train_examples, predict_examples = validate(opts)
  num_train_steps, num_warmup_steps = 0, 0
  if opts.do_train:
    num_train_steps, num_warmup_steps = train_steps(
        len(train_examples), opts.run.train_batch_size, opts.num_train_epochs,
        opts.warmup_proportion)
  prepared = runner.prepare(opts.run,
                            question_answering_task(model.bert_config), model)
  train_files, num_train_features, predict_files, predict_features = (
      write_inputs(opts.run.output_dir, train_examples, predict_examples,
                   tokenization.FullTokenizer(model.vocab_file,
                                              model.do_lower_case),
                   opts.max_seq_length, opts.doc_stride,
                   opts.max_query_length))
  if opts.do_train:
    logging.info("***** Training: %d questions in %d windows, global batch "
                 "%d, %d steps *****", len(train_examples), num_train_features,
                 opts.run.train_batch_size, num_train_steps)
  runner.run(
      prepared, input_fn_maker(opts.max_seq_length),
      runner.Schedule(num_train_steps, num_warmup_steps),
      train_files=train_files,
      prediction=runner.PredictStage(
          files=predict_files, batch_size=opts.predict_batch_size,
          message="***** Predict: %d questions in %d windows, batch %d "
          "*****" % (len(predict_examples or ()), len(predict_features),
                     opts.predict_batch_size),
          use_predictions=functools.partial(
              answers, predict_examples, predict_features, opts.n_best_size,
              opts.max_answer_length, model.do_lower_case,
              opts.version_2_with_negative, opts.null_score_diff_threshold,
              opts.run.output_dir, opts.predict_file)))


def main(argv):
  del argv
  run(options_from_flags())


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main), flags_parser=parse_flags)
