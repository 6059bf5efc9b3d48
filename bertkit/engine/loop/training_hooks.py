"""SessionRunHooks of the training programs (run_pretraining and the
fine-tuning programs).

runner.train decides which of them a run gets; each watches or acts
on one thing: the profiler window, a non-finite loss, a stalled step (a dead
peer), a stop signal (preemption), the final weights' fingerprint.
"""

import hashlib
import json
import os
import sys
import threading
import time

from absl import logging
import numpy as np
import tensorflow as tf2
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.engine.loop import preemption
from bertkit.engine.update import train_step


class ProfilerHook(tf.train.SessionRunHook):
  """Traces steps first..last of this run with the TensorFlow profiler."""

  def __init__(self, output_dir, first, last):
    self._logdir = output_dir
    self._first, self._last = first, last
    self._step = 0

  def before_run(self, run_context):
    self._step += 1
    if self._step == self._first:
      tf2.profiler.experimental.start(self._logdir)
      logging.info("Profiler: tracing steps %d..%d", self._first, self._last)

  def after_run(self, run_context, run_values):
    if self._step == self._last:
      tf2.profiler.experimental.stop()
      logging.info("Profiler: trace written under %s/plugins/profile",
                   self._logdir)

  def end(self, session):
    if self._first <= self._step < self._last:
      tf2.profiler.experimental.stop()


class NonFiniteLossHook(tf.train.SessionRunHook):
  """Watches the training loss for NaN or inf, naming the step.

  With precision.stop_on_nonfinite_loss (the default without --use_fp16):
  raise TrainingFailed at once, before a checkpoint of the diverged weights
  is written; otherwise a diverged run trains on NaN weights for hours.
  Without it (--use_fp16, where the loss scale skips overflowing steps, or
  --nostop_on_nonfinite_loss): log a warning.
  """

  def __init__(self, precision):
    """Args:
      precision: the run's precision.Precision.
    """
    self._stop = precision.stop_on_nonfinite_loss
    self._loss_scaled = precision.loss_scale is not None

  def begin(self):
    self._fetches = {"loss": train_step.step_metrics().loss,
                     "step": tf.train.get_global_step()}

  def before_run(self, run_context):
    del run_context
    return tf.train.SessionRunArgs(self._fetches)

  def after_run(self, run_context, run_values):
    del run_context
    loss, step = run_values.results["loss"], run_values.results["step"]
    if np.isfinite(loss):
      return
    if self._stop:
      raise errors.TrainingFailed(
          "the training loss is %s at step %d; stopping (no checkpoint of "
          "this step is written). Lower --learning_rate, check the data, or "
          "pass --nostop_on_nonfinite_loss to train on regardless"
          % (loss, step))
    logging.warning("Training loss is %s at step %d%s", loss, step,
                    ": the update is skipped and the loss scale lowered"
                    if self._loss_scaled else "")


class StallWatchdogHook(tf.train.SessionRunHook):
  """Ends the process when training stops making progress (a peer died).

  With several worker processes a dead peer leaves the others blocked inside
  a collective (a BytePS push_pull waits for ever), and MonitoredSession even
  re-creates the session on a lost connection and waits again. From the
  moment the session exists (before the start-up broadcast, which a dead
  peer blocks too), a step that does not finish within `timeout_seconds` of
  the previous one ends this process with one error line; rerunning every
  worker resumes from the last checkpoint.
  """

  def __init__(self, timeout_seconds):
    self._timeout = timeout_seconds
    self._last_step_time = None
    self._stop = threading.Event()
    self._thread = None

  def after_create_session(self, session, coord):
    del session, coord
    # Once: a session that MonitoredSession re-creates after losing a peer
    # is not progress.
    if self._thread is None:
      self._last_step_time = time.time()
      self._thread = threading.Thread(target=self._watch, daemon=True)
      self._thread.start()

  def after_run(self, run_context, run_values):
    del run_context, run_values
    self._last_step_time = time.time()

  def _watch(self):
    while not self._stop.wait(1.0):
      stalled = time.time() - self._last_step_time
      if stalled > self._timeout:
        print("error: no training step finished for %d s (--collective_"
              "timeout_seconds=%d): another worker probably died. Rerun every "
              "worker with the same command to resume from the last "
              "checkpoint" % (stalled, self._timeout), file=sys.stderr,
              flush=True)
        os._exit(errors.EXIT_TRAINING_FAILED)  # pylint: disable=protected-access

  def stop(self):
    """Ends the watch (training ended, normally or not)."""
    self._stop.set()

  def end(self, session):
    del session
    self.stop()


