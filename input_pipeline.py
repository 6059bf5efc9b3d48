"""Reading pretraining TFRecords for an Estimator, under any strategy.

Batch semantics: `--train_batch_size` is the GLOBAL batch. Under a
tf.distribute strategy Estimator calls the input_fn once per worker and hands
successive batches of the dataset to successive replicas, so the dataset is
batched with the per-replica batch. One step therefore consumes the same
examples as one batch of the global size on a single device.
"""

import os
import re
import struct

import tensorflow.compat.v1 as tf

import packing
from errors import UserError



def int_feature(values):
  """A tf.train.Feature of int64 values, as every record of ours stores."""
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def pretraining_feature_spec(max_seq_length, max_predictions_per_seq,
                             max_sequences_per_pack=None):
  """The tf.io parsing spec of create_pretraining_data's records (packed
  rows of up to `max_sequences_per_pack` sequences if given)."""
  if max_sequences_per_pack is not None:
    return {name: tf.FixedLenFeature([length], tf.as_dtype(
        packing.feature_dtype(name)))
            for name, length in packing.feature_lengths(
                max_seq_length, max_predictions_per_seq,
                max_sequences_per_pack).items()}
  spec = {
      "input_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([max_seq_length], tf.int64),
      "masked_lm_positions":
          tf.FixedLenFeature([max_predictions_per_seq], tf.int64),
      "masked_lm_ids": tf.FixedLenFeature([max_predictions_per_seq], tf.int64),
      "masked_lm_weights":
          tf.FixedLenFeature([max_predictions_per_seq], tf.float32),
      "next_sentence_labels": tf.FixedLenFeature([1], tf.int64),
  }
  return spec


def decode_record(record, feature_spec):
  """Parses one serialized example; int64 features become int32."""
  example = tf.parse_single_example(record, feature_spec)
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in example.items()}


def first_example(path):
  """The first tf.train.Example of a TFRecord file.

  Raises:
    UserError: the file is empty or not a TFRecord file.
  """
  try:
    for raw in tf.io.tf_record_iterator(path):
      return tf.train.Example.FromString(raw)
  except (tf.errors.DataLossError, tf.errors.OpError) as e:
    if "corrupted record at 0" in e.message:
      # The first header fails its checksum: text, or some other format.
      raise UserError("%s is not a TFRecord file (its first bytes are no "
                      "record header); training reads the records that "
                      "create_pretraining_data.py writes, not text" % path)
    raise UserError("%s is not a readable TFRecord file (%s)" %
                    (path, e.message.splitlines()[0]))
  raise UserError("%s holds no records" % path)


def check_tfrecord_framing(path):
  """Walks a TFRecord file's record headers to catch truncated files early.

  Each record is [length u64][crc u32][data][crc u32]; only headers are read
  and the data is skipped, so this costs one seek per record.

  Raises:
    UserError: the last record runs past the end of the file.
  """
  size = tf.io.gfile.stat(path).length
  offset, index = 0, 0
  with tf.io.gfile.GFile(path, "rb") as f:
    while offset < size:
      header = f.read(12)
      if len(header) < 12:
        break
      length = struct.unpack("<Q", header[:8])[0]
      offset += 12 + length + 4
      if offset > size:
        break
      f.seek(offset)
      index += 1
  if offset != size:
    if index == 0:
      first_example(path)  # Says so if the file is no TFRecord file at all.
    raise UserError(
        "%s is truncated or corrupt: record %d ends at byte %d but the file "
        "has %d bytes; recreate it (an interrupted copy or write?)" %
        (path, index, offset, size))
  return index


def record_frames(path):
  """(start, end) byte offsets of each record of a TFRecord file.

  Raises:
    UserError: the framing does not end exactly at the end of the file.
  """
  size = tf.io.gfile.stat(path).length
  frames, offset = [], 0
  with tf.io.gfile.GFile(path, "rb") as f:
    while offset + 12 <= size:
      f.seek(offset)
      length = struct.unpack("<Q", f.read(8))[0]
      frames.append((offset, offset + 12 + length + 4))
      offset = frames[-1][1]
  if offset != size:
    raise UserError(
        "%s is truncated or corrupt: record %d ends at byte %d but the file "
        "has %d bytes; recreate it" % (path, len(frames), offset, size))
  return frames


