"""Packed records made from real text (create_pretraining_data.py
--pack_sequences on sample_data/corpus.txt): what they hold, how
run_pretraining.py reads them, and packed training under data parallelism
and accumulation equal to one device's (the pattern of
test_global_batch_math.py: the same 6 steps of global batch 16 end with the
same weights and log the same global loss).

With --max_seq_length=128 and --short_seq_prob=0.5 about a quarter of the
tokens of upstream's records are padding and a fifth of the rows hold 2-3
sequences, so the halves and quarters of a global batch hold different
numbers of sequences: a per-replica or per-micro-batch next-sentence mean
would change the loss.
"""

import collections
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.data import packing
from bertkit.common.errors import UserError
from conftest import (REPO_ROOT, expect_user_error,
                      load_checkpoint, program_in_process, requires_horovod,
                      run_program, tiny_bert_config)

SEQ, PREDS, VOCAB = 128, 10, 1000
PER_PACK = 3
ROW_PREDS = packing.masked_positions_per_row(SEQ, PREDS, 0.15, PER_PACK)
BATCH, STEPS = 16, 6
CONFIG = tiny_bert_config(max_position_embeddings=SEQ, vocab_size=VOCAB)


def create_args(d, output, *extra):
  return ["create_pretraining_data.py",
          "--input_file=%s" % os.path.join(REPO_ROOT, "sample_data",
                                           "corpus.txt"),
          "--output_file=%s" % output, "--vocab_file=%s" % (d / "vocab.txt"),
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--short_seq_prob=0.5", "--dupe_factor=1"] + list(extra)


def read_records(path):
  return [{name: list(getattr(f, f.WhichOneof("kind")).value)
           for name, f in tf.train.Example.FromString(r).features.feature
           .items()} for r in tf.io.tf_record_iterator(str(path))]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  d = tmp_path_factory.mktemp("packed")
  program_in_process([
      "create_vocab.py", "--input_file=%s" % os.path.join(
          REPO_ROOT, "sample_data", "corpus.txt"),
      "--output_file=%s" % (d / "vocab.txt"), "--vocab_size=%d" % VOCAB])
  program_in_process(create_args(d, d / "unpacked.tfrecord"))
  packed = program_in_process(create_args(
      d, d / "packed.tfrecord", "--pack_sequences",
      "--max_sequences_per_pack=%d" % PER_PACK))
  with open(d / "config.json", "w") as f:
    json.dump(CONFIG, f)
  return {"dir": d, "unpacked": read_records(d / "unpacked.tfrecord"),
          "packed": read_records(d / "packed.tfrecord"),
          "packed_log": packed.stderr}


def sequences_of_unpacked(records):
  return [packing.sequence_from_features(r) for r in records]


def sequences_of_packed(rows):
  """Each sequence of each row, cut out by its sequence ids."""
  sequences = []
  for row in rows:
    masks = [(p, t) for p, t, w in zip(row["masked_lm_positions"],
                                       row["masked_lm_ids"],
                                       row["masked_lm_weights"]) if w > 0]
    for slot, weight in enumerate(row["next_sentence_weights"]):
      if not weight:
        continue
      tokens = [i for i, s in enumerate(row["sequence_ids"]) if s == slot + 1]
      start, end = tokens[0], tokens[-1] + 1
      assert tokens == list(range(start, end))
      assert row["cls_positions"][slot] == start
      assert row["position_ids"][start:end] == list(range(end - start))
      sequences.append(packing.Sequence(
          row["input_ids"][start:end], row["segment_ids"][start:end],
          [p - start for p, _ in masks if start <= p < end],
          [t for p, t in masks if start <= p < end],
          row["next_sentence_labels"][slot]))
  return sequences


def key(sequence):
  return tuple(tuple(x) if isinstance(x, list) else x for x in sequence)


def test_packed_rows_hold_exactly_upstreams_instances(data):
  unpacked, rows = data["unpacked"], data["packed"]
  # The same instances as without packing (same seed, same draws), each in
  # exactly one row, in fewer rows.
  assert (collections.Counter(map(key, sequences_of_packed(rows))) ==
          collections.Counter(map(key, sequences_of_unpacked(unpacked))))
  assert len(rows) < 0.85 * len(unpacked)
  per_row = collections.Counter(int(sum(r["next_sentence_weights"]))
                                for r in rows)
  assert set(per_row) <= set(range(1, PER_PACK + 1)) and per_row[2] > 0
  for row in rows:
    assert len(row["input_ids"]) == SEQ
    assert len(row["masked_lm_ids"]) == ROW_PREDS
    assert len(row["cls_positions"]) == PER_PACK
    real = sum(row["input_mask"])
    assert row["input_mask"] == [1] * real + [0] * (SEQ - real)
    assert all(s == 0 for s in row["sequence_ids"][real:])


def test_create_reports_padding_before_and_after(data):
  lengths = [sum(r["input_mask"]) for r in data["unpacked"]]
  before = 1 - sum(lengths) / float(SEQ * len(lengths))
  after = 1 - sum(lengths) / float(SEQ * len(data["packed"]))
  assert before > 0.2 and after < 0.1
  assert ("padding %.1f %% of the tokens unpacked, %.1f %% packed" %
          (100 * before, 100 * after)) in data["packed_log"]
  assert ("train with --max_predictions_per_seq=%d" % ROW_PREDS
          in data["packed_log"])


def test_bad_max_sequences_per_pack(data, tmp_path):
  """Launched: exit code 2 and one `error:` line, no output written."""
  output = tmp_path / "out.tfrecord"
  result = run_program(create_args(data["dir"], output, "--pack_sequences",
                                   "--max_sequences_per_pack=0"))
  assert expect_user_error(result) == (
      "error: --max_sequences_per_pack must be >= 1, got 0")
  assert not os.listdir(tmp_path)


def pretrain_args(data, output_dir, *extra, input_file=None):
  return ["run_pretraining.py",
          "--bert_config_file=%s" % (data["dir"] / "config.json"),
          "--input_file=%s" % (input_file or data["dir"] / "packed.tfrecord"),
          "--output_dir=%s" % output_dir, "--do_train",
          "--max_seq_length=%d" % SEQ,
          "--max_predictions_per_seq=%d" % ROW_PREDS,
          "--train_batch_size=%d" % BATCH, "--num_train_steps=%d" % STEPS,
          "--num_warmup_steps=2", "--learning_rate=1e-3",
          "--log_every_n_steps=1", "--throughput_warmup_steps=1",
          "--tf_random_seed=7"] + list(extra)


def user_error_of(args):
  """The message of the UserError run_pretraining.run raises on `args`
  (one line, as the program's `error:` line)."""
  with pytest.raises(UserError) as raised:
    program_in_process(args)
  assert "\n" not in str(raised.value), str(raised.value)
  return str(raised.value)


def test_packed_and_unpacked_mixed_in_one_glob(data, tmp_path):
  d = data["dir"]
  assert user_error_of(pretrain_args(
      data, tmp_path / "out", input_file="%s,%s" % (
          d / "packed.tfrecord", d / "unpacked.tfrecord"))) == (
      "--input_file mixes record kinds: %s holds packed rows of up "
      "to %d sequences; %s holds masked records; train on one kind at a "
      "time" % (d / "packed.tfrecord", PER_PACK, d / "unpacked.tfrecord"))


def test_packed_rows_of_different_sizes_in_one_glob(data, tmp_path):
  d = data["dir"]
  pairs = tmp_path / "pairs.tfrecord"
  program_in_process(create_args(d, pairs, "--pack_sequences",
                                      "--max_sequences_per_pack=2"))
  assert user_error_of(pretrain_args(
      data, tmp_path / "out", input_file="%s,%s" % (
          d / "packed.tfrecord", pairs))) == (
      "--input_file mixes record kinds: %s holds packed rows of up "
      "to %d sequences; %s holds packed rows of up to 2 sequences; train on "
      "one kind at a time" % (d / "packed.tfrecord", PER_PACK, pairs))


def test_packed_records_need_their_mask_width(data, tmp_path):
  args = pretrain_args(data, tmp_path / "out")
  args[args.index("--max_predictions_per_seq=%d" % ROW_PREDS)] = (
      "--max_predictions_per_seq=%d" % PREDS)
  assert user_error_of(args).endswith(
      "feature masked_lm_positions has length %d but "
      "--max_predictions_per_seq=%d; recreate the data or pass "
      "--max_predictions_per_seq=%d" % (ROW_PREDS, PREDS, ROW_PREDS))


def test_the_batches_hold_varying_sequence_counts(data):
  counts = [int(sum(r["next_sentence_weights"]))
            for r in data["packed"][:STEPS * BATCH]]
  for parts in (2, 4):
    size = BATCH // parts
    totals = [[sum(counts[s + i * size:s + (i + 1) * size])
               for i in range(parts)] for s in range(0, len(counts), BATCH)]
    assert any(len(set(t)) > 1 for t in totals), totals


def run_in_process_group(command, env):
  """Runs a launcher script to the end; stops all it started if it fails or
  times out (its workers or ranks are in its process group)."""
  process = subprocess.Popen(command, cwd=REPO_ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
  try:
    stdout, stderr = process.communicate(timeout=600)
  finally:
    if process.poll() is None or process.returncode != 0:
      try:
        os.killpg(process.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      process.wait()
  assert process.returncode == 0, stderr[-3000:] + stdout[-3000:]
  return subprocess.CompletedProcess(command, 0, stdout, stderr)


def two_worker_run(data, output_dir):
  """run_pretraining.py as 2 multi_worker processes on 127.0.0.1: each reads
  every other record of the one file, 8 rows a step."""
  env = dict(os.environ, PYTHON=sys.executable, NUM_WORKERS="2",
             TF_CPP_MIN_LOG_LEVEL="2")
  return run_in_process_group(
      ["bash", os.path.join(REPO_ROOT, "scripts", "run_multiworker_local.sh")]
      + pretrain_args(data, output_dir,
                      "--distribution_strategy=multi_worker")[1:], env)


def horovod_run(data, output_dir):
  """run_pretraining.py on 2 horovod ranks: rank r's k-th batch of BATCH/2
  rows is the r-th half of one device's k-th batch of BATCH rows."""
  rows = list(tf.io.tf_record_iterator(str(data["dir"] /
                                           "packed.tfrecord")))
  assert len(rows) >= STEPS * BATCH
  half = BATCH // 2
  rank_files = []
  for rank in (0, 1):
    path = str(data["dir"] / ("packed_rank%d.tfrecord" % rank))
    with tf.io.TFRecordWriter(path) as writer:
      for start in range(0, STEPS * BATCH, BATCH):
        for row in rows[start + rank * half:start + (rank + 1) * half]:
          writer.write(row)
    rank_files.append(path)
  env = dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2",
             BERT_HOROVOD_SCRATCH_ROOT=str(output_dir) + "-scratch")
  return run_in_process_group(
      [os.path.join(REPO_ROOT, "scripts", "run_pre_horovod.sh"), "-n", "2",
       "-c", str(data["dir"] / "config.json"), "-i", ",".join(rank_files),
       "-o", str(output_dir), "-b", str(BATCH), "-s", str(SEQ),
       "-p", str(ROW_PREDS), "-t", str(STEPS), "-w", "2", "-l", "1e-3",
       "--", "--tf_random_seed", "7", "--log_every_n_steps", "1",
       "--throughput_warmup_steps", "1"], env)


RUNS = {
    # A checkpoint at step 2 as well: the weights the run moves from.
    "one_device": ["--save_checkpoints_steps=2"],
    "mirrored": ["--distribution_strategy=mirrored", "--cpu_replicas=2"],
    "accumulation_k2": ["--num_accumulation_steps=2"],
    "mirrored_k2": ["--distribution_strategy=mirrored", "--cpu_replicas=2",
                    "--num_accumulation_steps=2"],
}


@pytest.fixture(scope="module")
def runs(data):
  started = {}

  def get(name):
    if name not in started:
      out = data["dir"] / name
      if name == "two_workers":
        started[name] = (out, two_worker_run(data, out))
      elif name == "horovod":
        started[name] = (out, horovod_run(data, out))
      else:
        started[name] = (out, program_in_process(
            pretrain_args(data, out, *RUNS[name])))
    return started[name]

  return get


def logged(output_dir):
  with open(os.path.join(str(output_dir), "throughput.jsonl")) as f:
    return {r["step"]: r for r in map(json.loads, f)}


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "mirrored", "accumulation_k2", "mirrored_k2", "two_workers",
    pytest.param("horovod", marks=requires_horovod)])
