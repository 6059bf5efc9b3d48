# coding=utf-8
"""The token classification (NER) task: its head, the model_spec.ModelSpec, its
records and the files it writes from the predictions.

The head: dropout (the config's hidden_dropout_prob, as Hugging Face's
BertForTokenClassification), then one dense layer
`cls/token_classification/output_weights` [C, H], `.../output_bias` [C]
over BERT's sequence output: logits [B, S, C]. Its own scope, so that
export_checkpoint tells it from the sentence classifier's top-level
`output_weights`. The loss is the cross-entropy at the labelled positions
(each word's first WordPiece, ner/data.py), averaged over those of the
global batch.

Shape notation: B = batch, S = sequence length, H = hidden size,
C = number of labels.
"""

import dataclasses
import functools
import json
import os
import random

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.distributed import distribution
from bertkit.engine.input import input_pipeline
from bertkit.engine.loop import model_spec
from bertkit.tasks.fine_tuning import distillation
from bertkit.tasks.fine_tuning import driver
from bertkit.tasks.ner import data as ner_data
import modeling

OUTPUT_WEIGHTS, OUTPUT_BIAS = heads.TOKEN_CLASSIFICATION.variables
# Training windows are written shuffled (the input pipeline's buffer of 100
# would keep a document's sentences together), the same order every run.
TRAIN_SHUFFLE_SEED = 12345
RESULTS_JSON = "eval_results.json"
# Each predicted split: its prefix in eval_results.txt and its CoNLL file.
PREDICTED_SPLITS = {"dev": ("eval", "dev_predictions.txt"),
                    "test": ("test", "test_predictions.txt")}


def create_model(bert_config, is_training, input_ids, input_mask,
                 segment_ids, num_labels):
  """Label logits of every token.

  Args:
    bert_config: BertConfig.
    is_training: enables dropout.
    input_ids, input_mask, segment_ids: int32 [B, S].
    num_labels: C.

  Returns:
    float32 logits [B, S, C].
  """
  # An explicit scope: a second micro-batch's model reuses bert/..., not
  # bert_1/...
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids,
      input_mask=input_mask, token_type_ids=segment_ids, scope="bert")
  hidden = model.get_sequence_output()
  batch_size, seq_length, hidden_size = modeling.get_shape_list(
      hidden, expected_rank=3)
  weights = tf.get_variable(
      OUTPUT_WEIGHTS, [num_labels, hidden_size],
      initializer=modeling.create_initializer(bert_config.initializer_range))
  bias = tf.get_variable(OUTPUT_BIAS, [num_labels],
                         initializer=tf.zeros_initializer())
  if is_training:
    hidden = modeling.dropout(hidden, bert_config.hidden_dropout_prob)
  hidden = tf.reshape(hidden, [batch_size * seq_length, hidden_size])
  logits = tf.nn.bias_add(tf.matmul(hidden, weights, transpose_b=True), bias)
  return tf.reshape(logits, [batch_size, seq_length, num_labels])



def serving_outputs(bert_config, input_ids, input_mask, segment_ids,
                    num_labels):
  """export_checkpoint's SavedModel outputs (heads.TOKEN_CLASSIFICATION.
  serving): logits [B, S, C]."""
  return {"logits": create_model(bert_config, False, input_ids, input_mask,
                                 segment_ids, num_labels)}


def build_variables(bert_config, num_labels):
  """Creates every trainable variable of the model (B=1, S=2)."""
  ids = tf.zeros([1, 2], tf.int32)
  create_model(bert_config, False, ids, ids, ids, num_labels)


def token_losses(logits, label_ids):
  """Cross-entropy of each position [B, S] (labelled or not)."""
  return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label_ids,
                                                        logits=logits)


