"""Pretraining without next-sentence prediction (RoBERTa's FULL-SENTENCES).

create_pretraining_data.py --next_sentence_prediction=false on the sample
corpus: single segments of consecutive sentences filling the length,
documents separated by [SEP], in every data-creation path; the records are
recognised by their features; the task trains the masked LM alone (its loss
is the masked-LM loss, no next-sentence variables, no pooler gradient); the
checkpoint exports as Hugging Face's BertForMaskedLM.
"""

import dataclasses
import json
import os
import random

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import errors
from bertkit.common import heads
from bertkit.data import corpus_input
from bertkit.data import creation_options
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.data import sharded_mode
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.input import dynamic_masking
from bertkit.engine.input import input_pipeline
from bertkit.engine.input import record_checks
from bertkit.tasks.pretraining import task as pretraining
import create_pretraining_data
import modeling
import tokenization
from conftest import (REPO_ROOT, expect_user_error, load_checkpoint,
                      options_from_args, program_in_process, reachable_ops,
                      read_eval_results, run_ok, run_program,
                      tiny_bert_config)

SAMPLE_CORPUS = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
VOCAB = os.path.join(REPO_ROOT, "tests", "fixtures", "create_pretraining_data",
                     "vocab.txt")
SEQ, PREDS = 32, 5
# The tokens between [CLS] and the final [SEP].
CAPACITY = SEQ - 2
CONFIG = tiny_bert_config(vocab_size=305)
NO_NSP = pretraining_instances.InstanceParams(
    max_seq_length=SEQ, short_seq_prob=0.1, masked_lm_prob=0.15,
    max_predictions_per_seq=PREDS, do_whole_word_mask=False,
    masking=pretraining_instances.DYNAMIC, next_sentence_prediction=False)


def cpd_args(*extra):
  return ["create_pretraining_data.py", "--input_file=" + SAMPLE_CORPUS,
          "--vocab_file=" + VOCAB, "--max_seq_length=%d" % SEQ,
          "--max_predictions_per_seq=%d" % PREDS, "--dupe_factor=1",
          "--next_sentence_prediction=false"] + list(extra)


def cpd_options(*extra):
  """The CreationOptions of `cpd_args(*extra)`, to run it in this process."""
  return options_from_args(creation_options.CreationOptions,
                           cpd_args(*extra)[1:])


def read_records(path):
  return [pretraining_records.parse_example(r)
          for r in tf.io.tf_record_iterator(str(path))]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
  """{masking: path} of no-NSP records of the sample corpus, static (the
  program's) and dynamic (its faithful mode in this process), same seed."""
  d = tmp_path_factory.mktemp("no_nsp")
  paths = {masking: d / ("%s.tfrecord" % masking)
           for masking in pretraining_instances.MASKING_CHOICES}
  create_pretraining_data.run(cpd_options(
      "--output_file=%s" % paths[pretraining_instances.STATIC]))
  create_pretraining_data.run(creation_options.CreationOptions(
      input_file=SAMPLE_CORPUS, vocab_file=VOCAB,
      output_file=str(paths[pretraining_instances.DYNAMIC]),
      random_seed=12345, dupe_factor=1, **dataclasses.asdict(NO_NSP)))
  return paths


def sample_documents(vocab):
  """The sample corpus's documents as faithful mode reads them (token ids)."""
  tokenizer = pretraining_instances.make_tokenizer(vocab, True, "fast")
  piece = corpus_input.ShardPiece(SAMPLE_CORPUS, 0,
                                  os.path.getsize(SAMPLE_CORPUS), "text")
  return corpus_input.read_documents([piece], tokenizer.tokenize_to_ids,
                                     lambda *_: None,
                                     files_end_documents=False)


# -------------------------------------------------------------- records


