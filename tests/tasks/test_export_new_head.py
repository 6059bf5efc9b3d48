"""A new head is one entry of bertkit/common/heads.py's table.

A head of this test's own, a sentence regression head whose output layer
Hugging Face would call "regressor", is added to a copy of heads.HEADS and
nothing else: the checkpoint formats detect it from a checkpoint holding its
variables, and export_checkpoint writes it in every format, its SavedModel
giving the scores the model computes.
"""

import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import heads
from bertkit.engine.checkpointing import checkpoint_formats
import create_vocab
import export_checkpoint
import modeling
import tokenization
from conftest import REPO_ROOT, TINY_CONFIG

CORPUS = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
SEQ = 16


def serving_scores(bert_config, input_ids, input_mask, segment_ids,
                   num_labels):
  """The head's graph: one score per sequence from the pooled [CLS] output
  (scores [B]); export_checkpoint's SavedModel outputs too."""
  del num_labels  # one output
  model = modeling.BertModel(config=bert_config, is_training=False,
                             input_ids=input_ids, input_mask=input_mask,
                             token_type_ids=segment_ids, scope="bert")
  pooled = model.get_pooled_output()
  weights_name, bias_name = SCORER.variables
  weights = tf.get_variable(weights_name, [1, bert_config.hidden_size])
  bias = tf.get_variable(bias_name, [1])
  return {"scores": tf.nn.bias_add(
      tf.matmul(pooled, weights, transpose_b=True), bias)[:, 0]}


SCORER = heads.Head(
    "scorer", heads.output_layer("cls/scorer/", "regressor"),
    "BertForRegression", outputs=1, serving=__name__ + ":serving_scores")


@pytest.fixture
def scorer_table(monkeypatch):
  """heads.HEADS with SCORER first: the one change a new head needs."""
  monkeypatch.setattr(heads, "HEADS", (SCORER,) + heads.HEADS)


def real_text_batch(vocab_file):
  """input_ids, input_mask, segment_ids [2, SEQ] of two corpus lines."""
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  with open(CORPUS, encoding="utf-8") as f:
    lines = [line for line in f if line.strip()][:2]
  batch = {name: np.zeros([2, SEQ], np.int32)
           for name in ("input_ids", "input_mask", "segment_ids")}
  for row, line in enumerate(lines):
    tokens = ["[CLS]"] + tokenizer.tokenize(line)[:SEQ - 2] + ["[SEP]"]
    batch["input_ids"][row, :len(tokens)] = tokenizer.convert_tokens_to_ids(
        tokens)
    batch["input_mask"][row, :len(tokens)] = 1
  return batch


def scores(bert_config, prefix, batch):
  """The head's scores of `batch` from the checkpoint `prefix`."""
  with tf.Graph().as_default(), tf.Session() as sess:
    inputs = {name: tf.constant(value) for name, value in batch.items()}
    outputs = serving_scores(bert_config, inputs["input_ids"],
                             inputs["input_mask"], inputs["segment_ids"], 1)
    tf.train.Saver().restore(sess, prefix)
    return sess.run(outputs["scores"])


@pytest.fixture
def scorer_checkpoint(tmp_path):
  """(work directory, checkpoint prefix) of a model with the SCORER head,
  its weights drawn at random."""
  (tmp_path / "tiny.json").write_text(json.dumps(TINY_CONFIG))
  create_vocab.run(create_vocab.VocabOptions(
      input_file=CORPUS, output_file=str(tmp_path / "vocab.txt"),
      vocab_size=TINY_CONFIG["vocab_size"], do_lower_case=True))
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  prefix = str(tmp_path / "run" / "model.ckpt-0")
  with tf.Graph().as_default(), tf.Session() as sess:
    tf.set_random_seed(0)
    ids = tf.zeros([1, SEQ], tf.int32)
    serving_scores(config, ids, ids, ids, 1)
    sess.run(tf.global_variables_initializer())
    tf.train.Saver().save(sess, prefix)
  return tmp_path, prefix


def test_a_head_added_to_the_table_is_detected(scorer_checkpoint,
                                               scorer_table):
  _, prefix = scorer_checkpoint
  shapes = dict(tf.train.list_variables(prefix))
  assert checkpoint_formats.detect_head(shapes) == (SCORER, None)
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  table = checkpoint_formats.weight_table(config, SCORER)
  assert {name: shape for name, _, shape, _ in table} == shapes
  hf_names = {tf_name: hf_name for tf_name, hf_name, _, _ in table}
  assert hf_names["cls/scorer/output_weights"] == "regressor.weight"
  assert hf_names["bert/pooler/dense/kernel"] == "bert.pooler.dense.weight"


def test_without_its_entry_the_checkpoint_is_an_encoder(scorer_checkpoint):
  _, prefix = scorer_checkpoint
  shapes = dict(tf.train.list_variables(prefix))
  assert checkpoint_formats.detect_head(shapes) == (heads.ENCODER, None)


def test_a_head_added_to_the_table_is_exported(scorer_checkpoint,
                                               scorer_table):
  from safetensors.numpy import load_file
  work, prefix = scorer_checkpoint
  vocab = str(work / "vocab.txt")
  source, head = export_checkpoint.export(
      prefix, str(work / "tiny.json"), vocab, True, str(work / "export"),
      list(export_checkpoint.FORMATS))
  assert (source, head) == (prefix, SCORER)
  trained = dict(tf.train.list_variables(prefix))

  google = str(work / "export" / "google" / "bert_model.ckpt")
  # The model's weights only: not the Saver's global step (none here).
  assert dict(tf.train.list_variables(google)) == trained
  reader = tf.train.load_checkpoint(prefix)
  exported = tf.train.load_checkpoint(google)
  for name in trained:
    np.testing.assert_array_equal(exported.get_tensor(name),
                                  reader.get_tensor(name), err_msg=name)

  hf_dir = work / "export" / "huggingface"
  state = load_file(str(hf_dir / "model.safetensors"))
  np.testing.assert_array_equal(
      state["regressor.weight"], reader.get_tensor("cls/scorer/output_weights"))
  np.testing.assert_array_equal(
      state["regressor.bias"], reader.get_tensor("cls/scorer/output_bias"))
  assert json.loads((hf_dir / "config.json").read_text())[
      "architectures"] == ["BertForRegression"]
  # Read back (as --init_checkpoint reads it), it is the same head.
  weights, _ = checkpoint_formats.read_hf_weights(str(hf_dir))
  assert checkpoint_formats.detect_head(
      {name: value.shape for name, value in weights.items()}) == (SCORER,
                                                                 None)

  batch = real_text_batch(vocab)
  with tf.Graph().as_default(), tf.Session() as sess:
    meta = tf.saved_model.loader.load(
        sess, ["serve"], str(work / "export" / "saved_model"))
    signature = meta.signature_def["serving_default"]
    assert sorted(signature.outputs) == ["scores"]
    served = sess.run(signature.outputs["scores"].name, {
        signature.inputs[name].name: value for name, value in batch.items()})
  expected = scores(modeling.BertConfig.from_dict(TINY_CONFIG), prefix,
                    batch)
  assert served.shape == (2,)
  np.testing.assert_allclose(served, expected, atol=1e-6, rtol=0)
