"""Masked LM and next-sentence pretraining of BERT with tf.estimator.

Upstream's flags (TPU ones dropped) plus the distribution flags of
distribution.py: the Estimator gets a MirroredStrategy,
MultiWorkerMirroredStrategy or CentralStorageStrategy through its RunConfig,
runs on one device, or runs as one horovod rank of several
(--distribution_strategy=horovod, launched by horovodrun).
`--train_batch_size` is the global batch over all replicas, per update: with
`--num_accumulation_steps K` each replica runs K micro-batches of
train_batch_size / (replicas * K) examples, then the summed gradient makes
one all-reduce and one update (one global step).
"""

import functools
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

from bertkit.engine import distribution
from bertkit.engine import dynamic_masking
from bertkit.common import file_patterns
from bertkit.engine import input_pipeline
import modeling
from bertkit.data import packing
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.engine import runner
import tokenization
from bertkit.common.errors import UserError, main_with_user_errors

FLAGS = flags.FLAGS

MASKING_AUTO = "auto"
MASKING_STATIC = "static"
MASKING_DYNAMIC = "dynamic"


def define_flags():
  """Upstream's pretraining flags beyond the runner's (runner.define_flags).

  Called by the program only: importing this module (e.g. to build the
  pretraining heads elsewhere) defines no flags.
  """
  runner.define_flags()
  flags.DEFINE_string("input_file", None,
                      "Input TFRecord file(s): comma-separated globs.")
  flags.DEFINE_enum(
      "masking", MASKING_AUTO, [MASKING_AUTO, MASKING_STATIC, MASKING_DYNAMIC],
      "auto: the records' own masks (create_pretraining_data.py "
      "--masking=static), or masks drawn in the input pipeline, anew every "
      "epoch, for records without masks (--masking=dynamic). static: the "
      "records' own masks only. dynamic: draw masks for either kind (masked "
      "records get their original tokens back and new masks).")
  flags.DEFINE_float("masked_lm_prob", 0.15,
                     "Drawn masks: fraction of a sequence's tokens masked.")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Drawn masks: mask all wordpieces of a word together.")
  flags.DEFINE_integer("max_seq_length", 128,
                       "Sequence length of the records (S).")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Masked positions per sequence in the records (or "
                       "drawn per sequence).")
  flags.DEFINE_bool("do_eval", False,
                    "Whether to run eval on the input files.")
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
  flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
  flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warm-up steps.")
  flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")


