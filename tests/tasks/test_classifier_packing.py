"""run_classifier.py --pack_sequences (classification/packing.py): packed
rows of the sample task's examples, the same logits, losses and gradients as the
examples one per row (fp32, dropout 0), and the programme end to end:
predictions in input order equal the unpacked run's from the same
checkpoint.

Training packed and unpacked cannot end with the same weights: a step of B
packed rows holds more examples than a step of B unpacked ones, and a
different number every step. The per-step equality holds instead and is
what is tested: on the same examples the packed loss (the mean over real
examples) and every gradient equal the unpacked batch's.
"""

import os
import shutil

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.tasks.classification import task as classifier
from bertkit.tasks.classification import processors as classifier_processors
from bertkit.tasks.classification import features as classifier_features
from bertkit.tasks.classification import packing as classifier_packing
import modeling
import tokenization
from bertkit.common.errors import UserError
from conftest import program_in_process, read_eval_results
from helpers.classifier import (SAMPLE, SEQ, classifier_args,
                                read_probabilities, tsv_options, workdir)

PER_PACK = 3

# The fixture, imported for pytest.
assert workdir


def sample_features(workdir, split="dev", count=None):
  processor = classifier_processors.make_processor("tsv", SAMPLE, tsv_options())
  examples = getattr(processor, "get_%s_examples" % split)(SAMPLE)[:count]
  tokenizer = tokenization.FullTokenizer(str(workdir / "vocab.txt"), True)
  return [classifier_features.convert_single_example(
              i, e, processor.get_labels(), SEQ, tokenizer)
          for i, e in enumerate(examples)]


def test_rows_hold_every_example_once_with_its_slots(workdir):
  features = sample_features(workdir)
  rows, report = classifier_packing.pack_features(features, SEQ, PER_PACK,
                                                  batch_size=8)
  assert len(rows) % 8 == 0 and len(rows) < 0.7 * len(features)
  assert report.padding_after < report.padding_before
  seen = []
  for row in rows:
    for slot, index in enumerate(row["example_index"]):
      if index < 0:
        assert row["label_weights"][slot] == 0.0
        continue
      seen.append(index)
      feature = features[index]
      length = sum(feature.input_mask)
      start = row["cls_positions"][slot]
      assert row["sequence_ids"][start:start + length] == [slot + 1] * length
      assert row["input_ids"][start:start + length] == (
          feature.input_ids[:length])
      assert row["segment_ids"][start:start + length] == (
          feature.segment_ids[:length])
      assert row["position_ids"][start:start + length] == list(range(length))
      assert row["label_ids"][slot] == feature.label_id
      assert row["label_weights"][slot] == 1.0
    real = sum(row["input_mask"])
    assert row["input_mask"] == [1] * real + [0] * (SEQ - real)
    assert row["sequence_ids"][real:] == [0] * (SEQ - real)
  assert sorted(seen) == list(range(len(features)))


def test_predictions_go_back_to_input_order():
  predictions = [{"example_index": np.array([2, 0, -1]),
                  "probabilities": np.array([[0.2], [0.0], [9.0]])},
                 {"example_index": np.array([1, -1, -1]),
                  "probabilities": np.array([[0.1], [9.0], [9.0]])}]
  assert classifier_packing.predictions_in_input_order(
      predictions, 3) == [[0.0], [0.1], [0.2]]
  with pytest.raises(ValueError, match="not predicted"):
    classifier_packing.predictions_in_input_order(predictions, 4)


