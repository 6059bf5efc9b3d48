"""Tests of modeling.py: shapes, variable names, numerics, configs, errors."""

import glob
import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit import kernels
from bertkit.common import errors
import modeling
from conftest import reachable_ops
from conftest import REPO_ROOT

pytestmark = pytest.mark.filterwarnings(
    "ignore:`tf.layers.dense` is deprecated")

CONFIG_DIR = os.path.join(REPO_ROOT, "configs")

# The small config of the variable-name checks: L=2, H=128, I=512.
NAMES_CONFIG = dict(vocab_size=99, hidden_size=128, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=512,
                    type_vocab_size=2, max_position_embeddings=64)

# Key order of the bert_config.json in Google's small-model downloads; the
# BERT-Base/Large downloads sort their keys.
SMALL_MODEL_KEY_ORDER = [
    "hidden_size", "hidden_act", "initializer_range", "vocab_size",
    "hidden_dropout_prob", "num_attention_heads", "type_vocab_size",
    "max_position_embeddings", "num_hidden_layers", "intermediate_size",
    "attention_probs_dropout_prob"]
ALIASES = {"bert_tiny": (2, 128), "bert_mini": (4, 256),
           "bert_small": (4, 512), "bert_medium": (8, 512),
           "bert_base": (12, 768), "bert_large": (24, 1024)}
SORTED_KEY_FILES = {"bert_base", "bert_large", "L24_H1024"}


def expected_bert_variables(num_layers, hidden, intermediate, vocab,
                            type_vocab, max_positions):
  """{name: shape} of every variable BertModel creates, with upstream's names and shapes."""
  h, i = hidden, intermediate
  variables = {
      "bert/embeddings/word_embeddings": [vocab, h],
      "bert/embeddings/token_type_embeddings": [type_vocab, h],
      "bert/embeddings/position_embeddings": [max_positions, h],
      "bert/embeddings/LayerNorm/beta": [h],
      "bert/embeddings/LayerNorm/gamma": [h],
      "bert/pooler/dense/kernel": [h, h],
      "bert/pooler/dense/bias": [h],
  }
  for k in range(num_layers):
    prefix = "bert/encoder/layer_%d/" % k
    for dense in ("attention/self/query", "attention/self/key",
                  "attention/self/value", "attention/output/dense"):
      variables[prefix + dense + "/kernel"] = [h, h]
      variables[prefix + dense + "/bias"] = [h]
    variables[prefix + "intermediate/dense/kernel"] = [h, i]
    variables[prefix + "intermediate/dense/bias"] = [i]
    variables[prefix + "output/dense/kernel"] = [i, h]
    variables[prefix + "output/dense/bias"] = [h]
    for norm in ("attention/output/LayerNorm", "output/LayerNorm"):
      variables[prefix + norm + "/beta"] = [h]
      variables[prefix + norm + "/gamma"] = [h]
  return variables


def parameter_count(config):
  """BertModel's parameter count, from the variable list above."""
  variables = expected_bert_variables(
      config.num_hidden_layers, config.hidden_size, config.intermediate_size,
      config.vocab_size, config.type_vocab_size,
      config.max_position_embeddings)
  return sum(int(np.prod(shape)) for shape in variables.values())


def variable_shapes(variables):
  return {v.op.name: v.shape.as_list() for v in variables}


def randomize_variables(sess, scale=0.2, seed=0):
  """Loads random values into every variable so that no weight is trivial."""
  rng = np.random.RandomState(seed)
  for var in tf.global_variables():
    shape = var.shape.as_list()
    var.load((rng.standard_normal(shape) * scale).astype(np.float32), sess)


def ids(rng, shape, limit):
  return tf.constant(rng.randint(0, limit, size=shape), dtype=tf.int32)


# --- BertModel: shapes, graph, names -----------------------------------------


