"""The command lines of the benchmark programs (benchmarks/*.py): argparse
refusing a flag in one `error:` line, and flag types that check what a flag
names before anything is made of it.

Imports nothing of the toolkit beyond the standard library: the PyTorch
peers, whose start-up benchmarks/startup.py times, parse their flags with it.
"""

import argparse
import os


class ArgumentParser(argparse.ArgumentParser):
  """argparse's parser, refusing a flag as every program of the toolkit
  does: one line starting with `error:` and exit 2 (argparse's code, the
  toolkit's EXIT_USER_ERROR), without argparse's usage before it; --help
  prints the help and exits 0."""

  def error(self, message):
    self.exit(2, "error: %s\n" % message)


def fill_defaults(parser, args, values):
  """Sets each flag of `values` ({name: value}) that the command line left
  at the parser's default: what --smoke fills in for a seconds-long run."""
  for name, value in values.items():
    if getattr(args, name) == parser.get_default(name):
      setattr(args, name, value)


def existing_file(path):
  """A flag type: `path`, a file that is there."""
  if not os.path.isfile(path):
    raise argparse.ArgumentTypeError("no such file: %s" % path)
  return path


def existing_dir(path):
  """A flag type: `path`, a directory that is there."""
  if not os.path.isdir(path):
    raise argparse.ArgumentTypeError("no such directory: %s" % path)
  return path


def integers(text):
  """A flag type: comma-separated integers, as a list."""
  try:
    return [int(n) for n in text.split(",") if n.strip()]
  except ValueError:
    raise argparse.ArgumentTypeError(
        "expected comma-separated integers, got %r" % text) from None
