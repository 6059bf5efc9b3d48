"""benchmarks/packing_speed.py and the peer's dynamic padding
(benchmarks/pytorch_peer.py --input_file): which tokens each step holds, the
figures computed from the wall times, and a tiny end-to-end run. No timing
is asserted: the figures belong to docs/benchmarks.md."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO_ROOT, run_ok, tiny_bert_config

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
import packing_speed  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytorch_peer  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_steps_read_the_records_in_order_across_epochs():
  counts = [(10, 1), (20, 2), (30, 1)]
  assert packing_speed.steps_total(counts, 2, 0) == (0, 0)
  assert packing_speed.steps_total(counts, 2, 1) == (30, 3)
  # The second step spans the epoch boundary: records 2 and 0.
  assert packing_speed.steps_total(counts, 2, 2) == (70, 5)


def test_rates_are_the_extra_steps_over_the_extra_wall_time():
  counts = [(100, 3), (50, 1)]
  # Steps 1 and 2 of 2 records: 300 tokens, 8 sequences in 4 s.
  assert packing_speed.rate(counts, 2, 1, 3, {1: 10.0, 3: 14.0}) == (75.0,
                                                                     2.0)
  assert packing_speed.rate(counts, 2, 1, 3, {1: 10.0, 3: 9.0}) == (None,
                                                                    None)


def test_summary_takes_medians_and_per_round_ratios():
  def round_of(unpacked, packed, peer):
    return {"unpacked": {"real_tokens_per_sec": unpacked},
            "packed": {"real_tokens_per_sec": packed},
            "peer": {"real_tokens_per_sec": peer}}

  rounds = [round_of(100.0, 200.0, 50.0), round_of(100.0, 150.0, 100.0),
            round_of(50.0, 150.0, 100.0), round_of(80.0, 160.0, None)]
  summary = packing_speed.summarize(rounds)
  assert summary["rounds_counted"] == 3
  assert summary["median_real_tokens_per_sec_packed"] == 150.0
  assert summary["median_real_tokens_per_sec_peer"] == 100.0
  # Ratios 2, 1.5, 3 and 4, 1.5, 1.5: the medians of the ratios, not the
  # ratios of the medians.
  assert summary["median_ratio_packed_over_unpacked"] == 2.0
  assert summary["median_ratio_packed_over_peer"] == 1.5
  assert packing_speed.summarize(rounds[3:]) == {}


def sequence(length, label=0):
  return {"input_ids": np.arange(1, length + 1),
          "token_type_ids": np.ones(length, np.int64),
          "positions": np.array([1, 0]), "labels": np.array([7, 0]),
          "weights": np.array([1.0, 0.0], np.float32),
          "next_sentence_labels": label}


def test_the_peer_pads_each_batch_to_its_longest_sequence():
  batches = pytorch_peer.record_batches(
      [sequence(3), sequence(5, 1), sequence(2)], 2, 2)
  first, second = batches
  assert first["input_ids"].tolist() == [[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]]
  assert first["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1] * 5]
  assert first["token_type_ids"].tolist() == [[1, 1, 1, 0, 0], [1] * 5]
  assert first["next_sentence_labels"].tolist() == [0, 1]
  # Records 2 and 0: the second step wraps into the next epoch, as ours.
  assert second["input_ids"].tolist() == [[1, 2, 0], [1, 2, 3]]
  assert second["positions"].tolist() == [[1, 0], [1, 0]]
  assert second["weights"].tolist() == [[1.0, 0.0], [1.0, 0.0]]


@pytest.mark.slow
def test_a_tiny_benchmark_computes_its_figures_from_the_runs(tmp_path):
  sample = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
  vocab = str(tmp_path / "vocab.txt")
  run_ok(["create_vocab.py", "--input_file=%s" % sample,
          "--output_file=%s" % vocab, "--vocab_size=1000"])
  # Documents of 2 sentences: short instances, as the benchmark's corpus.
  corpus = str(tmp_path / "short_documents.txt")
  with open(sample, encoding="utf-8") as f, open(corpus, "w") as out:
    in_document = 0
    for line in f:
      if not line.strip():
        in_document = 0
        out.write("\n")
        continue
      out.write(line)
      in_document += 1
      if in_document == 2:
        in_document = 0
        out.write("\n")
  config = str(tmp_path / "config.json")
  with open(config, "w") as f:
    json.dump(tiny_bert_config(vocab_size=1000, max_position_embeddings=128),
              f)
  out = str(tmp_path / "bench")
  options = packing_speed.parse_args([
      "--input_file=%s" % corpus, "--vocab_file=%s" % vocab,
      "--output_dir=%s" % out, "--bert_config_file=%s" % config,
      "--max_seq_length=128", "--max_predictions_per_seq=20",
      "--dupe_factor=1", "--train_batch_size=4", "--short_steps=1",
      "--long_steps=3", "--rounds=1", "--timeout=600"])
  report = packing_speed.main(options)
  with open(os.path.join(out, "packing.json")) as f:
    assert json.load(f) == json.loads(json.dumps(report))
  counts = {kind: packing_speed.row_counts(
      os.path.join(out, kind + ".tfrecord"))
            for kind in ("unpacked", "packed")}
  counts["peer"] = counts["unpacked"]
  assert report["padding_fraction"]["packed"] < (
      report["padding_fraction"]["unpacked"])
  (result,) = report["rounds"]
  for who in packing_speed.CONTESTANTS:
    seconds = {int(k): v for k, v in result[who]["wall_seconds"].items()}
    tokens = [packing_speed.steps_total(counts[who], 4, n)[0]
              for n in (1, 3)]
    extra = seconds[3] - seconds[1]
    expected = (tokens[1] - tokens[0]) / extra if extra > 0 else None
    assert result[who]["real_tokens_per_sec"] == pytest.approx(expected)
  # The peer trains on the tokens the benchmark counts for it.
  peer = subprocess.run(
      packing_speed.peer_command(options, os.path.join(
          out, "unpacked.tfrecord"), 3), cwd=REPO_ROOT, capture_output=True,
      text=True, check=True)
  printed = json.loads(peer.stdout.strip().splitlines()[-1])
  assert printed["real_tokens"] == packing_speed.steps_total(
      counts["unpacked"], 4, 3)[0]
  assert printed["padded_tokens"] < 3 * 4 * 128
