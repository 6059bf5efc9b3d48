"""Checkpoints: the initial one a run starts from, the training directory's
own (resuming from a readable one), and a save that fails.

`--init_checkpoint` may name a checkpoint prefix, a training output_dir, a
Google model directory or a Hugging Face directory (`resolve_init_checkpoint`;
the model such a directory describes: run_directory.py);
`check_init_checkpoint` compares its shapes with the model's before any long
work, and `init_from_checkpoint` points the model's variables at it inside
the model_fn.

A copy or sync that was interrupted leaves a truncated or corrupted
checkpoint behind, and the rerun would fail while restoring it, naming
nothing useful. `fall_back_to_readable` reads the latest checkpoint in full
(TensorFlow checks every tensor's CRC) before training and, when it is
unreadable, points the directory's `checkpoint` file at the newest readable
one. `save_failure_message` turns a failed save (a full disk) into one line.
"""

import os
import re
import shutil
import traceback

from absl import logging
import tensorflow.compat.v1 as tf
from tensorflow.python.distribute import ps_values  # pylint: disable=g-direct-tensorflow-import

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
import modeling


def resolve(path, flag):
  """The checkpoint prefix that a checkpoint flag's value names.

  Args:
    path: a checkpoint prefix, a training output_dir (its latest checkpoint)
      or a Google model directory (bert_model.ckpt).
    flag: the flag's name, for the error message.

  Raises:
    UserError: no checkpoint is there.
  """
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    google_style = os.path.join(path, "bert_model.ckpt")
    if not latest and tf.io.gfile.exists(google_style + ".index"):
      # Google's released zips have bert_model.ckpt but no `checkpoint` file.
      latest = google_style
    if not latest:
      raise UserError("--%s %s is a directory with no checkpoint in it" %
                      (flag, path))
    return latest
  if not tf.io.gfile.exists(path + ".index"):
    raise UserError("--%s %s: no such checkpoint (expected a training output "
                    "directory or %s)" % (flag, path, path + ".index"))
  return path


def resolve_init_checkpoint(path):
  """The checkpoint prefix an --init_checkpoint value names.

  A directory may be a training output_dir, a Google model directory
  (bert_model.ckpt) or a Hugging Face BERT directory (config.json +
  model.safetensors), which is converted to a checkpoint first.

  Raises:
    UserError: nothing checkpoint-like is there.
  """
  if checkpoint_formats.is_hf_dir(path):
    return checkpoint_formats.converted_hf_checkpoint(path)
  return resolve(path, "init_checkpoint")


def check_resumable(output_dir, spec):
  """Refuses an --output_dir whose latest checkpoint lacks variables of the
  model: another program's run (pretraining's, given to a fine-tuning
  program as --output_dir and --init_checkpoint both), which the run would
  resume from, fail to restore once its files are written, and whose
  checkpoints it would rotate away.

  Args:
    output_dir: the run's --output_dir.
    spec: the run's model_spec.ModelSpec (its variable_shapes: the model's
      trainable variables).

  Raises:
    UserError: naming the checkpoint and the variables it lacks.
  """
  latest = tf.train.latest_checkpoint(output_dir)
  if not latest:
    return
  try:
    held = {name for name, _ in tf.train.list_variables(latest)}
  except tf.errors.OpError:
    return  # unreadable: fall_back_to_readable's to say
  missing = sorted(set(spec.variable_shapes()) - held)
  if missing:
    raise UserError(
        "--output_dir %s holds %s, which this run would resume from, but it "
        "lacks %d of the model's variables (%s%s): another program's run; "
        "give another --output_dir" % (
            output_dir, os.path.basename(latest), len(missing),
            ", ".join(missing[:3]), ", ..." if len(missing) > 3 else ""))


