"""export_checkpoint.py and Hugging Face import, checked against real HF.

One tiny model is pretrained once for the module with the headline flags
(--use_fp16, LAMB, 2 accumulation steps, 2 CPU replicas) on records that
create_pretraining_data.py makes from the sample corpus, then exported; the
exports are loaded by transformers (PyTorch), by HF's TF-checkpoint loader,
by TensorFlow's SavedModel loader and by our own programs, and every output
is compared with modeling.py's.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
# Imported once for the module: transformers takes seconds to import.
import torch
import transformers

from bertkit.common import errors
from bertkit.common import heads
from bertkit.data import creation_options
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.checkpointing import run_directory
import create_pretraining_data
import create_vocab
import export_checkpoint
from bertkit.tasks.pretraining import task as pretraining
# A module attribute, not the module: this file's `classifier` is a fixture.
from bertkit.tasks.classification.task import build_classifier_variables
import modeling
import tokenization
from conftest import (REPO_ROOT, expect_user_error, program_in_process,
                      run_ok, run_program, tiny_bert_config)
from helpers.classifier import (classifier_inputs, hf_classifier_logits,
                                read_records)

CORPUS = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
CLASSIFY = os.path.join(REPO_ROOT, "sample_data", "classify")
SEQ, PREDS, VOCAB_SIZE = 32, 5, 256
TINY_CONFIG = tiny_bert_config(attention_probs_dropout_prob=0.1,
                               hidden_dropout_prob=0.1, vocab_size=VOCAB_SIZE)
TOLERANCE = 1e-4


def refused(call, *fragments):
  """Calls `call()` in this process, asserting a one-line UserError holding
  every fragment (the programs print it as their one `error:` line)."""
  with pytest.raises(errors.UserError) as raised:
    call()
  message = str(raised.value)
  assert "\n" not in message, message
  for fragment in fragments:
    assert fragment in message, message
  return message


def export_args(work, checkpoint, output_dir, *extra):
  return ["export_checkpoint.py", "--checkpoint=%s" % checkpoint,
          "--bert_config_file=%s" % (work / "tiny.json"),
          "--vocab_file=%s" % (work / "vocab.txt"),
          "--output_dir=%s" % output_dir] + list(extra)


def pretrain_args(work, output_dir, *extra, steps=4):
  return ["run_pretraining.py", "--bert_config_file=%s" % (work / "tiny.json"),
          "--input_file=%s" % (work / "pretrain.tfrecord"),
          "--output_dir=%s" % output_dir, "--do_train",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--train_batch_size=8", "--num_train_steps=%d" % steps,
          "--num_warmup_steps=1", "--learning_rate=1e-3",
          "--tf_random_seed=1"] + list(extra)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
  """Vocabs, records, a pretrained checkpoint and its export (all formats)."""
  d = tmp_path_factory.mktemp("export")
  for name, do_lower_case in (("vocab.txt", True), ("vocab_cased.txt", False)):
    create_vocab.run(create_vocab.VocabOptions(
        input_file=CORPUS, output_file=str(d / name), vocab_size=VOCAB_SIZE,
        do_lower_case=do_lower_case))
  create_pretraining_data.run(creation_options.CreationOptions(
      input_file=CORPUS, output_file=str(d / "pretrain.tfrecord"),
      vocab_file=str(d / "vocab.txt"), max_seq_length=SEQ,
      max_predictions_per_seq=PREDS, dupe_factor=1))
  (d / "tiny.json").write_text(json.dumps(TINY_CONFIG))
  # A launch: --use_fp16's graph rewrite is process-global state.
  run_ok(pretrain_args(d, d / "pretrain", "--use_fp16",
                       "--num_accumulation_steps=2", "--optimizer=lamb",
                       "--cpu_replicas=2"))
  # Exporting must work where PyTorch is not installed: a launch, as this
  # process has imported torch.
  no_torch = d / "no_torch"
  no_torch.mkdir()
  (no_torch / "torch.py").write_text(
      "raise ImportError('exporting must not need torch')\n")
  path = os.pathsep.join(p for p in (str(no_torch),
                                     os.environ.get("PYTHONPATH")) if p)
  run_ok(export_args(d, d / "pretrain", d / "export"),
         env={"PYTHONPATH": path})
  return d


def read_checkpoint(path):
  reader = tf.train.load_checkpoint(str(path))
  return {name: reader.get_tensor(name)
          for name, _ in tf.train.list_variables(str(path))}


def pretraining_batch(work, count=4):
  """`count` records, the i-th cut to SEQ - 5 i real tokens and padded."""
  batch = read_records(work / "pretrain.tfrecord", count,
                       ["input_ids", "input_mask", "segment_ids",
                        "masked_lm_positions"])
  for i in range(1, count):
    for name in ("input_ids", "input_mask", "segment_ids"):
      batch[name][i, SEQ - 5 * i:] = 0
  return batch


def bert_config(work):
  return modeling.BertConfig.from_json_file(str(work / "tiny.json"))


def restore(sess, training_dir):
  variables = {v.op.name: v for v in tf.global_variables()}
  tf.train.Saver(var_list=variables).restore(
      sess, tf.train.latest_checkpoint(str(training_dir)))


def tf_pretraining_outputs(config, checkpoint, batch):
  """modeling.py + run_pretraining's heads, in graph mode.

  Returns:
    {sequence [B, S, H], pooled [B, H], mlm_logits [B*P, V],
    nsp_logits [B, 2]}.
  """
  with tf.Graph().as_default() as graph, tf.Session() as sess:
    ids, mask, segments, positions = (
        tf.constant(batch[n]) for n in ("input_ids", "input_mask",
                                        "segment_ids", "masked_lm_positions"))
    model = modeling.BertModel(config, False, ids, mask, segments)
    pretraining.get_masked_lm_output(
        config, model.get_sequence_output(), model.get_embedding_table(),
        positions, tf.zeros_like(positions), tf.ones(positions.shape))
    pretraining.get_next_sentence_output(
        config, model.get_pooled_output(),
        tf.zeros([positions.shape[0], 1], tf.int32))
    restore(sess, checkpoint)
    return sess.run({
        "sequence": model.get_sequence_output(),
        "pooled": model.get_pooled_output(),
        "mlm_logits": graph.get_tensor_by_name("cls/predictions/BiasAdd:0"),
        "nsp_logits": graph.get_tensor_by_name(
            "cls/seq_relationship/BiasAdd:0")})


def hf_pretraining_outputs(model, batch):
  """The same four outputs from a transformers BertForPreTraining."""
  model.eval()
  with torch.no_grad():
    inputs = {"input_ids": torch.tensor(batch["input_ids"], dtype=torch.long),
              "attention_mask": torch.tensor(batch["input_mask"],
                                             dtype=torch.long),
              "token_type_ids": torch.tensor(batch["segment_ids"],
                                             dtype=torch.long)}
    encoded = model.bert(**inputs)
    pretraining_outputs = model(**inputs)
  positions = torch.tensor(batch["masked_lm_positions"], dtype=torch.long)
  logits = torch.gather(
      pretraining_outputs.prediction_logits, 1,
      positions[:, :, None].expand(
          -1, -1, pretraining_outputs.prediction_logits.shape[-1]))
  return {"sequence": encoded.last_hidden_state.numpy(),
          "pooled": encoded.pooler_output.numpy(),
          "mlm_logits": logits.reshape(-1, logits.shape[-1]).numpy(),
          "nsp_logits": pretraining_outputs.seq_relationship_logits.numpy()}


def assert_outputs_close(actual, expected):
  assert set(actual) == set(expected)
  for name, value in expected.items():
    assert actual[name].shape == value.shape, name
    np.testing.assert_allclose(actual[name], value, atol=TOLERANCE, rtol=0,
                               err_msg=name)


# ------------------------------------------------------------ name mapping


@pytest.mark.parametrize("head", [heads.PRETRAINING, heads.CLASSIFIER])
def test_weight_table_lists_exactly_the_variables_the_programs_build(head):
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  with tf.Graph().as_default():
    if head == heads.PRETRAINING:
      pretraining.build_pretraining_variables(config)
    else:
      build_classifier_variables(config, 3)
    built = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  table = checkpoint_formats.weight_table(config, head, 3)
  assert {name: shape for name, _, shape, _ in table} == built
  hf_names = [hf_name for _, hf_name, _, _ in table]
  assert len(set(hf_names)) == len(hf_names)


def random_weights(table, seed=0):
  rng = np.random.RandomState(seed)
  return {name: rng.standard_normal(shape).astype(np.float32)
          for name, _, shape, _ in table}


@pytest.mark.parametrize("layout", ["BertForPreTraining", "BertModel-legacy"])
def test_hf_weights_read_back_under_our_names(tmp_path, layout):
  from safetensors.numpy import save_file
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  head = (heads.PRETRAINING if layout == "BertForPreTraining"
          else heads.ENCODER)
  table = checkpoint_formats.weight_table(config, head)
  weights = random_weights(table)
  state = checkpoint_formats.to_hf_state(weights, table)
  if layout == "BertModel-legacy":
    # BertModel.save_pretrained drops the "bert." prefix; models converted
    # long ago still name LayerNorm parameters gamma and beta.
    state = {k[len("bert."):].replace("LayerNorm.weight", "LayerNorm.gamma")
             .replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in state.items()}
  state["bert.embeddings.position_ids"] = np.arange(64)[None]
  save_file(state, str(tmp_path / "model.safetensors"))
  (tmp_path / "config.json").write_text(json.dumps(
      checkpoint_formats.hf_config(config, heads.PRETRAINING)))
  prefix = str(tmp_path / "converted" / "bert_model.ckpt")
  checkpoint_formats.hf_dir_to_checkpoint(str(tmp_path), prefix)
  converted = read_checkpoint(prefix)
  assert sorted(converted) == sorted(weights)
  for name, value in weights.items():
    np.testing.assert_array_equal(converted[name], value, err_msg=name)


# ------------------------------------------------------------ the exports


@pytest.mark.slow
def test_huggingface_export_reproduces_our_outputs(work):
  model, info = transformers.BertForPreTraining.from_pretrained(
      str(work / "export" / "huggingface"), output_loading_info=True)
  # Every parameter came from the file; the decoder is the embedding table.
  assert info["missing_keys"] == [] and info["unexpected_keys"] == []
  assert (model.cls.predictions.decoder.weight.data_ptr() ==
          model.bert.embeddings.word_embeddings.weight.data_ptr())
  config = json.loads((work / "export" / "huggingface" / "config.json")
                      .read_text())
  assert config["hidden_act"] == "gelu_new"
  batch = pretraining_batch(work)
  # Real records: padding and both segments are in the batch.
  assert (batch["input_mask"] == 0).any() and (batch["segment_ids"] == 1).any()
  expected = tf_pretraining_outputs(bert_config(work), work / "pretrain",
                                    batch)
  assert_outputs_close(hf_pretraining_outputs(model, batch), expected)


@pytest.mark.slow
def test_google_export_holds_only_the_model_weights(work):
  exported = read_checkpoint(work / "export" / "google" / "bert_model.ckpt")
  trained = read_checkpoint(work / "pretrain")
  table = checkpoint_formats.weight_table(
      bert_config(work), heads.PRETRAINING)
  assert sorted(exported) == sorted(name for name, _, _, _ in table)
  # The training checkpoint had the loss scale, step and Adam/LAMB slots.
  assert {"current_loss_scale", "good_steps", "global_step"} <= set(trained)
  for name, value in exported.items():
    np.testing.assert_array_equal(value, trained[name], err_msg=name)
  google = work / "export" / "google"
  assert (google / "vocab.txt").read_bytes() == (work / "vocab.txt").read_bytes()
  assert json.loads((google / "bert_config.json").read_text()) == TINY_CONFIG


@pytest.mark.slow
def test_google_export_loads_with_hf_load_tf_weights_in_bert(work):
  google = work / "export" / "google"
  config = transformers.BertConfig.from_json_file(
      str(google / "bert_config.json"))
  # Google's config says "gelu", which HF reads as the exact erf form; BERT's
  # is the tanh approximation.
  config.hidden_act = "gelu_new"
  model = transformers.BertForPreTraining(config)
  transformers.load_tf_weights_in_bert(model, config,
                                       str(google / "bert_model.ckpt"))
  batch = pretraining_batch(work)
  expected = tf_pretraining_outputs(bert_config(work), work / "pretrain",
                                    batch)
  assert_outputs_close(hf_pretraining_outputs(model, batch), expected)


@pytest.mark.slow
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_exported_tokenizer_gives_our_ids(work, do_lower_case):
  vocab = work / ("vocab.txt" if do_lower_case else "vocab_cased.txt")
  if do_lower_case:
    hf_dir = work / "export" / "huggingface"
  else:
    out = work / "export_cased"
    export_checkpoint.export(str(work / "pretrain"), str(work / "tiny.json"),
                             str(vocab), False, str(out), ["huggingface"])
    hf_dir = out / "huggingface"
    assert sorted(os.listdir(out)) == ["huggingface"]
  hf = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
  ours = tokenization.FullTokenizer(str(vocab), do_lower_case=do_lower_case)
  with open(CORPUS, encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
  expected = [ours.convert_tokens_to_ids(ours.tokenize(l)) for l in lines]
  actual = hf(lines, add_special_tokens=False)["input_ids"]
  assert actual == expected
  # Cased and uncased vocabs really tokenize differently.
  assert any(l != l.lower() for l in lines)
  pair = hf("first", "second")["input_ids"]
  assert pair[0] == ours.vocab["[CLS]"] and pair[-1] == ours.vocab["[SEP]"]
  assert hf.model_max_length == TINY_CONFIG["max_position_embeddings"]


def saved_model_outputs(directory, inputs):
  with tf.Graph().as_default(), tf.Session() as sess:
    meta = tf.saved_model.loader.load(sess, ["serve"], str(directory))
    signature = meta.signature_def["serving_default"]
    feeds = {signature.inputs[name].name: value
             for name, value in inputs.items()}
    assert set(signature.inputs) == set(inputs)
    return sess.run({name: info.name
                     for name, info in signature.outputs.items()}, feeds)


@pytest.mark.slow
@pytest.mark.parametrize("batch_size,seq_length", [(2, 16), (3, 64)])
def test_saved_model_reproduces_our_outputs(work, batch_size, seq_length):
  batch = pretraining_batch(work, batch_size)
  inputs = {}
  for name in ("input_ids", "input_mask", "segment_ids"):
    value = np.zeros([batch_size, seq_length], np.int32)
    width = min(seq_length, SEQ)
    value[:, :width] = batch[name][:, :width]
    inputs[name] = value
  batch = dict(batch, **inputs)
  batch["masked_lm_positions"] = np.minimum(batch["masked_lm_positions"],
                                            seq_length - 1)
  expected = tf_pretraining_outputs(bert_config(work), work / "pretrain",
                                    batch)
  served = saved_model_outputs(work / "export" / "saved_model", inputs)
  assert sorted(served) == ["pooled_output", "sequence_output"]
  assert served["sequence_output"].shape == (batch_size, seq_length, 32)
  np.testing.assert_allclose(served["sequence_output"], expected["sequence"],
                             atol=TOLERANCE, rtol=0)
  np.testing.assert_allclose(served["pooled_output"], expected["pooled"],
                             atol=TOLERANCE, rtol=0)


# ------------------------------------------------------------ classifier


@pytest.fixture(scope="module")
def classifier(work):
  """Fine-tuned from the google/ export on a slice of the sample task."""
  data = work / "classify_data"
  data.mkdir()
  for name, rows in (("train.tsv", 33), ("dev.tsv", 9), ("test.tsv", 13)):
    lines = (open(os.path.join(CLASSIFY, name), encoding="utf-8")
             .read().splitlines())
    (data / name).write_text("\n".join(lines[:rows]) + "\n", encoding="utf-8")
  labels = sorted({line.split("\t")[1] for line in
                   (data / "train.tsv").read_text().splitlines()[1:]})
  out = work / "classify"
  result = program_in_process([
      "run_classifier.py", "--task_name=tsv", "--data_dir=%s" % data,
      "--vocab_file=%s" % (work / "vocab.txt"),
      "--bert_config_file=%s" % (work / "tiny.json"),
      "--init_checkpoint=%s" % (work / "export" / "google"),
      "--output_dir=%s" % out, "--max_seq_length=%d" % SEQ,
      "--do_train", "--do_predict", "--train_batch_size=8",
      "--num_train_epochs=1", "--learning_rate=1e-3",
      "--labels=%s" % ",".join(labels)])
  # The class names come from the labels.txt run_classifier wrote.
  export_checkpoint.export(str(out), str(work / "tiny.json"),
                           str(work / "vocab.txt"), True,
                           str(work / "classify_export"),
                           ["huggingface", "saved_model"])
  return out, labels, result


def predicted_probabilities(out):
  return np.array([[float(p) for p in line.split("\t")] for line in
                   (out / "test_results.tsv").read_text().splitlines()])


@pytest.mark.slow
def test_google_export_initialises_run_classifier(work, classifier):
  _, _, result = classifier
  num_encoder = len(checkpoint_formats.weight_table(bert_config(work),
                                                   heads.ENCODER))
  assert ("%d variable(s) loaded, 2 initialised fresh: output_weights, "
          "output_bias" % num_encoder) in result.stderr


@pytest.mark.slow
def test_classifier_export_gives_run_classifier_probabilities(classifier):
  out, labels, _ = classifier
  hf_dir = out.parent / "classify_export" / "huggingface"
  model, info = transformers.BertForSequenceClassification.from_pretrained(
      str(hf_dir), output_loading_info=True)
  assert info["missing_keys"] == [] and info["unexpected_keys"] == []
  assert model.config.id2label == dict(enumerate(labels))
  inputs = classifier_inputs(out)
  logits = hf_classifier_logits(model, inputs)
  expected = predicted_probabilities(out)
  assert expected.shape == (12, len(labels))
  np.testing.assert_allclose(torch.softmax(logits, -1).numpy(), expected,
                             atol=TOLERANCE, rtol=0)
  served = saved_model_outputs(out.parent / "classify_export" / "saved_model",
                               inputs)
  np.testing.assert_allclose(served["probabilities"], expected,
                             atol=TOLERANCE, rtol=0)


# ------------------------------------------------------------ import


@pytest.mark.slow
def test_hf_directory_as_init_checkpoint_gives_back_the_weights(work):
  out = work / "from_hf"
  result = program_in_process(pretrain_args(
      work, out, "--init_checkpoint=%s" % (work / "export" / "huggingface"),
      "--learning_rate=0", steps=1))
  assert "variable(s) loaded, 0 initialised fresh" in result.stderr
  loaded, source = read_checkpoint(out), read_checkpoint(work / "pretrain")
  table = checkpoint_formats.weight_table(bert_config(work),
                                          heads.PRETRAINING)
  for name, _, _, _ in table:
    np.testing.assert_array_equal(loaded[name], source[name], err_msg=name)


# ------------------------------------------------------------ bad input


def assert_nothing_written(parent, name):
  assert not [n for n in os.listdir(parent) if n.startswith(name)]


@pytest.mark.slow
def test_no_checkpoint_is_refused(work):
  empty = work / "empty_run"
  empty.mkdir()
  refused(lambda: export_checkpoint.export(
      str(empty), str(work / "tiny.json"), str(work / "vocab.txt"), True,
      str(work / "bad_none"), list(export_checkpoint.FORMATS)),
          "--checkpoint", str(empty), "no checkpoint")
  assert_nothing_written(work, "bad_none")


@pytest.mark.slow
def test_config_of_another_shape_is_refused_naming_the_variable(work):
  (work / "wide.json").write_text(json.dumps(dict(TINY_CONFIG,
                                                  intermediate_size=128)))
  # The run directory describes its model: the first field that differs.
  refused(lambda: export_checkpoint.export(
      str(work / "pretrain"), str(work / "wide.json"), str(work / "vocab.txt"),
      True, str(work / "bad_shape"), list(export_checkpoint.FORMATS)),
          "--bert_config_file %s says intermediate_size 128, but the "
          "bert_config.json of --checkpoint %s says 64" % (
              work / "wide.json", work / "pretrain"))
  assert_nothing_written(work, "bad_shape")
  # A checkpoint without a description: the first variable that differs.
  undescribed = work / "pretrain_undescribed"
  shutil.copytree(work / "pretrain", undescribed,
                  ignore=shutil.ignore_patterns("bert_config.json", "export"))
  refused(lambda: export_checkpoint.export(
      str(undescribed), str(work / "wide.json"), str(work / "vocab.txt"),
      True, str(work / "bad_shape"), list(export_checkpoint.FORMATS)),
          "bert/encoder/layer_0/intermediate/dense/kernel",
          "[32, 64] in the checkpoint", "[32, 128] by the config")
  assert_nothing_written(work, "bad_shape")


@pytest.mark.slow
def test_unknown_format_is_refused(work):
  # A launch: export_checkpoint.py's --format list and its one error line
  # (before TensorFlow is imported: a quick launch).
  result = run_program(export_args(work, work / "pretrain", work / "bad_fmt",
                                   "--format=google,onnx"))
  expect_user_error(result, "--format=google,onnx: unknown format onnx; "
                    "choose from google,huggingface,saved_model")
  assert_nothing_written(work, "bad_fmt")


@pytest.mark.slow
def test_non_empty_output_dir_needs_overwrite(work):
  out = work / "occupied"
  out.mkdir()
  (out / "keep.txt").write_text("mine")
  # A launch: the program refuses before importing TensorFlow.
  result = run_program(export_args(work, work / "pretrain", out,
                                   "--format=google"))
  expect_user_error(result, str(out), "is not empty; pass --overwrite")
  assert os.listdir(out) == ["keep.txt"]
  export_checkpoint.export(str(work / "pretrain"), str(work / "tiny.json"),
                           str(work / "vocab.txt"), True, str(out),
                           ["google"], overwrite=True)
  assert sorted(os.listdir(out)) == ["google"]
  assert [n for n in os.listdir(work) if n.startswith("occupied")] == [
      "occupied"]


@pytest.fixture
def run_dir(tmp_path):
  """What a training run leaves, of a tiny model with random weights:
  model.ckpt-1 with its `checkpoint` file, bert_config.json and vocab.txt;
  beside it a symlink to it (`link`) and a copy of its vocab
  (vocabs/vocab.txt)."""
  run = tmp_path / "run"
  run.mkdir()
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  rng = np.random.RandomState(0)
  checkpoint_formats.write_checkpoint(str(run / "model.ckpt-1"), {
      name: rng.standard_normal(shape).astype(np.float32)
      for name, _, shape, _ in checkpoint_formats.weight_table(
          config, heads.PRETRAINING)})
  tf.train.update_checkpoint_state(str(run), str(run / "model.ckpt-1"))
  (run / "bert_config.json").write_text(config.to_json_string())
  (run / "vocab.txt").write_text("".join(
      "%s\n" % t for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
      ["word%d" % i for i in range(VOCAB_SIZE - 5)]))
  (tmp_path / "link").symlink_to(run)
  (tmp_path / "vocabs").mkdir()
  shutil.copy(run / "vocab.txt", tmp_path / "vocabs")
  return run


def snapshot(directory):
  """{path under `directory`: its bytes (None: a directory or symlink)}."""
  found = {}
  for parent, dirs, files in os.walk(str(directory)):
    for name in dirs + files:
      path = os.path.join(parent, name)
      found[os.path.relpath(path, str(directory))] = (
          None if name in dirs else open(path, "rb").read())
  return found


# How the --output_dir is, or holds, what the export reads: the flags
# ({run}: the run directory, {tmp} where it is, {tmp}/link a symlink to it)
# and the message.
READ_BY_THE_EXPORT = {
    "the run directory": (
        ["--checkpoint={run}", "--output_dir={run}"],
        "--output_dir {run} is the --checkpoint directory {run}"),
    "a prefix's directory": (
        ["--checkpoint={run}/model.ckpt-1", "--output_dir={run}/"],
        "--output_dir {run}/ is the directory {run} of --checkpoint "
        "{run}/model.ckpt-1"),
    "a directory holding it": (
        ["--checkpoint={run}", "--output_dir={run}/.."],
        "--output_dir {run}/.. holds the --checkpoint directory {run}"),
    "a symlink to it": (
        ["--checkpoint={tmp}/link", "--output_dir={run}"],
        "--output_dir {run} is the --checkpoint directory {tmp}/link"),
    "the vocab's directory": (
        ["--checkpoint={run}", "--vocab_file={tmp}/vocabs/vocab.txt",
         "--output_dir={tmp}/vocabs"],
        "--output_dir {tmp}/vocabs holds --vocab_file "
        "{tmp}/vocabs/vocab.txt"),
}


@pytest.mark.parametrize("case, overwrite", [
    (case, True) for case in sorted(READ_BY_THE_EXPORT)] + [
        ("the run directory", False)])
def test_an_export_never_replaces_what_it_reads(run_dir, case, overwrite):
  """Refused in one line, --overwrite or not, without advising it; every
  file is left as it was, nothing is made beside it."""
  tmp = run_dir.parent
  before = snapshot(tmp)
  args, message = READ_BY_THE_EXPORT[case]
  result = run_program(
      ["export_checkpoint.py", "--format=huggingface"] +
      [a.format(run=run_dir, tmp=tmp) for a in args] +
      ["--overwrite"] * overwrite, timeout=120)
  line = expect_user_error(result, message.format(run=run_dir, tmp=tmp),
                           "which the export reads: replacing it would "
                           "delete it (--overwrite or not)")
  assert "pass --overwrite" not in line
  assert snapshot(tmp) == before


def test_an_export_may_go_inside_the_run_directory(run_dir):
  """run_pre.sh's layout: OUTPUT_DIR/export holds nothing the export reads
  (scripts/settings.sh's export_model)."""
  (run_dir / "export").mkdir()
  for checkpoint in (run_dir, run_dir / "model.ckpt-1"):
    export_checkpoint.check_output_dir(
        str(run_dir / "export"), False, export_checkpoint.exported_inputs(
            str(checkpoint), str(run_dir / "bert_config.json"),
            str(run_dir / "vocab.txt")))
  with pytest.raises(errors.UserError, match="holds --vocab_file"):
    export_checkpoint.check_output_dir(
        str(run_dir / "export"), True, export_checkpoint.exported_inputs(
            str(run_dir), None, str(run_dir / "export" / "vocab.txt")))


def test_classifier_labels_must_match_the_head():
  with pytest.raises(errors.UserError, match="names 2 distinct label"):
    export_checkpoint.class_labels(["a", "b"], heads.CLASSIFIER,
                                   3)
  with pytest.raises(errors.UserError, match="pretraining head"):
    export_checkpoint.class_labels(["a", "b"], heads.PRETRAINING,
                                   None)
  assert export_checkpoint.class_labels(
      None, heads.CLASSIFIER, 2) == ["LABEL_0", "LABEL_1"]


def broken_hf_dir(work, name):
  hf_dir = work / name
  shutil.copytree(work / "export" / "huggingface", hf_dir)
  return hf_dir


@pytest.mark.slow
def test_hf_directory_without_safetensors_is_refused(work):
  hf_dir = broken_hf_dir(work, "hf_no_safetensors")
  (hf_dir / "model.safetensors").rename(hf_dir / "pytorch_model.bin")
  out = work / "bad_init"
  refused(lambda: program_in_process(pretrain_args(
      work, out, "--init_checkpoint=%s" % hf_dir)),
          str(hf_dir), "no model.safetensors", "pytorch_model.bin")
  assert not (out / "checkpoint").exists()


@pytest.mark.slow
def test_hf_directory_of_another_model_type_is_refused(work):
  hf_dir = broken_hf_dir(work, "hf_roberta")
  config = json.loads((hf_dir / "config.json").read_text())
  config["model_type"] = "roberta"
  (hf_dir / "config.json").write_text(json.dumps(config))
  out = work / "bad_init_roberta"
  refused(lambda: program_in_process(pretrain_args(
      work, out, "--init_checkpoint=%s" % hf_dir)),
          str(hf_dir), "model_type is 'roberta'")
  assert not (out / "checkpoint").exists()


@pytest.mark.slow
def test_fine_tuning_an_uncased_hf_model_as_cased_is_refused(work):
  hf_dir = str(work / "export" / "huggingface")
  assert run_directory.resolve(hf_dir, do_lower_case=True).do_lower_case
  refused(lambda: program_in_process([
      "run_classifier.py", "--task_name=tsv", "--data_dir=" + CLASSIFY,
      "--vocab_file=%s" % (work / "vocab.txt"),
      "--bert_config_file=%s" % (work / "tiny.json"),
      "--init_checkpoint=" + hf_dir, "--nodo_lower_case",
      "--max_seq_length=%d" % SEQ,
      "--output_dir=%s" % (work / "bad_case"), "--do_train"]),
          "--do_lower_case=False but the tokenizer_config.json of the "
          "Hugging Face --init_checkpoint %s says do_lower_case=True" % hf_dir)
  assert not (work / "bad_case").exists()


@pytest.mark.parametrize("ours,theirs", sorted(
    checkpoint_formats.HF_ACTIVATIONS.items()))
def test_hf_activation_computes_ours(ours, theirs):
  x = np.linspace(-6.0, 6.0, 2001).astype(np.float32)
  with tf.Graph().as_default(), tf.Session() as sess:
    fn = modeling.get_activation(ours)
    expected = sess.run(fn(tf.constant(x))) if fn else x
  actual = transformers.activations.ACT2FN[theirs](torch.tensor(x)).numpy()
  np.testing.assert_allclose(actual, expected, atol=1e-6, rtol=0)
  if ours == "gelu":
    # HF's "gelu" is the erf form: the mapping matters.
    exact = transformers.activations.ACT2FN["gelu"](torch.tensor(x)).numpy()
    assert np.abs(exact - expected).max() > 1e-4
