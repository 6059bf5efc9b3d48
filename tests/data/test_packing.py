"""The packer (packing.py): SPFHP on the paper's Wikipedia histogram, and its
invariants when it packs concrete sequences."""

import os
import random

import pytest

from bertkit.data import packing
from bertkit.data import pretraining_records
from conftest import REPO_ROOT

HISTOGRAM_FILE = os.path.join(REPO_ROOT, "tests", "fixtures", "packing",
                              "wikipedia_512_histogram.txt")


def wikipedia_histogram():
  with open(HISTOGRAM_FILE) as f:
    return [int(line) for line in f if not line.startswith("#")]


def efficiency_percent(histogram, plan, max_seq_length):
  rows = sum(plan.counts)
  return 100.0 * (1.0 - packing.padding_fraction(histogram, max_seq_length,
                                                 rows))


def test_histogram_is_the_papers():
  histogram = wikipedia_histogram()
  assert len(histogram) == 512
  assert sum(histogram) == 16279552
  # 50.03 % padding unpacked, 23.4 % of sequences full length (the paper).
  assert packing.padding_fraction(histogram, 512) == pytest.approx(
      0.5003, abs=5e-5)
  assert histogram[-1] / sum(histogram) == pytest.approx(0.234, abs=5e-4)


@pytest.mark.parametrize("max_per_pack, paper_efficiency, paper_speedup", [
    (12, 99.604, 1.9934),
    (3, 89.44, None),
])
def test_spfhp_reproduces_the_papers_efficiency(max_per_pack, paper_efficiency,
                                                paper_speedup):
  histogram = wikipedia_histogram()
  plan = packing.pack_histogram(histogram, 512, max_per_pack)
  assert efficiency_percent(histogram, plan, 512) == pytest.approx(
      paper_efficiency, abs=0.1)
  if paper_speedup is not None:
    assert sum(histogram) / sum(plan.counts) == pytest.approx(
        paper_speedup, abs=1e-3)


def test_plan_places_every_sequence_once_within_the_limits():
  histogram = wikipedia_histogram()
  for max_per_pack in (1, 2, 3, 12):
    plan = packing.pack_histogram(histogram, 512, max_per_pack)
    placed = [0] * 512
    for strategy, count in zip(plan.strategies, plan.counts):
      assert count > 0
      assert 1 <= len(strategy) <= max_per_pack
      assert sum(strategy) <= 512
      assert list(strategy) == sorted(strategy, reverse=True)
      for length in strategy:
        placed[length - 1] += count
    assert placed == histogram


def test_one_per_pack_is_unpacked():
  histogram = wikipedia_histogram()
  plan = packing.pack_histogram(histogram, 512, 1)
  assert sum(plan.counts) == sum(histogram)


def sample_lengths(count, seed):
  """Lengths drawn from the Wikipedia histogram (real length statistics)."""
  histogram = wikipedia_histogram()
  return random.Random(seed).choices(range(1, 513), weights=histogram,
                                     k=count)


@pytest.mark.parametrize("max_per_pack", [1, 3, 12])
def test_assign_rows_invariants(max_per_pack):
  lengths = sample_lengths(5000, seed=max_per_pack)
  rows = packing.assign_rows(lengths, 512, max_per_pack)
  placed = sorted(i for row in rows for i in row)
  assert placed == list(range(len(lengths)))
  for row in rows:
    assert 1 <= len(row) <= max_per_pack
    assert sum(lengths[i] for i in row) <= 512
  # Deterministic: the same lengths give the same rows.
  assert packing.assign_rows(list(lengths), 512, max_per_pack) == rows
  if max_per_pack > 1:
    assert len(rows) < 0.6 * len(lengths)


def test_assign_rows_small_case_by_hand():
  # Longest first; each length goes to the pack with the most space left.
  lengths = [5, 3, 8, 2, 2, 10]
  rows = packing.assign_rows(lengths, 10, 3)
  assert sorted(sorted(lengths[i] for i in row) for row in rows) == [
      [2, 3, 5], [2, 8], [10]]


def test_rejects_bad_arguments():
  with pytest.raises(ValueError, match="max_sequences_per_pack"):
    packing.pack_histogram([1, 0], 2, 0)
  with pytest.raises(ValueError, match="outside"):
    packing.length_histogram([3], 2)


