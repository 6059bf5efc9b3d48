# coding=utf-8
"""Sequence packing: several short sequences in one row of max_seq_length.

At max_seq_length 512 half of Wikipedia's tokens in upstream's records are
padding (Krell et al. 2021, "Efficient Sequence Packing without Cross-
contamination", arXiv:2107.02027). Packing puts up to N sequences into each
row; the model then keeps them apart (block-diagonal attention, positions
restarting at 0, one next-sentence prediction per sequence), so a packed row
computes what its sequences compute separately.

The packer is the paper's shortest-pack-first histogram packing (SPFHP). It
works on the histogram of sequence lengths, not on the sequences: lengths are
taken longest first, and all sequences of one length go, as a group, into the
packs with the most space left (the shortest packs) that can take them; a
pack is closed when it is full or holds N sequences. The result is a list of
pack strategies (a tuple of lengths) with how many packs follow each one.
`assign_rows` then hands out concrete sequences to those packs.

This module does not import TensorFlow, so data-creation workers can use
it.
"""

import collections

from bertkit.data import pretraining_records

# A strategy: the lengths of the sequences of one pack, longest first.
PackPlan = collections.namedtuple("PackPlan", ["strategies", "counts"])


def length_histogram(lengths, max_seq_length):
  """Counts sequences per length.

  Args:
    lengths: iterable of ints in [1, max_seq_length].
    max_seq_length: S.

  Returns:
    list of S ints: histogram[l - 1] = number of sequences of length l.

  Raises:
    ValueError: a length outside [1, S].
  """
  histogram = [0] * max_seq_length
  for length in lengths:
    if not 1 <= length <= max_seq_length:
      raise ValueError("sequence length %d is outside [1, %d]" %
                       (length, max_seq_length))
    histogram[length - 1] += 1
  return histogram


def pack_histogram(histogram, max_seq_length, max_sequences_per_pack):
  """Shortest-pack-first histogram packing (SPFHP).

  Args:
    histogram: list of S counts, histogram[l - 1] sequences of length l.
    max_seq_length: S, the length of a packed row.
    max_sequences_per_pack: N >= 1, the most sequences in one row.

  Returns:
    PackPlan: `strategies`, a list of tuples of lengths (longest first, sum
    <= S, at most N of them), and `counts`, how many packs follow each.
    The same histogram always gives the same plan.

  Raises:
    ValueError: N < 1 or the histogram is not S long.
  """
  if max_sequences_per_pack < 1:
    raise ValueError("max_sequences_per_pack must be >= 1, got %d" %
                     max_sequences_per_pack)
  if len(histogram) != max_seq_length:
    raise ValueError("histogram has %d bins for max_seq_length %d" %
                     (len(histogram), max_seq_length))
  # Packs still open, by the space they have left: each value is a stack of
  # [count, lengths] groups (`count` identical packs).
  open_packs = collections.defaultdict(list)
  closed = []

  def add(lengths, count):
    space = max_seq_length - sum(lengths)
    if space == 0 or len(lengths) == max_sequences_per_pack:
      closed.append((lengths, count))
    else:
      open_packs[space].append([count, lengths])

  for length in range(max_seq_length, 0, -1):
    to_place = histogram[length - 1]
    space = max_seq_length
    while to_place > 0:
      while space >= length and not open_packs.get(space):
        space -= 1
      if space < length:
        add((length,), to_place)
        break
      group = open_packs[space][-1]
      taken = min(group[0], to_place)
      group[0] -= taken
      if group[0] == 0:
        open_packs[space].pop()
        if not open_packs[space]:
          del open_packs[space]
      to_place -= taken
      add(group[1] + (length,), taken)

  for space in sorted(open_packs, reverse=True):
    for count, lengths in open_packs[space]:
      closed.append((lengths, count))
  return PackPlan([lengths for lengths, _ in closed],
                  [count for _, count in closed])


def padding_fraction(histogram, max_seq_length, num_rows=None):
  """The share of padding tokens among all S-token rows.

  Args:
    histogram: list of S counts.
    max_seq_length: S.
    num_rows: rows the sequences occupy; defaults to one per sequence
      (unpacked).

  Returns:
    float in [0, 1).
  """
  real_tokens = sum((i + 1) * c for i, c in enumerate(histogram))
  if num_rows is None:
    num_rows = sum(histogram)
  if num_rows == 0:
    return 0.0
  return 1.0 - real_tokens / float(num_rows * max_seq_length)