def first_corrupt_record(path):
  """Index of the first record of `path` failing its CRC check, or None."""
  index = 0
  try:
    for _ in tf.io.tf_record_iterator(path):
      index += 1
  except tf.errors.DataLossError:
    return index
  return None


def _corrupt_record_offset(reason):
  match = re.search(r"corrupted record at (\d+)", reason or "")
  return int(match.group(1)) if match else None


def locate_corrupt_record(input_files, reason=None):
  """Finds the file and record that made reading fail with DataLossError.

  TensorFlow's message gives a byte offset but no file; files that have a
  record at that offset are checked first.

  Args:
    input_files: the TFRecord files being read.
    reason: the error's message, "corrupted record at N".

  Returns:
    (path, record index, byte offset of the record), or None.
  """
  hint = _corrupt_record_offset(reason)
  likely, others = [], []
  for path in input_files:
    try:
      starts = [start for start, _ in record_frames(path)]
    except UserError:
      likely.append(path)
      continue
    if hint is not None and (hint in starts or hint - 12 in starts):
      likely.append(path)
    else:
      others.append(path)
  for path in likely + others:
    index = first_corrupt_record(path)
    if index is not None:
      return path, index, record_frames(path)[index][0]
  return None


def corrupt_input_message(input_files, reason):
  """One line naming the corrupt record behind a DataLossError."""
  found = locate_corrupt_record(input_files, reason)
  if found is None:
    return ("the input data is corrupt (%s); recreate the affected file(s)"
            % reason)
  return ("the input data is corrupt: %s, record %d (byte %d) fails its CRC "
          "check (%s); recreate that file, or pass --skip_corrupt_records to "
          "train without such records" % (found + (reason,)))


def _copy_records(path, frames, skip, destination):
  with tf.io.gfile.GFile(path, "rb") as source, \
      tf.io.gfile.GFile(destination, "wb") as out:
    for index, (start, end) in enumerate(frames):
      if index not in skip:
        source.seek(start)
        out.write(source.read(end - start))


def without_corrupt_records(input_files, scratch_dir):
  """The input files with every record that fails its CRC check left out.

  Files without such records are returned as they are; for the others a copy
  without them is written to `scratch_dir`. Every file is read once.

  Args:
    input_files: TFRecord paths.
    scratch_dir: an existing directory for the cleaned copies.

  Returns:
    (files to read, list of skipped (path, record index, byte offset)).
  """
  files, skipped = [], []
  for number, path in enumerate(input_files):
    first = first_corrupt_record(path)
    if first is None:
      files.append(path)
      continue
    frames = record_frames(path)
    bad = [first]
    clean = os.path.join(scratch_dir, "%d-%s" % (number,
                                                 os.path.basename(path)))
    while True:
      _copy_records(path, frames, set(bad), clean)
      found = first_corrupt_record(clean)
      if found is None:
        break
      kept = [i for i in range(len(frames)) if i not in set(bad)]
      bad.append(kept[found])
    files.append(clean)
    skipped.extend((path, i, frames[i][0]) for i in sorted(bad))
  return files, skipped


def check_pretraining_records(input_files, max_seq_length,
                              max_predictions_per_seq, vocab_size=None):
  """Checks each file's first record against the flags, before training.

  Args:
    input_files: TFRecord paths.
    max_seq_length: expected length of input_ids / input_mask / segment_ids.
    max_predictions_per_seq: expected length of the masked_lm features.
    vocab_size: if given, token ids must be below it.

  Returns:
    The number of sequence slots of the packed rows (create_pretraining_data
    --pack_sequences), or None for upstream's records.

  Raises:
    UserError: naming the file, the feature, its length and the flag; or
      one packed and one unpacked file.
  """
  per_pack = {}
  for path in input_files:
    check_tfrecord_framing(path)
    features = first_example(path).features.feature
    n = packed_row_slots(features)
    per_pack.setdefault(n, path)
    if len(per_pack) > 1:
      raise UserError(
          "--input_file mixes record kinds: %s" % "; ".join(
              "%s holds %s" % (
                  p, "unpacked records" if slots is None else
                  "packed rows of up to %d sequences" % slots)
              for slots, p in per_pack.items()))
    _check_record_features(path, features, max_seq_length,
                           max_predictions_per_seq, n, vocab_size)
  (slots,) = per_pack
  return slots


