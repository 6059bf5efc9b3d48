"""Checks of TFRecord files before and while training reads them.

What the programs check before a run starts, and what the runner does when
reading fails:

  - the framing of every record (`check_tfrecord_framing`: a truncated file,
    or one that is no TFRecord file, is named before training starts;
    `record_frames`: each record's byte range);
  - pretraining records against the flags (`check_pretraining_records`: the
    record kind, each feature's length against --max_seq_length and
    --max_predictions_per_seq, token ids against the vocabulary;
    `predictions_per_record`);
  - corrupt records (`corrupt_input_message`: the file and record behind a
    DataLossError; `without_corrupt_records`: --skip_corrupt_records' copies
    of the files without them).

The datasets and input functions that read the records are input_pipeline's.
"""

import os
import re
import struct

import tensorflow.compat.v1 as tf

from bertkit.common.errors import UserError
from bertkit.data import pretraining_records


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


def _kind_of_file(path, features):
  """The RecordKind of a file whose first record has `features`.

  Raises:
    UserError: the features are those of no kind.
  """
  kind = pretraining_records.record_kind_of(features.keys())
  if kind is None:
    raise UserError(
        "%s holds records with the features %s, which are neither %s; is "
        "this a create_pretraining_data.py output?" % (
            path, ", ".join(sorted(features.keys())), " nor ".join(
                "%s (%s)" % (k.name, ", ".join(f.name for f in k.features))
                for k in pretraining_records.RECORD_KINDS)))
  return kind


def predictions_per_record(path):
  """P, the masked-LM predictions the first record of `path` holds, or None
  for records without masks."""
  features = first_example(path).features.feature
  if "masked_lm_positions" not in features:
    return None
  return len(features["masked_lm_positions"].int64_list.value)


def check_pretraining_records(input_files, max_seq_length,
                              max_predictions_per_seq, vocab_size=None,
                              flag_name="--input_file"):
  """Checks each file's first record against the flags, before training.

  Args:
    input_files: TFRecord paths.
    max_seq_length: expected length of input_ids / input_mask / segment_ids.
    max_predictions_per_seq: expected length of the masked_lm features.
    vocab_size: if given, token ids must be below it.
    flag_name: the flag that named the files, for the messages.

  Returns:
    (kind, N): the `pretraining_records.RecordKind` of the records, and the
    sequence slots of packed rows (create_pretraining_data
    --pack_sequences), None for unpacked records.

  Raises:
    UserError: naming the file, the feature, its length and the flag; or
      a file of each kind when the files hold different kinds (packed rows
      of different N count as different kinds).
  """
  flags_of = {pretraining_records.SEQ: "--max_seq_length",
              pretraining_records.PRED: "--max_predictions_per_seq"}
  kinds = {}
  first_records = []
  for path in input_files:
    check_tfrecord_framing(path)
    features = first_example(path).features.feature
    kind = _kind_of_file(path, features)
    slots = sequence_slots(features)
    if slots is None:
      name = "%s records" % kind.name
    else:
      name = "%s rows of up to %d sequences" % (kind.name, slots)
    kinds.setdefault(name, (kind, slots, path))
    first_records.append((path, features))
  # Every file's kind before any length: a mix is named as such whatever
  # the flags say (one kind's lengths never fit the other's).
  if len(kinds) > 1:
    raise UserError(
        "%s mixes record kinds: %s; train on one kind at a time" % (
            flag_name, "; ".join("%s holds %s" % (p, n)
                                 for n, (_, _, p) in kinds.items())))
  (kind, slots, _), = kinds.values()
  for path, features in first_records:
    for feature in kind.features:
      length = pretraining_records.feature_length(
          feature, max_seq_length, max_predictions_per_seq, slots)
      value_kind = features[feature.name].WhichOneof("kind")
      values = getattr(features[feature.name], value_kind).value
      if len(values) != length:
        flag = flags_of.get(feature.length)
        raise UserError(
            "%s: feature %s has length %d but %s=%d; recreate the data or "
            "pass %s=%d" % (path, feature.name, len(values), flag, length,
                            flag, len(values)))
    _check_token_ids(path, features, vocab_size)
  return kind, slots


def sequence_slots(features):
  """N, the sequence slots of a packed row, from a record's features (a
  tf.train.Features map: the length of cls_positions); None for an unpacked
  record."""
  if "cls_positions" not in features:
    return None
  return len(features["cls_positions"].int64_list.value)


def _check_token_ids(path, features, vocab_size):
  """Raises UserError if a record's input_ids reach vocab_size (if given)."""
  if vocab_size is None:
    return
  top = max(features["input_ids"].int64_list.value)
  if top >= vocab_size:
    raise UserError(
        "%s: token id %d is outside the model's vocab_size %d; the data was "
        "made with a larger vocab than bert_config.json declares" %
        (path, top, vocab_size))
