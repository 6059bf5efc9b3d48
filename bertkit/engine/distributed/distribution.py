"""Choosing and building the tf.distribute strategy for an Estimator.

Shared by the training programs: their options.DistributionOptions and the
machine make a `StrategyPlan` (`plan`), and the plan builds the strategy
passed to `tf.estimator.RunConfig`.

Strategies (`--distribution_strategy`):
  one_device   one GPU, or the CPU.
  mirrored     MirroredStrategy over the local GPUs (or --cpu_replicas logical
               CPUs); all-reduce by NCCL, hierarchical copy or reduction to
               one device.
  multi_worker MultiWorkerMirroredStrategy (collective all-reduce). With
               a cluster (TF_CONFIG, or a Slurm job step of several tasks:
               `use_slurm_cluster`) it spans machines; without, it runs
               collectives between the local devices, which the published
               multi-GPU BERT measurements found faster than
               MirroredStrategy on one machine.
  central_storage
               CentralStorageStrategy: the variables live once, on the CPU
               (on the GPU when there is a single one); every local GPU (or
               --cpu_replicas logical CPU) computes its replica's gradients,
               which are reduced to that device and applied there once.
  horovod      one process per device, launched by horovodrun (see
               horovod_engine.py).
  byteps       one process per device, a BytePS worker; a scheduler and
               servers (parameter servers that sum) run beside the workers,
               started by scripts/run_pre_byteps.sh (see byteps_engine.py).

The cluster the process belongs to (TF_CONFIG, a Slurm job step, horovod's
or BytePS's launch) is read by cluster_environment.py; `use_slurm_cluster`
makes a Slurm step the process's TF_CONFIG.

What a training step sums over is a `Replicas`: the runner builds one from
the engine (the ProcessGroup of horovod or BytePS, or tf.distribute's
replicas in the graph) and the run's stop vote, and hands it to the optimizer.

Module state: the ProcessGroup of an engine with one process per replica.
horovod_engine.init or byteps_engine.init writes it (`join_process_group`),
once per process. The in-graph helpers below read it (`replica_share`,
`global_sum`, `sum_across_replicas`, `num_replicas_in_sync`,
`num_local_replicas`), since the tasks' loss functions and train_step call
them inside a model_fn, where nothing can be handed to them; so do
engine_setup.input_context and runner.task_name.
"""

import dataclasses
import json
import os
from typing import Any, Callable, List, Optional

from absl import logging
import tensorflow as tf2
import tensorflow.compat.v1 as tf

from bertkit.common import options
from bertkit.common import slurm_env
from bertkit.common.errors import UserError
from bertkit.engine.distributed import cluster_environment

STRATEGIES = options.STRATEGIES
# Engines that run one process per replica, each with its own launcher;
# every other strategy is a tf.distribute strategy.
PROCESS_ENGINES = ("horovod", "byteps")


@dataclasses.dataclass(frozen=True)
class StrategyPlan:
  """The strategy a run trains with, decided by `plan`.

  Attributes:
    name: one of STRATEGIES.
    devices: this process's devices ("/cpu:0", "/gpu:1", ...), one replica
      each.
    num_workers: processes training together (TF_CONFIG's workers, horovod
      ranks, BytePS workers).
    all_reduce_alg: the --all_reduce_alg choice.
    collective_timeout_seconds: the longest a collective may wait.
    cluster: TF_CONFIG's cluster dict, or None.
  """
  name: str
  devices: List[str]
  num_workers: int
  all_reduce_alg: str
  collective_timeout_seconds: int
  cluster: Optional[dict]

  @property
  def num_replicas(self):
    """Replicas over every process."""
    return len(self.devices) * self.num_workers


