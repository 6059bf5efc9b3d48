"""The data-parallel math on records made from real text.

create_pretraining_data.py masks round(15% of the tokens), at most
--max_predictions_per_seq: on sample_data/corpus.txt with seq 64 and 10
predictions most records have 10 masked positions and the short ones 6-9.
So the two halves of a global batch hold different masked totals, and the
masked-LM loss is one device's only if every replica, worker, rank and
micro-batch divides by the GLOBAL masked total. Each run below trains the
same 6 steps of global batch 16 and must end with the weights of one device
with batch 16, to 1e-4, and log the same (global) loss at every step.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (REPO_ROOT, program_in_process, requires_byteps,
                      requires_horovod, run_ok)
from helpers.global_batch import (BATCH, CONFIG, PREDS, SEQ, STEPS, VOCAB,
                                  assert_same_weights, load_checkpoint,
                                  pretrain_args, write_rank_records)


def masked_count(record):
  example = tf.train.Example.FromString(record)
  return int(sum(example.features.feature["masked_lm_weights"]
                 .float_list.value))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """Vocab and records from sample_data/corpus.txt, as a user makes them.

  Also the two files of 2 horovod ranks: rank r's k-th batch of BATCH/2 is
  the r-th half of the k-th global batch of `records`.
  """
  d = tmp_path_factory.mktemp("real_text")
  corpus = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
  # conftest.write_real_text_records' files, made in this process.
  import create_vocab  # pylint: disable=g-import-not-at-top
  create_vocab.run(create_vocab.VocabOptions(
      input_file=corpus, output_file=str(d / "vocab.txt"),
      vocab_size=VOCAB))
  common = ["--input_file=%s" % corpus, "--vocab_file=%s" % (d / "vocab.txt"),
            "--max_seq_length=%d" % SEQ,
            "--max_predictions_per_seq=%d" % PREDS]
  program_in_process(["create_pretraining_data.py"] + common +
                     ["--output_file=%s" % (d / "records.tfrecord"),
                      "--dupe_factor=1"])
  with open(d / "config.json", "w") as f:
    json.dump(CONFIG, f)
  program_in_process(["create_pretraining_data.py"] + common +
                     ["--output_file=%s" % (d / "unmasked.tfrecord"),
                      "--masking=dynamic"])
  records = list(tf.io.tf_record_iterator(str(d / "records.tfrecord")))
  rank_files = write_rank_records(d, records)
  return {"dir": d, "records": str(d / "records.tfrecord"),
          "unmasked_records": str(d / "unmasked.tfrecord"),
          "counts": [masked_count(r) for r in records],
          "rank_files": rank_files}


def test_the_records_have_varying_masked_counts(data):
  counts = data["counts"][:STEPS * BATCH]
  assert max(counts) == PREDS and min(counts) < PREDS
  # The halves (replicas) and quarters (replicas x 2 micro-batches) of some
  # trained global batch hold different masked totals: a per-replica or
  # per-micro-batch normalisation would change the loss.
  for parts in (2, 4):
    size = BATCH // parts
    totals = [[sum(counts[s + i * size:s + (i + 1) * size])
               for i in range(parts)] for s in range(0, len(counts), BATCH)]
    assert any(len(set(t)) > 1 for t in totals), totals


# One process each; the 2-process and horovod runs are started separately.
# Those without --use_fp16 (a process-global graph rewrite) run in this
# process; the fp16 ones are launched.
IN_PROCESS_RUNS = {
    # A checkpoint at step 2 as well: the weights the run moves from.
    "one_device": ["--save_checkpoints_steps=2"],
    "mirrored": ["--distribution_strategy=mirrored", "--cpu_replicas=2"],
    "multi_worker": ["--distribution_strategy=multi_worker",
                     "--cpu_replicas=2"],
    # 2 replicas x 2 micro-batches of 4, with loss scaling (exact on CPU).
    "mirrored_k2_fp16": ["--distribution_strategy=mirrored",
                         "--cpu_replicas=2", "--num_accumulation_steps=2",
                         "--use_fp16", "--init_loss_scale=1024",
                         "--loss_scale_growth_steps=2"],
    "central_storage": ["--distribution_strategy=central_storage",
                        "--cpu_replicas=2"],
    "central_storage_k2_fp16": ["--distribution_strategy=central_storage",
                                "--cpu_replicas=2",
                                "--num_accumulation_steps=2", "--use_fp16",
                                "--init_loss_scale=1024",
                                "--loss_scale_growth_steps=2"],
}


# Masks drawn in the input pipeline (create_pretraining_data.py
# --masking=dynamic records): each example's masks depend on the example and
# the epoch only, so the replicas' draws are one device's.
DYNAMIC_RUNS = {"dynamic_" + name: IN_PROCESS_RUNS[name] for name in
                ("one_device", "mirrored", "multi_worker", "mirrored_k2_fp16")}


def dynamic_args(data):
  return ["--input_file=%s" % data["unmasked_records"],
          "--vocab_file=%s" % (data["dir"] / "vocab.txt")]


def two_worker_run(data, output_dir):
  env = dict(os.environ, PYTHON=sys.executable, NUM_WORKERS="2",
             TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run(
      ["bash", os.path.join(REPO_ROOT, "scripts", "run_multiworker_local.sh")]
      + pretrain_args(data, output_dir)[1:], cwd=REPO_ROOT, env=env,
      capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]


def horovod_run(data, output_dir):
  env = dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2",
             BERT_HOROVOD_SCRATCH_ROOT=str(output_dir) + "-scratch")
  command = [
      os.path.join(REPO_ROOT, "scripts", "run_pre_horovod.sh"), "-n", "2",
      "-c", str(data["dir"] / "config.json"),
      "-i", ",".join(data["rank_files"]), "-o", str(output_dir),
      "-b", str(BATCH), "-s", str(SEQ), "-p", str(PREDS), "-t", str(STEPS),
      "-w", "2", "-l", "1e-3", "--", "--tf_random_seed", "7",
      "--log_every_n_steps", "1", "--throughput_warmup_steps", "1"]
  result = subprocess.run(command, capture_output=True, text=True,
                          timeout=600, env=env, cwd=REPO_ROOT)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


# ssh as run_pre_byteps.sh -H calls it, running the command on this machine
# instead: two "machines" at 127.0.0.1 and 127.0.0.2.
FAKE_SSH = """#!/bin/bash
host="$1"; shift
echo "$host" >> "$FAKE_SSH_LOG"
exec bash -c "$*"
"""


def byteps_run(data, output_dir, launcher_args, extra, one_file=False):
  """BytePS workers, servers and the scheduler through the launcher; worker
  r of 2 reads rank file r, as horovod's ranks do, and one worker the
  records file."""
  inputs = data["records"] if one_file else ",".join(data["rank_files"])
  from helpers.processes import free_port, kill_launch
  port = free_port()
  ssh = data["dir"] / "fake_ssh"
  ssh.write_text(FAKE_SSH)
  ssh.chmod(0o755)
  env = dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="3",
             BERT_BYTEPS_SCRATCH_ROOT=str(output_dir) + "-scratch",
             SSH=str(ssh), FAKE_SSH_LOG=str(output_dir) + "-ssh.log")
  command = [
      os.path.join(REPO_ROOT, "scripts", "run_pre_byteps.sh")] + list(
          launcher_args) + [
      "-P", str(port), "-c", str(data["dir"] / "config.json"),
      "-i", inputs, "-o", str(output_dir),
      "-b", str(BATCH), "-s", str(SEQ), "-p", str(PREDS), "-t", str(STEPS),
      "-w", "2", "-l", "1e-3", "--", "--tf_random_seed", "7",
      "--log_every_n_steps", "1", "--throughput_warmup_steps", "1"] + list(
          extra)
  try:
    result = subprocess.run(command, capture_output=True, text=True,
                            timeout=600, env=env, cwd=REPO_ROOT)
  finally:
    kill_launch(port)  # on a timeout, the workers would outlive the launcher
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


# The BytePS runs (launcher arguments, run_pretraining.py flags[, one file]):
# one machine; 2 micro-batches of 4 per worker; two machines of one worker
# and one server each, started through (a stand-in for) ssh; one worker.
BYTEPS_RUNS = {
    "byteps": (["-n", "2"], []),
    "byteps_k2": (["-n", "2"], ["--num_accumulation_steps", "2"]),
    "byteps_two_machines": (["-n", "1", "-H", "127.0.0.1,127.0.0.2"], []),
    # One worker still sums through the server.
    "byteps_one_worker": (["-n", "1"], [], True),
}


@pytest.fixture(scope="module")
def runs(data):
  """Output directory of each run, started on first use."""
  started = {}

  def get(name):
    if name not in started:
      out = data["dir"] / name
      if name == "two_workers":
        two_worker_run(data, out)
      elif name == "horovod":
        horovod_run(data, out)
      elif name in BYTEPS_RUNS:
        byteps_run(data, out, *BYTEPS_RUNS[name])
        if name == "byteps_two_machines":
          with open(str(out) + "-ssh.log") as f:
            # The scheduler, a server and a worker on the first machine; a
            # server and a worker on the second.
            assert sorted(f.read().split()) == ["127.0.0.1"] * 3 + [
                "127.0.0.2"] * 2
      else:
        dynamic = name in DYNAMIC_RUNS
        extra = (DYNAMIC_RUNS if dynamic else IN_PROCESS_RUNS)[name]
        args = pretrain_args(data, out, *extra)
        if dynamic:
          args += dynamic_args(data)
        if "--use_fp16" in extra:
          run_ok(args)
        else:
          train_in_process(args)
      started[name] = out
    return started[name]

  return get


def train_in_process(args):
  """run_pretraining.run in this process with pretrain_args' `args`, as
  one process without a cluster (no TF_CONFIG) runs it."""
  with pytest.MonkeyPatch.context() as patch:
    patch.delenv("TF_CONFIG", raising=False)
    return program_in_process(args)


def logged_losses(output_dir):
  with open(os.path.join(str(output_dir), "throughput.jsonl")) as f:
    records = [json.loads(line) for line in f]
  return {r["step"]: r["loss"] for r in records}


RUN_NAMES = [
    "mirrored", "multi_worker", "mirrored_k2_fp16", "central_storage",
    "central_storage_k2_fp16",
    pytest.param("two_workers", marks=pytest.mark.slow),
    pytest.param("horovod", marks=requires_horovod),
] + [pytest.param(name, marks=requires_byteps) for name in BYTEPS_RUNS]


@pytest.mark.slow
@pytest.mark.parametrize("name", RUN_NAMES)
def test_replicas_equal_one_device_with_the_global_batch(runs, name):
  assert_same_weights(runs("one_device"), runs(name), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in DYNAMIC_RUNS
                                  if n != "dynamic_one_device"])
def test_drawn_masks_replicas_equal_one_device(runs, name):
  assert_same_weights(runs("dynamic_one_device"), runs(name), name)
  # Other masks than the records' of create_pretraining_data --masking=static.
  static = load_checkpoint(runs("one_device"))
  drawn = load_checkpoint(runs("dynamic_one_device"))
  assert not np.allclose(static["cls/predictions/output_bias"],
                         drawn["cls/predictions/output_bias"], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", RUN_NAMES)
def test_the_logged_loss_is_the_global_batch_loss(runs, name):
  expected = logged_losses(runs("one_device"))
  actual = logged_losses(runs(name))
  # Logged at the global_step the step started from.
  assert sorted(actual) == sorted(expected) == list(range(STEPS))
  print("%s: logged losses %s, one device %s" % (
      name, [actual[s] for s in sorted(actual)],
      [expected[s] for s in sorted(expected)]))
  for step, loss in expected.items():
    assert actual[step] == pytest.approx(loss, rel=1e-5), step


@pytest.mark.slow
def test_tensorboard_train_loss_is_the_global_batch_loss(runs):
  expected = logged_losses(runs("one_device"))
  out = runs("mirrored")
  found = {}
  for event_file in tf.io.gfile.glob(os.path.join(str(out),
                                                  "events.out.tfevents.*")):
    for event in tf.train.summary_iterator(event_file):
      for value in event.summary.value:
        if value.tag == "train/loss":
          found[event.step] = value.simple_value
  assert sorted(found) == sorted(expected)
  for step, loss in expected.items():
    assert found[step] == pytest.approx(loss, rel=1e-5), step
