"""One training update: the gradients of K micro-batches, summed and applied.

What every training program's model_fn builds (`create_accumulating_optimizer`,
through the runner) and upstream's `create_optimizer` (K = 1): the train op
of one step, made of

  1. the gradients of K micro-batches, each built and differentiated in turn
     so that the activations of one are held at a time
     (`accumulate_gradients`);
  2. ONE batched all-reduce of their sum, with the loss, the stop vote and,
     under a time budget, the chief's clock (optimizers.DataParallelOptimizer
     .all_reduce), so an update costs one collective whatever K is;
  3. the update of optimizers.py's AdamW or LAMB, skipped on an fp16
     overflow (`wrap_for_mixed_precision`), and one global_step increment.

The learning rate follows upstream's schedule over steps, one of
lr_schedules', or that schedule over training seconds (`TimeBudget`).
"""

import dataclasses
from typing import Any

import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.engine.distributed import distribution
from bertkit.engine.update import lr_schedules
from bertkit.engine.update import optimizers
from bertkit.engine.update import train_step


@dataclasses.dataclass(frozen=True)
class TimeBudget:
  """--train_time_budget_hours: the schedule runs over training seconds.

  The seconds are read from the run's clock (the loop's
  training_clock.TrainingClock: its `train_seconds()` and
  `first_step_seconds()`, the update's only use of it). The
  schedule begins at the run's first step (its warm-up is not spent in
  start-up) and ends with the budget (lr_schedules.py). Only the chief's
  clock counts, and it rides in the gradient all-reduce, so every replica
  and process uses the same rate and sees the budget run out at the same
  step.

  Attributes:
    seconds: the training seconds the schedule runs over.
    warmup_seconds: its warm-up: the first of those seconds.
    clock: the run's clock.
    is_chief: whether this process holds the chief's clock.
  """
  seconds: float
  warmup_seconds: float
  clock: Any
  is_chief: bool

  def schedule(self, steps_schedule):
    """The lr_schedules.Schedule of a schedule over steps, run over these
    seconds instead."""
    return dataclasses.replace(steps_schedule, total=self.seconds,
                               warmup=self.warmup_seconds, in_seconds=True)


def _synced_clock_shares(time_budget):
  """This replica's parts of the chief's training seconds and of its first
  step's: the parts of every replica and process sum to the chief's.

  Returns:
    Two float32 scalar tensors.
  """
  share = (1.0 / distribution.num_local_replicas() if time_budget.is_chief
           else 0.0)
  clock = time_budget.clock

  def read_clock():
    first_step = clock.first_step_seconds()
    return (np.float32(clock.train_seconds() * share),
            np.float32(first_step * share))

  shares = tf.numpy_function(read_clock, [], [tf.float32, tf.float32],
                             stateful=True, name="training_clock")
  for tensor in shares:
    tensor.set_shape([])
  return shares


def create_optimizer(loss, init_lr, num_train_steps, num_warmup_steps,
                     use_tpu=False, **options):
  """Builds the train op, as upstream's `create_optimizer` does.

  Args:
    loss: this replica's share of the global-batch mean loss
      (`distribution.replica_share(mean_loss)`); equal to the mean loss
      with one replica.
    init_lr: upstream's name of --learning_rate, the rate the schedule
      warms up to.
    num_train_steps: total optimizer updates; the rate decays to 0 there.
    num_warmup_steps: linear warm-up steps.
    use_tpu: accepted for upstream compatibility; must be False.
    **options: keyword arguments of `create_accumulating_optimizer`
      (precision, optimizer_name, replicas, ...).

  Returns:
    The train op: one optimizer update and one global_step increment (none of
    either when fp16 gradients overflow).
  """
  return create_accumulating_optimizer(
      [lambda: loss], init_lr, num_train_steps, num_warmup_steps, use_tpu,
      **options).train_op


