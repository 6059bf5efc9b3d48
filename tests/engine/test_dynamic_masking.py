"""Masks drawn in the input pipeline (--masking=dynamic), on real text.

Records come from sample_data/corpus.txt through create_vocab.py and
create_pretraining_data.py (their run() in this process, with a user's
flags): upstream's (static) records and unmasked ones of the same seed.
"""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.data import packing
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.engine.input import dynamic_masking
from bertkit.engine.input import input_pipeline
from bertkit.tasks.pretraining import trainer as pretraining_trainer
import tokenization
from conftest import REPO_ROOT, expect_user_error, tiny_bert_config
from conftest import load_checkpoint, program_in_process, run_program
from bertkit.common.errors import UserError
from helpers.records import PREDS, SEQ, VOCAB, read_examples

MASKED, UNMASKED = pretraining_records.MASKED, pretraining_records.UNMASKED
UPSTREAM = pretraining_instances.UPSTREAM_MASKS
PER_TOKEN = pretraining_instances.PER_TOKEN_MASKS
MASK_ONLY = pretraining_instances.MASK_TOKEN_ONLY
# conftest's tiny BERT (positions for SEQ tokens), with the vocab's size.
CONFIG = tiny_bert_config(vocab_size=VOCAB)


def create_data_args(d, output, *extra):
  return ["create_pretraining_data.py",
          "--input_file=%s" % os.path.join(REPO_ROOT, "sample_data",
                                            "corpus.txt"),
          "--output_file=%s" % (d / output),
          "--vocab_file=%s" % (d / "vocab.txt"),
          "--max_seq_length=%d" % SEQ,
          "--max_predictions_per_seq=%d" % PREDS] + list(extra)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  d = tmp_path_factory.mktemp("dynamic_masking")
  program_in_process([
      "create_vocab.py",
      "--input_file=%s" % os.path.join(REPO_ROOT, "sample_data",
                                       "corpus.txt"),
      "--output_file=%s" % (d / "vocab.txt"), "--vocab_size=%d" % VOCAB])
  program_in_process(create_data_args(d, "static.tfrecord",
                                      "--dupe_factor=1"))
  # No --dupe_factor: 1 is the default of --masking=dynamic.
  program_in_process(create_data_args(d, "unmasked.tfrecord",
                                      "--masking=dynamic"))
  with open(d / "config.json", "w") as f:
    json.dump(CONFIG, f)
  vocab = tokenization.load_vocab(str(d / "vocab.txt"))
  return {"dir": d, "static": str(d / "static.tfrecord"),
          "unmasked": str(d / "unmasked.tfrecord"), "vocab": vocab}


def parsed(path):
  return [pretraining_records.parse_example(r)
          for r in tf.io.tf_record_iterator(path)]


def unmask(record):
  """A static record's input_ids with its masked_lm_ids put back."""
  ids = list(record["input_ids"])
  for position, original, weight in zip(record["masked_lm_positions"],
                                        record["masked_lm_ids"],
                                        record["masked_lm_weights"]):
    if weight:
      ids[position] = original
  return ids


# ------------------------------------------------------------ records ----


def test_unmasked_records_hold_the_static_records_token_pairs(data):
  static, unmasked = parsed(data["static"]), parsed(data["unmasked"])
  assert len(unmasked) == len(static) > 500
  for s, u in zip(static, unmasked):
    assert set(u) == {f.name for f in UNMASKED.features}
    assert u["input_ids"] == unmask(s)
    for name in ("input_mask", "segment_ids", "next_sentence_labels"):
      assert u[name] == s[name]


def test_unmasked_records_are_what_tensorflow_serializes(data):
  for raw in list(tf.io.tf_record_iterator(data["unmasked"]))[:50]:
    values = pretraining_records.parse_example(raw)
    assert pretraining_records.tf_example(
        UNMASKED, values).SerializeToString() == raw


def test_sharded_mode_writes_unmasked_records_too(data):
  outputs = {}
  for masking in ("static", "dynamic"):
    program_in_process(create_data_args(
        data["dir"], masking, "--num_workers=2", "--shard_size_mb=0.05",
        "--dupe_factor=1", "--masking=%s" % masking))
    outputs[masking] = sorted(str(p) for p in data["dir"].glob(
        masking + "-*"))
  assert len(outputs["static"]) == len(outputs["dynamic"]) > 1
  for static_path, unmasked_path in zip(outputs["static"],
                                        outputs["dynamic"]):
    static, unmasked = parsed(static_path), parsed(unmasked_path)
    assert len(static) == len(unmasked)
    assert [unmask(s) for s in static] == [u["input_ids"] for u in unmasked]
    assert all(set(u) == {f.name for f in UNMASKED.features}
               for u in unmasked)


