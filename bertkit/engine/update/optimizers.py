"""AdamW and LAMB for BERT, correct under data parallelism.

Upstream's users reach them as `import optimization` (the root module keeps
upstream's names); the engine uses them from here.

Upstream's AdamWeightDecayOptimizer overrides `apply_gradients` with a loop of
its own, which bypasses tf.distribute: under MirroredStrategy every replica
updates its own copy of the weights from its own gradient and the copies drift
apart. Here the optimizers are ordinary `tf.compat.v1.train.Optimizer`
subclasses (`_create_slots` / `_apply_dense` / `_resource_apply_dense`) and
share one data-parallel `apply_gradients`:

  1. every replica computes the gradient of its share of the global-batch
     mean loss (its own mean loss divided by the number of replicas);
  2. ONE batched all-reduce (SUM) turns the shares into the gradient of the
     global-batch mean loss, identical on every replica;
  3. the reduced gradient is clipped to global norm 1.0, once;
  4. every replica applies the same update to its copy of the weights;
  5. global_step is incremented exactly once.

The math is therefore that of one device with the global batch, whatever the
number of replicas. Slot variables keep upstream's names (`<var>/adam_m`,
`<var>/adam_v`) so checkpoints load both ways with Google's; LAMB keeps them
too, since its two moments are Adam's.

Two optimizers: upstream's AdamW (`--optimizer=adamw`) and LAMB
(`--optimizer=lamb`, arXiv:1904.00962). The train op that drives them
(gradient accumulation over K micro-batches before step 2, so one update
still costs one all-reduce; the fp16 wrap; upstream's `create_optimizer`) is
gradient_update.py's.

What the all-reduce sums over is handed in: a distribution.Replicas (the
runner's knows horovod's processes and carries the stop vote of
preemption.py). Without one, the optimizer sums over the replicas of the
tf.distribute strategy in scope, if any, as a single-process user of
upstream's `create_optimizer` expects. The precision (loss scaling) is
handed in the same way, as one precision.Precision.
"""

import dataclasses
import re
from typing import Optional

import tensorflow.compat.v1 as tf
from tensorflow.python.ops import resource_variable_ops

from bertkit.common import options as run_options
from bertkit.engine.distributed import distribution

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
OPTIMIZERS = run_options.OPTIMIZERS


@dataclasses.dataclass(frozen=True)
class AdamHyperparameters:
  """The update's hyperparameters (AdamW and LAMB).

  Attributes:
    beta_1, beta_2: the decays of the first and second moments.
    epsilon: added to the second moment's root.
    weight_decay_rate: decoupled weight decay.
    clip_norm: the global norm gradients are clipped to; None: no clipping.
  """
  beta_1: float
  beta_2: float
  epsilon: float
  weight_decay_rate: float
  clip_norm: Optional[float]

  @classmethod
  def of_options(cls, options):
    """Those of an options.OptimizerOptions (its clip_norm 0: None)."""
    return cls(beta_1=options.adam_beta_1, beta_2=options.adam_beta_2,
               epsilon=options.adam_epsilon,
               weight_decay_rate=options.weight_decay_rate,
               clip_norm=options.clip_norm or None)


UPSTREAM_HYPERPARAMETERS = AdamHyperparameters.of_options(
    run_options.OptimizerOptions())


def optimizer_arguments(options):
  """The gradient_update.create_accumulating_optimizer keyword arguments of
  an options.OptimizerOptions, but for the rate and the run's own
  (precision, replicas, time budget)."""
  return {"optimizer_name": options.optimizer,
          "bias_correction": options.bias_correction,
          "hyperparameters": AdamHyperparameters.of_options(options),
          "lr_schedule": options.lr_schedule,
          "lr_decay_proportion": options.lr_decay_proportion}


