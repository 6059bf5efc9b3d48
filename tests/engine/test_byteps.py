"""Tests of --distribution_strategy=byteps (byteps_engine.py) with real
BytePS processes on 127.0.0.1: a scheduler, a server and 2 workers.

The tests that start BytePS need it (scripts/install_byteps.sh) and are
skipped, with that reason, without it. The worker environment checks, the
launcher script's argument checks and the missing-BytePS error run
everywhere. That two workers train as one device with the global batch is in
test_global_batch_math.py, with every other engine.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import errors
from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.engine.distributed import cluster_environment
from bertkit.engine.distributed import distribution
from conftest import (REPO_ROOT, load_checkpoint, requires_byteps,
                      run_program, tiny_bert_config, write_real_text_records)
from helpers.processes import (STOP_LINE, check_resumed, free_port, kill_launch,
                               launch_pids, logged_step)
from helpers.records import flip_a_bit_in_records

LAUNCHER = os.path.join(REPO_ROOT, "scripts", "run_pre_byteps.sh")
SEQ, PREDS, VOCAB = 64, 10, 1000


def worker_environment(port, worker_id, num_workers=2):
  return {"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1",
          "DMLC_PS_ROOT_PORT": str(port), "DMLC_NUM_WORKER": str(num_workers),
          "DMLC_NUM_SERVER": "1", "DMLC_WORKER_ID": str(worker_id)}


@pytest.mark.parametrize("change,fragments", [
    ({"DMLC_ROLE": None, "DMLC_NUM_SERVER": None},
     ["DMLC_ROLE, DMLC_NUM_SERVER are not set", "scripts/run_pre_byteps.sh"]),
    ({"DMLC_ROLE": "server"}, ["DMLC_ROLE=server", "import byteps.server"]),
    ({"DMLC_NUM_WORKER": "two"}, ["DMLC_NUM_WORKER=two", "integer"]),
    ({"DMLC_WORKER_ID": "2"}, ["DMLC_WORKER_ID=2", "DMLC_NUM_WORKER=2"]),
    ({"DMLC_NUM_SERVER": "0"}, ["DMLC_NUM_SERVER=0", "at least 1"]),
    ({"DMLC_PS_ROOT_PORT": "70000"}, ["DMLC_PS_ROOT_PORT=70000", "port"]),
    ({"BYTEPS_LOCAL_RANK": "1"}, ["BYTEPS_LOCAL_RANK=1",
                                  "BYTEPS_LOCAL_SIZE=1"]),
])
def test_a_bad_worker_environment_is_one_clear_error(change, fragments):
  env = worker_environment(1234, 1)
  for name, value in change.items():
    if value is None:
      env.pop(name)
    else:
      env[name] = value
  with pytest.raises(UserError) as raised:
    cluster_environment.byteps_world_size(env)
  for fragment in fragments:
    assert fragment in str(raised.value)


def test_world_size_counts_worker_processes():
  assert cluster_environment.byteps_world_size(worker_environment(1234, 1)) == 2
  # A GPU machine's worker of 4 local ranks counts 4.
  env = dict(worker_environment(1234, 0, num_workers=3),
             BYTEPS_LOCAL_SIZE="4", BYTEPS_LOCAL_RANK="3")
  assert cluster_environment.byteps_world_size(env) == 12


def plan_values(**overrides):
  """The DistributionOptions of these tests' runs, with `overrides`."""
  values = dict(distribution_strategy="byteps", cpu_replicas=0, num_gpus=0,
                multi_gpu=False, all_reduce_alg="auto",
                collective_timeout_seconds=600)
  values.update(overrides)
  return options.DistributionOptions(**values)


def test_plan_is_one_cpu_device_per_worker(monkeypatch):
  for name, value in worker_environment(1234, 0).items():
    monkeypatch.setenv(name, value)
  monkeypatch.delenv("TF_CONFIG", raising=False)
  plan = distribution.plan(plan_values(), 0)
  assert (plan.name, plan.devices, plan.num_workers, plan.num_replicas) == (
      "byteps", ["/cpu:0"], 2, 2)
  assert distribution.build_strategy(plan) is None
  with pytest.raises(UserError, match="scripts/run_pre_byteps.sh -n N"):
    distribution.plan(plan_values(cpu_replicas=2), 0)


