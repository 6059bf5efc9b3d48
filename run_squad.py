# coding=utf-8
"""BERT fine-tuning on SQuAD 1.1 and 2.0 with tf.estimator.

Upstream's flags, features and output files (TPU flags dropped), on the same
Estimator set-up as run_classifier.py (training_setup.py): one device,
MirroredStrategy, MultiWorkerMirroredStrategy, CentralStorageStrategy or
horovod, --use_fp16, gradient accumulation, preemption, throughput logs.
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

import console

# Before TensorFlow is imported: its C++ runtime reads its log level then.
console.quiet_native_logs(sys.argv)
# pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app
from absl import flags
from absl import logging
import tensorflow.compat.v1 as tf

import atomic_io
import distribution
import input_pipeline
import modeling
import optimization
import run_classifier
import run_pretraining
import squad_data
import squad_evaluation
import squad_predictions
import squad_task
import throughput
import tokenization
import training_setup
from errors import UserError, main_with_user_errors

FLAGS = flags.FLAGS

# Upstream shuffles the training examples once with this seed before writing
# them, so that the input_fn's small shuffle buffer suffices.
TRAIN_SHUFFLE_SEED = 12345


def define_flags():
  """Upstream's run_squad flags and training_setup's.

  Called by the program only: importing this module defines no flags.
  """
  flags.DEFINE_string("bert_config_file", None,
                      "bert_config.json of the pre-trained model.")
  flags.DEFINE_string("vocab_file", None,
                      "The vocab the BERT model was trained with.")
  flags.DEFINE_string("output_dir", None,
                      "Checkpoints, features and predictions go here; a "
                      "rerun with the same directory resumes.")
  flags.DEFINE_string("train_file", None,
                      "SQuAD json for training, e.g. train-v1.1.json.")
  flags.DEFINE_string("predict_file", None,
                      "SQuAD json to predict, e.g. dev-v1.1.json; with gold "
                      "answers it is also evaluated.")
  flags.DEFINE_string("init_checkpoint", None,
                      "Initial weights: a checkpoint prefix or a directory "
                      "(run_pretraining.py's output_dir, Google's "
                      ".../bert_model.ckpt, or a Hugging Face BERT "
                      "directory with config.json + model.safetensors).")
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
  flags.DEFINE_bool("do_train", False, "Whether to run training.")
  flags.DEFINE_bool("do_predict", False,
                    "Whether to predict (and evaluate) --predict_file.")
  flags.DEFINE_integer("train_batch_size", 32,
                       "Total batch size for training, over all replicas.")
  flags.DEFINE_integer("predict_batch_size", 8,
                       "Total batch size for predictions.")
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Epochs of training.")
  flags.DEFINE_float("warmup_proportion", 0.1,
                     "Fraction of the training steps with linear warm-up.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "How often to save the model checkpoint.")
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints to keep.")
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "Accepted for upstream compatibility; unused off TPU.")
  flags.DEFINE_integer("num_accumulation_steps", 1,
                       "Gradient accumulation: micro-batches per update. Each "
                       "replica's micro-batch is train_batch_size / (replicas "
                       "x num_accumulation_steps).")
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
  training_setup.define_flags()


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, optimizer_options,
                     num_accumulation_steps=1):
  """Returns the Estimator model_fn for SQuAD.

  Args:
    bert_config: BertConfig.
    init_checkpoint: checkpoint (prefix or directory) to start from, or None.
    learning_rate: peak learning rate.
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    optimizer_options: extra create_optimizer keyword arguments
      (training_setup.Setup.optimizer_options).
    num_accumulation_steps: micro-batches per update; each replica's batch
      must divide by it.

  The model_fn trains on the span loss; EVAL (train_and_evaluate under a
  TF_CONFIG cluster) reports it; PREDICT returns unique_ids [B] and
  start_logits / end_logits [B, S].
  """

  def micro_batch_loss_fns(features):
    def loss_fn(index, micro_batch):
      with tf.variable_scope(tf.get_variable_scope(),
                             reuse=True if index else None,
                             auxiliary_name_scope=False):
        start_logits, end_logits = squad_task.create_model(
            bert_config, True, micro_batch["input_ids"],
            micro_batch["input_mask"], micro_batch["segment_ids"])
      # Equal-size micro-batches: each mean counts 1/K of the replica's.
      return distribution.replica_share(squad_task.span_loss(
          start_logits, end_logits, micro_batch["start_positions"],
          micro_batch["end_positions"]) / float(num_accumulation_steps))
    return [functools.partial(loss_fn, i, micro_batch)
            for i, micro_batch in enumerate(
                run_pretraining.split_micro_batches(features,
                                                    num_accumulation_steps))]

  def model_fn(features, labels, mode, params):
    del labels, params
    if mode == tf.estimator.ModeKeys.TRAIN:
      step = optimization.create_accumulating_optimizer(
          micro_batch_loss_fns(features), learning_rate, num_train_steps,
          num_warmup_steps, **optimizer_options)
      if init_checkpoint:
        training_setup.init_from_checkpoint(init_checkpoint)
      return tf.estimator.EstimatorSpec(
          mode, loss=throughput.register_step_metrics(step),
          train_op=step.train_op)
    start_logits, end_logits = squad_task.create_model(
        bert_config, False, features["input_ids"], features["input_mask"],
        features["segment_ids"])
    if init_checkpoint:
      training_setup.init_from_checkpoint(init_checkpoint)
    if mode == tf.estimator.ModeKeys.EVAL:
      loss = squad_task.span_loss(start_logits, end_logits,
                                  features["start_positions"],
                                  features["end_positions"])
      return tf.estimator.EstimatorSpec(
          mode, loss=loss,
          eval_metric_ops={"eval_loss": tf.metrics.mean(loss)})
    return tf.estimator.EstimatorSpec(mode, predictions={
        "unique_ids": features["unique_ids"], "start_logits": start_logits,
        "end_logits": end_logits})

  return model_fn


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
  for name in ("train_batch_size", "predict_batch_size",
               "save_checkpoints_steps", "n_best_size", "max_answer_length",
               "num_accumulation_steps"):
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
  path = training_setup.resolve_checkpoint(init_checkpoint)
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
                     is_training=False, num_replicas=1, record_shard=None):
  """An Estimator input_fn over one file of SQuAD records.

  Args:
    path: the TFRecord file (write_features).
    max_seq_length: S.
    batch_size: global batch.
    has_positions: the records are training records (answer positions).
    is_training: shuffle, repeat and drop a partial batch; else one ordered
      pass (predictions line up with the features).
    num_replicas, record_shard: see classifier_input_fn_builder.
  """
  return input_pipeline.classifier_input_fn_builder(
      path, max_seq_length, is_training=is_training,
      drop_remainder=is_training, global_batch_size=batch_size,
      num_replicas=num_replicas, record_shard=record_shard,
      feature_spec=squad_task.feature_spec(max_seq_length, has_positions))


def predict(estimator, path, features, batch_size, max_seq_length):
  """RawResults of every feature, in file order."""
  results = []
  input_fn = input_fn_builder(path, max_seq_length, batch_size, False)
  for prediction in estimator.predict(input_fn, yield_single_examples=True):
    results.append(squad_predictions.RawResult(
        unique_id=int(prediction["unique_ids"]),
        start_logits=[float(x) for x in prediction["start_logits"].flat],
        end_logits=[float(x) for x in prediction["end_logits"].flat]))
    if len(results) % 1000 == 0:
      logging.info("Predicted %d of %d windows", len(results), len(features))
  return results


def evaluate(predict_file, predictions, null_odds, version_2_with_negative):
  """The official evaluation's figures, or None if there are no answers."""
  dataset = squad_data.load_squad_json(predict_file)
  if not squad_evaluation.has_answers(dataset):
    return None
  if version_2_with_negative:
    return dict(squad_evaluation.evaluate_v2(dataset, predictions, null_odds))
  return squad_evaluation.evaluate_v1(dataset, predictions)


