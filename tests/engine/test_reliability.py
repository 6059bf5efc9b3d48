"""Faults as users meet them: kills, dead peers, NaN, corrupt or bad input."""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import time

import pytest
import tensorflow.compat.v1 as tf

from conftest import (expect_user_error, load_checkpoint, pretrain_args,
                      run_program)
from helpers.processes import start
from helpers.records import flip_a_bit_in_records

pytestmark = pytest.mark.slow


def wait_for_checkpoint(output_dir, min_step, timeout=300):
  """The newest checkpoint >= min_step once its save has ended.

  The Saver names the checkpoint in the state file before it writes the
  meta graph, so the .meta (renamed into place when whole) marks the end.
  """
  deadline = time.time() + timeout
  while time.time() < deadline:
    latest = tf.train.latest_checkpoint(str(output_dir))
    if (latest and int(latest.rsplit("-", 1)[1]) >= min_step and
        os.path.exists(latest + ".meta")):
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
  try:
    wait_for_checkpoint(out, 50)
    time.sleep(random.uniform(0.0, 2.0))
  finally:
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
  # Its first checkpoint would have come at step 1000: none was written, the
  # NaN weights' included.
  assert tf.train.latest_checkpoint(str(out)) is None
  assert not list(out.glob("model.ckpt-*"))


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
  # Which path ends the survivor depends on timing: the stall watchdog if its
  # collective blocks, or the collective's own Unavailable/DeadlineExceeded
  # error if gRPC notices the dead peer first. Both name the cause and the fix.
  assert ("error: no training step finished" in log or
          "error: lost contact with another worker" in log), log[-2000:]
  assert "with the same command to resume from the last checkpoint" in log


def test_nonfinite_loss_can_be_trained_through_on_request(workdir):
  out = workdir / "nan_optout"
  result = run_program(pretrain_args(workdir, out, "--learning_rate=1e30",
                                     "--num_warmup_steps=0",
                                     "--nostop_on_nonfinite_loss", steps=6))
  assert result.returncode == 0, result.stderr[-2000:]
  assert "Training loss is nan at step" in result.stderr
  assert load_checkpoint(str(out))["global_step"] == 6


def test_a_corrupt_record_is_named_and_can_be_skipped(workdir):
  corrupt = workdir / "corrupt.tfrecord"
  offsets = flip_a_bit_in_records(workdir / "data.tfrecord", corrupt,
                                  [100, 180])
  args = pretrain_args(workdir, workdir / "corrupt_out", steps=30)
  args[2] = "--input_file=%s" % corrupt
  result = run_program(args)
  assert result.returncode == 3, result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert len(errors) == 1
  assert "%s, record 100 (byte %d)" % (corrupt, offsets[0]) in errors[0]
  assert "--skip_corrupt_records" in errors[0]

  out = workdir / "skip_out"
  result = run_program(args[:3] + ["--output_dir=%s" % out] + args[4:] +
                       ["--skip_corrupt_records"])
  assert result.returncode == 0, result.stderr[-2000:]
  assert ("skipped 2 corrupt record(s): %s record 100 (byte %d); %s record "
          "180 (byte %d)" % (corrupt, offsets[0], corrupt, offsets[1])
          in result.stderr)
  assert "corrupt input records skipped: 2" in result.stdout
  summary = json.loads((out / "throughput_summary.json").read_text())
  assert summary["corrupt_records_skipped"] == 2
  assert summary["final_step"] == 30


