"""Runs upstream's own extract_features.py (bert-tensorflow 1.0.4) on TF 2.15.

    python tests/tasks/upstream_extract_features.py --input_file=... (its flags)

bert-tensorflow 1.0.4 is google-research/bert's code as a wheel: its
extract_features.py already uses tensorflow.compat.v1 and
tf.estimator.tpu.TPUEstimator (which falls back to a plain Estimator with
use_tpu=False); only modeling.py's layer normalization comes from
tf.contrib, which TensorFlow 2 removed. This script puts one function in
its place, with contrib's variable names and arithmetic, then runs the
program's own main. Nothing else of upstream's code is changed.
"""

import sys
import types

from absl import app
import tensorflow.compat.v1 as tf


def contrib_layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1,
                       scope=None):
  """tf.contrib.layers.layer_norm as upstream calls it: variables
  `<scope or LayerNorm>/beta` and `/gamma` over the axes from
  begin_params_axis, moments over the axes from begin_norm_axis, one
  batch_normalization with epsilon 1e-12 (contrib's)."""
  with tf.variable_scope(scope, default_name="LayerNorm"):
    rank = inputs.shape.ndims
    params_shape = inputs.shape[begin_params_axis:]
    beta = tf.get_variable("beta", params_shape, inputs.dtype,
                           initializer=tf.zeros_initializer())
    gamma = tf.get_variable("gamma", params_shape, inputs.dtype,
                            initializer=tf.ones_initializer())
    axes = list(range(begin_norm_axis % rank, rank))
    mean, variance = tf.nn.moments(inputs, axes, keep_dims=True)
    outputs = tf.nn.batch_normalization(inputs, mean, variance, offset=beta,
                                        scale=gamma, variance_epsilon=1e-12)
    outputs.set_shape(inputs.shape)
    return outputs


def install_contrib():
  """`from tensorflow.contrib import layers` finds contrib_layer_norm."""
  contrib = types.ModuleType("tensorflow.contrib")
  contrib.layers = types.ModuleType("tensorflow.contrib.layers")
  contrib.layers.layer_norm = contrib_layer_norm
  sys.modules["tensorflow.contrib"] = contrib
  sys.modules["tensorflow.contrib.layers"] = contrib.layers


if __name__ == "__main__":
  tf.disable_v2_behavior()
  install_contrib()
  # pylint: disable-next=g-import-not-at-top
  from bert import extract_features
  for name in ("input_file", "vocab_file", "bert_config_file",
               "init_checkpoint", "output_file"):
    tf.flags.mark_flag_as_required(name)
  app.run(extract_features.main)