def main(argv):
  del argv
  # --verbose_logging: also the answers whose text could not be aligned back
  # to the original words (squad_predictions.final_text's debug lines).
  if FLAGS.verbose_logging:
    logging.set_verbosity(logging.DEBUG)
  bert_config, train_examples, predict_examples = validate_flags()
  setup = training_setup.prepare(training_setup.options_from_flags(
      FLAGS, FLAGS.output_dir, FLAGS.train_batch_size))
  if FLAGS.init_checkpoint:
    training_setup.check_init_checkpoint(
        FLAGS.init_checkpoint,
        lambda: squad_task.build_squad_variables(bert_config))
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)

  num_train_steps, num_warmup_steps = 0, 0
  if FLAGS.do_train:
    run_pretraining.micro_batch_size(FLAGS.train_batch_size,
                                     setup.plan.num_replicas,
                                     FLAGS.num_accumulation_steps)
    num_train_steps, num_warmup_steps = run_classifier.train_steps(
        len(train_examples), FLAGS.train_batch_size, FLAGS.num_train_epochs,
        FLAGS.warmup_proportion)
  estimator = training_setup.make_estimator(
      model_fn_builder(bert_config, FLAGS.init_checkpoint,
                       FLAGS.learning_rate, num_train_steps, num_warmup_steps,
                       setup.optimizer_options, FLAGS.num_accumulation_steps),
      setup)

  throughput_summary = None
  if FLAGS.do_train:
    random.Random(TRAIN_SHUFFLE_SEED).shuffle(train_examples)
    train_file = os.path.join(FLAGS.output_dir, "train.tf_record")
    num_features = write_features(
        train_file, squad_data.convert_examples_to_features(
            train_examples, tokenizer, FLAGS.max_seq_length,
            FLAGS.doc_stride, FLAGS.max_query_length, is_training=True),
        is_training=True)
    if FLAGS.skip_corrupt_records:
      train_file, = training_setup.skip_corrupt_records(setup, [train_file])
    logging.info("***** Training: %d questions in %d windows, global batch "
                 "%d, %d steps *****", len(train_examples), num_features,
                 FLAGS.train_batch_size, num_train_steps)
    throughput_summary = training_setup.train(
        estimator, setup,
        input_fn_builder(
            train_file, FLAGS.max_seq_length, FLAGS.train_batch_size, True,
            is_training=True, num_replicas=setup.plan.num_replicas,
            record_shard=training_setup.record_shard_for_this_worker()),
        # Under a TF_CONFIG cluster, train() runs train_and_evaluate, which
        # needs an eval input: the training file's span loss.
        input_fn_builder(train_file, FLAGS.max_seq_length,
                         FLAGS.predict_batch_size, True),
        num_train_steps, None, input_files=[train_file])

  eval_result = None
  if FLAGS.do_predict:
    features = list(squad_data.convert_examples_to_features(
        predict_examples, tokenizer, FLAGS.max_seq_length, FLAGS.doc_stride,
        FLAGS.max_query_length, is_training=False))
    path = os.path.join(FLAGS.output_dir, "eval.tf_record")
    write_features(path, features, is_training=False)
    logging.info("***** Predict: %d questions in %d windows, batch %d *****",
                 len(predict_examples), len(features),
                 FLAGS.predict_batch_size)
    results = predict(estimator, path, features, FLAGS.predict_batch_size,
                      FLAGS.max_seq_length)
    predictions, nbest, null_odds = squad_predictions.compute_predictions(
        predict_examples, features, results, FLAGS.n_best_size,
        FLAGS.max_answer_length, FLAGS.do_lower_case,
        FLAGS.version_2_with_negative, FLAGS.null_score_diff_threshold)
    if setup.is_chief:
      paths = squad_predictions.write_predictions(
          FLAGS.output_dir, predictions, nbest, null_odds,
          FLAGS.version_2_with_negative)
      logging.info("Wrote %s", ", ".join(paths))
      eval_result = evaluate(FLAGS.predict_file, predictions, null_odds,
                             FLAGS.version_2_with_negative)
      if eval_result is not None:
        # None when predicting straight from --init_checkpoint.
        latest = tf.train.latest_checkpoint(FLAGS.output_dir)
        if latest:
          eval_result["global_step"] = int(
              tf.train.load_variable(latest, "global_step"))
        training_setup.write_eval_results(FLAGS.output_dir, eval_result)
  if setup.is_chief:
    training_setup.print_run_summary(FLAGS.output_dir, throughput_summary,
                                     eval_result)


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main))
