"""Synthetic pretraining records of the right shape, for tests and benchmarks.

The records follow create_pretraining_data's format exactly (the features
run_pretraining.py reads) with random token ids: useful to measure speed or
check mechanics without a corpus, useless for learning anything.
"""

import numpy as np
import tensorflow.compat.v1 as tf

import atomic_io
from input_pipeline import int_feature


def _float_feature(values):
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def synthetic_example(rng, max_seq_length, max_predictions_per_seq,
                      vocab_size):
  """One random tf.train.Example in pretraining format.

  Args:
    rng: numpy RandomState.
    max_seq_length: S.
    max_predictions_per_seq: P.
    vocab_size: ids are drawn from [5, vocab_size).

  Returns:
    tf.train.Example.
  """
  length = int(rng.randint(max(5, max_seq_length // 2), max_seq_length + 1))
  ids = np.zeros(max_seq_length, np.int64)
  ids[:length] = rng.randint(5, vocab_size, size=length)
  mask = np.zeros(max_seq_length, np.int64)
  mask[:length] = 1
  segments = np.zeros(max_seq_length, np.int64)
  segments[length // 2:length] = 1
  num_masked = min(max_predictions_per_seq, max(1, length - 2))
  positions = np.zeros(max_predictions_per_seq, np.int64)
  positions[:num_masked] = np.sort(
      rng.choice(np.arange(1, length), num_masked, replace=False))
  labels = np.zeros(max_predictions_per_seq, np.int64)
  labels[:num_masked] = ids[positions[:num_masked]]
  weights = np.zeros(max_predictions_per_seq, np.float32)
  weights[:num_masked] = 1.0
  features = {
      "input_ids": int_feature(ids),
      "input_mask": int_feature(mask),
      "segment_ids": int_feature(segments),
      "masked_lm_positions": int_feature(positions),
      "masked_lm_ids": int_feature(labels),
      "masked_lm_weights": _float_feature(weights),
      "next_sentence_labels": int_feature([int(rng.randint(0, 2))]),
  }
  return tf.train.Example(features=tf.train.Features(feature=features))


def write_synthetic_pretraining_records(path, num_records, max_seq_length,
                                        max_predictions_per_seq, vocab_size,
                                        seed=0):
  """Writes `num_records` random examples to the TFRecord file `path`."""
  rng = np.random.RandomState(seed)
  with atomic_io.atomic_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for _ in range(num_records):
        writer.write(synthetic_example(
            rng, max_seq_length, max_predictions_per_seq,
            vocab_size).SerializeToString())
  return path