def test_the_record_table_is_upstreams_reader_spec():
  spec = input_pipeline.record_feature_spec(MASKED, 128, 20)
  assert spec == {
      "input_ids": tf.FixedLenFeature([128], tf.int64),
      "input_mask": tf.FixedLenFeature([128], tf.int64),
      "segment_ids": tf.FixedLenFeature([128], tf.int64),
      "masked_lm_positions": tf.FixedLenFeature([20], tf.int64),
      "masked_lm_ids": tf.FixedLenFeature([20], tf.int64),
      "masked_lm_weights": tf.FixedLenFeature([20], tf.float32),
      "next_sentence_labels": tf.FixedLenFeature([1], tf.int64),
  }
  unmasked_spec = input_pipeline.record_feature_spec(UNMASKED, 128, 20)
  assert unmasked_spec == {name: spec[name] for name in (
      "input_ids", "input_mask", "segment_ids", "next_sentence_labels")}


# ----------------------------------------------------- drawn in tf.data ----


def masking_params(data, whole_word=False, prob=0.15, seq_length=SEQ,
                   max_predictions=PREDS, rule=UPSTREAM):
  return dynamic_masking.masking_params_from_vocab(
      data["vocab"], seq_length, max_predictions, prob, whole_word, rule)


@pytest.fixture(scope="module")
def two_epochs(data):
  originals = parsed(data["unmasked"])
  count = len(originals) // 8 * 8
  examples = read_examples(data["unmasked"], UNMASKED, masking_params(data),
                           2 * len(originals))
  return originals, examples[:count], examples[len(originals):][:count]


def check_upstreams_rule(original, drawn, vocab, budget_of=None):
  """Asserts the masks of one example follow upstream's rule; returns the
  (original, drawn) token pairs at the masked positions."""
  ids = original["input_ids"]
  length = sum(original["input_mask"])
  weights = list(drawn["masked_lm_weights"])
  count = int(sum(weights))
  assert weights == [1.0] * count + [0.0] * (PREDS - count)
  budget = dynamic_masking.num_to_predict(length, PREDS, 0.15)
  assert count == (budget if budget_of is None else budget_of(count, budget))
  positions = list(drawn["masked_lm_positions"])
  assert positions[count:] == [0] * (PREDS - count)
  assert list(drawn["masked_lm_ids"][count:]) == [0] * (PREDS - count)
  chosen = positions[:count]
  assert chosen == sorted(set(chosen))
  specials = {vocab["[CLS]"], vocab["[SEP]"]}
  for p in chosen:
    assert p < length and ids[p] not in specials
  assert list(drawn["masked_lm_ids"][:count]) == [ids[p] for p in chosen]
  for p in range(SEQ):
    if p not in chosen:
      assert drawn["input_ids"][p] == ids[p]
  for name in ("input_mask", "segment_ids", "next_sentence_labels"):
    assert list(drawn[name]) == list(original[name])
  return [(ids[p], drawn["input_ids"][p]) for p in chosen]


def test_drawn_masks_follow_upstreams_rule(data, two_epochs):
  originals, first, second = two_epochs
  vocab = data["vocab"]
  pairs = []
  for epoch in (first, second):
    for original, drawn in zip(originals, epoch):
      pairs += check_upstreams_rule(original, drawn, vocab)
  masked = sum(new == vocab["[MASK]"] for _, new in pairs)
  kept = sum(new == old for old, new in pairs)
  assert len(pairs) > 8000
  # 80 % [MASK], 10 % kept, 10 % a random id (which may be the original).
  assert masked / len(pairs) == pytest.approx(0.8, abs=0.02)
  assert kept / len(pairs) == pytest.approx(0.1, abs=0.02)
  assert (len(pairs) - masked - kept) / len(pairs) == pytest.approx(
      0.1, abs=0.02)


def test_every_epoch_draws_new_masks_the_same_for_the_same_seed(
    data, two_epochs):
  _, first, second = two_epochs
  overlap = []
  for a, b in zip(first, second):
    pa = set(a["masked_lm_positions"][a["masked_lm_weights"] > 0])
    pb = set(b["masked_lm_positions"][b["masked_lm_weights"] > 0])
    overlap.append(len(pa & pb) / len(pa))
  # Independent draws of ~15 % of the candidates: ~0.17 overlap, not 1.
  assert 0.1 < np.mean(overlap) < 0.3
  again = read_examples(data["unmasked"], UNMASKED, masking_params(data), 64)
  other_seed = read_examples(data["unmasked"], UNMASKED,
                             masking_params(data), 64, seed=2)
  for name in ("input_ids", "masked_lm_positions"):
    assert np.array_equal(np.stack([e[name] for e in again]),
                          np.stack([e[name] for e in first[:64]]))
    assert not np.array_equal(np.stack([e[name] for e in other_seed]),
                              np.stack([e[name] for e in first[:64]]))


