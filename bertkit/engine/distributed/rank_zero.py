"""Rank 0 writes, the other ranks follow: shared by the engines of processes.

Under horovod and BytePS every process (rank) builds the same single-device
graph. Rank 0 alone writes checkpoints and summaries to --output_dir; the
other ranks start from its variables (`BroadcastFromRankZeroHook`) and keep
their model directory in a scratch location (`scratch_model_dir`), where they
save their final weights for `Estimator.evaluate` to read.

The engine supplies its broadcast (`broadcast_variables(variables,
root_rank)`, horovod's and BytePS's have that signature) and its rank; this
module knows nothing else of it.
"""

import atexit
import os
import shutil
import tempfile

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io


def scratch_root_variable(engine):
  """The environment variable naming where non-zero ranks of `engine` keep
  their scratch model_dir (BERT_HOROVOD_SCRATCH_ROOT, BERT_BYTEPS_...).

  When set, the scratch directories are kept after the run (for inspection
  and tests); by default they live in the system temp directory and are
  removed at exit.
  """
  return "BERT_%s_SCRATCH_ROOT" % engine.upper()


def scratch_model_dir(output_dir, engine, rank):
  """A fresh model_dir for non-zero rank `rank`, outside output_dir.

  It starts with a checkpoint state file naming output_dir's latest
  checkpoint (when this machine can see it), so that this rank resumes, or
  finds training already finished, exactly as rank 0 does.

  Args:
    output_dir: rank 0's --output_dir.
    engine: "horovod" or "byteps" (names the directory and its root's
      environment variable, `scratch_root_variable`).
    rank: this process's rank.

  Returns:
    The directory path.
  """
  root = os.environ.get(scratch_root_variable(engine))
  if root:
    tf.io.gfile.makedirs(root)
  path = tempfile.mkdtemp(prefix="bert-%s-rank%d-" % (engine, rank), dir=root)
  if not root:
    atexit.register(shutil.rmtree, path, True)
  latest = tf.train.latest_checkpoint(output_dir)
  if latest:
    if not atomic_io.is_url(latest):
      latest = os.path.abspath(latest)
    tf.train.update_checkpoint_state(path, latest,
                                     all_model_checkpoint_paths=[latest])
  logging.info("%s rank %d: scratch model_dir %s (starts from %s)", engine,
               rank, path, latest or "rank 0's broadcast")
  return path


class BroadcastFromRankZeroHook(tf.train.SessionRunHook):
  """Makes every rank start from rank 0's variables.

  The broadcast runs after session creation, i.e. after rank 0 restored its
  checkpoint (or initialised fresh weights), and covers every global
  variable: weights, optimizer slots, loss scale and global_step. A rank
  given a `final_checkpoint_dir` saves its final variables there at the end.
  """

  def __init__(self, broadcast_variables, rank, final_checkpoint_dir=None):
    """
    Args:
      broadcast_variables: the engine's `(variables, root_rank)` -> op
        setting every rank's `variables` to root_rank's.
      rank: this process's rank, for the log.
      final_checkpoint_dir: where a non-zero rank saves its final weights
        (its scratch_model_dir); None on rank 0, whose checkpoints the
        Estimator writes.
    """
    self._broadcast_variables = broadcast_variables
    self._rank = rank
    self._final_dir = final_checkpoint_dir
    self._broadcast = None
    self._saver = None
    self._global_step = None

  def begin(self):
    self._broadcast = self._broadcast_variables(tf.global_variables(), 0)
    if self._final_dir:
      self._global_step = tf.train.get_global_step()
      self._saver = tf.train.Saver(sharded=True, max_to_keep=1)

  def after_create_session(self, session, coord):
    del coord
    session.run(self._broadcast)

  def end(self, session):
    if self._saver is None:
      return
    step = int(session.run(self._global_step))
    path = self._saver.save(session, os.path.join(self._final_dir,
                                                  "model.ckpt"),
                            global_step=step, write_meta_graph=False)
    logging.info("rank %d: final weights of step %d in %s", self._rank, step,
                 path)
