# coding=utf-8
"""Exporting a run_squad.py model, checked against Hugging Face and back.

One tiny SQuAD model is fine-tuned for the module and exported in every
format; Hugging Face's BertForQuestionAnswering, the SavedModel and
run_squad.py started from the exports must all give the fine-tuned model's
start/end logits.
"""

import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
import torch
import transformers

from bertkit.common import heads
from bertkit.engine.checkpointing import checkpoint_formats
import export_checkpoint
from bertkit.tasks.squad import model as squad_model
import modeling
from conftest import REPO_ROOT, program_in_process
from bertkit.common.errors import UserError
from helpers.squad import SEQ, squad_args, squad_file, tiny_config

DATA = os.path.join(REPO_ROOT, "tests", "fixtures", "squad")
VOCAB = os.path.join(DATA, "vocab.txt")
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def squad(tmp_path_factory):
  """A fine-tuned tiny SQuAD model, its predictions and its exports."""
  d = tmp_path_factory.mktemp("export_squad")
  (d / "tiny.json").write_text(json.dumps(tiny_config()))
  train = squad_file("squad_v1.json", d / "train.json", drop=())
  program_in_process(squad_args(
      d, d / "run", "--do_train", "--do_predict", "--train_file=%s" % train,
      "--predict_file=%s" % train, "--num_train_epochs=30",
      "--tf_random_seed=1"))
  export_checkpoint.export(str(d / "run"), str(d / "tiny.json"), VOCAB, True,
                           str(d / "export"), list(export_checkpoint.FORMATS))
  return d


def predict_features(run_dir, count=12):
  """The first `count` records of run_squad's eval.tf_record."""
  spec = squad_model.feature_spec(SEQ, False)
  rows = []
  for record in tf.io.tf_record_iterator(str(run_dir / "eval.tf_record")):
    example = tf.train.Example.FromString(record)
    rows.append({name: list(example.features.feature[name].int64_list.value)
                 for name in spec})
    if len(rows) == count:
      break
  return {name: np.array([r[name] for r in rows], np.int32) for name in spec}


def our_logits(squad_dir, batch):
  """start/end logits of the fine-tuned checkpoint, by modeling.py."""
  config = modeling.BertConfig.from_json_file(str(squad_dir / "tiny.json"))
  with tf.Graph().as_default(), tf.Session() as sess:
    start, end = squad_model.create_model(
        config, False, tf.constant(batch["input_ids"]),
        tf.constant(batch["input_mask"]), tf.constant(batch["segment_ids"]))
    tf.train.Saver(tf.trainable_variables()).restore(
        sess, tf.train.latest_checkpoint(str(squad_dir / "run")))
    return sess.run([start, end])


def test_weight_table_lists_exactly_the_squad_variables():
  config = modeling.BertConfig.from_dict(tiny_config())
  with tf.Graph().as_default():
    squad_model.build_squad_variables(config)
    built = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  table = checkpoint_formats.weight_table(config, heads.SQUAD)
  assert {name: shape for name, _, shape, _ in table} == built
  hf_names = [hf for _, hf, _, _ in table if hf is not None]
  assert len(set(hf_names)) == len(hf_names)
  # BertForQuestionAnswering has no pooler; the head is qa_outputs.
  assert [name for name, hf, _, _ in table if hf is None] == [
      "bert/pooler/dense/kernel", "bert/pooler/dense/bias"]
  assert ("cls/squad/output_weights", "qa_outputs.weight", [2, 64],
          False) in table
  assert checkpoint_formats.detect_head(built) == (heads.SQUAD,
                                                   None)


def test_labels_are_refused_for_a_squad_checkpoint():
  with pytest.raises(UserError, match="--labels is for classifier "
                     "checkpoints; this one has the squad head"):
    export_checkpoint.class_labels(["a", "b"], heads.SQUAD, None)


@pytest.mark.slow
def test_huggingface_export_is_a_question_answering_model(squad):
  hf_dir = squad / "export" / "huggingface"
  config = json.loads((hf_dir / "config.json").read_text())
  assert config["architectures"] == ["BertForQuestionAnswering"]
  model, info = transformers.BertForQuestionAnswering.from_pretrained(
      str(hf_dir), output_loading_info=True)
  assert info["missing_keys"] == [] and info["unexpected_keys"] == []
  batch = predict_features(squad / "run")
  assert (batch["input_mask"] == 0).any() and (batch["segment_ids"] == 1).any()
  model.eval()
  with torch.no_grad():
    output = model(
        input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
        attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
        token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long))
  start, end = our_logits(squad, batch)
  np.testing.assert_allclose(output.start_logits.numpy(), start,
                             atol=TOLERANCE, rtol=0)
  np.testing.assert_allclose(output.end_logits.numpy(), end, atol=TOLERANCE,
                             rtol=0)


@pytest.mark.slow
def test_saved_model_returns_start_and_end_logits(squad):
  batch = predict_features(squad / "run", count=3)
  inputs = {name: batch[name]
            for name in ("input_ids", "input_mask", "segment_ids")}
  with tf.Graph().as_default(), tf.Session() as sess:
    meta = tf.saved_model.loader.load(
        sess, ["serve"], str(squad / "export" / "saved_model"))
    signature = meta.signature_def["serving_default"]
    assert sorted(signature.outputs) == ["end_logits", "start_logits"]
    served = sess.run(
        {name: info.name for name, info in signature.outputs.items()},
        {signature.inputs[name].name: value
         for name, value in inputs.items()})
  start, end = our_logits(squad, batch)
  assert served["start_logits"].shape == (3, SEQ)
  np.testing.assert_allclose(served["start_logits"], start, atol=TOLERANCE,
                             rtol=0)
  np.testing.assert_allclose(served["end_logits"], end, atol=TOLERANCE,
                             rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["google", "huggingface"])
def test_run_squad_predicts_from_an_export(squad, tmp_path, layout):
  """Google's layout and a Hugging Face directory as --init_checkpoint of a
  predict-only run give the fine-tuned run's answers."""
  output_dir = tmp_path / "predict"
  train = squad / "train.json"
  result = program_in_process(squad_args(
      squad, output_dir, "--do_predict", "--predict_file=%s" % train,
      "--init_checkpoint=%s" % (squad / "export" / layout)))
  # Every variable of the model came from the export (the pooler, which
  # BertForQuestionAnswering lacks, is unused by the answers).
  fresh = "0 initialised fresh" if layout == "google" else (
      "2 initialised fresh: bert/pooler/dense/kernel, bert/pooler/dense/bias")
  assert fresh in result.stderr
  ours = json.loads((squad / "run" / "nbest_predictions.json").read_text())
  theirs = json.loads((output_dir / "nbest_predictions.json").read_text())
  assert json.loads((output_dir / "predictions.json").read_text()) == (
      json.loads((squad / "run" / "predictions.json").read_text()))
  for qid in ours:
    assert [e["text"] for e in theirs[qid]] == [e["text"] for e in ours[qid]]
    np.testing.assert_allclose([e["start_logit"] for e in theirs[qid]],
                               [e["start_logit"] for e in ours[qid]],
                               atol=TOLERANCE, rtol=0)
