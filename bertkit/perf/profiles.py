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
    op_type = _op_type(name)
    if op_type is None:
      continue
    totals[op_type][0] += duration_ps
    totals[op_type][1] += 1
  ranked = sorted(totals.items(), key=lambda item: -item[1][0])
  return [(op, ps / 1e9, count) for op, (ps, count) in ranked]


def trace_intervals(xplane_path):
  """Yields (name, start_ps, end_ps) of the events on the TF op threads of a
  profiler trace, on one clock."""
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
        start = line.timestamp_ns * 1000 + event.offset_ps
        yield (plane.event_metadata[event.metadata_id].name, start,
               start + event.duration_ps)


def trace_events(xplane_path):
  """Yields (name, duration_ps) of the TF op threads of a profiler trace."""
  for name, start, end in trace_intervals(xplane_path):
    yield name, end - start


def _op_type(name):
  """The op type of an op execution's event name, or None for bookkeeping
  events ("ExecutorState::Process", "ParallelFor", ...)."""
  node, _, op_type = name.rpartition(":")
  if not node or node.endswith(":") or not re.fullmatch(r"[A-Za-z_]\w*",
                                                         op_type):
    return None
  return op_type


def _covered_ps(intervals):
  """Picoseconds covered by the union of (start, end) intervals."""
  covered, end_so_far = 0, None
  for start, end in sorted(intervals):
    if end_so_far is None or start > end_so_far:
      covered += end - start
      end_so_far = end
    elif end > end_so_far:
      covered += end - end_so_far
      end_so_far = end
  return covered


def busy_times(intervals):
  """How long the cores had work, and how long matrix products.

  Ops that run at the same time on several threads add up to more than the
  wall time in `op_totals`; here each moment counts once, which says what
  share of the traced steps the matrix products (op types with "MatMul":
  MatMul, _MklMatMul, _FusedMatMul, BatchMatMulV2, ...) kept the cores busy.

  Args:
    intervals: iterable of (event name, start_ps, end_ps), as
      `trace_intervals` yields.

  Returns:
    dict of milliseconds: "traced" (first op start to last op end),
    "any_op" (some op running) and "matmul" (some matrix product running).
  """
  ops, products = [], []
  for name, start, end in intervals:
    op_type = _op_type(name)
    if op_type is None:
      continue
    ops.append((start, end))
    if "MatMul" in op_type:
      products.append((start, end))
  if not ops:
    return {"traced": 0.0, "any_op": 0.0, "matmul": 0.0}
  traced = max(e for _, e in ops) - min(s for s, _ in ops)
  return {"traced": traced / 1e9, "any_op": _covered_ps(ops) / 1e9,
          "matmul": _covered_ps(products) / 1e9}


def busy_line(busy):
  """One line of `busy_times`'s figures."""
  traced = busy["traced"] or 1.0
  return ("traced %.1f ms: some op running %.1f ms (%.1f%%), a matrix "
          "product running %.1f ms (%.1f%%)" % (
              busy["traced"], busy["any_op"], 100 * busy["any_op"] / traced,
              busy["matmul"], 100 * busy["matmul"] / traced))


def trace_report(xplane_path, limit):
  """`top_ops_markdown` of a trace and its `busy_line`, the trace read once."""
  intervals = list(trace_intervals(xplane_path))
  totals = op_totals((name, end - start) for name, start, end in intervals)
  return top_ops_markdown(totals, limit) + "\n" + busy_line(
      busy_times(intervals))


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

