"""Where a training's time went, by op type, from its profiler trace.

run_pretraining.py --profile_steps A,B writes an XPlane trace under its
output directory; benchmark.py --top_ops_of reads the newest one with these.
`time_in_turns` times ops against each other in one session (the op-level
benchmarks under benchmarks/).
"""

import collections
import glob
import os
import re
import time

from bertkit.common.errors import UserError


def op_totals(events):
  """Sums TensorFlow op executions by op type.

  Args:
    events: iterable of (event name, duration in picoseconds). Op executions
      are named "<node name>:<OpType>"; other events (executor and thread
      pool bookkeeping such as "ExecutorState::Process") are skipped.

  Returns:
    list of (op type, milliseconds, executions), most time first. Ops that
    run concurrently each count their own wall time.
  """
  totals = collections.defaultdict(lambda: [0, 0])
  for name, duration_ps in events:
    node, _, op_type = name.rpartition(":")
    if not node or node.endswith(":") or not re.fullmatch(
        r"[A-Za-z_]\w*", op_type):
      continue
    totals[op_type][0] += duration_ps
    totals[op_type][1] += 1
  ranked = sorted(totals.items(), key=lambda item: -item[1][0])
  return [(op, ps / 1e9, count) for op, (ps, count) in ranked]


def trace_events(xplane_path):
  """Yields (name, duration_ps) of the TF op threads of a profiler trace."""
  # pylint: disable=g-import-not-at-top
  from tensorflow.tsl.profiler.protobuf import xplane_pb2
  space = xplane_pb2.XSpace()
  with open(xplane_path, "rb") as f:
    space.ParseFromString(f.read())
  for plane in space.planes:
    for line in plane.lines:
      if not line.name.startswith("tf_Compute"):
        continue
      for event in line.events:
        yield plane.event_metadata[event.metadata_id].name, event.duration_ps


def top_ops_markdown(totals, limit):
  """A Markdown table of the `limit` costliest op types of `op_totals`."""
  overall = sum(ms for _, ms, _ in totals) or 1.0
  out = ["op type | ms | share | executions", "---|---|---|---"]
  for op, ms, count in totals[:limit]:
    out.append("%s | %.1f | %.1f%% | %d" % (op, ms, 100 * ms / overall, count))
  out.append("all ops | %.1f | 100%% | %d" % (overall, sum(
      c for _, _, c in totals)))
  return "\n".join(out) + "\n"


def latest_trace(profile_dir):
  """The newest *.xplane.pb under <dir>/plugins/profile (or <dir> itself).

  Raises:
    UserError: there is none.
  """
  patterns = [os.path.join(profile_dir, "plugins", "profile", "*",
                           "*.xplane.pb"),
              os.path.join(profile_dir, "*.xplane.pb")]
  paths = [p for pattern in patterns for p in glob.glob(pattern)]
  if not paths:
    raise UserError("--top_ops_of %s: no *.xplane.pb under it or its "
                    "plugins/profile/<run>/ (train with --profile_steps A,B)"
                    % profile_dir)
  return max(paths, key=os.path.getmtime)


def time_in_turns(session, fetches, rounds):
  """Seconds of each fetch per round, the fetches run in turns.

  Each fetch runs once untimed, then `rounds` times, in alternating order
  (forward in even rounds, backward in odd ones) so that neither side
  always runs after the other (warm caches, turbo states).

  Args:
    session: a tf.Session holding the fetches' graph, initialised.
    fetches: dict key -> fetch.
    rounds: timed runs of each.

  Returns:
    dict key -> list of `rounds` wall-clock seconds.
  """
  for fetch in fetches.values():
    session.run(fetch)
  seconds = {key: [] for key in fetches}
  for round_index in range(rounds):
    order = list(fetches.items())
    if round_index % 2:
      order.reverse()
    for key, fetch in order:
      start = time.perf_counter()
      session.run(fetch)
      seconds[key].append(time.perf_counter() - start)
  return seconds

