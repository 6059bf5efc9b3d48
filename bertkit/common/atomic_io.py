"""Writing output files so that no half-written file ever has its final name.

Local paths use the os module; other paths (gs://..., hdfs://...) go through
tf.io.gfile, imported only then, so that programs writing local files
(create_pretraining_data's workers) never load TensorFlow.
"""

import contextlib
import importlib
import os
import uuid


def is_url(path):
  """True for a path a file system plugin serves (gs://bucket/x, ...)."""
  return "://" in path


def gfile():
  """tf.io.gfile, imported on first use (TensorFlow costs ~430 MB)."""
  return importlib.import_module("tensorflow.compat.v1").io.gfile


def partial_name(final_path):
  """The temporary name a file is written under before it is complete."""
  return "%s.partial-%s" % (final_path, uuid.uuid4().hex[:8])


def open_file(path, mode="r"):
  """`open` for local paths, tf.io.gfile.GFile for URLs."""
  if is_url(path):
    return gfile().GFile(path, mode)
  return open(path, mode)


def exists(path):
  return gfile().exists(path) if is_url(path) else os.path.exists(path)


def remove(path):
  if is_url(path):
    gfile().remove(path)
  else:
    os.remove(path)


@contextlib.contextmanager
def atomic_path(final_path):
  """Yields a temporary path; renames it to `final_path` only on success.

  On any exception (KeyboardInterrupt and SystemExit included) the temporary
  file is removed. A process killed with SIGKILL leaves at most a
  `*.partial-*` file behind, never a truncated file under the final name.

  Args:
    final_path: where the complete file should end up (local or URL).

  Yields:
    The temporary path to write to.
  """
  tmp = partial_name(final_path)
  try:
    yield tmp
    if is_url(final_path):
      gfile().rename(tmp, final_path, overwrite=True)
    else:
      os.replace(tmp, final_path)
  except BaseException:
    if exists(tmp):
      remove(tmp)
    raise


@contextlib.contextmanager
def atomic_open(final_path, mode="w"):
  """Like `open`, but the file appears under `final_path` only when closed
  without error."""
  with atomic_path(final_path) as tmp:
    with open_file(tmp, mode) as f:
      yield f


def remove_stale_partials(directory, prefix=""):
  """Deletes `*.partial-*` files left by a killed run in `directory`.

  Args:
    directory: the directory to clean (nothing happens if it is missing).
    prefix: only files whose name starts with it.
  """
  if is_url(directory):
    if not gfile().isdir(directory):
      return
    names = gfile().listdir(directory)
  elif os.path.isdir(directory):
    names = os.listdir(directory)
  else:
    return
  for name in names:
    if name.startswith(prefix) and ".partial-" in name:
      remove(os.path.join(directory, name))


def write_tfrecords(path, records):
  """Writes the serialized records to the TFRecord file `path`, atomically.

  Returns:
    The number of records written.
  """
  tf = importlib.import_module("tensorflow.compat.v1")
  count = 0
  with atomic_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for record in records:
        writer.write(record)
        count += 1
  return count
