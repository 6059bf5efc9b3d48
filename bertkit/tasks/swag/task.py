# coding=utf-8
"""The multiple-choice task (SWAG): its head, the model_spec.ModelSpec, its
records, the figures of its predictions, and its description for the
fine-tuning driver (MultipleChoiceFineTuning).

Each of an example's C choices is its own sequence (swag/data.py); BERT
reads the B*C sequences, and the head gives each one score from its pooled
[CLS] output: dropout (the config's hidden_dropout_prob), then
`cls/multiple_choice/output_weights` [1, H], `.../output_bias` [1], as
Hugging Face's BertForMultipleChoice. The C scores of an example are its
logits; the loss is their softmax cross-entropy with the right choice.

Shape notation: B = batch, C = choices, S = sequence length, H = hidden size.
"""

import functools
import os

import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.input import input_pipeline
from bertkit.engine.loop import model_spec
from bertkit.tasks.fine_tuning import distillation
from bertkit.tasks.fine_tuning import driver
from bertkit.tasks.swag import data as swag_data
import modeling

OUTPUT_WEIGHTS, OUTPUT_BIAS = heads.MULTIPLE_CHOICE.variables
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
# Each predicted split: its prefix in eval_results.txt and its probabilities
# file.
PREDICTED_SPLITS = {"dev": ("eval", "dev_results.tsv"),
                    "test": ("test", "test_results.tsv")}


def create_model(bert_config, is_training, input_ids, input_mask,
                 segment_ids, head=heads.MULTIPLE_CHOICE):
  """One score per choice.

  Args:
    bert_config: BertConfig.
    is_training: enables dropout.
    input_ids, input_mask, segment_ids: int32 [B, C, S].
    head: the heads.Head whose (weights [1, H], bias [1]) variables score
      each sequence (run_rerank's re-ranker scores its pairs alike).

  Returns:
    float32 logits [B, C].
  """
  batch_size, num_choices, seq_length = modeling.get_shape_list(
      input_ids, expected_rank=3)

  def flat(t):
    return tf.reshape(t, [batch_size * num_choices, seq_length])

  # An explicit scope: a second micro-batch's model reuses bert/..., not
  # bert_1/...
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=flat(input_ids),
      input_mask=flat(input_mask), token_type_ids=flat(segment_ids),
      scope="bert")
  pooled = model.get_pooled_output()
  weights_name, bias_name = head.variables
  weights = tf.get_variable(
      weights_name, [1, bert_config.hidden_size],
      initializer=modeling.create_initializer(bert_config.initializer_range))
  bias = tf.get_variable(bias_name, [1], initializer=tf.zeros_initializer())
  if is_training:
    pooled = modeling.dropout(pooled, bert_config.hidden_dropout_prob)
  scores = tf.nn.bias_add(tf.matmul(pooled, weights, transpose_b=True), bias)
  return tf.reshape(scores, [batch_size, num_choices])



def serving_outputs(bert_config, input_ids, input_mask, segment_ids,
                    num_labels):
  """export_checkpoint's SavedModel outputs (heads.MULTIPLE_CHOICE.serving):
  from inputs [B, C, S], logits [B, C]."""
  del num_labels  # one output per choice
  return {"logits": create_model(bert_config, False, input_ids, input_mask,
                                 segment_ids)}


def build_variables(bert_config):
  """Creates every trainable variable of the model (B=1, C=2, S=2)."""
  ids = tf.zeros([1, 2, 2], tf.int32)
  create_model(bert_config, False, ids, ids, ids)


