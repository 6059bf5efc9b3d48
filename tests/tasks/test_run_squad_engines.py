"""run_squad.py on the engines and through the preemption path that the
runner gives every task: multi_worker (2 processes on 127.0.0.1), horovod
(2 ranks), central_storage (2 CPU replicas), and a SIGTERM mid-training
whose rerun ends at exactly the planned step.

Tiny model, the training file of test_run_squad (20 questions); each run
trains and then predicts, so the prediction files, eval_results.txt and the
run summary come from the same command.
"""

import json
import os
import signal
import subprocess
import sys

import pytest

from bertkit.common import errors
from conftest import (REPO_ROOT, program_in_process, read_eval_results,
                      requires_horovod, run_program)
from helpers import processes
from helpers.processes import horovodrun, start
from helpers.squad import squad_args, squad_file, tiny_config

pytestmark = pytest.mark.slow

QUESTIONS = 20  # train_v1.json: squad_v1.json without the unrecoverable 3
BATCH, EPOCHS = 4, 2
STEPS = int(QUESTIONS / BATCH * EPOCHS)  # as upstream counts: 10


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("squad_engines")
  (d / "tiny.json").write_text(json.dumps(tiny_config()))
  squad_file("squad_v1.json", d / "train_v1.json")
  return d


def train_and_predict_args(squad_dir, output_dir, *extra):
  return squad_args(
      squad_dir, output_dir, "--do_train", "--do_predict",
      "--train_file=%s" % (squad_dir / "train_v1.json"),
      "--predict_file=%s" % (squad_dir / "train_v1.json"),
      "--train_batch_size=%d" % BATCH, "--num_train_epochs=%d" % EPOCHS,
      "--tf_random_seed=1", "--log_every_n_steps=1", *extra)


def check_trained_and_predicted(output_dir, strategy, num_replicas):
  """The chief's files of a finished run: throughput summary, predictions
  of every question, eval results of the trained step."""
  with open(os.path.join(str(output_dir), "throughput_summary.json")) as f:
    summary = json.load(f)
  assert summary["strategy"] == strategy
  assert summary["num_replicas"] == num_replicas
  assert summary["final_step"] == STEPS
  with open(os.path.join(str(output_dir), "predictions.json")) as f:
    assert len(json.load(f)) == QUESTIONS
  results = read_eval_results(output_dir)
  assert results["global_step"] == STEPS
  assert 0.0 <= results["exact_match"] <= results["f1"] <= 100.0


def fingerprints(output_dir, *tasks):
  found = []
  for task in tasks:
    path = os.path.join(str(output_dir), "final_weights.%s.json" % task)
    with open(path) as f:
      found.append(json.load(f))
  return found


def test_multi_worker_two_processes(squad_dir, tmp_path):
  out = tmp_path / "multi_worker"
  out.mkdir()
  args = train_and_predict_args(squad_dir, out,
                                "--distribution_strategy=multi_worker",
                                "--collective_timeout_seconds=120")
  procs, logs = processes.multi_worker_cluster(squad_dir, out, args,
                                               "run")
  assert processes.wait_all(procs, timeout=600) == [0, 0], \
      logs[1].read_text()[-3000:]
  check_trained_and_predicted(out, "multi_worker", 2)
  worker0, worker1 = fingerprints(out, "worker-0", "worker-1")
  assert worker0["global_step"] == worker1["global_step"] == STEPS
  assert worker0["sha256"] == worker1["sha256"]
  # Only the chief prints the run summary.
  assert "***** Run summary" in logs[0].read_text()
  assert "***** Run summary" not in logs[1].read_text()


@requires_horovod
def test_two_horovod_ranks(squad_dir, tmp_path):
  out = tmp_path / "horovod"
  args = train_and_predict_args(squad_dir, out,
                                "--distribution_strategy=horovod")
  result = subprocess.run(
      [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo",
       sys.executable] + args, cwd=REPO_ROOT, capture_output=True, text=True,
      timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                            BERT_HOROVOD_SCRATCH_ROOT=str(tmp_path / "scratch")))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  output = result.stdout + result.stderr
  for rank in (0, 1):
    # One train.tf_record, two ranks: each reads every other record.
    assert ("horovod rank %d of 2 reads one record in 2, from record %d, of "
            "1 input file(s)" % (rank, rank)) in output
  check_trained_and_predicted(out, "horovod", 2)
  rank0, rank1 = fingerprints(out, "rank-0", "rank-1")
  assert rank0["global_step"] == rank1["global_step"] == STEPS
  assert rank0["sha256"] == rank1["sha256"]


def test_central_storage_two_cpu_replicas(squad_dir, tmp_path):
  out = tmp_path / "central_storage"
  result = program_in_process(train_and_predict_args(
      squad_dir, out, "--distribution_strategy=central_storage",
      "--cpu_replicas=2"))
  assert "strategy=central_storage replicas=2" in result.stderr
  check_trained_and_predicted(out, "central_storage", 2)
  assert "eval exact_match = " in result.stdout


def test_sigterm_checkpoints_the_step_and_rerun_continues(squad_dir,
                                                           tmp_path):
  out = tmp_path / "preempted"
  out.mkdir()
  epochs = 30
  steps = int(QUESTIONS / 2 * epochs)
  args = train_and_predict_args(squad_dir, out, "--train_batch_size=2",
                                "--num_train_epochs=%d" % epochs,
                                processes.FAR_AWAY)
  log = out / "run.log"
  proc = start(args, log=open(log, "w"))
  signalled_at = processes.signal_after_step([proc], proc.pid, out,
                                             signal.SIGTERM)
  assert processes.wait_all([proc]) == [errors.EXIT_STOPPED]
  stopped_at = processes.check_stopped_run(out, log, signalled_at,
                                           "by SIGTERM")
  assert stopped_at < steps
  # Stopped means stopped: no predictions after the interrupted training.
  assert not (out / "predictions.json").exists()
  result = run_program(args)
  assert result.returncode == 0, result.stderr[-3000:]
  processes.check_resumed(out, stopped_at, steps)
  assert read_eval_results(out)["global_step"] == steps