def token_classification_model_spec(bert_config, num_labels, distill=None):
  """NER as a model_spec.ModelSpec: the cross-entropy summed over the labelled
  positions of each micro-batch, divided by those of the global batch (so
  that replicas and micro-batches add up to one device's mean); eval loss
  and token accuracy over labelled positions; logits [B, S, C] and
  predicted label ids [B, S] as predictions. With a
  distillation.Distillation, each word's training loss is its
  per_example_losses'."""

  def logits_of(features, is_training):
    return create_model(bert_config, is_training, features["input_ids"],
                        features["input_mask"], features["segment_ids"],
                        num_labels)

  def train_loss_fns(features, num_micro_batches):
    # Windows hold varying numbers of words: the global count divides.
    count = tf.maximum(distribution.global_sum(tf.reduce_sum(
        tf.cast(features["label_weights"], tf.float32))), 1.0)

    def loss_fn(index, micro_batch):
      with model_spec.reusing_variables(index):
        logits = logits_of(micro_batch, True)
        losses = distillation.per_example_losses(
            token_losses(logits, micro_batch["label_ids"]), logits,
            micro_batch, distill)
      weights = tf.cast(micro_batch["label_weights"], tf.float32)
      return tf.reduce_sum(weights * losses) / count

    return [functools.partial(loss_fn, i, micro_batch) for i, micro_batch
            in enumerate(model_spec.split_micro_batches(features,
                                                    num_micro_batches))]

  def eval_outputs(features):
    logits = logits_of(features, False)
    weights = tf.cast(features["label_weights"], tf.float32)
    losses = token_losses(logits, features["label_ids"])
    loss = tf.reduce_sum(weights * losses) / tf.maximum(
        tf.reduce_sum(weights), 1.0)
    return loss, {
        "eval_loss": tf.metrics.mean(losses, weights=weights),
        "eval_accuracy": tf.metrics.accuracy(
            features["label_ids"],
            tf.argmax(logits, -1, output_type=tf.int32), weights=weights)}

  def predictions(features):
    logits = logits_of(features, False)
    return {"logits": logits,
            "predicted_ids": tf.argmax(logits, -1, output_type=tf.int32)}

  return model_spec.ModelSpec(
      variable_shapes=lambda: checkpoint_formats.variable_shapes(
          bert_config, heads.TOKEN_CLASSIFICATION, num_labels),
      train_loss_fns=train_loss_fns, eval_outputs=eval_outputs,
      predictions=predictions)


def feature_spec(seq_length):
  """The tf.io parsing spec of the records."""
  return {name: tf.FixedLenFeature([seq_length], tf.int64)
          for name in ("input_ids", "input_mask", "segment_ids", "label_ids",
                       "label_weights")}


def window_record(window, sentence, label_list, tokenizer, seq_length,
                  teacher=None):
  """One window as a serialized tf.train.Example (feature_spec), padded to
  seq_length; positions that are not a word's first piece have label 0 and
  weight 0. `teacher`: the sentence's teacher logits [W, C], placed at its
  words' first pieces ([S, C], zeros elsewhere)."""
  ids = tokenizer.convert_tokens_to_ids(list(window.tokens))
  pad = [0] * (seq_length - len(ids))
  labels, weights = [0] * seq_length, [0] * seq_length
  for position, label in zip(window.word_starts,
                             ner_data.window_labels(window, sentence,
                                                    label_list)):
    labels[position], weights[position] = label, 1
  values = {"input_ids": ids + pad, "input_mask": [1] * len(ids) + pad,
            "segment_ids": [0] * seq_length, "label_ids": labels,
            "label_weights": weights}
  feature = {
      name: tf.train.Feature(int64_list=tf.train.Int64List(value=value))
      for name, value in values.items()}
  if teacher is not None:
    placed = np.zeros([seq_length, teacher.shape[-1]], np.float32)
    placed[list(window.word_starts)] = teacher[
        window.first_word:window.first_word + len(window.word_starts)]
    feature.update(distillation.record_features(
        placed, sentence.tags is not None))
  return tf.train.Example(features=tf.train.Features(
      feature=feature)).SerializeToString()


def write_records(path, sentences, windows, label_list, tokenizer,
                  seq_length, teacher=None):
  """Writes the windows' records to `path` (atomically); `teacher`: each
  sentence's teacher logits [W, C] (window_record)."""
  atomic_io.write_tfrecords(path, (
      window_record(window, sentences[window.sentence], label_list,
                    tokenizer, seq_length,
                    teacher and teacher[window.sentence])
      for window in windows))


def train_windows(sentences, tokenizer, seq_length):
  """The training sentences' windows, shuffled (TRAIN_SHUFFLE_SEED)."""
  windows = ner_data.windows_of(sentences, tokenizer, seq_length)
  random.Random(TRAIN_SHUFFLE_SEED).shuffle(windows)
  return windows


