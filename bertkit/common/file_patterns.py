"""The one expander of file flags (`--input_file=a.txt,shards/*.txt,dir`).

Every program reads its input files through `expand_file_patterns`: a
comma-separated list whose items are file names or globs, each expanded to
its sorted matches, item after item. Local paths use the glob module (no
TensorFlow); other paths tf.io.gfile, imported only then: TensorFlow reads
gs:// itself, and s3:// (hdfs://, az://, ...) once the tensorflow-io package
is imported, which happens here when such a URL needs it. A URL TensorFlow
cannot read is one error line naming what would read it.
The corpora of create_pretraining_data and create_vocab go through
`expand_corpus_files`, the same expansion with sizes, whose URLs are served
by fsspec (s3://, gs://, hdfs://, memory://, ... whatever fsspec package is
installed).
"""

import glob
import importlib
import os

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common import option_fields


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


def url_filesystem(url, flag_name="input_file"):
  """fsspec's file system for `url`, and the path within it.

  Raises:
    errors.UserError: the scheme is unknown, or its fsspec package is not
      installed (the message names the package).
  """
  import fsspec.core  # pylint: disable=g-import-not-at-top
  try:
    return fsspec.core.url_to_fs(url)
  except ImportError as e:
    raise errors.UserError(
        "--%s %s: %s (the fsspec package for %s:// URLs is missing)" % (
            flag_name, url, e, fsspec.core.split_protocol(url)[0])) from None
  except ValueError as e:
    raise errors.UserError("--%s %s: %s; expected a local path or a URL "
                           "fsspec knows" % (flag_name, url, e)) from None


def _expand_url(pattern, flag_name, read_directories):
  """(URL, size) of the files a URL, URL glob or URL directory names."""
  fs, path = url_filesystem(pattern, flag_name)
  try:
    matches = sorted(fs.glob(path)) if glob.has_magic(path) else (
        [path] if fs.exists(path) else [])
    found = []
    for match in matches:
      if fs.isdir(match) and not read_directories:
        raise errors.UserError(
            "--%s %s is a directory; expected files (use a glob such as "
            "%s/*)" % (flag_name, fs.unstrip_protocol(match),
                       fs.unstrip_protocol(match).rstrip("/")))
      if fs.isdir(match):
        files = sorted(
            name for name, info in fs.find(match, detail=True).items()
            if info["type"] == "file" and not any(
                part.startswith(".") for part in
                name[len(match.rstrip("/")):].split("/")))
        if not files:
          raise errors.UserError("--%s directory %s holds no (non-hidden) "
                                 "file" % (flag_name, pattern))
        found.extend((f, fs.size(f)) for f in files)
      else:
        found.append((match, fs.size(match)))
  except OSError as e:
    raise errors.UserError("--%s %s: cannot list it: %s" % (
        flag_name, pattern, e)) from None
  return [(fs.unstrip_protocol(f), size) for f, size in found]


def expand_corpus_files(value, flag_name="input_file", read_directories=True):
  """Expands a corpus flag: files, globs, directories, local or URLs.

  Args:
    value: comma-separated items; each a file, a glob (matches sorted) or a
      directory (its non-hidden files, recursively, sorted); local paths or
      URLs (fsspec).
    flag_name: the flag's name, for error messages.
    read_directories: whether a directory stands for its files (else it is
      an error).

  Returns:
    The list of (path or URL, size in bytes), in order.

  Raises:
    errors.UserError: an item matches nothing, a directory holds no file,
      or a URL's scheme is unknown or its fsspec package not installed.
  """
  found = []
  for pattern in split_file_list(value, flag_name):
    if atomic_io.is_url(pattern):
      files = _expand_url(pattern, flag_name, read_directories)
      if not files:
        raise errors.UserError(
            "--%s pattern %s matches no file" % (flag_name, pattern))
      found.extend(files)
    else:
      found.extend((path, os.path.getsize(path)) for path in
                   expand_file_patterns(pattern, flag_name,
                                        read_directories=read_directories))
  return found


def _load_tensorflow_io():
  """Imports tensorflow-io, whose import adds TensorFlow's file systems for
  s3://, hdfs://, az://, ...; returns whether it is installed."""
  try:
    importlib.import_module("tensorflow_io")
  except ImportError:
    return False
  return True


