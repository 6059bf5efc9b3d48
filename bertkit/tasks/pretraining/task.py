# coding=utf-8
"""The pretraining task: BERT with upstream's masked LM and next-sentence heads.

The heads, their losses and eval metrics, and the task the runner trains:
each micro-batch's loss is its share of the global batch's loss, so that
gradient accumulation, replicas and horovod ranks train as one device would
on the whole batch. Rows packed with several sequences
(create_pretraining_data.py --pack_sequences) get one next-sentence
prediction per sequence. Without next-sentence prediction (records of
create_pretraining_data.py --next_sentence_prediction=false) the task has
the masked LM alone: no next-sentence head, variables or loss, and the
pooler, which BertModel still builds, gets no gradient. The names are
upstream's run_pretraining ones where upstream has them.
"""

import functools

import tensorflow.compat.v1 as tf

from bertkit import kernels
from bertkit.common import heads
from bertkit.common import options
from bertkit.data import packing
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.distributed import distribution
from bertkit.engine.loop import model_spec
import modeling


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions,
                         label_ids, label_weights, loss_denominator=None,
                         weighted_only=False):
  """Masked LM loss, computed on the masked positions only.

  Args:
    bert_config: BertConfig.
    input_tensor: [B, S, H] final encoder layer.
    output_weights: [V, H] word embedding table (tied output weights).
    positions: [B, P] int32 masked positions.
    label_ids: [B, P] int32 original token ids.
    label_weights: [B, P] float32, 1.0 for real predictions, 0.0 padding.
    loss_denominator: divides the weighted loss sum instead of this batch's
      sum(label_weights) + 1e-5 (see `masked_lm_denominator`): in training,
      the global batch's, so that the losses of every micro-batch and
      replica add up to the global batch's loss.
    weighted_only: run the head on the K predictions of weight > 0 alone,
      not on all B*P slots (the loss is the same). Training uses it: masks
      drawn in training leave slots empty (about a fifth of the fast
      recipe's 40), and the [K, V] product is the head's cost.

  Returns:
    (loss scalar, per_example_loss [B*P], log_probs [B*P, V]); with
    `weighted_only`, per_example_loss [K] and log_probs [K, V].
  """
  # Gathering first keeps the transform and the [.., V] matmul to the B*P
  # masked rows instead of all B*S.
  flat_sequence, flat_positions = _flatten_positions(input_tensor, positions)
  label_ids = tf.reshape(label_ids, [-1])
  label_weights = tf.reshape(label_weights, [-1])
  if weighted_only:
    kept = tf.reshape(tf.where(label_weights > 0.0), [-1])
    flat_positions, label_ids, label_weights = [
        tf.gather(t, kept) for t in (flat_positions, label_ids,
                                     label_weights)]
  input_tensor = tf.gather(flat_sequence, flat_positions)
  with tf.variable_scope("cls/predictions"):
    with tf.variable_scope("transform"):
      input_tensor = tf.layers.dense(
          input_tensor, units=bert_config.hidden_size,
          activation=modeling.get_activation(bert_config.hidden_act),
          kernel_initializer=modeling.create_initializer(
              bert_config.initializer_range))
      input_tensor = modeling.layer_norm(input_tensor)
    output_bias = tf.get_variable("output_bias",
                                  shape=[bert_config.vocab_size],
                                  initializer=tf.zeros_initializer())
    logits = tf.matmul(input_tensor, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    per_example_loss = kernels.sparse_softmax_cross_entropy(label_ids, logits)
    numerator = tf.reduce_sum(label_weights * per_example_loss)
    if loss_denominator is None:
      loss_denominator = masked_lm_denominator(label_weights)
    loss = numerator / loss_denominator
  return loss, per_example_loss, log_probs


def masked_lm_denominator(label_weights):
  """Upstream's normaliser of the masked LM loss: sum of weights + 1e-5."""
  return tf.reduce_sum(label_weights) + 1e-5


def get_next_sentence_output(bert_config, input_tensor, labels):
  """Next-sentence loss from the pooled [CLS] output.

  Args:
    bert_config: BertConfig.
    input_tensor: [B, H] pooled output.
    labels: [B, 1] int32, 1 = segment B is a random sentence.

  Returns:
    (loss scalar, per_example_loss [B], log_probs [B, 2]).
  """
  logits, log_probs = _next_sentence_logits(bert_config, input_tensor)
  per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.reshape(labels, [-1]), logits=logits)
  loss = tf.reduce_mean(per_example_loss)
  return loss, per_example_loss, log_probs