def test_packed_training_equals_one_device(runs, name):
  reference_dir, _ = runs("one_device")
  actual_dir, result = runs(name)
  if name in RUNS:
    assert "packed records: up to %d sequences per row" % PER_PACK in (
        result.stderr)
  reference = load_checkpoint(str(reference_dir))
  actual = load_checkpoint(str(actual_dir))
  assert set(actual) == set(reference)
  assert actual["global_step"] == STEPS
  for n, value in reference.items():
    np.testing.assert_allclose(actual[n], value, rtol=1e-4, atol=1e-6,
                               err_msg=n)
  start = load_checkpoint(os.path.join(str(reference_dir), "model.ckpt-2"))
  assert max(float(np.abs(reference[n] - start[n]).max())
             for n in start if n.startswith("bert/")) > 1e-3
  expected, got = logged(reference_dir), logged(actual_dir)
  assert sorted(got) == sorted(expected) == list(range(STEPS))
  for step, record in expected.items():
    assert got[step]["loss"] == pytest.approx(record["loss"], rel=1e-5)


@pytest.mark.slow
def test_throughput_counts_sequences_and_real_tokens(data, runs):
  out, result = runs("mirrored")
  # Deterministic order (--tf_random_seed): step k reads rows
  # k*BATCH..(k+1)*BATCH-1 of the file.
  rows = data["packed"]
  for step, record in logged(out).items():
    batch = rows[step * BATCH:(step + 1) * BATCH]
    sequences = sum(sum(r["next_sentence_weights"]) for r in batch)
    tokens = sum(sum(r["input_mask"]) for r in batch)
    ratio = record["examples_per_sec"] / BATCH
    assert record["sequences_per_sec"] == pytest.approx(sequences * ratio,
                                                        rel=1e-3)
    assert record["real_tokens_per_sec"] == pytest.approx(tokens * ratio,
                                                          rel=1e-3)
  with open(os.path.join(str(out), "throughput_summary.json")) as f:
    summary = json.load(f)
  assert summary["sequences_per_sec"] > summary["examples_per_sec"]
  assert "real (non-padding) tokens/sec" in result.stdout


def test_sharded_mode_packs_each_shards_instances(data, tmp_path):
  for kind, extra in (("unpacked", []), ("packed", ["--pack_sequences"])):
    args = create_args(data["dir"], "unused", "--num_workers=2", *extra)
    args[args.index("--output_file=unused")] = "--output_dir=%s" % (
        tmp_path / kind)
    program_in_process(args)
  shards = sorted(p for p in os.listdir(tmp_path / "packed")
                  if p.endswith(".tfrecord"))
  assert shards and shards == sorted(
      p for p in os.listdir(tmp_path / "unpacked") if p.endswith(".tfrecord"))
  for name in shards:
    rows = read_records(tmp_path / "packed" / name)
    unpacked = read_records(tmp_path / "unpacked" / name)
    assert (collections.Counter(map(key, sequences_of_packed(rows))) ==
            collections.Counter(map(key, sequences_of_unpacked(unpacked))))
    assert len(rows) < len(unpacked)