def test_output_shapes_and_no_dangling_ops(graph):
  # Upstream's tester: B=13, S=7, H=32, L=5, N=4, I=37, 16 token types.
  batch, seq, hidden, layers = 13, 7, 32, 5
  rng = np.random.RandomState(1)
  config = modeling.BertConfig(vocab_size=99, hidden_size=hidden,
                               num_hidden_layers=layers, num_attention_heads=4,
                               intermediate_size=37)
  model = modeling.BertModel(
      config=config, is_training=True,
      input_ids=ids(rng, [batch, seq], 99),
      input_mask=ids(rng, [batch, seq], 2),
      token_type_ids=ids(rng, [batch, seq], 16))
  outputs = {
      "embedding_output": model.get_embedding_output(),
      "sequence_output": model.get_sequence_output(),
      "pooled_output": model.get_pooled_output(),
      "all_encoder_layers": model.get_all_encoder_layers(),
  }
  init_op = tf.group(tf.global_variables_initializer(),
                     tf.local_variables_initializer())
  with tf.Session(graph=graph) as sess:
    sess.run(init_op)
    result = sess.run(outputs)

  assert result["embedding_output"].shape == (batch, seq, hidden)
  assert result["sequence_output"].shape == (batch, seq, hidden)
  assert result["pooled_output"].shape == (batch, hidden)
  assert [x.shape for x in result["all_encoder_layers"]] == (
      [(batch, seq, hidden)] * layers)
  np.testing.assert_array_equal(result["all_encoder_layers"][-1],
                                result["sequence_output"])

  fetches = [init_op] + list(outputs.values())[:3] + outputs[
      "all_encoder_layers"]
  reachable = reachable_ops(fetches)
  dangling = [op.name for op in graph.get_operations()
              if op not in reachable]
  assert dangling == []


def test_inference_graph_has_no_dropout(graph):
  rng = np.random.RandomState(2)
  config = modeling.BertConfig(**NAMES_CONFIG)
  modeling.BertModel(config, is_training=False,
                     input_ids=ids(rng, [2, 5], 99))
  op_types = {op.type for op in graph.get_operations()}
  assert not op_types & {"RandomUniform", "RandomUniformInt"}


def test_training_graph_has_dropout(graph):
  rng = np.random.RandomState(2)
  config = modeling.BertConfig(**NAMES_CONFIG)
  modeling.BertModel(config, is_training=True, input_ids=ids(rng, [2, 5], 99))
  # Embeddings, then per layer: attention probs, attention output, output.
  random_ops = [op for op in graph.get_operations()
                if op.type == "RandomUniform"]
  assert len(random_ops) == 1 + 3 * NAMES_CONFIG["num_hidden_layers"]


def test_variable_names_and_shapes_match_google_checkpoints(graph):
  config = modeling.BertConfig(**NAMES_CONFIG)
  modeling.BertModel(config, is_training=True,
                     input_ids=tf.zeros([2, 8], dtype=tf.int32))
  expected = expected_bert_variables(2, 128, 512, 99, 2, 64)
  assert variable_shapes(tf.trainable_variables()) == expected
  assert variable_shapes(tf.global_variables()) == expected


def test_custom_scope_replaces_bert(graph):
  config = modeling.BertConfig(**NAMES_CONFIG)
  modeling.BertModel(config, is_training=False,
                     input_ids=tf.zeros([1, 4], dtype=tf.int32),
                     scope="teacher")
  names = set(variable_shapes(tf.trainable_variables()))
  expected = {"teacher" + name[len("bert"):]
              for name in expected_bert_variables(2, 128, 512, 99, 2, 64)}
  assert names == expected


# --- Numerics: the whole model against a NumPy implementation ---------------


def np_layer_norm(x, beta, gamma):
  mean = x.mean(axis=-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + 1e-12) * gamma + beta


def np_gelu(x):
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) *
                                  (x + 0.044715 * x ** 3)))