def check_init_checkpoint(init_checkpoint, model_shapes,
                          config_source="--bert_config_file"):
  """Compares the checkpoint's shapes with the model's, before training.

  Args:
    init_checkpoint: checkpoint prefix or directory.
    model_shapes: {name: shape} of the model's trainable variables
      (ModelSpec.variable_shapes).
    config_source: where the model's config came from, for the message
      (run_directory.Model.config_source).

  Raises:
    UserError: a variable both have differs in shape.
  """
  path = resolve_init_checkpoint(init_checkpoint)
  # A Hugging Face directory's converted checkpoint is a private file in a
  # temporary directory: the messages name the directory the user gave.
  shown = (init_checkpoint if checkpoint_formats.is_hf_dir(init_checkpoint)
           else path)
  ckpt_shapes = dict(tf.train.list_variables(path))
  mismatched = [(name, shape, ckpt_shapes[name])
                for name, shape in sorted(model_shapes.items())
                if name in ckpt_shapes and list(ckpt_shapes[name]) != shape]
  if mismatched:
    name, model_shape, ckpt_shape = mismatched[0]
    raise UserError(
        "--init_checkpoint %s does not fit the config of %s: %d variable(s) "
        "differ in shape, first %s: %s in the checkpoint but %s in the model"
        % (shown, config_source, len(mismatched), name, ckpt_shape,
           model_shape))
  loaded = [n for n in model_shapes if n in ckpt_shapes]
  fresh = [n for n in model_shapes if n not in ckpt_shapes]
  logging.info("--init_checkpoint %s: %d variable(s) loaded, %d initialised "
               "fresh%s", shown, len(loaded), len(fresh),
               (": " + ", ".join(fresh[:10])) if fresh else "")


def init_from_checkpoint(init_checkpoint):
  """Inside model_fn: initialise matching trainable variables from it.

  TensorFlow is handed the variables whose initializers run
  (`_initialized_variable`), not names: it would look a name up in the
  variable store, which holds what the strategy returned, central storage's
  wrappers included.
  """
  path = resolve_init_checkpoint(init_checkpoint)
  tvars = tf.trainable_variables()
  assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, path)
  # As modeling.get_assignment_map_from_checkpoint names them: a mirrored
  # variable's op, in a replica's context, is that replica's copy's.
  by_name = {re.sub(r":\d+$", "", v.name): v for v in tvars}
  tf.train.init_from_checkpoint(path, {
      ckpt_name: _initialized_variable(by_name[name])
      for ckpt_name, name in assignment_map.items()})


def _initialized_variable(variable):
  """The variable that carries `variable`'s initializer.

  tf.train.init_from_checkpoint points the initializer of the object it is
  given at the checkpoint (TF 2.15 checkpoint_utils._set_checkpoint_initializer
  sets `variable._initializer_op`). Central storage's AggregatingVariable
  forwards `initializer` to the variable it wraps, so an initializer set on
  the wrapper never runs and the variable keeps its random initial value: the
  wrapped variable must get it. Mirrored variables honour their own
  `_initializer_op` (it restores every copy) and are given as they are.
  """
  if isinstance(variable, ps_values.AggregatingVariable):
    return variable.get()
  return variable


def unreadable_reason(prefix):
  """Why the checkpoint `prefix` cannot be restored, or None if it can.

  Reads every tensor, so truncated data files and flipped bits (CRC
  mismatches) are both found.
  """
  try:
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  # The reader's bindings turn C++ statuses into assorted exception types
  # (OpError, ValueError, IndexError for a short read, ...).
  except Exception as e:  # pylint: disable=broad-except
    return (errors.op_error_reason(getattr(e, "message", None) or str(e))
            or type(e).__name__)
  return None


def fall_back_to_readable(model_dir):
  """Makes a rerun resume from the newest checkpoint that can be read.

  Args:
    model_dir: the Estimator's model_dir.

  Returns:
    The checkpoint prefix training resumes from, or None (no checkpoint).

  Raises:
    UserError: the directory lists checkpoints, and none can be read.
  """
  state = tf.train.get_checkpoint_state(model_dir)
  if not state or not state.model_checkpoint_path:
    return None
  candidates = [p for p in state.all_model_checkpoint_paths
                if p != state.model_checkpoint_path]
  candidates.append(state.model_checkpoint_path)
  unreadable = []
  for prefix in reversed(candidates):
    reason = unreadable_reason(prefix)
    if reason is None:
      break
    unreadable.append((prefix, reason))
  else:
    raise UserError(
        "no readable checkpoint in %s: %s. Restore a good copy, or move them "
        "away to train from scratch" % (model_dir, "; ".join(
            "%s (%s)" % (os.path.basename(p), r) for p, r in unreadable)))
  if not unreadable:
    return prefix
  logging.warning(
      "The latest checkpoint %s is unreadable (%s); resuming from %s, the "
      "newest readable one. The unreadable files stay where they are and are "
      "overwritten when training reaches that step again.",
      unreadable[0][0], unreadable[0][1], prefix)
  kept = candidates[:candidates.index(prefix) + 1]
  tf.train.update_checkpoint_state(
      model_dir, os.path.basename(prefix),
      all_model_checkpoint_paths=[os.path.basename(p) for p in kept])
  return prefix


