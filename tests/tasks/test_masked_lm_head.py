"""The masked-LM head in training runs on the weighted predictions alone and
gives the loss and every gradient of the head run on all B*P slots."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.tasks.pretraining import task as pretraining
import modeling
from conftest import TINY_CONFIG

BATCH, SEQ_LENGTH, SLOTS = 4, 16, 6


def features_with_empty_slots(rng):
  """Rows with 6, 4, 1 and 3 of their 6 slots used; the empty slots hold
  positions and labels that would change the loss were they counted."""
  used = [6, 4, 1, 3]
  weights = np.array([[1.0] * n + [0.0] * (SLOTS - n) for n in used],
                     np.float32)
  return {
      "input_ids": rng.randint(5, TINY_CONFIG["vocab_size"],
                               (BATCH, SEQ_LENGTH)).astype(np.int32),
      "input_mask": np.ones((BATCH, SEQ_LENGTH), np.int32),
      "segment_ids": np.zeros((BATCH, SEQ_LENGTH), np.int32),
      "masked_lm_positions": rng.randint(1, SEQ_LENGTH,
                                         (BATCH, SLOTS)).astype(np.int32),
      "masked_lm_ids": rng.randint(5, TINY_CONFIG["vocab_size"],
                                   (BATCH, SLOTS)).astype(np.int32),
      "masked_lm_weights": weights,
  }


def head_outputs(features, weighted_only):
  """(loss, per_example_loss, log_probs, gradients) of one fresh graph with
  the same initial weights."""
  with tf.Graph().as_default():
    tf.set_random_seed(7)
    config = modeling.BertConfig.from_dict(TINY_CONFIG)
    model = modeling.BertModel(
        config=config, is_training=False,
        input_ids=tf.constant(features["input_ids"]),
        input_mask=tf.constant(features["input_mask"]),
        token_type_ids=tf.constant(features["segment_ids"]), scope="bert")
    loss, per_example, log_probs = pretraining.get_masked_lm_output(
        config, model.get_sequence_output(), model.get_embedding_table(),
        tf.constant(features["masked_lm_positions"]),
        tf.constant(features["masked_lm_ids"]),
        tf.constant(features["masked_lm_weights"]),
        weighted_only=weighted_only)
    # The pooler gets none: the masked LM does not use it.
    gradients = [tf.convert_to_tensor(g) for g in
                 tf.gradients(loss, tf.trainable_variables()) if g is not None]
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      return session.run([loss, per_example, log_probs, gradients])


def test_weighted_only_head_gives_the_full_heads_loss_and_gradients():
  features = features_with_empty_slots(np.random.RandomState(3))
  full = head_outputs(features, weighted_only=False)
  kept = head_outputs(features, weighted_only=True)
  used = features["masked_lm_weights"].reshape(-1) > 0
  assert kept[1].shape == (14,) and full[1].shape == (BATCH * SLOTS,)
  assert kept[2].shape == (14, TINY_CONFIG["vocab_size"])
  assert kept[0] == pytest.approx(full[0], rel=1e-6)
  np.testing.assert_allclose(kept[1], full[1][used], rtol=1e-6)
  np.testing.assert_allclose(kept[2], full[2][used], rtol=1e-6, atol=1e-6)
  assert len(kept[3]) == len(full[3]) > 0
  for got, expected in zip(kept[3], full[3]):
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-7)
  # The empty slots would matter if counted: the unweighted mean differs.
  assert full[1].mean() != pytest.approx(full[0], rel=1e-3)


@pytest.mark.parametrize("distribution", ["truncated_normal", "normal"])
def test_init_distribution_reaches_the_variables_training_creates(
    distribution):
  """--init_distribution: the first micro-batch, which creates the
  variables, draws them from upstream's truncated normal (nothing past two
  standard deviations, spread 0.88 of initializer_range) or from Hugging
  Face's untruncated one."""
  config = modeling.BertConfig.from_dict(
      dict(TINY_CONFIG, hidden_size=64, intermediate_size=256,
           num_attention_heads=4))
  features = features_with_empty_slots(np.random.RandomState(5))
  features["next_sentence_labels"] = np.zeros((BATCH, 1), np.int32)
  with tf.Graph().as_default():
    tf.set_random_seed(3)
    (loss_fn,) = pretraining.micro_batch_loss_fns(
        config, {k: tf.constant(v) for k, v in features.items()}, 1,
        init_distribution=distribution)
    loss_fn()
    kernels = [v for v in tf.trainable_variables()
               if v.op.name.endswith("intermediate/dense/kernel")]
    with tf.Session() as session:
      session.run(tf.global_variables_initializer())
      weights = np.concatenate([w.ravel() for w in session.run(kernels)])
  assert weights.size == 2 * 64 * 256
  beyond = np.mean(np.abs(weights) > 2 * 0.02)
  if distribution == "normal":
    assert np.std(weights) == pytest.approx(0.02, rel=0.03)
    assert beyond == pytest.approx(0.0455, abs=0.01)
  else:
    assert np.std(weights) == pytest.approx(0.0176, rel=0.03)
    assert beyond == 0.0
  # Outside the run, upstream's draw again.
  assert isinstance(modeling.create_initializer(0.02),
                    tf.truncated_normal_initializer)
