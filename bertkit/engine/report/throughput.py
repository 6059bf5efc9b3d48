"""Measuring training speed: the number this toolkit exists to report.

`ThroughputHook` times every training step (wall clock between consecutive
steps, so input stalls and hooks count), logs examples/sec (global and per
replica), loss, learning rate and ETA every `log_every` steps to the console,
TensorBoard and `<output_dir>/throughput.jsonl`, and at the end writes
`<output_dir>/throughput_summary.json` with the steady-state figure.

Steady state excludes, as NVIDIA's BERT reference does:
  - the first `warmup_steps` steps of this run (graph optimisation, allocator
    and cache warm-up), counted from the resume point, not from step 0;
  - every step during which a checkpoint was written.
"""

import dataclasses
import json
import os
import time

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.engine.update import train_step

def steady_state(step_records, warmup_steps):
  """Steady-state throughput from per-step records.

  Args:
    step_records: list of dicts with keys "examples", "seconds", "saved"
      (a checkpoint was written during the step), in order.
    warmup_steps: leading steps to exclude.

  Returns:
    dict with examples_per_sec (None if no step qualifies), steps_counted,
    steps_excluded_warmup, steps_excluded_checkpoint; sequences_per_sec and
    real_tokens_per_sec too when every record has "sequences" and
    "real_tokens".
  """
  counted = step_records[warmup_steps:]
  excluded_ckpt = sum(1 for r in counted if r["saved"])
  counted = [r for r in counted if not r["saved"]]
  seconds = sum(r["seconds"] for r in counted)
  result = {
      "steps_counted": len(counted),
      "steps_excluded_warmup": min(warmup_steps, len(step_records)),
      "steps_excluded_checkpoint": excluded_ckpt,
  }
  for key in ("examples",) + COUNTED:
    if key == "examples" or all(key in r for r in step_records):
      result[key + "_per_sec"] = (sum(r[key] for r in counted) / seconds
                                  if counted and seconds > 0 else None)
  return result


# Per-step counts recorded when the model_fn registers BatchCounts.
COUNTED = tuple(field.name
                for field in dataclasses.fields(train_step.BatchCounts))
# In the output directory: one JSON line per logged step, then the summary
# (read by benchmark.py's sweep and by users' tools).
STEPS_FILE = "throughput.jsonl"
SUMMARY_FILE = "throughput_summary.json"


class CheckpointMarker(tf.estimator.CheckpointSaverListener):
  """Tells the hook which steps wrote a checkpoint."""

  def __init__(self, hook):
    self._hook = hook

  def after_save(self, session, global_step_value):
    del session, global_step_value
    self._hook.mark_checkpoint_saved()


