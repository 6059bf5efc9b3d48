"""What a task gives the runner, and the Estimator model_fn made of it.

A program describes the model its task trains as a `ModelSpec`: the
variables it builds, the
per-micro-batch shares of the training loss, the eval loss and metrics, the
predictions (the fine-tuning tasks in their folders' task.py, pretraining in
tasks/pretraining/task.py, feature extraction in tasks/features). The runner
(runner.py) turns it into the Estimator's model_fn here: one update from the
summed gradients of the micro-batches (gradient_update.py), the step
contract of train_step.py, initialisation from --init_checkpoint, prediction
on every replica of one process.

Shape notation: B = a replica's batch, K = micro-batches per update.
"""

import dataclasses
import functools
from typing import Callable, Optional

import tensorflow.compat.v1 as tf

from bertkit.common import options as run_options
from bertkit.engine.checkpointing import checkpoints
from bertkit.engine.distributed import distribution
from bertkit.engine.update import gradient_update
from bertkit.engine.update import optimizers
from bertkit.engine.update import train_step

TRAIN = tf.estimator.ModeKeys.TRAIN
EVAL = tf.estimator.ModeKeys.EVAL
PREDICT = tf.estimator.ModeKeys.PREDICT


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """What a program tells the runner about the model its task trains.

  Attributes:
    variable_shapes: function() -> {name: shape} of every trainable
      variable of the model (checkpoint_formats.variable_shapes), to compare
      --init_checkpoint's shapes with before training.
    train_loss_fns: function(features, num_micro_batches) -> K functions
      without arguments, one per micro-batch of this replica's [B, ...]
      features, each building the model (the first creates the variables,
      the others reuse them) and returning its part of this replica's share
      of the global batch's loss: the shares of every micro-batch, replica
      and process add up to one device's loss on the global batch.
    eval_outputs: function(features) -> (mean loss, eval_metric_ops) of an
      eval batch.
    predictions: function(features) -> the dict of [B, ...] tensors predict
      yields; None: the task has no predict mode.
    batch_counts: function(features) -> (sequences, real tokens) of a
      training batch, when the throughput figures count more than rows
      (packed rows); None: rows.
  """
  variable_shapes: Optional[Callable]
  train_loss_fns: Optional[Callable]
  eval_outputs: Optional[Callable]
  predictions: Optional[Callable] = None
  batch_counts: Optional[Callable] = None


def split_micro_batches(features, num_micro_batches):
  """K feature dicts of consecutive [B/K, ...] slices of the [B, ...] ones."""
  if num_micro_batches == 1:
    return [features]
  pieces = {name: tf.split(t, num_micro_batches, axis=0)
            for name, t in features.items()}
  return [{name: pieces[name][i] for name in features}
          for i in range(num_micro_batches)]


def reusing_variables(index):
  """The variable scope of micro-batch `index`: reuse=True from the second
  on, so that a variable name that changed between builds fails loudly
  instead of training a fresh copy."""
  return tf.variable_scope(tf.get_variable_scope(),
                           reuse=True if index else None,
                           auxiliary_name_scope=False)


def mean_loss_shares(mean_loss_fn):
  """ModelSpec.train_loss_fns for a loss that is a mean over equal examples.

  Args:
    mean_loss_fn: function(micro_batch features) -> the batch's mean loss
      (builds the model).

  Returns:
    train_loss_fns(features, K): micro-batches and replicas hold equally
    many examples, so each micro-batch's mean counts 1/K of its replica's,
    which counts 1/replicas (distribution.replica_share).
  """
  def train_loss_fns(features, num_micro_batches):
    def loss_fn(index, micro_batch):
      with reusing_variables(index):
        loss = mean_loss_fn(micro_batch)
      if num_micro_batches > 1:
        loss /= float(num_micro_batches)
      return distribution.replica_share(loss)
    return [functools.partial(loss_fn, i, micro_batch) for i, micro_batch
            in enumerate(split_micro_batches(features, num_micro_batches))]
  return train_loss_fns


