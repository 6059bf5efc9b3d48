"""What a user sees of a program: one clear line and a non-zero exit on error,
never a traceback; every log line once."""

import logging
import sys

EXIT_USER_ERROR = 2
EXIT_TRAINING_FAILED = 3


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


def main_with_user_errors(main):
  """Wraps an absl `main(argv)` so that a UserError ends the program cleanly.

  Args:
    main: the program's main function, taking argv.

  Returns:
    A function with the same signature for `absl.app.run`.
  """

  def wrapped(argv):
    log_each_line_once()
    try:
      return main(argv)
    except UserError as e:
      print("error: %s" % e, file=sys.stderr, flush=True)
      sys.exit(EXIT_USER_ERROR)
    except TrainingFailed as e:
      print("error: %s" % e, file=sys.stderr, flush=True)
      sys.exit(EXIT_TRAINING_FAILED)

  return wrapped


def log_each_line_once():
  """Routes TensorFlow's log records through absl's handler only.

  TensorFlow gives its "tensorflow" logger a stderr handler of its own when it
  is imported before absl installs the root handler, and the records also
  propagate to the root: every INFO line was printed twice, once as
  `INFO:tensorflow:...` and once in absl's format.
  """
  tf_logger = logging.getLogger("tensorflow")
  for handler in list(tf_logger.handlers):
    tf_logger.removeHandler(handler)
  tf_logger.propagate = True
