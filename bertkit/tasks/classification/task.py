# coding=utf-8
"""The classifier task: its head, the runner.Task, its input and output files.

The head is upstream's: dropout, then one dense layer `output_weights`
[C, H], `output_bias` [C] (top-level names, as upstream's checkpoints) over
BERT's pooled [CLS] output, softmax cross-entropy. With one output
(num_labels 1, STS-B) the head regresses: the output is the score, the loss
the squared error (Hugging Face's num_labels=1). Packed rows
(classification/packing.py) give one pooled output per example. The data it
reads is made by classification/features.py.
"""

import collections
import functools
import os

import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.engine import distribution
from bertkit.engine import input_pipeline
from bertkit.engine import runner
from bertkit.tasks.classification import features as classifier_features
from bertkit.tasks.classification import packing as classifier_packing
import modeling


# Size: upstream's eight parameters first, so that its callers keep working;
# the four optional ones are the packed-row inputs, passed by keyword as
# classifier_packing.model_inputs names them.
def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings=False,
                 sequence_ids=None, position_ids=None, cls_positions=None,
                 example_weights=None):
  """A classification head on BERT's pooled [CLS] output.

  Args:
    bert_config: BertConfig.
    is_training: enables dropout.
    input_ids, input_mask, segment_ids: int32 [B, S].
    labels: int32 [B] label ids ([B*N] for packed rows); float32 [B]
      scores for regression.
    num_labels: number of classes C; 1: regression (mean squared error).
    use_one_hot_embeddings: see modeling.BertModel.
    sequence_ids, position_ids, cls_positions: packed rows of up to N
      examples (classifier_packing.model_inputs); X = B*N examples then.
    example_weights: float32 [X]: the loss is the weighted mean (0.0 for
      an empty slot); None: the plain mean.

  Returns:
    (mean loss, per_example_loss [X], logits [X, C], probabilities [X, C]),
    X = B unpacked; for regression the last is the predicted score [X].
  """
  # An explicit scope: a second micro-batch's model reuses bert/..., not
  # bert_1/...
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids,
      input_mask=input_mask, token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings, scope="bert",
      sequence_ids=sequence_ids, position_ids=position_ids,
      cls_positions=cls_positions)
  output_layer = model.get_pooled_output()
  hidden_size = output_layer.shape[-1]
  if cls_positions is not None:
    output_layer = tf.reshape(output_layer, [-1, hidden_size])
  # Top-level names, as upstream: classifier checkpoints stay interchangeable.
  output_weights = tf.get_variable(
      "output_weights", [num_labels, hidden_size],
      initializer=modeling.create_initializer(bert_config.initializer_range))
  output_bias = tf.get_variable("output_bias", [num_labels],
                                initializer=tf.zeros_initializer())
  with tf.variable_scope("loss"):
    if is_training:
      output_layer = tf.nn.dropout(output_layer, rate=0.1)
    logits = tf.matmul(output_layer, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    if num_labels == 1:
      probabilities = logits[:, 0]
      per_example_loss = tf.square(probabilities -
                                   tf.cast(labels, tf.float32))
    else:
      probabilities = tf.nn.softmax(logits, axis=-1)
      per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=labels, logits=logits)
    if example_weights is None:
      loss = tf.reduce_mean(per_example_loss)
    else:
      loss = tf.reduce_sum(example_weights * per_example_loss) / tf.maximum(
          tf.reduce_sum(example_weights), 1.0)
  return loss, per_example_loss, logits, probabilities


def build_classifier_variables(bert_config, num_labels):
  """Creates every trainable variable of the classifier (B=1, S=2)."""
  ids = tf.zeros([1, 2], tf.int32)
  create_model(bert_config, False, ids, ids, ids,
               tf.zeros([1], tf.float32 if num_labels == 1 else tf.int32),
               num_labels)


def classifier_metrics(per_example_loss, label_ids, logits, is_real_example):
  """Accuracy and mean loss over the real (not padding) examples; the mean
  loss alone for regression (logits [X, 1])."""
  weights = tf.cast(is_real_example, tf.float32)
  metrics = {"eval_loss": tf.metrics.mean(values=per_example_loss,
                                          weights=weights)}
  if logits.shape[-1] != 1:
    metrics["eval_accuracy"] = tf.metrics.accuracy(
        labels=label_ids,
        predictions=tf.argmax(logits, axis=-1, output_type=tf.int32),
        weights=weights)
  return metrics


