"""Packed fine-tuning rows for run_classifier.py --pack_sequences.

Classification sets are mostly padding at the usual --max_seq_length (CoLA
at 128: 89 %). Packing puts up to N examples' tokens into one row of S
tokens (packing.py's shortest-pack-first histogram packing over the
examples' lengths); the model keeps them apart as in pretraining
(modeling.BertModel with `sequence_ids`, `position_ids` and
`cls_positions`: block-diagonal attention, positions restarting at 0, the
pooler at each example's own [CLS]), so each example's logits are those it
gets alone in a row.

A packed row has, per token [S]: input_ids, input_mask, segment_ids,
sequence_ids (1..n, 0 for padding), position_ids; per example slot [N]:
cls_positions, label_ids, label_weights (1.0 for an example, 0.0 for an
empty slot) and example_index (the example's place in the input, -1 for an
empty slot), which puts predictions back into input order.

The loss is the mean over the real examples of the global batch (rows hold
different numbers of examples: each replica divides its sum by the global
count, all-reduced); eval metrics weigh each slot by its label_weights.
"""

import collections
import os
import random

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.data import packing
from bertkit.data import pretraining_records

TOKEN_FEATURES = ("input_ids", "input_mask", "segment_ids", "sequence_ids",
                  "position_ids")
SLOT_FEATURES = ("cls_positions", "label_ids", "label_weights",
                 "example_index")
# Slot features of an empty slot.
EMPTY_SLOT = {"cls_positions": 0, "label_ids": 0, "label_weights": 0.0,
              "example_index": -1}
# The training rows' order: SPFHP emits them grouped by pack strategy.
SHUFFLE_SEED = 12345


def is_packed(features):
  """Whether a classifier feature dict holds packed rows."""
  return "sequence_ids" in features


def feature_spec(max_seq_length, max_sequences_per_pack):
  """The tf.io parsing spec of packed classifier rows."""
  spec = {name: tf.FixedLenFeature([max_seq_length], tf.int64)
          for name in TOKEN_FEATURES}
  spec.update({name: tf.FixedLenFeature(
      [max_sequences_per_pack],
      tf.float32 if name == "label_weights" else tf.int64)
               for name in SLOT_FEATURES})
  return spec


def pack_row(features, indices, max_seq_length, max_sequences_per_pack):
  """The features of one packed row.

  Args:
    features: the examples' classifier_features.InputFeatures, in input order.
    indices: the examples of this row (at most N, at most S tokens
      together); empty for a padding row.
    max_seq_length: S.
    max_sequences_per_pack: N.

  Returns:
    dict feature name -> list of numbers (TOKEN_FEATURES [S],
    SLOT_FEATURES [N]).
  """
  row = {name: [] for name in TOKEN_FEATURES + SLOT_FEATURES}
  for number, index in enumerate(indices, start=1):
    feature = features[index]
    length = sum(feature.input_mask)
    row["cls_positions"].append(len(row["input_ids"]))
    row["input_ids"].extend(feature.input_ids[:length])
    row["input_mask"].extend([1] * length)
    row["segment_ids"].extend(feature.segment_ids[:length])
    row["sequence_ids"].extend([number] * length)
    row["position_ids"].extend(range(length))
    row["label_ids"].append(feature.label_id)
    row["label_weights"].append(1.0)
    row["example_index"].append(index)
  for name in TOKEN_FEATURES:
    row[name].extend([0] * (max_seq_length - len(row[name])))
  for name in SLOT_FEATURES:
    row[name].extend([EMPTY_SLOT[name]] *
                     (max_sequences_per_pack - len(row[name])))
  return row


def pack_features(features, max_seq_length, max_sequences_per_pack,
                  batch_size=None, shuffle=False):
  """Packs the examples' features into rows.

  Args:
    features: list of InputFeatures of real examples, in input order.
    max_seq_length: S.
    max_sequences_per_pack: N >= 1.
    batch_size: if given, empty rows follow up to a whole batch (eval and
      predict: every batch has the full size).
    shuffle: shuffle the rows (training), with a fixed seed.

  Returns:
    (rows, packing.PackingReport).
  """
  lengths = [sum(f.input_mask) for f in features]
  assignment = packing.assign_rows(lengths, max_seq_length,
                                   max_sequences_per_pack)
  if shuffle:
    random.Random(SHUFFLE_SEED).shuffle(assignment)
  if batch_size:
    assignment += [[]] * (-len(assignment) % batch_size)
  histogram = packing.length_histogram(lengths, max_seq_length)
  report = packing.PackingReport(
      len(features), len(assignment),
      packing.padding_fraction(histogram, max_seq_length),
      packing.padding_fraction(histogram, max_seq_length, len(assignment)))
  return [pack_row(features, indices, max_seq_length, max_sequences_per_pack)
          for indices in assignment], report


def serialize_row(row):
  """One packed row as a serialized tf.train.Example."""
  return tf.train.Example(features=tf.train.Features(feature=(
      collections.OrderedDict(
          (name, pretraining_records.float_feature(row[name])
           if name == "label_weights"
           else pretraining_records.int_feature(row[name]))
          for name in TOKEN_FEATURES + SLOT_FEATURES)))).SerializeToString()


def write_rows(path, rows, report):
  """Writes packed rows (`pack_features`) to a TFRecord file, atomically;
  logs the padding before and after (`report`).

  Returns:
    The number of rows written.
  """
  atomic_io.write_tfrecords(path, (serialize_row(row) for row in rows))
  logging.info("%s: %s", os.path.basename(path), packing.describe(report))
  return len(rows)


def model_inputs(features):
  """What create_model takes for packed rows besides the token features.

  Returns:
    dict: sequence_ids, position_ids [B, S], cls_positions [B, N]; the
    labels [B*N] and example_weights [B*N] of the slots.
  """
  return {
      "sequence_ids": features["sequence_ids"],
      "position_ids": features["position_ids"],
      "cls_positions": features["cls_positions"],
      "labels": tf.reshape(features["label_ids"], [-1]),
      "example_weights": tf.reshape(features["label_weights"], [-1]),
  }


def predictions_in_input_order(predictions, num_examples,
                               key="probabilities"):
  """The probabilities (or other output `key`) of each example in input
  order.

  Args:
    predictions: Estimator.predict's dicts, one per packed row:
      `probabilities` (and `logits`) [N, C] and `example_index` [N].
    num_examples: the number of real examples.
    key: the output taken.

  Returns:
    list of num_examples probability vectors.

  Raises:
    ValueError: an example is missing or predicted twice.
  """
  ordered = [None] * num_examples
  for prediction in predictions:
    for index, probabilities in zip(prediction["example_index"],
                                    prediction[key]):
      if index < 0:
        continue
      if ordered[index] is not None:
        raise ValueError("example %d predicted twice" % index)
      ordered[index] = probabilities
  missing = [i for i, p in enumerate(ordered) if p is None]
  if missing:
    raise ValueError("%d examples not predicted, the first %d" %
                     (len(missing), missing[0]))
  return ordered