def multiple_choice_model_spec(bert_config, distill=None):
  """Multiple choice as a model_spec.ModelSpec: the mean cross-entropy of the
  softmax over each example's choices; eval loss and accuracy; logits [B, C] and
  probabilities [B, C] as predictions. With a distillation.Distillation, the
  training loss is the mean of its per-example losses."""

  def logits_of(features, is_training):
    return create_model(bert_config, is_training,
                        *(features[name] for name in SEQUENCE_FEATURES))

  def mean_loss(features, is_training):
    logits = logits_of(features, is_training)
    return tf.reduce_mean(distillation.per_example_losses(
        tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=features["label"], logits=logits), logits, features,
        distill))

  def eval_outputs(features):
    logits = logits_of(features, False)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=features["label"], logits=logits)
    return tf.reduce_mean(losses), {
        "eval_loss": tf.metrics.mean(losses),
        "eval_accuracy": tf.metrics.accuracy(
            features["label"], tf.argmax(logits, -1, output_type=tf.int32))}

  def predictions(features):
    logits = logits_of(features, False)
    return {"logits": logits, "probabilities": tf.nn.softmax(logits, -1)}

  return model_spec.ModelSpec(
      variable_shapes=lambda: checkpoint_formats.variable_shapes(
          bert_config, heads.MULTIPLE_CHOICE),
      train_loss_fns=model_spec.mean_loss_shares(
          lambda features: mean_loss(features, True)),
      eval_outputs=eval_outputs, predictions=predictions)


def feature_spec(num_choices, seq_length):
  """The tf.io parsing spec of the records: [C, S] per sequence feature."""
  spec = {name: tf.FixedLenFeature([num_choices, seq_length], tf.int64)
          for name in SEQUENCE_FEATURES}
  spec["label"] = tf.FixedLenFeature([], tf.int64)
  return spec


def example_record(example, tokenizer, seq_length, teacher=None):
  """One example as a serialized tf.train.Example (feature_spec); an
  unlabelled example has label 0. `teacher`: its teacher logits [C]."""
  encoded = swag_data.encode_choices(example, tokenizer, seq_length)
  values = {name: [i for row in rows for i in row]
            for name, rows in zip(SEQUENCE_FEATURES, encoded)}
  values["label"] = [example.label or 0]
  feature = {
      name: tf.train.Feature(int64_list=tf.train.Int64List(value=value))
      for name, value in values.items()}
  if teacher is not None:
    feature.update(distillation.record_features(
        teacher, example.label is not None))
  return tf.train.Example(features=tf.train.Features(
      feature=feature)).SerializeToString()


def write_inputs(output_dir, examples, tokenizer, seq_length, distill=None):
  """Writes train, eval and predict.tf_record of the splits read.

  Args:
    output_dir: where the records go.
    examples: {split: Examples} of "train", "dev", "test".
    tokenizer: the FullTokenizer.
    seq_length: S.
    distill: a distillation.Distillation: the training records hold their
      teacher logits.

  Returns:
    {split: [record file]}.
  """
  files = {}
  for split, split_examples in examples.items():
    files[split] = [driver.record_file(output_dir, split)]
    teacher = (distill.teacher if distill and split == "train"
               else [None] * len(split_examples))
    atomic_io.write_tfrecords(files[split][0], (
        example_record(example, tokenizer, seq_length, logits)
        for example, logits in zip(split_examples, teacher)))
  return files


def input_fn_maker(num_choices, seq_length, distilled=False):
  """The runner's make_input_fn over the records (feature_spec; a student's
  training records also hold their teacher logits [C] when `distilled`)."""
  return input_pipeline.records_input_fn_maker(
      feature_spec(num_choices, seq_length),
      distilled and distillation.feature_spec([num_choices]))


def choice_figures(examples, logits):
  """Accuracy and mean loss of labelled examples' logits [N, C]; {} when
  they are unlabelled."""
  if any(e.label is None for e in examples):
    return {}
  labels = np.array([e.label for e in examples])
  logits = np.asarray(logits, np.float64)
  top = logits.max(-1, keepdims=True)
  log_norm = np.log(np.exp(logits - top).sum(-1)) + top[:, 0]
  return {"accuracy": float(np.mean(logits.argmax(-1) == labels)),
          "loss": float(np.mean(log_norm -
                                logits[np.arange(len(labels)), labels]))}