class WeightsFingerprintHook(tf.train.SessionRunHook):
  """At the end of training, fingerprints this process's weights.

  Writes `final_weights.<task>.json` in output_dir: global_step, a sha256 of
  every trainable variable's bytes, and whether all local replicas hold
  identical copies. Comparing the files of several workers (or horovod ranks)
  proves they ended with the same weights.
  """

  CHUNK_ELEMENTS = 2**26  # weights fetched per session.run (256 MB float32)

  def __init__(self, output_dir, task_name, strategy):
    self._path = os.path.join(output_dir, "final_weights.%s.json" % task_name)
    self._strategy = strategy

  def begin(self):
    self._step = tf.train.get_global_step()
    self._vars = sorted(tf.trainable_variables(), key=lambda v: v.name)
    # A few session.run calls instead of one per variable: each new set of
    # fetches costs a graph optimisation, seconds over a whole BERT at exit.
    self._chunks, size = [[]], 0
    for var in self._vars:
      if size > self.CHUNK_ELEMENTS:
        self._chunks.append([])
        size = 0
      self._chunks[-1].append(var)
      size += var.shape.num_elements() or 1
    self._identical = tf.reduce_all(tf.stack(
        [tf.constant(True)] +
        [tf.reduce_all(tf.equal(copies[0], other))
         for copies in map(self._copies, self._vars)
         for other in copies[1:]]))

  def _copies(self, var):
    if self._strategy is None:
      return [var]
    return list(self._strategy.experimental_local_results(var))

  def end(self, session):
    digest = hashlib.sha256()
    for chunk in self._chunks:
      values = session.run([self._copies(var)[0] for var in chunk])
      for var, value in zip(chunk, values):
        digest.update(var.name.encode("utf-8"))
        digest.update(value.tobytes())
    replicas_identical = bool(session.run(self._identical))
    record = {"global_step": int(session.run(self._step)),
              "sha256": digest.hexdigest(),
              "num_variables": len(self._vars),
              "local_replicas": len(self._copies(self._vars[0])),
              "replicas_identical": bool(replicas_identical)}
    tf.io.gfile.makedirs(os.path.dirname(self._path))
    with atomic_io.atomic_open(self._path) as f:
      f.write(json.dumps(record, sort_keys=True) + "\n")
    if not replicas_identical:
      logging.error("Replica weights differ at the end of training: the "
                    "all-reduce is broken (%s)", self._path)


class StopOnSignalHook(tf.train.SessionRunHook):
  """Ends training after the step in flight once a stop signal came.

  One process (one device, mirrored): its own signal decides. Several
  processes (multi_worker, horovod): the summed stop vote of a finished step
  decides, which every process receives with that step's gradients, so all of
  them stop after the same step (see preemption.py). The Estimator's
  CheckpointSaverHook then saves that step when the session closes.
  """

  def __init__(self, stop_vote=None):
    """Args:
      stop_vote: with several processes, the preemption.StopVote that the
        run's optimizer sums; None: this process's own signal decides.
    """
    self._stop_vote = stop_vote
    self._stopping = False
    self.stopped_at_step = None
    self.final_step = None

  def begin(self):
    self._global_step = tf.train.get_global_step()

  def after_run(self, run_context, run_values):
    del run_values
    if self._stop_vote is not None:
      stop = self._stop_vote.agreed
    else:
      stop = preemption.requested_signal() is not None
    if stop:
      self._stopping = True
      run_context.request_stop()

  def end(self, session):
    self.final_step = int(session.run(self._global_step))
    if self._stopping:
      self.stopped_at_step = self.final_step


class TimeBudgetHook(tf.train.SessionRunHook):
  """Stops training once --train_time_budget_hours of training time is spent.

  Reads the chief's training seconds that the step's all-reduce brought to
  every process (train_step.StepMetrics.train_seconds), so that every
  process stops after the same step; the final checkpoint is that step's.

  Attributes:
    stopped_at_step: the global step the budget ran out at, or None.
  """

  def __init__(self, budget_seconds):
    self._budget = budget_seconds
    self.stopped_at_step = None

  def begin(self):
    self._fetches = {"train_seconds": train_step.step_metrics().train_seconds}

  def before_run(self, run_context):
    del run_context
    return tf.train.SessionRunArgs(self._fetches)

  def after_run(self, run_context, run_values):
    results = run_values.results
    if results["train_seconds"] >= self._budget:
      self.stopped_at_step = int(run_context.session.run(
          tf.train.get_global_step()))
      logging.info("training time budget of %.0f s spent at step %d "
                   "(%.1f s of training); stopping", self._budget,
                   self.stopped_at_step, results["train_seconds"])
      run_context.request_stop()
