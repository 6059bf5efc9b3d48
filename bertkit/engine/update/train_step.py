"""The step contract: what a training step hands to the hooks that watch it.

The runner's TRAIN model_fn builds one `TrainStep` per replica (the
optimizer's update op, the loss, the learning rate, the loss scale) and hands
it over with `register_step_metrics`; with `register_batch_counts` it also
says what the replica's batch holds (sequences, real tokens). The training
hooks (throughput.ThroughputHook, training_hooks.NonFiniteLossHook) read them
back with `step_metrics` / `batch_counts`. Nothing else passes a step along.
"""

import dataclasses
import typing
from typing import Any
import weakref

import tensorflow.compat.v1 as tf

from bertkit.engine.distributed import distribution


class TrainStep(typing.NamedTuple):
  """What one training step is built of (a named tuple: a strategy's run
  returns one per replica, field by field).

  Attributes:
    train_op: the op.
    loss_share: this replica's share of the step's loss.
    loss: the step's loss (the shares summed over every replica and process,
      in the gradient all-reduce).
    learning_rate: the learning rate of the step.
    loss_scale: the dynamic loss scale (None without --use_fp16).
    train_seconds: with a time budget, the chief's training seconds the
      step's rate followed (the same on every process); None without one.
  """
  train_op: Any
  loss_share: Any
  loss: Any
  learning_rate: Any
  loss_scale: Any
  train_seconds: Any = None


class StepMetrics(typing.NamedTuple):
  """What the training hooks watch of a step (a named tuple: session.run
  fetches it whole).

  Attributes:
    loss: the global batch's loss (the sum of this process's entries).
    learning_rate: the learning rate of the step.
    loss_scale: the dynamic loss scale (None without --use_fp16).
    train_seconds: the synchronised training seconds (None without a time
      budget).
  """
  loss: Any
  learning_rate: Any
  loss_scale: Any
  train_seconds: Any


@dataclasses.dataclass(frozen=True)
class BatchCounts:
  """What a step's global batch holds besides its rows.

  Attributes:
    sequences: its sequences (more than the rows when rows are packed).
    real_tokens: its real, non-padding tokens.
  """
  sequences: Any
  real_tokens: Any


# Graph -> its StepMetrics / BatchCounts entries, one per local replica.
# Written by the register_* functions only, read by step_metrics and
# batch_counts only. Not graph collections, which every checkpoint's meta
# graph would try (and fail) to serialize.
_STEP_METRICS = weakref.WeakKeyDictionary()
_BATCH_COUNTS = weakref.WeakKeyDictionary()


def register_step_metrics(step):
  """The TRAIN model_fn's hand-over of its step to the training hooks.

  Called once per replica with the TrainStep it built; the hooks
  (throughput, the non-finite loss guard) refuse to run without it. The
  hooks add up this process's entries and log the global batch's loss. With
  all replicas in this process their loss shares add up to it (as Estimator
  sums them). Horovod ranks and the workers of a multi_worker cluster hold
  only their own shares, so each entry is the step's loss summed over every
  replica (step.loss, which rode in the gradient all-reduce), divided among
  the local replicas.

  Args:
    step: this replica's TrainStep.

  Returns:
    The loss for the EstimatorSpec: the share under a tf.distribute
    strategy (Estimator sums the shares over all replicas), the global
    batch's loss under horovod.
  """
  reported, watched = step.loss_share, step.loss_share
  num_local = distribution.num_local_replicas()
  if distribution.num_replicas_in_sync() > num_local:
    watched = step.loss / float(num_local)
    if distribution.process_group():
      reported = step.loss
  _STEP_METRICS.setdefault(tf.get_default_graph(), []).append(StepMetrics(
      loss=watched, learning_rate=step.learning_rate,
      loss_scale=step.loss_scale, train_seconds=step.train_seconds))
  return reported


def step_metrics():
  """The StepMetrics of the default graph's training step, for the hooks.

  Raises:
    ValueError: the TRAIN model_fn did not call register_step_metrics, so
      nothing would watch its loss.
  """
  entries = _STEP_METRICS.get(tf.get_default_graph())
  if not entries:
    raise ValueError("The training model_fn must hand its step to the hooks "
                     "with train_step.register_step_metrics(step).")
  return StepMetrics(loss=tf.add_n([e.loss for e in entries]),
                     learning_rate=entries[0].learning_rate,
                     loss_scale=entries[0].loss_scale,
                     train_seconds=entries[0].train_seconds)


def register_batch_counts(sequences, real_tokens):
  """The TRAIN model_fn's count of what one replica's batch holds.

  The throughput hook then also logs sequences/sec and real tokens/sec (the
  figure packing improves). Called once per replica, in a replica context.
  The counts of the replicas of this process are summed; with several
  processes (multi_worker, horovod) they are scaled by replicas / local
  replicas, an estimate of the global batch's (exact with one process).

  Args:
    sequences: scalar, the sequences in this replica's batch.
    real_tokens: scalar, its tokens that are not padding.
  """
  scale = (distribution.num_replicas_in_sync() /
           float(distribution.num_local_replicas()))
  _BATCH_COUNTS.setdefault(tf.get_default_graph(), []).append(BatchCounts(
      sequences=tf.cast(sequences, tf.float32) * scale,
      real_tokens=tf.cast(real_tokens, tf.float32) * scale))


def batch_counts():
  """BatchCounts of the default graph's global batch, or None if the model_fn
  registered none."""
  entries = _BATCH_COUNTS.get(tf.get_default_graph())
  if not entries:
    return None
  return BatchCounts(sequences=tf.add_n([e.sequences for e in entries]),
                     real_tokens=tf.add_n([e.real_tokens for e in entries]))