def use_slurm_cluster(options):
  """Makes the Slurm job step this process is a task of its cluster.

  Called by the training programs once, before the strategy and the
  RunConfig are built. Without TF_CONFIG, a step of several tasks becomes
  TF_CONFIG in os.environ (and this task's GPUs CUDA_VISIBLE_DEVICES). Not a
  cluster resolver handed to the strategy: RunConfig and Estimator's
  train_and_evaluate read TF_CONFIG themselves to find the task type, the
  chief and the coordinator mode, and so do cluster_environment.cluster_task
  and the runner;
  one environment variable keeps all of them on the same cluster.
  TensorFlow's SlurmClusterResolver is not used either: on nodes without
  GPUs it fails (it runs nvidia-smi).

  Args:
    options: the run's options.DistributionOptions.

  Raises:
    UserError: Slurm variables that contradict each other, ports out of
      range or taken, or a step of several tasks with a strategy of one
      process (one_device, mirrored, central_storage).
  """
  if options.distribution_strategy in PROCESS_ENGINES:
    return  # their processes find each other through their own launcher
  _, _, step = cluster_environment.cluster_from_environment(
      options.slurm_port_base)
  if step is None:
    tasks = os.environ.get("SLURM_NTASKS", "")
    if tasks.isdigit() and int(tasks) > 1 and not slurm_env.step_tasks(
        os.environ):
      logging.warning(
          "this Slurm job has %s tasks but this process is not in a job "
          "step of them: training as one process; launch with srun to "
          "train on all of them", tasks)
    return
  if options.distribution_strategy not in (None, "multi_worker"):
    raise UserError(
        "a Slurm job step of %d tasks trains as one multi_worker cluster, "
        "not with --distribution_strategy=%s (a strategy of one process); "
        "drop the flag, or run one task (srun -n 1)" % (
            len(step.workers), options.distribution_strategy))
  slurm_env.check_port_free(step, options.slurm_port_base)
  os.environ["TF_CONFIG"] = json.dumps(slurm_env.tf_config(step))
  if step.gpus is not None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(step.gpus)
  logging.info("%s", slurm_env.describe(step))


def plan(options, num_gpus_present):
  """Decides the strategy from the run's options and the machine.

  Args:
    options: an options.DistributionOptions (its own ranges are checked).
    num_gpus_present: GPUs TensorFlow can see.

  Returns:
    A StrategyPlan.

  Raises:
    UserError: options that contradict the machine or the environment.
  """
  cluster, _ = cluster_environment.tf_config_cluster()
  name = options.distribution_strategy
  if options.num_gpus > num_gpus_present:
    raise UserError("--num_gpus=%d but only %d GPU(s) are visible to "
                    "TensorFlow" % (options.num_gpus, num_gpus_present))
  if options.multi_gpu and num_gpus_present == 0:
    raise UserError("--multi_gpu was given but no GPU is visible to "
                    "TensorFlow; use --cpu_replicas N to run N replicas on "
                    "the CPU")

  if name in PROCESS_ENGINES:
    return _process_engine_plan(options, num_gpus_present, cluster)
  if options.cpu_replicas:
    devices = ["/cpu:%d" % i for i in range(options.cpu_replicas)]
  else:
    n = options.num_gpus or (num_gpus_present if options.multi_gpu else
                            min(1, num_gpus_present))
    devices = ["/gpu:%d" % i for i in range(n)] or ["/cpu:0"]

  if name is None:
    if cluster:
      name = "multi_worker"
    elif len(devices) > 1:
      name = "mirrored"
    else:
      name = "one_device"
  if name == "one_device" and len(devices) > 1:
    raise UserError("--distribution_strategy=one_device runs on one device "
                    "but %d were asked for" % len(devices))
  if cluster and name not in ("multi_worker",):
    raise UserError("TF_CONFIG names a cluster but --distribution_strategy=%s;"
                    " use multi_worker (or unset TF_CONFIG)" % name)
  num_workers = 1
  if name == "multi_worker" and cluster:
    num_workers = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
    if options.cpu_replicas > 1:
      raise UserError("--cpu_replicas > 1 is for one machine; with TF_CONFIG "
                      "each worker runs one CPU replica")
    devices = _worker_devices(options.num_gpus, num_gpus_present, devices)
  alg = options.all_reduce_alg
  if name == "mirrored" and alg == "ring":
    raise UserError("--all_reduce_alg=ring is for multi_worker; mirrored "
                    "takes nccl, hierarchical_copy or one_device")
  if name == "central_storage" and alg != "auto":
    raise UserError("--all_reduce_alg=%s does not apply to central_storage: "
                    "gradients are always reduced to the variables' device"
                    % alg)
  if name == "multi_worker" and alg in ("hierarchical_copy", "one_device"):
    raise UserError("--all_reduce_alg=%s is for mirrored; multi_worker takes "
                    "ring, nccl or auto" % alg)
  if alg == "nccl" and devices[0].startswith("/cpu"):
    raise UserError("--all_reduce_alg=nccl needs GPUs; none are in use")
  return StrategyPlan(name=name, devices=devices, num_workers=num_workers,
                      all_reduce_alg=alg,
                      collective_timeout_seconds=options.collective_timeout_seconds,
                      cluster=cluster)