def replacement_shares(pairs, vocab):
  """The shares of [MASK], kept and other tokens among (old, new) pairs."""
  masked = sum(new == vocab["[MASK]"] for _, new in pairs)
  kept = sum(new == old for old, new in pairs)
  return (masked / len(pairs), kept / len(pairs),
          (len(pairs) - masked - kept) / len(pairs))


def test_mask_only_masks_upstreams_count_with_mask_tokens_alone(
    data, two_epochs):
  originals, upstream, _ = two_epochs
  vocab = data["vocab"]
  drawn = read_examples(data["unmasked"], UNMASKED,
                        masking_params(data, rule=MASK_ONLY), len(upstream))
  pairs = []
  for original, mine, theirs in zip(originals, drawn, upstream):
    pairs += check_upstreams_rule(original, mine, vocab)
    # The same draws choose the same positions; only the tokens differ.
    assert np.array_equal(mine["masked_lm_positions"],
                          theirs["masked_lm_positions"])
  assert len(pairs) > 4000
  assert replacement_shares(pairs, vocab) == (1.0, 0.0, 0.0)


def check_per_token_rule(original, drawn, vocab, max_predictions):
  """Asserts one example's masks are among its candidates, ascending, at
  most max_predictions; returns the (original, drawn) token pairs and the
  number of candidates."""
  ids, length = original["input_ids"], sum(original["input_mask"])
  weights = list(drawn["masked_lm_weights"])
  count = int(sum(weights))
  assert weights == [1.0] * count + [0.0] * (max_predictions - count)
  chosen = list(drawn["masked_lm_positions"][:count])
  assert chosen == sorted(set(chosen))
  specials = {vocab["[CLS]"], vocab["[SEP]"]}
  candidates = [p for p in range(length) if ids[p] not in specials]
  assert set(chosen) <= set(candidates)
  assert list(drawn["masked_lm_ids"][:count]) == [ids[p] for p in chosen]
  for p in range(len(ids)):
    if p not in chosen:
      assert drawn["input_ids"][p] == ids[p]
  return [(ids[p], drawn["input_ids"][p]) for p in chosen], len(candidates)


def test_per_token_masks_each_candidate_with_the_masking_rate(data,
                                                              two_epochs):
  originals, _, _ = two_epochs
  vocab = data["vocab"]
  # Room for every draw: the cap (P) is not what is measured here.
  drawn = read_examples(data["unmasked"], UNMASKED, masking_params(
      data, rule=PER_TOKEN, max_predictions=SEQ), len(originals))
  pairs, counts, candidates = [], [], []
  for original, example in zip(originals, drawn):
    more, num_candidates = check_per_token_rule(original, example, vocab,
                                                SEQ)
    pairs += more
    counts.append(len(more))
    candidates.append(num_candidates)
  # Each candidate on its own: the share is the rate over all candidates,
  # and the count varies from sequence to sequence (upstream's does not,
  # for equal lengths), as a binomial draw does.
  share = sum(counts) / sum(candidates)
  assert share == pytest.approx(0.15, abs=0.01)
  lengths = {}
  for count, num_candidates in zip(counts, candidates):
    lengths.setdefault(num_candidates, []).append(count)
  full = max(lengths.items(), key=lambda item: len(item[1]))[1]
  assert len(set(full)) > 3
  assert np.var(counts) > 0
  masked, kept, other = replacement_shares(pairs, vocab)
  assert (masked, kept, other) == (pytest.approx(0.8, abs=0.02),
                                   pytest.approx(0.1, abs=0.02),
                                   pytest.approx(0.1, abs=0.02))


def test_per_token_masks_keep_at_most_p_and_the_same_draws_for_a_seed(
    data, two_epochs):
  originals, _, _ = two_epochs
  vocab = data["vocab"]
  capped = masking_params(data, prob=0.5, rule=PER_TOKEN)
  first = read_examples(data["unmasked"], UNMASKED, capped, 64)
  for original, example in zip(originals, first):
    check_per_token_rule(original, example, vocab, PREDS)
  assert max(int(sum(e["masked_lm_weights"])) for e in first) == PREDS
  again = read_examples(data["unmasked"], UNMASKED, capped, 64)
  other_seed = read_examples(data["unmasked"], UNMASKED, capped, 64, seed=2)
  for name in ("input_ids", "masked_lm_positions"):
    assert np.array_equal(np.stack([e[name] for e in again]),
                          np.stack([e[name] for e in first]))
    assert not np.array_equal(np.stack([e[name] for e in other_seed]),
                              np.stack([e[name] for e in first]))


