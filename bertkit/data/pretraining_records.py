# coding=utf-8
"""Pretraining records as bytes, without TensorFlow: the schema, Examples.

create_pretraining_data's worker processes write millions of records and
must not import TensorFlow (~430 MB and ~5 s per process). This module
holds the one description of the pretraining records (their kinds and
features) and builds the serialized `tf.train.Example` of a pretraining
instance directly (byte-identical to `tf.train.Example.SerializeToString()`
of upstream's features, which the tests check); tfrecord_files.py frames
them as TFRecord files.

Wire format reminders (protobuf): a length-delimited field is
tag, varint(length), bytes; Example = {1: Features}; Features = {1: map
entries}; entry = {1: key, 2: Feature}; Feature = {2: FloatList, 3:
Int64List}; lists hold one packed field 1.

Module state: the encoded headers of each feature, a cache of this process
that `encode_example` writes on a feature's first record and reads from then
on (a worker process writes millions of records).
"""

import collections
import struct

# ------------------------------------------------------- record schema ----
# The one description of the pretraining records: what the writer
# (`ExampleEncoder`), the reader (input_pipeline) and synthetic_data use.
# A feature's length is a flag's value (SEQ: --max_seq_length, PRED:
# --max_predictions_per_seq), the sequence slots of a packed row (PACK:
# create_pretraining_data --max_sequences_per_pack) or a number.

SEQ = "max_seq_length"
PRED = "max_predictions_per_seq"
PACK = "max_sequences_per_pack"

RecordFeature = collections.namedtuple("RecordFeature",
                                       ["name", "dtype", "length"])

RecordKind = collections.namedtuple("RecordKind", [
    "name", "features", "serialized_order", "description"])
RecordKind.__doc__ = """One kind of pretraining record.

Attributes:
  name: what the logs and the `--masking` help call it.
  features: `RecordFeature`s in upstream's order (the order it builds and
    logs them in).
  serialized_order: the same names in the order protobuf's serializer emits
    them for `features` inserted in that order (its hash-table order),
    which `ExampleEncoder` follows to stay byte-identical to
    tf.train.Example.SerializeToString().
  description: one line for logs.
"""

MASKED = RecordKind(
    name="masked",
    features=(
        RecordFeature("input_ids", "int64", SEQ),
        RecordFeature("input_mask", "int64", SEQ),
        RecordFeature("segment_ids", "int64", SEQ),
        RecordFeature("masked_lm_positions", "int64", PRED),
        RecordFeature("masked_lm_ids", "int64", PRED),
        RecordFeature("masked_lm_weights", "float32", PRED),
        RecordFeature("next_sentence_labels", "int64", 1),
    ),
    serialized_order=("masked_lm_ids", "input_ids", "masked_lm_positions",
                      "next_sentence_labels", "input_mask",
                      "masked_lm_weights", "segment_ids"),
    description="masked (upstream's: create_pretraining_data.py "
                "--masking=static)")

UNMASKED = RecordKind(
    name="unmasked",
    features=MASKED.features[:3] + MASKED.features[-1:],
    serialized_order=("next_sentence_labels", "input_mask", "input_ids",
                      "segment_ids"),
    description="unmasked (create_pretraining_data.py --masking=dynamic)")

# Several sequences per row of S tokens (packing.py): per token, which
# sequence of the row it belongs to (1, 2, ...; 0 for padding) and its
# position within that sequence; per mask as MASKED, positions within the
# row (PRED is the row's mask width, packing.masked_positions_per_row); per
# sequence slot, the index of its [CLS], its next-sentence label and weight
# (0.0: an empty slot).
PACKED = RecordKind(
    name="packed",
    features=MASKED.features[:3] + (
        RecordFeature("sequence_ids", "int64", SEQ),
        RecordFeature("position_ids", "int64", SEQ),
    ) + MASKED.features[3:6] + (
        RecordFeature("cls_positions", "int64", PACK),
        RecordFeature("next_sentence_labels", "int64", PACK),
        RecordFeature("next_sentence_weights", "float32", PACK),
    ),
    serialized_order=("input_mask", "masked_lm_ids", "input_ids",
                      "sequence_ids", "next_sentence_labels",
                      "next_sentence_weights", "masked_lm_positions",
                      "position_ids", "cls_positions", "masked_lm_weights",
                      "segment_ids"),
    description="packed (create_pretraining_data.py --pack_sequences: "
                "several sequences per row)")

