"""Shared test set-up: the repository root on sys.path, TF in graph mode, and
the helpers the test modules share (tiny model config, running a program,
reading a checkpoint)."""

import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
  sys.path.insert(0, REPO_ROOT)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow.compat.v1 as tf  # noqa: E402

tf.disable_v2_behavior()


# A 2-layer BERT small enough for end-to-end runs in seconds; no dropout, so
# runs that should be equal are equal.
TINY_CONFIG = {
    "attention_probs_dropout_prob": 0.0, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0, "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 64, "max_position_embeddings": 64,
    "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
    "vocab_size": 128}


def run_program(args, cwd=None, env=None, timeout=600):
  """Runs `python <args>` from the repository root as a user would.

  Returns:
    The CompletedProcess, with text stdout/stderr.
  """
  full_env = dict(os.environ)
  full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if env:
    full_env.update(env)
  return subprocess.run([sys.executable] + list(args), cwd=cwd or REPO_ROOT,
                        env=full_env, capture_output=True, text=True,
                        timeout=timeout)


def run_ok(args, env=None, timeout=600):
  """run_program, asserting exit code 0 (stderr's tail in the failure)."""
  result = run_program(args, env=env, timeout=timeout)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def expect_user_error(result, *fragments):
  """Asserts a user-error exit: code 2, one `error:` line holding every
  fragment, no traceback; returns the line."""
  assert result.returncode == 2, result.stderr[-2000:]
  errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert len(errors) == 1, result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  for fragment in fragments:
    assert fragment in errors[0], errors[0]
  return errors[0]


def load_checkpoint(path):
  """{variable name: value} of a checkpoint prefix or a directory's latest."""
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name)
          for name, _ in tf.train.list_variables(path)}


def fp16_training_state(weights, global_step):
  """What an fp16 step that overflows must leave unchanged, and the scale.

  Returns:
    [weights, global_step, the dynamic loss-scale variable, every Adam slot]
    of the default graph, for `sess.run`.
  """
  scale = [v for v in tf.global_variables()
           if v.op.name.endswith("current_loss_scale")]
  assert len(scale) == 1, [v.op.name for v in tf.global_variables()]
  slots = [v for v in tf.global_variables() if "adam" in v.op.name]
  return [weights, global_step, scale[0]] + slots


def read_json(path):
  with open(path) as f:
    return json.load(f)


@pytest.fixture
def graph():
  """A fresh default graph for a test."""
  with tf.Graph().as_default() as g:
    yield g
