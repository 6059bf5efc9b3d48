"""Programs launched as processes: one run, a multi_worker cluster on loopback,
horovodrun and BytePS launches, Slurm's exit codes; signalling a run after a
step and checking that it stopped and resumed."""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import tensorflow.compat.v1 as tf

from conftest import REPO_ROOT
from conftest import load_checkpoint


def start(args, env=None, log=None):
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
  return subprocess.Popen([sys.executable] + args, cwd=REPO_ROOT,
                          env=full_env, stdout=log or subprocess.DEVNULL,
                          stderr=subprocess.STDOUT if log else
                          subprocess.DEVNULL)


def horovodrun():
  path = os.path.join(os.path.dirname(sys.executable), "horovodrun")
  return path if os.path.exists(path) else shutil.which("horovodrun")


def hide_horovod(tmp_path):
  """A PYTHONPATH entry whose `horovod` package fails to import."""
  fake = tmp_path / "hide" / "horovod"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text(
      "raise ImportError(\"No module named 'horovod' (hidden by the test)\")\n")
  return {"PYTHONPATH": str(tmp_path / "hide")}


def free_port():
  """A port nothing listens on (the scheduler's), away from the others."""
  while True:
    port = random.randrange(20000, 30000)
    with socket.socket() as s:
      try:
        s.bind(("127.0.0.1", port))
      except OSError:
        continue
      return port


def launch_pids(port):
  """Pids of the scheduler, servers and workers of the launch on `port`."""
  found = []
  for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
      with open("/proc/%s/environ" % pid, "rb") as f:
        if b"DMLC_PS_ROOT_PORT=%d" % port in f.read().split(b"\0"):
          found.append(int(pid))
    except OSError:
      continue
  return found


def kill_launch(port):
  """Kills what the launch on `port` left running. The launcher starts each
  process in a session of its own, so killing its process group does not."""
  for pid in launch_pids(port):
    try:
      os.kill(pid, signal.SIGKILL)
    except OSError:
      pass


STOP_LINE = re.compile(
    r"^stopped (by (SIGTERM|SIGINT)|because another worker received a stop "
    r"signal) at step (\d+): checkpoint model\.ckpt-(\d+) written( by the "
    r"chief)?; rerun the same command to continue$", re.MULTILINE)
FAR_AWAY = "--save_checkpoints_steps=1000000"


def logged_step(output_dir):
  """The last step the chief's throughput.jsonl has a line for, or -1."""
  path = os.path.join(str(output_dir), "throughput.jsonl")
  if not os.path.exists(path):
    return -1
  with open(path) as f:
    lines = [l for l in f.read().splitlines() if l.endswith("}")]
  return json.loads(lines[-1])["step"] if lines else -1


def signal_after_step(procs, pid, output_dir, signum, min_step=3,
                      timeout=300):
  """Sends `signum` to process `pid` once the chief logged step >= min_step."""
  deadline = time.time() + timeout
  while logged_step(output_dir) < min_step:
    for p in procs:
      assert p.poll() is None, "a process ended before the signal"
    assert time.time() < deadline, "step %d never logged" % min_step
    time.sleep(0.05)
  os.kill(pid, signum)
  return logged_step(output_dir)


def wait_all(procs, timeout=180):
  try:
    return [p.wait(timeout=timeout) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()


def stop_lines(log_path):
  with open(log_path) as f:
    text = f.read()
  assert "Traceback" not in text, text[-3000:]
  return [m for m in STOP_LINE.finditer(text)]


def check_stopped_run(output_dir, log_path, signalled_at, cause):
  """The one stop line, and a checkpoint of exactly the step it names."""
  found = stop_lines(log_path)
  assert len(found) == 1, open(log_path).read()[-3000:]
  line = found[0]
  step = int(line.group(3))
  assert line.group(4) == str(step)
  assert cause in line.group(0)
  assert step >= signalled_at > 0
  latest = tf.train.latest_checkpoint(str(output_dir))
  assert latest == os.path.join(str(output_dir), "model.ckpt-%d" % step)
  assert load_checkpoint(latest)["global_step"] == step
  return step


def check_resumed(output_dir, stopped_at, steps):
  assert load_checkpoint(str(output_dir))["global_step"] == steps
  with open(os.path.join(str(output_dir), "throughput_summary.json")) as f:
    summary = json.load(f)
  # None lost, none repeated: the rerun trained exactly the missing steps.
  assert summary["first_step"] == stopped_at
  assert summary["final_step"] == steps
  assert summary["steps_run"] == steps - stopped_at


def multi_worker_cluster(workdir, out, args, log_suffix):
  ports = [20000 + random.randrange(0, 10000) * 2 + i for i in range(2)]
  cluster = {"worker": ["127.0.0.1:%d" % p for p in ports]}
  procs, logs = [], []
  for index in range(2):
    tf_config = json.dumps({"cluster": cluster,
                            "task": {"type": "worker", "index": index}})
    logs.append(out / ("worker-%d.%s.log" % (index, log_suffix)))
    procs.append(start(args, env={"TF_CONFIG": tf_config},
                       log=open(logs[-1], "w")))
  return procs, logs


def srun_exit_codes(text):
  """{task id: exit code} from srun's "tasks 0-1: Exited with exit code N"
  lines."""
  codes = {}
  for tasks, code in re.findall(r"tasks? ([\d,-]+): Exited with exit code "
                                r"(\d+)", text):
    for part in tasks.split(","):
      first, _, last = part.partition("-")
      for task in range(int(first), int(last or first) + 1):
        codes[task] = int(code)
  return codes
