"""The steps of the pretraining input, called one by one.

Which files a process reads, where a resumed run starts, in which order the
records come, and the masking step, each with its exact expected values;
then the input_fn they make up, resumed where the uninterrupted one was.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.data import pretraining_records
from bertkit.engine.input import dynamic_masking
from bertkit.engine.input import input_pipeline
from bertkit.perf import synthetic_data

SEQ, PREDS, VOCAB = 16, 3, 100


def context(num_pipelines, pipeline_id, num_replicas=None):
  return tf.distribute.InputContext(
      num_input_pipelines=num_pipelines, input_pipeline_id=pipeline_id,
      num_replicas_in_sync=num_replicas or num_pipelines)


def values_of(dataset, limit=100):
  """The elements of `dataset` (at most `limit`), as numpy values."""
  with tf.Graph().as_default():
    element = tf.data.make_one_shot_iterator(dataset()).get_next()
    out = []
    with tf.Session() as session:
      try:
        while len(out) < limit:
          out.append(session.run(element))
      except tf.errors.OutOfRangeError:
        pass
  return out


# ------------------------------------------------- files of a process ----


def test_one_process_reads_every_file():
  assert input_pipeline.process_share(["a", "b", "c"]) == (
      input_pipeline.ProcessShare(("a", "b", "c")))


def test_processes_read_every_other_file_when_there_are_enough():
  files = ["a", "b", "c"]
  assert input_pipeline.process_share(files, context(2, 1)) == (
      input_pipeline.ProcessShare(("b",), num_pipelines=2, pipeline_id=1))
  assert input_pipeline.process_share(files, context(2, 0)).files == (
      "a", "c")
  assert input_pipeline.process_share(files, context(3, 2)).files == ("c",)


def test_processes_share_out_the_records_of_fewer_files():
  assert input_pipeline.process_share(["a"], context(2, 1)) == (
      input_pipeline.ProcessShare(("a",), num_pipelines=2, pipeline_id=1,
                                  by_record=True))
  assert input_pipeline.process_share(["a", "b"], context(3, 0)).files == (
      "a", "b")


def test_a_process_feeding_several_replicas():
  # One worker of two, each with 4 GPUs.
  share = input_pipeline.process_share(["a", "b"], context(2, 0, 8))
  assert (share.files, share.replicas_fed) == (("a",), 4)


# ------------------------------------------------------ resume point ----


def test_resume_skips_the_records_of_the_steps_done():
  # Step 10, global batch 32 over 2 replicas of one process: 320 records,
  # 3 epochs of 100 and 20 more.
  share = input_pipeline.process_share(["a"], context(1, 0, 2))
  assert input_pipeline.resume_point(10, 16, share, 100) == (3, 20)
  assert input_pipeline.resume_point(0, 16, share, 100) == (0, 0)
  assert input_pipeline.resume_point(25, 16, share, 100) == (8, 0)


def test_resume_counts_whole_batches_whatever_the_accumulation():
  # Global batch 8, --num_accumulation_steps=4, one replica: the input
  # still yields batches of 8 (the model cuts them into 4 micro-batches of
  # 2), so step 3 resumes after 24 records.
  share = input_pipeline.process_share(["a"])
  assert input_pipeline.resume_point(3, 8, share, 10) == (2, 4)


def test_resume_of_processes_reading_files_of_their_own():
  # Process 1 of 2 has read 5 steps of 4 records of its own 7 per epoch.
  share = input_pipeline.process_share(["a", "b"], context(2, 1))
  assert input_pipeline.resume_point(5, 4, share, 7) == (2, 6)


def test_resume_of_processes_sharing_records_counts_every_process():
  # 3 processes, one file of 12 records, per-replica batch 1: two steps
  # read the stream's first 6 records; each process then takes its own.
  share = input_pipeline.process_share(["a"], context(3, 2))
  assert input_pipeline.resume_point(2, 1, share, 12) == (0, 6)
  assert input_pipeline.resume_point(5, 1, share, 12) == (1, 3)


# --------------------------------------------------- order of records ----


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
  directory = tmp_path_factory.mktemp("records")
  paths = []
  for name, count in (("a", 3), ("b", 2)):
    paths.append(str(directory / name))
    with tf.io.TFRecordWriter(paths[-1]) as writer:
      for i in range(count):
        writer.write(b"%s%d" % (name.encode(), i))
  return paths


def test_records_in_order_tagged_with_their_epoch(two_files):
  records = values_of(lambda: input_pipeline.read_records(
      two_files, tf.data.Dataset.range(1, 3), shuffle=False, cycle_length=4))
  assert [(int(e), r) for e, r in records] == [
      (1, b"a0"), (1, b"a1"), (1, b"a2"), (1, b"b0"), (1, b"b1"),
      (2, b"a0"), (2, b"a1"), (2, b"a2"), (2, b"b0"), (2, b"b1")]


def test_shuffled_epochs_each_read_every_record_once(two_files):
  records = values_of(lambda: input_pipeline.read_records(
      two_files, tf.data.Dataset.range(3), shuffle=True, cycle_length=2))
  epochs = {}
  for epoch, record in records:
    epochs.setdefault(int(epoch), []).append(record)
  assert {e: sorted(r) for e, r in epochs.items()} == {
      e: [b"a0", b"a1", b"a2", b"b0", b"b1"] for e in range(3)}


# ------------------------------------------------------------ masking ----


def test_training_masks_follow_the_seed_and_eval_masks_do_not():
  assert input_pipeline.masking_key(True, 7) == (
      7, dynamic_masking.TRAIN_STREAM)
  assert input_pipeline.masking_key(True) == (
      dynamic_masking.DEFAULT_SEED, dynamic_masking.TRAIN_STREAM)
  assert input_pipeline.masking_key(False, 7) == (
      dynamic_masking.EVAL_SEED, dynamic_masking.EVAL_STREAM)


MASKING = dynamic_masking.MaskingParams(
    max_seq_length=6, max_predictions_per_seq=2, masked_lm_prob=0.34,
    do_whole_word_mask=False, vocab_size=10, cls_id=1, sep_id=2, mask_id=3,
    continuation_ids=())
# One row: [CLS] 5 6 7 [SEP] and padding. 5 tokens x 0.34 rounds to 2
# predictions; the order keys pick positions 1 (0.9) and 3 (0.5); position
# 1 becomes [MASK] (0.5 < 0.8), position 3 a random id (0.9 >= 0.8, then
# 0.7 >= 0.5): 14 modulo the vocab size, 4.
DRAWS = (np.array([[[0.0, 0.9, 0.1, 0.5, 0.0, 0.0],
                    [0.9, 0.5, 0.9, 0.9, 0.9, 0.9],
                    [0.0, 0.0, 0.0, 0.7, 0.0, 0.0]]], np.float32),
         np.array([[0, 0, 0, 14, 0, 0]], np.int32))
MASKED_ROW = {"input_ids": [[1, 3, 6, 4, 2, 0]],
              "masked_lm_positions": [[1, 3]], "masked_lm_ids": [[5, 7]],
              "masked_lm_weights": [[1.0, 1.0]]}


def run_masking(kind, features):
  with tf.Graph().as_default():
    spec = input_pipeline.PretrainingInput(6, 2, kind, masking=MASKING)
    batch = {name: tf.constant(value) for name, value in features.items()}
    batch["random_draws"] = tuple(tf.constant(d) for d in DRAWS)
    out = input_pipeline.mask_examples(batch, spec)
    assert "random_draws" in batch  # The batch given is left as it was.
    with tf.Session() as session:
      return {k: v.tolist() for k, v in session.run(out).items()}


def test_masking_step_draws_the_masks_of_its_draws():
  unmasked = {"input_ids": [[1, 5, 6, 7, 2, 0]],
              "input_mask": [[1, 1, 1, 1, 1, 0]],
              "segment_ids": [[0, 0, 0, 1, 1, 0]]}
  assert run_masking(pretraining_records.UNMASKED, unmasked) == dict(
      MASKED_ROW, input_mask=unmasked["input_mask"],
      segment_ids=unmasked["segment_ids"])


def test_masking_step_first_puts_back_the_records_own_masks():
  # Position 2 was masked when the record was made; its token, 6, is back
  # before the new masks are drawn.
  record = {"input_ids": [[1, 5, 3, 7, 2, 0]],
            "input_mask": [[1, 1, 1, 1, 1, 0]],
            "masked_lm_positions": [[2, 0]], "masked_lm_ids": [[6, 0]],
            "masked_lm_weights": [[1.0, 0.0]]}
  assert run_masking(pretraining_records.MASKED, record) == dict(
      MASKED_ROW, input_mask=record["input_mask"])


def test_masks_the_records_cannot_have_are_refused():
  with pytest.raises(ValueError, match="hold no masks"):
    input_pipeline.PretrainingInput(SEQ, PREDS, pretraining_records.UNMASKED)
  with pytest.raises(ValueError, match="without masks only"):
    input_pipeline.PretrainingInput(SEQ, PREDS, pretraining_records.PACKED,
                                    3, MASKING)


# ----------------------------------------------------------- input_fn ----


def test_a_resumed_input_continues_the_uninterrupted_one(tmp_path):
  files = [synthetic_data.write_synthetic_pretraining_records(
      str(tmp_path / ("%d.tfrecord" % i)), 7 - 2 * i, SEQ, PREDS, VOCAB,
      seed=i) for i in range(2)]
  masking = dataclasses.replace(MASKING, max_seq_length=SEQ,
                                max_predictions_per_seq=PREDS,
                                vocab_size=VOCAB)
  spec = input_pipeline.PretrainingInput(
      SEQ, PREDS, pretraining_records.MASKED, masking=masking, masking_seed=3)

  def batches(start_step, count):
    input_fn = input_pipeline.pretraining_input_fn_builder(
        files, spec, True, 4, 1, deterministic=True,
        start_step_fn=lambda: start_step)
    return values_of(input_fn, count)

  uninterrupted = batches(0, 8)  # 32 records: 2 epochs of 12, then 8.
  resumed = batches(5, 3)
  for expected, batch in zip(uninterrupted[5:], resumed):
    assert batch.keys() == expected.keys()
    for name in batch:
      np.testing.assert_array_equal(batch[name], expected[name])
