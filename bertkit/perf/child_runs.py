"""The repository's programs run as child processes, and timed as a user would.

Measurements run each training in a process of its own, by the program's
path (never by importing it): the sweep's cells, the CPU peak probe, and the
side-by-side comparisons of benchmarks/, which time the whole process.
"""

import os
import subprocess
import sys
import time

from bertkit.common.errors import EXIT_TRAINING_FAILED
from bertkit.common.errors import EXIT_USER_ERROR
from bertkit.common.errors import UserError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RUN_PRETRAINING = os.path.join(REPO_ROOT, "run_pretraining.py")
BENCHMARK = os.path.join(REPO_ROOT, "benchmark.py")
PYTORCH_PEER = os.path.join(REPO_ROOT, "benchmarks", "pytorch_peer.py")


def child_env():
  """This process's environment, TensorFlow's C++ logs quiet unless set."""
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  return env


def wall_seconds(argv, env, timeout):
  """Whole-process wall time of a command that must succeed.

  Args:
    argv: the command, run in REPO_ROOT.
    env: its environment.
    timeout: seconds it may take.

  Returns:
    float seconds.

  Raises:
    RuntimeError: the command failed (with the end of its stderr).
  """
  start = time.perf_counter()
  result = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
  seconds = time.perf_counter() - start
  if result.returncode != 0:
    raise RuntimeError("%s failed:\n%s" % (" ".join(argv[:2]),
                                            result.stderr[-2000:]))
  return seconds


def count_rate(short_count, long_count, short_seconds, long_seconds):
  """What the long run did beyond the short one (examples, tokens), per
  second of its extra wall time; None if it took no longer."""
  extra = long_seconds - short_seconds
  return (long_count - short_count) / extra if extra > 0 else None


def run_benchmark(main, parse_args):
  """A benchmark script's entry: main(parse_args()), a bad flag or input
  (UserError) one `error:` line and exit 2, a run that failed
  (RuntimeError) one line and exit 3, never a traceback."""
  try:
    main(parse_args())
  except UserError as e:
    print("error: %s" % e, file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)
  except RuntimeError as e:
    print("error: %s" % e, file=sys.stderr)
    sys.exit(EXIT_TRAINING_FAILED)
