#!/usr/bin/env python3
"""create_pretraining_data.py on Dask workers that run as Slurm jobs.

Usage, from a node that can submit jobs (a login node, or inside a job):

    python scripts/slurm/create_data_dask.py --jobs 4 --cores-per-job 32 \\
        --memory-per-job 64GB --walltime 02:00:00 -- \\
        --input_file='/shared/corpus/*.jsonl.zst' --output_dir=/shared/out \\
        --vocab_file=vocab.txt --max_seq_length=128

It starts a Dask scheduler in this process, checks with `sbatch --test-only`
that Slurm accepts the workers' job script, and submits a dask-jobqueue
SLURMCluster of `--jobs` batch jobs, each running `--processes-per-job`
single-threaded Dask workers (the work is Python, so threads would share
one core) with this repository on their PYTHONPATH; waits until every worker
has joined (at most `--start-timeout` seconds: jobs may queue); runs
`create_pretraining_data.py <flags after --> --dask_scheduler=<address>`;
and closes the cluster, which cancels the jobs, however the run ended. The
exit code is the data program's (0, or 2 with its one `error:` line); 2
with one `error:` line for this script's own bad options or a job script
sbatch refuses; 3 when the workers did not start in time.

The input and --output_dir must be at the same paths on every node (a
shared file system), as for any Dask run (docs/data.md). The output is
byte-identical to a --num_workers=1 run, and a rerun resumes.
"""

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bertkit.common import errors
from bertkit.common.errors import UserError

# Flags this script sets itself; given after --, they would contradict it.
OWN_FLAGS = ("--dask_scheduler", "--num_workers")


def log(message):
  print("[create_data_dask] %s" % message, file=sys.stderr, flush=True)


def positive(text):
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError("must be at least 1, got %s" % text)
  return value


def parse_args(argv):
  """The script's options and the data program's flags (after --)."""
  parser = argparse.ArgumentParser(
      description=__doc__.split("\n\n")[0],
      usage="%(prog)s [options] -- create_pretraining_data.py flags...")
  add = parser.add_argument
  add("--jobs", type=positive, default=2, help="Slurm jobs (default 2)")
  add("--processes-per-job", type=positive, default=None,
      help="Dask workers in each job, one thread each (default: "
           "--cores-per-job)")
  add("--cores-per-job", type=positive, default=1,
      help="CPUs each job asks for (--cpus-per-task; default 1)")
  add("--memory-per-job", default="4GB",
      help="memory each job asks for (--mem) and its workers share "
           "(default 4GB)")
  add("--walltime", default="02:00:00", help="each job's time limit")
  add("--partition", default=None, help="Slurm partition (-p)")
  add("--account", default=None, help="Slurm account (-A)")
  add("--job-extra", action="append", default=[],
      help="an extra #SBATCH option for every job, e.g. "
           "--job-extra=--exclusive (repeatable)")
  add("--skip-directive", action="append", default=[],
      help="leave out the #SBATCH line holding this text, e.g. "
           "--skip-directive=--mem on clusters that refuse it (repeatable)")
  add("--interface", default=None,
      help="network interface the scheduler and workers use (e.g. ib0); "
           "default: the host name's address")
  add("--python", default=sys.executable,
      help="interpreter on the compute nodes (default: this one)")
  add("--log-directory", default=None,
      help="where the jobs' output goes (default: Slurm's, slurm-N.out "
           "in the current directory)")
  add("--start-timeout", type=positive, default=600,
      help="seconds to wait for every worker to join (default 600)")
  add("data_flags", nargs=argparse.REMAINDER,
      help="after --: create_pretraining_data.py's flags")
  args = parser.parse_args(argv)
  flags = args.data_flags[1:] if args.data_flags[:1] == ["--"] else \
      args.data_flags
  if not flags:
    raise UserError("no create_pretraining_data.py flags: give them after "
                    "--, e.g. -- --input_file=... --output_dir=... "
                    "--vocab_file=...")
  for flag in flags:
    if flag.split("=", 1)[0] in OWN_FLAGS:
      raise UserError("%s: this script starts the workers and passes "
                      "--dask_scheduler itself; leave out %s" % (
                          flag, " and ".join(OWN_FLAGS)))
  args.data_flags = flags
  args.processes_per_job = args.processes_per_job or args.cores_per_job
  if args.processes_per_job > args.cores_per_job:
    raise UserError("--processes-per-job=%d exceeds --cores-per-job=%d: "
                    "each worker needs a core of its own" % (
                        args.processes_per_job, args.cores_per_job))
  return args


