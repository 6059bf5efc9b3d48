"""A Slurm job step's tasks as a training cluster, from srun's SLURM_* vars.

`srun -n N python run_pretraining.py ...` starts N copies of a program with
the step's layout in their environment: the step's node list in Slurm's
compressed form ("node[01-03,7],gpu5"), the tasks on each node ("2(x3),1"),
and each copy's global (SLURM_PROCID) and per-node (SLURM_LOCALID) task id.
`step_from_environment` turns these into the workers of a multi_worker
cluster: task i's host is the node srun put it on, its port
`port_base + SLURM_LOCALID`, its GPUs its share of what the node shows it;
task 0 is the chief. engine/distributed/distribution.py decides whether the step
is used (TF_CONFIG wins) and hands it to TensorFlow.

Free of TensorFlow: pure functions of a mapping like os.environ.
"""

import dataclasses
import re
import socket
from typing import List, Optional

from bertkit.common.errors import UserError

# Without --slurm_port_base, a job's base port is derived from its job id so
# that jobs sharing a node (rarely, but on shared partitions it happens) do
# not collide: DEFAULT_PORT_FIRST + (job id mod DEFAULT_PORT_SLOTS) *
# DEFAULT_PORT_STRIDE. The range stays below Linux's ephemeral ports
# (32768+), where an outgoing connection could take a port first; a job with
# more than DEFAULT_PORT_STRIDE tasks on one node overlaps the next id's
# ports and should pass --slurm_port_base.
DEFAULT_PORT_FIRST = 10000
DEFAULT_PORT_STRIDE = 8
DEFAULT_PORT_SLOTS = 2800


@dataclasses.dataclass(frozen=True)
class SlurmStep:
  """A job step's training cluster, seen from one of its tasks.

  Attributes:
    workers: "host:port" of every task, by SLURM_PROCID (chief first).
    task_index: this task's SLURM_PROCID.
    local_index: this task's SLURM_LOCALID (its rank on its node).
    gpus: CUDA device ids this task should see (strings, as in
      CUDA_VISIBLE_DEVICES), or None when the node shows no GPUs.
    variables: which SLURM_* variables the layout was read from, for the
      log line ("SLURM_STEP_NODELIST=localhost SLURM_STEP_TASKS_PER_NODE=2").
  """
  workers: List[str]
  task_index: int
  local_index: int
  gpus: Optional[List[str]]
  variables: str


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top_level(text):
  """Splits on commas outside brackets ("a[1,2],b" -> ["a[1,2]", "b"])."""
  parts, depth, start = [], 0, 0
  for i, char in enumerate(text):
    if char == "[":
      depth += 1
    elif char == "]":
      depth -= 1
    elif char == "," and depth == 0:
      parts.append(text[start:i])
      start = i + 1
  parts.append(text[start:])
  return parts


def _expand_ranges(body, expr):
  """"01-03,7" -> ["01", "02", "03", "7"]: each range keeps the width of
  its first number, as Slurm pads."""
  names = []
  for item in body.split(","):
    match = _RANGE.match(item)
    if not match:
      raise UserError("invalid Slurm host list %r: %r is not a number or a "
                      "range lo-hi" % (expr, item))
    first, last = match.group(1), match.group(2)
    if last is None:
      names.append(first)
      continue
    if int(last) < int(first):
      raise UserError("invalid Slurm host list %r: range %s ends before it "
                      "starts" % (expr, item))
    names.extend(str(n).zfill(len(first))
                 for n in range(int(first), int(last) + 1))
  return names


def _expand_one(pattern, expr):
  """One comma-free host pattern ("rack[1-2]-n[01-02]") -> its host names,
  the bracket groups expanded left to right (a product)."""
  pieces = re.split(r"(\[[^\[\]]*\])", pattern)
  if "[" in pieces[-1] or "]" in "".join(pieces[0::2]):
    raise UserError("invalid Slurm host list %r: unbalanced brackets in %r"
                    % (expr, pattern))
  if len(pieces) > 1 and pieces[-1]:
    # Slurm refuses a suffix after the last bracket group ("n[9-10]x").
    raise UserError("invalid Slurm host list %r: %r follows the last "
                    "bracket group of %r" % (expr, pieces[-1], pattern))
  hosts = [""]
  for i, piece in enumerate(pieces):
    if i % 2 == 0:
      hosts = [h + piece for h in hosts]
    else:
      hosts = [h + n for h in hosts for n in _expand_ranges(piece[1:-1], expr)]
  return hosts