# PACKED rows without masks (create_pretraining_data.py --pack_sequences
# --masking=dynamic): run_pretraining draws each sequence's masks.
PACKED_UNMASKED = RecordKind(
    name="packed unmasked",
    features=tuple(f for f in PACKED.features if f.length != PRED),
    serialized_order=("input_ids", "input_mask", "next_sentence_labels",
                      "next_sentence_weights", "sequence_ids",
                      "position_ids", "cls_positions", "segment_ids"),
    description="packed unmasked (create_pretraining_data.py "
                "--pack_sequences --masking=dynamic: several sequences per "
                "row)")

# Single-segment sequences without a next-sentence label
# (create_pretraining_data.py --next_sentence_prediction=false: RoBERTa's
# FULL-SENTENCES). The missing next_sentence_labels feature is what marks
# them: run_pretraining trains the masked LM alone on them.
MASKED_NO_NSP = RecordKind(
    name="masked without next sentence",
    features=MASKED.features[:6],
    serialized_order=("input_ids", "masked_lm_positions", "masked_lm_ids",
                      "input_mask", "masked_lm_weights", "segment_ids"),
    description="masked, one segment, no next-sentence label "
                "(create_pretraining_data.py --next_sentence_prediction="
                "false)")

UNMASKED_NO_NSP = RecordKind(
    name="unmasked without next sentence",
    features=MASKED.features[:3],
    serialized_order=("input_mask", "input_ids", "segment_ids"),
    description="unmasked, one segment, no next-sentence label "
                "(create_pretraining_data.py --next_sentence_prediction="
                "false --masking=dynamic)")

RECORD_KINDS = (MASKED, UNMASKED, PACKED, PACKED_UNMASKED, MASKED_NO_NSP,
                UNMASKED_NO_NSP)


def feature_length(feature, max_seq_length, max_predictions_per_seq,
                   max_sequences_per_pack=None):
  """The number of values of `feature` (a `RecordFeature`) in a record."""
  return {SEQ: max_seq_length, PRED: max_predictions_per_seq,
          PACK: max_sequences_per_pack}.get(feature.length, feature.length)


def holds_masks(kind):
  """Whether records of `kind` carry their own masked-LM predictions."""
  return any(f.name == "masked_lm_ids" for f in kind.features)


def has_next_sentence(kind):
  """Whether records of `kind` carry next-sentence labels (the model then
  trains the next-sentence head too)."""
  return any(f.name == "next_sentence_labels" for f in kind.features)


def record_kind_of(feature_names):
  """The `RecordKind` whose features are exactly `feature_names`, or None."""
  names = set(feature_names)
  for kind in RECORD_KINDS:
    if names == {f.name for f in kind.features}:
      return kind
  return None


def int_feature(values):
  """A tf.train.Feature of int64 values (imports TensorFlow)."""
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values):
  """A tf.train.Feature of float32 values (imports TensorFlow)."""
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def tf_example(kind, values):
  """The tf.train.Example of one record of `kind` (imports TensorFlow).

  Args:
    kind: a `RecordKind`.
    values: feature name -> sequence of numbers, for each of kind.features.

  Returns:
    tf.train.Example, features inserted in kind.features' order.
  """
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  features = collections.OrderedDict(
      (f.name, float_feature(values[f.name]) if f.dtype == "float32"
       else int_feature(values[f.name])) for f in kind.features)
  return tf.train.Example(features=tf.train.Features(feature=features))


_FLOAT_ONE = struct.pack("<f", 1.0)
_FLOAT_ZERO = struct.pack("<f", 0.0)


def varint(value):
  """Protobuf base-128 varint of a non-negative int."""
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _field(tag, payload):
  return tag + varint(len(payload)) + payload


class _HeaderCache(dict):
  """Payload length -> the bytes of a map entry up to its packed payload."""

  def __init__(self, key, list_tag):
    super().__init__()
    self._key_field = _field(b"\x0a", key.encode("utf-8"))
    self._list_tag = list_tag

  def __missing__(self, length):
    packed_header = b"\x0a" + varint(length)
    list_len = len(packed_header) + length
    list_header = self._list_tag + varint(list_len)
    feature_len = len(list_header) + list_len
    value_header = b"\x12" + varint(feature_len)
    entry_len = len(self._key_field) + len(value_header) + feature_len
    header = self[length] = (b"\x0a" + varint(entry_len) + self._key_field +
                             value_header + list_header + packed_header)
    return header