def np_softmax(x):
  e = np.exp(x - x.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def np_bert(v, input_ids, input_mask, token_type_ids, num_layers, num_heads):
  """A float64 NumPy BERT forward pass; returns (sequence, pooled)."""
  batch, seq = input_ids.shape
  emb = "bert/embeddings/"
  x = (v[emb + "word_embeddings"][input_ids] +
       v[emb + "token_type_embeddings"][token_type_ids] +
       v[emb + "position_embeddings"][:seq])
  x = np_layer_norm(x, v[emb + "LayerNorm/beta"], v[emb + "LayerNorm/gamma"])
  hidden = x.shape[-1]
  head = hidden // num_heads
  adder = (1.0 - input_mask[:, None, None, :]) * -10000.0

  def dense(t, name):
    return t @ v[name + "/kernel"] + v[name + "/bias"]

  def heads(t):
    return t.reshape(batch, seq, num_heads, head).transpose(0, 2, 1, 3)

  for k in range(num_layers):
    p = "bert/encoder/layer_%d/" % k
    q = heads(dense(x, p + "attention/self/query"))
    key = heads(dense(x, p + "attention/self/key"))
    val = heads(dense(x, p + "attention/self/value"))
    probs = np_softmax(q @ key.transpose(0, 1, 3, 2) / math.sqrt(head) + adder)
    context = (probs @ val).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    a = np_layer_norm(dense(context, p + "attention/output/dense") + x,
                      v[p + "attention/output/LayerNorm/beta"],
                      v[p + "attention/output/LayerNorm/gamma"])
    inter = np_gelu(dense(a, p + "intermediate/dense"))
    x = np_layer_norm(dense(inter, p + "output/dense") + a,
                      v[p + "output/LayerNorm/beta"],
                      v[p + "output/LayerNorm/gamma"])
  pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
  return x, pooled


def test_model_matches_numpy_reference_and_ignores_padding(graph):
  # D = 8: 1/sqrt(D) is not a power of two, so query scaling is really tested.
  layers, heads = 2, 4
  config = modeling.BertConfig(vocab_size=99, hidden_size=32,
                               num_hidden_layers=layers,
                               num_attention_heads=heads, intermediate_size=37,
                               type_vocab_size=3, max_position_embeddings=16)
  rng = np.random.RandomState(3)
  input_ids = rng.randint(0, 99, size=(3, 6))
  input_mask = np.array([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
  token_type_ids = rng.randint(0, 3, size=(3, 6))
  ids_ph = tf.placeholder(tf.int32, [3, 6])
  model = modeling.BertModel(config, is_training=False, input_ids=ids_ph,
                             input_mask=tf.constant(input_mask, tf.int32),
                             token_type_ids=tf.constant(token_type_ids,
                                                        tf.int32))
  outputs = [model.get_sequence_output(), model.get_pooled_output()]
  with tf.Session(graph=graph) as sess:
    randomize_variables(sess)
    values = {v.op.name: sess.run(v).astype(np.float64)
              for v in tf.global_variables()}
    sequence, pooled = sess.run(outputs, {ids_ph: input_ids})
    # Other tokens at padded positions must not change any real position.
    other_ids = np.where(input_mask == 1, input_ids, (input_ids + 7) % 99)
    sequence2, pooled2 = sess.run(outputs, {ids_ph: other_ids})

  ref_sequence, ref_pooled = np_bert(values, input_ids,
                                     input_mask.astype(np.float64),
                                     token_type_ids, layers, heads)
  np.testing.assert_allclose(sequence, ref_sequence, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(pooled, ref_pooled, rtol=1e-4, atol=1e-4)
  real = input_mask == 1
  np.testing.assert_allclose(sequence2[real], sequence[real], atol=1e-6)
  np.testing.assert_allclose(pooled2, pooled, atol=1e-6)
  assert not np.allclose(sequence2[~real], sequence[~real])


def test_one_hot_embeddings_equal_gather(graph):
  rng = np.random.RandomState(4)
  input_ids = ids(rng, [3, 5], 20)
  with tf.variable_scope("emb"):
    gathered, table = modeling.embedding_lookup(input_ids, 20, 8)
  with tf.variable_scope("emb", reuse=True):
    one_hot, _ = modeling.embedding_lookup(input_ids, 20, 8,
                                           use_one_hot_embeddings=True)
  with tf.Session(graph=graph) as sess:
    sess.run(tf.global_variables_initializer())
    a, b, t, i = sess.run([gathered, one_hot, table, input_ids])
  assert a.shape == (3, 5, 8)
  np.testing.assert_array_equal(a, t[i])
  np.testing.assert_allclose(b, a, atol=1e-7)


def test_token_type_gradient_is_dense(graph):
  # A dense [T, H] gradient all-reduces cheaply; IndexedSlices would carry a
  # row per token.
  config = modeling.BertConfig(**NAMES_CONFIG)
  model = modeling.BertModel(config, is_training=False,
                             input_ids=tf.zeros([2, 8], dtype=tf.int32))
  table = [v for v in tf.trainable_variables()
           if v.op.name == "bert/embeddings/token_type_embeddings"]
  gradient, = tf.gradients(tf.reduce_sum(model.get_embedding_output()), table)
  assert isinstance(gradient, tf.Tensor)
  assert gradient.shape.as_list() == [2, 128]


def test_sequence_longer_than_positions_is_rejected(graph):
  config = modeling.BertConfig(**NAMES_CONFIG)
  with pytest.raises(ValueError, match="65.*64"):
    modeling.BertModel(config, is_training=False,
                       input_ids=tf.zeros([1, 65], dtype=tf.int32))


# --- Checkpoints --------------------------------------------------------------


def save_checkpoint(path, config):
  """Saves a randomized model (plus a head variable) and returns its values."""
  with tf.Graph().as_default():
    modeling.BertModel(config, is_training=False,
                       input_ids=tf.zeros([1, 4], dtype=tf.int32))
    tf.get_variable("cls/predictions/output_bias", [config.vocab_size])
    with tf.Session() as sess:
      randomize_variables(sess, seed=5)
      values = {v.op.name: sess.run(v) for v in tf.global_variables()}
      tf.train.Saver().save(sess, path)
  return values


def test_checkpoint_restores_through_assignment_map(graph, tmp_path):
  config = modeling.BertConfig(**NAMES_CONFIG)
  checkpoint = str(tmp_path / "model.ckpt")
  saved = save_checkpoint(checkpoint, config)

  modeling.BertModel(config, is_training=True,
                     input_ids=tf.zeros([2, 8], dtype=tf.int32))
  missing = tf.get_variable("bert/not_in_checkpoint", [3],
                            initializer=tf.ones_initializer())
  tvars = tf.trainable_variables()
  assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
      tvars, checkpoint)

  bert_names = set(expected_bert_variables(2, 128, 512, 99, 2, 64))
  assert set(assignment_map) == bert_names
  assert all(assignment_map[name] == name for name in bert_names)
  assert set(initialized) == bert_names | {n + ":0" for n in bert_names}
  assert missing.name not in initialized
  assert "bert/not_in_checkpoint" not in initialized

  tf.train.init_from_checkpoint(checkpoint, assignment_map)
  with tf.Session(graph=graph) as sess:
    sess.run(tf.global_variables_initializer())
    for var in tvars:
      if var is missing:
        np.testing.assert_array_equal(sess.run(var), np.ones(3))
      else:
        np.testing.assert_array_equal(sess.run(var), saved[var.op.name])


def test_checkpoint_of_another_shape_is_a_user_error(graph, tmp_path):
  checkpoint = str(tmp_path / "model.ckpt")
  save_checkpoint(checkpoint, modeling.BertConfig(**NAMES_CONFIG))
  other = dict(NAMES_CONFIG, vocab_size=98)
  modeling.BertModel(modeling.BertConfig(**other), is_training=False,
                     input_ids=tf.zeros([1, 4], dtype=tf.int32))
  with pytest.raises(errors.UserError) as e:
    modeling.get_assignment_map_from_checkpoint(tf.trainable_variables(),
                                                checkpoint)
  message = str(e.value)
  assert checkpoint in message
  assert "bert/embeddings/word_embeddings" in message
  assert "[99, 128]" in message and "[98, 128]" in message


def test_missing_checkpoint_is_a_user_error(graph, tmp_path):
  v = tf.get_variable("bert/x", [2])
  path = str(tmp_path / "nothing_here.ckpt")
  with pytest.raises(errors.UserError, match=re.escape(path)):
    modeling.get_assignment_map_from_checkpoint([v], path)


# --- Building blocks ----------------------------------------------------------


def test_gelu_is_the_tanh_approximation(graph):
  points = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0])
  with tf.Session(graph=graph) as sess:
    result = sess.run(modeling.gelu(tf.constant(points, tf.float32)))
  np.testing.assert_allclose(result, np_gelu(points), rtol=1e-6, atol=1e-6)
  exact = np.array([0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
                    for x in points])
  # The two GELUs differ by ~1e-4 around |x| = 1..3; float32 error is <1e-6.
  assert np.max(np.abs(result - exact)) > 1e-4
  assert result[3] == 0.0


def test_gelu_gradient_is_the_derivative_of_the_reference_formula(graph):
  # float64, so that 1e-6 tests the formula of the gradient, not rounding.
  x = tf.constant(np.linspace(-6.0, 6.0, 241), tf.float64)
  dy = tf.constant(np.random.RandomState(3).standard_normal(241), tf.float64)
  reference = 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * tf.pow(x, 3.0))))
  ours = modeling.gelu(x)
  with tf.Session(graph=graph) as sess:
    values = sess.run([ours, reference, tf.gradients(ours, x, dy)[0],
                       tf.gradients(reference, x, dy)[0]])
  np.testing.assert_allclose(values[0], values[1], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(values[2], values[3], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fan_in,fan_out,weight_matmuls", [
    (64, 384, 3),    # narrow input: dy split into blocks of 128 columns
    (300, 64, 3),    # narrow output: x split into 128 + 128 + 44 columns
    (64, 128, 1),    # wide side under 4x the narrow one: one product
    (320, 1280, 1),  # narrow side over 256: one product
])
def test_dense_gradient_equals_autodiff_of_a_plain_matmul(
    graph, fan_in, fan_out, weight_matmuls):
  rng = np.random.RandomState(8)
  x = tf.constant(rng.standard_normal((40, fan_in)), tf.float32)
  dy = tf.constant(rng.standard_normal((40, fan_out)), tf.float32)
  w = tf.constant(rng.standard_normal((fan_in, fan_out)), tf.float32)
  with kernels.blocked_dense_gradient():
    ours = tf.matmul(x, w)
  reference = tf.matmul(x, w)
  ours_grads = tf.gradients(ours, [x, w], dy)
  ops_before = len(graph.get_operations())
  reference_grads = tf.gradients(reference, [x, w], dy)
  ours_ops = graph.get_operations()[:ops_before]
  # Both forward products, our dx, then dw's products.
  assert sum(op.type == "MatMul" for op in ours_ops) == 3 + weight_matmuls
  with tf.Session(graph=graph) as sess:
    got, want = sess.run([ours_grads, reference_grads])
  for got_value, want_value in zip(got, want):
    assert got_value.shape == want_value.shape
    np.testing.assert_allclose(got_value, want_value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("label_dtype", [tf.int32, tf.int64])
def test_sparse_softmax_cross_entropy_equals_tensorflows_fused_op(
    graph, label_dtype):
  rng = np.random.RandomState(9)
  logits = rng.standard_normal((6, 50)) * 4.0
  labels = rng.randint(0, 50, size=6)
  # Row 1's label lies 200 below the row's largest logit: its softmax
  # probability underflows to 0 in float32, its loss (about 200) must not.
  labels[1] = 7
  logits[1, 7] = logits[1].max() - 200.0
  weights = tf.constant(rng.uniform(0.5, 2.0, size=6), tf.float32)
  logits = tf.constant(logits, tf.float32)
  labels = tf.constant(labels, label_dtype)
  ops_before = len(graph.get_operations())
  ours = kernels.sparse_softmax_cross_entropy(labels, logits)
  ours_gradient = tf.gradients(ours, logits, weights)[0]
  assert "SparseSoftmaxCrossEntropyWithLogits" not in {
      op.type for op in graph.get_operations()[ops_before:]}
  fused = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                         logits=logits)
  fused_gradient = tf.gradients(fused, logits, weights)[0]
  with tf.Session(graph=graph) as sess:
    got, want, got_gradient, want_gradient = sess.run(
        [ours, fused, ours_gradient, fused_gradient])
  assert want[1] > 190.0
  np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_allclose(got_gradient, want_gradient, rtol=1e-5,
                             atol=1e-6)