def _glob_url(pattern, flag_name):
  """(match, is a directory) of a URL glob, through tf.io.gfile.

  Raises:
    errors.UserError: TensorFlow has no file system for the URL's scheme,
      even with tensorflow-io, or cannot list the URL.
  """
  tf = importlib.import_module("tensorflow")
  gfile = atomic_io.gfile()
  scheme = pattern.split("://", 1)[0]
  try:
    try:
      matches = sorted(gfile.glob(pattern))
    except tf.errors.UnimplementedError:
      if not _load_tensorflow_io():
        raise
      matches = sorted(gfile.glob(pattern))
    return [(match, gfile.isdir(match)) for match in matches]
  except tf.errors.UnimplementedError:
    raise errors.UserError(
        "--%s %s: TensorFlow cannot read %s:// URLs (it reads local paths "
        "and gs://; s3://, hdfs:// and az:// with the tensorflow-io package "
        "installed: pip install tensorflow-io); expected a path or URL "
        "TensorFlow reads" % (flag_name, pattern, scheme)) from None
  except tf.errors.OpError as e:
    raise errors.UserError("--%s %s: cannot list it: %s" % (
        flag_name, pattern, errors.op_error_reason(e.message))) from None


def _glob(pattern, flag_name):
  """(match, is a directory) of a local or URL glob, matches sorted."""
  if atomic_io.is_url(pattern):
    return _glob_url(pattern, flag_name)
  return [(match, os.path.isdir(match))
          for match in sorted(glob.glob(pattern))]


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
      is off, or holds no file; or a URL TensorFlow cannot read.
  """
  paths = []
  for pattern in split_file_list(value, flag_name):
    matches = _glob(pattern, flag_name)
    if not matches:
      raise errors.UserError(
          "--%s pattern %s matches no file" % (flag_name, pattern))
    for match, isdir in matches:
      if not isdir:
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


def split_file(data_dir, split, names):
  """The first of `names` present in data_dir: the file of a dataset's split
  where distributions name it differently (CoNLL-2003's eng.testa or
  valid.txt).

  Raises:
    errors.UserError: none of them is there.
  """
  for name in names:
    path = os.path.join(data_dir, name)
    if os.path.isfile(path):
      return path
  raise errors.UserError("--data_dir %s has no %s file (%s)" % (
      data_dir, split, " or ".join(names)))


def check_paths(options):
  """Refuses a path option naming a local file or directory that is not
  there (option_fields.FILE, DIRECTORY).

  The programs call it before importing TensorFlow, so a mistyped path is
  refused at once; a URL is checked when it is read (tf.io.gfile).

  Args:
    options: a program's options.

  Raises:
    UserError: "--NAME PATH: no such file" or "--NAME PATH is not a
      directory" for the first one missing.
  """
  for name, path, kind in option_fields.paths(options):
    if kind == option_fields.DIRECTORY:
      if not (atomic_io.gfile().isdir(path) if atomic_io.is_url(path)
              else os.path.isdir(path)):
        raise errors.UserError("--%s %s is not a directory" % (name, path))
    elif not atomic_io.is_url(path) and not os.path.isfile(path):
      raise errors.UserError("--%s %s: no such file" % (name, path))


def check_output_reads_nothing(output_flag, outputs, inputs):
  """Refuses an output file that is one of the files the program reads:
  writing it would replace what was read (a corpus replaced by its vocab or
  its records). Real paths are compared, symlinks resolved; URLs are not.

  Args:
    output_flag: the output's flag name, e.g. "output_file".
    outputs: the output file paths.
    inputs: (flag name, path) of each file read.

  Raises:
    UserError: "--output_file c.txt is --input_file c.txt, which ...".
  """
  read = {}
  for flag, path in inputs:
    if path and not atomic_io.is_url(path):
      read.setdefault(os.path.realpath(path), (flag, path))
  for output in outputs:
    if atomic_io.is_url(output):
      continue
    same = read.get(os.path.realpath(output))
    if same:
      raise errors.UserError(
          "--%s %s is --%s %s, which the program reads: writing it would "
          "replace it; give another --%s" % ((output_flag, output) + same +
                                             (output_flag,)))
