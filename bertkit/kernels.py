# coding=utf-8
"""The model's hand-written kernels: ops whose gradient is written out.

modeling.py builds BERT from these (and the pretraining head takes its loss
from `sparse_softmax_cross_entropy`); each computes what the plain
TensorFlow form computes, in fewer or faster ops, and tests/tasks/
test_modeling.py checks each against autodiff of that form:

  tanh_gelu                     BERT's GELU and its derivative written out
  normalize                     layer norm's arithmetic, its gradient in
                                closed form
  blocked_dense_gradient        a dense layer's weight gradient in column
                                blocks (oneDNN's long-K GEMM is slow)
  sparse_softmax_cross_entropy  the loss from oneDNN's softmax, not the fused
                                op's single-core passes

A gradient is attached with `with_gradient` (an IdentityN whose gradient is
overridden) or, for the dense layers' MatMul, a gradient_override_map. Layer
1, beside modeling: it imports TensorFlow and nothing of the package.

The gradient functions are registered under this module's __name__, so each
loaded copy of it registers its own (benchmarks/paired_steps.py loads
several checkouts' kernels in one process).

Shape notation: B*S = the rows of a layer's activations (batch x sequence),
H = hidden size, I = intermediate size, M = rows of a dense layer's input,
N = rows of logits, V = classes (the vocabulary).
"""

import math

import tensorflow.compat.v1 as tf

# Same epsilon as tf.contrib.layers.layer_norm, which Google's models used.
LAYER_NORM_EPSILON = 1e-12

# 2 z = x (_GELU_LINEAR + _GELU_CUBIC x^2), z the tanh GELU's argument.
_GELU_LINEAR = 2.0 * math.sqrt(2.0 / math.pi)
_GELU_CUBIC = _GELU_LINEAR * 0.044715
# Gradient registry names, one per loaded copy of this module.
_GELU_GRADIENT = __name__ + "/tanh_gelu"
_LAYER_NORM_GRADIENT = __name__ + "/layer_norm"
_DENSE_GRADIENT = __name__ + "/dense"
_CROSS_ENTROPY_GRADIENT = __name__ + "/sparse_softmax_cross_entropy"


def with_gradient(gradient_name, output, saved):
  """`output` whose gradient is the function registered as `gradient_name`.

  What tf.custom_gradient does, without its by-products: custom_gradient
  also runs an Identity of each result through its search for variables,
  and those ops are left in the graph with no reader. Here `output` and the
  forward tensors the gradient reuses go through one IdentityN whose
  gradient is overridden; the gradient gets `saved` back as the op's inputs
  1.. and returns None for `output` so that autodiff does not also
  differentiate the forward ops.

  Args:
    gradient_name: a name registered with tf.RegisterGradient.
    output: the forward result.
    saved: Tensors the gradient needs; the first ones are the inputs that
      receive gradients, in the order the gradient function returns them.

  Returns:
    A Tensor equal to `output`.
  """
  graph = tf.get_default_graph()
  with graph.gradient_override_map({"IdentityN": gradient_name}):
    return tf.identity_n([output] + list(saved))[0]


def tanh_gelu(x):
  """BERT's GELU, 0.5 x (1 + tanh(z)), computed as x sigmoid(2 z).

  Here z = sqrt(2 / pi) (x + 0.044715 x^3). The same function, since
  0.5 (1 + tanh(z)) = sigmoid(2 z), with 2 z = x (a + b x^2): 6 elementwise
  ops where the tanh form takes 9 (benchmarks/gelu_speed.py); the gradient
  is `_tanh_gelu_gradient`.

  Args:
    x: float Tensor.

  Returns:
    `x` with the activation applied.
  """
  square = x * x
  cdf = tf.sigmoid(x * (_GELU_LINEAR + _GELU_CUBIC * square))
  return with_gradient(_GELU_GRADIENT, x * cdf, [x, square, cdf])