def test_init_distribution_belongs_to_the_graph_being_built():
  """The choice reaches the initializers of its own graph while the context
  is open: not those of another graph, and none after it closes."""
  with tf.Graph().as_default() as graph:
    with modeling.init_distribution("normal"):
      assert isinstance(modeling.create_initializer(),
                        tf.random_normal_initializer)
      with modeling.init_distribution("truncated_normal"):
        assert isinstance(modeling.create_initializer(),
                          tf.truncated_normal_initializer)
      assert isinstance(modeling.create_initializer(),
                        tf.random_normal_initializer)
      with tf.Graph().as_default():
        assert isinstance(modeling.create_initializer(),
                          tf.truncated_normal_initializer)
    assert isinstance(modeling.create_initializer(),
                      tf.truncated_normal_initializer)
    assert graph.get_all_collection_keys() == []


def test_get_activation():
  assert modeling.get_activation("gelu") is modeling.gelu
  assert modeling.get_activation("GELU") is modeling.gelu
  assert modeling.get_activation("relu") is tf.nn.relu
  assert modeling.get_activation("tanh") is tf.tanh
  assert modeling.get_activation("linear") is None
  assert modeling.get_activation("") is None
  assert modeling.get_activation(tf.sigmoid) is tf.sigmoid
  with pytest.raises(ValueError, match="swish"):
    modeling.get_activation("swish")