def expand_hostlist(expr):
  """Expands a Slurm host list as `scontrol show hostnames` does.

  Args:
    expr: e.g. "node[01-03,7],gpu5" (zero padding kept from each range's
      first number) or "a[1-2]b[3-4]" (groups multiply).

  Returns:
    The host names in order, duplicates kept:
    ["node01", "node02", "node03", "node7", "gpu5"].

  Raises:
    UserError: an expression Slurm would not accept either.
  """
  expr = expr.strip()
  if not expr:
    return []
  hosts = []
  for pattern in _split_top_level(expr):
    if not pattern:
      raise UserError("invalid Slurm host list %r: an empty name" % expr)
    hosts.extend(_expand_one(pattern, expr))
  return hosts


def expand_tasks_per_node(expr):
  """"2(x3),1" -> [2, 2, 2, 1] (SLURM_TASKS_PER_NODE's compressed form).

  Raises:
    UserError: not of that form.
  """
  counts = []
  for item in expr.split(","):
    match = re.match(r"^(\d+)(?:\(x(\d+)\))?$", item.strip())
    if not match:
      raise UserError("invalid Slurm tasks-per-node list %r: expected e.g. "
                      "'2(x3),1'" % expr)
    counts.extend([int(match.group(1))] * int(match.group(2) or 1))
  return counts


def _first_of(environ, *names):
  """(name, value) of the first variable set in `environ`, else (None, None)."""
  for name in names:
    if environ.get(name, "").strip():
      return name, environ[name].strip()
  return None, None


def _integer(environ, name):
  try:
    return int(environ[name])
  except KeyError:
    raise UserError("%s is not set in this Slurm job step; run under srun"
                    % name)
  except ValueError:
    raise UserError("%s=%r is not an integer" % (name, environ[name]))


def step_tasks(environ):
  """The number of tasks of the job step this process is in, or 0.

  0 outside a job step: no SLURM_STEP_ID (e.g. the batch script itself, where
  SLURM_NTASKS is the job's, not a step's) or no SLURM_NTASKS.
  """
  if "SLURM_STEP_ID" not in environ and "SLURM_STEPID" not in environ:
    return 0
  _, value = _first_of(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
  if value is None:
    return 0
  try:
    return int(value)
  except ValueError:
    raise UserError("SLURM_NTASKS=%r is not an integer" % value)


def default_port_base(environ):
  """The base port of a job without --slurm_port_base (see
  DEFAULT_PORT_FIRST)."""
  job_id = _integer(environ, "SLURM_JOB_ID")
  return (DEFAULT_PORT_FIRST +
          job_id % DEFAULT_PORT_SLOTS * DEFAULT_PORT_STRIDE)


def _task_gpus(environ, tasks_here, local_index):
  """This task's CUDA devices: its share of what the node shows it.

  Slurm binds GPUs to tasks itself with --gpus-per-task (each task then sees
  its own); with --gres=gpu:N or --gpus-per-node every task of a node sees
  all of the node's GPUs, and they are shared out here by SLURM_LOCALID:
  SLURM_GPUS_PER_TASK each when set, else evenly.

  Returns:
    A list of CUDA device ids, or None when CUDA_VISIBLE_DEVICES is unset or
    empty (a CPU node).
  """
  visible = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
             if d.strip()]
  if not visible or tasks_here == 1:
    return visible or None
  per_task_text = environ.get("SLURM_GPUS_PER_TASK", "")
  if per_task_text:
    # "2" or a typed request "a100:2".
    try:
      per_task = int(per_task_text.rsplit(":", 1)[-1])
    except ValueError:
      raise UserError("SLURM_GPUS_PER_TASK=%r is not a GPU count"
                      % per_task_text)
    if len(visible) == per_task:
      return visible  # Slurm bound them already
  elif len(visible) % tasks_here == 0:
    per_task = len(visible) // tasks_here
  else:
    raise UserError(
        "%d GPU(s) visible (CUDA_VISIBLE_DEVICES=%s) to each of the %d tasks "
        "on this node cannot be shared out evenly; ask Slurm for "
        "--gpus-per-task" % (len(visible), ",".join(visible), tasks_here))
  if per_task * tasks_here > len(visible):
    raise UserError(
        "SLURM_GPUS_PER_TASK=%s x %d tasks on this node need more GPUs than "
        "the %d visible (CUDA_VISIBLE_DEVICES=%s)" % (
            per_task_text, tasks_here, len(visible), ",".join(visible)))
  return visible[local_index * per_task:(local_index + 1) * per_task]


