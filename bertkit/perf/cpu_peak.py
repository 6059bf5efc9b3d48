"""The device the benchmark runs on, and the peak its MFU divides by.

On a GPU machine the peak is what the user gives (--peak_tflops per GPU). On
a CPU-only machine it is measured: the best float32 matmul rate of the whole
CPU, in a fresh subprocess (benchmark.py --measure_peak_only): TensorFlow
fixes its thread pools when its runtime starts, and the probe's must be
training's.
"""

import json
import os
import subprocess
import sys
import time

from absl import logging

from bertkit.perf import child_runs

PEAK_MATMUL_SIZE = 2048


def available_cores():
  """Cores this process may run on (its affinity), else all of them."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


def matmul_peak_gflops(threads, size=PEAK_MATMUL_SIZE, chain=10, trials=5):
  """The best float32 GFLOP/s of chained size x size matmuls, in-process.

  The matmuls are chained (each multiplies the previous product) so that no
  graph optimisation can merge or skip them.

  Args:
    threads: intra- and inter-op threads, as TensorFlow uses for training.
    size: matrix side.
    chain: matmuls per timed call.
    trials: timed calls; the fastest counts.

  Returns:
    GFLOP/s (float).
  """
  import tensorflow as tf2  # pylint: disable=g-import-not-at-top
  tf2.config.threading.set_intra_op_parallelism_threads(threads)
  tf2.config.threading.set_inter_op_parallelism_threads(threads)
  a = tf2.random.normal([size, size])
  # Scaled so that repeated products keep their magnitude.
  b = tf2.random.normal([size, size]) / float(size) ** 0.5

  @tf2.function
  def chained(x):
    for _ in range(chain):
      x = tf2.matmul(x, b)
    return x

  chained(a).numpy()
  best = float("inf")
  for _ in range(trials):
    start = time.perf_counter()
    chained(a).numpy()
    best = min(best, time.perf_counter() - start)
  return chain * 2.0 * size ** 3 / best / 1e9


def measure_cpu_peak(threads):
  """Runs `matmul_peak_gflops` in a fresh subprocess; returns GFLOP/s."""
  result = subprocess.run(
      [sys.executable, child_runs.BENCHMARK, "--measure_peak_only",
       "--peak_threads=%d" % threads],
      cwd=child_runs.REPO_ROOT, env=child_runs.child_env(),
      capture_output=True, text=True, timeout=600, check=False)
  if result.returncode != 0:
    raise RuntimeError("CPU peak measurement failed:\n%s" %
                       result.stderr[-2000:])
  return json.loads(result.stdout.strip().splitlines()[-1])["gflops"]


def resolve_peak(device, peak_tflops, peak_threads):
  """The peak of the MFU column, given or measured.

  Args:
    device: "gpu" or "cpu".
    peak_tflops: the user's peak (per GPU, or of the whole CPU), or None.
    peak_threads: threads of the CPU measurement; None for every core
      available.

  Returns:
    (peak TFLOP/s or None, description for the report).
  """
  if peak_tflops:
    return peak_tflops, "%.3f TFLOP/s per %s (--peak_tflops)" % (
        peak_tflops, "GPU" if device == "gpu" else "machine")
  if device == "gpu":
    return None, "none given (--peak_tflops), so no MFU"
  threads = peak_threads or available_cores()
  gflops = measure_cpu_peak(threads)
  logging.info("CPU float32 matmul peak: %.1f GFLOP/s (%d threads)", gflops,
               threads)
  return gflops / 1e3, (
      "%.1f GFLOP/s, the best float32 %dx%d matmul rate of this CPU measured "
      "with %d threads (whole machine, shared by the logical replicas)" %
      (gflops, PEAK_MATMUL_SIZE, PEAK_MATMUL_SIZE, threads))


def detect_device():
  """Returns "gpu" when TensorFlow sees a GPU, else "cpu"."""
  import tensorflow as tf2  # pylint: disable=g-import-not-at-top
  return "gpu" if tf2.config.list_physical_devices("GPU") else "cpu"