def classifier_task(bert_config, num_labels):
  """Classification as a runner.Task: the head's mean cross-entropy over the
  real examples (of packed rows too: classification/packing.py); eval accuracy
  and loss over them; class probabilities. With num_labels 1, regression:
  the mean squared error, eval loss, the predicted scores ("predictions",
  unpacked rows only)."""

  def model(features, is_training):
    """create_model's outputs, the labels [X] and the example weights [X]."""
    if classifier_packing.is_packed(features):
      packed = classifier_packing.model_inputs(features)
      return (create_model(bert_config, is_training, features["input_ids"],
                           features["input_mask"], features["segment_ids"],
                           num_labels=num_labels, **packed),
              packed["labels"], packed["example_weights"])
    return (create_model(bert_config, is_training, features["input_ids"],
                         features["input_mask"], features["segment_ids"],
                         features["label_ids"], num_labels),
            features["label_ids"], features["is_real_example"])

  unpacked_loss_fns = runner.mean_loss_shares(
      lambda features: model(features, True)[0][0])

  def train_loss_fns(features, num_micro_batches):
    if not classifier_packing.is_packed(features):
      return unpacked_loss_fns(features, num_micro_batches)
    # Packed rows hold varying numbers of examples: each micro-batch divides
    # its weighted sum by the global batch's number of examples.
    count = tf.maximum(distribution.global_sum(tf.stop_gradient(
        tf.reduce_sum(features["label_weights"]))), 1.0)

    def loss_fn(index, micro_batch):
      with runner.reusing_variables(index):
        (_, per_example_loss, _, _), _, weights = model(micro_batch, True)
      return tf.reduce_sum(weights * per_example_loss) / count

    return [functools.partial(loss_fn, i, micro_batch) for i, micro_batch
            in enumerate(runner.split_micro_batches(features,
                                                    num_micro_batches))]

  def eval_outputs(features):
    (loss, per_example_loss, logits, _), labels, weights = model(features,
                                                                 False)
    return loss, classifier_metrics(per_example_loss, labels, logits,
                                    weights)

  def predictions(features):
    (_, _, _, probabilities), _, _ = model(features, False)
    if num_labels == 1:
      return {"predictions": probabilities}
    if not classifier_packing.is_packed(features):
      return {"probabilities": probabilities}
    return {"probabilities": tf.reshape(
        probabilities, [-1, features["cls_positions"].shape[-1], num_labels]),
            "example_index": features["example_index"]}

  return runner.Task(
      build_variables=lambda: build_classifier_variables(bert_config,
                                                         num_labels),
      train_loss_fns=train_loss_fns, eval_outputs=eval_outputs,
      predictions=predictions)


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, optimizer=None,
                     num_accumulation_steps=1):
  """Returns the Estimator model_fn for classification.

  Args:
    bert_config: BertConfig.
    num_labels: number of classes.
    init_checkpoint: checkpoint (prefix or directory) to start from, or None.
    learning_rate: peak learning rate.
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    optimizer: the rest of the update, an options.OptimizerOptions (None:
      upstream's).
    num_accumulation_steps: micro-batches per update.
  """
  return runner.upstream_model_fn(
      classifier_task(bert_config, num_labels), init_checkpoint,
      learning_rate, num_train_steps, num_warmup_steps, optimizer,
      num_accumulation_steps)


LABELS_FILE = "labels.txt"


def write_labels(output_dir, label_list):
  """labels.txt: the class names in output order, one a line.

  export_checkpoint.py reads it to name the exported classifier's classes.
  """
  with atomic_io.atomic_open(os.path.join(output_dir, LABELS_FILE)) as f:
    f.write("".join(label + "\n" for label in label_list))


