"""Packed rows compute exactly what their sequences compute unpacked (fp32,
dropout 0): per-token outputs, pooled [CLS], per-sequence losses, the batch
losses and every gradient; and a token's output does not depend on the other
sequences of its row (no cross-contamination)."""

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.data import packing
from bertkit.tasks.pretraining import task as pretraining
import modeling
from conftest import TINY_CONFIG

SEQ_LENGTH = 32
PER_PACK = 3
PREDICTIONS_PER_SEQ = 4
MASK_WIDTH = packing.masked_positions_per_row(SEQ_LENGTH, PREDICTIONS_PER_SEQ,
                                              0.15, PER_PACK)


def make_sequences(rng, count, min_length=4, max_length=20):
  """Random BERT-shaped sequences: [CLS] A [SEP] B [SEP], some masks."""
  sequences = []
  for _ in range(count):
    length = int(rng.randint(min_length, max_length + 1))
    ids = [1] + list(rng.randint(5, TINY_CONFIG["vocab_size"], length - 1))
    num_a = int(rng.randint(1, length - 1))
    segment_ids = [0] * (num_a + 1) + [1] * (length - num_a - 1)
    num_masks = min(PREDICTIONS_PER_SEQ, max(1, round(length * 0.15)))
    positions = sorted(rng.choice(np.arange(1, length), num_masks,
                                  replace=False).tolist())
    masked_ids = [int(ids[p]) for p in positions]
    for p in positions:
      ids[p] = 3  # [MASK]
    sequences.append(packing.Sequence(
        [int(i) for i in ids], segment_ids, positions, masked_ids,
        int(rng.randint(2))))
  return sequences


def unpacked_features(sequences):
  """Upstream's layout: one sequence per row, padded to SEQ_LENGTH."""
  features = {name: [] for name in (
      "input_ids", "input_mask", "segment_ids", "masked_lm_positions",
      "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")}
  for seq in sequences:
    pad = SEQ_LENGTH - len(seq.input_ids)
    mask_pad = PREDICTIONS_PER_SEQ - len(seq.masked_lm_ids)
    features["input_ids"].append(seq.input_ids + [0] * pad)
    features["input_mask"].append([1] * len(seq.input_ids) + [0] * pad)
    features["segment_ids"].append(seq.segment_ids + [0] * pad)
    features["masked_lm_positions"].append(
        seq.masked_lm_positions + [0] * mask_pad)
    features["masked_lm_ids"].append(seq.masked_lm_ids + [0] * mask_pad)
    features["masked_lm_weights"].append(
        [1.0] * len(seq.masked_lm_ids) + [0.0] * mask_pad)
    features["next_sentence_labels"].append([seq.next_sentence_label])
  return as_arrays(features)


def packed_features(sequences, rows):
  built = [packing.pack_row([sequences[i] for i in row], SEQ_LENGTH,
                            PER_PACK, MASK_WIDTH) for row in rows]
  return as_arrays({name: [row[name] for row in built] for name in built[0]})


def as_arrays(features):
  return {name: np.array(values, dtype=np.float32 if "weights" in name
                         else np.int32) for name, values in features.items()}


class Graph(object):
  """One set of weights; the unpacked and the packed batch fed to it."""

  def __init__(self, unpacked_shapes, packed_shapes):
    self.graph = tf.Graph()
    config = modeling.BertConfig.from_dict(TINY_CONFIG)
    with self.graph.as_default():
      tf.set_random_seed(1)
      self.unpacked = {name: tf.placeholder(
          tf.float32 if "weights" in name else tf.int32, shape)
                       for name, shape in unpacked_shapes.items()}
      self.packed = {name: tf.placeholder(
          tf.float32 if "weights" in name else tf.int32, shape)
                     for name, shape in packed_shapes.items()}
      self.outputs = {}
      for kind, features in (("unpacked", self.unpacked),
                             ("packed", self.packed)):
        with tf.variable_scope(tf.get_variable_scope(),
                               reuse=tf.AUTO_REUSE):
          model = modeling.BertModel(
              config=config, is_training=False,
              input_ids=features["input_ids"],
              input_mask=features["input_mask"],
              token_type_ids=features["segment_ids"], scope="bert",
              sequence_ids=features.get("sequence_ids"),
              position_ids=features.get("position_ids"),
              cls_positions=features.get("cls_positions"))
          (mlm_loss, mlm_example, _), (nsp_loss, nsp_example, _) = (
              pretraining.pretraining_model(config, features,
                                            is_training=False))
        self.outputs[kind] = {
            "sequence": model.get_sequence_output(),
            "pooled": model.get_pooled_output(),
            "mlm_loss": mlm_loss, "mlm_example": mlm_example,
            "nsp_loss": nsp_loss, "nsp_example": nsp_example}
      self.variables = tf.trainable_variables()
      for kind in ("unpacked", "packed"):
        out = self.outputs[kind]
        out["gradients"] = [tf.convert_to_tensor(g) for g in tf.gradients(
            out["mlm_loss"] + out["nsp_loss"], self.variables)]
      self.session = tf.Session(graph=self.graph)
      self.session.run(tf.global_variables_initializer())

  def run(self, kind, features):
    placeholders = getattr(self, kind)
    return self.session.run(self.outputs[kind], {
        placeholders[name]: value for name, value in features.items()})