def start_cluster(args):
  """The SLURMCluster (scheduler here, `args.jobs` jobs submitted)."""
  try:
    # pylint: disable=import-outside-toplevel
    from dask_jobqueue import SLURMCluster
  except ImportError as e:
    raise UserError("dask-jobqueue is not importable by %s (%s): pip install "
                    "-r requirements.txt" % (sys.executable, e))
  path = os.environ.get("PYTHONPATH")
  cluster = SLURMCluster(
      cores=args.cores_per_job, processes=args.processes_per_job,
      memory=args.memory_per_job, walltime=args.walltime,
      queue=args.partition, account=args.account,
      job_extra_directives=args.job_extra,
      job_directives_skip=args.skip_directive, interface=args.interface,
      python=args.python, log_directory=args.log_directory,
      job_name="bert-data-dask",
      # What every worker needs: this repository importable, and one thread
      # of numerical libraries (a worker is one core).
      job_script_prologue=[
          "export PYTHONPATH=%s" % (
              REPO_ROOT + (":" + path if path else "")),
          "export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1"],
      scheduler_options={"dashboard": False})
  try:
    check_job_script(cluster.job_script())
  except UserError:
    cluster.close()
    raise
  cluster.scale(jobs=args.jobs)
  return cluster


def check_job_script(script):
  """Asks sbatch whether it would accept the workers' job script.

  dask-jobqueue submits the jobs in the background, where sbatch refusing
  one (an unknown partition, memory no node has) would only be logged and
  the workers awaited until --start-timeout.

  Raises:
    UserError: sbatch refuses it (its message), or is missing.
  """
  with tempfile.NamedTemporaryFile("w", suffix=".sh") as f:
    f.write(script)
    f.flush()
    try:
      result = subprocess.run(["sbatch", "--test-only", f.name],
                              capture_output=True, text=True, check=False)
    except FileNotFoundError:
      raise UserError("sbatch is not on PATH: run this where Slurm jobs "
                      "can be submitted") from None
  if result.returncode != 0:
    lines = [l for l in result.stderr.splitlines() if l.strip()] or ["?"]
    raise UserError("sbatch refuses the Dask workers' job script (%s); "
                    "change the options that set its #SBATCH lines, e.g. "
                    "--partition, --memory-per-job or --skip-directive=--mem"
                    % lines[-1].strip())


def wait_for_workers(cluster, expected, timeout):
  """Waits until `expected` workers joined the scheduler.

  Raises:
    errors.TrainingFailed: not all joined within `timeout` seconds.
  """
  deadline = time.time() + timeout
  joined = 0
  while time.time() < deadline:
    joined = len(cluster.scheduler_info["workers"])
    if joined >= expected:
      return
    time.sleep(0.5)
  raise errors.TrainingFailed(
      "only %d of %d Dask worker(s) joined within %d s: their Slurm jobs "
      "(%s) are still queued or failed; see squeue and the jobs' output, "
      "then rerun (the jobs were cancelled)" % (
          joined, expected, timeout,
          ", ".join(sorted(str(j.job_id) for j in cluster.workers.values()
                           if getattr(j, "job_id", None))) or "none started"))


def run(args):
  """Starts the cluster, runs the data program on it, closes it.

  Returns:
    The data program's exit code.
  """
  cluster = start_cluster(args)
  try:
    expected = args.jobs * args.processes_per_job
    log("scheduler %s; %d Slurm job(s) of %d worker(s) submitted, waiting "
        "for them to join" % (cluster.scheduler_address, args.jobs,
                              args.processes_per_job))
    wait_for_workers(cluster, expected, args.start_timeout)
    log("%d worker(s) joined; running create_pretraining_data.py" % expected)
    command = [sys.executable, os.path.join(REPO_ROOT,
                                            "create_pretraining_data.py")]
    command += args.data_flags + [
        "--dask_scheduler=%s" % cluster.scheduler_address]
    process = subprocess.Popen(command)
    try:
      return process.wait()
    except Stopped:
      # Ctrl-C and scancel signal the program too, `kill` of this script
      # alone does not: give it the time to stop on its own first.
      try:
        process.wait(timeout=10)
      except subprocess.TimeoutExpired:
        process.terminate()
        process.wait()
      raise
  finally:
    cluster.close()


class Stopped(Exception):
  """SIGINT or SIGTERM received; `signum` says which."""

  def __init__(self, signum):
    super().__init__(signum)
    self.signum = signum


def _raise_stopped(signum, unused_frame):
  raise Stopped(signum)


def main(argv):
  args = parse_args(argv[1:])
  # The scheduler runs here: its and the cluster's log lines would bury the
  # data program's; this script says what matters itself.
  logging.getLogger("distributed").setLevel(logging.ERROR)
  logging.getLogger("dask_jobqueue").setLevel(logging.ERROR)
  # Ctrl-C or SIGTERM (scancel of a job running this script): close the
  # cluster, which cancels the workers' jobs, before exiting.
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _raise_stopped)
  return run(args)


if __name__ == "__main__":
  try:
    sys.exit(errors.main_with_user_errors(main)(sys.argv))
  except Stopped as e:
    print("stopped by %s: the Dask cluster was closed and its jobs "
          "cancelled; rerun the same command to make the remaining shards" %
          signal.Signals(e.signum).name, file=sys.stderr, flush=True)
    sys.exit(128 + e.signum)