def test_sequences_are_consecutive_sentences_filling_the_length():
  """The records in the order they are made (before the final shuffle)
  read the shuffled documents' sentences back, in order, all of them; a
  [SEP] stands exactly between two documents; a record ends only when the
  next sentence (and its separator) would not fit."""
  vocab = pretraining_instances.load_checked_vocab(VOCAB)
  cls, sep = vocab[tokenization.CLS_TOKEN], vocab[tokenization.SEP_TOKEN]
  documents = sample_documents(vocab)
  encoder = pretraining_instances.make_encoder(vocab, NO_NSP)
  codes = encoder.token_codes
  made = []
  maker = pretraining_instances.InstanceMaker(random.Random(7), NO_NSP, vocab,
                                              encoder)
  maker.make_records([[[codes[i] for i in s] for s in d] for d in documents],
                     1, made.append, lambda *_: None)
  # make_records shuffles the documents first, as random.shuffle does.
  random.Random(7).shuffle(documents)
  # (starts a document, tokens): sentences, longer ones cut to CAPACITY.
  stream = [(k == 0 and start == 0, sentence[start:start + CAPACITY])
            for document in documents
            for k, sentence in enumerate(document)
            for start in range(0, len(sentence), CAPACITY)]
  assert any(len(s) > CAPACITY for d in documents for s in d)
  following = 0
  spanning = 0
  for record in map(pretraining_records.parse_example, made):
    assert pretraining_records.record_kind_of(record) is (
        pretraining_records.UNMASKED_NO_NSP)
    length = sum(record["input_mask"])
    ids = record["input_ids"]
    assert ids[0] == cls and ids[length - 1] == sep
    assert record["input_mask"] == [1] * length + [0] * (SEQ - length)
    assert record["segment_ids"] == [0] * SEQ
    body = ids[1:length - 1]
    position = 0
    while position < len(body):
      starts_document, tokens = stream[following]
      if position and starts_document:
        assert body[position] == sep
        position += 1
        spanning += 1
      assert body[position:position + len(tokens)] == tokens
      position += len(tokens)
      following += 1
    if following < len(stream):
      starts_document, tokens = stream[following]
      assert len(body) + starts_document + len(tokens) > CAPACITY
  assert following == len(stream)
  assert spanning > 0
  assert sep not in [token for _, tokens in stream for token in tokens]


def test_masks_may_take_every_token_but_cls_and_the_separators():
  """With every token to be masked, the masks take exactly the positions of
  the tokens that are neither [CLS] nor a [SEP], document separators
  included."""
  vocab = pretraining_instances.load_checked_vocab(VOCAB)
  sep = vocab[tokenization.SEP_TOKEN]
  params = dataclasses.replace(NO_NSP, masking=pretraining_instances.STATIC,
                               masked_lm_prob=1.0,
                               max_predictions_per_seq=SEQ)
  encoder = pretraining_instances.make_encoder(vocab, params)
  made = []
  pretraining_instances.InstanceMaker(
      random.Random(3), params, vocab, encoder).make_records(
          [[[encoder.token_codes[i] for i in s] for s in d]
           for d in sample_documents(vocab)], 1, made.append,
          lambda *_: None)
  separators = 0
  for record in map(pretraining_records.parse_example, made):
    length = sum(record["input_mask"])
    count = int(sum(record["masked_lm_weights"]))
    positions = record["masked_lm_positions"][:count]
    original = list(record["input_ids"])
    for position, token in zip(positions, record["masked_lm_ids"]):
      original[position] = token
    assert positions == [i for i in range(1, length - 1)
                         if original[i] != sep]
    separators += original[1:length - 1].count(sep)
  assert separators > 0


def test_static_records_hold_the_same_tokens_masked_off_the_separators(
    records):
  """Static records of the same seed are the dynamic ones masked: putting
  their masked_lm_ids back gives the dynamic records' tokens; no mask is on
  [CLS] or a [SEP], and each record has upstream's number of masks."""
  vocab = tokenization.load_vocab(VOCAB)
  specials = {vocab[tokenization.CLS_TOKEN], vocab[tokenization.SEP_TOKEN]}
  static = read_records(records[pretraining_instances.STATIC])
  dynamic = read_records(records[pretraining_instances.DYNAMIC])
  assert len(static) == len(dynamic) > 100
  for masked, original in zip(static, dynamic):
    assert pretraining_records.record_kind_of(masked) is (
        pretraining_records.MASKED_NO_NSP)
    count = int(sum(masked["masked_lm_weights"]))
    length = sum(masked["input_mask"])
    assert count == dynamic_masking.num_to_predict(length, PREDS, 0.15)
    restored = list(masked["input_ids"])
    for position, token in zip(masked["masked_lm_positions"][:count],
                               masked["masked_lm_ids"][:count]):
      assert token not in specials
      restored[position] = token
    assert restored == original["input_ids"]
    assert masked["segment_ids"] == original["segment_ids"] == [0] * SEQ