def use_predictions(output_dir, examples, predictions):
  """The runner's PredictStage.use_predictions (on the chief): writes each
  predicted split's choice probabilities, one tab-separated line per example;
  returns eval_* (dev) and test_* (a labelled test set) accuracy and loss.

  Args:
    output_dir: where the files go.
    examples: {split: Examples} of the predicted splits ("dev", then
      "test"), in record order.
    predictions: the prediction dicts of every example, in record order.
  """
  figures, start = {}, 0
  for split, (prefix, file_name) in PREDICTED_SPLITS.items():
    if split not in examples:
      continue
    chunk = predictions[start:start + len(examples[split])]
    start += len(examples[split])
    with atomic_io.atomic_open(os.path.join(output_dir, file_name)) as f:
      for prediction in chunk:
        f.write("\t".join(str(p) for p in prediction["probabilities"]) +
                "\n")
    figures.update({"%s_%s" % (prefix, k): v for k, v in choice_figures(
        examples[split], [p["logits"] for p in chunk]).items()})
  return figures or None


def read_splits(opts):
  """{split: Examples} of the splits the --do_* options read.

  Raises:
    UserError: a file is bad or missing, train or dev has an unlabelled
      example, or the splits' numbers of choices differ.
  """
  examples = {}
  given = {"train": opts.train_file, "test": opts.predict_file}
  for split in driver.stage_splits(opts):
    path = given.get(split) or swag_data.split_path(opts.data_dir, split)
    examples[split] = swag_data.read_examples(path)
    # A training file may be a transfer set when a teacher labels it.
    if split == "dev" or (split == "train" and not opts.teacher_outputs):
      swag_data.check_labelled(examples[split], path)
  counts = {split: len(e[0].endings) for split, e in examples.items()}
  if len(set(counts.values())) > 1:
    raise UserError("the splits have different numbers of choices: %s" %
                    ", ".join("%s %d" % item for item in counts.items()))
  return examples


def num_choices(examples):
  """C, the choices of every example of a run."""
  return len(next(iter(examples.values()))[0].endings)


class MultipleChoiceFineTuning(driver.FineTuningTask):
  """Multiple choice (SWAG): C endings per example, one score each, softmax
  over them; the choice probabilities and accuracy out (run_swag.py's
  docstring)."""
  head = heads.MULTIPLE_CHOICE

  def read(self, opts):
    return read_splits(opts)

  def model_spec(self, bert_config, inputs, distill):
    return multiple_choice_model_spec(bert_config, distill)

  def training_set(self, opts, inputs, tokenizer):
    return driver.TrainingSet(len(inputs["train"]))

  def write_records(self, opts, inputs, tokenizer, is_chief, training,
                    distill):
    files = write_inputs(opts.run.output_dir, inputs, tokenizer,
                         opts.max_seq_length, distill)
    train = inputs.get("train", ())
    return driver.Records(files, "%d examples of %d choices" % (
        len(train), num_choices(inputs)))

  def input_fn_maker(self, opts, inputs, distill):
    return input_fn_maker(num_choices(inputs), opts.max_seq_length,
                          distill is not None)

  def example_rows(self, inputs, split):
    return [(example.example_id, (len(example.endings),))
            for example in inputs[split]]

  def predicted_rows(self, inputs, records, predictions):
    test = predictions[len(inputs.get("dev", ())):]
    return [{"id": example.example_id, "logits": p["logits"]}
            for example, p in zip(inputs["test"], test)]

  def prediction(self, opts, inputs, records, model):
    return driver.predict_dev_and_test(
        opts, records,
        {split: "%d examples" % len(examples)
         for split, examples in inputs.items()},
        functools.partial(use_predictions, opts.run.output_dir, inputs))


TASK = MultipleChoiceFineTuning()