def _worker_devices(num_gpus_flag, num_gpus_present, devices):
  """The devices of a multi_worker task of a cluster: every GPU it sees.

  The strategy spans them all (its TF_CONFIG resolver counts them) whatever
  --num_gpus says, so the plan must count the same; `devices` (the CPU) when
  there are none.
  """
  if not num_gpus_present:
    return devices
  if num_gpus_flag and num_gpus_flag != num_gpus_present:
    raise UserError(
        "--num_gpus=%d but each worker of a cluster uses every GPU it sees "
        "(%d here); limit them with CUDA_VISIBLE_DEVICES" % (
            num_gpus_flag, num_gpus_present))
  return ["/gpu:%d" % i for i in range(num_gpus_present)]


LAUNCHERS = {"horovod": "horovodrun -np N",
             "byteps": "scripts/run_pre_byteps.sh -n N"}


def _process_engine_plan(options, num_gpus_present, cluster):
  """One replica per process of horovod or BytePS: each drives one device."""
  name = options.distribution_strategy
  if cluster:
    raise UserError("--distribution_strategy=%s does not use TF_CONFIG; "
                    "unset it and launch with %s" % (name, LAUNCHERS[name]))
  if options.cpu_replicas > 1 or options.num_gpus > 1 or options.multi_gpu:
    raise UserError("--distribution_strategy=%s runs one device per "
                    "process; start more processes with %s instead of "
                    "--cpu_replicas/--num_gpus/--multi_gpu" % (
                        name, LAUNCHERS[name]))
  device = "/gpu:0" if num_gpus_present else "/cpu:0"
  num_workers = (cluster_environment.horovod_world_size()
                 if name == "horovod" else
                 cluster_environment.byteps_world_size(os.environ))
  return StrategyPlan(name=name, devices=[device], num_workers=num_workers,
                      all_reduce_alg=options.all_reduce_alg,
                      collective_timeout_seconds=options.collective_timeout_seconds,
                      cluster=None)


def split_cpu(num_replicas):
  """Splits the physical CPU into `num_replicas` logical devices.

  Must run before TensorFlow initialises its runtime (before any session),
  unless an earlier run of this process already split it at least as
  finely (runs in one test process).
  """
  if num_replicas <= 1:
    return
  cpus = tf2.config.list_physical_devices("CPU")
  if len(tf2.config.get_logical_device_configuration(cpus[0]) or ()) >= (
      num_replicas):
    return
  tf2.config.set_logical_device_configuration(
      cpus[0], [tf2.config.LogicalDeviceConfiguration()] * num_replicas)


def _mirrored_cross_device_ops(alg, devices):
  if alg == "nccl" or (alg == "auto" and devices[0].startswith("/gpu")):
    return tf.distribute.NcclAllReduce()
  if alg == "hierarchical_copy":
    return tf.distribute.HierarchicalCopyAllReduce()
  return tf.distribute.ReductionToOneDevice()