def test_layer_norm_matches_numpy(graph):
  rng = np.random.RandomState(6)
  x = rng.standard_normal((4, 3, 16)) * 5.0 + 2.0
  # Rows of amplitude 1e-6 have variance 1e-12, the size of epsilon: the
  # result there depends on epsilon being exactly 1e-12.
  x[0, 0] = np.tile([1e-6, -1e-6], 8)
  with tf.variable_scope("block"):
    y = modeling.layer_norm(tf.constant(x, tf.float32))
  assert variable_shapes(tf.global_variables()) == {
      "block/LayerNorm/beta": [16], "block/LayerNorm/gamma": [16]}
  with tf.Session(graph=graph) as sess:
    sess.run(tf.global_variables_initializer())
    assert sess.run(y)[0, 0, 0] == pytest.approx(1.0 / math.sqrt(2.0),
                                                 rel=1e-3)
    randomize_variables(sess, scale=1.0)
    beta, gamma, result = sess.run(tf.global_variables() + [y])
  np.testing.assert_allclose(result, np_layer_norm(x, beta, gamma),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,tolerance", [(tf.float64, 1e-9),
                                             (tf.float32, 1e-5)])
def test_layer_norm_gradients_equal_autodiff_of_the_reference(
    graph, dtype, tolerance):
  rng = np.random.RandomState(7)
  x = tf.constant(rng.standard_normal((3, 5, 16)) * 3.0 + 1.0, dtype)
  dy = tf.constant(rng.standard_normal((3, 5, 16)), dtype)
  beta = tf.constant(rng.standard_normal(16), dtype)
  gamma = tf.constant(rng.standard_normal(16), dtype)
  ours = kernels.normalize(x, beta, gamma)
  mean, variance = tf.nn.moments(x, [2], keep_dims=True)
  reference = tf.nn.batch_normalization(x, mean, variance, beta, gamma,
                                        kernels.LAYER_NORM_EPSILON)
  with tf.Session(graph=graph) as sess:
    got, want = sess.run([[ours] + tf.gradients(ours, [x, beta, gamma], dy),
                          [reference] + tf.gradients(reference,
                                                     [x, beta, gamma], dy)])
  for got_value, want_value in zip(got, want):
    np.testing.assert_allclose(got_value, want_value, rtol=tolerance,
                               atol=tolerance)