def get_packed_next_sentence_output(bert_config, input_tensor, labels,
                                    weights, loss_denominator=None):
  """Next-sentence loss of packed rows: one prediction per packed sequence.

  Args:
    bert_config: BertConfig.
    input_tensor: [B, N, H] pooled output at each sequence's own [CLS]
      (BertModel with `cls_positions`).
    labels: [B, N] int32, 1 = segment B is a random sentence.
    weights: [B, N] float32, 1.0 for a sequence, 0.0 for an empty slot.
    loss_denominator: divides the weighted loss sum instead of this batch's
      number of sequences, sum(weights): in training, the global batch's, so
      the loss is the mean over the sequences of the global batch whatever
      the rows they came in.

  Returns:
    (loss scalar, per_example_loss [B*N], log_probs [B*N, 2]).
  """
  hidden_size = modeling.get_shape_list(input_tensor, expected_rank=3)[2]
  logits, log_probs = _next_sentence_logits(
      bert_config, tf.reshape(input_tensor, [-1, hidden_size]))
  per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.reshape(labels, [-1]), logits=logits)
  weights = tf.reshape(weights, [-1])
  if loss_denominator is None:
    loss_denominator = tf.reduce_sum(weights)
  loss = tf.reduce_sum(weights * per_example_loss) / loss_denominator
  return loss, per_example_loss, log_probs


def _next_sentence_logits(bert_config, pooled):
  """The next-sentence classifier: (logits [X, 2], log_probs [X, 2]) of the
  pooled [X, H]."""
  with tf.variable_scope("cls/seq_relationship"):
    output_weights = tf.get_variable(
        "output_weights", shape=[2, bert_config.hidden_size],
        initializer=modeling.create_initializer(bert_config.initializer_range))
    output_bias = tf.get_variable("output_bias", shape=[2],
                                  initializer=tf.zeros_initializer())
    logits = tf.matmul(pooled, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
  return logits, tf.nn.log_softmax(logits, axis=-1)


def gather_indexes(sequence_tensor, positions):
  """Gathers the vectors at `positions` of each sequence.

  Args:
    sequence_tensor: [B, S, H].
    positions: [B, P] int32.

  Returns:
    [B*P, H].
  """
  flat_sequence, flat_positions = _flatten_positions(sequence_tensor,
                                                     positions)
  return tf.gather(flat_sequence, flat_positions)


def _flatten_positions(sequence_tensor, positions):
  """([B*S, H] sequence, [B*P] positions in it) of a [B, S, H] sequence
  and [B, P] positions."""
  batch_size, seq_length, width = modeling.get_shape_list(
      sequence_tensor, expected_rank=3)
  flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32)
                            * seq_length, [-1, 1])
  flat_positions = tf.reshape(positions + flat_offsets, [-1])
  return (tf.reshape(sequence_tensor, [batch_size * seq_length, width]),
          flat_positions)


def masked_lm_metrics(masked_lm_example_loss, masked_lm_log_probs,
                      masked_lm_ids, masked_lm_weights):
  """Upstream's masked_lm_accuracy and masked_lm_loss (weighted means over
  the real predictions)."""
  masked_lm_predictions = tf.argmax(masked_lm_log_probs, axis=-1,
                                    output_type=tf.int32)
  masked_lm_weights = tf.reshape(masked_lm_weights, [-1])
  return {
      "masked_lm_accuracy": tf.metrics.accuracy(
          labels=tf.reshape(masked_lm_ids, [-1]),
          predictions=masked_lm_predictions, weights=masked_lm_weights),
      "masked_lm_loss": tf.metrics.mean(values=masked_lm_example_loss,
                                        weights=masked_lm_weights),
  }


def pretraining_metrics(masked_lm_example_loss, masked_lm_log_probs,
                        masked_lm_ids, masked_lm_weights,
                        next_sentence_example_loss, next_sentence_log_probs,
                        next_sentence_labels, next_sentence_weights=None):
  """Upstream's four eval metrics (packed rows: `next_sentence_weights` [B, N]
  leaves out the empty sequence slots)."""
  metrics = masked_lm_metrics(masked_lm_example_loss, masked_lm_log_probs,
                              masked_lm_ids, masked_lm_weights)
  next_sentence_predictions = tf.argmax(next_sentence_log_probs, axis=-1,
                                        output_type=tf.int32)
  if next_sentence_weights is not None:
    next_sentence_weights = tf.reshape(next_sentence_weights, [-1])
  metrics["next_sentence_accuracy"] = tf.metrics.accuracy(
      labels=tf.reshape(next_sentence_labels, [-1]),
      predictions=next_sentence_predictions, weights=next_sentence_weights)
  metrics["next_sentence_loss"] = tf.metrics.mean(
      values=next_sentence_example_loss, weights=next_sentence_weights)
  return metrics


def is_packed(features):
  """Whether a feature dict holds packed rows (several sequences per row)."""
  return packing.PACKED_ONLY_FEATURE in features