def check_port_free(step, port_base_flag):
  """Raises UserError when this node already listens on the task's port.

  Args:
    step: this task's SlurmStep.
    port_base_flag: --slurm_port_base (None: derived), for the message.
  """
  port = int(step.workers[step.task_index].rsplit(":", 1)[1])
  probe = socket.socket()
  try:
    # As the gRPC server binds: address reuse on, so that a socket of an
    # earlier run in TIME_WAIT does not count as taken.
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    probe.bind(("", port))
  except OSError as e:
    raise UserError(
        "port %d of this Slurm task is in use on %s (%s); another job on "
        "the node may have the same ports: pass a different "
        "--slurm_port_base%s" % (
            port, socket.gethostname(), e.strerror,
            " (now %d)" % port_base_flag if port_base_flag else ""))
  finally:
    probe.close()


def step_from_environment(environ, port_base=None):
  """The job step's cluster, or None outside a step of several tasks.

  Args:
    environ: a mapping like os.environ.
    port_base: --slurm_port_base; None derives it from SLURM_JOB_ID.

  Returns:
    A SlurmStep, or None when there is no job step or it has one task.

  Raises:
    UserError: variables missing or contradicting each other (SLURM_NTASKS
      against the node list and tasks per node, a task id out of range, a
      layout other than block), ports out of range.
  """
  ntasks = step_tasks(environ)
  if ntasks <= 1:
    return None
  ntasks_var, _ = _first_of(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
  nodes_var, nodelist = _first_of(environ, "SLURM_STEP_NODELIST",
                                  "SLURM_JOB_NODELIST", "SLURM_NODELIST")
  counts_var, counts_text = _first_of(environ, "SLURM_STEP_TASKS_PER_NODE",
                                      "SLURM_TASKS_PER_NODE")
  if nodelist is None or counts_text is None:
    raise UserError("a Slurm step of %d tasks without %s: cannot tell where "
                    "its tasks run" % (ntasks, "SLURM_STEP_NODELIST"
                                       if nodelist is None else
                                       "SLURM_STEP_TASKS_PER_NODE"))
  hosts = expand_hostlist(nodelist)
  counts = expand_tasks_per_node(counts_text)
  if len(hosts) != len(counts):
    raise UserError("%s=%s names %d node(s) but %s=%s gives tasks for %d" % (
        nodes_var, nodelist, len(hosts), counts_var, counts_text,
        len(counts)))
  if sum(counts) != ntasks:
    raise UserError("%s=%d contradicts %s=%s on %s=%s (%d tasks)" % (
        ntasks_var, ntasks, counts_var, counts_text, nodes_var, nodelist,
        sum(counts)))
  task_index = _integer(environ, "SLURM_PROCID")
  local_index = _integer(environ, "SLURM_LOCALID")
  if not 0 <= task_index < ntasks:
    raise UserError("SLURM_PROCID=%d is out of range for a step of %d tasks"
                    % (task_index, ntasks))
  base = port_base if port_base is not None else default_port_base(environ)
  top = base + max(counts) - 1
  if base < 1024 or top > 65535:
    raise UserError("--slurm_port_base=%d gives ports %d..%d; they must lie "
                    "in 1024..65535" % (base, base, top))
  # Block layout (srun's default): node 0 runs tasks 0..counts[0]-1, etc.
  workers, layout = [], []
  for node, (host, count) in enumerate(zip(hosts, counts)):
    for local in range(count):
      workers.append("%s:%d" % (host, base + local))
      layout.append((node, local))
  node_id = environ.get("SLURM_NODEID")
  if (layout[task_index][1] != local_index or
      (node_id is not None and str(layout[task_index][0]) != node_id)):
    raise UserError(
        "task %d is task %d of node %s, not where a block layout puts it "
        "(SLURM_DISTRIBUTION=%s); launch with srun --distribution=block" % (
            task_index, local_index, node_id,
            environ.get("SLURM_DISTRIBUTION", "unset")))
  return SlurmStep(
      workers=workers, task_index=task_index, local_index=local_index,
      gpus=_task_gpus(environ, counts[layout[task_index][0]], local_index),
      variables="%s=%s %s=%s" % (nodes_var, nodelist, counts_var,
                                 counts_text))


def tf_config(step):
  """TF_CONFIG's content for `step`: every task a worker, worker 0 the
  chief (TensorFlow's rule when the cluster has no "chief" job)."""
  return {"cluster": {"worker": list(step.workers)},
          "task": {"type": "worker", "index": step.task_index}}


def describe(step):
  """The log line naming the cluster, this task and where they came from."""
  return ("cluster from Slurm: %d workers (%s), this is task %d (GPUs: %s; "
          "from %s)" % (len(step.workers), ", ".join(step.workers),
                        step.task_index,
                        ",".join(step.gpus) if step.gpus else "none",
                        step.variables))
