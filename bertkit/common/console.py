"""What the programs print: their own lines, TensorFlow's detail on request.

By default a program shows what it is doing, its progress, the warnings that
concern the user, errors and its summary, each as a line of its own in the
style of the scripts: `[run_pretraining] message`, `[run_pretraining]
warning: message`. TensorFlow's INFO lines (the RunConfig it built, "Calling
model_fn", every hook it creates), the deprecation notices TensorFlow and
Keras address to this toolkit's code, and the C++ runtime's start-up lines
come back with absl's `--verbosity=1` (`-v 1`), together with the programs'
own DEBUG lines and absl's line format (level, date, time, thread, file and
line: `I1125 23:58:17.588982 140632555826048 engine_setup.py:237] ...`);
`-v -1` leaves warnings and errors.
"""

import logging
import os
import warnings

from absl import logging as absl_logging

# absl's verbosity (0 = INFO, 1 = DEBUG) from which TensorFlow's detail shows.
DETAIL_VERBOSITY = 1

# TF_CPP_MIN_LOG_LEVEL when the user has not set it and asked for no detail:
# 3 also hides the CUDA plugin "Unable to register cuDNN factory" errors
# printed at every import; a failing op still raises a Python error.
QUIET_NATIVE_LOG_LEVEL = "3"

_VERBOSITY_FLAGS = ("-v", "--v", "-verbosity", "--verbosity")

# Messages of TensorFlow's logger that speak to the toolkit's code, not to
# the user (deprecations, and an argument the Estimator API always warns
# about for a model_fn taking `params`).
_DEVELOPER_NOTICES = ("is deprecated", "Instructions for updating",
                      "includes params argument, but params are not passed")


def verbosity_from_argv(argv):
  """absl's --verbosity as written on a command line, before flag parsing.

  Args:
    argv: the command line, program name first.

  Returns:
    The last -v/--verbosity value given, 0 (absl's INFO) if none.
  """
  verbosity = 0
  args = iter(argv[1:])
  for arg in args:
    if arg == "--":
      break
    name, has_value, value = arg.partition("=")
    if name in _VERBOSITY_FLAGS:
      if not has_value:
        value = next(args, "")
      try:
        verbosity = int(value)
      except ValueError:
        pass  # absl's parser reports it.
  return verbosity


def quiet_native_logs(argv):
  """Hides the C++ runtime's log lines unless the command asks for detail.

  Must run before TensorFlow is imported: the runtime reads
  TF_CPP_MIN_LOG_LEVEL once, at its first line, which it prints on import.
  A value the user set is kept.

  Args:
    argv: the command line (sys.argv).
  """
  if verbosity_from_argv(argv) < DETAIL_VERBOSITY:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_NATIVE_LOG_LEVEL)


def _is_for_the_user(record):
  message = record.getMessage()
  return not any(notice in message for notice in _DEVELOPER_NOTICES)


def configure(verbosity):
  """Sets what TensorFlow's Python logger and warnings show.

  TensorFlow's records go through absl's handler only (TensorFlow gives its
  logger a stderr handler of its own when imported before absl installs
  one, and the records also reach the root's: each line printed twice).
  Below DETAIL_VERBOSITY they are kept from WARNING up, less the notices to
  developers, and Python warnings raised by TensorFlow and Keras (or about
  their deprecated `tf.layers`) are ignored.

  Args:
    verbosity: absl's --verbosity value.
  """
  tf_logger = logging.getLogger("tensorflow")
  for handler in list(tf_logger.handlers):
    tf_logger.removeHandler(handler)
  tf_logger.propagate = True
  tf_logger.removeFilter(_is_for_the_user)
  if verbosity >= DETAIL_VERBOSITY:
    tf_logger.setLevel(logging.NOTSET)
    return
  tf_logger.setLevel(logging.WARNING)
  tf_logger.addFilter(_is_for_the_user)
  warnings.filterwarnings("ignore", module=r"(tensorflow|tf_keras|keras)\.")
  warnings.filterwarnings("ignore", message=r"`tf\.layers\.\w+` is deprecated")


def program_name(path):
  """The name a program's lines start with: its file name without `.py`.

  Args:
    path: the program's path as run (argv[0]).

  Returns:
    e.g. "run_pretraining" for "/repo/run_pretraining.py".
  """
  return os.path.splitext(os.path.basename(path))[0]


class ProgramFormatter(logging.Formatter):
  """A log record as one of the program's own lines.

  `[name] message` for INFO and below; above INFO the level comes first,
  lowercase, as in the `error:` lines: `[name] warning: message`. An
  exception's traceback, if the record carries one, follows on the next
  lines as logging.Formatter writes it.
  """

  def __init__(self, name):
    super().__init__()
    self.name = name

  def format(self, record):
    text = super().format(record)
    if record.levelno > logging.INFO:
      text = "%s: %s" % (record.levelname.lower(), text)
    return "[%s] %s" % (self.name, text)


def use_program_format(program, verbosity):
  """Sets how absl's handler writes the lines of every logger.

  Below DETAIL_VERBOSITY, as the program's own lines (ProgramFormatter);
  from it, in absl's format, whose file and line point at the code. Every
  record reaches the console through absl's handler only (`configure`), so
  this is the one place that decides the look of a line.

  Args:
    program: the program's path as run (argv[0]).
    verbosity: absl's --verbosity value.
  """
  if verbosity >= DETAIL_VERBOSITY:
    formatter = absl_logging.PythonFormatter()
  else:
    formatter = ProgramFormatter(program_name(program))
  absl_logging.get_absl_handler().setFormatter(formatter)
