# coding=utf-8
"""BERT fine-tuning on SQuAD 1.1 and 2.0 with tf.estimator.

Upstream's flags, features and output files (TPU flags dropped), run by the
task runner (runner.py) as run_pretraining.py and run_classifier.py are: one
device, MirroredStrategy, MultiWorkerMirroredStrategy, CentralStorageStrategy
or horovod, --use_fp16, --use_bf16, gradient accumulation, preemption,
throughput logs, a run summary.
`--train_batch_size` is the global batch over all replicas and
micro-batches.

What the task is lives in its own modules: squad_data.py (reading the json,
sliding-window features), squad_task.py (head, loss, records),
squad_predictions.py (logits -> answers) and squad_evaluation.py (the
official EM / F1).

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
import os
import random
import sys

from bertkit.common import console
from bertkit.common import cpu_kernels

# Before TensorFlow is imported: its C++ runtime reads its log level and its
# choice of CPU kernels then.
console.quiet_native_logs(sys.argv)
cpu_kernels.prefer_onednn()
# pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app
from absl import flags
from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.engine import checkpoints
from bertkit.engine import input_pipeline
import modeling
import run_classifier
from bertkit.engine import runner
from bertkit.tasks import squad_data
from bertkit.tasks import squad_evaluation
from bertkit.tasks import squad_predictions
from bertkit.tasks import squad_task
import tokenization
from bertkit.common.errors import UserError, main_with_user_errors

FLAGS = flags.FLAGS

# Upstream shuffles the training examples once with this seed before writing
# them, so that the input_fn's small shuffle buffer suffices.
TRAIN_SHUFFLE_SEED = 12345


def define_flags():
  """Upstream's run_squad flags beyond the runner's (runner.define_flags).

  Called by the program only: importing this module defines no flags.
  """
  runner.define_flags()
  flags.DEFINE_string("train_file", None,
                      "SQuAD json for training, e.g. train-v1.1.json.")
  flags.DEFINE_string("predict_file", None,
                      "SQuAD json to predict, e.g. dev-v1.1.json; with gold "
                      "answers it is also evaluated.")
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the input text: True for uncased models.")
  flags.DEFINE_integer("max_seq_length", 384,
                       "Sequence length after WordPiece tokenization (S): "
                       "query and context window together.")
  flags.DEFINE_integer("doc_stride", 128,
                       "Sub-tokens between the starts of consecutive "
                       "windows over a long context.")
  flags.DEFINE_integer("max_query_length", 64,
                       "Questions are cut to this many sub-tokens.")
  flags.DEFINE_bool("do_predict", False,
                    "Whether to predict (and evaluate) --predict_file.")
  flags.DEFINE_integer("predict_batch_size", 8,
                       "Total batch size for predictions.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Epochs of training.")
  flags.DEFINE_float("warmup_proportion", 0.1,
                     "Fraction of the training steps with linear warm-up.")
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


def question_answering_task(bert_config):
  """SQuAD as a runner.Task: upstream's span loss; its mean as the eval loss
  (train_and_evaluate under a TF_CONFIG cluster); unique_ids [B] and
  start_logits / end_logits [B, S] as predictions."""

  def logits(features, is_training):
    return squad_task.create_model(bert_config, is_training,
                                   features["input_ids"],
                                   features["input_mask"],
                                   features["segment_ids"])

  def loss(features, is_training):
    start_logits, end_logits = logits(features, is_training)
    return squad_task.span_loss(start_logits, end_logits,
                                features["start_positions"],
                                features["end_positions"])

  def eval_outputs(features):
    mean_loss = loss(features, False)
    return mean_loss, {"eval_loss": tf.metrics.mean(mean_loss)}

  def predictions(features):
    start_logits, end_logits = logits(features, False)
    return {"unique_ids": features["unique_ids"],
            "start_logits": start_logits, "end_logits": end_logits}

  return runner.Task(
      build_variables=lambda: squad_task.build_squad_variables(bert_config),
      train_loss_fns=runner.mean_loss_shares(
          lambda features: loss(features, True)),
      eval_outputs=eval_outputs, predictions=predictions)


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, optimizer_options,
                     num_accumulation_steps=1):
  """Returns the Estimator model_fn for SQuAD (question_answering_task).

  Args:
    bert_config: BertConfig.
    init_checkpoint: checkpoint (prefix or directory) to start from, or None.
    learning_rate: peak learning rate.
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    optimizer_options: extra create_accumulating_optimizer keyword arguments
      (runner.optimizer_options).
    num_accumulation_steps: micro-batches per update; each replica's batch
      must divide by it.
  """
  return runner.model_fn_builder(
      question_answering_task(bert_config), init_checkpoint, learning_rate,
      num_train_steps, num_warmup_steps, optimizer_options,
      num_accumulation_steps)


def check_window_flags(max_seq_length, max_query_length, doc_stride):
  """Upstream's length checks, and a doc_stride that skips no context.

  Raises:
    UserError: no room is left for the context, or windows would not
      overlap.
  """
  room = max_seq_length - max_query_length - 3
  if room < 1:
    raise UserError(
        "--max_seq_length=%d must be greater than --max_query_length=%d + 3 "
        "([CLS] and two [SEP]): no room is left for the context" %
        (max_seq_length, max_query_length))
  if not 1 <= doc_stride < room:
    raise UserError(
        "--doc_stride=%d must be between 1 and the room left for the context "
        "(--max_seq_length - --max_query_length - 3 = %d), exclusive: "
        "windows moving by that much or more would not overlap, and a "
        "longer one would skip context tokens" % (doc_stride, room))


def validate_flags():
  """Checks flags and reads the SQuAD files before any long work.

  Returns:
    (bert_config, train_examples or None, predict_examples or None).
  """
  if not (FLAGS.do_train or FLAGS.do_predict):
    raise UserError("At least one of --do_train or --do_predict must be "
                    "True")
  for name in ("bert_config_file", "vocab_file", "output_dir"):
    if not getattr(FLAGS, name):
      raise UserError("--%s is required" % name)
  if FLAGS.do_train and not FLAGS.train_file:
    raise UserError("--do_train needs --train_file")
  if FLAGS.do_predict and not FLAGS.predict_file:
    raise UserError("--do_predict needs --predict_file")
  for name in ("predict_batch_size", "n_best_size", "max_answer_length"):
    if getattr(FLAGS, name) < 1:
      raise UserError("--%s must be >= 1, got %d" %
                      (name, getattr(FLAGS, name)))
  if FLAGS.num_train_epochs <= 0:
    raise UserError("--num_train_epochs must be > 0")
  if not 0.0 <= FLAGS.warmup_proportion <= 1.0:
    raise UserError("--warmup_proportion must be in [0, 1]")
  check_window_flags(FLAGS.max_seq_length, FLAGS.max_query_length,
                     FLAGS.doc_stride)
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  modeling.check_seq_length_fits(bert_config, FLAGS.max_seq_length)
  tokenization.check_vocab_fits_config(FLAGS.vocab_file,
                                       bert_config.vocab_size)
  run_classifier.check_case(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  train_examples = predict_examples = None
  if FLAGS.do_train:
    train_examples, _ = squad_data.read_squad_examples(
        FLAGS.train_file, True, FLAGS.version_2_with_negative)
    if not train_examples:
      raise UserError("--train_file %s has no usable training question" %
                      FLAGS.train_file)
  if FLAGS.do_predict:
    predict_examples, _ = squad_data.read_squad_examples(
        FLAGS.predict_file, False, FLAGS.version_2_with_negative)
    if not predict_examples:
      raise UserError("--predict_file %s has no question" %
                      FLAGS.predict_file)
    if not FLAGS.do_train and not tf.train.latest_checkpoint(
        FLAGS.output_dir):
      check_fine_tuned(FLAGS.init_checkpoint, FLAGS.output_dir)
  return bert_config, train_examples, predict_examples


def check_fine_tuned(init_checkpoint, output_dir):
  """Predicting without training needs a SQuAD model to start from.

  Without a checkpoint in output_dir, Estimator.predict runs the variables'
  initialisers, which --init_checkpoint has pointed at its weights (as
  upstream predicts from a fine-tuned --init_checkpoint).

  Raises:
    UserError: there is no --init_checkpoint, or it has no SQuAD head.
  """
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


def write_features(path, features, is_training):
  """Writes the records of `features` to `path` atomically.

  Returns:
    The number of records written.
  """
  count = 0
  with atomic_io.atomic_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for feature in features:
        writer.write(squad_task.serialize_feature(feature, is_training))
        count += 1
  return count


def input_fn_builder(path, max_seq_length, batch_size, has_positions,
                     is_training=False, num_replicas=1):
  """An Estimator input_fn over SQuAD records.

  Args:
    path: the TFRecord file(s) (write_features).
    max_seq_length: S.
    batch_size: global batch.
    has_positions: the records are training records (answer positions).
    is_training: shuffle, repeat and drop a partial batch; else one ordered
      pass (predictions line up with the features).
    num_replicas: replicas in sync; the dataset yields per-replica batches.
  """
  return input_pipeline.classifier_input_fn_builder(
      path, max_seq_length, is_training=is_training,
      drop_remainder=is_training, global_batch_size=batch_size,
      num_replicas=num_replicas,
      feature_spec=squad_task.feature_spec(max_seq_length, has_positions))


def input_fn_maker(max_seq_length):
  """The runner's make_input_fn over SQuAD records: training records (with
  answer positions) for TRAIN and EVAL, predict records for PREDICT."""
  def make_input_fn(files, mode, global_batch_size, num_replicas):
    return input_fn_builder(
        files, max_seq_length, global_batch_size,
        has_positions=mode != tf.estimator.ModeKeys.PREDICT,
        is_training=mode == tf.estimator.ModeKeys.TRAIN,
        num_replicas=num_replicas)
  return make_input_fn


def answers(examples, features, n_best_size, max_answer_length,
            do_lower_case, version_2_with_negative, null_score_diff_threshold,
            output_dir, predict_file, predictions):
  """Writes the answers of the predict outputs; returns their evaluation.

  Args:
    examples, features: the predicted SquadExamples and their windows.
    n_best_size, max_answer_length, do_lower_case, version_2_with_negative,
    null_score_diff_threshold: the flags' values.
    output_dir: where predictions.json (nbest, null_odds) go.
    predict_file: the SQuAD json, evaluated when it has answers.
    predictions: the runner's prediction dicts, one per window in order.

  Returns:
    The official evaluation's figures, or None without gold answers.
  """
  results = [squad_predictions.RawResult(
      unique_id=int(p["unique_ids"]),
      start_logits=[float(x) for x in p["start_logits"].flat],
      end_logits=[float(x) for x in p["end_logits"].flat])
             for p in predictions]
  predicted, nbest, null_odds = squad_predictions.compute_predictions(
      examples, features, results, n_best_size, max_answer_length,
      do_lower_case, version_2_with_negative, null_score_diff_threshold)
  paths = squad_predictions.write_predictions(
      output_dir, predicted, nbest, null_odds, version_2_with_negative)
  logging.info("Wrote %s", ", ".join(paths))
  return evaluate(predict_file, predicted, null_odds, version_2_with_negative)


def evaluate(predict_file, predictions, null_odds, version_2_with_negative):
  """The official evaluation's figures, or None if there are no answers."""
  dataset = squad_data.load_squad_json(predict_file)
  if not squad_evaluation.has_answers(dataset):
    return None
  if version_2_with_negative:
    return dict(squad_evaluation.evaluate_v2(dataset, predictions, null_odds))
  return squad_evaluation.evaluate_v1(dataset, predictions)