def packed_row_slots(features):
  """N, the sequence slots of a packed row, from a record's features (a
  tf.train.Features map); None for an unpacked record."""
  if packing.PACKED_ONLY_FEATURE not in features:
    return None
  slots = features.get("cls_positions")
  return len(slots.int64_list.value) if slots is not None else 0


def _check_record_features(path, features, max_seq_length,
                           max_predictions_per_seq, max_sequences_per_pack,
                           vocab_size):
  """Checks one record's features and lengths against the flags."""
  flag_lengths = {"--max_seq_length": max_seq_length,
                  "--max_predictions_per_seq": max_predictions_per_seq}
  if max_sequences_per_pack is None:
    expected = {"input_ids": "--max_seq_length",
                "input_mask": "--max_seq_length",
                "segment_ids": "--max_seq_length",
                "masked_lm_positions": "--max_predictions_per_seq",
                "masked_lm_ids": "--max_predictions_per_seq",
                "masked_lm_weights": "--max_predictions_per_seq",
                "next_sentence_labels": None}
    flag_lengths[None] = 1
  else:
    expected = dict(
        [(name, "--max_seq_length") for name in packing.TOKEN_FEATURES] +
        [(name, "--max_predictions_per_seq")
         for name in packing.MASK_FEATURES] +
        [(name, None) for name in packing.SEQUENCE_FEATURES])
    flag_lengths[None] = max_sequences_per_pack
  for name, flag in expected.items():
    if name not in features:
      raise UserError("%s: feature %r is missing; is this a "
                      "create_pretraining_data.py output?" % (path, name))
    kind = features[name].WhichOneof("kind")
    values = getattr(features[name], kind).value
    length = flag_lengths[flag]
    if len(values) != length:
      if flag is None:
        raise UserError("%s: feature %s has length %d, expected %d; "
                        "recreate the data" % (path, name, len(values),
                                               length))
      raise UserError(
          "%s: feature %s has length %d but %s=%d; recreate the data or "
          "pass %s=%d" % (path, name, len(values), flag, length, flag,
                          len(values)))
  if vocab_size is not None:
    top = max(features["input_ids"].int64_list.value)
    if top >= vocab_size:
      raise UserError(
          "%s: token id %d is outside the model's vocab_size %d; the data "
          "was made with a larger vocab than bert_config.json declares" %
          (path, top, vocab_size))


