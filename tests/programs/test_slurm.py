"""Training under Slurm: the cluster from SLURM_* variables, srun, sbatch.

The pure tests check the host-list expander against `scontrol show
hostnames` and the mapping of a job step's variables to workers, this task,
ports and GPUs, bad inputs included. The slow ones run the programs on the
real one-node Slurm of tests/slurm_cluster.py: `srun -n 2` equals one device
with the same global batch, and the sbatch template stopped by scancel
checkpoints the step both tasks stopped at and resumes to the last step.
"""

import json
import logging
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from bertkit.common import options
from bertkit.common import slurm_env
from bertkit.common.errors import EXIT_STOPPED, UserError
from bertkit.engine.distributed import cluster_environment
from bertkit.engine.distributed import distribution
from conftest import (REPO_ROOT, expect_user_error, load_checkpoint,
                      requires_slurm, run_ok, run_program, tiny_bert_config)
from helpers.processes import (STOP_LINE, check_resumed, logged_step,
                               srun_exit_codes)

CORPUS = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
VOCAB = os.path.join(REPO_ROOT, "tests", "fixtures", "create_pretraining_data",
                     "vocab.txt")
TEMPLATE = os.path.join(REPO_ROOT, "scripts", "slurm", "pretrain.sbatch")
SEQ, PREDS = 32, 5

# Host lists and what `scontrol show hostnames` (Slurm 22.05) printed for
# them; test_expander_agrees_with_scontrol checks these again where Slurm is.
HOSTLISTS = {
    "node[01-03,7],gpu5": ["node01", "node02", "node03", "node7", "gpu5"],
    "n[8-11]": ["n8", "n9", "n10", "n11"],
    "x[098-101]": ["x098", "x099", "x100", "x101"],
    "a[1-2]b[3-4]": ["a1b3", "a1b4", "a2b3", "a2b4"],
    "rack1-n[1,3]": ["rack1-n1", "rack1-n3"],
    "n[01-3]": ["n01", "n02", "n03"],
    "n[1-03]": ["n1", "n2", "n3"],
    "n[3,1,2]": ["n3", "n1", "n2"],
    "n[1-2],m[05-6]": ["n1", "n2", "m05", "m06"],
    "localhost": ["localhost"],
}


def step_env(**overrides):
  """The variables srun sets for task 3 of 5: 2 + 2 + 1 tasks on 3 nodes."""
  env = {"SLURM_JOB_ID": "17", "SLURM_STEP_ID": "0",
         "SLURM_NTASKS": "5", "SLURM_STEP_NUM_TASKS": "5",
         "SLURM_STEP_NODELIST": "node[01-02],gpu5",
         "SLURM_STEP_TASKS_PER_NODE": "2(x2),1",
         "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1"}
  env.update(overrides)
  return {k: v for k, v in env.items() if v is not None}


@pytest.mark.parametrize("expr", sorted(HOSTLISTS))
def test_expander_matches_slurm(expr):
  assert slurm_env.expand_hostlist(expr) == HOSTLISTS[expr]