class DataParallelOptimizer(tf.train.Optimizer):
  """Base class: all-reduce, clip once, apply the same update on every replica.

  Subclasses implement `_create_slots` and `_apply_update(grad, var)`, which
  returns the op updating `var` (and its slots) from the reduced gradient.
  """

  def __init__(self, learning_rate, weight_decay_rate=0.0,
               exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
               clip_norm=1.0, name="Optimizer", reduced_by_caller=False,
               replicas=None):
    """Args:
      learning_rate: float or scalar tensor.
      weight_decay_rate: decoupled weight decay (AdamW style).
      exclude_from_weight_decay: regexes; matching variable names get none.
      clip_norm: global-norm clip on the reduced gradient; None disables it.
      name: name scope of the update ops.
      reduced_by_caller: whether the caller sums the gradients with
        `all_reduce` before passing them to `apply_gradients`, which then
        applies them as they are; otherwise `apply_gradients` sums them.
      replicas: the distribution.Replicas that `all_reduce` sums over;
        None: distribution.Replicas(), the replicas of the strategy in
        scope (one without a strategy), with no stop vote.
    """
    super().__init__(use_locking=False, name=name)
    self._global_step = None
    self.reduced_by_caller = reduced_by_caller
    self.replicas = distribution.Replicas() if replicas is None else replicas
    self.learning_rate = learning_rate
    self.weight_decay_rate = weight_decay_rate
    self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
    self.clip_norm = clip_norm

  def compute_gradients(self, loss, var_list=None, **unused_kwargs):
    """Plain gradients of `loss`: no hidden rescaling by the replica count.

    The caller passes each replica's share of the global mean loss (see
    `distribution.replica_share`), so a SUM all-reduce yields the gradient of
    the global mean.
    """
    if var_list is None:
      var_list = tf.trainable_variables()
    grads = tf.gradients(loss, var_list)
    return list(zip(grads, var_list))

  def all_reduce(self, grads_and_vars, scalars=()):
    """Sums gradients and scalars over every replica in ONE batched all-reduce.

    The stop vote that `self.replicas` carries (preemption.py) rides in it
    too, so every process learns of a stop request at the same step for
    free, and so do `scalars` (the step's loss). It serves a caller that
    needs the sums whether or not the update is then applied (the fp16
    wrapper skips the update of a step whose gradients overflow, and that
    step still reports its loss); such a caller builds the optimizer with
    `reduced_by_caller=True`.

    Args:
      grads_and_vars: (gradient or None, variable) pairs of this replica.
      scalars: float32 scalar tensors of this replica to sum.

    Returns:
      (summed (gradient, variable) pairs, the list of summed scalars, the op
      recording the stop votes, which the step must run).
    """
    grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
    if not grads_and_vars:
      raise ValueError("No gradients provided for any variable.")
    # Dense before the all-reduce: BERT's embedding gradients are dense anyway
    # (tied MLM output weights), and dense tensors batch into one all-reduce.
    grads = [tf.convert_to_tensor(g) for g, _ in grads_and_vars]
    reduced, votes_recorded = self.replicas.sum_with_stop_vote(
        grads + list(scalars))
    num_grads = len(grads)
    return (list(zip(reduced[:num_grads], [v for _, v in grads_and_vars])),
            reduced[num_grads:], votes_recorded)

  def apply_gradients(self, grads_and_vars, global_step=None, name=None):
    """All-reduces (unless `reduced_by_caller`), clips and applies; called
    in a replica context.

    Args:
      grads_and_vars: (gradient, variable) pairs of this replica.
      global_step: variable incremented once after the update, or None.
      name: name of the returned op.

    Returns:
      The op that applies the update (and increments global_step).
    """
    if self.reduced_by_caller:
      grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
      votes_recorded = tf.no_op()
    else:
      grads_and_vars, _, votes_recorded = self.all_reduce(grads_and_vars)
    grads = [g for g, _ in grads_and_vars]
    tvars = [v for _, v in grads_and_vars]
    if self.clip_norm is not None:
      grads, _ = tf.clip_by_global_norm(grads, clip_norm=self.clip_norm)
    # Every gradient before any update: the gradient of one variable reads
    # others, which an early update would already have changed. (The global
    # norm orders them too, but clipping may be off.)
    with tf.control_dependencies([tf.group(*grads), votes_recorded]):
      grads = [tf.identity(g) for g in grads]
    replica_context = tf.distribute.get_replica_context()
    return replica_context.merge_call(
        self._apply_reduced,
        args=(list(zip(grads, tvars)), global_step, name))

  def _apply_reduced(self, strategy, grads_and_vars, global_step, name):
    """Cross-replica part: each device updates its copy from its (identical)
    reduced gradient. Unlike the base class, no second reduction happens."""
    var_list = [v for _, v in grads_and_vars]
    with tf.init_scope():
      self._create_slots(var_list)
    # Read inside the per-device updates, before the increment below.
    self._global_step = global_step
    with tf.name_scope(name or self._name):
      self._prepare()
      update_ops = []
      for grad, var in grads_and_vars:
        update_ops.extend(strategy.extended.update(
            var, self._apply_update, args=(grad,), group=False))
      if global_step is None:
        return strategy.group(update_ops)
      with tf.control_dependencies(update_ops):
        return strategy.extended.update(
            global_step, lambda step: step.assign_add(1), group=True)

  def _apply_update(self, var, grad):
    raise NotImplementedError

  def _apply_dense(self, grad, var):
    return self._apply_update(var, grad)

  def _resource_apply_dense(self, grad, handle):
    return self._apply_update(handle, grad)

  def _apply_sparse(self, grad, var):
    raise NotImplementedError("Gradients are densified before the update.")

  def _resource_apply_sparse(self, grad, handle, indices):
    raise NotImplementedError("Gradients are densified before the update.")

  def _do_use_weight_decay(self, param_name):
    if not self.weight_decay_rate:
      return False
    return not any(re.search(r, param_name)
                   for r in self.exclude_from_weight_decay)

  @staticmethod
  def _variable_name(var):
    """`bert/.../kernel` for a variable, a replica's copy or a resource."""
    name = var.op.name if hasattr(var, "op") else var.name
    return re.sub(r"(/replica_\d+)?(:\d+)?$", "", name)


