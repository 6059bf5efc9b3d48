"""Two formulations of BERT's tanh GELU: their speed and their values.

gelu(x) = 0.5 x (1 + tanh(z)), z = sqrt(2 / pi) (x + 0.044715 x^3), as
upstream writes it (9 elementwise ops forward), is also x * sigmoid(2 z),
since 0.5 (1 + tanh(z)) = sigmoid(2 z); with the constants folded,
2 z = x (a + b x^2), that is 6 ops, the form `modeling.gelu` computes. Both
have their derivative written out (8 ops). This times them, forward alone
and forward + gradient, on the [B*S, I] activations of BERT-mini (32 x 128,
I = 1024) and BERT-base (4 x 512, I = 3072), in turns (ABAB..., reversed
every other round) so that load changes hit both alike, and prints the
medians and the median of the per-round ratios. It also prints how far
each form is from the function computed in float64, and from each other:

  python benchmarks/gelu_speed.py --rounds=21
"""

import math
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
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs
from bertkit.perf import profiles
import modeling

SHAPES = [(4096, 1024), (2048, 3072)]
_SCALE = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715
_UPSTREAM_GRADIENT = __name__ + "/upstream_tanh_gelu"


def upstream_gelu(x):
  """0.5 x (1 + tanh(z)), upstream's ops (with x * x * x for pow)."""
  square = x * x
  t = tf.tanh(_SCALE * (x + _CUBIC * (square * x)))
  cdf = 0.5 * (1.0 + t)
  return kernels.with_gradient(
      _UPSTREAM_GRADIENT, x * cdf, [x, square, t, cdf])


@tf.RegisterGradient(_UPSTREAM_GRADIENT)
def _upstream_gelu_gradient(op, dy, *unused_saved):
  # dy (cdf + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 x^2)).
  _, x, square, t, cdf = op.inputs
  slope = _SCALE + (3.0 * _SCALE * _CUBIC) * square
  dx = dy * (cdf + (0.5 * x) * (1.0 - t * t) * slope)
  return [None, dx, None, None, None]


FORMS = {"tanh (upstream)": upstream_gelu,
         "sigmoid (modeling.gelu)": modeling.gelu}


def build(shapes):
  """{(shape, form, pass): scalar} for every shape, form and pass."""
  ops = {}
  rng = np.random.RandomState(0)
  for shape in shapes:
    x = tf.Variable(rng.standard_normal(shape).astype(np.float32) * 2.0)
    dy = tf.Variable(rng.standard_normal(shape).astype(np.float32))
    for name, fn in FORMS.items():
      y = fn(x.read_value())
      dx, = tf.gradients(y, x, grad_ys=dy.read_value())
      # Sums, not tf.group: grappler prunes ops that only a control
      # dependency waits for.
      ops[(shape, name, "forward")] = tf.reduce_sum(y)
      ops[(shape, name, "forward+gradient")] = (tf.reduce_sum(y) +
                                                tf.reduce_sum(dx))
  return ops


def accuracy():
  """Lines: float32 errors of both forms against float64, and between them.

  Relative errors are given by region: below x = -1 the tanh form's
  1 + tanh(z) cancels (tanh(z) is near -1), which costs it digits relative
  to the small gelu(x) there, all of them by x = -4.
  """
  x64 = np.linspace(-8.0, 8.0, 160001)
  z = _SCALE * (x64 + _CUBIC * x64 ** 3)
  reference = 0.5 * x64 * (1.0 + np.tanh(z))
  with tf.Graph().as_default(), tf.Session() as sess:
    x = tf.constant(x64.astype(np.float32))
    values = sess.run({name: fn(x) for name, fn in FORMS.items()})
  nonzero = reference != 0.0
  regions = {"x >= -1": nonzero & (x64 >= -1.0),
             "-3 <= x < -1": (x64 >= -3.0) & (x64 < -1.0),
             "-5 <= x < -3": (x64 >= -5.0) & (x64 < -3.0)}

  def describe(value, target):
    error = np.abs(value - target)
    parts = ["max abs %.1e" % error.max()]
    for name, where in regions.items():
      parts.append("max rel %.1e at %s" % (
          (error[where] / np.abs(reference[where])).max(), name))
    return ", ".join(parts)

  lines = ["%s against float64: %s" % (name, describe(value, reference))
           for name, value in values.items()]
  old, new = values.values()
  lines.append("between the forms: %s" % describe(new, old))
  return lines


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=21)
  return parser.parse_args(argv)


def main(args):
  tf.disable_eager_execution()
  ops = build(SHAPES)
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    seconds = profiles.time_in_turns(sess, ops, args.rounds)
  for line in accuracy():
    print(line)
  print("shape | pass | tanh ms | sigmoid ms | tanh / sigmoid (median of "
        "rounds)")
  print("---|---|---|---|---")
  tanh_name, sigmoid_name = FORMS
  for shape in SHAPES:
    for pass_name in ("forward", "forward+gradient"):
      old = seconds[(shape, tanh_name, pass_name)]
      new = seconds[(shape, sigmoid_name, pass_name)]
      print("%d x %d | %s | %.2f | %.2f | %.3f" % (
          shape[0], shape[1], pass_name, statistics.median(old) * 1e3,
          statistics.median(new) * 1e3,
          statistics.median(o / n for o, n in zip(old, new))))


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
