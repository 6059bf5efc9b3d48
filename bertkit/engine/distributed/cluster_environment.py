"""Which cluster this process is a task of, as its environment says.

Read by distribution.plan and the runner before anything is built:

  TF_CONFIG      a tf.distribute cluster and this task (`tf_config_cluster`,
                 `cluster_task`);
  Slurm          a job step of several tasks (common/slurm_env.py), when
                 TF_CONFIG names no cluster (`cluster_from_environment`);
  horovodrun     the ranks launched (`horovod_world_size`);
  BytePS         the workers of ps-lite's DMLC_* environment
                 (`byteps_world_size`), checked before BytePS reads them.

Nothing here changes the environment: distribution.use_slurm_cluster makes a
Slurm step the process's TF_CONFIG.
"""

import json
import os

from absl import logging

from bertkit.common.errors import UserError
from bertkit.common import slurm_env


# What a BytePS worker reads from its environment (DMLC_* is ps-lite's).
BYTEPS_ENVIRONMENT = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                      "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_WORKER_ID")


def tf_config_cluster():
  """Parses TF_CONFIG; returns (cluster dict, task dict) or (None, None)."""
  raw = os.environ.get("TF_CONFIG", "")
  if not raw.strip():
    return None, None
  try:
    config = json.loads(raw)
  except ValueError as e:
    raise UserError("TF_CONFIG is not valid JSON (%s): %r" % (e, raw[:200]))
  if not isinstance(config, dict):
    raise UserError("TF_CONFIG must be a JSON object with 'cluster' and "
                    "'task', got %r" % raw[:200])
  cluster = config.get("cluster") or {}
  task = config.get("task") or {}
  if not cluster:
    return None, None
  if not isinstance(cluster, dict) or not all(
      isinstance(v, list) for v in cluster.values()):
    raise UserError("TF_CONFIG 'cluster' must map job names to address "
                    "lists, got %r" % (cluster,))
  task_type, task_index = task.get("type"), task.get("index")
  if task_type not in cluster and task_type != "evaluator":
    raise UserError("TF_CONFIG task type %r is not a job of the cluster %s" %
                    (task_type, sorted(cluster)))
  if task_type in cluster and not (
      isinstance(task_index, int)
      and 0 <= task_index < len(cluster[task_type])):
    raise UserError("TF_CONFIG task index %r is out of range for job %r with "
                    "%d tasks" % (task_index, task_type,
                                  len(cluster[task_type])))
  return cluster, task


def cluster_from_environment(port_base=None):
  """Which cluster this process is a task of, and which task.

  TF_CONFIG's when it names one; it wins over a Slurm job step, as it does
  for TensorFlow, with a warning when both are there. Else the Slurm job
  step's, when this process is one of its several tasks (slurm_env).

  Args:
    port_base: --slurm_port_base (None: derived from the job id).

  Returns:
    (cluster dict, task dict, the SlurmStep or None when the cluster is
    TF_CONFIG's), or (None, None, None) without a cluster.

  Raises:
    UserError: an invalid TF_CONFIG, or Slurm variables that contradict
      each other.
  """
  cluster, task = tf_config_cluster()
  if cluster:
    tasks = slurm_env.step_tasks(os.environ)
    if tasks > 1:
      logging.warning(
          "TF_CONFIG and a Slurm job step of %d tasks both describe a "
          "cluster: using TF_CONFIG's (TensorFlow's rule); unset TF_CONFIG "
          "to take the cluster from Slurm", tasks)
    return cluster, task, None
  step = slurm_env.step_from_environment(os.environ, port_base)
  if step is None:
    return None, None, None
  config = slurm_env.tf_config(step)
  return config["cluster"], config["task"], step


def cluster_task():
  """(task name like 'worker-1', is_chief) from TF_CONFIG, or None.

  Read from TF_CONFIG itself: a RunConfig built before the distribute
  coordinator configures the strategy reports task 0 on every worker.
  """
  cluster, task = tf_config_cluster()
  if not cluster:
    return None
  task_type, index = task.get("type"), task.get("index", 0)
  if "chief" in cluster:
    is_chief = task_type == "chief"
  else:
    is_chief = task_type == "worker" and index == 0
  return "%s-%d" % (task_type, index), is_chief


def horovod_world_size():
  """Ranks launched by horovodrun (gloo) or mpirun, from the environment."""
  for var in ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
    if os.environ.get(var):
      return int(os.environ[var])
  return 1


def byteps_world_size(env):
  """The BytePS workers of a run, from a worker's DMLC_* environment.

  BytePS counts DMLC_NUM_WORKER machines of BYTEPS_LOCAL_SIZE worker
  processes each; scripts/run_pre_byteps.sh starts one process per worker
  (local size 1).

  Args:
    env: the environment (os.environ).

  Returns:
    The number of worker processes.

  Raises:
    UserError: a variable is missing or not what BytePS expects; without
      this, BytePS aborts with a C++ check or waits forever.
  """
  missing = [name for name in BYTEPS_ENVIRONMENT if not env.get(name)]
  if missing:
    raise UserError(
        "--distribution_strategy=byteps runs as a BytePS worker, but %s "
        "%s not set; start the workers, a server and the scheduler with "
        "scripts/run_pre_byteps.sh (docs/byteps.md)" % (
            ", ".join(missing), "is" if len(missing) == 1 else "are"))
  if env["DMLC_ROLE"] != "worker":
    raise UserError("--distribution_strategy=byteps runs as a BytePS worker "
                    "but DMLC_ROLE=%s; the scheduler and servers run "
                    "`python -c 'import byteps.server'`" % env["DMLC_ROLE"])
  numbers = {}
  for name in ("DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER",
               "DMLC_WORKER_ID", "BYTEPS_LOCAL_SIZE", "BYTEPS_LOCAL_RANK"):
    value = env.get(name, "1" if name == "BYTEPS_LOCAL_SIZE" else "0")
    if not value.isdigit():
      raise UserError("%s=%s: expected a non-negative integer" % (name, value))
    numbers[name] = int(value)
  for name in ("DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "BYTEPS_LOCAL_SIZE"):
    if numbers[name] < 1:
      raise UserError("%s=%d: expected at least 1" % (name, numbers[name]))
  if numbers["DMLC_WORKER_ID"] >= numbers["DMLC_NUM_WORKER"]:
    raise UserError("DMLC_WORKER_ID=%d is out of range for DMLC_NUM_WORKER=%d"
                    " (ids count from 0)" % (numbers["DMLC_WORKER_ID"],
                                             numbers["DMLC_NUM_WORKER"]))
  if numbers["BYTEPS_LOCAL_RANK"] >= numbers["BYTEPS_LOCAL_SIZE"]:
    raise UserError("BYTEPS_LOCAL_RANK=%d is out of range for "
                    "BYTEPS_LOCAL_SIZE=%d" % (numbers["BYTEPS_LOCAL_RANK"],
                                              numbers["BYTEPS_LOCAL_SIZE"]))
  if not 0 < numbers["DMLC_PS_ROOT_PORT"] < 65536:
    raise UserError("DMLC_PS_ROOT_PORT=%d is not a port" %
                    numbers["DMLC_PS_ROOT_PORT"])
  return numbers["DMLC_NUM_WORKER"] * numbers["BYTEPS_LOCAL_SIZE"]
