"""SIGTERM / SIGINT during training, as a scheduler or a user sends them.

Each test signals a running program after step k > 0 with checkpoints far
apart, expects a checkpoint of the step it stopped at, exit code 4 and the
one documented line, then reruns the same command, which must end at exactly
--num_train_steps having trained only the steps that were missing.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import errors
from conftest import REPO_ROOT, run_program
from conftest import load_checkpoint, pretrain_args, requires_horovod
from helpers import classifier
from helpers.processes import (FAR_AWAY, STOP_LINE, check_resumed,
                               check_stopped_run, horovodrun,
                               multi_worker_cluster, signal_after_step, start,
                               stop_lines, wait_all)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("signum,extra", [
    (signal.SIGTERM, []),
    (signal.SIGINT, ["--distribution_strategy=mirrored", "--cpu_replicas=2"]),
])
def test_signal_checkpoints_the_step_and_rerun_continues(workdir, signum,
                                                         extra):
  out = workdir / ("signal_%s" % signal.Signals(signum).name)
  out.mkdir()
  steps = 300
  args = pretrain_args(workdir, out, FAR_AWAY, "--log_every_n_steps=1",
                       *extra, steps=steps)
  log = out / "run.log"
  proc = start(args, log=open(log, "w"))
  signalled_at = signal_after_step([proc], proc.pid, out, signum)
  assert wait_all([proc]) == [errors.EXIT_STOPPED]
  stopped_at = check_stopped_run(out, log, signalled_at,
                                 "by %s" % signal.Signals(signum).name)
  assert stopped_at < steps
  result = run_program(args)
  assert result.returncode == 0, result.stderr[-3000:]
  check_resumed(out, stopped_at, steps)


def test_a_second_signal_exits_at_once(workdir):
  out = workdir / "second_signal"
  out.mkdir()
  args = pretrain_args(workdir, out, FAR_AWAY, "--log_every_n_steps=1",
                       steps=100000)
  log = out / "run.log"
  proc = start(args, log=open(log, "w"))
  signal_after_step([proc], proc.pid, out, signal.SIGTERM)
  # Two signals sent back to back would merge into one pending signal.
  deadline = time.time() + 60
  while "SIGTERM received" not in log.read_text():
    assert time.time() < deadline
    time.sleep(0.01)
  proc.send_signal(signal.SIGTERM)
  assert wait_all([proc], timeout=30) == [128 + signal.SIGTERM]
  text = log.read_text()
  assert "stopped by a second SIGTERM: exiting at once" in text
  assert not STOP_LINE.search(text)


def kill_9_after_step(args, out, min_step):
  """Starts `args`, SIGKILLs it once it logged step >= min_step."""
  proc = start(args)
  try:
    signal_after_step([proc], proc.pid, out, signal.SIGKILL, min_step)
  finally:
    if proc.poll() is None:
      proc.kill()
    proc.wait()


def assert_same_weights(actual_dir, expected_dir):
  actual, expected = load_checkpoint(actual_dir), load_checkpoint(expected_dir)
  assert sorted(actual) == sorted(expected)
  for name, value in expected.items():
    np.testing.assert_array_equal(actual[name], value, err_msg=name)


# No dropout: its random draws start again in each process, so only
# without it can a resumed run's weights equal the uninterrupted run's.
NO_DROPOUT = ("--hidden_dropout_prob=0", "--attention_probs_dropout_prob=0")


def test_kill_9_before_the_first_checkpoint_reruns_from_step_0(workdir):
  """Nothing is saved before the first periodic checkpoint (no step-0
  checkpoint, no graph files): a run killed then starts over, and ends with
  the weights the uninterrupted run ends with."""
  steps = 300
  uninterrupted, out = workdir / "whole_run", workdir / "killed_early"
  out.mkdir()
  args = pretrain_args(workdir, out, "--save_checkpoints_steps=%d" % steps,
                       "--log_every_n_steps=1", steps=steps)
  kill_9_after_step(args, out, min_step=3)
  assert tf.train.latest_checkpoint(str(out)) is None
  assert not [p.name for p in out.iterdir()
              if p.name.startswith(("model.ckpt", "graph.pbtxt"))]
  result = run_program(args)
  assert result.returncode == 0, result.stderr[-3000:]
  check_resumed(out, 0, steps)
  result = run_program(pretrain_args(
      workdir, uninterrupted, "--save_checkpoints_steps=%d" % steps,
      "--log_every_n_steps=1", steps=steps))
  assert result.returncode == 0, result.stderr[-3000:]
  assert_same_weights(str(out), str(uninterrupted))
  # The graphs come with the first checkpoint, for TensorBoard as before.
  assert (out / "graph.pbtxt").exists()


def test_kill_9_after_a_checkpoint_resumes_to_the_uninterrupted_weights(
    workdir):
  """Periodic checkpoints on the schedule the flags ask for; a run killed
  between two resumes from the newer and ends where the uninterrupted run
  does, weight for weight."""
  steps, every = 300, 20
  uninterrupted, out = workdir / "whole_run_k", workdir / "killed_late"
  out.mkdir()
  make_args = lambda d: pretrain_args(
      workdir, d, "--save_checkpoints_steps=%d" % every,
      "--log_every_n_steps=1", *NO_DROPOUT, steps=steps)
  kill_9_after_step(make_args(out), out, min_step=2 * every + 3)
  latest = tf.train.latest_checkpoint(str(out))
  resumed_from = int(latest.rsplit("-", 1)[1])
  assert resumed_from % every == 0 and every <= resumed_from < steps
  result = run_program(make_args(out))
  assert result.returncode == 0, result.stderr[-3000:]
  check_resumed(out, resumed_from, steps)
  result = run_program(make_args(uninterrupted))
  assert result.returncode == 0, result.stderr[-3000:]
  kept = sorted(int(p.name.split("-")[1].split(".")[0])
                for p in uninterrupted.glob("model.ckpt-*.index"))
  # Every `every` steps and the last, the newest five kept.
  assert kept == [steps - every * k for k in (4, 3, 2, 1, 0)]
  assert_same_weights(str(out), str(uninterrupted))


def test_one_signalled_worker_stops_every_worker_at_the_same_step(workdir):
  out = workdir / "multi_worker"
  out.mkdir()
  # Two processes step at >= 0.1 s: 117 steps after the signal's step 3
  # leave it seconds to arrive; the rerun trains the rest.
  steps = 120
  args = pretrain_args(workdir, out, FAR_AWAY, "--log_every_n_steps=1",
                       "--collective_timeout_seconds=60", steps=steps)
  procs, logs = multi_worker_cluster(workdir, out, args, "first")
  signalled_at = signal_after_step(procs, procs[1].pid, out, signal.SIGTERM)
  assert wait_all(procs) == [errors.EXIT_STOPPED] * 2
  chief = check_stopped_run(out, logs[0], signalled_at,
                            "because another worker")
  (line,) = stop_lines(logs[1])
  assert line.group(0).startswith("stopped by SIGTERM")
  assert line.group(0).endswith("written by the chief; rerun the same "
                                "command to continue")
  assert int(line.group(3)) == chief
  procs, logs = multi_worker_cluster(workdir, out, args, "rerun")
  assert wait_all(procs, timeout=300) == [0, 0], logs[0].read_text()[-3000:]
  check_resumed(out, chief, steps)


def horovod_ranks(marker, size=2, timeout=300):
  """{rank: pid} of the processes whose environment carries `marker`."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
      try:
        with open("/proc/%s/environ" % pid, "rb") as f:
          env = dict(v.split(b"=", 1) for v in f.read().split(b"\0")
                     if b"=" in v)
        with open("/proc/%s/cmdline" % pid, "rb") as f:
          # The interpreter itself, not a shell or launcher around it.
          is_training = f.read().split(b"\0")[1:2] == [b"run_pretraining.py"]
      except OSError:
        continue
      if (is_training and env.get(b"BERT_TEST_MARKER") == marker.encode()
          and b"HOROVOD_RANK" in env):
        found[int(env[b"HOROVOD_RANK"])] = int(pid)
    if len(found) == size:
      return found
    time.sleep(0.2)
  raise AssertionError("horovod ranks not found")