def test_packed_logits_losses_and_gradients_equal_unpacked(workdir,
                                                           tmp_path):
  features = sample_features(workdir, count=24)
  rows, _ = classifier_packing.pack_features(features, SEQ, PER_PACK)
  assert len(rows) < len(features)
  config = modeling.BertConfig.from_json_file(str(workdir / "tiny.json"))
  config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
  checkpoint = str(tmp_path / "model.ckpt")

  def run(build, restore):
    """Builds the model (fp32), with the weights of the first run; returns
    the loss, per-example losses, logits and every gradient."""
    with tf.Graph().as_default():
      tf.set_random_seed(3)
      loss, per_example, logits, _ = build()
      variables = tf.trainable_variables()
      # Dense, also for the embeddings' (IndexedSlices).
      gradients = [tf.convert_to_tensor(g)
                   for g in tf.gradients(loss, variables)]
      saver = tf.train.Saver(variables)
      with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        if restore:
          saver.restore(sess, checkpoint)
        else:
          saver.save(sess, checkpoint)
        values = sess.run([loss, per_example, logits, gradients])
    return values, [v.name for v in variables]

  def unpacked():
    def ints(name):
      return tf.constant(np.array([getattr(f, name) for f in features]),
                         dtype=tf.int32)
    return classifier.create_model(config, False, ints("input_ids"),
                                   ints("input_mask"), ints("segment_ids"),
                                   ints("label_id"), 2)

  def packed():
    batch = {name: tf.constant(np.array([r[name] for r in rows]),
                               dtype=tf.float32 if name == "label_weights"
                               else tf.int32) for name in rows[0]}
    return classifier.create_model(
        config, False, batch["input_ids"], batch["input_mask"],
        batch["segment_ids"], num_labels=2,
        **classifier_packing.model_inputs(batch))

  (loss, per_example, logits, gradients), names = run(unpacked, False)
  (packed_loss, packed_per_example, packed_logits,
   packed_gradients), packed_names = run(packed, True)
  assert packed_names == names and len(names) > 10
  slots = np.array([r["example_index"] for r in rows]).reshape(-1)
  real = slots >= 0
  order = np.argsort(slots[real])
  np.testing.assert_allclose(packed_logits[real][order], logits, atol=1e-5)
  np.testing.assert_allclose(packed_per_example[real][order], per_example,
                             atol=1e-5)
  assert packed_loss == pytest.approx(loss, abs=1e-5)
  for name, expected, actual in zip(names, gradients, packed_gradients):
    np.testing.assert_allclose(actual, expected, atol=1e-5, err_msg=name)
  assert max(np.abs(g).max() for g in gradients) > 1e-3


def test_max_sequences_per_pack_below_one_is_refused(workdir, tmp_path):
  with pytest.raises(UserError) as error:
    program_in_process(classifier_args(
        workdir, tmp_path / "out", "--do_train", "--pack_sequences",
        "--max_sequences_per_pack=0"))
  assert str(error.value) == "--max_sequences_per_pack must be >= 1, got 0"


@pytest.mark.slow
def test_packed_fine_tuning_predicts_in_input_order(workdir, tmp_path):
  packed_dir = tmp_path / "packed"
  result = program_in_process(classifier_args(
      workdir, packed_dir, "--do_train", "--do_eval", "--do_predict",
      "--pack_sequences", "--max_sequences_per_pack=%d" % PER_PACK,
      "--num_train_epochs=4", "--tf_random_seed=1", "--eval_batch_size=8",
      "--predict_batch_size=8"))
  assert "packed rows" in result.stderr
  packed_results = read_eval_results(packed_dir)
  # About 400 / 2.8 rows per epoch at batch 32: fewer steps than unpacked.
  assert packed_results["global_step"] < 50
  assert packed_results["eval_accuracy"] >= 0.9
  packed_probabilities = read_probabilities(packed_dir / "test_results.tsv")
  assert packed_probabilities.shape == (100, 2)
  # The same checkpoint, unpacked: the same eval figures and the same
  # predictions, line for line.
  unpacked_dir = tmp_path / "unpacked"
  shutil.copytree(str(packed_dir), str(unpacked_dir))
  for name in ("test_results.tsv", "eval_results.txt"):
    os.remove(str(unpacked_dir / name))
  program_in_process(classifier_args(
      workdir, unpacked_dir, "--do_eval", "--do_predict",
      "--eval_batch_size=8", "--predict_batch_size=8"))
  np.testing.assert_allclose(
      read_probabilities(unpacked_dir / "test_results.tsv"),
      packed_probabilities, atol=1e-5)
  unpacked_results = read_eval_results(unpacked_dir)
  assert unpacked_results["eval_accuracy"] == packed_results["eval_accuracy"]
  assert unpacked_results["eval_loss"] == pytest.approx(
      packed_results["eval_loss"], abs=1e-5)