def test_cpu_workers_need_a_local_size_of_one(monkeypatch):
  # pylint: disable-next=g-import-not-at-top
  from bertkit.engine.distributed import byteps_engine
  monkeypatch.setenv("BYTEPS_LOCAL_SIZE", "2")
  monkeypatch.setenv("BYTEPS_LOCAL_RANK", "0")
  plan = distribution.StrategyPlan("byteps", ["/cpu:0"], 2, "auto", 600, None)
  with pytest.raises(UserError, match=r"^BYTEPS_LOCAL_SIZE=2, but without "
                     r"GPUs every BytePS worker is a process of its own"):
    byteps_engine.init(plan, precision=None)


def hide_byteps(tmp_path):
  """A PYTHONPATH entry whose `byteps` package fails to import."""
  fake = tmp_path / "hide" / "byteps" / "tensorflow"
  fake.mkdir(parents=True)
  (fake.parent / "__init__.py").write_text("")
  (fake / "__init__.py").write_text(
      "raise ImportError(\"No module named 'byteps.tensorflow' (hidden by "
      "the test)\")\n")
  return {"PYTHONPATH": str(tmp_path / "hide")}


@pytest.fixture(scope="module")
def real_text(tmp_path_factory):
  """A vocabulary and records made from sample_data/corpus.txt, and a tiny
  config for them."""
  d = tmp_path_factory.mktemp("byteps_text")
  write_real_text_records(d, SEQ, PREDS, VOCAB, tiny_bert_config(
      max_position_embeddings=SEQ, vocab_size=VOCAB))
  return d


def worker_args(real_text, output_dir, *extra, inputs=None):
  """run_pretraining.py's arguments for one BytePS worker of a short run."""
  return ["run_pretraining.py",
          "--bert_config_file=%s" % (real_text / "config.json"),
          "--input_file=%s" % (inputs or real_text / "records.tfrecord"),
          "--output_dir=%s" % output_dir, "--do_train",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--train_batch_size=8", "--distribution_strategy=byteps"] + list(
              extra)


def test_missing_byteps_is_one_error_line(real_text, tmp_path):
  env = dict(worker_environment(free_port(), 0), **hide_byteps(tmp_path))
  result = run_program(worker_args(real_text, tmp_path / "out",
                                   "--num_train_steps=2"), env=env)
  assert result.returncode == errors.EXIT_USER_ERROR, result.stderr[-2000:]
  lines = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert len(lines) == 1, result.stderr[-2000:]
  assert "--distribution_strategy=byteps needs BytePS" in lines[0]
  assert "scripts/install_byteps.sh" in lines[0]
  assert "Traceback" not in result.stderr


def test_launcher_help_and_bad_arguments():
  shown = subprocess.run([LAUNCHER, "--help"], capture_output=True,
                         text=True)
  assert shown.returncode == 0
  assert "--np N" in shown.stdout and "GLOBAL batch" in shown.stdout
  env = {k: v for k, v in os.environ.items()
         if k not in ("INPUT_FILE", "OUTPUT_DIR")}
  for argv, line in [
      (["-n", "2"], "error: --input (or INPUT_FILE) is required"),
      (["-n", "0", "-i", "x", "-o", "y"],
       "error: --np must be a positive integer, got '0'"),
      (["-P", "99999", "-i", "x", "-o", "y"],
       "error: --port must be a port number (1-65535), got '99999'"),
      (["-H", "a;b", "-i", "x", "-o", "y"],
       "error: --hosts takes host names separated by commas, got 'a;b'"),
      (["-H", "localhost,192.0.2.7", "-i", "x", "-o", "y"],
       "error: --hosts: localhost,192.0.2.7 resolve to 127.0.0.1 192.0.2.7 "
       "here, loopback beside other machines' addresses; give every "
       "machine's network address")]:
    result = subprocess.run([LAUNCHER] + argv, capture_output=True,
                            text=True, env=dict(env, PYTHON=sys.executable))
    assert result.returncode == 2, argv
    assert result.stderr.strip() == line, result.stderr