def write_inputs(output_dir, sentences, label_list, tokenizer, seq_length,
                 windows_of_train=None, distill=None):
  """The records of each split read.

  Args:
    output_dir: where train.tf_record, eval.tf_record, predict.tf_record go.
    sentences: {split: Sentences} of "train", "dev", "test".
    label_list: the labels.
    tokenizer: the FullTokenizer.
    seq_length: S.
    windows_of_train: train_windows of sentences["train"], when they were
      made before (to count them), or None.
    distill: a distillation.Distillation: the training windows hold their
      words' teacher logits.

  Returns:
    ({split: [record file]}, {split: windows in file order}).
  """
  files, windows = {}, {}
  for split, split_sentences in sentences.items():
    if split == "train":
      windows[split] = (train_windows(split_sentences, tokenizer, seq_length)
                        if windows_of_train is None else windows_of_train)
    else:
      windows[split] = ner_data.windows_of(split_sentences, tokenizer,
                                           seq_length)
    path = driver.record_file(output_dir, split)
    write_records(path, split_sentences, windows[split], label_list,
                  tokenizer, seq_length, distill.teacher if distill and
                  split == "train" else None)
    files[split] = [path]
  return files, windows


def input_fn_maker(seq_length, num_teacher_labels=None):
  """The runner's make_input_fn over the records (feature_spec; a student's
  training records also hold their teacher logits [S, C] when
  num_teacher_labels C is given)."""
  return input_pipeline.records_input_fn_maker(
      feature_spec(seq_length), num_teacher_labels and
      distillation.feature_spec([seq_length, num_teacher_labels]))


def token_figures(sentences, windows, predictions, label_list):
  """Mean loss and accuracy over every word's first piece.

  Args:
    sentences, windows: a split's Sentences and windows.
    predictions: the prediction dicts of the windows (logits [S, C]).
    label_list: the labels.
  """
  losses, correct = [], []
  for window, prediction in zip(windows, predictions):
    logits = prediction["logits"].astype(np.float64)
    positions = list(window.word_starts)
    labels = ner_data.window_labels(window, sentences[window.sentence],
                                    label_list)
    chosen = logits[positions]
    log_norm = np.log(np.exp(chosen - chosen.max(-1, keepdims=True)).sum(-1))
    log_norm += chosen.max(-1)
    losses.extend(log_norm - chosen[np.arange(len(labels)), labels])
    correct.extend(chosen.argmax(-1) == labels)
  return {"loss": float(np.mean(losses)), "accuracy": float(np.mean(correct))}


def use_predictions(output_dir, sentences, windows, label_list, predictions):
  """The runner's PredictStage.use_predictions (on the chief): writes each
  predicted split's CoNLL file and eval_results.json; returns the figures
  of eval_results.txt.

  Args:
    output_dir: where the files go.
    sentences, windows: {split: ...} of the predicted splits ("dev", then
      "test"), the windows in the order of the records.
    label_list: the labels.
    predictions: the prediction dicts of every window, in record order.

  Returns:
    {"eval_f1", "eval_precision", ..., "eval_PER_f1", ..., "test_f1", ...}.
  """
  flat, splits, start = {}, {}, 0
  for split in PREDICTED_SPLITS:
    if split not in windows:
      continue
    prefix, file_name = PREDICTED_SPLITS[split]
    chunk = predictions[start:start + len(windows[split])]
    start += len(windows[split])
    predicted = ner_data.predicted_tags(
        sentences[split], windows[split],
        [p["predicted_ids"] for p in chunk], label_list)
    ner_data.write_conll(os.path.join(output_dir, file_name),
                         sentences[split], predicted)
    if sentences[split][0].tags is None:  # an untagged --predict_file
      continue
    figures = ner_data.entity_metrics([list(s.tags) for s in sentences[split]],
                                      predicted)
    figures.update(token_figures(sentences[split], windows[split], chunk,
                                 label_list))
    splits[split] = figures
    flat.update(ner_data.flat_metrics(prefix, figures))
  if splits:
    with atomic_io.atomic_open(os.path.join(output_dir, RESULTS_JSON)) as f:
      json.dump(splits, f, indent=2, sort_keys=True)
      f.write("\n")
  return flat