def pretraining_model(bert_config, features, is_training,
                      masked_lm_loss_denominator=None,
                      next_sentence_loss_denominator=None,
                      next_sentence_prediction=True):
  """BERT with both pretraining heads on a batch of features.

  Packed rows (features with `sequence_ids`, `position_ids`, `cls_positions`
  and `next_sentence_weights`) get one next-sentence prediction per packed
  sequence; see get_packed_next_sentence_output.

  Args:
    bert_config: BertConfig.
    features: dict of the input_fn's [B, ...] tensors.
    is_training: dropout on, and the masked-LM head on the weighted
      predictions alone (get_masked_lm_output's `weighted_only`), if True.
    masked_lm_loss_denominator: see get_masked_lm_output.
    next_sentence_loss_denominator: packed rows only, see
      get_packed_next_sentence_output.
    next_sentence_prediction: False: no next-sentence head (the features
      need no next_sentence_labels; any are ignored).

  Returns:
    (masked_lm, next_sentence): the (loss, per_example_loss, log_probs)
    triples of get_masked_lm_output and get_next_sentence_output (or
    get_packed_next_sentence_output); next_sentence is None without
    next-sentence prediction.
  """
  packed = is_packed(features)
  # An explicit variable scope: with the default one, the model built again
  # for a second micro-batch would look for its variables under bert_1/.
  model = modeling.BertModel(
      config=bert_config, is_training=is_training,
      input_ids=features["input_ids"], input_mask=features["input_mask"],
      token_type_ids=features["segment_ids"], use_one_hot_embeddings=False,
      scope="bert", sequence_ids=features.get("sequence_ids"),
      position_ids=features.get("position_ids"),
      cls_positions=features.get("cls_positions"))
  masked_lm = get_masked_lm_output(
      bert_config, model.get_sequence_output(), model.get_embedding_table(),
      features["masked_lm_positions"], features["masked_lm_ids"],
      features["masked_lm_weights"], masked_lm_loss_denominator,
      weighted_only=is_training)
  if not next_sentence_prediction:
    next_sentence = None
  elif packed:
    next_sentence = get_packed_next_sentence_output(
        bert_config, model.get_pooled_output(),
        features["next_sentence_labels"], features["next_sentence_weights"],
        next_sentence_loss_denominator)
  else:
    next_sentence = get_next_sentence_output(
        bert_config, model.get_pooled_output(),
        features["next_sentence_labels"])
  return masked_lm, next_sentence


def batch_counts(features):
  """(sequences, real tokens) of a batch of rows: more sequences than rows
  when the rows are packed."""
  if is_packed(features):
    sequences = tf.reduce_sum(features["next_sentence_weights"])
  else:
    sequences = tf.shape(features["input_ids"])[0]
  return sequences, tf.reduce_sum(features["input_mask"])


def micro_batch_loss_fns(bert_config, features, num_micro_batches,
                         next_sentence_prediction=True,
                         init_distribution=options.TRUNCATED_NORMAL):
  """Loss functions of this replica's K micro-batches: its share of the step.

  The shares of every micro-batch of every replica, worker and rank add up
  to one device's loss on the global batch, so the summed gradients are that
  loss's gradient:
    - masked LM: micro-batch i divides its weighted loss sum by the masked
      weights of the GLOBAL batch (+1e-5, as upstream), a scalar all-reduced
      over the replicas once per step. It depends on the input only, so the
      collective runs alongside the forward pass; the gradient all-reduce
      stays one batched op;
    - next sentence: micro-batches and replicas hold equally many examples,
      so its mean counts 1/K, divided by the number of replicas
      (`distribution.replica_share`). Packed rows hold varying numbers of
      sequences: each micro-batch divides its sum over its sequences by the
      global batch's number of sequences, all-reduced with the masked count;
    - without next-sentence prediction the share is the masked LM's alone.

  Args:
    bert_config: BertConfig.
    features: dict of this replica's [B, ...] training features.
    num_micro_batches: K, dividing B.
    next_sentence_prediction: False: the masked-LM loss only.
    init_distribution: what the first micro-batch, which creates the
      variables, draws them from (options.INIT_DISTRIBUTIONS).

  Returns:
    K functions without arguments, each building the model on one
    micro-batch and returning its part of this replica's loss share.
  """
  per_sequence = is_packed(features) and next_sentence_prediction
  # stop_gradient: a normaliser, not a function of the weights (the
  # all-reduce has no gradient).
  masked_count = tf.stop_gradient(tf.reduce_sum(features["masked_lm_weights"]))
  if per_sequence:
    # Packed rows hold varying numbers of sequences: the next-sentence mean
    # is over the global batch's sequences, counted in the same all-reduce.
    masked_count, sequence_count = distribution.sum_across_replicas(
        [masked_count, tf.stop_gradient(
            tf.reduce_sum(features["next_sentence_weights"]))],
        compress=False)
  else:
    masked_count = distribution.global_sum(masked_count)
  denominator = masked_count + 1e-5

  def loss_fn(index, micro_batch):
    with model_spec.reusing_variables(index), modeling.init_distribution(
        init_distribution):
      (masked_lm_loss, _, _), next_sentence = pretraining_model(
          bert_config, micro_batch, is_training=True,
          masked_lm_loss_denominator=denominator,
          next_sentence_loss_denominator=(sequence_count if per_sequence
                                          else None),
          next_sentence_prediction=next_sentence_prediction)
    if next_sentence is None:
      return masked_lm_loss
    next_sentence_loss = next_sentence[0]
    if per_sequence:
      return masked_lm_loss + next_sentence_loss
    return masked_lm_loss + distribution.replica_share(
        next_sentence_loss / float(num_micro_batches))

  return [functools.partial(loss_fn, i, micro_batch) for i, micro_batch
          in enumerate(model_spec.split_micro_batches(features,
                                                  num_micro_batches))]