def test_launcher_without_byteps_is_one_error_line(tmp_path):
  fake = tmp_path / "hide" / "byteps"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text("")  # no byteps.server
  result = subprocess.run(
      [LAUNCHER, "-i", "x", "-o", "y"], capture_output=True, text=True,
      env=dict(os.environ, PYTHON=sys.executable,
               PYTHONPATH=str(tmp_path / "hide")))
  assert result.returncode == 2
  assert result.stderr.strip() == (
      "error: %s cannot import byteps: build it with scripts/install_byteps.sh"
      " (see docs/byteps.md)" % sys.executable)


class Services(object):
  """A BytePS scheduler and one server on 127.0.0.1, as real processes."""

  def __init__(self, log_dir, num_workers=2):
    self.port = free_port()
    _LAUNCHED_PORTS.append(self.port)  # its workers carry the port too
    self.num_workers = num_workers
    self.procs = []
    for role in ("scheduler", "server"):
      env = dict(os.environ, **worker_environment(self.port, 0, num_workers))
      env.update(DMLC_ROLE=role, DMLC_NODE_HOST="127.0.0.1",
                 TF_CPP_MIN_LOG_LEVEL="3", PS_ZMQ_IDLE_SLEEP_US="100")
      self.procs.append(subprocess.Popen(
          [sys.executable, "-c", "import byteps.server"],
          stdout=open(os.path.join(log_dir, role + ".log"), "w"),
          stderr=subprocess.STDOUT, env=env))

  def worker_env(self, worker_id):
    return dict(TF_CPP_MIN_LOG_LEVEL="3", DMLC_NODE_HOST="127.0.0.1",
                **worker_environment(self.port, worker_id, self.num_workers))

  def stop(self, timeout=30):
    """The services' exit codes: 0 each once every worker shut down."""
    codes = []
    for proc in self.procs:
      try:
        codes.append(proc.wait(timeout=timeout))
      except subprocess.TimeoutExpired:
        proc.kill()
        codes.append(proc.wait())
    return codes


PROBE = textwrap.dedent("""\
    import json, sys
    sys.path.insert(0, %(repo)r)
    import numpy as np
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    import optimization
    from bertkit.engine.distributed import byteps_engine
    from bertkit.engine.distributed import distribution
    from bertkit.engine.loop import engine_setup
    from bertkit.engine.loop.precision import LossScale

    from bertkit.common import options
    plan = distribution.plan(options.DistributionOptions(
        distribution_strategy="byteps", collective_timeout_seconds=60), 0)
    FP16 = engine_setup.resolve_precision(True, False, 0, False, set(),
                                            LossScale(1024, 100))
    group = byteps_engine.init(plan, FP16)
    rank = group.rank
    value = tf.constant([1.0 / 3.0, rank + 1.0])
    sum32 = group.sum_across_processes([value], False)[0]
    sum16 = group.sum_across_processes([value], True)[0]
    tf.train.get_or_create_global_step()
    var = tf.get_variable("v", initializer=tf.constant([10.0 * rank + 1.0]))
    inject = tf.placeholder_with_default(False, [])
    w = tf.get_variable("w", initializer=tf.constant([1.0, 2.0]))
    scale = tf.where(tf.logical_and(inject, tf.equal(rank, 1)), np.inf, 1.0)
    step = optimization.create_accumulating_optimizer(
        [lambda: tf.reduce_sum(tf.square(w)) * scale], 0.1, 10, 0,
        precision=FP16, replicas=distribution.Replicas(group))
    hook = byteps_engine.broadcast_hook()
    hook.begin()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      hook.after_create_session(sess, None)
      out = {"rank": rank, "size": group.size,
             "sum32": sess.run(sum32).tolist(),
             "sum16": sess.run(sum16).tolist(),
             "dtype16": sess.run(sum16).dtype.name,
             "broadcast": sess.run(var).tolist(), "fp16": []}
      for poisoned in (False, True, False):
        sess.run(step.train_op, {inject: poisoned})
        global_step, loss_scale, weights = sess.run(
            [tf.train.get_global_step(), step.loss_scale, w])
        out["fp16"].append([int(global_step), float(loss_scale),
                            weights.tolist()])
    print("PROBE " + json.dumps(out), flush=True)
    """)