@dataclasses.dataclass(frozen=True)
class NerInputs:
  """What a run reads: {split: Sentences} of the splits its stages need,
  and the labels."""
  sentences: dict
  label_list: list


def label_list_of(opts, sentences):
  """The run's labels: --labels, train's, or the trained model's.

  Raises:
    UserError: none of them is there, or a tag read is not among them.
  """
  if opts.labels:
    labels = list(opts.labels)
    ner_data.check_label_list(labels)
  elif "train" in sentences and sentences["train"][0].tags is None:
    raise UserError("the training file's sentences are untagged: give the "
                    "labels, --labels=O,B-...,I-..., as the teacher's "
                    "labels.txt lists them")
  elif "train" in sentences:
    labels = ner_data.labels_of(sentences["train"])
  else:
    # Weights without a NER head are the mistake to name first; their
    # labels would not exist either.
    driver.check_weights_hold_head(opts, heads.TOKEN_CLASSIFICATION)
    labels = driver.read_labels(opts.run.output_dir)
    if not labels:
      raise UserError("without --do_train, give --labels or an --output_dir "
                      "holding the labels.txt of a training run")
  for split_sentences in sentences.values():
    ner_data.check_labels(split_sentences, labels)
  return labels


class NerFineTuning(driver.FineTuningTask):
  """Named entities: CoNLL files in, a token classification head, the
  CoNLL predictions and seqeval's figures out (run_ner.py's docstring)."""
  head = heads.TOKEN_CLASSIFICATION

  def read(self, opts):
    given = {"train": opts.train_file, "test": opts.predict_file}
    # Untagged sentences: a training file with a teacher, a file given to
    # predict (--data_dir's test file is scored, so tagged).
    unlabelled = {"train": bool(opts.teacher_outputs),
                  "test": bool(opts.predict_file)}
    sentences = {split: ner_data.read_sentences(
        given.get(split) or ner_data.split_path(opts.data_dir, split),
        unlabelled.get(split, False))
                 for split in driver.stage_splits(opts)}
    label_list = label_list_of(opts, sentences)
    logging.info("Labels %s", label_list)
    return NerInputs(sentences, label_list)

  def model_spec(self, bert_config, inputs, distill):
    return token_classification_model_spec(bert_config, len(inputs.label_list),
                                     distill)

  def training_set(self, opts, inputs, tokenizer):
    """The training windows (the steps count them), made here and written
    by write_records."""
    windows = train_windows(inputs.sentences["train"], tokenizer,
                            opts.max_seq_length)
    return driver.TrainingSet(len(windows), "windows", windows)

  def write_records(self, opts, inputs, tokenizer, is_chief, training,
                    distill):
    if is_chief:
      driver.write_labels(opts.run.output_dir, inputs.label_list)
    files, windows = write_inputs(opts.run.output_dir, inputs.sentences,
                                  inputs.label_list, tokenizer,
                                  opts.max_seq_length,
                                  training and training.computed, distill)
    train = windows.get("train", ())
    return driver.Records(
        files, "%d sentences in %d windows" % (
            len(inputs.sentences.get("train", ())), len(train)), windows)

  def input_fn_maker(self, opts, inputs, distill):
    return input_fn_maker(opts.max_seq_length,
                          len(inputs.label_list) if distill else None)

  def example_rows(self, inputs, split):
    return [(s.lines[0], (len(s.words), len(inputs.label_list)))
            for s in inputs.sentences[split]]

  def predicted_rows(self, inputs, records, predictions):
    windows = records.details
    test = predictions[len(windows.get("dev", ())):]
    sentences = inputs.sentences["test"]
    return [{"id": s.lines[0], "logits": logits}
            for s, logits in zip(sentences, ner_data.word_logits(
                sentences, windows["test"], [p["logits"] for p in test]))]

  def prediction(self, opts, inputs, records, model):
    windows = records.details
    return driver.predict_dev_and_test(
        opts, records, {split: "%d sentences in %d windows" % (
            len(inputs.sentences[split]), len(windows[split]))
                        for split in windows},
        functools.partial(use_predictions, opts.run.output_dir,
                          inputs.sentences, windows, inputs.label_list))


TASK = NerFineTuning()