def assign_rows(lengths, max_seq_length, max_sequences_per_pack):
  """Packs concrete sequences: which sequence goes into which row.

  Sequences of one length are handed out in their input order, packs in the
  order of the plan; the result depends on the lengths only.

  Args:
    lengths: list of ints, the length of sequence i.
    max_seq_length: S.
    max_sequences_per_pack: N >= 1.

  Returns:
    list of rows, each a list of sequence indices (longest first) whose
    lengths sum to at most S; every index appears in exactly one row.
  """
  histogram = length_histogram(lengths, max_seq_length)
  plan = pack_histogram(histogram, max_seq_length, max_sequences_per_pack)
  by_length = collections.defaultdict(collections.deque)
  for index, length in enumerate(lengths):
    by_length[length].append(index)
  rows = []
  for strategy, count in zip(plan.strategies, plan.counts):
    for _ in range(count):
      rows.append([by_length[length].popleft() for length in strategy])
  return rows


# One sequence of a packed row, as data creation makes it: `input_ids` and
# `segment_ids` of its tokens ([CLS] first), the masked positions (within the
# sequence) and their original ids, and its next-sentence label.
Sequence = collections.namedtuple(
    "Sequence", ["input_ids", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "next_sentence_label"])


def _packed_features(length):
  return tuple(f.name for f in pretraining_records.PACKED.features
               if f.length == length)


# The features of a packed row (pretraining_records.PACKED) by their width:
# S tokens, W masks, N sequence slots.
TOKEN_FEATURES = _packed_features(pretraining_records.SEQ)
MASK_FEATURES = _packed_features(pretraining_records.PRED)
SEQUENCE_FEATURES = _packed_features(pretraining_records.PACK)

# The per-token feature only packed rows have: readers tell them by it.
PACKED_ONLY_FEATURE = "sequence_ids"


def row_kind(row):
  """The RecordKind of a packed row (`pack_row`'s dict): PACKED, or
  PACKED_UNMASKED without masked-LM features."""
  if MASK_FEATURES[0] in row:
    return pretraining_records.PACKED
  return pretraining_records.PACKED_UNMASKED


def encode_row(row):
  """The serialized tf.train.Example of a packed row (`pack_row`'s dict)."""
  return pretraining_records.encode_example(row_kind(row), row)


def masked_positions_per_row(max_seq_length, max_predictions_per_seq,
                             masked_lm_prob, max_sequences_per_pack):
  """The masked-LM width of packed rows: at least P, and room for the most
  masks a row can hold.

  A sequence of length l gets min(P, max(1, round(l * p))) masks (upstream's
  rule), at most l * p + 1; the sequences of a row have at most S tokens
  together, so a row has at most floor(S * p) + N masks, and at most N * P.
  At least P so that the usual --max_predictions_per_seq (about S * p + a
  few, e.g. 80 at 512) is the width of packed rows too.

  Args:
    max_seq_length: S.
    max_predictions_per_seq: P, the masks of one sequence at most.
    masked_lm_prob: p.
    max_sequences_per_pack: N.

  Returns:
    int, the width of a packed row's masked_lm_* features.
  """
  return max(max_predictions_per_seq,
             min(max_sequences_per_pack * max_predictions_per_seq,
                 # (+1e-6: S * p computed as 14.999.. must floor to 15)
                 int(max_seq_length * masked_lm_prob + 1e-6) +
                 max_sequences_per_pack))