@requires_byteps
@pytest.mark.slow
def test_two_workers_sum_broadcast_and_skip_an_overflow_together(tmp_path):
  probe = tmp_path / "probe.py"
  probe.write_text(PROBE % {"repo": REPO_ROOT})
  services = Services(str(tmp_path))
  workers = [subprocess.Popen([sys.executable, str(probe)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True,
                              env=dict(os.environ, **services.worker_env(i)))
             for i in (0, 1)]
  try:
    results = [w.communicate(timeout=300) for w in workers]
  finally:
    for w in workers:
      if w.poll() is None:
        w.kill()
  out = {}
  for worker, (stdout, stderr) in zip(workers, results):
    assert worker.returncode == 0, stderr[-3000:]
    payload = json.loads(re.search(r"^PROBE (.*)$", stdout, re.M).group(1))
    out[payload["rank"]] = payload
  # Every worker shut BytePS down, so the scheduler and server end cleanly.
  assert services.stop() == [0, 0]
  assert sorted(out) == [0, 1]
  for rank in (0, 1):
    assert out[rank]["size"] == 2
    assert out[rank]["sum32"] == pytest.approx([2.0 / 3.0, 3.0], abs=1e-7)
    # float16 on the wire: 1/3 rounds to 0.33325, and back in float32.
    assert out[rank]["sum16"] == pytest.approx([0.6665, 3.0], abs=1e-4)
    assert out[rank]["sum16"][0] != pytest.approx(2.0 / 3.0, abs=1e-5)
    assert out[rank]["dtype16"] == "float32"
    # Worker 1 started from 11.0; the broadcast gives it worker 0's 1.0.
    assert out[rank]["broadcast"] == [1.0]
  # The loss scale sees the gradients summed over the workers, so worker 1's
  # overflow makes both skip the step and halve their scale.
  assert out[0]["fp16"] == out[1]["fp16"]
  first, skipped, third = out[0]["fp16"]
  assert first[:2] == [1, 1024.0] and first[2] != [1.0, 2.0]
  assert skipped == [1, 512.0, first[2]]
  assert third[:2] == [2, 512.0] and third[2] != first[2]


def launch(real_text, output_dir, *extra, steps, port, log_name):
  """run_pretraining.py on 2 BytePS workers through the launcher."""
  log = open(os.path.join(str(output_dir), log_name), "w")
  env = dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="3",
             BERT_BYTEPS_SCRATCH_ROOT=str(output_dir) + "-scratch")
  command = [LAUNCHER, "-n", "2", "-P", str(port),
             "-c", str(real_text / "config.json"),
             "-i", str(real_text / "records.tfrecord"),
             "-o", str(output_dir), "-b", "8", "-s", str(SEQ),
             "-p", str(PREDS), "-t", str(steps), "-w", "2", "-l", "1e-3",
             "--", "--tf_random_seed=1", "--log_every_n_steps=1",
             "--save_checkpoints_steps=1000000"] + list(extra)
  _LAUNCHED_PORTS.append(port)
  proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)
  return proc, log.name