@tf.RegisterGradient(_GELU_GRADIENT)
def _tanh_gelu_gradient(op, dy, *unused_dsaved):
  """`tanh_gelu`'s derivative written out.

  With s = sigmoid(u) the forward's cdf and u = x (a + b x^2), the gradient
  is dy * (s + x s (1 - s) (a + 3 b x^2)), reusing the forward's x * x and
  s: 8 elementwise ops on the [B*S, I] activations (each a full pass over
  memory on a CPU, a kernel launch on a GPU).
  """
  _, x, square, cdf = op.inputs
  slope = _GELU_LINEAR + (3.0 * _GELU_CUBIC) * square
  dx = dy * (cdf + x * (cdf - cdf * cdf) * slope)
  return [None, dx, None, None]


def normalize(x, beta, gamma):
  """Layer normalization's arithmetic on [..., H], as contrib computes it.

  contrib's moments, then batch_normalization (so outputs match Google's
  checkpoints' training code exactly), with the gradient
  `_layer_norm_gradient`.

  Args:
    x: float Tensor [..., H].
    beta: float Tensor [H], the shift.
    gamma: float Tensor [H], the scale.

  Returns:
    The normalized Tensor, same shape as `x`.
  """
  mean, variance = tf.nn.moments(x, [x.shape.ndims - 1], keep_dims=True)
  y = tf.nn.batch_normalization(x, mean, variance, offset=beta, scale=gamma,
                                variance_epsilon=LAYER_NORM_EPSILON)
  return with_gradient(_LAYER_NORM_GRADIENT, y,
                       [x, beta, gamma, mean, variance])


@tf.RegisterGradient(_LAYER_NORM_GRADIENT)
def _layer_norm_gradient(op, dy, *unused_dsaved):
  """The closed form of layer norm's gradient.

  With xhat = (x - mean) * r, r = 1 / sqrt(variance + epsilon) and
  g = dy * gamma:

    dx = r * (g - mean_H(g) - xhat * mean_H(g * xhat))
    dgamma = sum(dy * xhat),  dbeta = sum(dy)  (over every axis but H)

  Forward and backward run 18 ops (after grappler) where autodiff of
  moments and batch_normalization runs 29: its Tile/Reshape broadcasts and
  the variance's path back through the mean become two row means.
  """
  _, x, _, gamma, mean, variance = op.inputs
  axis = x.shape.ndims - 1
  rstd = tf.rsqrt(variance + LAYER_NORM_EPSILON)
  xhat = (x - mean) * rstd
  batch_axes = list(range(axis))
  dbeta = tf.reduce_sum(dy, batch_axes)
  dgamma = tf.reduce_sum(dy * xhat, batch_axes)
  g = dy * gamma
  dx = rstd * (g - tf.reduce_mean(g, axis, keepdims=True) -
               xhat * tf.reduce_mean(g * xhat, axis, keepdims=True))
  return [None, dx, dbeta, dgamma, None, None]


def blocked_dense_gradient():
  """Context in which a dense layer's MatMul gets `_dense_gradient`."""
  return tf.get_default_graph().gradient_override_map(
      {"MatMul": _DENSE_GRADIENT})


# The weight gradient of a layer whose narrow side is at most
# _NARROW_SIDE and whose wide side is at least _WIDE_RATIO times that is
# computed in WEIGHT_GRADIENT_BLOCK_WIDTH-wide blocks of the wide side.
_NARROW_SIDE = 256
_WIDE_RATIO = 4
WEIGHT_GRADIENT_BLOCK_WIDTH = 128


@tf.RegisterGradient(_DENSE_GRADIENT)
def _dense_gradient(op, dy):
  """A dense layer's x [M, in] @ w [in, out] gradients, dw in blocks.

  dx = dy w^T as autodiff computes it. dw = x^T dy is the same sum, but for
  BERT-mini's feed-forward layers (in x out = 256 x 1024 or 1024 x 256,
  M = B*S = 4096) it is computed in 128-column blocks of the wide side and
  concatenated: TensorFlow 2.15's oneDNN GEMM on an AVX2 CPU runs that one
  long-K product at 65-80 GFLOP/s and the blocks at 99-117 (NumPy's
  a.T @ b: 121); a training step is 3-5 % faster. At BERT-base's shapes
  (768 x 3072) the single product is the faster one (158-169 against
  117-124), so layers with a narrow side above 256 keep it. Each block is
  an exact slice of the product, so only float32 rounding may differ
  (benchmarks/weight_gradient_gemm.py times both forms on any CPU).

  Args:
    op: the forward MatMul (no transposes).
    dy: float Tensor [M, out].

  Returns:
    [dx [M, in], dw [in, out]].
  """
  x, w = op.inputs
  dx = tf.matmul(dy, w, transpose_b=True)
  fan_in, fan_out = w.shape.as_list()
  narrow, wide = min(fan_in, fan_out), max(fan_in, fan_out)
  if narrow > _NARROW_SIDE or wide < _WIDE_RATIO * narrow:
    return [dx, tf.matmul(x, dy, transpose_a=True)]
  return [dx, blocked_weight_gradient(x, dy, WEIGHT_GRADIENT_BLOCK_WIDTH)]