@pytest.fixture(scope="module")
def case():
  rng = np.random.RandomState(7)
  sequences = make_sequences(rng, 12)
  rows = packing.assign_rows([len(s.input_ids) for s in sequences],
                             SEQ_LENGTH, PER_PACK)
  assert len(rows) < len(sequences)
  assert max(len(row) for row in rows) == PER_PACK
  unpacked = unpacked_features(sequences)
  packed = packed_features(sequences, rows)
  graph = Graph({n: v.shape for n, v in unpacked.items()},
                {n: (None,) + v.shape[1:] for n, v in packed.items()})
  yield sequences, rows, unpacked, packed, graph
  graph.session.close()


def test_per_sequence_outputs_equal_unpacked(case):
  sequences, rows, unpacked, packed, graph = case
  u = graph.run("unpacked", unpacked)
  p = graph.run("packed", packed)
  assert p["pooled"].shape == (len(rows), PER_PACK, TINY_CONFIG["hidden_size"])
  for r, row in enumerate(rows):
    start = 0
    for slot, i in enumerate(row):
      length = len(sequences[i].input_ids)
      np.testing.assert_allclose(p["sequence"][r, start:start + length],
                                 u["sequence"][i, :length], atol=1e-5)
      np.testing.assert_allclose(p["pooled"][r, slot], u["pooled"][i],
                                 atol=1e-5)
      np.testing.assert_allclose(p["nsp_example"][r * PER_PACK + slot],
                                 u["nsp_example"][i], atol=1e-5)
      # The masked-LM losses of this sequence's masks, in order.
      num_masks = len(sequences[i].masked_lm_ids)
      first = sum(len(sequences[j].masked_lm_ids) for j in row[:slot])
      np.testing.assert_allclose(
          p["mlm_example"][r * MASK_WIDTH + first:
                           r * MASK_WIDTH + first + num_masks],
          u["mlm_example"][i * PREDICTIONS_PER_SEQ:
                           i * PREDICTIONS_PER_SEQ + num_masks], atol=1e-5)
      start += length


def test_losses_and_gradients_equal_unpacked(case):
  _, _, unpacked, packed, graph = case
  u = graph.run("unpacked", unpacked)
  p = graph.run("packed", packed)
  # NSP: the mean over sequences, not over rows (which would differ).
  assert p["nsp_loss"] == pytest.approx(u["nsp_loss"], abs=1e-5)
  assert p["mlm_loss"] == pytest.approx(u["mlm_loss"], abs=1e-5)
  assert u["nsp_loss"] != pytest.approx(
      p["nsp_example"].sum() / len(packed["input_ids"]), abs=1e-3)
  for variable, gu, gp in zip(graph.variables, u["gradients"],
                              p["gradients"]):
    assert np.abs(gu).max() > 0 or "pooler" in variable.name
    np.testing.assert_allclose(gp, gu, atol=1e-5, err_msg=variable.name)


def test_no_cross_contamination(case):
  sequences, rows, _, _, graph = case
  rng = np.random.RandomState(11)
  row = next(row for row in rows if len(row) >= 2)
  first = sequences[row[0]]
  base = packed_features(sequences, [row])
  baseline = graph.run("packed", base)
  # Another sequence of a different length and content beside it.
  for other in make_sequences(rng, 3, max_length=SEQ_LENGTH -
                              len(first.input_ids)):
    changed = packed_features([first, other], [[0, 1]])
    out = graph.run("packed", changed)
    length = len(first.input_ids)
    np.testing.assert_allclose(out["sequence"][0, :length],
                               baseline["sequence"][0, :length], atol=1e-6)
    np.testing.assert_allclose(out["pooled"][0, 0], baseline["pooled"][0, 0],
                               atol=1e-6)
    assert not np.allclose(out["sequence"][0, length:length + 3],
                           baseline["sequence"][0, length:length + 3])


def test_no_new_variables():
  def variables(packed):
    with tf.Graph().as_default():
      ids = tf.zeros([2, 8], tf.int32)
      modeling.BertModel(
          config=modeling.BertConfig.from_dict(TINY_CONFIG),
          is_training=True, input_ids=ids, input_mask=ids, token_type_ids=ids,
          sequence_ids=ids if packed else None,
          position_ids=ids if packed else None,
          cls_positions=tf.zeros([2, 3], tf.int32) if packed else None)
      return [(v.name, v.shape.as_list()) for v in tf.global_variables()]
  assert variables(packed=True) == variables(packed=False)
