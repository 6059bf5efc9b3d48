# coding=utf-8
"""create_pretraining_data.py --dask_scheduler on a real Dask cluster.

Each test starts `dask scheduler` and two `dask worker` processes on
127.0.0.1 (random ports, this repository on their PYTHONPATH, as docs/data.md
tells users), runs the program as a user types it, and stops every process
it started in a fixture teardown, also when the test fails.

The output on the cluster must equal --num_workers=1's byte for byte, also
when a worker is SIGKILLed mid-run; losing the scheduler ends the run with
one error line, keeping the complete shards.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from bertkit.common import errors
from conftest import REPO_ROOT
from conftest import partial_files
from conftest import run_program
from helpers.corpora import (SAMPLE_CORPUS, assert_one_error_line, command,
                             directory_bytes, shard_files, write_corpus)

START_SECONDS = 120


class DaskCluster(object):
  """A scheduler and workers started as processes; `stop` kills them all."""

  def __init__(self, log_dir):
    self._log_dir = str(log_dir)
    self._env = dict(os.environ, PYTHONPATH=REPO_ROOT,
                     OPENBLAS_NUM_THREADS="1")
    self.processes = []
    self.workers = []
    self.scheduler = self._start(
        "scheduler", ["scheduler", "--host", "127.0.0.1", "--port", "0",
                      "--no-dashboard"])
    self.address = self._wait_for_line("scheduler", "Scheduler at:").split(
        "Scheduler at:")[1].strip()

  def _start(self, name, args):
    log = open(os.path.join(self._log_dir, name + ".log"), "wb")
    process = subprocess.Popen([sys.executable, "-m", "dask"] + args,
                               cwd=REPO_ROOT, env=self._env, stdout=log,
                               stderr=subprocess.STDOUT)
    log.close()
    self.processes.append(process)
    return process

  def log(self, name):
    with open(os.path.join(self._log_dir, name + ".log"),
              encoding="utf-8", errors="replace") as f:
      return f.read()

  def _wait_for_line(self, name, text):
    deadline = time.time() + START_SECONDS
    while time.time() < deadline:
      for line in self.log(name).splitlines():
        if text in line:
          return line
      assert self.processes[-1].poll() is None, self.log(name)
      time.sleep(0.1)
    raise AssertionError("%s did not start: %s" % (name, self.log(name)))

  def add_worker(self):
    """Starts a worker (no nanny: its pid is the worker's) and waits until
    it registered."""
    name = "worker%d" % len(self.workers)
    self.workers.append(self._start(
        name, ["worker", self.address, "--host", "127.0.0.1", "--nthreads",
               "1", "--no-nanny", "--no-dashboard"]))
    self._wait_for_line(name, "Registered to:")
    return self.workers[-1]

  def stop(self):
    for process in self.processes:
      if process.poll() is None:
        process.kill()
    for process in self.processes:
      process.wait()


@pytest.fixture
def cluster(tmp_path):
  """A scheduler and two workers, killed at teardown whatever happened."""
  started = DaskCluster(tmp_path)
  try:
    started.add_worker()
    started.add_worker()
    yield started
  finally:
    started.stop()


def run_ok(args):
  result = run_program(args, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def complete_in_manifest(output_dir):
  try:
    with open(os.path.join(str(output_dir), "part.manifest.json")) as f:
      return json.load(f).get("complete", [])
  except (OSError, ValueError):
    return []


def start_and_wait_for_a_shard(args, output_dir):
  """Starts the program; returns it once the manifest lists a complete
  shard."""
  process = subprocess.Popen([sys.executable] + args, cwd=REPO_ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
  deadline = time.time() + START_SECONDS
  while not complete_in_manifest(output_dir):
    if process.poll() is not None or time.time() > deadline:
      process.kill()
      raise AssertionError("no shard completed: %s" % (
          process.communicate()[1][-3000:]))
    time.sleep(0.01)
  return process


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory):
  """~48 shards of 50 KB, from sample_data sentences, and --num_workers=1's
  output for it."""
  root = tmp_path_factory.mktemp("big")
  path = write_corpus(root / "corpus.txt", 2400000, seed=5)
  run_ok(command(path, root / "local", num_workers=1, shard_size_mb=0.05))
  return path, directory_bytes(root / "local")


@pytest.mark.slow
def test_two_dask_workers_write_the_same_bytes_as_one_local_worker(
    cluster, tmp_path):
  run_ok(command(SAMPLE_CORPUS, tmp_path / "local", num_workers=1))
  result = run_ok(command(SAMPLE_CORPUS, tmp_path / "dask",
                          dask_scheduler=cluster.address))
  assert "Dask scheduler %s: 2 worker(s)" % cluster.address in result.stderr
  local, dask = (directory_bytes(tmp_path / "local"),
                 directory_bytes(tmp_path / "dask"))
  assert len(shard_files(tmp_path / "local")) >= 5
  assert local == dask  # Every shard file and the manifest.
  # A rerun on the cluster skips every shard.
  rerun = run_ok(command(SAMPLE_CORPUS, tmp_path / "dask",
                         dask_scheduler=cluster.address))
  assert "0 to make" in rerun.stderr
  assert directory_bytes(tmp_path / "dask") == local


@pytest.mark.slow
def test_a_worker_killed_mid_run_changes_nothing(cluster, big_corpus,
                                                 tmp_path):
  path, local = big_corpus
  out = tmp_path / "out"
  process = start_and_wait_for_a_shard(
      command(path, out, shard_size_mb=0.05, dask_scheduler=cluster.address),
      out)
  killed = cluster.workers[0]
  assert killed.poll() is None
  killed.send_signal(signal.SIGKILL)
  killed.wait()
  # Killed mid-run: most shards were still to make.
  assert len(complete_in_manifest(out)) < len(shard_files_of(local)) // 2
  _, stderr = process.communicate(timeout=600)
  assert process.returncode == 0, stderr[-3000:]
  assert directory_bytes(out) == local
  assert not partial_files(out)


@pytest.mark.slow
def test_losing_the_scheduler_is_one_error_line_and_keeps_shards(
    cluster, big_corpus, tmp_path):
  path, local = big_corpus
  out = tmp_path / "out"
  process = start_and_wait_for_a_shard(
      command(path, out, shard_size_mb=0.05, dask_scheduler=cluster.address),
      out)
  cluster.scheduler.send_signal(signal.SIGKILL)
  cluster.scheduler.wait()
  _, stderr = process.communicate(timeout=600)
  assert process.returncode not in (0, None), stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  lines = stderr.strip().splitlines()
  assert [l for l in lines if l.startswith("error:")] == [lines[-1]]
  assert cluster.address in lines[-1] and "rerun" in lines[-1]
  kept = shard_files(out)
  assert 1 <= len(kept) < len(shard_files_of(local))
  for name in kept:
    assert directory_bytes(out)[name] == local[name], name


def shard_files_of(contents):
  return [n for n in contents if n.endswith(".tfrecord")]


def free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_bad_input_unreachable_scheduler(tmp_path):
  address = "tcp://127.0.0.1:%d" % free_port()
  result = run_program(command(SAMPLE_CORPUS, tmp_path / "out",
                               dask_scheduler=address), timeout=300)
  assert_one_error_line(result, address, "cannot reach")
  # Checked before the output directory is created.
  assert not os.path.exists(str(tmp_path / "out"))
  assert result.returncode == errors.EXIT_USER_ERROR