def test_mask_rules_other_than_upstreams_need_drawn_masks(data):
  with pytest.raises(UserError) as raised:
    pretraining_trainer.masking_for_records(
        "auto", MASKED, str(data["dir"] / "vocab.txt"), SEQ, PREDS, 0.15,
        False, mask_rule=PER_TOKEN)
  assert str(raised.value) == (
      "--mask_rule=per_token is a rule of masks drawn in the input pipeline, "
      "but the --input_file records hold their own; give --masking=dynamic "
      "to draw new ones")
  assert pretraining_trainer.masking_for_records(
      "dynamic", MASKED, str(data["dir"] / "vocab.txt"), SEQ, PREDS, 0.15,
      False, mask_rule=PER_TOKEN).mask_rule == PER_TOKEN


def test_masks_do_not_depend_on_batching_or_pipelines(data, two_epochs):
  _, first, _ = two_epochs
  # Two pipelines (workers) reading every other record of the one file,
  # per-replica batch 3: example k is pipeline k % 2's (k // 2)-th.
  per_pipeline = [read_examples(
      data["unmasked"], UNMASKED, masking_params(data), 48, batch=6,
      num_replicas=2, input_context=tf.distribute.InputContext(
          num_input_pipelines=2, input_pipeline_id=i,
          num_replicas_in_sync=2)) for i in (0, 1)]
  for k in range(96):
    for name, value in per_pipeline[k % 2][k // 2].items():
      assert np.array_equal(value, first[k][name]), (k, name)


def test_static_records_are_re_masked(data):
  static = parsed(data["static"])
  originals = parsed(data["unmasked"])
  drawn = read_examples(data["static"], MASKED, masking_params(data), 200)
  changed = 0
  for record, original, example in zip(static, originals, drawn):
    check_upstreams_rule(original, example, data["vocab"])
    changed += list(example["masked_lm_positions"]) != list(
        record["masked_lm_positions"])
  assert changed > 150


def test_whole_word_masks_take_whole_words(data):
  vocab = data["vocab"]
  continuation = {i for t, i in vocab.items() if t.startswith("##")}
  originals = parsed(data["unmasked"])
  drawn = read_examples(data["unmasked"], UNMASKED,
                        masking_params(data, whole_word=True), 400)
  multi_piece = 0
  for original, example in zip(originals, drawn):
    ids = original["input_ids"]
    length = sum(original["input_mask"])
    candidates = [p for p in range(length)
                  if ids[p] not in (vocab["[CLS]"], vocab["[SEP]"])]
    words = []
    for p in candidates:
      if words and ids[p] in continuation:
        words[-1].append(p)
      else:
        words.append([p])
    count = int(example["masked_lm_weights"].sum())
    chosen = set(example["masked_lm_positions"][:count])
    budget = dynamic_masking.num_to_predict(length, PREDS, 0.15)
    # Words are taken whole, while they fit: every word left out was
    # larger than what remained.
    for word in words:
      taken = chosen & set(word)
      assert not taken or taken == set(word), (word, chosen)
      if not taken:
        assert len(word) > budget - count
      multi_piece += len(taken) > 1
    check_upstreams_rule(original, example, vocab,
                         budget_of=lambda c, b: c if c <= b else -1)
  assert multi_piece > 50


def test_counts_round_half_to_even_and_respect_the_caps(tmp_path, data):
  vocab = data["vocab"]
  word = vocab["the"]

  def record(num_a, num_b):
    tokens = ([vocab["[CLS]"]] + [word] * num_a + [vocab["[SEP]"]] +
              [word] * num_b + [vocab["[SEP]"]])
    pad = [0] * (SEQ - len(tokens))
    return pretraining_records.tf_example(UNMASKED, {
        "input_ids": tokens + pad, "input_mask": [1] * len(tokens) + pad,
        "segment_ids": [0] * (num_a + 2) + [1] * (num_b + 1) + pad,
        "next_sentence_labels": [0]}).SerializeToString()

  # Lengths 10, 14, 6 at 0.25 are 2.5, 3.5, 1.5 tokens: Python rounds them
  # to 2, 4, 2. Length 5 (two candidates) at 0.25 wants 1; length 64 wants
  # 16 > PREDS.
  shapes = [(4, 3), (6, 5), (2, 1), (1, 1), (30, 31)]
  path = str(tmp_path / "lengths.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for shape in shapes:
      writer.write(record(*shape))
  params = masking_params(data, prob=0.25)
  drawn = read_examples(path, UNMASKED, params, 5, batch=5)
  counts = [int(e["masked_lm_weights"].sum()) for e in drawn]
  assert counts == [2, 4, 2, 1, PREDS]
  params = dataclasses.replace(params, masked_lm_prob=0.9)
  drawn = read_examples(path, UNMASKED, params, 5, batch=5)
  # round(4.5) = 4 masks wanted, 2 candidates: both.
  assert int(drawn[3]["masked_lm_weights"].sum()) == 2


def test_eval_masks_are_fixed_whatever_the_training_seed(data, two_epochs):
  _, first, _ = two_epochs
  evals = [read_examples(data["unmasked"], UNMASKED, masking_params(data),
                         64, seed=seed, is_training=False)
           for seed in (1, 99)]
  for a, b in zip(*evals):
    for name in a:
      assert np.array_equal(a[name], b[name])
  assert not all(np.array_equal(a["masked_lm_positions"],
                                t["masked_lm_positions"])
                 for a, t in zip(evals[0], first))


# ------------------------------------------------------ run_pretraining ----


def pretrain_args(data, output_dir, input_file, steps, *extra):
  return ["run_pretraining.py",
          "--bert_config_file=%s" % (data["dir"] / "config.json"),
          "--input_file=%s" % input_file, "--output_dir=%s" % output_dir,
          "--vocab_file=%s" % (data["dir"] / "vocab.txt"), "--do_train",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--train_batch_size=16", "--num_train_steps=%d" % steps,
          "--num_warmup_steps=1", "--learning_rate=1e-3",
          "--save_checkpoints_steps=100", "--log_every_n_steps=1",
          "--throughput_warmup_steps=1", "--tf_random_seed=7"] + list(extra)


@pytest.mark.slow
def test_a_resumed_run_continues_the_mask_sequence(data, tmp_path):
  # 40 records: an epoch is 2.5 steps of 16, so resuming at step 3 starts in
  # the second epoch, 8 records in.
  small = str(tmp_path / "small.tfrecord")
  with tf.io.TFRecordWriter(small) as writer:
    for raw in list(tf.io.tf_record_iterator(data["unmasked"]))[:40]:
      writer.write(raw)
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  program_in_process(pretrain_args(data, straight, small, 6,
                                   "--save_checkpoints_steps=3"))
  # As if the run had died after step 3's checkpoint (a run of 3 steps
  # would not do: the learning rate decays to 0 at --num_train_steps).
  shutil.copytree(str(straight), str(resumed))
  for path in resumed.glob("model.ckpt-6.*"):
    path.unlink()
  tf.train.update_checkpoint_state(str(resumed),
                                   str(resumed / "model.ckpt-3"))
  program_in_process(pretrain_args(data, resumed, small, 6,
                                   "--save_checkpoints_steps=3"))
  expected, actual = load_checkpoint(str(straight)), load_checkpoint(
      str(resumed))
  assert actual["global_step"] == expected["global_step"] == 6
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-7,
                               err_msg=name)


def test_masking_choice_and_its_errors(data):
  vocab_file = str(data["dir"] / "vocab.txt")

  def choose(masking, kind, vocab=vocab_file, prob=0.15):
    return pretraining_trainer.masking_for_records(masking, kind, vocab,
                                                   SEQ, PREDS, prob, False)

  assert choose("auto", MASKED) is None
  assert choose("static", MASKED) is None
  assert choose("dynamic", MASKED).mask_id == data["vocab"]["[MASK]"]
  assert choose("auto", UNMASKED).vocab_size == len(data["vocab"])
  with pytest.raises(UserError, match="hold no masks"):
    choose("static", UNMASKED)
  with pytest.raises(UserError, match=r"--masked_lm_prob=1\.5 is out of"):
    choose("auto", UNMASKED, prob=1.5)
  with pytest.raises(UserError, match=r"masks 32 tokens of a 64-token .* "
                     r"raise --max_predictions_per_seq to 32 or lower "
                     r"--masked_lm_prob to 0\.1562"):
    choose("auto", UNMASKED, prob=0.5)
  with pytest.raises(UserError, match="--vocab_file is required"):
    choose("dynamic", MASKED, vocab=None)
  assert "unmasked" in pretraining_trainer.describe_masking(
      UNMASKED, choose("auto", UNMASKED))


def test_bad_input_records_end_with_one_error_line(data, tmp_path):
  """Launched: exit code 2 and one `error:` line, no traceback."""
  mixed = run_program(pretrain_args(
      data, tmp_path / "mixed", "%s,%s" % (data["static"], data["unmasked"]),
      1))
  expect_user_error(mixed, "mixes record kinds", data["static"],
                    data["unmasked"], "masked", "unmasked")


def expect_in_process_error(args, *fragments):
  """run_pretraining.run on `args` raises one one-line UserError holding
  every fragment."""
  with pytest.raises(UserError) as raised:
    program_in_process(args)
  message = str(raised.value)
  assert "\n" not in message, message
  for fragment in fragments:
    assert fragment in message, message
  return message


def test_bad_input_records_are_user_errors(data, tmp_path):
  other = str(tmp_path / "other.tfrecord")
  with tf.io.TFRecordWriter(other) as writer:
    writer.write(tf.train.Example(features=tf.train.Features(feature={
        "input_ids": pretraining_records.int_feature([1] * SEQ),
        "label_ids": pretraining_records.int_feature([0])})
                                 ).SerializeToString())
  expect_in_process_error(
      pretrain_args(data, tmp_path / "neither", other, 1), other,
      "label_ids", "neither masked")
  expect_in_process_error(
      pretrain_args(data, tmp_path / "static", data["unmasked"], 1,
                    "--masking=static"), "--masking=static", "hold no masks")


# ------------------------------------------------ packed unmasked rows ----

PACKED_UNMASKED = pretraining_records.PACKED_UNMASKED
# Longer than SEQ: two of upstream's instances (two sentences at least) fit
# one row often enough.
PACKED_SEQ, PACKED_PREDS, PER_PACK = 128, 20, 3
ROW_WIDTH = packing.masked_positions_per_row(PACKED_SEQ, PACKED_PREDS, 0.15,
                                             PER_PACK)


def packed_data_args(d, output, *extra):
  args = create_data_args(d, output, *extra)
  args[args.index("--max_seq_length=%d" % SEQ)] = (
      "--max_seq_length=%d" % PACKED_SEQ)
  args[args.index("--max_predictions_per_seq=%d" % PREDS)] = (
      "--max_predictions_per_seq=%d" % PACKED_PREDS)
  return args


@pytest.fixture(scope="module")
def packed(data):
  """create_pretraining_data.py --pack_sequences --masking=dynamic rows, and
  the unmasked records of the same flags otherwise (--short_seq_prob=0.5:
  a third of the sequences short enough to share a row)."""
  short = ("--masking=dynamic", "--short_seq_prob=0.5")
  program_in_process(packed_data_args(data["dir"], "short.tfrecord",
                                      *short))
  result = program_in_process(packed_data_args(
      data["dir"], "packed_unmasked.tfrecord", "--pack_sequences",
      "--max_sequences_per_pack=%d" % PER_PACK, *short))
  path = str(data["dir"] / "packed_unmasked.tfrecord")
  return {"path": path, "rows": parsed(path), "log": result.stderr,
          "unpacked": parsed(str(data["dir"] / "short.tfrecord"))}


def sequences_of_row(row):
  """(start, end) of each sequence of a packed row, from its sequence ids."""
  spans = []
  for slot, weight in enumerate(row["next_sentence_weights"]):
    if weight:
      tokens = [i for i, s in enumerate(row["sequence_ids"]) if s == slot + 1]
      assert tokens == list(range(tokens[0], tokens[-1] + 1))
      assert row["cls_positions"][slot] == tokens[0]
      spans.append((tokens[0], tokens[-1] + 1))
  return spans


def test_packed_unmasked_rows_hold_the_unmasked_instances(data, packed):
  rows = packed["rows"]
  assert all(set(r) == {f.name for f in PACKED_UNMASKED.features}
             for r in rows)
  cut = sorted(
      (tuple(r["input_ids"][a:b]), tuple(r["segment_ids"][a:b]),
       r["next_sentence_labels"][slot])
      for r in rows for slot, (a, b) in enumerate(sequences_of_row(r)))
  whole = sorted(
      (tuple(u["input_ids"][:sum(u["input_mask"])]),
       tuple(u["segment_ids"][:sum(u["input_mask"])]),
       u["next_sentence_labels"][0]) for u in packed["unpacked"])
  assert cut == whole
  assert sum(len(sequences_of_row(r)) > 1 for r in rows) > 50
  for raw in list(tf.io.tf_record_iterator(packed["path"]))[:50]:
    assert pretraining_records.tf_example(
        PACKED_UNMASKED, pretraining_records.parse_example(raw)
    ).SerializeToString() == raw
  assert ("masks are drawn in training, up to %d per row (train with "
          "--max_predictions_per_seq=%d, per sequence)" % (ROW_WIDTH,
                                                            PACKED_PREDS)
          in packed["log"])


def read_packed(data, packed, num_rows, whole_word=False, seed=1):
  return read_examples(packed["path"], PACKED_UNMASKED,
                       masking_params(data, whole_word, seq_length=PACKED_SEQ,
                                      max_predictions=PACKED_PREDS),
                       num_rows, seed=seed, max_sequences_per_pack=PER_PACK)


def check_packed_masks(row, drawn, vocab):
  """Asserts one packed row's drawn masks follow upstream's rule sequence
  by sequence; returns the chosen positions of each sequence."""
  weights = list(drawn["masked_lm_weights"])
  count = int(sum(weights))
  assert weights == [1.0] * count + [0.0] * (ROW_WIDTH - count)
  positions = list(drawn["masked_lm_positions"][:count])
  assert positions == sorted(set(positions))
  assert list(drawn["masked_lm_positions"][count:]) == [0] * (
      ROW_WIDTH - count)
  ids = row["input_ids"]
  assert list(drawn["masked_lm_ids"][:count]) == [ids[p] for p in positions]
  for p in range(PACKED_SEQ):
    if p not in positions:
      assert drawn["input_ids"][p] == ids[p]
  specials = {vocab["[CLS]"], vocab["[SEP]"]}
  chosen = []
  for start, end in sequences_of_row(row):
    mine = [p for p in positions if start <= p < end]
    assert len(mine) == dynamic_masking.num_to_predict(
        end - start, PACKED_PREDS, 0.15)
    assert all(ids[p] not in specials for p in mine)
    chosen.append(mine)
  # Every masked position lies in some sequence (never in padding).
  assert sum(len(c) for c in chosen) == count
  for name in ("input_mask", "segment_ids", "sequence_ids", "position_ids",
               "cls_positions", "next_sentence_labels"):
    assert list(drawn[name]) == list(row[name])
  return chosen


@pytest.mark.slow
def test_packed_rows_get_each_sequences_masks(data, packed):
  rows = packed["rows"]
  count = len(rows) // 8 * 8
  epochs = read_packed(data, packed, 2 * len(rows))
  first, second = epochs[:count], epochs[len(rows):][:count]
  changed = 0
  for row, a, b in zip(rows, first, second):
    chosen_a = check_packed_masks(row, a, data["vocab"])
    chosen_b = check_packed_masks(row, b, data["vocab"])
    changed += chosen_a != chosen_b
  # Each epoch draws anew; the same seed draws the same again.
  assert changed > 0.9 * count
  again = read_packed(data, packed, 64)
  for name in ("input_ids", "masked_lm_positions", "masked_lm_weights"):
    assert np.array_equal(np.stack([e[name] for e in again]),
                          np.stack([e[name] for e in first[:64]]))
  other = read_packed(data, packed, 64, seed=2)
  assert not np.array_equal(
      np.stack([e["masked_lm_positions"] for e in other]),
      np.stack([e["masked_lm_positions"] for e in first[:64]]))


@pytest.mark.parametrize("keys", ["all_equal", "pairs_equal"])
def test_packed_masks_break_equal_keys_like_unpacked_rows(keys):
  # Keys are float32 uniforms (2^23 values), so two can be equal; at seq
  # 128 about one sequence in 65,000 an epoch has a tie exactly at its cut.
  # The earlier position ranks above, as top_k ranks them unpacked: a
  # one-sequence packed row must get exactly the unpacked row's masks.
  seq_length, length = 32, 20  # 3 masks: pairs of equal keys tie at the cut
  params = dynamic_masking.MaskingParams(
      max_seq_length=seq_length, max_predictions_per_seq=5,
      masked_lm_prob=0.15, do_whole_word_mask=False, vocab_size=50,
      cls_id=1, sep_id=2, mask_id=3, continuation_ids=())
  ids = [1] + list(range(10, 10 + length - 2)) + [2] + [0] * (seq_length -
                                                               length)
  mask = [1] * length + [0] * (seq_length - length)
  rng = np.random.RandomState(4)
  order_keys = (np.full(seq_length, 0.5) if keys == "all_equal" else
                np.repeat(rng.uniform(size=seq_length // 2), 2))
  uniforms = np.stack([order_keys, rng.uniform(size=seq_length),
                       rng.uniform(size=seq_length)]).astype(np.float32)
  random_ids = rng.randint(0, 2**31 - 1, size=seq_length).astype(np.int32)
  batch = lambda x, dtype: tf.constant(np.asarray(x)[None], dtype)
  packed = dynamic_masking.mask_packed_batch(
      batch(ids, tf.int32), batch(mask, tf.int32),
      batch([1] * length + [0] * (seq_length - length), tf.int32),
      batch(uniforms, tf.float32), batch(random_ids, tf.int32), params, 2)
  unpacked = dynamic_masking.mask_batch(
      batch(ids, tf.int32), batch(mask, tf.int32), batch(uniforms, tf.float32),
      batch(random_ids, tf.int32), params)
  with tf.Session() as sess:
    got, want = sess.run([packed, unpacked])
  budget = dynamic_masking.num_to_predict(length, 5, 0.15)
  assert got["masked_lm_weights"].sum() == want["masked_lm_weights"].sum() == (
      budget)
  np.testing.assert_array_equal(got["input_ids"], want["input_ids"])
  for name in ("masked_lm_positions", "masked_lm_ids"):
    np.testing.assert_array_equal(got[name][:, :budget],
                                  want[name][:, :budget])
  if keys == "all_equal":
    # Every key equal: the first `budget` candidates, after [CLS].
    assert list(got["masked_lm_positions"][0, :budget]) == list(
        range(1, 1 + budget))


def test_packed_rows_whole_word_masks_stay_in_their_sequence(data, packed):
  vocab = data["vocab"]
  continuation = {i for t, i in vocab.items() if t.startswith("##")}
  specials = (vocab["[CLS]"], vocab["[SEP]"])
  multi_piece = 0
  rows = packed["rows"][:160]
  for row, drawn in zip(rows, read_packed(data, packed, len(rows),
                                          whole_word=True)):
    ids = row["input_ids"]
    count = int(sum(drawn["masked_lm_weights"]))
    chosen = set(drawn["masked_lm_positions"][:count])
    for start, end in sequences_of_row(row):
      words = []
      for p in range(start, end):
        if ids[p] in specials:
          continue
        if words and ids[p] in continuation:
          words[-1].append(p)
        else:
          words.append([p])
      budget = dynamic_masking.num_to_predict(end - start, PACKED_PREDS,
                                              0.15)
      mine = chosen & set(range(start, end))
      assert len(mine) <= budget
      for word in words:
        taken = mine & set(word)
        assert not taken or taken == set(word), (word, mine)
        if not taken:
          assert len(word) > budget - len(mine)
        multi_piece += len(taken) > 1
  assert multi_piece > 10


@pytest.mark.slow
def test_training_on_packed_unmasked_rows(data, packed, tmp_path):
  out = tmp_path / "out"
  config = tmp_path / "config.json"
  config.write_text(json.dumps(tiny_bert_config(
      max_position_embeddings=PACKED_SEQ, vocab_size=VOCAB)))
  result = program_in_process(pretrain_args(
      data, out, packed["path"], 3, "--do_eval", "--max_eval_steps=2",
      "--max_seq_length=%d" % PACKED_SEQ, "--bert_config_file=%s" % config,
      "--max_predictions_per_seq=%d" % PACKED_PREDS))
  assert "packed records: up to %d sequences per row" % PER_PACK in (
      result.stderr)
  assert ("input records: packed unmasked" in result.stderr and
          "masks drawn in the input pipeline" in result.stderr)
  assert load_checkpoint(str(out))["global_step"] == 3
  with open(out / "eval_results.txt") as f:
    results = dict(line.strip().split(" = ") for line in f)
  assert 0 < float(results["masked_lm_loss"]) < 20


def test_packed_rows_with_masks_are_not_re_masked(data, tmp_path):
  path = str(tmp_path / "packed.tfrecord")
  program_in_process(create_data_args(
      data["dir"], "packed.tfrecord", "--pack_sequences", "--dupe_factor=1",
      "--output_file=%s" % path))
  args = pretrain_args(data, tmp_path / "out", path, 1, "--masking=dynamic")
  args[args.index("--max_predictions_per_seq=%d" % PREDS)] = (
      "--max_predictions_per_seq=%d" % packing.masked_positions_per_row(
          SEQ, PREDS, 0.15, PER_PACK))
  assert expect_in_process_error(args) == (
      "--masking=dynamic but the --input_file rows are packed with "
      "their masks; drop --masking=dynamic, or make the rows with "
      "create_pretraining_data.py --pack_sequences --masking=dynamic")