def get_masked_lm_output(bert_config, input_tensor, output_weights, positions,
                         label_ids, label_weights, loss_denominator=None):
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

  Returns:
    (loss scalar, per_example_loss [B*P], log_probs [B*P, V]).
  """
  # Gathering first keeps the transform and the [.., V] matmul to the B*P
  # masked rows instead of all B*S.
  input_tensor = gather_indexes(input_tensor, positions)
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
    label_ids = tf.reshape(label_ids, [-1])
    label_weights = tf.reshape(label_weights, [-1])
    per_example_loss = modeling.sparse_softmax_cross_entropy(label_ids, logits)
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
  batch_size, seq_length, width = modeling.get_shape_list(
      sequence_tensor, expected_rank=3)
  flat_offsets = tf.reshape(tf.range(0, batch_size, dtype=tf.int32)
                            * seq_length, [-1, 1])
  flat_positions = tf.reshape(positions + flat_offsets, [-1])
  flat_sequence = tf.reshape(sequence_tensor, [batch_size * seq_length, width])
  return tf.gather(flat_sequence, flat_positions)


def pretraining_metrics(masked_lm_example_loss, masked_lm_log_probs,
                        masked_lm_ids, masked_lm_weights,
                        next_sentence_example_loss, next_sentence_log_probs,
                        next_sentence_labels, next_sentence_weights=None):
  """Upstream's four eval metrics (packed rows: `next_sentence_weights` [B, N]
  leaves out the empty sequence slots)."""
  masked_lm_predictions = tf.argmax(masked_lm_log_probs, axis=-1,
                                    output_type=tf.int32)
  masked_lm_ids = tf.reshape(masked_lm_ids, [-1])
  masked_lm_weights = tf.reshape(masked_lm_weights, [-1])
  next_sentence_predictions = tf.argmax(next_sentence_log_probs, axis=-1,
                                        output_type=tf.int32)
  if next_sentence_weights is not None:
    next_sentence_weights = tf.reshape(next_sentence_weights, [-1])
  return {
      "masked_lm_accuracy": tf.metrics.accuracy(
          labels=masked_lm_ids, predictions=masked_lm_predictions,
          weights=masked_lm_weights),
      "masked_lm_loss": tf.metrics.mean(values=masked_lm_example_loss,
                                        weights=masked_lm_weights),
      "next_sentence_accuracy": tf.metrics.accuracy(
          labels=tf.reshape(next_sentence_labels, [-1]),
          predictions=next_sentence_predictions,
          weights=next_sentence_weights),
      "next_sentence_loss": tf.metrics.mean(values=next_sentence_example_loss,
                                            weights=next_sentence_weights),
  }


def is_packed(features):
  """Whether a feature dict holds packed rows (several sequences per row)."""
  return packing.PACKED_ONLY_FEATURE in features


def pretraining_model(bert_config, features, is_training,
                      masked_lm_loss_denominator=None,
                      next_sentence_loss_denominator=None):
  """BERT with both pretraining heads on a batch of features.

  Packed rows (features with `sequence_ids`, `position_ids`, `cls_positions`
  and `next_sentence_weights`) get one next-sentence prediction per packed
  sequence; see get_packed_next_sentence_output.

  Args:
    bert_config: BertConfig.
    features: dict of the input_fn's [B, ...] tensors.
    is_training: dropout on if True.
    masked_lm_loss_denominator: see get_masked_lm_output.
    next_sentence_loss_denominator: packed rows only, see
      get_packed_next_sentence_output.

  Returns:
    (masked_lm, next_sentence): the (loss, per_example_loss, log_probs)
    triples of get_masked_lm_output and get_next_sentence_output (or
    get_packed_next_sentence_output).
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
      features["masked_lm_weights"], masked_lm_loss_denominator)
  if packed:
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


