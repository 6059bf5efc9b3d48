"""Writing output files so that no half-written file ever has its final name."""

import contextlib
import os
import uuid

import tensorflow.compat.v1 as tf


def partial_name(final_path):
  """The temporary name a file is written under before it is complete."""
  return "%s.partial-%s" % (final_path, uuid.uuid4().hex[:8])


@contextlib.contextmanager
def atomic_path(final_path):
  """Yields a temporary path; renames it to `final_path` only on success.

  On any exception (KeyboardInterrupt included) the temporary file is removed.
  A process killed with SIGKILL leaves at most a `*.partial-*` file behind,
  never a truncated file under the final name.

  Args:
    final_path: where the complete file should end up (local or gfile URL).

  Yields:
    The temporary path to write to.
  """
  tmp = partial_name(final_path)
  try:
    yield tmp
    tf.io.gfile.rename(tmp, final_path, overwrite=True)
  except BaseException:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.remove(tmp)
    raise


@contextlib.contextmanager
def atomic_open(final_path, mode="w"):
  """Like `open`, but the file appears under `final_path` only when closed
  without error."""
  with atomic_path(final_path) as tmp:
    with tf.io.gfile.GFile(tmp, mode) as f:
      yield f


def remove_stale_partials(directory):
  """Deletes `*.partial-*` files left by a killed run in `directory`."""
  if not tf.io.gfile.isdir(directory):
    return
  for name in tf.io.gfile.listdir(directory):
    if ".partial-" in name:
      tf.io.gfile.remove(os.path.join(directory, name))