def read_labels(checkpoint_dir):
  """The labels.txt a run_classifier output_dir holds, or None."""
  path = os.path.join(checkpoint_dir, LABELS_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return f.read().splitlines()


def write_inputs(is_chief, output_dir, examples, label_list, tokenizer,
                 max_seq_length, eval_batch_size, predict_batch_size,
                 max_sequences_per_pack=None):
  """Writes labels.txt (chief) and the records of each requested split.

  Args:
    is_chief: this process writes labels.txt.
    output_dir: where the files go.
    examples: {split: InputExamples}: "train", "dev" and "test" (written
      to train, eval and predict.tf_record), and further dev or test sets
      named "dev_X" or "test_X" (eval_dev_X, predict_test_X.tf_record).
    label_list: the task's labels.
    tokenizer: the FullTokenizer.
    max_seq_length: S.
    eval_batch_size, predict_batch_size: dev and test sets are padded to
      whole batches of these.
    max_sequences_per_pack: pack rows of up to this many examples, or None.

  Returns:
    ({split: [record file]}, {split: number of records}) of the splits in
    `examples`.
  """
  if is_chief:
    write_labels(output_dir, label_list)
  files, counts = {}, {}
  for split in sorted(examples, key=lambda s: s != "dev"):
    if split == "train":
      name, batch_size = "train", None
    elif split.startswith("dev"):
      name, batch_size = "eval", eval_batch_size
    else:
      name, batch_size = "predict", predict_batch_size
    if split not in ("train", "dev", "test"):
      name += "_" + split
    path, counts[split] = classifier_features.write_features(
        os.path.join(output_dir, "%s.tf_record" % name), examples[split],
        label_list, max_seq_length, tokenizer, batch_size,
        max_sequences_per_pack)
    files[split] = [path]
  return files, counts


def packed_feature_spec(max_seq_length, max_sequences_per_pack):
  """The records' parsing spec for packed rows; None (the classifier's own)
  without packing."""
  if not max_sequences_per_pack:
    return None
  return classifier_packing.feature_spec(max_seq_length,
                                         max_sequences_per_pack)


def input_fn_maker(max_seq_length, max_sequences_per_pack=None,
                   regression=False):
  """The runner's make_input_fn over classifier records (packed rows of up
  to max_sequences_per_pack examples when given; float scores as labels
  with `regression`)."""
  spec = packed_feature_spec(max_seq_length, max_sequences_per_pack)
  if regression:
    spec = input_pipeline.classifier_feature_spec(max_seq_length)
    spec["label_ids"] = tf.FixedLenFeature([], tf.float32)

  def make_input_fn(files, mode, global_batch_size, num_replicas):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    return input_pipeline.classifier_input_fn_builder(
        files, max_seq_length, is_training=is_training,
        drop_remainder=is_training, global_batch_size=global_batch_size,
        num_replicas=num_replicas, feature_spec=spec)
  return make_input_fn


def write_test_results(path, probabilities):
  """test_results.tsv: one line of tab-separated class probabilities each
  (a regression task's: its score)."""
  with atomic_io.atomic_open(path, "w") as writer:
    for row in probabilities:
      writer.write("\t".join(str(p) for p in np.atleast_1d(row)) + "\n")


def rank_passages(examples, scores):
  """Orders scored query/passage examples for ranked_results.tsv.

  Args:
    examples: RankingExamples in file order.
    scores: P(relevant) of each example.

  Returns:
    [(query_id, passage_id, score, rank)]: queries in order of first
    appearance; within one, passages by descending score (stable), rank 1..n.
  """
  by_query = collections.OrderedDict()
  for example, score in zip(examples, scores):
    by_query.setdefault(example.query_id, []).append(
        (example.passage_id, score))
  rows = []
  for query_id, passages in by_query.items():
    ordered = sorted(passages, key=lambda p: -p[1])
    rows.extend((query_id, passage_id, score, rank)
                for rank, (passage_id, score) in enumerate(ordered, 1))
  return rows


def write_ranked_results(path, examples, scores):
  """ranked_results.tsv: header, then query_id, passage_id, score, rank."""
  with atomic_io.atomic_open(path, "w") as writer:
    writer.write("query_id\tpassage_id\tscore\trank\n")
    for query_id, passage_id, score, rank in rank_passages(examples, scores):
      writer.write("%s\t%s\t%s\t%d\n" % (query_id, passage_id, score, rank))


def outputs_in_input_order(predictions, num_examples, packed):
  """The model's output for each real example, in input order.

  Args:
    predictions: Estimator.predict's dicts of one record file, in order
      (those past the examples are padding).
    num_examples: the number of real examples.
    packed: the records are packed rows (classification/packing.py).

  Returns:
    list of num_examples class probability vectors [C] (a regression
    task's: its float score).
  """
  if packed:
    return classifier_packing.predictions_in_input_order(predictions,
                                                         num_examples)
  key = "predictions" if "predictions" in predictions[0] else "probabilities"
  return [p[key] for p in predictions[:num_examples]]


def write_predictions(output_dir, examples, label_list, is_ranking, packed,
                      predictions):
  """test_results.tsv (and ranked_results.tsv) from the predict outputs.

  Args:
    output_dir: where the results go.
    examples: the test InputExamples.
    label_list: the task's labels.
    is_ranking: also write ranked_results.tsv (the rerank task).
    packed: the predictions are of packed rows (probabilities [N, C] and
      example_index [N] each).
    predictions: the prediction dicts, in file order; those past the
      examples are padding.
  """
  probabilities = outputs_in_input_order(predictions, len(examples), packed)
  write_test_results(os.path.join(output_dir, "test_results.tsv"),
                     probabilities)
  if is_ranking:
    write_ranked_results(
        os.path.join(output_dir, "ranked_results.tsv"), examples,
        [float(p[label_list.index("1")]) for p in probabilities])