def test_layer_norm_scopes_are_uniquified_like_contrib(graph):
  x = tf.zeros([2, 4])
  modeling.layer_norm(x)
  modeling.layer_norm(x)
  modeling.layer_norm(x, name="named")
  assert set(variable_shapes(tf.global_variables())) == {
      "LayerNorm/beta", "LayerNorm/gamma", "LayerNorm_1/beta",
      "LayerNorm_1/gamma", "named/beta", "named/gamma"}


def test_attention_mask_from_input_mask(graph):
  input_mask = np.array([[1, 1, 0], [1, 0, 0]])
  mask = modeling.create_attention_mask_from_input_mask(
      tf.zeros([2, 4, 5]), tf.constant(input_mask, tf.int32))
  with tf.Session(graph=graph) as sess:
    result = sess.run(mask)
  assert result.dtype == np.float32
  expected = np.array([[[1, 1, 0]] * 4, [[1, 0, 0]] * 4], dtype=np.float32)
  np.testing.assert_array_equal(result, expected)


def test_dropout_zero_adds_no_op(graph):
  x = tf.ones([3])
  assert modeling.dropout(x, 0.0) is x
  assert modeling.dropout(x, None) is x


def test_get_shape_list_mixes_static_and_dynamic(graph):
  x = tf.placeholder(tf.float32, [None, 7, 3])
  shape = modeling.get_shape_list(x, expected_rank=3)
  assert isinstance(shape[0], tf.Tensor) and shape[1:] == [7, 3]
  with pytest.raises(ValueError, match="actual rank `3`"):
    modeling.get_shape_list(x, expected_rank=[2, 4])