def blocked_weight_gradient(x, dy, width):
  """x^T dy computed in `width`-column blocks of its wider side.

  Args:
    x: float Tensor [M, in], a dense layer's input.
    dy: float Tensor [M, out], the gradient of its output.
    width: columns per block (the last block takes the remainder).

  Returns:
    float Tensor [in, out], equal to tf.matmul(x, dy, transpose_a=True).
  """
  fan_in, fan_out = x.shape.as_list()[1], dy.shape.as_list()[1]
  wide = max(fan_in, fan_out)
  blocks = [width] * (wide // width)
  if wide % width:
    blocks.append(wide % width)
  if fan_out >= fan_in:
    return tf.concat([tf.matmul(x, part, transpose_a=True)
                      for part in tf.split(dy, blocks, axis=1)], axis=1)
  return tf.concat([tf.matmul(part, dy, transpose_a=True)
                    for part in tf.split(x, blocks, axis=1)], axis=0)


def sparse_softmax_cross_entropy(labels, logits):
  """-log softmax(logits)[label] of each row, from oneDNN's softmax.

  The value and gradient of tf.nn.sparse_softmax_cross_entropy_with_logits,
  computed another way: that fused op makes its passes over [N, V] with
  Eigen on one core, 80 ms forward and backward for the masked-LM head's
  [640, 30522] logits (BERT-mini, batch 32) on a 2-core AVX2 CPU, where this
  takes 26. (A BERT-mini step gains 1-2 %, BERT-tiny's 5 %: other ops used
  the second core while the fused op ran.)

  The softmax comes from oneDNN. Its largest probability is
  exp(0) / sum_j exp(l_j - max l), so log-sum-exp = max l - log(max
  probability); that probability is at least 1 / V, so its log cannot
  underflow where log(probability of the label) could. The gradient,
  (softmax - onehot(label)) * dloss, reuses the forward's probabilities.
  Under the bfloat16 rewrite the softmax, like the logits it reads, is
  computed in bfloat16 (the fused op, on the rewrite's deny list, would be
  float32). In a check (640 rows, 3000 classes) that moved the mean loss by
  3e-4 relative from the fused op's; computing the logits in bfloat16 had
  moved it by 1.4e-3 from float32's.

  Args:
    labels: int32 or int64 Tensor [N], each in [0, V).
    logits: float Tensor [N, V].

  Returns:
    float Tensor [N], the loss of each row.
  """
  probs = tf.nn.softmax(logits)
  log_sum_exp = (tf.reduce_max(logits, axis=-1) -
                 tf.log(tf.reduce_max(probs, axis=-1)))
  loss = log_sum_exp - tf.gather(logits, labels, batch_dims=1)
  return with_gradient(_CROSS_ENTROPY_GRADIENT, loss,
                       [logits, probs, labels])


@tf.RegisterGradient(_CROSS_ENTROPY_GRADIENT)
def _sparse_softmax_cross_entropy_gradient(op, dloss, *unused_dsaved):
  """(softmax - onehot(label)) * dloss of `sparse_softmax_cross_entropy`."""
  _, _, probs, labels = op.inputs
  rows = tf.range(tf.shape(labels, out_type=labels.dtype)[0])
  label_cells = tf.stack([rows, labels], axis=1)
  dlogits = tf.tensor_scatter_nd_sub(probs * dloss[:, None], label_cells,
                                     dloss)
  return [None, dlogits, None, None]