class _EntryCache(dict):
  """Key -> a whole map entry, built once by `make_payload(key)`."""

  def __init__(self, headers, make_payload):
    super().__init__()
    self._headers = headers
    self._make_payload = make_payload

  def __missing__(self, key):
    payload = self._make_payload(key)
    entry = self[key] = self._headers[len(payload)] + payload
    return entry


class ExampleEncoder(object):
  """Serializes pretraining instances as `MASKED` or `UNMASKED` records.

  Token ids are handled as their varint encodings, `token_codes[id]`: an
  instance's input_ids field is then a single join of its tokens. The
  entries that only depend on a length are built once and reused.

  Args:
    vocab_size: one more than the largest token id.
    max_seq_length: S, padded length of input_ids/input_mask/segment_ids.
    max_predictions_per_seq: P, padded length of the masked LM features.
    next_sentence_prediction: False: the records are `MASKED_NO_NSP` or
      `UNMASKED_NO_NSP` instead (no next_sentence_labels; callers pass
      single segments, num_a = len(input_codes) - 2).
  """

  def __init__(self, vocab_size, max_seq_length, max_predictions_per_seq,
               next_sentence_prediction=True):
    self._masked_kind, self._unmasked_kind = (
        (MASKED, UNMASKED) if next_sentence_prediction
        else (MASKED_NO_NSP, UNMASKED_NO_NSP))
    self.token_codes = [varint(i) for i in range(vocab_size)]
    self._seq_length = max_seq_length
    self._max_predictions = max_predictions_per_seq
    self._position_codes = [varint(i) for i in range(max_seq_length)]
    headers = {
        f.name: _HeaderCache(f.name, b"\x12" if f.dtype == "float32"
                             else b"\x1a")
        for f in MASKED.features}
    self._input_ids_headers = headers["input_ids"]
    self._masked_ids_headers = headers["masked_lm_ids"]
    self._positions_headers = headers["masked_lm_positions"]
    self._next_sentence_entries = _EntryCache(
        headers["next_sentence_labels"], lambda is_random: bytes([is_random]))
    self._input_mask_entries = _EntryCache(
        headers["input_mask"],
        lambda n: b"\x01" * n + b"\x00" * (max_seq_length - n))
    self._weights_entries = _EntryCache(
        headers["masked_lm_weights"],
        lambda n: (_FLOAT_ONE * n +
                   _FLOAT_ZERO * (max_predictions_per_seq - n)))
    self._segment_ids_header = headers["segment_ids"][max_seq_length]

  def _sequence_entries(self, input_codes, num_a, is_random_next):
    """The map entries every kind has, by feature name."""
    num_tokens = len(input_codes)
    input_ids = b"".join(input_codes) + b"\x00" * (self._seq_length -
                                                   num_tokens)
    return {
        "input_ids": self._input_ids_headers[len(input_ids)] + input_ids,
        "input_mask": self._input_mask_entries[num_tokens],
        "segment_ids": b"".join((
            self._segment_ids_header, b"\x00" * (num_a + 2),
            b"\x01" * (num_tokens - num_a - 2),
            b"\x00" * (self._seq_length - num_tokens))),
        "next_sentence_labels":
            self._next_sentence_entries[bool(is_random_next)],
    }

  @staticmethod
  def _example(kind, entries):
    features = b"".join([entries[name] for name in kind.serialized_order])
    return b"\x0a" + varint(len(features)) + features

  def encode(self, input_codes, num_a, masked_positions, masked_codes,
             is_random_next):
    """The serialized tf.train.Example of one `MASKED` (`MASKED_NO_NSP`)
    instance.

    Args:
      input_codes: the instance's (masked) tokens as `token_codes`,
        [CLS] A [SEP] B [SEP]; at most S of them.
      num_a: number of tokens of segment A.
      masked_positions: ascending masked positions (at most P).
      masked_codes: the original tokens at those positions, as
        `token_codes`.
      is_random_next: whether B is a random segment (unused without
        next-sentence labels).

    Returns:
      The bytes of the Example (int64 features padded with 0 to S or P,
      masked_lm_weights 1.0 per prediction then 0.0), as
      tf.train.Example.SerializeToString() gives them.
    """
    num_masked = len(masked_positions)
    pred_padding = b"\x00" * (self._max_predictions - num_masked)
    masked_ids = b"".join(masked_codes) + pred_padding
    position_codes = self._position_codes
    positions = b"".join([position_codes[p] for p in masked_positions]
                        ) + pred_padding
    entries = self._sequence_entries(input_codes, num_a, is_random_next)
    entries["masked_lm_ids"] = (self._masked_ids_headers[len(masked_ids)] +
                                masked_ids)
    entries["masked_lm_positions"] = (
        self._positions_headers[len(positions)] + positions)
    entries["masked_lm_weights"] = self._weights_entries[num_masked]
    return self._example(self._masked_kind, entries)

  def encode_unmasked(self, input_codes, num_a, is_random_next):
    """The serialized tf.train.Example of one `UNMASKED` (`UNMASKED_NO_NSP`)
    instance.

    Args:
      input_codes: the instance's tokens as `token_codes`,
        [CLS] A [SEP] B [SEP]; at most S of them.
      num_a: number of tokens of segment A.
      is_random_next: whether B is a random segment (unused without
        next-sentence labels).

    Returns:
      The bytes of the Example, as tf.train.Example.SerializeToString()
      gives them for `UNMASKED.features` (or `UNMASKED_NO_NSP.features`)
      inserted in order.
    """
    return self._example(
        self._unmasked_kind,
        self._sequence_entries(input_codes, num_a, is_random_next))


