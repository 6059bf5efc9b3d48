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

This module is pure Python (no TensorFlow, no numpy), so data-creation
workers can use it.
"""

import collections

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
