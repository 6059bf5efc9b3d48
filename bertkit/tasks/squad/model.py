# coding=utf-8
"""The SQuAD task's graph parts: the span head, its loss, its records, and
the task the runner trains and predicts with.

The head is upstream's: one dense layer `cls/squad/output_weights` [2, H],
`cls/squad/output_bias` [2] over BERT's sequence output gives a start and an
end logit per token. The loss is the mean over the batch of the start and
end positions' cross-entropies, halved (upstream's (start + end) / 2).
"""

import collections

import tensorflow.compat.v1 as tf

from bertkit.common import heads
from bertkit.data import pretraining_records
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.loop import model_spec
import modeling

OUTPUT_WEIGHTS, OUTPUT_BIAS = heads.SQUAD.variables


def create_model(bert_config, is_training, input_ids, input_mask,
                 segment_ids, use_one_hot_embeddings=False):
  """Start and end logits of every token.

  Args:
    bert_config: BertConfig.
    is_training: enables dropout.
    input_ids, input_mask, segment_ids: int32 [B, S].
    use_one_hot_embeddings: see modeling.BertModel.

  Returns:
    (start_logits, end_logits): float32 [B, S] each.
  """
  # An explicit scope: a second micro-batch's model reuses bert/..., not
  # bert_1/...
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids,
      input_mask=input_mask, token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings, scope="bert")
  final_hidden = model.get_sequence_output()
  batch_size, seq_length, hidden_size = modeling.get_shape_list(
      final_hidden, expected_rank=3)
  output_weights = tf.get_variable(
      OUTPUT_WEIGHTS, [2, hidden_size],
      initializer=tf.truncated_normal_initializer(stddev=0.02))
  output_bias = tf.get_variable(OUTPUT_BIAS, [2],
                                initializer=tf.zeros_initializer())
  hidden = tf.reshape(final_hidden, [batch_size * seq_length, hidden_size])
  logits = tf.nn.bias_add(
      tf.matmul(hidden, output_weights, transpose_b=True), output_bias)
  logits = tf.reshape(logits, [batch_size, seq_length, 2])
  start_logits, end_logits = tf.unstack(logits, axis=2)
  return start_logits, end_logits



def serving_outputs(bert_config, input_ids, input_mask, segment_ids,
                    num_labels):
  """export_checkpoint's SavedModel outputs (heads.SQUAD.serving):
  start_logits and end_logits [B, S]."""
  del num_labels  # a start and an end logit
  start_logits, end_logits = create_model(bert_config, False, input_ids,
                                          input_mask, segment_ids)
  return {"start_logits": start_logits, "end_logits": end_logits}


def span_loss(start_logits, end_logits, start_positions, end_positions):
  """Upstream's loss: (mean start CE + mean end CE) / 2 over the batch.

  Args:
    start_logits, end_logits: [B, S].
    start_positions, end_positions: int32 [B].

  Returns:
    A float32 scalar.
  """
  def cross_entropy(logits, positions):
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=positions, logits=logits))
  return (cross_entropy(start_logits, start_positions) +
          cross_entropy(end_logits, end_positions)) / 2.0


def build_squad_variables(bert_config):
  """Creates every trainable variable of the SQuAD model (B=1, S=2)."""
  ids = tf.zeros([1, 2], tf.int32)
  create_model(bert_config, False, ids, ids, ids)


def feature_spec(seq_length, is_training):
  """The tf.io parsing spec of the SQuAD records."""
  spec = {
      "unique_ids": tf.FixedLenFeature([], tf.int64),
      "input_ids": tf.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([seq_length], tf.int64),
  }
  if is_training:
    spec["start_positions"] = tf.FixedLenFeature([], tf.int64)
    spec["end_positions"] = tf.FixedLenFeature([], tf.int64)
  return spec


def serialize_feature(feature, is_training):
  """One squad_data.SquadFeatures as upstream's FeatureWriter writes it."""
  int_feature = pretraining_records.int_feature
  features = collections.OrderedDict([
      ("unique_ids", int_feature([feature.unique_id])),
      ("input_ids", int_feature(feature.input_ids)),
      ("input_mask", int_feature(feature.input_mask)),
      ("segment_ids", int_feature(feature.segment_ids)),
  ])
  if is_training:
    features["start_positions"] = int_feature([feature.start_position])
    features["end_positions"] = int_feature([feature.end_position])
    features["is_impossible"] = int_feature([int(feature.is_impossible)])
  return tf.train.Example(features=tf.train.Features(
      feature=features)).SerializeToString()


def question_answering_model_spec(bert_config):
  """SQuAD as a model_spec.ModelSpec: upstream's span loss; its mean as the eval
  loss (train_and_evaluate under a TF_CONFIG cluster); unique_ids [B] and
  start_logits / end_logits [B, S] as predictions."""

  def logits(features, is_training):
    return create_model(bert_config, is_training, features["input_ids"],
                        features["input_mask"], features["segment_ids"])

  def loss(features, is_training):
    start_logits, end_logits = logits(features, is_training)
    return span_loss(start_logits, end_logits, features["start_positions"],
                     features["end_positions"])

  def eval_outputs(features):
    mean_loss = loss(features, False)
    return mean_loss, {"eval_loss": tf.metrics.mean(mean_loss)}

  def predictions(features):
    start_logits, end_logits = logits(features, False)
    return {"unique_ids": features["unique_ids"],
            "start_logits": start_logits, "end_logits": end_logits}

  return model_spec.ModelSpec(
      variable_shapes=lambda: checkpoint_formats.variable_shapes(
          bert_config, heads.SQUAD),
      train_loss_fns=model_spec.mean_loss_shares(
          lambda features: loss(features, True)),
      eval_outputs=eval_outputs, predictions=predictions)


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, optimizer=None,
                     num_accumulation_steps=1):
  """Returns the Estimator model_fn for SQuAD (question_answering_model_spec).

  Args:
    bert_config: BertConfig.
    init_checkpoint: checkpoint (prefix or directory) to start from, or None.
    learning_rate: peak learning rate.
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    optimizer: the rest of the update, an options.OptimizerOptions (None:
      upstream's).
    num_accumulation_steps: micro-batches per update; each replica's batch
      must divide by it.
  """
  return model_spec.upstream_model_fn(
      question_answering_model_spec(bert_config), init_checkpoint,
      learning_rate, num_train_steps, num_warmup_steps, optimizer,
      num_accumulation_steps)