def test_records_are_tensorflows_bytes_and_recognised_as_no_nsp(records):
  for masking, kind in ((pretraining_instances.STATIC,
                         pretraining_records.MASKED_NO_NSP),
                        (pretraining_instances.DYNAMIC,
                         pretraining_records.UNMASKED_NO_NSP)):
    path = str(records[masking])
    for raw in list(tf.io.tf_record_iterator(path))[:5]:
      values = pretraining_records.parse_example(raw)
      assert pretraining_records.tf_example(
          kind, values).SerializeToString() == raw
    found, slots = record_checks.check_pretraining_records(
        [path], SEQ, PREDS, vocab_size=CONFIG["vocab_size"])
    assert (found, slots) == (kind, None)
    assert not pretraining_records.has_next_sentence(found)
  assert pretraining_records.has_next_sentence(pretraining_records.MASKED)


def test_pack_sequences_is_refused(tmp_path):
  # A launch: the program's exit code and one error line (refused before
  # TensorFlow is imported, so the launch is quick).
  result = run_program(cpd_args("--output_file=%s" % (tmp_path / "out"),
                                "--pack_sequences"))
  expect_user_error(result, "--pack_sequences",
                    "--next_sentence_prediction=false")
  assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_sharded_and_dask_modes_write_no_nsp_records(tmp_path):
  """--num_workers and --dask_scheduler carry the flag to their workers:
  the same shard files, of the no-NSP kind, which the manifest records."""
  import distributed  # pylint: disable=g-import-not-at-top
  run_ok(cpd_args("--num_workers=2", "--shard_size_mb=0.03",
                  "--output_dir=%s" % (tmp_path / "local")))
  manifest = json.loads((tmp_path / "local" / "part.manifest.json")
                        .read_text())
  assert manifest["params"]["next_sentence_prediction"] is False
  shards = sorted(p for p in os.listdir(tmp_path / "local")
                  if p.endswith(".tfrecord"))
  assert len(shards) > 2
  for name in shards:
    for record in read_records(tmp_path / "local" / name):
      assert pretraining_records.record_kind_of(record) is (
          pretraining_records.MASKED_NO_NSP)
  with distributed.LocalCluster(n_workers=2, processes=False,
                                protocol="tcp://", host="127.0.0.1",
                                dashboard_address=None) as cluster:
    run_sharded_on_dask(cluster.scheduler_address, tmp_path / "dask")
  for name in shards:
    assert ((tmp_path / "dask" / name).read_bytes() ==
            (tmp_path / "local" / name).read_bytes())


def run_sharded_on_dask(address, output_dir):
  """run_sharded with the options of `cpd_args`' flags, on a Dask cluster."""
  params = dataclasses.replace(NO_NSP, masking=pretraining_instances.STATIC)
  sharded_mode.run_sharded(creation_options.CreationOptions(
      input_file=SAMPLE_CORPUS, vocab_file=VOCAB, random_seed=12345,
      dupe_factor=1, output_dir=str(output_dir), shard_size_mb=0.03,
      dask_scheduler=address, **dataclasses.asdict(params)))


# ----------------------------------------------------------------- model


def batch_of(path, count=4):
  """The first `count` records of `path` as [count, ...] constant tensors."""
  rows = read_records(path)[:count]
  return {name: tf.constant([row[name] for row in rows],
                            tf.float32 if name == "masked_lm_weights"
                            else tf.int32)
          for name in rows[0]}


