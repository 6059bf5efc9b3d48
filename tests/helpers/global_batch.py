"""One global batch however it is split: the record files of each rank, the
pretraining flags and the weights compared across runs."""

import os

import numpy as np
import tensorflow.compat.v1 as tf

from conftest import tiny_bert_config


SEQ, PREDS, VOCAB = 64, 10, 1000
BATCH, STEPS = 16, 6
CONFIG = tiny_bert_config(max_position_embeddings=SEQ, vocab_size=VOCAB)


def write_records(path, records):
  with tf.io.TFRecordWriter(path) as writer:
    for record in records:
      writer.write(record)
  return path


def write_rank_records(d, records):
  """rank0.tfrecord and rank1.tfrecord in `d`: rank r gets the r-th half
  of every global batch of `records`, as a 2-rank run with per-rank files
  reads them. Returns their paths."""
  half, whole = BATCH // 2, len(records) // BATCH * BATCH
  return [
      write_records(str(d / ("rank%d.tfrecord" % r)),
                    [rec for start in range(0, whole, BATCH)
                     for rec in records[start + r * half:
                                        start + (r + 1) * half]])
      for r in (0, 1)]


def pretrain_args(data, output_dir, *extra):
  return ["run_pretraining.py",
          "--bert_config_file=%s" % (data["dir"] / "config.json"),
          "--input_file=%s" % data["records"],
          "--output_dir=%s" % output_dir, "--do_train",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--train_batch_size=%d" % BATCH, "--num_train_steps=%d" % STEPS,
          "--num_warmup_steps=2", "--learning_rate=1e-3",
          "--log_every_n_steps=1", "--throughput_warmup_steps=1",
          "--tf_random_seed=7"] + list(extra)


def load_checkpoint(path):
  reader = tf.train.load_checkpoint(str(path))
  return {name: reader.get_tensor(name)
          for name, _ in tf.train.list_variables(str(path))}


def assert_same_weights(reference_dir, actual_dir, name):
  reference = load_checkpoint(reference_dir)
  actual = load_checkpoint(actual_dir)
  assert set(actual) - {"current_loss_scale", "good_steps"} == set(reference)
  assert actual["global_step"] == reference["global_step"] == STEPS
  diff = max(float(np.abs(actual[n] - reference[n]).max())
             for n in reference if n.startswith(("bert/", "cls/")))
  print("%s vs one_device: max |weight diff| = %.3g" % (name, diff))
  for n, value in reference.items():
    np.testing.assert_allclose(actual[n], value, rtol=1e-4, atol=1e-6,
                               err_msg=n)
  if "fp16" in name:
    # 6 finite updates, growth every 2: 1024 * 2**3, none skipped.
    assert actual["current_loss_scale"] == 8192
  # The weights moved far beyond the tolerance after step 2.
  start = load_checkpoint(os.path.join(str(reference_dir), "model.ckpt-2"))
  assert max(float(np.abs(reference[n] - start[n]).max())
             for n in start if n.startswith("bert/")) > 1e-3