def write_inputs(output_dir, train_examples, predict_examples, tokenizer,
                 max_seq_length, doc_stride, max_query_length):
  """Writes train.tf_record (shuffled, as upstream) and eval.tf_record.

  Returns:
    (train record files or None, their number of windows,
     predict record files or None, the predict windows' InputFeatures).
  """
  train_files = predict_files = None
  num_train_features, predict_features = 0, []
  if train_examples:
    random.Random(TRAIN_SHUFFLE_SEED).shuffle(train_examples)
    train_files = [os.path.join(output_dir, "train.tf_record")]
    num_train_features = write_features(
        train_files[0], squad_data.convert_examples_to_features(
            train_examples, tokenizer, max_seq_length, doc_stride,
            max_query_length, is_training=True), is_training=True)
  if predict_examples:
    predict_features = list(squad_data.convert_examples_to_features(
        predict_examples, tokenizer, max_seq_length, doc_stride,
        max_query_length, is_training=False))
    predict_files = [os.path.join(output_dir, "eval.tf_record")]
    write_features(predict_files[0], predict_features, is_training=False)
  return train_files, num_train_features, predict_files, predict_features


def main(argv):
  del argv
  # --verbose_logging: also the answers whose text could not be aligned back
  # to the original words (squad_predictions.final_text's debug lines).
  if FLAGS.verbose_logging:
    logging.set_verbosity(logging.DEBUG)
  bert_config, train_examples, predict_examples = validate_flags()
  num_train_steps, num_warmup_steps = 0, 0
  if FLAGS.do_train:
    num_train_steps, num_warmup_steps = run_classifier.train_steps(
        len(train_examples), FLAGS.train_batch_size, FLAGS.num_train_epochs,
        FLAGS.warmup_proportion)
  run = runner.prepare(FLAGS, question_answering_task(bert_config))
  train_files, num_train_features, predict_files, predict_features = (
      write_inputs(FLAGS.output_dir, train_examples, predict_examples,
                   tokenization.FullTokenizer(FLAGS.vocab_file,
                                              FLAGS.do_lower_case),
                   FLAGS.max_seq_length, FLAGS.doc_stride,
                   FLAGS.max_query_length))
  if FLAGS.do_train:
    logging.info("***** Training: %d questions in %d windows, global batch "
                 "%d, %d steps *****", len(train_examples), num_train_features,
                 FLAGS.train_batch_size, num_train_steps)
  runner.run(
      run, input_fn_maker(FLAGS.max_seq_length),
      num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
      train_files=train_files,
      predict_files=predict_files,
      predict_batch_size=FLAGS.predict_batch_size,
      predict_message="***** Predict: %d questions in %d windows, batch %d "
      "*****" % (len(predict_examples or ()), len(predict_features),
                 FLAGS.predict_batch_size),
      use_predictions=functools.partial(
          answers, predict_examples, predict_features, FLAGS.n_best_size,
          FLAGS.max_answer_length, FLAGS.do_lower_case,
          FLAGS.version_2_with_negative, FLAGS.null_score_diff_threshold,
          FLAGS.output_dir, FLAGS.predict_file))


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main))
