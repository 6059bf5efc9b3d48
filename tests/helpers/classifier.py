"""The classifier tests' sample, tiny model and run_classifier.py flags, the
fine-tuning work directory (a module fixture), and a classifier's logits
through Hugging Face."""

import json
import os

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
import torch

from bertkit.tasks.classification import data as classifier_data
from conftest import REPO_ROOT
import modeling
import tokenization


FIXTURES = os.path.join(REPO_ROOT, "tests", "fixtures", "classifier")
SAMPLE = os.path.join(REPO_ROOT, "sample_data", "classify")
SEQ = 32


def tiny_config(vocab_size):
  return {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "hidden_size": 64,
          "initializer_range": 0.02, "intermediate_size": 256,
          "max_position_embeddings": 64, "num_attention_heads": 2,
          "num_hidden_layers": 2, "type_vocab_size": 2,
          "vocab_size": vocab_size}


def read_tsv(path):
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n").split("\t") for line in f]


def words_of(paths):
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  words = set()
  for path in paths:
    for row in read_tsv(path):
      for field in row:
        words.update(basic.tokenize(field))
  return sorted(words)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """A word-level vocab covering the sample and the fixtures, and a config."""
  d = tmp_path_factory.mktemp("classifier")
  paths = [os.path.join(root, name)
           for top in (SAMPLE, FIXTURES)
           for root, _, names in os.walk(top)
           for name in names if name.endswith(".tsv")]
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words_of(paths)
  (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  (d / "tiny.json").write_text(json.dumps(tiny_config(len(vocab))))
  return d


def classifier_args(workdir, output_dir, *extra, data_dir=SAMPLE,
                    task="tsv"):
  return ["run_classifier.py", "--task_name=%s" % task,
          "--data_dir=%s" % data_dir,
          "--vocab_file=%s" % (workdir / "vocab.txt"),
          "--bert_config_file=%s" % (workdir / "tiny.json"),
          "--output_dir=%s" % output_dir, "--max_seq_length=%d" % SEQ,
          "--learning_rate=1e-3", "--log_every_n_steps=10"] + list(extra)


def read_probabilities(path):
  return np.array([[float(p) for p in row] for row in read_tsv(path)])


def tsv_options(**overrides):
  """The tsv flags' defaults, as run_classifier passes them on."""
  return classifier_data.TsvOptions("0", "1", **overrides)


def save_pretrained_checkpoint(workdir, path):
  """A BertModel-only checkpoint, like a pretraining run's (no head)."""
  config = modeling.BertConfig.from_json_file(str(workdir / "tiny.json"))
  with tf.Graph().as_default():
    ids = tf.zeros([1, 2], tf.int32)
    modeling.BertModel(config, False, ids, ids, ids)
    tf.train.get_or_create_global_step()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      tf.train.Saver().save(sess, path)


def read_records(path, count, features):
  """The first `count` records' int features as {name: int32 [count, ...]}."""
  rows = {name: [] for name in features}
  for i, record in enumerate(tf.io.tf_record_iterator(str(path))):
    if i == count:
      break
    example = tf.train.Example.FromString(record)
    for name in features:
      rows[name].append(example.features.feature[name].int64_list.value)
  return {name: np.array(value, np.int32) for name, value in rows.items()}


def classifier_inputs(out):
  count = len((out / "test_results.tsv").read_text().splitlines())
  return read_records(out / "predict.tf_record", count,
                      ["input_ids", "input_mask", "segment_ids"])


def hf_classifier_logits(model, inputs):
  """A Hugging Face sequence classifier's logits [B, num_labels] on the
  features of our records (classifier_inputs)."""
  model.eval()
  with torch.no_grad():
    return model(
        input_ids=torch.tensor(inputs["input_ids"], dtype=torch.long),
        attention_mask=torch.tensor(inputs["input_mask"], dtype=torch.long),
        token_type_ids=torch.tensor(inputs["segment_ids"],
                                    dtype=torch.long)).logits
