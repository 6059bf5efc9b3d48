"""Horovod and pretraining-data creation on a real Slurm (`slurm_cluster`).

scripts/slurm/pretrain_horovod.sbatch is submitted with sbatch as a user
does (only the GPU and size lines overridden for this one CPU node): its 2
horovod ranks, started as srun tasks by scripts/slurm/horovod_srun.py, must
train exactly as one device with the same global batch, on records made from
real text. scripts/slurm/create_data_dask.py starts a dask-jobqueue
SLURMCluster on the same Slurm and must write the bytes --num_workers=1
writes.
"""

import os
import re
import subprocess
import sys
import time

import pytest

from bertkit.common import errors
from conftest import (REPO_ROOT, load_checkpoint, requires_horovod, run_ok,
                      run_program)
from helpers.corpora import (SAMPLE_CORPUS, command as dask_command,
                             directory_bytes, shard_files)
from helpers.global_batch import (BATCH, CONFIG, PREDS, SEQ, STEPS, VOCAB,
                                  assert_same_weights, pretrain_args,
                                  write_rank_records)
from helpers.processes import hide_horovod, srun_exit_codes

SLURM_DIR = os.path.join(REPO_ROOT, "scripts", "slurm")
HOROVOD_SBATCH = os.path.join(SLURM_DIR, "pretrain_horovod.sbatch")
HOROVOD_SRUN = os.path.join(SLURM_DIR, "horovod_srun.py")
CREATE_DATA_DASK = os.path.join(SLURM_DIR, "create_data_dask.py")
CORPUS = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")


def one_error_line(result, *fragments):
  """Asserts a non-zero exit whose stderr has one `error:` line, the last,
  holding every fragment, and no traceback."""
  assert result.returncode != 0, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert [l for l in lines if l.startswith("error:")] == lines[-1:], \
      result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  for fragment in fragments:
    assert fragment in lines[-1], lines[-1]
  return lines[-1]