def _failed_save_path(exc):
  """The checkpoint prefix a Saver.save up the traceback was writing."""
  for frame, _ in traceback.walk_tb(exc.__traceback__):
    code = frame.f_code
    if (code.co_name == "save" and
        code.co_filename.endswith(os.path.join("training", "saver.py"))):
      return frame.f_locals.get("checkpoint_file")
  return None


def _remove_partial_save(model_dir, checkpoint_file):
  """Deletes what the failed save left: its temporary directory, and its
  files unless the checkpoint itself completed (then only the meta graph,
  written last, can be partial)."""
  complete = tf.train.latest_checkpoint(model_dir) == checkpoint_file
  for path in tf.io.gfile.glob(checkpoint_file + "_temp*"):
    tf.io.gfile.rmtree(path)
  suffixes = (".meta",) if complete else (".meta", ".index", ".data-*")
  for suffix in suffixes:
    for path in tf.io.gfile.glob(checkpoint_file + suffix):
      tf.io.gfile.remove(path)


def save_failure_message(exc, model_dir):
  """One line for an exception raised while writing a checkpoint, or None.

  Removes the partial files of the failed save, so that the latest complete
  checkpoint stays the one a rerun resumes from.

  Args:
    exc: an exception from training.
    model_dir: the directory checkpoints are written to.
  """
  checkpoint_file = _failed_save_path(exc)
  if checkpoint_file is None:
    return None
  try:
    _remove_partial_save(model_dir, checkpoint_file)
  except tf.errors.OpError as e:
    logging.warning("Could not remove the partial checkpoint %s: %s",
                    checkpoint_file, e.message)
  reason = (errors.op_error_reason(getattr(exc, "message", None) or str(exc))
            or type(exc).__name__)
  free = ""
  if not atomic_io.is_url(model_dir):
    free = "; %.1f MB free on its disk" % (
        shutil.disk_usage(model_dir).free / 2**20)
  latest = tf.train.latest_checkpoint(model_dir)
  return ("could not write checkpoint %s in %s (%s)%s. The latest complete "
          "checkpoint, %s, is intact: free some space, then rerun the same "
          "command to continue from it" % (
              os.path.basename(checkpoint_file), model_dir, reason, free,
              os.path.basename(latest) if latest else "none"))


class PeriodicSaverHook(tf.train.CheckpointSaverHook):
  """Estimator's CheckpointSaverHook without the work it does before the
  first step.

  TensorFlow's hook, as the session starts, writes graph.pbtxt (the graph as
  text), the graph and MetaGraph into the events file, and a checkpoint of
  the state the run starts from: a second of a BERT-mini run's start-up,
  spent before it trains. None of it is needed then: a fresh run killed
  before its first checkpoint starts again from step 0, where that
  checkpoint would have put it, and a resumed run's starting state is the
  checkpoint it resumed from. Here the graphs are written with the first
  checkpoint instead, and checkpoints come every save_steps global steps and
  at the end (a stop signal included), as the flags ask.

  Estimator takes it for its own (it is a CheckpointSaverHook) and hands it
  the saving listeners.
  """

  def __init__(self, checkpoint_dir, save_steps):
    super().__init__(checkpoint_dir, save_steps=save_steps)
    self._graphs_written = False

  def after_create_session(self, session, coord):
    del coord  # the hook's signature
    # The periodic saves count from the step the run starts at.
    self._timer.update_last_triggered_step(
        session.run(self._global_step_tensor))

  def _save(self, session, step):
    if not self._graphs_written:
      self._write_graphs()
    return super()._save(session, step)

  def _write_graphs(self):
    """What TensorFlow's hook writes as the session starts: graph.pbtxt,
    and the graph and MetaGraph for TensorBoard."""
    self._graphs_written = True
    graph = tf.get_default_graph()
    graph_def = graph.as_graph_def(add_shapes=True)
    tf.io.write_graph(graph_def, self._checkpoint_dir, "graph.pbtxt")
    saver = self._get_saver()
    self._summary_writer.add_graph(graph)
    self._summary_writer.add_meta_graph(tf.train.export_meta_graph(
        graph_def=graph_def, saver_def=saver.saver_def if saver else None))
