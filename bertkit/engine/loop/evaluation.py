"""Held-out evaluation during training, its history and the target that stops.

`HeldOutEvaluationHook` evaluates the training weights every N global steps
and once at the end, without leaving the training session: it builds the
task's eval graph once, in a graph and session of its own, and each round
copies the training variables' values into it (one fetch, one grouped
assign), re-reads the held-out input from its start and runs `steps`
batches. No checkpoint is written or read for it and the training graph is
never rebuilt, which is what Estimator's train-then-evaluate loop costs per
round.

Every process evaluates the same batches with the same weights, so every
process reaches the same figures and, with a target, stops at the same
step; the chief writes:
  - `<output_dir>/eval_history.jsonl`: one JSON object per evaluation:
    step, train_seconds and wall_seconds (training_clock.py), examples
    (training rows seen), eval_seconds, and the task's eval metrics under
    their own names (masked_lm_accuracy, masked_lm_loss, ...);
  - the same figures as TensorBoard summaries under `<output_dir>/eval`,
    where Estimator's own evaluation writes;
  - `<output_dir>/time_to_target.json` with --target_masked_lm_accuracy
    (run_rerank.py: --target_mrr_at_10).

Evaluation time is left out of the training clock and of the throughput
figures (the hook tells the clock, ThroughputHook asks it).
"""

import json
import os
import time

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.engine.loop import preemption
from bertkit.engine.loop import training_clock

HISTORY_FILE = "eval_history.jsonl"
TARGET_FILE = "time_to_target.json"
# The metric --target_masked_lm_accuracy watches.
TARGET_METRIC = "masked_lm_accuracy"


