"""User-facing errors: one clear line and a non-zero exit, never a traceback."""

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
    try:
      return main(argv)
    except UserError as e:
      print("error: %s" % e, file=sys.stderr, flush=True)
      sys.exit(EXIT_USER_ERROR)
    except TrainingFailed as e:
      print("error: %s" % e, file=sys.stderr, flush=True)
      sys.exit(EXIT_TRAINING_FAILED)

  return wrapped
