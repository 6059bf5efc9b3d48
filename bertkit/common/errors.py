"""What a user sees of a program: one clear line and a non-zero exit on error,
never a traceback; every log line once (console.py)."""

import sys

from absl import logging

from bertkit.common import console

EXIT_USER_ERROR = 2
EXIT_TRAINING_FAILED = 3
EXIT_STOPPED = 4


class UserError(Exception):
  """A mistake in the user's input (a flag, a file, a value).

  The message names the problem: the file, flag or value, and what was
  expected. Programs let it propagate to `main_with_user_errors`, which prints
  it on one line and exits with EXIT_USER_ERROR.
  """


class TrainingFailed(Exception):
  """Training cannot go on (NaN loss, a dead peer worker, corrupt data).

  Not the user's typing mistake, but still one clear line and a non-zero exit
  (EXIT_TRAINING_FAILED); checkpoints written so far stay usable.
  """


class TrainingStopped(Exception):
  """Training stopped on request (SIGTERM/SIGINT) after writing a checkpoint.

  The message is the line to print; the program exits with EXIT_STOPPED, and
  rerunning the same command continues from that checkpoint.
  """


def main_with_user_errors(main):
  """Wraps an absl `main(argv)` so that a UserError ends the program cleanly.

  Args:
    main: the program's main function, taking argv.

  Returns:
    A function with the same signature for `absl.app.run`.
  """

  def wrapped(argv):
    verbosity = logging.get_verbosity()
    console.configure(verbosity)
    console.use_program_format(argv[0], verbosity)
    try:
      return main(argv)
    except UserError as e:
      print("error: %s" % e, file=sys.stderr, flush=True)
      sys.exit(EXIT_USER_ERROR)
    except TrainingFailed as e:
      print("error: %s" % e, file=sys.stderr, flush=True)
      sys.exit(EXIT_TRAINING_FAILED)
    except TrainingStopped as e:
      print(str(e), file=sys.stderr, flush=True)
      sys.exit(EXIT_STOPPED)

  return wrapped


def op_error_reason(text):
  """The line of a TensorFlow error message that says what went wrong.

  Graph-mode errors start with "Graph execution error:" and the Python stack
  where the failing node was defined; the reason follows the "Node: '...'"
  line. Other messages: their first non-empty line.
  """
  lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
  for i, line in enumerate(lines[:-1]):
    if line.startswith("Node: "):
      return lines[i + 1]
  lines = [l for l in lines if l != "Graph execution error:"]
  return lines[0] if lines else ""