class AdamWeightDecayOptimizer(DataParallelOptimizer):
  """Upstream's AdamW: Adam without bias correction, decoupled weight decay.

  update = m / (sqrt(v) + epsilon) + weight_decay_rate * w;  w -= lr * update

  With bias_correction (not upstream's; torch.optim.AdamW's and RoBERTa's
  update) m and v are divided by 1 - beta**t, t = global_step + 1 counting
  updates: without it the first updates of a run are up to 1.5x larger than
  the rate says (beta_2 0.98, steps 10 to 30) or smaller (step 1).
  """

  # Size: upstream's AdamW keywords in upstream's order, then the
  # data-parallel options and the bias correction upstream does not have.
  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6,
               exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
               clip_norm=1.0, name="AdamWeightDecayOptimizer",
               reduced_by_caller=False, replicas=None, bias_correction=False):
    super().__init__(learning_rate, weight_decay_rate,
                     exclude_from_weight_decay, clip_norm, name,
                     reduced_by_caller, replicas)
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.bias_correction = bias_correction

  def _create_slots(self, var_list):
    for v in var_list:
      self._zeros_slot(v, "adam_m", "adam_m")
      self._zeros_slot(v, "adam_v", "adam_v")

  def _beta_powers(self):
    """beta_1**t and beta_2**t with t = global_step + 1 (updates made,
    this one included)."""
    if self._global_step is None:
      raise ValueError("Bias correction counts updates with global_step; "
                       "pass it to apply_gradients.")
    t = tf.cast(self._global_step, tf.float32) + 1.0
    return tf.pow(self.beta_1, t), tf.pow(self.beta_2, t)

  def _apply_update(self, var, grad):
    """TF's fused Adam kernel, after the weight decay.

    With both beta powers 0 the kernel's bias-corrected rate is the rate
    itself, so it computes upstream's moments and m / (sqrt(v) + epsilon)
    in one multi-threaded pass over the variable and its slots, where the
    same update as separate ops makes a dozen. Decaying first is upstream's
    `w - lr * (adam + decay * w)` regrouped: the Adam term does not read w.
    With bias correction the kernel gets the powers, and its epsilon is
    scaled by sqrt(1 - beta_2**t) so that it is added to sqrt(v_hat), as
    torch.optim.AdamW adds it, not to sqrt(v).
    """
    m = self.get_slot(var, "adam_m")
    v = self.get_slot(var, "adam_v")
    decayed = []
    if self._do_use_weight_decay(self._variable_name(var)):
      decay = tf.cast(self.learning_rate * self.weight_decay_rate, var.dtype)
      # After the gradient: every gradient must read the weights before any
      # of them changes, and nothing else orders this write.
      with tf.control_dependencies([grad]):
        decayed = [var.assign_sub(decay * var)]
    beta1_power, beta2_power, epsilon = 0.0, 0.0, self.epsilon
    if self.bias_correction:
      beta1_power, beta2_power = self._beta_powers()
      epsilon = self.epsilon * tf.sqrt(1.0 - beta2_power)
    hyper = dict(beta1_power=tf.cast(beta1_power, var.dtype),
                 beta2_power=tf.cast(beta2_power, var.dtype),
                 lr=tf.cast(self.learning_rate, var.dtype), beta1=self.beta_1,
                 beta2=self.beta_2, epsilon=tf.cast(epsilon, var.dtype),
                 grad=grad)
    with tf.control_dependencies(decayed):
      if resource_variable_ops.is_resource_variable(var):
        return tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=m.handle, v=v.handle, **hyper)
      return tf.raw_ops.ApplyAdam(var=var, m=m, v=v, **hyper).op


