"""Faults as users meet them: kills, dead peers, NaN, corrupt or bad input."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import tensorflow.compat.v1 as tf

import synthetic_data
from conftest import REPO_ROOT, TINY_CONFIG, load_checkpoint, run_program
from test_run_pretraining import expect_user_error, pretrain_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  d = tmp_path_factory.mktemp("reliability")
  with open(d / "tiny.json", "w") as f:
    json.dump(TINY_CONFIG, f)
  synthetic_data.write_synthetic_pretraining_records(
      str(d / "data.tfrecord"), 256, 32, 5, 120)
  return d


def start(args, env=None, log=None):
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
  return subprocess.Popen([sys.executable] + args, cwd=REPO_ROOT,
                          env=full_env, stdout=log or subprocess.DEVNULL,
                          stderr=subprocess.STDOUT if log else
                          subprocess.DEVNULL)


def wait_for_checkpoint(output_dir, min_step, timeout=300):
  deadline = time.time() + timeout
  while time.time() < deadline:
    latest = tf.train.latest_checkpoint(str(output_dir))
    if latest and int(latest.rsplit("-", 1)[1]) >= min_step:
      return latest
    time.sleep(0.5)
  raise AssertionError("no checkpoint >= %d in %s" % (min_step, output_dir))


def test_kill_9_then_rerun_resumes_and_ends_at_num_train_steps(workdir):
  out = workdir / "killed"
  # Long enough that the kill always lands mid-run on a fast machine.
  steps = 3000
  args = pretrain_args(workdir, out, "--save_checkpoints_steps=50",
                       steps=steps)
  proc = start(args)
  wait_for_checkpoint(out, 50)
  time.sleep(random.uniform(0.0, 2.0))
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  resumed_from = int(tf.train.latest_checkpoint(str(out)).rsplit("-", 1)[1])
  assert 50 <= resumed_from < steps
  result = run_program(args)
  assert result.returncode == 0, result.stderr[-2000:]
  assert load_checkpoint(str(out))["global_step"] == steps
  summary = json.loads((out / "throughput_summary.json").read_text())
  assert summary["first_step"] == resumed_from
  assert summary["final_step"] == steps


def test_nan_loss_stops_with_the_step_and_writes_no_checkpoint_of_it(workdir):
  out = workdir / "nan"
  result = run_program(pretrain_args(workdir, out, "--learning_rate=1e30",
                                     "--num_warmup_steps=0", steps=50))
  assert result.returncode == 3, result.stderr[-2000:]
  errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert len(errors) == 1 and "at step" in errors[0]
  assert "--nostop_on_nonfinite_loss" in errors[0]
  assert load_checkpoint(str(out))["global_step"] < 50


def test_truncated_tfrecord_is_refused_before_training(workdir):
  data = (workdir / "data.tfrecord").read_bytes()
  (workdir / "truncated.tfrecord").write_bytes(data[:-100])
  args = pretrain_args(workdir, workdir / "trunc_out")
  args[2] = "--input_file=%s" % (workdir / "truncated.tfrecord")
  expect_user_error(run_program(args), "truncated.tfrecord", "truncated")


def test_unwritable_output_dir_is_refused_before_training(workdir):
  result = run_program(pretrain_args(workdir, "/proc/no_such_dir/out"))
  expect_user_error(result, "--output_dir /proc/no_such_dir/out",
                    "not writable")


def test_tf_config_with_a_task_outside_the_cluster_is_refused(workdir):
  tf_config = json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                          "task": {"type": "worker", "index": 3}})
  result = run_program(pretrain_args(workdir, workdir / "bad_task"),
                       env={"TF_CONFIG": tf_config})
  expect_user_error(result, "index 3", "out of range")


def test_a_dead_worker_makes_the_other_exit_within_the_timeout(workdir):
  out = workdir / "dead_peer"
  out.mkdir()
  ports = [24600 + random.randrange(0, 2000) * 2 + i for i in range(2)]
  cluster = {"worker": ["127.0.0.1:%d" % p for p in ports]}
  procs = []
  for index in range(2):
    tf_config = json.dumps({"cluster": cluster,
                            "task": {"type": "worker", "index": index}})
    log = open(out / ("worker-%d.log" % index), "w")
    procs.append(start(pretrain_args(
        workdir, out, "--save_checkpoints_steps=5",
        "--collective_timeout_seconds=15", steps=100000),
        env={"TF_CONFIG": tf_config}, log=log))
  try:
    wait_for_checkpoint(out, 5)
    procs[1].send_signal(signal.SIGKILL)
    killed_at = time.time()
    returncode = procs[0].wait(timeout=120)
    waited = time.time() - killed_at
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  assert returncode == 3
  assert waited < 60
  log = (out / "worker-0.log").read_text()
  assert "error: no training step finished" in log


def test_nonfinite_loss_can_be_trained_through_on_request(workdir):
  out = workdir / "nan_optout"
  result = run_program(pretrain_args(workdir, out, "--learning_rate=1e30",
                                     "--num_warmup_steps=0",
                                     "--nostop_on_nonfinite_loss", steps=6))
  assert result.returncode == 0, result.stderr[-2000:]
  assert "Training loss is nan at step" in result.stderr
  assert load_checkpoint(str(out))["global_step"] == 6