def test_loss_is_the_masked_lm_loss_alone(records, graph):
  """In one graph: the no-NSP task's training and eval losses equal the
  masked-LM loss of the full model on the same batch (the same variables),
  the eval loss exactly, and a NumPy reference of it. The task's variables are those of
  the MASKED_LM export (no next-sentence head), which recognises them; its
  loss does not depend on the pooler."""
  config = modeling.BertConfig.from_dict(CONFIG)
  features = batch_of(records[pretraining_instances.STATIC])
  assert "next_sentence_labels" not in features
  (loss_fn,) = pretraining.micro_batch_loss_fns(
      config, features, 1, next_sentence_prediction=False)
  loss = loss_fn()
  # The pooler is built but nothing of it reaches the loss: no gradient.
  assert not [op for op in reachable_ops([loss]) if "pooler" in op.name]
  built = {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}
  table = checkpoint_formats.weight_table(config, heads.MASKED_LM)
  assert {name: shape for name, _, shape, _ in table} == built
  assert checkpoint_formats.detect_head(built) == (
      heads.MASKED_LM, None)
  with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
    eval_loss, metrics = pretraining.eval_outputs(
        config, features, next_sentence_prediction=False)
    with_labels = dict(features, next_sentence_labels=tf.zeros([4, 1],
                                                               tf.int32))
    (masked_lm_loss, _, log_probs), (next_sentence_loss, _, _) = (
        pretraining.pretraining_model(config, with_labels, False))
  assert set(metrics) == {"masked_lm_accuracy", "masked_lm_loss"}
  with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    sess.run(tf.local_variables_initializer())
    values = sess.run({
        "loss": loss, "eval_loss": eval_loss, "masked_lm": masked_lm_loss,
        "next_sentence": next_sentence_loss, "log_probs": log_probs,
        "updates": {k: update for k, (_, update) in metrics.items()},
        "ids": features["masked_lm_ids"],
        "weights": features["masked_lm_weights"]})
    metric_values = sess.run({k: value for k, (value, _) in metrics.items()})
  assert values["eval_loss"] == values["masked_lm"]
  # Training runs the head on the weighted predictions alone: the same sum
  # in another order.
  assert values["loss"] == pytest.approx(values["masked_lm"], rel=1e-6)
  assert values["next_sentence"] > 0.1
  weights = values["weights"].reshape(-1)
  picked = values["log_probs"][np.arange(weights.size),
                               values["ids"].reshape(-1)]
  assert values["loss"] == pytest.approx(
      -np.sum(weights * picked) / (np.sum(weights) + 1e-5), rel=1e-6)
  assert metric_values["masked_lm_loss"] == pytest.approx(
      -np.sum(weights * picked) / np.sum(weights), rel=1e-6)
  correct = values["log_probs"].argmax(-1) == values["ids"].reshape(-1)
  assert metric_values["masked_lm_accuracy"] == pytest.approx(
      np.sum(weights * correct) / np.sum(weights))


@pytest.mark.slow
def test_drawn_masks_on_masked_records_start_from_their_tokens(records,
                                                                graph):
  """Masks drawn for no-NSP masked records (run_pretraining --masking=
  dynamic) replace theirs: the tokens left unmasked are the originals."""
  vocab = pretraining_instances.load_checked_vocab(VOCAB)
  spec = input_pipeline.PretrainingInput(
      SEQ, PREDS, pretraining_records.MASKED_NO_NSP,
      masking=dynamic_masking.masking_params_from_vocab(
          vocab, SEQ, PREDS, 0.15, False))
  input_fn = input_pipeline.pretraining_input_fn_builder(
      [str(records[pretraining_instances.STATIC])], spec, False, 16, 1)
  features = tf.data.make_one_shot_iterator(input_fn()).get_next()
  with tf.Session() as sess:
    batch = sess.run(features)
  originals = read_records(records[pretraining_instances.DYNAMIC])[:16]
  for row, original in enumerate(originals):
    count = int(batch["masked_lm_weights"][row].sum())
    positions = batch["masked_lm_positions"][row][:count]
    np.testing.assert_array_equal(batch["masked_lm_ids"][row][:count],
                                  np.array(original["input_ids"])[positions])
    kept = np.ones(SEQ, bool)
    kept[positions] = False
    np.testing.assert_array_equal(batch["input_ids"][row][kept],
                                  np.array(original["input_ids"])[kept])


# ------------------------------------------------------- training, export


def pretrain_args(records, output_dir, *extra):
  """run_pretraining.py on the dynamic no-NSP records, 4 steps, evaluated."""
  return ["run_pretraining.py", "--bert_config_file=%s" % (
      output_dir.parent / "tiny.json"),
          "--input_file=%s" % records[pretraining_instances.DYNAMIC],
          "--vocab_file=" + VOCAB, "--output_dir=%s" % output_dir,
          "--do_train", "--do_eval", "--max_seq_length=%d" % SEQ,
          "--max_predictions_per_seq=%d" % PREDS, "--train_batch_size=8",
          "--num_train_steps=4", "--num_warmup_steps=1",
          "--learning_rate=1e-3", "--tf_random_seed=1",
          "--max_eval_steps=2"] + list(extra)