def micro_batch_loss_fns(bert_config, features, num_micro_batches):
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
      global batch's number of sequences, all-reduced with the masked count.

  Args:
    bert_config: BertConfig.
    features: dict of this replica's [B, ...] training features.
    num_micro_batches: K, dividing B.

  Returns:
    K functions without arguments, each building the model on one
    micro-batch and returning its part of this replica's loss share.
  """
  packed = is_packed(features)
  # stop_gradient: a normaliser, not a function of the weights (the
  # all-reduce has no gradient).
  masked_count = tf.stop_gradient(tf.reduce_sum(features["masked_lm_weights"]))
  if packed:
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
    with runner.reusing_variables(index):
      (masked_lm_loss, _, _), (next_sentence_loss, _, _) = pretraining_model(
          bert_config, micro_batch, is_training=True,
          masked_lm_loss_denominator=denominator,
          next_sentence_loss_denominator=(sequence_count if packed else None))
    if packed:
      return masked_lm_loss + next_sentence_loss
    return masked_lm_loss + distribution.replica_share(
        next_sentence_loss / float(num_micro_batches))

  return [functools.partial(loss_fn, i, micro_batch) for i, micro_batch
          in enumerate(runner.split_micro_batches(features,
                                                  num_micro_batches))]


def eval_outputs(bert_config, features):
  """(mean loss, upstream's four metrics) of an eval batch."""
  ((masked_lm_loss, masked_lm_example_loss, masked_lm_log_probs),
   (next_sentence_loss, next_sentence_example_loss,
    next_sentence_log_probs)) = pretraining_model(
        bert_config, features, is_training=False)
  metrics = pretraining_metrics(
      masked_lm_example_loss, masked_lm_log_probs,
      features["masked_lm_ids"], features["masked_lm_weights"],
      next_sentence_example_loss, next_sentence_log_probs,
      features["next_sentence_labels"], features.get("next_sentence_weights"))
  return masked_lm_loss + next_sentence_loss, metrics


def pretraining_task(bert_config):
  """Pretraining as a runner.Task: masked LM + next sentence, packed rows
  included; trains and evaluates, predicts nothing."""
  return runner.Task(
      build_variables=functools.partial(build_pretraining_variables,
                                        bert_config),
      train_loss_fns=functools.partial(micro_batch_loss_fns, bert_config),
      eval_outputs=functools.partial(eval_outputs, bert_config),
      batch_counts=batch_counts)


def model_fn_builder(bert_config, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, optimizer_options,
                     num_accumulation_steps=1):
  """Returns the Estimator model_fn for pretraining.

  Args:
    bert_config: BertConfig.
    init_checkpoint: checkpoint to initialise from, or None.
    learning_rate: peak learning rate.
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    optimizer_options: dict of extra create_accumulating_optimizer keyword
      arguments (use_fp16, optimizer_name, ...; runner.optimizer_options).
    num_accumulation_steps: micro-batches per update; each replica's batch
      must divide by it.
  """
  return runner.model_fn_builder(
      pretraining_task(bert_config), init_checkpoint, learning_rate,
      num_train_steps, num_warmup_steps, optimizer_options,
      num_accumulation_steps)


def build_pretraining_variables(bert_config):
  """Creates every trainable variable of the pretraining model (B=1, S=2)."""
  ids = tf.zeros([1, 2], tf.int32)
  model = modeling.BertModel(config=bert_config, is_training=False,
                             input_ids=ids, input_mask=ids,
                             token_type_ids=ids)
  get_masked_lm_output(bert_config, model.get_sequence_output(),
                       model.get_embedding_table(), ids, ids,
                       tf.zeros([1, 2]))
  get_next_sentence_output(bert_config, model.get_pooled_output(),
                           tf.zeros([1, 1], tf.int32))


def masking_for_records(masking, record_kind, vocab_file, max_seq_length,
                        max_predictions_per_seq, masked_lm_prob,
                        do_whole_word_mask):
  """What to mask the records with, from the flags and the records' kind.

  Args:
    masking: the --masking value.
    record_kind: the records' pretraining_records.RecordKind.
    vocab_file: the --vocab_file value (None if not given).
    max_seq_length, max_predictions_per_seq, masked_lm_prob,
    do_whole_word_mask: the flags' values.

  Returns:
    A dynamic_masking.MaskingParams, or None to use the records' masks.

  Raises:
    UserError: --masking=static on records without masks, a masked_lm_prob
      the masks cannot follow, or no --vocab_file to draw masks with.
  """
  if record_kind is not pretraining_records.MASKED:
    if masking == MASKING_STATIC:
      raise UserError(
          "--masking=static but the --input_file records are %s: they hold "
          "no masks; drop --masking=static (masks are then drawn in the "
          "input pipeline) or make the records with create_pretraining_data"
          ".py --masking=static" % record_kind.name)
  elif masking != MASKING_DYNAMIC:
    return None
  problem = dynamic_masking.check_masked_lm_prob(
      masked_lm_prob, max_seq_length, max_predictions_per_seq)
  if problem:
    raise UserError(problem)
  if not vocab_file:
    raise UserError(
        "--vocab_file is required to draw masks (%s records%s): the ids of "
        "[CLS], [SEP], [MASK] come from it" % (
            record_kind.name, ", --masking=dynamic"
            if record_kind is pretraining_records.MASKED else ""))
  return dynamic_masking.masking_params_from_vocab(
      pretraining_instances.load_checked_vocab(vocab_file), max_seq_length,
      max_predictions_per_seq, masked_lm_prob, do_whole_word_mask)


def describe_masking(record_kind, masking):
  """One log line: the records' kind and where the masks come from."""
  if masking is None:
    return "input records: %s; training on the masks they hold" % (
        record_kind.description)
  return ("input records: %s; masks drawn in the input pipeline, new every "
          "epoch: masked_lm_prob %g, at most %d per sequence, %s" % (
              record_kind.description, masking.masked_lm_prob,
              masking.max_predictions_per_seq,
              "whole words" if masking.do_whole_word_mask
              else "per wordpiece"))


def validate_flags():
  """Checks flags and inputs before any long work; returns what they load.

  Returns:
    (bert_config, input_files, record kind, masking params or None, N: the
    sequence slots of packed rows or None for unpacked records).
  """
  if not FLAGS.do_train and not FLAGS.do_eval:
    raise UserError("At least one of --do_train or --do_eval must be True")
  for name in ("bert_config_file", "input_file", "output_dir"):
    if not getattr(FLAGS, name):
      raise UserError("--%s is required" % name)
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  modeling.check_seq_length_fits(bert_config, FLAGS.max_seq_length)
  for name in ("eval_batch_size", "num_train_steps",
               "max_predictions_per_seq"):
    if getattr(FLAGS, name) < 1:
      raise UserError("--%s must be >= 1, got %d" % (name, getattr(FLAGS, name)))
  if FLAGS.num_warmup_steps < 0:
    raise UserError("--num_warmup_steps must be >= 0")
  if FLAGS.vocab_file:
    tokenization.check_vocab_fits_config(FLAGS.vocab_file,
                                         bert_config.vocab_size)
  input_files = file_patterns.expand_file_patterns(FLAGS.input_file)
  record_kind, max_sequences_per_pack = (
      input_pipeline.check_pretraining_records(
          input_files, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
          vocab_size=bert_config.vocab_size))
  if record_kind is pretraining_records.PACKED:
    if FLAGS.masking == MASKING_DYNAMIC:
      raise UserError(
          "--masking=dynamic but the --input_file rows are packed with their "
          "masks; drop --masking=dynamic, or make the rows with "
          "create_pretraining_data.py --pack_sequences --masking=dynamic")
    masking = None
  else:
    masking = masking_for_records(
        FLAGS.masking, record_kind, FLAGS.vocab_file, FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq, FLAGS.masked_lm_prob,
        FLAGS.do_whole_word_mask)
  return (bert_config, input_files, record_kind, masking,
          max_sequences_per_pack)


def input_fn_maker(max_seq_length, max_predictions_per_seq, record_kind,
                   masking, max_sequences_per_pack, seed, output_dir):
  """The runner's make_input_fn over pretraining records.

  Args:
    max_seq_length, max_predictions_per_seq: S and P of the records.
    record_kind, masking, max_sequences_per_pack: see validate_flags.
    seed: --tf_random_seed: deterministic training input and its masks'
      seed; None: upstream's sloppy, shuffled reading.
    output_dir: where training resumes from (the chief's directory: horovod's
      other ranks keep a scratch one).
  """
  def make_input_fn(files, mode, global_batch_size, num_replicas):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    return input_pipeline.pretraining_input_fn_builder(
        files, max_seq_length, max_predictions_per_seq,
        is_training=is_training, global_batch_size=global_batch_size,
        num_replicas=num_replicas,
        deterministic=not is_training or seed is not None,
        record_kind=record_kind, masking=masking,
        masking_seed=seed if is_training else None,
        start_step_fn=(lambda: input_pipeline.checkpoint_step(output_dir))
        if is_training else None,
        max_sequences_per_pack=max_sequences_per_pack)
  return make_input_fn


def main(argv):
  del argv
  (bert_config, input_files, record_kind, masking,
   max_sequences_per_pack) = validate_flags()
  run = runner.prepare(FLAGS, pretraining_task(bert_config))
  logging.info("Input files: %d, first %s", len(input_files), input_files[0])
  if max_sequences_per_pack is not None:
    logging.info("packed records: up to %d sequences per row; "
                 "--train_batch_size counts rows", max_sequences_per_pack)
  logging.info("%s", describe_masking(record_kind, masking))
  runner.run(
      run, input_fn_maker(FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
                          record_kind, masking, max_sequences_per_pack,
                          FLAGS.tf_random_seed, FLAGS.output_dir),
      num_train_steps=FLAGS.num_train_steps,
      num_warmup_steps=FLAGS.num_warmup_steps,
      train_files=input_files if FLAGS.do_train else None,
      eval_files=input_files if FLAGS.do_eval else None,
      eval_batch_size=FLAGS.eval_batch_size, eval_steps=FLAGS.max_eval_steps)


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main))
