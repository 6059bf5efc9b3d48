"""A real Slurm on this machine for the tests: the `slurm_cluster` fixture.

It writes a munge key and a slurm.conf under a temporary directory (one node
`localhost` with 2 CPUs, free ports of its own, state, spool, logs and pid
files in that directory, munge authentication through a munged on its own
socket) and runs munged, slurmctld and slurmd in the foreground until the end
of the session. Test modules use it as any fixture; tests/conftest.py
registers this module as a pytest plugin. Without Slurm installed (`.ci/run`
installs Debian's slurm-wlm and munge) the tests that use it are skipped.

The daemons run as the current user, which must be root for slurmd to start
job steps; the jobs run as that user too.
"""

import os
import pwd
import random
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

# What the daemons need, from Debian's slurm-wlm and munge packages.
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sinfo", "srun", "sbatch", "scancel", "squeue", "scontrol")
_NOT_FOUND = [c for c in DAEMONS + CLIENTS if shutil.which(c) is None]
# Why the tests that need Slurm are skipped here, or None where it is
# installed (conftest.requires_slurm, and this module's fixture).
SLURM_MISSING = ("Slurm is not installed here (no %s); install Debian's "
                 "slurm-wlm and munge, as .ci/run does" %
                 ", ".join(_NOT_FOUND)) if _NOT_FOUND else None

# The node's name as jobs see it in SLURM_JOB_NODELIST; slurmd is told it
# with -N, whatever the machine's host name is.
NODE = "localhost"
CPUS = 2

# Seconds between a job's SIGTERM and its SIGKILL: Slurm's default, so the
# preemption tests show that a checkpoint fits in what users get.
KILL_WAIT = 30

_SLURM_CONF = """\
ClusterName=bertkit-test
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait={kill_wait}
JobRequeue=1
FirstJobId={first_job_id}
MinJobAge=600
SchedulerParameters=sched_interval=1
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP \
OverSubscribe=FORCE:2
"""


def _free_port():
  """A TCP port nothing listens on now (the kernel's pick)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class SlurmCluster:
  """A running one-node Slurm: its environment and the client commands.

  Attributes:
    root: the directory holding slurm.conf, state, spool and logs.
    env: os.environ plus SLURM_CONF pointing at this cluster's slurm.conf;
      every client command runs with it.
  """

  def __init__(self, root, env):
    self.root = root
    self.env = env

  def run(self, *command, timeout=120, check=True, **kwargs):
    """Runs a Slurm client command (e.g. "sinfo", "-h") with `env`.

    Returns:
      The CompletedProcess, with text stdout/stderr.
    """
    result = subprocess.run(list(command), env=kwargs.pop("env", self.env),
                            capture_output=True, text=True, timeout=timeout,
                            **kwargs)
    if check and result.returncode != 0:
      raise AssertionError("%s exited %d:\n%s\n%s\n%s" % (
          " ".join(command), result.returncode, result.stdout[-2000:],
          result.stderr[-3000:], self.logs()))
    return result

  def srun(self, *args, **kwargs):
    """`srun args...`: a job step in the foreground; its CompletedProcess."""
    return self.run("srun", *args, **kwargs)

  def sbatch(self, *args, **kwargs):
    """`sbatch --parsable args...`; returns the job id (a string)."""
    out = self.run("sbatch", "--parsable", *args, **kwargs).stdout
    return out.strip().split(";")[0]

  def scancel(self, job_id, *args):
    """`scancel args... job_id`."""
    self.run("scancel", *(list(args) + [job_id]))

  def squeue(self, *args):
    """`squeue -h args...`'s output lines."""
    return self.run("squeue", "-h", *args).stdout.splitlines()

  def job(self, job_id):
    """`scontrol show job`'s fields of a job as {name: value}."""
    out = self.run("scontrol", "-o", "show", "job", job_id).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))

  def wait_for_job(self, job_id, timeout=120, states=None):
    """Waits until the job is in one of `states` (default: any final one).

    Returns:
      The job's fields (see `job`).
    """
    final = states or ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
                       "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY")
    deadline = time.time() + timeout
    while True:
      fields = self.job(job_id)
      if fields.get("JobState") in final:
        return fields
      if time.time() > deadline:
        raise AssertionError("job %s still %s after %d s\n%s" % (
            job_id, fields.get("JobState"), timeout, self.logs()))
      time.sleep(0.5)

  def logs(self):
    """The tails of the daemons' logs, for failure messages."""
    parts = []
    for name in ("munged.log", "slurmctld.log", "slurmd.log"):
      path = os.path.join(self.root, name)
      if os.path.exists(path):
        with open(path, errors="replace") as f:
          parts.append("--- %s\n%s" % (name, f.read()[-3000:]))
    return "\n".join(parts)


