"""Shared test set-up: the repository root on sys.path, TF in graph mode."""

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


@pytest.fixture
def graph():
  """A fresh default graph for a test."""
  with tf.Graph().as_default() as g:
    yield g