@pytest.mark.slow
def test_program_trains_the_masked_lm_and_exports_a_bert_for_masked_lm(
    records, tmp_path):
  """run_pretraining.py trains the masked LM alone: masked-LM metrics only,
  no next-sentence head in the checkpoint, every weight but the pooler
  trained. The checkpoint exports as BertForMaskedLM, which loads every
  weight and computes our masked-LM log-probabilities. --masking=static on
  records without masks is a one-line user error."""
  import export_checkpoint  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  config_file = tmp_path / "tiny.json"
  config_file.write_text(json.dumps(CONFIG))
  output_dir = tmp_path / "out"
  # A checkpoint after the first step too: the weights steps 2-4 move.
  program_in_process(pretrain_args(records, output_dir,
                                   "--save_checkpoints_steps=1"))
  assert set(read_eval_results(str(output_dir))) == {
      "global_step", "loss", "masked_lm_accuracy", "masked_lm_loss"}
  first = load_checkpoint(str(output_dir / "model.ckpt-1"))
  prefix = tf.train.latest_checkpoint(str(output_dir))
  last = load_checkpoint(prefix)
  assert prefix.endswith("-4")
  assert "cls/predictions/output_bias" in last
  assert not [n for n in last if n.startswith("cls/seq_relationship")]
  trainable = [n for n in last if n.startswith(("bert/", "cls/")) and
               "adam" not in n]
  assert {n for n in trainable if np.array_equal(first[n], last[n])} == {
      "bert/pooler/dense/kernel", "bert/pooler/dense/bias"}
  with pytest.raises(errors.UserError) as raised:
    program_in_process(pretrain_args(records, tmp_path / "static",
                                     "--masking=static"))
  message = str(raised.value)
  assert "\n" not in message
  for fragment in ("--masking=static", "unmasked without next sentence",
                   "no masks"):
    assert fragment in message, message

  _, head = export_checkpoint.export(prefix, str(config_file), VOCAB, True,
                                     str(tmp_path / "export"),
                                     ["huggingface"])
  assert head == heads.MASKED_LM
  hf_dir = str(tmp_path / "export" / "huggingface")
  assert json.loads((tmp_path / "export" / "huggingface" / "config.json")
                    .read_text())["architectures"] == ["BertForMaskedLM"]
  model, info = transformers.BertForMaskedLM.from_pretrained(
      hf_dir, output_loading_info=True)
  assert info["missing_keys"] == [] and info["unexpected_keys"] == []
  _, info = transformers.BertForPreTraining.from_pretrained(
      hf_dir, output_loading_info=True)
  # Only what this model never trained is missing.
  assert sorted(info["missing_keys"]) == [
      "bert.pooler.dense.bias", "bert.pooler.dense.weight",
      "cls.seq_relationship.bias", "cls.seq_relationship.weight"]

  rows = read_records(records[pretraining_instances.STATIC])[:4]
  batch = {name: np.array([row[name] for row in rows], np.int32)
           for name in ("input_ids", "input_mask", "segment_ids",
                        "masked_lm_positions")}
  with tf.Graph().as_default(), tf.Session() as sess:
    config = modeling.BertConfig.from_dict(CONFIG)
    bert = modeling.BertModel(config, False,
                              *[tf.constant(batch[name]) for name in (
                                  "input_ids", "input_mask", "segment_ids")])
    positions = tf.constant(batch["masked_lm_positions"])
    _, _, log_probs = pretraining.get_masked_lm_output(
        config, bert.get_sequence_output(), bert.get_embedding_table(),
        positions, tf.zeros_like(positions), tf.ones(positions.shape))
    tf.train.Saver().restore(sess, prefix)
    ours = sess.run(log_probs)
  model.eval()
  with torch.no_grad():
    logits = model(input_ids=torch.tensor(batch["input_ids"]).long(),
                   attention_mask=torch.tensor(batch["input_mask"]).long(),
                   token_type_ids=torch.tensor(batch["segment_ids"]).long()
                   ).logits
  index = torch.tensor(batch["masked_lm_positions"]).long()
  theirs = torch.log_softmax(torch.gather(
      logits, 1, index[:, :, None].expand(-1, -1, logits.shape[-1])), -1)
  np.testing.assert_allclose(theirs.reshape(ours.shape).numpy(), ours,
                             atol=1e-4, rtol=0)


def test_masked_no_nsp_records_keep_their_masks():
  # pylint: disable-next=g-import-not-at-top
  from bertkit.tasks.pretraining import trainer
  for masking in ("auto", "static"):
    assert trainer.masking_for_records(
        masking, pretraining_records.MASKED_NO_NSP, None, 32, 5, 0.15,
        False) is None
