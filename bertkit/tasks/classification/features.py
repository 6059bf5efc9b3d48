# coding=utf-8
"""The classifier's features: examples tokenized, padded and written as
records.

An InputExample (classification/data.py) becomes InputFeatures, `[CLS] A [SEP]
B [SEP]` (data/pair_encoding.py) padded to max_seq_length, and the features are written as
upstream's TFRecords (or as packed rows of several examples,
classification/packing.py). The names are upstream's run_classifier ones.
"""

import collections

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.data import pair_encoding
from bertkit.data import pretraining_records
from bertkit.tasks.classification import data as classifier_data
from bertkit.tasks.classification import packing as classifier_packing


class PaddingInputExample(object):
  """Fills the last eval/predict batch; its features have is_real_example 0.

  Every batch then has the full size (one batch shape for every step), and
  no real example is dropped or counted twice. A class rather than None, so
  that padding can never pass for a real example by accident.
  """


class InputFeatures(object):
  """The model inputs of one example."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id,
               is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


def convert_single_example(ex_index, example, label_list, max_seq_length,
                           tokenizer):
  """Converts one InputExample (or PaddingInputExample) into InputFeatures.

  Tokens are `[CLS] A [SEP]` (segment 0), then `B [SEP]` (segment 1) for a
  pair, padded with 0 to max_seq_length. The label id is the label's
  position in label_list, or for a regression task
  (classifier_data.is_regression) the score as a float.
  """
  regression = classifier_data.is_regression(label_list)
  if isinstance(example, PaddingInputExample):
    zeros = [0] * max_seq_length
    return InputFeatures(input_ids=zeros, input_mask=list(zeros),
                         segment_ids=list(zeros),
                         label_id=0.0 if regression else 0,
                         is_real_example=False)
  tokens, segment_ids = pair_encoding.encode(
      tokenizer.tokenize(example.text_a),
      (tokenizer.tokenize(example.text_b) if example.text_b else None) or None,
      max_seq_length)
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  padding = [0] * (max_seq_length - len(input_ids))
  if example.label is None:  # unlabelled: a placeholder, weighted 0
    label_id = 0.0 if regression else 0
  elif regression:
    label_id = float(example.label)
  else:
    label_id = label_list.index(example.label)
  if ex_index < 2:
    logging.info("*** Example %s: %s -> label %s (id %s)", example.guid,
                 " ".join(tokens), example.label, label_id)
  return InputFeatures(input_ids=input_ids + padding,
                       input_mask=[1] * len(input_ids) + padding,
                       segment_ids=segment_ids + padding, label_id=label_id)


def serialize_features(feature, extra=None):
  """One `InputFeatures` as the serialized tf.train.Example of the records,
  with the {name: tf.train.Feature} of `extra` (a student's teacher
  outputs) after upstream's."""
  int_feature = pretraining_records.int_feature
  features = collections.OrderedDict([
      ("input_ids", int_feature(feature.input_ids)),
      ("input_mask", int_feature(feature.input_mask)),
      ("segment_ids", int_feature(feature.segment_ids)),
      ("label_ids", pretraining_records.float_feature([feature.label_id])
       if isinstance(feature.label_id, float)
       else int_feature([feature.label_id])),
      ("is_real_example", int_feature([int(feature.is_real_example)])),
  ])
  features.update(extra or {})
  return tf.train.Example(features=tf.train.Features(
      feature=features)).SerializeToString()


def file_based_convert_examples_to_features(examples, label_list,
                                            max_seq_length, tokenizer,
                                            output_file, extra=None):
  """Writes the features of `examples` to a TFRecord file, atomically;
  `extra`: each example's further features (serialize_features)."""
  atomic_io.write_tfrecords(output_file, (
      serialize_features(convert_single_example(
          ex_index, example, label_list, max_seq_length, tokenizer),
                         extra[ex_index] if extra else None)
      for ex_index, example in enumerate(examples)))


def pad_to_batches(examples, batch_size):
  """`examples` followed by PaddingInputExamples up to a whole batch."""
  num_padding = -len(examples) % batch_size
  return list(examples) + [PaddingInputExample()] * num_padding


def pack_examples(examples, label_list, max_seq_length, tokenizer,
                  max_sequences_per_pack, batch_size=None):
  """The packed rows of `examples`, of up to max_sequences_per_pack each
  (classification/packing.py), followed by empty rows up to a whole batch
  if batch_size is given, else shuffled (training).

  Returns:
    (rows, packing.PackingReport), for classifier_packing.write_rows.
  """
  features = [convert_single_example(i, example, label_list,
                                     max_seq_length, tokenizer)
              for i, example in enumerate(examples)]
  return classifier_packing.pack_features(
      features, max_seq_length, max_sequences_per_pack, batch_size,
      shuffle=not batch_size)


def write_features(path, examples, label_list, max_seq_length, tokenizer,
                   batch_size=None, max_sequences_per_pack=None, packed=None,
                   extra=None):
  """Writes the records of `examples` to `path`, padded to whole batches if
  batch_size is given; `extra`: each example's further features
  (serialize_features; unpacked training records).

  With max_sequences_per_pack, the records are packed rows of up to that
  many examples (pack_examples); `packed`, when given, is what
  pack_examples returned for them (the training rows, packed to count them
  before anything was written).

  Returns:
    (path, the number of records).
  """
  if max_sequences_per_pack:
    if packed is None:
      packed = pack_examples(examples, label_list, max_seq_length, tokenizer,
                             max_sequences_per_pack, batch_size)
    return path, classifier_packing.write_rows(path, *packed)
  if batch_size:
    examples = pad_to_batches(examples, batch_size)
  file_based_convert_examples_to_features(examples, label_list,
                                          max_seq_length, tokenizer, path,
                                          extra)
  return path, len(examples)
