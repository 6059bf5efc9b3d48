"""GFLOP/s of a dense layer's weight gradient x^T dy, one product or in blocks.

The dense layers' gradient of bertkit/kernels.py computes x^T dy in
128-column blocks of the wide side when the narrow side is at most 256 and
the wide side at least 4 times that, because TensorFlow's oneDNN GEMM runs
BERT-mini's feed-forward shapes faster that way on the CPU it was measured
on. This times both forms at the shapes of BERT-mini (M = B*S = 32 x 128)
and BERT-base (4 x 512), interleaved in one session (ABAB..., reversed every
other round), so that the rule can be checked on another CPU:

  python benchmarks/weight_gradient_gemm.py --rounds=9
  TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/weight_gradient_gemm.py  # Eigen
"""

import os
import statistics
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
from bertkit.common import cpu_kernels

cpu_kernels.prefer_onednn()
import numpy as np
import tensorflow.compat.v1 as tf

from bertkit import kernels
from bertkit.engine.loop import engine_setup
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs
from bertkit.perf import profiles

# (M, fan_in, fan_out): BERT-mini's QKV, attention output, intermediate and
# output layers at batch 32, seq 128; BERT-base's at batch 4, seq 512.
SHAPES = [(4096, 256, 768), (4096, 256, 256), (4096, 256, 1024),
          (4096, 1024, 256), (2048, 768, 2304), (2048, 768, 768),
          (2048, 768, 3072), (2048, 3072, 768)]


def build(shapes):
  """{(M, in, out, form): fetch} for the one-product and blocked forms."""
  rng = np.random.default_rng(0)
  fetches = {}
  for m, fan_in, fan_out in shapes:
    x = tf.Variable(rng.standard_normal((m, fan_in), dtype=np.float32))
    dy = tf.Variable(rng.standard_normal((m, fan_out), dtype=np.float32))
    width = kernels.WEIGHT_GRADIENT_BLOCK_WIDTH
    forms = {"one product": tf.matmul(x, dy, transpose_a=True),
             "blocks of %d" % width:
                 kernels.blocked_weight_gradient(x, dy, width)}
    for form, product in forms.items():
      # Fetch one element: the product runs whole, the copy out does not.
      fetches[(m, fan_in, fan_out, form)] = product[0, 0]
  return fetches


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=9)
  return parser.parse_args(argv)


def main(args):
  tf.disable_eager_execution()
  fetches = build(SHAPES)
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    seconds = profiles.time_in_turns(sess, fetches, args.rounds)
  print("kernels: %s" % ("oneDNN" if engine_setup.onednn_enabled()
                          else "Eigen"))
  print("M | in x out | form | ms | GFLOP/s")
  print("---|---|---|---|---")
  for (m, fan_in, fan_out, form), times in seconds.items():
    median = statistics.median(times)
    print("%d | %d x %d | %s | %.2f | %.0f" % (
        m, fan_in, fan_out, form, median * 1e3,
        2.0 * m * fan_in * fan_out / median / 1e9))


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