@requires_slurm
def test_expander_agrees_with_scontrol(tmp_path):
  # scontrol only parses here; it needs a slurm.conf, not a running Slurm.
  conf = tmp_path / "slurm.conf"
  conf.write_text("ClusterName=x\nSlurmctldHost=localhost\n"
                  "NodeName=localhost CPUs=1\n"
                  "PartitionName=p Nodes=localhost\n")
  for expr, expected in HOSTLISTS.items():
    out = subprocess.run(["scontrol", "show", "hostnames", expr],
                         env=dict(os.environ, SLURM_CONF=str(conf)),
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == expected == slurm_env.expand_hostlist(expr)


@pytest.mark.parametrize("expr", ["n[9-10]x", "n[10-9]", "n[1-", "n1]",
                                  "n[a-b]", "n[1-2],,m"])
def test_expander_refuses_what_slurm_refuses(expr):
  with pytest.raises(UserError, match="invalid Slurm host list"):
    slurm_env.expand_hostlist(expr)


def test_tasks_per_node():
  assert slurm_env.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
  assert slurm_env.expand_tasks_per_node("4") == [4]
  with pytest.raises(UserError, match="tasks-per-node"):
    slurm_env.expand_tasks_per_node("2x3")


def test_step_maps_tasks_to_hosts_and_ports_in_blocks():
  step = slurm_env.step_from_environment(step_env())
  base = 10000 + 17 * 8  # the documented default for job 17
  assert step.workers == [
      "node01:%d" % base, "node01:%d" % (base + 1),
      "node02:%d" % base, "node02:%d" % (base + 1), "gpu5:%d" % base]
  assert (step.task_index, step.local_index, step.gpus) == (3, 1, None)
  assert slurm_env.tf_config(step) == {
      "cluster": {"worker": step.workers},
      "task": {"type": "worker", "index": 3}}
  explicit = slurm_env.step_from_environment(step_env(), port_base=30000)
  assert explicit.workers[:2] == ["node01:30000", "node01:30001"]
  # The job's variables stand in for the step's when srun leaves them out.
  job_only = slurm_env.step_from_environment(step_env(
      SLURM_STEP_NODELIST=None, SLURM_STEP_TASKS_PER_NODE=None,
      SLURM_JOB_NODELIST="node[01-02],gpu5", SLURM_TASKS_PER_NODE="2(x2),1"))
  assert job_only.workers == step.workers


def test_no_cluster_outside_a_step_of_several_tasks():
  assert slurm_env.step_from_environment({}) is None
  assert slurm_env.step_from_environment(step_env(
      SLURM_NTASKS="1", SLURM_STEP_NUM_TASKS="1")) is None
  # The batch script: the job has 5 tasks but this is not a step of them.
  assert slurm_env.step_from_environment(step_env(SLURM_STEP_ID=None)) is None


@pytest.mark.parametrize("overrides,fragment", [
    (dict(SLURM_STEP_NUM_TASKS="4"), "SLURM_STEP_NUM_TASKS=4 contradicts "
     "SLURM_STEP_TASKS_PER_NODE=2(x2),1 on SLURM_STEP_NODELIST=node[01-02],"
     "gpu5 (5 tasks)"),
    (dict(SLURM_STEP_TASKS_PER_NODE="2,2"), "names 3 node(s) but"),
    (dict(SLURM_PROCID="5"), "SLURM_PROCID=5 is out of range"),
    (dict(SLURM_LOCALID="0"), "launch with srun --distribution=block"),
    (dict(SLURM_NODEID="2"), "launch with srun --distribution=block"),
    (dict(SLURM_PROCID=None), "SLURM_PROCID is not set"),
    (dict(SLURM_STEP_NODELIST="node[02-01]"), "ends before it starts"),
])
def test_contradicting_variables_are_refused(overrides, fragment):
  with pytest.raises(UserError) as e:
    slurm_env.step_from_environment(step_env(**overrides))
  assert fragment in str(e.value)


@pytest.mark.parametrize("base", [1000, 65535])
def test_ports_out_of_range_are_refused(base):
  with pytest.raises(UserError, match="must lie in 1024..65535"):
    slurm_env.step_from_environment(step_env(), port_base=base)


def test_a_port_taken_on_this_node_is_refused():
  with socket.socket() as listener:
    listener.bind(("", 0))
    listener.listen()
    port = listener.getsockname()[1]
    step = slurm_env.step_from_environment(
        step_env(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0"),
        port_base=port)
    with pytest.raises(UserError, match="port %d of this Slurm task is in "
                       "use.*--slurm_port_base \\(now %d\\)" % (port, port)):
      slurm_env.check_port_free(step, port)
  slurm_env.check_port_free(step, port)  # free again


@pytest.mark.parametrize("overrides,gpus", [
    # --gres=gpu:4 / --gpus-per-node=4: both tasks of node02 see all four.
    (dict(CUDA_VISIBLE_DEVICES="0,1,2,3"), ["2", "3"]),
    (dict(CUDA_VISIBLE_DEVICES="0,1,2,3", SLURM_GPUS_PER_TASK="1"), ["1"]),
    # --gpus-per-task: Slurm bound them already.
    (dict(CUDA_VISIBLE_DEVICES="5", SLURM_GPUS_PER_TASK="a100:1"), ["5"]),
    # One task on the node keeps all of them.
    (dict(CUDA_VISIBLE_DEVICES="0,1", SLURM_PROCID="4", SLURM_LOCALID="0",
          SLURM_NODEID="2"), ["0", "1"]),
    (dict(CUDA_VISIBLE_DEVICES=""), None),
])
def test_gpus_per_task(overrides, gpus):
  assert slurm_env.step_from_environment(step_env(**overrides)).gpus == gpus


@pytest.mark.parametrize("overrides,fragment", [
    (dict(CUDA_VISIBLE_DEVICES="0,1,2"), "cannot be shared out evenly"),
    (dict(CUDA_VISIBLE_DEVICES="0,1,2", SLURM_GPUS_PER_TASK="2"),
     "need more GPUs than the 3 visible"),
])
def test_gpus_that_do_not_share_out_are_refused(overrides, fragment):
  with pytest.raises(UserError, match=fragment):
    slurm_env.step_from_environment(step_env(**overrides))


def flag_values(**overrides):
  """The DistributionOptions of these tests' runs, with `overrides`."""
  values = dict(distribution_strategy=None, slurm_port_base=None)
  values.update(overrides)
  return options.DistributionOptions(**values)


@pytest.fixture
def slurm_task(monkeypatch):
  """This process as task 1 of a 2-task step on localhost (free ports)."""
  for name in [n for n in os.environ if n.startswith("SLURM_")]:
    monkeypatch.delenv(name)
  for name in ("TF_CONFIG", "CUDA_VISIBLE_DEVICES"):
    # Recorded as unset, so that what use_slurm_cluster sets goes again.
    monkeypatch.setenv(name, "")
    monkeypatch.delenv(name)
  for name, value in step_env(
      SLURM_NTASKS="2", SLURM_STEP_NUM_TASKS="2",
      SLURM_STEP_NODELIST="localhost", SLURM_STEP_TASKS_PER_NODE="2",
      SLURM_PROCID="1", SLURM_LOCALID="1", SLURM_NODEID="0").items():
    monkeypatch.setenv(name, value)
  with socket.socket() as s:
    s.bind(("", 0))
    return s.getsockname()[1] - 1  # the base whose task 1 gets that port


def test_the_slurm_step_becomes_tf_config(slurm_task, caplog):
  with caplog.at_level(logging.INFO):
    distribution.use_slurm_cluster(flag_values(slurm_port_base=slurm_task))
  workers = ["localhost:%d" % (slurm_task + i) for i in range(2)]
  assert json.loads(os.environ["TF_CONFIG"]) == {
      "cluster": {"worker": workers}, "task": {"type": "worker", "index": 1}}
  assert cluster_environment.cluster_task() == ("worker-1", False)
  assert ("cluster from Slurm: 2 workers (%s), this is task 1 (GPUs: none; "
          "from SLURM_STEP_NODELIST=localhost SLURM_STEP_TASKS_PER_NODE=2)"
          % ", ".join(workers)) in caplog.text


def test_tf_config_wins_over_slurm_with_a_warning(slurm_task, monkeypatch,
                                                  caplog):
  own = {"cluster": {"worker": ["a:1", "b:2", "c:3"]},
         "task": {"type": "worker", "index": 2}}
  monkeypatch.setenv("TF_CONFIG", json.dumps(own))
  cluster, task, step = cluster_environment.cluster_from_environment()
  assert (cluster, task, step) == (own["cluster"], own["task"], None)
  assert "using TF_CONFIG's" in caplog.text
  distribution.use_slurm_cluster(flag_values(slurm_port_base=slurm_task))
  assert json.loads(os.environ["TF_CONFIG"]) == own


@pytest.mark.parametrize("strategy", ["one_device", "mirrored",
                                      "central_storage"])
def test_a_step_of_several_tasks_refuses_one_process_strategies(
    slurm_task, strategy):
  with pytest.raises(UserError, match="a Slurm job step of 2 tasks trains "
                     "as one multi_worker cluster, not with "
                     "--distribution_strategy=%s" % strategy):
    distribution.use_slurm_cluster(flag_values(distribution_strategy=strategy,
                                               slurm_port_base=slurm_task))
  assert "TF_CONFIG" not in os.environ


def test_horovod_and_one_task_steps_get_no_tf_config(slurm_task, monkeypatch):
  distribution.use_slurm_cluster(flag_values(distribution_strategy="horovod"))
  assert "TF_CONFIG" not in os.environ
  monkeypatch.setenv("SLURM_NTASKS", "1")
  monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1")
  distribution.use_slurm_cluster(flag_values(slurm_port_base=slurm_task))
  assert "TF_CONFIG" not in os.environ


def test_a_worker_of_a_cluster_counts_every_gpu_it_sees(monkeypatch):
  monkeypatch.setenv("TF_CONFIG", json.dumps(
      {"cluster": {"worker": ["a:1", "b:2"]},
       "task": {"type": "worker", "index": 0}}))
  plan = distribution.plan(options.DistributionOptions(), num_gpus_present=4)
  assert (plan.name, plan.num_replicas) == ("multi_worker", 8)
  assert plan.devices == ["/gpu:%d" % i for i in range(4)]
  with pytest.raises(UserError, match="--num_gpus=2 but each worker"):
    distribution.plan(options.DistributionOptions(num_gpus=2),
                      num_gpus_present=4)


# -- the programs on a real Slurm ------------------------------------------


@pytest.fixture(scope="module")
def slurm_data(tmp_path_factory):
  """tiny.json and records made by create_pretraining_data.py from
  sample_data's text."""
  d = tmp_path_factory.mktemp("slurm_data")
  with open(VOCAB) as f:
    vocab_size = sum(1 for _ in f)
  (d / "tiny.json").write_text(json.dumps(
      tiny_bert_config(vocab_size=vocab_size)))
  run_ok(["create_pretraining_data.py", "--input_file=" + CORPUS,
          "--output_file=%s" % (d / "data.tfrecord"), "--vocab_file=" + VOCAB,
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--dupe_factor=1", "--random_seed=3"])
  return d


def train_args(data, output_dir, *extra, steps=6):
  return [sys.executable, "run_pretraining.py",
          "--bert_config_file=%s" % (data / "tiny.json"),
          "--input_file=%s" % (data / "data.tfrecord"),
          "--output_dir=%s" % output_dir, "--do_train",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--train_batch_size=8", "--num_train_steps=%d" % steps,
          "--num_warmup_steps=2", "--learning_rate=1e-3",
          "--tf_random_seed=1"] + list(extra)


def slurm_env_for_tests(cluster, **extra):
  env = dict(cluster.env, TF_CPP_MIN_LOG_LEVEL="2", **extra)
  env.pop("TF_CONFIG", None)
  return env


@pytest.mark.slow
def test_srun_two_tasks_equal_one_device(slurm_cluster, slurm_data):
  reference = slurm_data / "one_device"
  run_ok(train_args(slurm_data, reference)[1:])
  out = slurm_data / "srun"
  result = slurm_cluster.srun(
      "-n", "2", *train_args(slurm_data, out), cwd=REPO_ROOT, timeout=300,
      env=slurm_env_for_tests(slurm_cluster))
  found = re.findall(r"cluster from Slurm: 2 workers \(localhost:(\d+), "
                     r"localhost:(\d+)\), this is task (\d)", result.stderr)
  assert sorted(f[2] for f in found) == ["0", "1"], result.stderr[-3000:]
  first, second = map(int, found[0][:2])
  assert second == first + 1 and all(f[:2] == found[0][:2] for f in found)
  assert "strategy=multi_worker replicas=2 (2 worker(s) x /cpu:0)" in (
      result.stderr)
  expected = load_checkpoint(str(reference))
  trained = load_checkpoint(str(out))
  assert set(trained) == set(expected)
  assert trained["global_step"] == expected["global_step"] == 6
  for name, value in expected.items():
    np.testing.assert_allclose(trained[name], value, rtol=1e-4, atol=1e-6,
                               err_msg=name)
  # The steps moved the weights: equality is not two untouched copies.
  assert np.abs(expected["bert/pooler/dense/kernel/adam_m"]).max() > 0


@pytest.mark.slow
def test_sbatch_template_scancel_checkpoints_and_resubmit_finishes(
    slurm_cluster, slurm_data):
  out = slurm_data / "sbatch"
  out.mkdir()
  # The tasks stop a few steps after the signal (at step 8 of a run signalled
  # after step 3 here); the rerun trains the rest.
  steps = 100
  env = slurm_env_for_tests(
      slurm_cluster, BERT_DIR=REPO_ROOT, PYTHON=sys.executable,
      BERT_CONFIG_FILE=str(slurm_data / "tiny.json"),
      INPUT_FILE=str(slurm_data / "data.tfrecord"), OUTPUT_DIR=str(out),
      TRAIN_BATCH_SIZE="8", MAX_SEQ_LENGTH=str(SEQ),
      MAX_PREDICTIONS_PER_SEQ=str(PREDS), NUM_TRAIN_STEPS=str(steps),
      NUM_WARMUP_STEPS="2", LEARNING_RATE="1e-3",
      SAVE_CHECKPOINTS_STEPS="1000000")
  log = out / "job.out"
  # This machine's shape instead of the template's (one node, 2 CPUs, no
  # GPUs); the rest of the template runs as written.
  submit = ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
            "--gpus-per-node=0", "--output=%s" % log, TEMPLATE,
            "--log_every_n_steps=1", "--tf_random_seed=1",
            "--collective_timeout_seconds=60"]
  job = slurm_cluster.sbatch(*submit, env=env)
  deadline = time.time() + 120
  while logged_step(out) < 3:
    assert slurm_cluster.job(job)["JobState"] in ("PENDING", "RUNNING"), (
        log.read_text()[-3000:])
    assert time.time() < deadline, log.read_text()[-3000:]
    time.sleep(0.1)
  slurm_cluster.scancel(job)
  assert slurm_cluster.wait_for_job(job)["JobState"] == "CANCELLED"
  text = log.read_text()
  assert "Traceback" not in text, text[-3000:]
  stops = STOP_LINE.findall(text)
  assert len(stops) == 2, text[-3000:]
  step = int(stops[0][2])
  assert [int(s[2]) for s in stops] == [step, step]
  assert sorted(s[4] for s in stops) == ["", " by the chief"]
  assert 3 <= step < steps, step
  assert srun_exit_codes(text) == {0: EXIT_STOPPED, 1: EXIT_STOPPED}
  assert load_checkpoint(str(out / ("model.ckpt-%d" % step)))[
      "global_step"] == step
  job = slurm_cluster.sbatch(*submit, env=env)
  fields = slurm_cluster.wait_for_job(job, timeout=300)
  assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), (
      log.read_text()[-3000:])
  check_resumed(out, step, steps)


@pytest.mark.slow
def test_contradicting_slurm_variables_exit_with_one_error_line(slurm_data):
  result = run_program(train_args(slurm_data, slurm_data / "bad")[1:], env={
      "TF_CONFIG": None, "SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0",
      "SLURM_NTASKS": "3", "SLURM_STEP_NODELIST": "n[1-2]",
      "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "0",
      "SLURM_LOCALID": "0", "SLURM_NODEID": "0"})
  expect_user_error(result, "SLURM_NTASKS=3 contradicts "
                    "SLURM_STEP_TASKS_PER_NODE=2(x2) on "
                    "SLURM_STEP_NODELIST=n[1-2] (4 tasks)")