def test_reshape_to_and_from_matrix(graph):
  x = tf.zeros([2, 3, 4])
  matrix = modeling.reshape_to_matrix(x)
  assert matrix.shape.as_list() == [6, 4]
  assert modeling.reshape_from_matrix(matrix, [2, 3, 4]).shape.as_list() == [
      2, 3, 4]
  assert modeling.reshape_to_matrix(matrix) is matrix


# --- BertConfig ---------------------------------------------------------------


def test_config_to_json_string():
  config = modeling.BertConfig(vocab_size=99, hidden_size=37)
  obj = json.loads(config.to_json_string())
  assert obj["vocab_size"] == 99
  assert obj["hidden_size"] == 37
  assert list(obj) == sorted(obj)


def test_config_json_round_trip(tmp_path):
  config = modeling.BertConfig(**NAMES_CONFIG)
  config.directionality = "bidi"  # Extra keys survive, as upstream.
  path = tmp_path / "bert_config.json"
  path.write_text(config.to_json_string())
  loaded = modeling.BertConfig.from_json_file(str(path))
  assert loaded.to_dict() == config.to_dict()
  assert modeling.BertConfig.from_dict(
      json.loads(config.to_json_string())).to_dict() == config.to_dict()


def write_config(tmp_path, text):
  path = tmp_path / "bad_config.json"
  path.write_text(text)
  return str(path)


def valid_config_dict():
  return json.loads(modeling.BertConfig(**NAMES_CONFIG).to_json_string())


def test_missing_config_file_is_a_user_error(tmp_path):
  path = str(tmp_path / "no_such_config.json")
  with pytest.raises(errors.UserError, match=re.escape(path)):
    modeling.BertConfig.from_json_file(path)


@pytest.mark.parametrize("text", ["{\"hidden_size\": 128,", "", "[1, 2]",
                                  "null"])
def test_config_that_is_not_a_json_object_is_a_user_error(tmp_path, text):
  path = write_config(tmp_path, text)
  with pytest.raises(errors.UserError, match=re.escape(path)):
    modeling.BertConfig.from_json_file(path)


@pytest.mark.parametrize("field", modeling.REQUIRED_FIELDS)
def test_config_missing_a_required_field_is_a_user_error(tmp_path, field):
  obj = valid_config_dict()
  del obj[field]
  path = write_config(tmp_path, json.dumps(obj))
  with pytest.raises(errors.UserError) as e:
    modeling.BertConfig.from_json_file(path)
  assert path in str(e.value) and field in str(e.value)


@pytest.mark.parametrize("field,value", [
    ("hidden_size", "128"), ("num_hidden_layers", 2.0), ("vocab_size", True),
    ("intermediate_size", None), ("num_attention_heads", 0),
    ("max_position_embeddings", -1), ("type_vocab_size", [2]),
    ("hidden_dropout_prob", "0.1"), ("attention_probs_dropout_prob", 1.0),
    ("initializer_range", 0), ("hidden_act", "swish"), ("hidden_act", 1)])
def test_config_with_a_bad_value_is_a_user_error(tmp_path, field, value):
  obj = valid_config_dict()
  obj[field] = value
  path = write_config(tmp_path, json.dumps(obj))
  with pytest.raises(errors.UserError) as e:
    modeling.BertConfig.from_json_file(path)
  assert path in str(e.value) and field in str(e.value)


