"""The one expander of file flags (`--input_file=a.txt,shards/*.txt,dir`).

Every program reads its input files through `expand_file_patterns`: a
comma-separated list whose items are file names or globs, each expanded to
its sorted matches, item after item. Local paths use the glob module (no
TensorFlow); other paths (gs://...) tf.io.gfile, imported only then.
"""

import glob
import os

import atomic_io
import errors


def split_file_list(value, flag_name):
  """Splits a comma-separated flag value, rejecting empty items.

  Args:
    value: the flag's value.
    flag_name: the flag's name, for the error message.

  Returns:
    The list of items.

  Raises:
    errors.UserError: the value is empty or has an empty item (e.g. a
      trailing comma).
  """
  items = [item.strip() for item in (value or "").split(",")]
  if not all(items):
    raise errors.UserError(
        "--%s=%r has an empty entry; expected a comma-separated list of "
        "file names" % (flag_name, value))
  return items


def files_under(directory):
  """Non-hidden regular files below `directory`, recursively, sorted."""
  found = []
  for root, dirs, files in os.walk(directory):
    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    found.extend(os.path.join(root, f) for f in sorted(files)
                 if not f.startswith("."))
  return found


def _glob(pattern):
  if atomic_io.is_url(pattern):
    gfile = atomic_io.gfile()
    return sorted(gfile.glob(pattern)), gfile.isdir
  return sorted(glob.glob(pattern)), os.path.isdir


def expand_file_patterns(value, flag_name="input_file",
                         read_directories=False):
  """Expands a comma-separated list of file names and globs.

  Args:
    value: the flag's value.
    flag_name: the flag's name, for error messages.
    read_directories: a matched directory stands for its non-hidden files,
      recursively (local only); otherwise it is an error.

  Returns:
    The files: each item's matches, sorted, item after item.

  Raises:
    errors.UserError: an item is empty or matches no file, or a match is a
      directory (which would silently read as empty) and read_directories
      is off, or holds no file.
  """
  paths = []
  for pattern in split_file_list(value, flag_name):
    matches, isdir = _glob(pattern)
    if not matches:
      raise errors.UserError(
          "--%s pattern %s matches no file" % (flag_name, pattern))
    for match in matches:
      if not isdir(match):
        paths.append(match)
      elif not read_directories:
        raise errors.UserError(
            "--%s %s is a directory; expected files (use a glob such as "
            "%s/*)" % (flag_name, match, match.rstrip("/")))
      else:
        files = files_under(match)
        if not files:
          raise errors.UserError(
              "--%s directory %s holds no (non-hidden) file"
              % (flag_name, match))
        paths.extend(files)
  return paths