def read_history(output_dir):
  """The evaluations recorded in `output_dir`, in order (a list of dicts)."""
  path = os.path.join(output_dir, HISTORY_FILE)
  if not atomic_io.exists(path):
    return []
  with atomic_io.open_file(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def keep_history_up_to(output_dir, step):
  """Drops the evaluations past global step `step` (chief, at the start).

  A run killed after evaluating step s but before checkpointing it resumes
  from an earlier checkpoint and evaluates s again: the history keeps one
  line per step.
  """
  history = read_history(output_dir)
  kept = [entry for entry in history if entry["step"] <= step]
  if len(kept) == len(history):
    return
  with atomic_io.atomic_open(os.path.join(output_dir, HISTORY_FILE)) as f:
    for entry in kept:
      f.write(json.dumps(entry, sort_keys=True) + "\n")


def target_reached(history, target, metric=TARGET_METRIC):
  """The first evaluation of `history` whose `metric` is at or above
  `target`, or None."""
  for entry in history:
    if entry.get(metric, -1.0) >= target:
      return entry
  return None


def describe_target(result):
  """The line saying when the target was reached, or that it was not."""
  metric = result.get("metric", TARGET_METRIC)
  if result["reached"]:
    return ("%s %g reached at step %d after %.1f s of training (%.1f s "
            "wall)" % (metric, result["target"], result["step"],
                       result["train_seconds"], result["wall_seconds"]))
  return ("%s %g not reached by step %d (best %.4f); the run ended at "
          "--num_train_steps" % (metric, result["target"],
                                 result["step"], result["best"]))


def target_result(history, target, final_step, metric=TARGET_METRIC):
  """The time_to_target.json content of a run's history."""
  entry = target_reached(history, target, metric)
  if entry is None:
    best = max([e.get(metric, 0.0) for e in history] or [0.0])
    return {"target": target, "metric": metric, "reached": False,
            "step": final_step, "best": best}
  return {"target": target, "metric": metric, "reached": True,
          "step": entry["step"], "train_seconds": entry["train_seconds"],
          "wall_seconds": entry["wall_seconds"],
          "examples": entry["examples"], "value": entry[metric]}


def reached_before(output_dir, target):
  """Whether an earlier run of `output_dir` stopped at `target`, at the step
  of its last checkpoint (a rerun then has nothing left to train)."""
  path = os.path.join(output_dir, TARGET_FILE)
  if not atomic_io.exists(path):
    return False
  with atomic_io.open_file(path) as f:
    recorded = json.load(f)
  latest = tf.train.latest_checkpoint(output_dir)
  if not (recorded.get("reached") and recorded.get("target") == target and
          latest):
    return False
  if int(tf.train.load_variable(latest, "global_step")) != recorded["step"]:
    return False
  logging.info("%s in an earlier run of %s; nothing left to train",
               describe_target(recorded), output_dir)
  return True


def _variable_name(variable):
  """`bert/.../kernel`: a variable's name without `:0`."""
  return variable.name.split(":")[0]


class HeldOutEvaluationHook(tf.train.SessionRunHook):
  """Evaluates every N global steps and at the end; see the module docstring.

  Attributes:
    last_result: the metrics of the last evaluation (global_step included),
      or None.
    target: the time_to_target.json content once known, or None.
  """

  # Size: what the hook needs from the run, each a value the runner holds.
  def __init__(self, input_fn, eval_outputs, every_n_steps, steps,
               output_dir, clock, global_batch_size, is_chief,
               session_config=None, target=None, summary_info=None,
               target_metric=TARGET_METRIC):
    """Args:
      input_fn: the EVAL input_fn (params=None) of the held-out records.
      eval_outputs: function(features) -> (mean loss, eval_metric_ops), the
        task's Task.eval_outputs.
      every_n_steps: evaluate when the global step reaches a multiple of
        it; None: at the end only.
      steps: batches per evaluation (None: the whole held-out input).
      output_dir: where the history, summaries and target file go.
      clock: the run's training_clock.TrainingClock.
      global_batch_size: training rows per step, for `examples`.
      is_chief: whether this process writes.
      session_config: the ConfigProto of the eval session.
      target: --target_masked_lm_accuracy (--target_mrr_at_10), or None.
      summary_info: the dict the throughput summary merges when training
        ends (engine_setup.Setup.extra_info); the chief adds the
        time_to_target.json content to it.
      target_metric: the metric `target` is of.
    """
    self._input_fn = input_fn
    self._eval_outputs = eval_outputs
    self._every_n = every_n_steps
    self._steps = steps
    self._output_dir = output_dir
    self._clock = clock
    self._global_batch = global_batch_size
    self._is_chief = is_chief
    self._session_config = session_config
    self._target = target
    self._target_metric = target_metric
    self._summary_info = summary_info
    self._history = []
    self.last_result = None
    self.target = None

  def begin(self):
    self._global_step = tf.train.get_global_step()
    self._history = read_history(self._output_dir) if self._is_chief else []
    self._graph = tf.Graph()
    with self._graph.as_default():
      dataset = self._input_fn(params=None)
      self._iterator = tf.data.make_initializable_iterator(dataset)
      loss, metric_ops = self._eval_outputs(self._iterator.get_next())
      mean_loss = tf.metrics.mean(loss)
      self._values = {name: value for name, (value, _)
                      in metric_ops.items()}
      self._values["loss"] = mean_loss[0]
      self._updates = tf.group(*[update for _, update in metric_ops.values()],
                               mean_loss[1])
      eval_variables = {_variable_name(v): v for v in tf.global_variables()}
      self._placeholders = {name: tf.placeholder(v.dtype.base_dtype,
                                                 v.shape)
                            for name, v in eval_variables.items()}
      self._load = tf.group(*[v.assign(self._placeholders[name])
                              for name, v in eval_variables.items()])
      self._reset = tf.group(self._iterator.initializer,
                             tf.local_variables_initializer())
      init = tf.global_variables_initializer()
    self._graph.finalize()
    self._session = tf.Session(graph=self._graph,
                               config=self._session_config)
    self._session.run(init)
    # The training variables of the same names (replica copies have
    # other names: every replica holds the same values).
    training = {_variable_name(v): v for v in tf.global_variables()}
    missing = sorted(set(self._placeholders) - set(training))
    if missing:
      raise ValueError("The eval graph has variables training does not: %s"
                       % ", ".join(missing[:5]))
    self._training_variables = {name: training[name]
                                for name in self._placeholders}
    self._last_step = None
    if self._is_chief and self._history:
      self._last_step = self._history[-1]["step"]

  def before_run(self, run_context):
    del run_context
    return tf.train.SessionRunArgs(self._global_step)

  def after_run(self, run_context, run_values):
    if not self._every_n:
      return
    # The step fetched with the update may be read before or after its
    # increment; the exact one is read only when either is due.
    fetched = int(run_values.results)
    if fetched % self._every_n and (fetched + 1) % self._every_n:
      return
    step = int(run_context.session.run(self._global_step))
    if step % self._every_n == 0 and step != self._last_step:
      self._evaluate(run_context.session, step)
      if self.target is not None and self.target["reached"]:
        logging.info("%s; stopping", describe_target(self.target))
        run_context.request_stop()

  def end(self, session):
    step = int(session.run(self._global_step))
    stopping = preemption.requested_signal() is not None
    if step != self._last_step and not stopping:
      self._evaluate(session, step)
    if self._target is not None and self._is_chief and not stopping:
      self.target = target_result(self._history, self._target, step,
                                  self._target_metric)
      with atomic_io.atomic_open(os.path.join(self._output_dir,
                                              TARGET_FILE)) as f:
        f.write(json.dumps(self.target, indent=2, sort_keys=True) + "\n")
      if not self.target["reached"]:
        logging.info("%s", describe_target(self.target))
      if self._summary_info is not None:
        self._summary_info["time_to_target"] = self.target
    self._session.close()

  def _evaluate(self, train_session, step):
    """Evaluates the weights of `train_session` at global step `step`."""
    started = time.time()
    values = train_session.run(self._training_variables)
    self._session.run(self._load, feed_dict={
        self._placeholders[name]: value for name, value in values.items()})
    self._session.run(self._reset)
    batches = 0
    while self._steps is None or batches < self._steps:
      try:
        self._session.run(self._updates)
      except tf.errors.OutOfRangeError:
        break
      batches += 1
    metrics = {name: float(value) for name, value
               in self._session.run(self._values).items()}
    eval_seconds = time.time() - started
    self._clock.exclude(eval_seconds)
    self._last_step = step
    entry = dict(metrics, step=step,
                 train_seconds=round(self._clock.train_seconds(), 3),
                 wall_seconds=round(self._clock.wall_seconds(), 3),
                 examples=step * self._global_batch,
                 eval_batches=batches, eval_seconds=round(eval_seconds, 3))
    self.last_result = dict(metrics, global_step=np.int64(step))
    logging.info("eval at step %d: %s (%.1f s, %d batches; %.1f s of "
                 "training so far)", step, ", ".join(
                     "%s %.4f" % (k, metrics[k]) for k in sorted(metrics)),
                 eval_seconds, batches, entry["train_seconds"])
    if self._target is not None and metrics.get(
        self._target_metric, -1.0) >= self._target and self.target is None:
      self.target = target_result([entry], self._target, step,
                                  self._target_metric)
    if not self._is_chief:
      return
    self._history.append(entry)
    with atomic_io.open_file(os.path.join(self._output_dir, HISTORY_FILE),
                             "a") as f:
      f.write(json.dumps(entry, sort_keys=True) + "\n")
    writer = tf.summary.FileWriterCache.get(
        os.path.join(self._output_dir, "eval"))
    writer.add_summary(tf.Summary(value=[
        tf.Summary.Value(tag=name, simple_value=value)
        for name, value in sorted(metrics.items())] + [
            tf.Summary.Value(tag="train_seconds",
                             simple_value=entry["train_seconds"])]), step)
    writer.flush()


class ClockRecorder(tf.estimator.CheckpointSaverListener):
  """Records the training clock of every checkpoint the chief writes."""

  def __init__(self, output_dir, clock):
    self._output_dir = output_dir
    self._clock = clock

  def after_save(self, session, global_step_value):
    del session
    training_clock.record_checkpoint_clock(self._output_dir,
                                           int(global_step_value), self._clock)