def test_an_unreadable_latest_checkpoint_falls_back_to_the_newest_readable(
    workdir):
  out = workdir / "fallback"
  args = pretrain_args(workdir, out, "--save_checkpoints_steps=2", steps=4)
  result = run_program(args)
  assert result.returncode == 0, result.stderr[-2000:]
  data = out / "model.ckpt-4.data-00000-of-00001"
  data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
  result = run_program(args[:-1] + ["--num_train_steps=6"])
  assert result.returncode == 0, result.stderr[-2000:]
  assert re.search(r"The latest checkpoint \S*model\.ckpt-4 is unreadable "
                   r"\(.*\); resuming from \S*model\.ckpt-2, the newest "
                   r"readable one", result.stderr), result.stderr[-2000:]
  summary = json.loads((out / "throughput_summary.json").read_text())
  assert summary["first_step"] == 2 and summary["final_step"] == 6
  assert load_checkpoint(str(out))["global_step"] == 6

  for path in out.glob("model.ckpt-*.data-*"):
    path.write_bytes(b"")
  result = run_program(args[:-1] + ["--num_train_steps=8"])
  expect_user_error(result, "no readable checkpoint in %s" % out,
                    "model.ckpt-6 (")


@pytest.fixture
def tiny_disk(tmp_path):
  """A 64 MB tmpfs (root only), unmounted afterwards."""
  mount_point = tmp_path / "disk"
  mount_point.mkdir()
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs",
                            str(mount_point)], capture_output=True)
  if mounted.returncode != 0:
    pytest.skip("cannot mount a tmpfs here (needs root): %s" %
                mounted.stderr.decode().strip())
  try:
    yield mount_point
  finally:
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_disk(directory):
  """Fills the disk to its last byte.

  Down to single bytes: a tiny model's checkpoint (tens of KB) fits in what
  a fill by 64 KB chunks leaves, and its save would then fail only at the
  meta graph, after the checkpoint itself is complete.
  """
  # Unbuffered: a buffered file would raise ENOSPC again when closed.
  fd = os.open(os.path.join(str(directory), "filler"),
               os.O_WRONLY | os.O_CREAT)
  chunk = 65536
  try:
    while chunk:
      try:
        os.write(fd, b"\0" * chunk)
      except OSError:
        chunk //= 2
  finally:
    os.close(fd)
  assert shutil.disk_usage(str(directory)).free == 0


def test_a_checkpoint_save_on_a_full_disk_is_one_error_line(workdir,
                                                             tiny_disk):
  out = tiny_disk / "out"
  flags = ("--save_checkpoints_steps=40", "--log_every_n_steps=100000")
  args = pretrain_args(workdir, out, *flags, steps=100000)
  log = workdir / "full_disk.log"
  proc = start(args, log=open(log, "w"))
  try:
    wait_for_checkpoint(out, 40)
    # Paused while the disk fills, so that the next save meets a full disk
    # however fast the steps run.
    proc.send_signal(signal.SIGSTOP)
    fill_disk(tiny_disk)
    proc.send_signal(signal.SIGCONT)
    returncode = proc.wait(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  text = log.read_text()
  assert returncode == 3, text[-2000:]
  assert "Traceback" not in text
  errors = [l for l in text.splitlines() if l.startswith("error:")]
  assert len(errors) == 1, text[-2000:]
  message = re.match(r"error: could not write checkpoint model\.ckpt-(\d+) "
                     r"in %s \(.*\); 0\.0 MB free on its disk\. The latest "
                     r"complete checkpoint, model\.ckpt-(\d+), is intact" %
                     re.escape(str(out)), errors[0])
  assert message, errors[0]
  failed, latest = int(message.group(1)), int(message.group(2))
  assert failed % 40 == 0 and failed > 40
  assert load_checkpoint(str(out))["global_step"] == latest
  if latest == failed:
    # Paused inside the save, after the checkpoint itself was written: only
    # its meta graph, written last, met the full disk.
    assert not list(out.glob("model.ckpt-%d.meta*" % failed))
  else:
    assert latest == failed - 40
    assert not list(out.glob("model.ckpt-%d*" % failed))

  # As the message says: with space freed, the same command continues.
  (tiny_disk / "filler").unlink()
  result = run_program(pretrain_args(workdir, out, *flags, steps=latest + 4))
  assert result.returncode == 0, result.stderr[-2000:]
  summary = json.loads((out / "throughput_summary.json").read_text())
  assert summary["first_step"] == latest
  assert load_checkpoint(str(out))["global_step"] == latest + 4