def launch_horovod(workdir, out, *extra, steps):
  """2 ranks of run_pretraining.py, each reading its own copy of the data."""
  data = [str(workdir / "data.tfrecord")]
  copy = workdir / "data_copy.tfrecord"
  if not copy.exists():
    copy.write_bytes((workdir / "data.tfrecord").read_bytes())
  args = pretrain_args(workdir, out, *extra, steps=steps)
  args[2] = "--input_file=%s,%s" % (data[0], copy)
  marker = uuid.uuid4().hex
  log = open(out / ("horovod.%s.log" % marker[:6]), "w")
  proc = subprocess.Popen(
      [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo",
       sys.executable] + args, cwd=REPO_ROOT, stdout=log,
      stderr=subprocess.STDOUT,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", BERT_TEST_MARKER=marker,
               BERT_HOROVOD_SCRATCH_ROOT=str(out / "scratch")))
  return proc, marker, log.name


@requires_horovod
def test_one_signalled_horovod_rank_stops_every_rank_at_the_same_step(
    workdir):
  out = workdir / "horovod_stop"
  out.mkdir()
  steps = 120  # as for the multi_worker cluster above
  extra = (FAR_AWAY, "--log_every_n_steps=1", "--distribution_strategy=horovod")
  proc, marker, log = launch_horovod(workdir, out, *extra, steps=steps)
  ranks = horovod_ranks(marker)
  signalled_at = signal_after_step([proc], ranks[1], out, signal.SIGTERM)
  proc.wait(timeout=180)
  text = open(log).read()
  # horovodrun itself reports a rank's non-zero exit with a traceback of
  # its own; the ranks print none.
  assert not re.search(r"^\[\d\]<std...>:Traceback", text, re.MULTILINE), \
      text[-3000:]
  lines = {int(m.group(1)): m.group(2) for m in re.finditer(
      r"^\[(\d)\]<stderr>:(stopped .*)$", text, re.MULTILINE)}
  assert sorted(lines) == [0, 1], text[-3000:]
  step = int(STOP_LINE.match(lines[0]).group(3))
  assert STOP_LINE.match(lines[0]).group(1).startswith("because another")
  assert STOP_LINE.match(lines[1]).group(1) == "by SIGTERM"
  assert int(STOP_LINE.match(lines[1]).group(3)) == step >= signalled_at
  assert load_checkpoint(str(out))["global_step"] == step
  proc, _, log = launch_horovod(workdir, out, *extra, steps=steps)
  assert proc.wait(timeout=300) == 0, open(log).read()[-3000:]
  check_resumed(out, step, steps)