def pack_row(sequences, max_seq_length, max_sequences_per_pack,
             max_predictions_per_row):
  """The features of one packed row.

  Args:
    sequences: list of at most N Sequence whose lengths sum to at most S.
    max_seq_length: S.
    max_sequences_per_pack: N.
    max_predictions_per_row: W, the width of the masked-LM features
      (`masked_positions_per_row`); None for a row without masks
      (PACKED_UNMASKED: masks are drawn in training).

  Returns:
    dict of lists: per token [S] `input_ids`, `input_mask`, `segment_ids`,
    `sequence_ids` (1..n, 0 for padding), `position_ids` (restarting at 0
    for each sequence); per mask [W] `masked_lm_positions` (in the row),
    `masked_lm_ids`, `masked_lm_weights` (floats), unless W is None; per
    sequence slot [N] `cls_positions`, `next_sentence_labels`,
    `next_sentence_weights` (floats, 0.0 for an empty slot).

  Raises:
    ValueError: the sequences do not fit the row.
  """
  if len(sequences) > max_sequences_per_pack:
    raise ValueError("%d sequences in a row of at most %d" %
                     (len(sequences), max_sequences_per_pack))
  kind = (pretraining_records.PACKED_UNMASKED
          if max_predictions_per_row is None else pretraining_records.PACKED)
  row = {f.name: [] for f in kind.features}
  for number, sequence in enumerate(sequences, start=1):
    start = len(row["input_ids"])
    length = len(sequence.input_ids)
    row["input_ids"].extend(sequence.input_ids)
    row["input_mask"].extend([1] * length)
    row["segment_ids"].extend(sequence.segment_ids)
    row["sequence_ids"].extend([number] * length)
    row["position_ids"].extend(range(length))
    if max_predictions_per_row is not None:
      row["masked_lm_positions"].extend(
          start + position for position in sequence.masked_lm_positions)
      row["masked_lm_ids"].extend(sequence.masked_lm_ids)
      row["masked_lm_weights"].extend([1.0] * len(sequence.masked_lm_ids))
    row["cls_positions"].append(start)
    row["next_sentence_labels"].append(sequence.next_sentence_label)
    row["next_sentence_weights"].append(1.0)
  if len(row["input_ids"]) > max_seq_length:
    raise ValueError("sequences of %d tokens in a row of %d" %
                     (len(row["input_ids"]), max_seq_length))
  if (max_predictions_per_row is not None and
      len(row["masked_lm_ids"]) > max_predictions_per_row):
    raise ValueError("%d masked positions in a row of at most %d" %
                     (len(row["masked_lm_ids"]), max_predictions_per_row))
  for feature in kind.features:
    width = pretraining_records.feature_length(
        feature, max_seq_length, max_predictions_per_row,
        max_sequences_per_pack)
    padding = 0.0 if feature.dtype == "float32" else 0
    row[feature.name].extend([padding] * (width - len(row[feature.name])))
  return row


def sequence_from_features(features):
  """The Sequence of one unpacked record's features (lists, as
  pretraining_records.parse_example gives them): its real tokens, its masks
  (weight > 0; none for an UNMASKED record) and its next-sentence label."""
  length = sum(features["input_mask"])
  masks = [(position, token) for position, token, weight in zip(
      features.get("masked_lm_positions", ()),
      features.get("masked_lm_ids", ()),
      features.get("masked_lm_weights", ())) if weight > 0]
  return Sequence(list(features["input_ids"][:length]),
                  list(features["segment_ids"][:length]),
                  [position for position, _ in masks],
                  [token for _, token in masks],
                  features["next_sentence_labels"][0])


PackingReport = collections.namedtuple(
    "PackingReport", ["sequences", "rows", "padding_before", "padding_after"])


def pack_sequences(sequences, max_seq_length, max_sequences_per_pack,
                   max_predictions_per_row, rng):
  """Packs sequences into rows, in a shuffled row order.

  Args:
    sequences: list of Sequence.
    max_seq_length: S.
    max_sequences_per_pack: N.
    max_predictions_per_row: W (`masked_positions_per_row`), or None for
      rows without masks.
    rng: random.Random that shuffles the rows (SPFHP emits them grouped by
      pack strategy: all long sequences first).

  Returns:
    (rows, PackingReport): the rows' features (`pack_row`) and the padding
    fraction of the sequences unpacked and packed.
  """
  lengths = [len(sequence.input_ids) for sequence in sequences]
  rows = assign_rows(lengths, max_seq_length, max_sequences_per_pack)
  rng.shuffle(rows)
  histogram = length_histogram(lengths, max_seq_length)
  report = PackingReport(
      len(sequences), len(rows), padding_fraction(histogram, max_seq_length),
      padding_fraction(histogram, max_seq_length, len(rows)))
  return [pack_row([sequences[i] for i in row], max_seq_length,
                   max_sequences_per_pack, max_predictions_per_row)
          for row in rows], report


def describe(report):
  """One log line of a PackingReport."""
  return ("packed %d sequences into %d rows (%.3gx fewer): padding %.1f %% "
          "of the tokens unpacked, %.1f %% packed" % (
              report.sequences, report.rows,
              report.sequences / float(max(report.rows, 1)),
              100 * report.padding_before, 100 * report.padding_after))


def pack_records(records, max_seq_length, max_sequences_per_pack,
                 max_predictions_per_row, rng):
  """Packs serialized unpacked records into serialized packed rows.

  Args:
    records: iterable of unpacked records (bytes), in the order to pack.
    max_seq_length: S.
    max_sequences_per_pack: N.
    max_predictions_per_row: W (`masked_positions_per_row`); None for
      UNMASKED records (the rows are PACKED_UNMASKED).
    rng: random.Random that shuffles the rows.

  Returns:
    (list of packed record bytes, PackingReport).
  """
  sequences = [sequence_from_features(pretraining_records.parse_example(r))
               for r in records]
  rows, report = pack_sequences(sequences, max_seq_length,
                               max_sequences_per_pack,
                               max_predictions_per_row, rng)
  return [encode_row(row) for row in rows], report
