"""What a run reports when it ends: eval_results.txt, as upstream writes it,
and the run summary on stdout (the numbers a user came for)."""

import os

from bertkit.common import atomic_io
from bertkit.engine.report import throughput


def write_eval_results(output_dir, result):
  """Writes eval_results.txt as upstream does (`name = value` lines, sorted).

  The run summary prints the same figures, so they are not logged here.
  """
  path = os.path.join(output_dir, "eval_results.txt")
  with atomic_io.atomic_open(path, "w") as writer:
    for key in sorted(result.keys()):
      writer.write("%s = %s\n" % (key, str(result[key])))
  return path


def print_run_summary(output_dir, throughput_summary, eval_result,
                      target_line=None):
  """The numbers a user came for, on stdout at the end of a run; with
  `target_line`, the line saying when the held-out target was reached
  (evaluation.describe_target)."""
  lines = ["***** Run summary: %s *****" % output_dir]
  if throughput_summary:
    eps = throughput_summary.get("examples_per_sec")
    lines.append(
        "throughput: %s (%s per replica)%s, %s x%d, steps %d..%d; excluded "
        "%d warm-up step(s) and %d with a checkpoint save" % (
            "%.2f examples/sec" % eps if eps else "n/a (too few steps)",
            "%.2f" % (eps / throughput_summary["num_replicas"]) if eps
            else "n/a", throughput.describe_counts(throughput_summary),
            throughput_summary.get("strategy"),
            throughput_summary["num_replicas"],
            throughput_summary["first_step"],
            throughput_summary["final_step"],
            throughput_summary["steps_excluded_warmup"],
            throughput_summary["steps_excluded_checkpoint"]))
  if throughput_summary and "corrupt_records_skipped" in throughput_summary:
    lines.append("corrupt input records skipped: %d" %
                 throughput_summary["corrupt_records_skipped"])
  if target_line:
    lines.append(target_line)
  for key in sorted(eval_result or {}):
    lines.append("eval %s = %s" % (key, eval_result[key]))
  print("\n".join(lines), flush=True)