# Size: upstream's four schedule arguments and use_tpu in upstream's order,
# then the options every program sets from its flags.
def create_accumulating_optimizer(
    micro_batch_loss_fns, learning_rate, num_train_steps, num_warmup_steps,
    use_tpu=False, precision=None, optimizer_name="adamw",
    bias_correction=False, replicas=None,
    hyperparameters=optimizers.UPSTREAM_HYPERPARAMETERS,
    lr_schedule=lr_schedules.LINEAR,
    lr_decay_proportion=lr_schedules.DEFAULT_DECAY_PROPORTION,
    time_budget=None):
  """One update from the summed gradients of K micro-batches.

  Args:
    micro_batch_loss_fns: K functions without arguments, each building the
      graph of one micro-batch and returning its part of this replica's loss
      share (the K parts add up to the share); see `accumulate_gradients`.
    learning_rate: the rate the schedule warms up to (--learning_rate).
    num_train_steps: total optimizer updates; the rate decays to 0 there.
    num_warmup_steps: linear warm-up steps.
    use_tpu: accepted for upstream compatibility; must be False.
    precision: the run's precision.Precision, or None (float32). With its
      loss_scale (--use_fp16) the optimizer is wrapped in the mixed-precision
      graph rewrite with dynamic loss scaling (fp16 kernels on GPU; no
      effect on CPU); a non-finite gradient in any micro-batch then skips
      the whole update.
    optimizer_name: "adamw" (upstream) or "lamb".
    bias_correction: see optimizers.build_optimizer.
    replicas: the distribution.Replicas to sum over; see
      optimizers.DataParallelOptimizer.
    hyperparameters: an optimizers.AdamHyperparameters.
    lr_schedule: one of lr_schedules.SCHEDULES.
    lr_decay_proportion: warmup_stable_decay's final decay share.
    time_budget: a TimeBudget to run the schedule over training seconds
      instead of num_train_steps / num_warmup_steps; None: steps.

  Returns:
    A TrainStep; its op makes one all-reduce (gradients, the loss, the
    stop vote and, with a time budget, the clock), one update and one
    global_step increment, whatever K is.
  """
  if use_tpu:
    raise ValueError("TPUs are not supported by this fork.")
  global_step = tf.train.get_or_create_global_step()
  schedule = lr_schedules.Schedule(lr_schedule, learning_rate,
                                   num_train_steps, num_warmup_steps,
                                   lr_decay_proportion)
  # The step's rate; under a time budget, known once the all-reduce has
  # brought the chief's clock.
  step_rate = (None if time_budget else
               lr_schedules.rate_tensor(schedule, global_step))
  optimizer = optimizers.build_optimizer(
      optimizer_name, step_rate, bias_correction, reduced_by_caller=True,
      replicas=replicas, hyperparameters=hyperparameters)
  # What computes and applies the gradients: the optimizer, or its fp16
  # wrapper (scaled loss, unscaled gradients, update skipped on overflow).
  applier, loss_scale = optimizer, None
  if precision is not None and precision.loss_scale is not None:
    applier, loss_scale = wrap_for_mixed_precision(optimizer,
                                                   precision.loss_scale)
  grads_and_vars, losses = accumulate_gradients(applier,
                                                micro_batch_loss_fns)
  loss_share = tf.add_n(losses)
  clock = _synced_clock_shares(time_budget) if time_budget else []
  # Reduced before the fp16 wrapper decides whether to apply them: its skip
  # branch runs no all-reduce, and an overflowing step still has a loss.
  grads_and_vars, reduced, votes_recorded = optimizer.all_reduce(
      grads_and_vars, [loss_share] + list(clock))
  loss, train_seconds = reduced[0], None
  if time_budget is not None:
    train_seconds, first_step = reduced[1], reduced[2]
    step_rate = optimizer.learning_rate = lr_schedules.rate_tensor(
        time_budget.schedule(schedule), train_seconds, first_step)
  train_op = tf.group(
      applier.apply_gradients(grads_and_vars, global_step=global_step),
      votes_recorded)
  return train_step.TrainStep(
      train_op=train_op, loss_share=loss_share, loss=loss,
      learning_rate=step_rate,
      loss_scale=loss_scale() if loss_scale else None,
      train_seconds=train_seconds)


def accumulate_gradients(optimizer, micro_batch_loss_fns, var_list=None):
  """Sums the gradients of micro-batches built and differentiated in turn.

  Each micro-batch's graph is built under a control dependency on the
  running sum, so its forward pass starts only once the previous
  micro-batch's gradients are added up: the activations held at any time are
  about those of one micro-batch, while the whole update runs in one
  session.run (one Estimator step). The gradients come from
  `optimizer.compute_gradients`, so a loss-scale wrapper scales and unscales
  each micro-batch's.

  Args:
    optimizer: an optimizers.DataParallelOptimizer, possibly wrapped for
      fp16.
    micro_batch_loss_fns: functions without arguments returning scalar losses.
      The first one may create the variables; the others must reuse them.
    var_list: variables to differentiate; default: every trainable variable
      once the first micro-batch is built.

  Returns:
    (list of (summed gradient or None, variable), list of the K losses).
  """
  summed, losses = None, []
  for loss_fn in micro_batch_loss_fns:
    if summed is None:
      loss = loss_fn()
    else:
      with tf.control_dependencies([tf.group(*[g for g in summed
                                               if g is not None])]):
        loss = loss_fn()
    if var_list is None:
      var_list = tf.trainable_variables()
    grads = [None if g is None else tf.convert_to_tensor(g)
             for g, _ in optimizer.compute_gradients(loss, var_list)]
    summed = grads if summed is None else [
        None if a is None else a + b for a, b in zip(summed, grads)]
    losses.append(loss)
  return list(zip(summed, var_list)), losses


def wrap_for_mixed_precision(optimizer, loss_scale):
  """`enable_mixed_precision_graph_rewrite` on the optimizer, as the
  multi-GPU BERT forks do; returns (the wrapped optimizer, its dynamic loss
  scale, started and grown as the precision.LossScale `loss_scale` says).

  The wrapper multiplies the loss by a dynamic loss scale, divides the
  gradients by it, and skips the whole update (weights, slots and
  global_step) when any replica's gradient is not finite, halving the scale.
  Grappler's auto_mixed_precision pass then runs eligible GPU kernels in
  float16; it has nothing to rewrite on a CPU-only machine.

  The wrapper's `apply_gradients` must get the gradients summed over every
  replica and process (`optimizer.all_reduce`, with the optimizer built
  `reduced_by_caller`): a non-finite gradient anywhere then makes every
  sum non-finite, so all horovod ranks skip the same steps without a
  collective of their own.
  """
  dynamic = tf.mixed_precision.DynamicLossScale(
      initial_loss_scale=loss_scale.initial_scale,
      increment_period=loss_scale.growth_steps, multiplier=2.0)
  return (tf.train.experimental.enable_mixed_precision_graph_rewrite(
      optimizer, loss_scale=dynamic), dynamic)