def test_pack_row_features():
  first = packing.Sequence([1, 7, 2, 8, 2], [0, 0, 0, 1, 1], [1, 3], [9, 10],
                           1)
  second = packing.Sequence([1, 5, 2], [0, 0, 1], [1], [11], 0)
  row = packing.pack_row([first, second], 10, 3, 5)
  assert row == {
      "input_ids": [1, 7, 2, 8, 2, 1, 5, 2, 0, 0],
      "input_mask": [1, 1, 1, 1, 1, 1, 1, 1, 0, 0],
      "segment_ids": [0, 0, 0, 1, 1, 0, 0, 1, 0, 0],
      "sequence_ids": [1, 1, 1, 1, 1, 2, 2, 2, 0, 0],
      "position_ids": [0, 1, 2, 3, 4, 0, 1, 2, 0, 0],
      "masked_lm_positions": [1, 3, 6, 0, 0],
      "masked_lm_ids": [9, 10, 11, 0, 0],
      "masked_lm_weights": [1.0, 1.0, 1.0, 0.0, 0.0],
      "cls_positions": [0, 5, 0],
      "next_sentence_labels": [1, 0, 0],
      "next_sentence_weights": [1.0, 1.0, 0.0]}
  with pytest.raises(ValueError, match="tokens"):
    packing.pack_row([first, second], 7, 3, 5)
  with pytest.raises(ValueError, match="masked positions"):
    packing.pack_row([first, second], 10, 3, 2)
  with pytest.raises(ValueError, match="sequences in a row"):
    packing.pack_row([first, second], 10, 1, 5)


def test_masked_positions_per_row_bounds_upstreams_mask_count():
  # Upstream's count per sequence: min(P, max(1, round(l * p))). The width
  # must hold any pack of up to N sequences of at most S tokens together.
  for seq_length, per_seq, prob, per_pack in [(128, 20, 0.15, 3),
                                              (512, 80, 0.15, 3),
                                              (64, 10, 0.15, 12),
                                              (32, 4, 0.15, 3)]:
    width = packing.masked_positions_per_row(seq_length, per_seq, prob,
                                             per_pack)
    def masks(length):
      return min(per_seq, max(1, int(round(length * prob))))
    # The most masks n sequences of total length <= S can have, by dynamic
    # programming over (sequences used, tokens used).
    best = [[-1] * (seq_length + 1) for _ in range(per_pack + 1)]
    best[0][0] = 0
    for n in range(per_pack):
      for used in range(seq_length + 1):
        if best[n][used] < 0:
          continue
        for length in range(1, seq_length - used + 1):
          value = best[n][used] + masks(length)
          if value > best[n + 1][used + length]:
            best[n + 1][used + length] = value
    most = max(max(r) for r in best)
    assert most <= width
    assert width - most <= max(per_pack, per_seq - most)


def test_steady_state_counts_sequences_and_real_tokens():
  # pylint: disable-next=g-import-not-at-top
  from bertkit.engine.report import throughput
  steps = [{"examples": 8, "seconds": 9.0, "saved": False, "sequences": 1,
            "real_tokens": 1},
           {"examples": 8, "seconds": 2.0, "saved": False, "sequences": 20,
            "real_tokens": 400},
           {"examples": 8, "seconds": 5.0, "saved": True, "sequences": 20,
            "real_tokens": 400},
           {"examples": 8, "seconds": 2.0, "saved": False, "sequences": 16,
            "real_tokens": 300}]
  result = throughput.steady_state(steps, warmup_steps=1)
  assert result["examples_per_sec"] == 4.0
  assert result["sequences_per_sec"] == 9.0
  assert result["real_tokens_per_sec"] == 175.0
  assert "9.00 sequences/sec, 175.0 real" in throughput.describe_counts(result)
  # Without counts (a model_fn that registers none): examples only.
  plain = throughput.steady_state(
      [{k: v for k, v in s.items() if k in ("examples", "seconds", "saved")}
       for s in steps], warmup_steps=1)
  assert "real_tokens_per_sec" not in plain
  assert throughput.describe_counts(plain) == ""


def test_encoded_row_is_a_tf_example_of_the_row():
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  first = packing.Sequence([1, 700, 2, 8, 2], [0, 0, 0, 1, 1], [1, 3],
                           [300, 10], 1)
  second = packing.Sequence([1, 5, 2], [0, 0, 1], [1], [11], 0)
  row = packing.pack_row([first, second], 10, 3, 5)
  example = tf.train.Example.FromString(packing.encode_row(row))
  parsed = {name: list(getattr(f, f.WhichOneof("kind")).value)
            for name, f in example.features.feature.items()}
  assert parsed == row
  assert example.features.feature["masked_lm_weights"].HasField("float_list")
  assert example.features.feature["cls_positions"].HasField("int64_list")
  # Byte for byte TensorFlow's serialization; the TF-free parser reads it.
  assert packing.encode_row(row) == pretraining_records.tf_example(
      pretraining_records.PACKED, row).SerializeToString()
  assert pretraining_records.parse_example(packing.encode_row(row)) == row
