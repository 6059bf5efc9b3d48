# coding=utf-8
"""The SQuAD task: the records its model reads, the answers it gives, and its
description for the fine-tuning driver (SquadFineTuning).

Before training or predicting, the examples' windows (squad/data.py) are
written as TFRecords: train.tf_record, shuffled once as upstream does, and
eval.tf_record in order, so that the predictions line up with the windows.
After predicting, the windows' logits become predictions.json (and the
n-best and null-odds files, squad/predictions.py), evaluated with the
official script's figures when the file has gold answers.
"""

import dataclasses
import functools
import os
import random
from typing import Optional

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.engine.input import input_pipeline
from bertkit.engine.loop import runner
from bertkit.tasks.fine_tuning import driver
from bertkit.tasks.squad import data as squad_data
from bertkit.tasks.squad import evaluation as squad_evaluation
from bertkit.tasks.squad import model as squad_model
from bertkit.tasks.squad import predictions as squad_predictions

# Upstream shuffles the training examples once with this seed before writing
# them, so that the input_fn's small shuffle buffer suffices.
TRAIN_SHUFFLE_SEED = 12345


def write_features(path, features, is_training):
  """Writes the records of `features` to `path` atomically.

  Returns:
    The number of records written.
  """
  return atomic_io.write_tfrecords(path, (
      squad_model.serialize_feature(feature, is_training)
      for feature in features))


def write_inputs(output_dir, train_examples, predict_examples, tokenizer,
                 max_seq_length, doc_stride, max_query_length):
  """Writes train.tf_record (shuffled, as upstream) and eval.tf_record.

  Returns:
    (train record files or None, their number of windows,
     predict record files or None, the predict windows' SquadFeatures).
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
  return input_pipeline.records_input_fn(
      path, squad_model.feature_spec(max_seq_length, has_positions),
      is_training=is_training, drop_remainder=is_training,
      global_batch_size=batch_size, num_replicas=num_replicas)


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


@dataclasses.dataclass(frozen=True)
class SquadInputs:
  """The questions a run reads: --train_file's (None without --do_train)
  and --predict_file's (None without --do_predict)."""
  train_examples: Optional[list]
  predict_examples: Optional[list]


class SquadFineTuning(driver.FineTuningTask):
  """SQuAD 1.1 and 2.0: windows over long contexts, a span head, the
  answers and the official script's figures out (run_squad.py's
  docstring)."""
  head = heads.SQUAD

  def read(self, opts):
    # --verbose_logging: also the answers whose text could not be aligned
    # back to the original words (squad/predictions.py's debug lines).
    if opts.verbose_logging:
      logging.set_verbosity(logging.DEBUG)
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
    return SquadInputs(train_examples, predict_examples)

  # SQuAD does not distill (its options have no --teacher_outputs): its
  # logits are per WordPiece of a window, tied to the tokenizer and the
  # windows, so `distill` is always None here.
  def model_spec(self, bert_config, inputs, distill):
    del distill
    return squad_model.question_answering_model_spec(bert_config)

  def training_set(self, opts, inputs, tokenizer):
    # Upstream counts the training steps in questions, not windows.
    return driver.TrainingSet(len(inputs.train_examples), "questions")

  def write_records(self, opts, inputs, tokenizer, is_chief, training,
                    distill):
    del distill
    train_files, num_train_windows, predict_files, predict_features = (
        write_inputs(opts.run.output_dir, inputs.train_examples,
                     inputs.predict_examples, tokenizer, opts.max_seq_length,
                     opts.doc_stride, opts.max_query_length))
    files = {"train": train_files, "test": predict_files}
    questions = len(inputs.train_examples or ())
    return driver.Records(
        {split: f for split, f in files.items() if f},
        "%d questions in %d windows" % (questions, num_train_windows),
        predict_features)

  def input_fn_maker(self, opts, inputs, distill):
    del distill
    return input_fn_maker(opts.max_seq_length)

  def prediction(self, opts, inputs, records, model):
    features = records.details
    return runner.PredictStage(
        files=records.files.get("test"), batch_size=opts.predict_batch_size,
        message="***** Predict: %d questions in %d windows, batch %d "
        "*****" % (len(inputs.predict_examples or ()), len(features),
                   opts.predict_batch_size),
        use_predictions=functools.partial(
            answers, inputs.predict_examples, features, opts.n_best_size,
            opts.max_answer_length, model.do_lower_case,
            opts.version_2_with_negative, opts.null_score_diff_threshold,
            opts.run.output_dir, opts.predict_file))


TASK = SquadFineTuning()
