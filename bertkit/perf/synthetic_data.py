"""Synthetic pretraining records of the right shape, for tests and benchmarks.

The records follow create_pretraining_data's format exactly (the features
of pretraining_records' MASKED or UNMASKED kind) with random token ids:
useful to measure speed or check mechanics without a corpus, useless for
learning anything.
"""

import os

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.data import pretraining_records


def synthetic_example(rng, max_seq_length, max_predictions_per_seq,
                      vocab_size, kind=pretraining_records.MASKED):
  """One random tf.train.Example of a pretraining record kind.

  Args:
    rng: numpy RandomState.
    max_seq_length: S.
    max_predictions_per_seq: P.
    vocab_size: ids are drawn from [5, vocab_size).
    kind: pretraining_records.MASKED or UNMASKED.

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
  values = {
      "input_ids": ids, "input_mask": mask, "segment_ids": segments,
      "masked_lm_positions": positions, "masked_lm_ids": labels,
      "masked_lm_weights": weights,
      "next_sentence_labels": [int(rng.randint(0, 2))],
  }
  return pretraining_records.tf_example(kind, values)


def write_synthetic_pretraining_records(path, num_records, max_seq_length,
                                        max_predictions_per_seq, vocab_size,
                                        seed=0,
                                        kind=pretraining_records.MASKED):
  """Writes `num_records` random examples of `kind` to the TFRecord `path`."""
  rng = np.random.RandomState(seed)
  with atomic_io.atomic_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for _ in range(num_records):
        writer.write(synthetic_example(
            rng, max_seq_length, max_predictions_per_seq,
            vocab_size, kind).SerializeToString())
  return path


def synthetic_input(data_dir, seq_length, max_predictions, vocab_size,
                    num_records, num_files):
  """Writes (once) synthetic record files of this shape; returns their glob.

  Several files, because each horovod rank reads whole files of its own.

  Args:
    data_dir: where each shape gets a directory of its own.
    seq_length: S of the records.
    max_predictions: P of the records.
    vocab_size: ids are drawn from [5, vocab_size).
    num_records: records of all the files together.
    num_files: how many files to split them over.

  Returns:
    The glob of the files, for --input_file.
  """
  directory = os.path.join(data_dir, "synthetic_s%d_p%d_v%d" %
                           (seq_length, max_predictions, vocab_size))
  paths = [os.path.join(directory, "part-%05d-of-%05d.tfrecord" %
                        (i, num_files)) for i in range(num_files)]
  os.makedirs(directory, exist_ok=True)
  for seed, path in enumerate(paths):
    if not os.path.exists(path):
      logging.info("Writing %d synthetic records to %s",
                   num_records // num_files, path)
      write_synthetic_pretraining_records(
          path, max(1, num_records // num_files), seq_length,
          max_predictions, vocab_size, seed=seed)
  return os.path.join(directory, "part-*-of-%05d.tfrecord" % num_files)