def test_hidden_size_not_a_multiple_of_heads_is_a_user_error(tmp_path):
  obj = dict(valid_config_dict(), hidden_size=100, num_attention_heads=3)
  path = write_config(tmp_path, json.dumps(obj))
  with pytest.raises(errors.UserError) as e:
    modeling.BertConfig.from_json_file(path)
  assert path in str(e.value)
  assert "100" in str(e.value) and "3" in str(e.value)


def test_check_seq_length_fits():
  config = modeling.BertConfig(**NAMES_CONFIG)
  modeling.check_seq_length_fits(config, 64)
  with pytest.raises(errors.UserError) as e:
    modeling.check_seq_length_fits(config, 65)
  message = str(e.value)
  assert "--max_seq_length" in message
  assert "65" in message and "64" in message


# --- configs/ -----------------------------------------------------------------


def config_files():
  return sorted(glob.glob(os.path.join(CONFIG_DIR, "*.json")))


def config_name(path):
  return os.path.basename(path)[:-len(".json")]


def test_config_files_are_the_documented_set():
  expected = {"L%d_H%d" % (l, h) for l in (2, 4, 6, 8, 10, 12)
              for h in (128, 256, 512, 768)}
  expected |= {"L24_H1024"} | set(ALIASES)
  assert {config_name(p) for p in config_files()} == expected


@pytest.mark.parametrize("path", config_files(), ids=config_name)
def test_config_file(path):
  config = modeling.BertConfig.from_json_file(path)
  name = config_name(path)
  match = re.match(r"L(\d+)_H(\d+)$", name)
  layers, hidden = ((int(match.group(1)), int(match.group(2))) if match
                    else ALIASES[name])
  assert config.num_hidden_layers == layers
  assert config.hidden_size == hidden
  heads = hidden // 64
  assert config.num_attention_heads == heads
  assert config.intermediate_size == 4 * hidden
  assert config.to_dict() == dict(
      vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
      num_attention_heads=heads, intermediate_size=4 * hidden,
      hidden_act="gelu", hidden_dropout_prob=0.1,
      attention_probs_dropout_prob=0.1, max_position_embeddings=512,
      type_vocab_size=2, initializer_range=0.02)
  with open(path) as f:
    keys = list(json.load(f))
  if name in SORTED_KEY_FILES:
    assert keys == sorted(keys)
  else:
    assert keys == SMALL_MODEL_KEY_ORDER


@pytest.mark.parametrize("name", ["bert_tiny", "bert_base"])
def test_parameter_count_formula_matches_the_graph(graph, name):
  config = modeling.BertConfig.from_json_file(
      os.path.join(CONFIG_DIR, name + ".json"))
  modeling.BertModel(config, is_training=False,
                     input_ids=tf.zeros([1, 8], dtype=tf.int32))
  count = sum(int(np.prod(v.shape.as_list())) for v in tf.trainable_variables())
  assert count == parameter_count(config)
  if name == "bert_base":
    # 23,837,184 embeddings + 12 x 7,087,872 layers + 590,592 pooler.
    assert count == 109482240


def test_readme_table_matches_the_configs():
  with open(os.path.join(CONFIG_DIR, "README.md")) as f:
    rows = re.findall(
        r"^\| `configs/(\w+)\.json` \|[^|]*\| (\d+) \| (\d+) \| (\d+) \| "
        r"(\d+) \| ([\d,]+) \| ([\d,]+) \|$", f.read(), flags=re.M)
  assert sorted(row[0] for row in rows) == sorted(
      config_name(p) for p in config_files())
  for name, l, h, a, i, total, embeddings in rows:
    config = modeling.BertConfig.from_json_file(
        os.path.join(CONFIG_DIR, name + ".json"))
    assert [int(l), int(h), int(a), int(i)] == [
        config.num_hidden_layers, config.hidden_size,
        config.num_attention_heads, config.intermediate_size]
    assert int(total.replace(",", "")) == parameter_count(config)
    h = config.hidden_size
    assert int(embeddings.replace(",", "")) == (30522 + 512 + 2) * h + 2 * h