def model_fn_builder(spec, init_checkpoint, optimizer, num_train_steps,
                     num_warmup_steps, run_arguments, replicas=None,
                     predict_strategy=None, checkpoint_saver=None):
  """The Estimator model_fn of `spec`.

  TRAIN: one update from the summed gradients of num_accumulation_steps
  micro-batches (gradient_update.create_accumulating_optimizer), handed to the
  hooks through train_step.register_step_metrics; EVAL and PREDICT: the
  model's outputs on one unreplicated batch. Every mode starts from
  `init_checkpoint` when given.

  Args:
    spec: a ModelSpec.
    init_checkpoint: checkpoint (prefix or directory) to start from, or None.
    optimizer: the options.OptimizerOptions (the peak rate, the update,
      micro-batches per update: each replica's batch must divide by them).
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    run_arguments: the run's own create_accumulating_optimizer keyword
      arguments (precision, and time_budget when there is one).
    replicas: the distribution.Replicas the optimizer sums over (`prepare`
      builds the run's); None: those of the strategy in scope, no stop vote.
    predict_strategy: PREDICT on every replica of this tf.distribute
      strategy (replicated_predictions); None: on one device.
    checkpoint_saver: function() -> the chief's CheckpointSaverHook of
      training (checkpoints.PeriodicSaverHook); None: Estimator's own.
  """

  def model_fn(features, labels, mode, params):
    del labels, params
    if mode == TRAIN:
      if spec.batch_counts is not None:
        train_step.register_batch_counts(*spec.batch_counts(features))
      step = gradient_update.create_accumulating_optimizer(
          spec.train_loss_fns(features, optimizer.num_accumulation_steps),
          optimizer.learning_rate, num_train_steps, num_warmup_steps,
          replicas=replicas, **optimizers.optimizer_arguments(optimizer),
          **run_arguments)
      estimator_spec = dict(loss=train_step.register_step_metrics(step),
                  train_op=step.train_op)
      if checkpoint_saver is not None:
        estimator_spec["training_chief_hooks"] = [checkpoint_saver()]
    elif mode == EVAL:
      # Eval runs unreplicated: the mean loss itself, not a replica's share.
      loss, metrics = spec.eval_outputs(features)
      estimator_spec = dict(loss=loss, eval_metric_ops=metrics)
    elif mode == PREDICT and spec.predictions is not None:
      estimator_spec = dict(predictions=spec.predictions(features)
                  if predict_strategy is None else replicated_predictions(
                      predict_strategy, spec.predictions, features))
    else:
      raise ValueError("This model has no %s mode" % mode)
    if init_checkpoint:
      checkpoints.init_from_checkpoint(init_checkpoint)
    return tf.estimator.EstimatorSpec(mode, **estimator_spec)

  return model_fn


def replicated_predictions(strategy, predictions_fn, features):
  """A batch's predictions computed by every replica of `strategy` at once.

  Replica i predicts the i-th of consecutive slices of ceil(B / N) rows (the
  last ones shorter, or empty, for a short final batch); the outputs are
  concatenated in replica order, so row r of every prediction is row r of
  the input.

  Args:
    strategy: a tf.distribute strategy of one process (N replicas).
    predictions_fn: function(features) -> dict of [b, ...] tensors, building
      the model (the strategy creates its variables once for all replicas).
    features: dict of [B, ...] tensors.

  Returns:
    The dict of [B, ...] predictions.
  """
  num_replicas = strategy.num_replicas_in_sync
  # Every feature holds the batch's B rows.
  rows = tf.shape(features[sorted(features)[0]])[0]
  per_replica = (rows + num_replicas - 1) // num_replicas

  def replica_fn():
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    start = tf.minimum(replica * per_replica, rows)
    end = tf.minimum(start + per_replica, rows)
    return predictions_fn({name: t[start:end]
                           for name, t in features.items()})

  with strategy.scope():
    outputs = strategy.extended.call_for_each_replica(replica_fn)
    return {name: tf.concat(strategy.experimental_local_results(t), axis=0)
            for name, t in outputs.items()}


def upstream_model_fn(spec, init_checkpoint, learning_rate, num_train_steps,
                      num_warmup_steps, optimizer=None,
                      num_accumulation_steps=1):
  """model_fn_builder with upstream's arguments (the tasks' model_fn_builder):
  the peak rate and micro-batches given, the rest of the update `optimizer`'s
  (an options.OptimizerOptions; None: upstream's), float32."""
  optimizer = dataclasses.replace(
      optimizer or run_options.OptimizerOptions(), learning_rate=learning_rate,
      num_accumulation_steps=num_accumulation_steps)
  return model_fn_builder(spec, init_checkpoint, optimizer, num_train_steps,
                          num_warmup_steps, {})