def worker_pids(port, timeout=120):
  """{rank: pid} of the launched run_pretraining.py workers on `port`."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
      try:
        with open("/proc/%s/environ" % pid, "rb") as f:
          env = dict(v.split(b"=", 1) for v in f.read().split(b"\0")
                     if b"=" in v)
        with open("/proc/%s/cmdline" % pid, "rb") as f:
          is_training = f.read().split(b"\0")[1:2] == [
              os.path.join(REPO_ROOT, "run_pretraining.py").encode()]
      except OSError:
        continue
      if is_training and env.get(b"BERT_BYTEPS_LAUNCH") == str(port).encode():
        found[int(env[b"DMLC_WORKER_ID"])] = int(pid)
    if len(found) == 2:
      return found
    time.sleep(0.2)
  raise AssertionError("BytePS workers not found")


def wait_for_step(proc, output_dir, min_step, timeout=300):
  deadline = time.time() + timeout
  while logged_step(output_dir) < min_step:
    assert proc.poll() is None, "the launcher ended before step %d" % min_step
    assert time.time() < deadline, "step %d never logged" % min_step
    time.sleep(0.05)
  return logged_step(output_dir)


# The scheduler ports of this test's launches, for `cleanup`.
_LAUNCHED_PORTS = []


@pytest.fixture(autouse=True)
def cleanup():
  """After each test, nothing of its launches runs, even when it failed."""
  yield
  while _LAUNCHED_PORTS:
    kill_launch(_LAUNCHED_PORTS.pop())


def finish(proc, timeout=180):
  try:
    return proc.wait(timeout=timeout)
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)


def stop_lines(log_path):
  text = open(log_path).read()
  assert "Traceback" not in text, text[-3000:]
  return {int(m.group(1)): STOP_LINE.match(m.group(2))
          for m in re.finditer(r"^\[(\d)\] (stopped .*)$", text, re.M)}, text


@requires_byteps
@pytest.mark.slow
def test_sigterm_stops_every_worker_at_the_same_step(real_text, tmp_path):
  out = tmp_path / "stop"
  out.mkdir()
  steps, port = 100, free_port()
  proc, log = launch(real_text, out, steps=steps, port=port, log_name="1.log")
  pids = worker_pids(port)
  signalled_at = wait_for_step(proc, out, 3)
  os.kill(pids[1], signal.SIGTERM)
  assert finish(proc) == errors.EXIT_STOPPED, open(log).read()[-3000:]
  lines, text = stop_lines(log)
  assert sorted(lines) == [0, 1], text[-3000:]
  step = int(lines[0].group(3))
  assert lines[0].group(1).startswith("because another")
  assert lines[1].group(1) == "by SIGTERM"
  assert int(lines[1].group(3)) == step >= signalled_at
  assert tf.train.latest_checkpoint(str(out)) == str(
      out / ("model.ckpt-%d" % step))
  assert load_checkpoint(str(out))["global_step"] == step

  # SIGTERM to the launcher (a scheduler signalling the batch script) goes
  # to both workers once; they stop together again.
  port = free_port()
  proc, log = launch(real_text, out, steps=steps, port=port, log_name="2.log")
  worker_pids(port)
  signalled_at = wait_for_step(proc, out, step + 3)
  os.kill(proc.pid, signal.SIGTERM)
  assert finish(proc) == errors.EXIT_STOPPED, open(log).read()[-3000:]
  lines, text = stop_lines(log)
  assert sorted(lines) == [0, 1], text[-3000:]
  second = int(lines[0].group(3))
  assert [l.group(1) for l in lines.values()] == ["by SIGTERM"] * 2
  assert int(lines[1].group(3)) == second >= signalled_at
  assert load_checkpoint(str(out))["global_step"] == second

  proc, log = launch(real_text, out, steps=steps, port=free_port(),
                     log_name="3.log")
  assert finish(proc, timeout=300) == 0, open(log).read()[-3000:]
  check_resumed(out, second, steps)


@requires_byteps
@pytest.mark.slow
def test_a_dead_worker_ends_the_other_with_one_error_line(real_text,
                                                          tmp_path):
  out = tmp_path / "dead"
  out.mkdir()
  port = free_port()
  proc, log = launch(real_text, out, "--collective_timeout_seconds=15",
                     steps=100000, port=port, log_name="dead.log")
  pids = worker_pids(port)
  wait_for_step(proc, out, 3)
  os.kill(pids[1], signal.SIGKILL)
  killed_at = time.time()
  assert finish(proc, timeout=120) == errors.EXIT_TRAINING_FAILED
  assert time.time() - killed_at < 60
  text = open(log).read()
  assert "Traceback" not in text, text[-3000:]
  error_lines = [l for l in text.splitlines() if "error:" in l]
  assert len(error_lines) == 1, text[-3000:]
  assert error_lines[0].startswith("error: no training step finished for ")
  assert "rerun every worker with the same command" in error_lines[0].lower()
  # The scheduler and the server did not outlive the launcher.
  assert not launch_pids(port)


@requires_byteps
@pytest.mark.slow
def test_a_worker_that_never_starts_ends_the_other_at_start_up(real_text,
                                                               tmp_path):
  # 2 workers announced, 1 started: the start-up broadcast waits for the
  # other.
  services = Services(str(tmp_path))
  try:
    started = time.time()
    result = run_program(
        worker_args(real_text, tmp_path / "out", "--num_train_steps=2",
                    "--collective_timeout_seconds=5"),
        env=services.worker_env(0), timeout=120)
  finally:
    for proc in services.procs:
      proc.kill()
    services.stop()
  assert result.returncode == errors.EXIT_TRAINING_FAILED, result.stderr[-2000:]
  assert time.time() - started < 60
  lines = [l for l in result.stderr.splitlines() if "error:" in l]
  # The wait is the start-up broadcast's, bounded by the stall watchdog.
  assert len(lines) == 1, result.stderr[-2000:]
  assert re.fullmatch(
      r"error: no training step finished for [56] s \(--collective_timeout_"
      r"seconds=5\): another worker probably died\. Rerun every worker with "
      r"the same command to resume from the last checkpoint", lines[0])
  assert "Traceback" not in result.stderr


@requires_byteps
@pytest.mark.slow
def test_a_failed_worker_does_not_wait_for_ever_at_exit(real_text, tmp_path):
  # Worker 1 reads a file with a corrupt record and fails; worker 0 then
  # waits in a push_pull until its stall watchdog ends it, and worker 1 in
  # BytePS's shutdown (which waits for every worker) until its exit timer
  # does: both exit 3 instead of hanging.
  corrupt = tmp_path / "corrupt.tfrecord"
  flip_a_bit_in_records(real_text / "records.tfrecord", corrupt, [40])
  services = Services(str(tmp_path))
  args = [sys.executable] + worker_args(
      real_text, tmp_path / "out", "--num_train_steps=1000",
      "--collective_timeout_seconds=10",
      inputs="%s,%s" % (real_text / "records.tfrecord", corrupt))
  workers = [subprocess.Popen(
      args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, env=dict(os.environ, BERT_BYTEPS_SCRATCH_ROOT=str(
          tmp_path / "scratch"), **services.worker_env(i))) for i in (0, 1)]
  try:
    results = [w.communicate(timeout=240) for w in workers]
  finally:
    for proc in workers + services.procs:
      if proc.poll() is None:
        proc.kill()
    services.stop()
  errors_of = [[l for l in stderr.splitlines() if l.startswith("error:")]
               for _, stderr in results]
  assert [w.returncode for w in workers] == [errors.EXIT_TRAINING_FAILED] * 2
  assert len(errors_of[0]) == 1, results[0][1][-2000:]
  assert errors_of[0][0].startswith("error: no training step finished for ")
  assert len(errors_of[1]) == 2, results[1][1][-2000:]
  assert errors_of[1][0].startswith("error: the input data is corrupt: %s"
                                    % corrupt)
  assert errors_of[1][1] == (
      "error: BytePS's shutdown waited 10 s (--collective_timeout_seconds) "
      "for the other workers, which have not finished; exiting without it")
  for _, stderr in results:
    assert "Traceback" not in stderr