def _write_config(root):
  """Writes the munge key and slurm.conf; returns (munge socket, conf).

  Job ids start at a random number: jobs of two such clusters on one machine
  (tests running side by side) then get different default ports.
  """
  for sub in ("state", "spool", "munge"):
    os.makedirs(os.path.join(root, sub), mode=0o700, exist_ok=True)
  key = os.path.join(root, "munge", "munge.key")
  with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o400), "wb") as f:
    f.write(os.urandom(1024))
  munge_socket = os.path.join(root, "munge", "munge.socket")
  ctld_port = _free_port()
  slurmd_port = _free_port()
  while slurmd_port == ctld_port:
    slurmd_port = _free_port()
  conf = os.path.join(root, "slurm.conf")
  with open(conf, "w") as f:
    f.write(_SLURM_CONF.format(
        node=NODE, cpus=CPUS, root=root, munge_socket=munge_socket,
        ctld_port=ctld_port, slurmd_port=slurmd_port, kill_wait=KILL_WAIT,
        user=_user_name(), first_job_id=random.randrange(1000, 1000000)))
  return munge_socket, conf


def _user_name():
  return pwd.getpwuid(os.getuid()).pw_name


def _stop(processes):
  """SIGTERM to each daemon, SIGKILL to any still there after 10 s."""
  for p in processes:
    if p.poll() is None:
      p.send_signal(signal.SIGTERM)
  deadline = time.time() + 10
  for p in processes:
    try:
      p.wait(max(0.1, deadline - time.time()))
    except subprocess.TimeoutExpired:
      p.kill()
      p.wait()


def _wait_until_idle(cluster, processes, timeout=60):
  """Waits until sinfo shows the node idle; fails early if a daemon died."""
  deadline = time.time() + timeout
  while True:
    dead = [p.args[0] for p in processes if p.poll() is not None]
    if dead:
      raise AssertionError("%s exited at start-up\n%s" % (
          dead, cluster.logs()))
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N %t",
                      check=False).stdout.split()
    if out[:2] == [NODE, "idle"]:
      return
    if time.time() > deadline:
      raise AssertionError("node not idle after %d s (sinfo: %s)\n%s" % (
          timeout, out, cluster.logs()))
    time.sleep(0.5)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
  """A one-node Slurm (see the module docstring) for the whole session.

  Yields:
    A SlurmCluster; run clients through its methods or with its `env`.
  """
  if SLURM_MISSING:
    pytest.skip(SLURM_MISSING)
  if os.getuid() != 0:
    pytest.skip("slurmd starts job steps only when run as root")
  root = str(tmp_path_factory.mktemp("slurm"))
  munge_socket, conf = _write_config(root)
  env = dict(os.environ, SLURM_CONF=conf)
  cluster = SlurmCluster(root, env)
  commands = [
      ["munged", "-F", "--force", "--socket=" + munge_socket,
       "--key-file=%s/munge/munge.key" % root,
       "--log-file=%s/munged.log" % root,
       "--pid-file=%s/munge/munged.pid" % root,
       "--seed-file=%s/munge/munged.seed" % root],
      ["slurmctld", "-D", "-i", "-f", conf],
      ["slurmd", "-D", "-f", conf, "-N", NODE],
  ]
  processes = []
  try:
    for command in commands:
      processes.append(subprocess.Popen(
          command, env=env, stdin=subprocess.DEVNULL,
          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
      if command[0] == "munged":
        _wait_for_path(munge_socket, processes[-1], cluster)
    _wait_until_idle(cluster, processes)
    yield cluster
  finally:
    if len(processes) == len(commands):
      _cancel_jobs(cluster)
    _stop(processes[::-1])


def _cancel_jobs(cluster):
  """Cancels every job still there, so that no job step (slurmstepd and its
  tasks) outlives the daemons; waits up to KillWait for them to end."""
  cluster.run("scancel", "--user=" + _user_name(), check=False)
  deadline = time.time() + KILL_WAIT + 5
  while time.time() < deadline:
    jobs = cluster.run("squeue", "-h", "-o", "%i", check=False)
    if jobs.returncode or not jobs.stdout.strip():
      return
    time.sleep(0.5)


def _wait_for_path(path, process, cluster, timeout=20):
  """Waits until `path` exists (a daemon's socket)."""
  deadline = time.time() + timeout
  while not os.path.exists(path):
    if process.poll() is not None or time.time() > deadline:
      raise AssertionError("%s did not create %s\n%s" % (
          process.args[0], path, cluster.logs()))
    time.sleep(0.1)