@requires_horovod
def test_a_dead_horovod_rank_makes_the_others_exit_with_an_error(workdir):
  out = workdir / "horovod_dead"
  out.mkdir()
  proc, marker, log = launch_horovod(
      workdir, out, FAR_AWAY, "--log_every_n_steps=1",
      "--distribution_strategy=horovod", "--collective_timeout_seconds=20",
      steps=100000)
  ranks = horovod_ranks(marker)
  signal_after_step([proc], ranks[1], out, signal.SIGKILL)
  killed_at = time.time()
  try:
    returncode = proc.wait(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert returncode != 0
  assert time.time() - killed_at < 60
  text = open(log).read()
  assert not re.search(r"^\[\d\]<std...>:Traceback", text, re.MULTILINE), \
      text[-3000:]
  assert re.search(r"^\[0\]<stderr>:error: ", text, re.MULTILINE), text[-3000:]


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("classifier_stop")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + \
      classifier.words_of([os.path.join(classifier.SAMPLE,
                                        name)
                           for name in ("train.tsv", "dev.tsv", "test.tsv")])
  (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  (d / "tiny.json").write_text(json.dumps(
      classifier.tiny_config(len(vocab))))
  return d


def test_run_classifier_stops_on_sigterm_and_resumes(classifier_dir):
  out = classifier_dir / "out"
  out.mkdir()
  args = classifier.classifier_args(
      classifier_dir, out, "--do_train", "--do_eval", "--train_batch_size=2",
      "--num_train_epochs=2", "--log_every_n_steps=1", "--tf_random_seed=1",
      FAR_AWAY)
  log = out / "run.log"
  proc = start(args, log=open(log, "w"))
  signalled_at = signal_after_step([proc], proc.pid, out, signal.SIGTERM)
  assert wait_all([proc]) == [errors.EXIT_STOPPED]
  stopped_at = check_stopped_run(out, log, signalled_at, "by SIGTERM")
  # Stopped means stopped: no evaluation after the interrupted training.
  assert not (out / "eval_results.txt").exists()
  result = run_program(args)
  assert result.returncode == 0, result.stderr[-3000:]
  steps = 400  # 400 training examples x 2 epochs / batch 2
  check_resumed(out, stopped_at, steps)
  assert (out / "eval_results.txt").exists()