def _read_varint(data, pos):
  """Decodes the varint at data[pos:]; returns (value, position after)."""
  value = shift = 0
  while True:
    byte = data[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    if byte < 0x80:
      return value, pos
    shift += 7


def _length_delimited(data):
  """Yields (field number, payload) of the length-delimited fields."""
  pos = 0
  while pos < len(data):
    key, pos = _read_varint(data, pos)
    length, pos = _read_varint(data, pos)
    yield key >> 3, data[pos:pos + length]
    pos += length


def parse_example(record):
  """The features of a serialized pretraining Example (for logging them).

  Args:
    record: bytes written by `ExampleEncoder.encode` (or TensorFlow).

  Returns:
    A dict feature name -> list of values (int, or float for
    masked_lm_weights).
  """
  (features,) = [v for k, v in _length_delimited(record) if k == 1]
  parsed = {}
  for _, entry in _length_delimited(features):
    fields = dict(_length_delimited(entry))
    name = fields[1].decode("utf-8")
    ((kind, values),) = _length_delimited(fields[2])
    (packed,) = [v for _, v in _length_delimited(values)] or [b""]
    if kind == 2:  # FloatList.
      parsed[name] = list(struct.unpack("<%df" % (len(packed) // 4), packed))
    else:
      numbers = []
      pos = 0
      while pos < len(packed):
        value, pos = _read_varint(packed, pos)
        numbers.append(value)
      parsed[name] = numbers
  return parsed


_FEATURE_HEADERS = {}


def encode_example(kind, values):
  """The serialized tf.train.Example of one record of `kind`, for the kinds
  without a specialised encoder (packed rows).

  Args:
    kind: a `RecordKind`.
    values: feature name -> sequence of numbers, for each of kind.features.

  Returns:
    bytes, as tf.train.Example.SerializeToString() gives them for
    `kind.features` inserted in order (`tf_example`).
  """
  dtypes = {f.name: f.dtype for f in kind.features}
  entries = []
  for name in kind.serialized_order:
    numbers = values[name]
    if dtypes[name] == "float32":
      tag, payload = b"\x12", struct.pack("<%df" % len(numbers), *numbers)
    else:
      tag, payload = b"\x1a", b"".join([varint(v) for v in numbers])
    headers = _FEATURE_HEADERS.get((name, tag))
    if headers is None:
      headers = _FEATURE_HEADERS[(name, tag)] = _HeaderCache(name, tag)
    entries.append(headers[len(payload)] + payload)
  body = b"".join(entries)
  return b"\x0a" + varint(len(body)) + body