def eval_outputs(bert_config, features, next_sentence_prediction=True):
  """(mean loss, eval metrics) of an eval batch: upstream's four, or
  masked_lm_accuracy and masked_lm_loss where the model or the records have
  no next sentence (held-out records of either kind judge either model on
  the same masked-LM questions)."""
  masked_lm, next_sentence = pretraining_model(
      bert_config, features, is_training=False,
      next_sentence_prediction=(next_sentence_prediction and
                                "next_sentence_labels" in features))
  masked_lm_loss, masked_lm_example_loss, masked_lm_log_probs = masked_lm
  if next_sentence is None:
    return masked_lm_loss, masked_lm_metrics(
        masked_lm_example_loss, masked_lm_log_probs,
        features["masked_lm_ids"], features["masked_lm_weights"])
  next_sentence_loss, next_sentence_example_loss, next_sentence_log_probs = (
      next_sentence)
  metrics = pretraining_metrics(
      masked_lm_example_loss, masked_lm_log_probs,
      features["masked_lm_ids"], features["masked_lm_weights"],
      next_sentence_example_loss, next_sentence_log_probs,
      features["next_sentence_labels"], features.get("next_sentence_weights"))
  return masked_lm_loss + next_sentence_loss, metrics


def pretraining_model_spec(bert_config, next_sentence_prediction=True,
                     init_distribution=options.TRUNCATED_NORMAL):
  """Pretraining as a model_spec.ModelSpec: masked LM + next sentence, packed rows
  included; trains and evaluates, predicts nothing.

  Args:
    bert_config: BertConfig.
    next_sentence_prediction: False: the masked LM alone, for records
      without next-sentence labels
      (pretraining_records.has_next_sentence(kind) is False).
    init_distribution: what weights not loaded from a checkpoint are drawn
      from, one of options.INIT_DISTRIBUTIONS.
  """
  return model_spec.ModelSpec(
      variable_shapes=functools.partial(
          checkpoint_formats.variable_shapes, bert_config,
          heads.PRETRAINING if next_sentence_prediction
          else heads.MASKED_LM),
      train_loss_fns=functools.partial(
          micro_batch_loss_fns, bert_config,
          next_sentence_prediction=next_sentence_prediction,
          init_distribution=init_distribution),
      eval_outputs=functools.partial(
          eval_outputs, bert_config,
          next_sentence_prediction=next_sentence_prediction),
      batch_counts=batch_counts)


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, optimizer=None,
                     num_accumulation_steps=1, next_sentence_prediction=True):
  """Returns the Estimator model_fn for pretraining.

  Args:
    bert_config: BertConfig.
    init_checkpoint: checkpoint to initialise from, or None.
    learning_rate: peak learning rate.
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    optimizer: the rest of the update, an options.OptimizerOptions (None:
      upstream's).
    num_accumulation_steps: micro-batches per update; each replica's batch
      must divide by it.
    next_sentence_prediction: see `pretraining_model_spec`.
  """
  return model_spec.upstream_model_fn(
      pretraining_model_spec(bert_config, next_sentence_prediction), init_checkpoint,
      learning_rate, num_train_steps, num_warmup_steps, optimizer,
      num_accumulation_steps)


def build_pretraining_variables(bert_config, next_sentence_prediction=True):
  """Creates every trainable variable of the pretraining model (B=1, S=2);
  without next-sentence prediction, none of cls/seq_relationship."""
  ids = tf.zeros([1, 2], tf.int32)
  model = modeling.BertModel(config=bert_config, is_training=False,
                             input_ids=ids, input_mask=ids,
                             token_type_ids=ids)
  get_masked_lm_output(bert_config, model.get_sequence_output(),
                       model.get_embedding_table(), ids, ids,
                       tf.zeros([1, 2]))
  if next_sentence_prediction:
    get_next_sentence_output(bert_config, model.get_pooled_output(),
                             tf.zeros([1, 1], tf.int32))