@pytest.fixture(scope="module")
def text_records(tmp_path_factory):
  """Vocab, config and records from sample_data/corpus.txt, and the files of
  2 horovod ranks: rank r's k-th batch of BATCH/2 is the r-th half of the
  k-th global batch of the records (as in test_global_batch_math)."""
  d = tmp_path_factory.mktemp("slurm_text")
  run_ok(["create_vocab.py", "--input_file=%s" % CORPUS,
          "--output_file=%s" % (d / "vocab.txt"), "--vocab_size=%d" % VOCAB])
  run_ok(["create_pretraining_data.py", "--input_file=%s" % CORPUS,
          "--output_file=%s" % (d / "records.tfrecord"),
          "--vocab_file=%s" % (d / "vocab.txt"),
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--dupe_factor=1"])
  (d / "config.json").write_text(__import__("json").dumps(CONFIG))
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel
  records = list(tf.io.tf_record_iterator(str(d / "records.tfrecord")))
  return {"dir": d, "records": str(d / "records.tfrecord"),
          "rank_files": write_rank_records(d, records)}


def submit_horovod_job(slurm_cluster, text_records, tmp_path, steps,
                       *flags):
  """sbatch of pretrain_horovod.sbatch, 2 ranks on the one test node.

  Returns:
    (job id, output dir, the job's log file).
  """
  out, log = tmp_path / "horovod", tmp_path / "job.out"
  env = dict(
      slurm_cluster.env, BERT_DIR=REPO_ROOT, PYTHON=sys.executable,
      TF_CPP_MIN_LOG_LEVEL="2",
      BERT_CONFIG_FILE=str(text_records["dir"] / "config.json"),
      INPUT_FILE=",".join(text_records["rank_files"]), OUTPUT_DIR=str(out),
      TRAIN_BATCH_SIZE=str(BATCH), MAX_SEQ_LENGTH=str(SEQ),
      MAX_PREDICTIONS_PER_SEQ=str(PREDS), NUM_TRAIN_STEPS=str(steps),
      NUM_WARMUP_STEPS="2", LEARNING_RATE="1e-3",
      BERT_HOROVOD_SCRATCH_ROOT=str(tmp_path / "scratch"))
  job = slurm_cluster.sbatch(
      "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
      "--gpus-per-node=0", "--time=10", "--output=%s" % log,
      "--chdir=%s" % tmp_path, HOROVOD_SBATCH, *flags, env=env)
  return job, out, log


@pytest.mark.slow
@requires_horovod
def test_two_horovod_ranks_under_slurm_equal_one_device(
    slurm_cluster, text_records, tmp_path):
  reference = tmp_path / "one_device"
  # Saved at step 2 too: assert_same_weights checks the weights moved since.
  run_ok(pretrain_args(text_records, reference, "--save_checkpoints_steps=2"))
  job, out, log = submit_horovod_job(
      slurm_cluster, text_records, tmp_path, STEPS, "--tf_random_seed=7",
      "--log_every_n_steps=1", "--throughput_warmup_steps=1")
  fields = slurm_cluster.wait_for_job(job, timeout=300)
  text = log.read_text(errors="replace")
  assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0"), \
      text[-3000:]
  assert "horovod on Slurm: 2 ranks on localhost:2" in text
  assert_same_weights(reference, out, "horovod under Slurm")
  # Each rank ran as its own task, rank r as Slurm task r.
  for rank in (0, 1):
    assert (out / ("final_weights.rank-%d.json" % rank)).exists()
    assert "horovod: rank %d of 2 (local rank %d)" % (rank, rank) in text


@pytest.mark.slow
@requires_horovod
def test_scancel_stops_both_ranks_after_the_same_step_with_a_checkpoint(
    slurm_cluster, text_records, tmp_path):
  job, out, log = submit_horovod_job(
      slurm_cluster, text_records, tmp_path, 100000,
      "--save_checkpoints_steps=1000000", "--log_every_n_steps=1")
  deadline = time.time() + 180
  while "] step 3/" not in (log.read_text(errors="replace")
                            if log.exists() else ""):
    assert time.time() < deadline, "no step 3: %s" % (
        log.read_text(errors="replace")[-3000:] if log.exists() else "")
    time.sleep(0.2)
  slurm_cluster.scancel(job)
  slurm_cluster.wait_for_job(job, timeout=120)
  text = log.read_text(errors="replace")
  stops = re.findall(r"^stopped by SIGTERM at step (\d+): checkpoint "
                     r"model\.ckpt-(\d+) written( by the chief)?;", text,
                     re.MULTILINE)
  # Both ranks got Slurm's SIGTERM and stopped after the same step, which
  # rank 0 checkpointed before Slurm's SIGKILL (KillWait 30 s).
  assert len(stops) == 2 and stops[0][:2] == stops[1][:2], text[-3000:]
  assert sorted(s[2] for s in stops) == ["", " by the chief"]
  step = int(stops[0][0])
  assert step >= 3 and stops[0][1] == str(step)
  # srun reports the two tasks on one line or two, as they end.
  assert srun_exit_codes(text) == {0: errors.EXIT_STOPPED,
                                   1: errors.EXIT_STOPPED}, text[-3000:]
  assert load_checkpoint(str(out))["global_step"] == step


def outside_slurm(**env):
  """run_program's `env` of a shell outside any Slurm allocation."""
  env.update({name: None for name in os.environ if name.startswith("SLURM_")})
  return env


# The launcher needs horovod before it reads the allocation, so without
# horovod this one stops at horovod's error line (the test below).
@requires_horovod
def test_horovod_launcher_outside_slurm_is_one_error_line():
  result = run_program([HOROVOD_SRUN, "--", "true"], env=outside_slurm())
  one_error_line(result, "SLURM_JOB_NODELIST is not set",
                 "inside a Slurm allocation")


def test_horovod_launcher_without_horovod_or_a_command_is_one_error_line(
    tmp_path):
  result = run_program([HOROVOD_SRUN, "--", "true"],
                       env=outside_slurm(**hide_horovod(tmp_path)))
  line = one_error_line(result)
  assert line == (
      "error: horovod is not importable by %s (No module named 'horovod' "
      "(hidden by the test)): run scripts/install_horovod.sh" %
      sys.executable)
  # Arguments are checked before horovod is imported.
  result = run_program([HOROVOD_SRUN], env=outside_slurm(**hide_horovod(
      tmp_path / "again")))
  assert one_error_line(result) == (
      "error: no command: give it after --, e.g. -- python "
      "run_pretraining.py --distribution_strategy=horovod ...")


# The test node declares no memory, so sbatch refuses a job asking for some.
NO_MEM = "--skip-directive=--mem"


def create_data_dask(slurm_cluster, tmp_path, data_flags, *options):
  """Runs scripts/slurm/create_data_dask.py with 2 one-worker jobs."""
  return subprocess.run(
      [sys.executable, CREATE_DATA_DASK, "--jobs=2", "--walltime=00:10:00",
       "--start-timeout=120", "--log-directory=%s" % (tmp_path / "jobs")] +
      list(options) + ["--"] + data_flags, cwd=str(tmp_path),
      env=dict(slurm_cluster.env, TF_CPP_MIN_LOG_LEVEL="2"),
      capture_output=True, text=True, timeout=600)


def our_jobs(slurm_cluster):
  return [line for line in slurm_cluster.squeue("-o", "%i %j %T")
          if "bert-data-dask" in line]


@pytest.mark.slow
def test_data_on_dask_jobqueue_workers_equals_one_local_worker(
    slurm_cluster, tmp_path):
  run_ok(dask_command(SAMPLE_CORPUS, tmp_path / "local", num_workers=1))
  result = create_data_dask(
      slurm_cluster, tmp_path,
      dask_command(SAMPLE_CORPUS, tmp_path / "slurm")[1:], NO_MEM)
  assert result.returncode == 0, result.stderr[-3000:]
  assert re.search(r"Dask scheduler tcp://\S+: 2 worker\(s\)", result.stderr)
  local = directory_bytes(tmp_path / "local")
  assert len(shard_files(tmp_path / "local")) >= 5
  assert directory_bytes(tmp_path / "slurm") == local
  # The workers ran as Slurm jobs (their output is there), now cancelled.
  assert len(os.listdir(str(tmp_path / "jobs"))) >= 2
  assert not our_jobs(slurm_cluster)


@pytest.mark.slow
def test_bad_data_input_on_slurm_is_one_error_line_and_no_job_left(
    slurm_cluster, tmp_path):
  missing = str(tmp_path / "no_such_corpus.txt")
  result = create_data_dask(slurm_cluster, tmp_path,
                            dask_command(missing, tmp_path / "out")[1:],
                            NO_MEM)
  one_error_line(result, "no_such_corpus.txt")
  assert result.returncode == errors.EXIT_USER_ERROR
  assert not os.path.exists(str(tmp_path / "out"))
  assert not our_jobs(slurm_cluster)


@pytest.mark.slow
def test_a_job_script_slurm_refuses_is_one_error_line_before_any_job(
    slurm_cluster, tmp_path):
  # 4 GB per job on a node that declares none: sbatch says no at once
  # (dask-jobqueue alone would wait for workers that never come).
  result = create_data_dask(slurm_cluster, tmp_path,
                            dask_command(SAMPLE_CORPUS, tmp_path / "out")[1:],
                            "--memory-per-job=4GB")
  one_error_line(result, "sbatch refuses the Dask workers' job script",
                 "--skip-directive=--mem")
  assert result.returncode == errors.EXIT_USER_ERROR
  assert not os.path.exists(str(tmp_path / "out"))
  assert not our_jobs(slurm_cluster)


@pytest.mark.parametrize("options, data_flags, fragment", [
    ((), [], "no create_pretraining_data.py flags"),
    ((), ["--num_workers=4"], "leave out --dask_scheduler and --num_workers"),
    (("--cores-per-job=1", "--processes-per-job=2"), ["--input_file=x"],
     "--processes-per-job=2 exceeds --cores-per-job=1"),
])
def test_data_script_refuses_contradicting_options(options, data_flags,
                                                   fragment):
  result = run_program([CREATE_DATA_DASK] + list(options) + ["--"] +
                       data_flags)
  assert result.returncode == errors.EXIT_USER_ERROR
  one_error_line(result, fragment)