def _with_fixed_tuning(dataset):
  """`dataset` without tf.data's autotuning model thread.

  With autotuning on (TensorFlow's default), every iterator runs a model
  thread that re-tunes the pipeline at doubling intervals of up to 60 s.
  Destroying the iterator, which the Estimator does inside Session.close()
  at the end of training, evaluation and prediction, waits for that thread;
  in TF 2.15 its wake-up can be lost, and close() then blocks for the rest of
  the thread's interval: 10-25 s after a run of a minute or more, in about
  one run of three (docs/benchmarks.md). The parallelism left at AUTOTUNE
  resolves to fixed defaults (interleave: cycle_length; prefetch: the
  buffer-growing prefetch autotuner, which needs no thread).
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  return dataset.with_options(options)


def pretraining_input_fn_builder(input_files, max_seq_length,
                                 max_predictions_per_seq, is_training,
                                 global_batch_size, num_replicas,
                                 deterministic=False, num_cpu_threads=4,
                                 max_sequences_per_pack=None):
  """Returns an Estimator input_fn over pretraining TFRecords.

  Args:
    input_files: list of TFRecord paths.
    max_seq_length: S.
    max_predictions_per_seq: P, masked positions per sequence.
    is_training: shuffle and repeat forever if True; one ordered pass if not.
    global_batch_size: examples per step over all replicas.
    num_replicas: replicas in sync; the dataset yields per-replica batches.
    deterministic: keep file and record order fixed (for reproducible runs
      and tests) instead of upstream's sloppy parallel interleave.
    num_cpu_threads: parallel readers / parsers.
    max_sequences_per_pack: N, for packed rows (check_pretraining_records
      tells); None for upstream's records.

  Returns:
    input_fn(params, input_context=None) -> tf.data.Dataset of feature dicts
    with int32 [B, S] / [B, P] (and, packed, [B, N]) tensors, B = per-replica
    batch of rows.
  """
  per_replica_batch = global_batch_size // num_replicas
  feature_spec = pretraining_feature_spec(max_seq_length,
                                          max_predictions_per_seq,
                                          max_sequences_per_pack)

  def input_fn(params=None, input_context=None):
    del params
    files = list(input_files)
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(files))
    if input_context is not None and input_context.num_input_pipelines > 1:
      # One pipeline per worker: each reads its own files, or its own records
      # of a single file.
      if len(files) >= input_context.num_input_pipelines:
        dataset = dataset.shard(input_context.num_input_pipelines,
                                input_context.input_pipeline_id)
        shard_records = False
      else:
        shard_records = True
    else:
      shard_records = False

    if is_training and not deterministic:
      dataset = dataset.repeat().shuffle(buffer_size=len(files))
      cycle_length = min(num_cpu_threads, len(files))
      dataset = dataset.interleave(
          tf.data.TFRecordDataset, cycle_length=cycle_length,
          num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
      dataset = dataset.shuffle(buffer_size=100)
    else:
      dataset = tf.data.TFRecordDataset(dataset)
      if is_training:
        dataset = dataset.repeat()
    if shard_records:
      dataset = dataset.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
    dataset = dataset.map(lambda r: decode_record(r, feature_spec),
                          num_parallel_calls=num_cpu_threads)
    # Whole batches only: every replica must see the same batch shape.
    dataset = dataset.batch(per_replica_batch, drop_remainder=True)
    return _with_fixed_tuning(dataset.prefetch(tf.data.AUTOTUNE))

  return input_fn


def classifier_feature_spec(seq_length):
  """The tf.io parsing spec of run_classifier's train/eval/predict records."""
  return {
      "input_ids": tf.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([seq_length], tf.int64),
      "label_ids": tf.FixedLenFeature([], tf.int64),
      "is_real_example": tf.FixedLenFeature([], tf.int64),
  }


def classifier_input_fn_builder(input_file, seq_length, is_training,
                                drop_remainder, global_batch_size,
                                num_replicas=1, shuffle_seed=None,
                                record_shard=None, feature_spec=None):
  """Returns an Estimator input_fn over one file of classifier records.

  Args:
    input_file: TFRecord path written by run_classifier.py.
    seq_length: S.
    is_training: repeat forever and shuffle (buffer of 100, as upstream) if
      True; one ordered pass if False, so predictions line up with the file.
    drop_remainder: drop a last partial batch. Eval and predict files are
      padded to whole batches, so nothing real is ever dropped.
    global_batch_size: examples per step over all replicas.
    num_replicas: replicas in sync; the dataset yields per-replica batches.
    shuffle_seed: op seed of the training shuffle; None leaves it to the
      graph-level seed (--tf_random_seed), deterministic when that is set.
    record_shard: (num_shards, index): read only every num_shards-th record
      from index on (horovod ranks); None reads all, or what input_context
      gives this worker under a strategy.
    feature_spec: the records' parsing spec if they are not the classifier's
      (run_squad.py's, squad_task.feature_spec).

  Returns:
    input_fn(params, input_context=None) -> tf.data.Dataset of feature dicts:
    int32 input_ids / input_mask / segment_ids [B, S], label_ids and
    is_real_example [B] (or what feature_spec names), B = per-replica batch.
  """
  per_replica_batch = global_batch_size // num_replicas
  if feature_spec is None:
    feature_spec = classifier_feature_spec(seq_length)

  def input_fn(params=None, input_context=None):
    del params
    dataset = tf.data.TFRecordDataset(input_file)
    if record_shard is not None:
      dataset = dataset.shard(*record_shard)
    elif input_context is not None and input_context.num_input_pipelines > 1:
      # One file, several workers: each reads its own share of the records.
      dataset = dataset.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
    if is_training:
      dataset = dataset.repeat().shuffle(buffer_size=100, seed=shuffle_seed)
    dataset = dataset.map(lambda r: decode_record(r, feature_spec))
    dataset = dataset.batch(per_replica_batch, drop_remainder=drop_remainder)
    return _with_fixed_tuning(dataset.prefetch(tf.data.AUTOTUNE))

  return input_fn