class LambOptimizer(AdamWeightDecayOptimizer):
  """LAMB: AdamW with a layer-wise trust ratio (arXiv:1904.00962).

  update = m_hat / (sqrt(v_hat) + epsilon) + weight_decay_rate * w
  w -= lr * (||w|| / ||update||) * update

  The ratio is 1 when either norm is 0 (fresh zero biases, a zero update).
  Every variable gets the ratio, as in gluon-nlp's and NVIDIA's BERT LAMB;
  LayerNorm and bias variables are only exempt from weight decay. Without
  bias correction (gluon-nlp's LAMB BERT setting) m_hat = m and v_hat = v;
  with it they are divided by 1 - beta**t, t = global_step + 1 counting
  updates.
  """

  # Size: upstream's AdamW keywords in upstream's order, LAMB's bias
  # correction and the data-parallel options; all but the rate have defaults.
  def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9,
               beta_2=0.999, epsilon=1e-6, bias_correction=False,
               exclude_from_weight_decay=DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
               clip_norm=1.0, name="LambOptimizer", reduced_by_caller=False,
               replicas=None):
    super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2,
                     epsilon, exclude_from_weight_decay, clip_norm, name,
                     reduced_by_caller, replicas, bias_correction)

  def _apply_update(self, var, grad):
    m = self.get_slot(var, "adam_m")
    v = self.get_slot(var, "adam_v")
    next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
    next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
    update = self._direction(var, next_m, next_v)
    next_var = var - self._step_size(var, update) * update
    return tf.group(var.assign(next_var), m.assign(next_m), v.assign(next_v))

  def _direction(self, var, m, v):
    """The update before the learning rate, weight decay included."""
    if self.bias_correction:
      beta1_power, beta2_power = self._beta_powers()
      m = m / (1.0 - beta1_power)
      v = v / (1.0 - beta2_power)
    update = m / (tf.sqrt(v) + self.epsilon)
    if self._do_use_weight_decay(self._variable_name(var)):
      update += self.weight_decay_rate * var
    return update

  def _step_size(self, var, update):
    w_norm = tf.norm(var)
    update_norm = tf.norm(update)
    both_positive = tf.logical_and(w_norm > 0.0, update_norm > 0.0)
    # The ratio is computed in both branches; a 0/0 in the unused one is fine.
    trust_ratio = tf.where(both_positive, w_norm / update_norm, 1.0)
    return self.learning_rate * trust_ratio


def build_optimizer(optimizer_name, learning_rate, bias_correction=False,
                    reduced_by_caller=False, replicas=None,
                    hyperparameters=UPSTREAM_HYPERPARAMETERS):
  """An optimizer with upstream's hyperparameters unless told otherwise.

  Args:
    optimizer_name: one of OPTIMIZERS.
    learning_rate: float or scalar tensor.
    bias_correction: Adam's bias correction of the moments (neither
      upstream's AdamW nor the LAMB paper's BERT recipe has it).
    reduced_by_caller: see DataParallelOptimizer.
    replicas: see DataParallelOptimizer.
    hyperparameters: an AdamHyperparameters.

  Returns:
    A DataParallelOptimizer.
  """
  options = dict(
      learning_rate=learning_rate,
      weight_decay_rate=hyperparameters.weight_decay_rate,
      beta_1=hyperparameters.beta_1, beta_2=hyperparameters.beta_2,
      epsilon=hyperparameters.epsilon, clip_norm=hyperparameters.clip_norm,
      reduced_by_caller=reduced_by_caller, replicas=replicas)
  if optimizer_name == "adamw":
    return AdamWeightDecayOptimizer(bias_correction=bias_correction, **options)
  if optimizer_name == "lamb":
    return LambOptimizer(bias_correction=bias_correction, **options)
  raise ValueError("Unknown optimizer %r; expected one of %s" %
                   (optimizer_name, ", ".join(OPTIMIZERS)))