def _collective_strategy(devices, alg, timeout_seconds, multi_machine):
  """MultiWorkerMirroredStrategy with a collective timeout and chosen devices.

  The public V1 constructor can neither take local CPU devices nor a timeout,
  so the strategy is assembled from its documented parts.
  """
  # pylint: disable=g-import-not-at-top
  from tensorflow.python.distribute import collective_all_reduce_strategy as cars
  from tensorflow.python.distribute import collective_util
  from tensorflow.python.distribute import distribute_lib
  from tensorflow.python.distribute.cluster_resolver import tfconfig_cluster_resolver
  # pylint: enable=g-import-not-at-top
  implementation = {
      "ring": collective_util.CommunicationImplementation.RING,
      "nccl": collective_util.CommunicationImplementation.NCCL,
  }.get(alg, collective_util.CommunicationImplementation.AUTO)
  options = collective_util.Options(implementation=implementation,
                                    timeout_seconds=timeout_seconds or None)

  class CollectiveStrategy(cars.CollectiveAllReduceStrategyV1):

    def __init__(self):  # pylint: disable=super-init-not-called
      resolver = (tfconfig_cluster_resolver.TFConfigClusterResolver()
                  if multi_machine else None)
      distribute_lib.StrategyV1.__init__(self, cars.CollectiveAllReduceExtended(
          self, cluster_resolver=resolver, communication_options=options,
          devices=None if multi_machine else devices))

  return CollectiveStrategy()


def build_strategy(plan):
  """Returns the tf.distribute strategy for `plan` (None for an engine of
  processes: horovod, byteps)."""
  if plan.name in PROCESS_ENGINES:
    return None
  if plan.name == "one_device":
    return tf.distribute.OneDeviceStrategy(plan.devices[0])
  if plan.name == "central_storage":
    # parameter_device None: TensorFlow's rule, the only compute device when
    # there is one, else the CPU.
    return tf.distribute.experimental.CentralStorageStrategy(
        compute_devices=plan.devices, parameter_device=None)
  if plan.name == "mirrored":
    return tf.distribute.MirroredStrategy(
        devices=plan.devices,
        cross_device_ops=_mirrored_cross_device_ops(plan.all_reduce_alg,
                                                    plan.devices))
  return _collective_strategy(plan.devices, plan.all_reduce_alg,
                              plan.collective_timeout_seconds,
                              multi_machine=bool(plan.cluster))


def check_global_batch(plan, global_batch):
  """Raises a UserError unless `global_batch` splits evenly over replicas."""
  if global_batch % plan.num_replicas:
    raise UserError(
        "--train_batch_size=%d (the global batch) must divide by the %d "
        "replicas (%s)" % (global_batch, plan.num_replicas, plan.name))


def micro_batch_size(global_batch_size, num_replicas, num_accumulation_steps):
  """Examples per replica per micro-batch.

  Raises:
    UserError: the global batch does not split evenly.
  """
  if global_batch_size % (num_replicas * num_accumulation_steps):
    raise UserError(
        "--train_batch_size=%d (the global batch per update) must divide by "
        "%d replicas x --num_accumulation_steps=%d = %d" %
        (global_batch_size, num_replicas, num_accumulation_steps,
         num_replicas * num_accumulation_steps))
  return global_batch_size // (num_replicas * num_accumulation_steps)