class ThroughputHook(tf.train.SessionRunHook):
  """Logs and records examples/sec; see the module docstring."""

  # Size: the run's facts the figures need, each with a default.
  def __init__(self, output_dir, global_batch_size, num_replicas, max_steps,
               log_every=100, warmup_steps=10, is_chief=True, extra_info=None,
               clock=None, time_budget_seconds=None):
    """Args:
      output_dir: where throughput.jsonl, the summary and events go.
      global_batch_size: examples per step over all replicas and workers.
      num_replicas: replicas in sync (for the per-replica figure).
      max_steps: the run's last global step, for the ETA.
      log_every: steps between log lines.
      warmup_steps: steps excluded from the steady-state figure.
      is_chief: only the chief writes files and summaries.
      extra_info: dict merged into the summary (strategy, fp16, ...) when
        training ends: hooks ending before this one may add to it.
      clock: the run's training_clock.TrainingClock: the seconds it
        excludes (evaluation) are left out of the step they fall in.
      time_budget_seconds: --train_time_budget_hours in seconds of the
        clock's training time, or None; the ETA is the sooner of its end
        and max_steps.
    """
    self._output_dir = output_dir
    self._global_batch = global_batch_size
    self._replicas = num_replicas
    self._max_steps = max_steps
    self._log_every = max(1, log_every)
    self._warmup_steps = warmup_steps
    self._is_chief = is_chief
    self._extra_info = {} if extra_info is None else extra_info
    self._clock = clock
    self._time_budget = time_budget_seconds
    self._excluded_at_last_step = 0.0
    self.step_records = []
    self._saved_since_last_step = False

  def mark_checkpoint_saved(self):
    self._saved_since_last_step = True

  def begin(self):
    self._global_step = tf.train.get_global_step()
    metrics = train_step.step_metrics()
    self._fetches = {"global_step": self._global_step, "loss": metrics.loss,
                     "learning_rate": metrics.learning_rate}
    if metrics.loss_scale is not None:
      self._fetches["loss_scale"] = metrics.loss_scale
    counts = train_step.batch_counts()
    if counts is not None:
      self._fetches.update({key: getattr(counts, key) for key in COUNTED})
    self._jsonl = None
    self._writer = None
    if self._is_chief:
      tf.io.gfile.makedirs(self._output_dir)
      self._jsonl = tf.io.gfile.GFile(
          os.path.join(self._output_dir, STEPS_FILE), "a")
      self._writer = tf.summary.FileWriterCache.get(self._output_dir)

  def after_create_session(self, session, coord):
    del coord
    self._start_step = int(session.run(self._global_step))
    self._last_time = time.time()
    self._run_start = self._last_time

  def before_run(self, run_context):
    del run_context
    return tf.train.SessionRunArgs(self._fetches)

  def after_run(self, run_context, run_values):
    del run_context
    now = time.time()
    # A save requested by the step before happens between its after_run and
    # this step's before_run, so it falls in this step's interval.
    results = run_values.results
    excluded = self._clock.excluded_seconds if self._clock else 0.0
    seconds = now - self._last_time - (excluded - self._excluded_at_last_step)
    self._excluded_at_last_step = excluded
    self.step_records.append(dict(
        {"examples": self._global_batch, "seconds": seconds,
         "saved": self._saved_since_last_step},
        **{key: float(results[key]) for key in COUNTED if key in results}))
    self._saved_since_last_step = False
    self._last_time = now
    steps_run = len(self.step_records)
    if steps_run % self._log_every == 0:
      self._log(results, steps_run, now)

  def _log(self, results, steps_run, now):
    window = self.step_records[-self._log_every:]
    seconds = sum(r["seconds"] for r in window)
    eps = len(window) * self._global_batch / seconds if seconds > 0 else 0.0
    step = int(results["global_step"])
    budget_left = None
    if self._time_budget and self._clock:
      budget_left = self._time_budget - self._clock.train_seconds()
    eta, by_budget = eta_seconds(step, self._max_steps,
                                 seconds / len(window), budget_left)
    record = {"step": step, "steps_run": steps_run,
              "examples_per_sec": round(eps, 3),
              "examples_per_sec_per_replica": round(eps / self._replicas, 3),
              "eta_seconds": round(eta, 1), "time": round(now, 3)}
    for key in ("loss", "learning_rate", "loss_scale"):
      if key in results:
        record[key] = float(results[key])
    counted = ""
    if all(key in r for r in window for key in COUNTED) and seconds > 0:
      for key in COUNTED:
        record[key + "_per_sec"] = round(sum(r[key] for r in window) /
                                         seconds, 3)
      counted = describe_counts(record)
    logging.info(
        "step %d/%d: %.1f examples/sec (%.1f per replica)%s, loss %s, "
        "ETA %s%s", step, self._max_steps, eps, eps / self._replicas,
        counted, "%.4f" % record["loss"] if "loss" in record else "n/a",
        _format_seconds(eta), " (time budget)" if by_budget else "")
    if self._is_chief:
      self._jsonl.write(json.dumps(record) + "\n")
      self._jsonl.flush()
      summary = tf.Summary(value=[
          tf.Summary.Value(tag="throughput/examples_per_sec",
                           simple_value=eps),
          tf.Summary.Value(tag="throughput/examples_per_sec_per_replica",
                           simple_value=eps / self._replicas)] + [
              tf.Summary.Value(tag="train/" + k, simple_value=record[k])
              for k in ("loss", "learning_rate", "loss_scale")
              if k in record] + [
                  tf.Summary.Value(tag="throughput/%s_per_sec" % k,
                                   simple_value=record[k + "_per_sec"])
                  for k in COUNTED if k + "_per_sec" in record])
      self._writer.add_summary(summary, step)

  def end(self, session):
    final_step = int(session.run(self._global_step))
    result = steady_state(self.step_records, self._warmup_steps)
    result.update({
        "global_batch_size": self._global_batch,
        "num_replicas": self._replicas,
        "examples_per_sec_per_replica":
            (result["examples_per_sec"] / self._replicas
             if result["examples_per_sec"] else None),
        "first_step": self._start_step, "final_step": final_step,
        "steps_run": len(self.step_records),
        "wall_seconds": round(time.time() - self._run_start, 3),
    })
    result.update(self._extra_info)
    self.summary = result
    if result["examples_per_sec"] is None:
      logging.info("Throughput: too few steps (%d) past the %d warm-up steps "
                   "for a steady-state figure", len(self.step_records),
                   self._warmup_steps)
    else:
      logging.info(
          "Throughput (steady state): %.2f examples/sec, %.2f per replica%s, "
          "over %d steps; excluded %d warm-up step(s) and %d step(s) with a "
          "checkpoint save", result["examples_per_sec"],
          result["examples_per_sec_per_replica"], describe_counts(result),
          result["steps_counted"], result["steps_excluded_warmup"],
          result["steps_excluded_checkpoint"])
    if self._is_chief:
      self._jsonl.close()
      self._writer.flush()
      with atomic_io.atomic_open(os.path.join(self._output_dir,
                                              SUMMARY_FILE)) as f:
        f.write(json.dumps(result, indent=2, sort_keys=True) + "\n")


def describe_counts(summary):
  """", S sequences/sec, T real tokens/sec" of a steady-state summary, or ""
  without those figures."""
  if not summary.get("real_tokens_per_sec"):
    return ""
  return ", %.2f sequences/sec, %.1f real (non-padding) tokens/sec" % (
      summary["sequences_per_sec"], summary["real_tokens_per_sec"])


def eta_seconds(step, max_steps, seconds_per_step, budget_left=None):
  """Seconds until training ends, and whether the time budget ends it.

  Args:
    step: the global step just run.
    max_steps: the global step training stops at.
    seconds_per_step: the recent pace.
    budget_left: training seconds left of --train_time_budget_hours, or
      None without one.

  Returns:
    (seconds, True when the budget runs out before max_steps is reached).
  """
  by_steps = max(0, max_steps - step) * seconds_per_step
  if budget_left is None or by_steps <= budget_left:
    return by_steps, False
  return max(0.0, budget_left), True


def _format_seconds(seconds):
  seconds = int(round(seconds))
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)