def describe(plan, global_batch):
  """One log line: strategy, replicas, global and per-replica batch."""
  return ("strategy=%s replicas=%d (%d worker(s) x %s) global_batch=%d "
          "per_replica_batch=%d" % (plan.name, plan.num_replicas,
                                    plan.num_workers, ",".join(plan.devices),
                                    global_batch,
                                    global_batch // plan.num_replicas))


@dataclasses.dataclass(frozen=True)
class ProcessGroup:
  """The processes of an engine that runs one process per replica
  (horovod_engine.init, byteps_engine.init); none under tf.distribute
  strategies, whose replicas live in one graph.

  Attributes:
    engine: "horovod" or "byteps".
    rank, size: this process's rank, and the processes.
    sum_across_processes: function(tensors, compress) -> their sums, one
      batched SUM all-reduce (BytePS: push_pull), which may send floats as
      float16 when `compress`.
  """
  engine: str
  rank: int
  size: int
  sum_across_processes: Callable
_PROCESS_GROUP = [None]


@dataclasses.dataclass(frozen=True)
class Replicas:
  """The replicas a training step sums over, as the optimizer sees them.

  Attributes:
    process_group: the ProcessGroup of an engine with one process per
      replica (horovod), or None: the replicas are tf.distribute's, in this
      graph (one without a strategy).
    stop_vote: a preemption.StopVote that rides in the step's all-reduce, or
      None for no vote.

  `Replicas()` is what a single-process user of upstream's optimization API
  gets: the replicas of the strategy in scope, if any, and no stop vote.
  """
  process_group: Optional[ProcessGroup] = None
  stop_vote: Any = None

  def sum(self, tensors, compress=True):
    """One batched SUM all-reduce of `tensors` over every replica.

    Identity with a single replica. Called in a replica context.

    Args:
      tensors: dense tensors of the same shapes and order on every replica.
      compress: horovod with --use_fp16 sends float tensors as float16 (fine
        for gradients); False keeps float32 on the wire, for values that
        must arrive exactly, such as a count (float16 holds integers exactly
        only up to 2048).

    Returns:
      The list of sums, identical on every replica.
    """
    if self.process_group:
      return self.process_group.sum_across_processes(tensors, compress)
    ctx = tf.distribute.get_replica_context()
    if ctx.num_replicas_in_sync == 1:
      return list(tensors)
    # merge_call + batch_reduce_to rather than ReplicaContext.all_reduce: the
    # latter wraps the reduction in a custom gradient that cannot find
    # per-replica reference variables in graph mode, and gradients are never
    # differentiated again anyway.
    return list(ctx.merge_call(_batch_sum, args=tuple(tensors)))

  def sum_with_stop_vote(self, tensors):
    """`sum(tensors)`, with this process's stop vote in the same all-reduce.

    Args:
      tensors: as for `sum`; float tensors may travel as float16.

    Returns:
      (the list of sums, the op recording the summed vote, which the step
      must run).
    """
    if self.stop_vote is None:
      return self.sum(tensors), tf.no_op()
    sums = self.sum(list(tensors) + [self.stop_vote.cast()])
    return sums[:-1], self.stop_vote.record(sums[-1])


def join_process_group(group):
  """Records that this process is replica `group.rank` of `group.size`.

  Args:
    group: a ProcessGroup; its `sum_across_processes(tensors, compress)` is
      the engine's batched SUM all-reduce, used by `sum_across_replicas`.
  """
  _PROCESS_GROUP[0] = group


def leave_process_group():
  """Back to tf.distribute replicas (tests building several graphs)."""
  _PROCESS_GROUP[0] = None


def process_group():
  """The ProcessGroup this process belongs to, or None (tf.distribute)."""
  return _PROCESS_GROUP[0]


def num_replicas_in_sync():
  """Replicas taking part in one step, seen from inside a model_fn."""
  group = process_group()
  if group:
    return group.size
  return tf.distribute.get_replica_context().num_replicas_in_sync


def num_local_replicas():
  """Replicas of this process (a horovod rank or a multi_worker worker has
  only its own); called in a replica context."""
  if process_group() or num_replicas_in_sync() == 1:
    return 1
  return len(tf.distribute.get_strategy().extended.worker_devices)


def replica_share(mean_loss):
  """This replica's share of the global-batch mean of an equal-size mean.

  For a loss averaged over this replica's examples (every replica has as
  many): summing the shares over replicas (what the all-reduce does to
  gradients and what Estimator does to the reported loss) gives the mean
  over the global batch. A loss normalised by a count that varies between
  replicas (the masked LM's) instead divides its sum by the global count
  (see `global_sum`).
  """
  n = num_replicas_in_sync()
  return mean_loss if n == 1 else mean_loss / float(n)


def global_sum(value):
  """A float32 scalar summed over every replica, worker and horovod rank.

  One scalar all-reduce, in float32 even under horovod with --use_fp16.
  Called in a replica context (inside model_fn).
  """
  return sum_across_replicas([value], compress=False)[0]


def sum_across_replicas(tensors, compress=True):
  """`Replicas.sum` over the replicas of this process's engine.

  For the tasks' loss functions, built inside a model_fn; see Replicas.sum.
  """
  return Replicas(process_group()).sum(tensors, compress)


def _batch_sum(strategy, *per_replica_values):
  return strategy.extended.batch_reduce_to(
      tf.distribute.ReduceOp.SUM, [(v, v) for v in per_replica_values])
