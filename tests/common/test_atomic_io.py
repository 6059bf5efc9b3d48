"""No half-written file ever has its final name."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from bertkit.common import atomic_io
from conftest import REPO_ROOT


def test_complete_write_appears_under_the_final_name(tmp_path):
  final = tmp_path / "out.txt"
  with atomic_io.atomic_open(str(final)) as f:
    f.write("done\n")
    assert not final.exists()
  assert final.read_text() == "done\n"
  assert os.listdir(tmp_path) == ["out.txt"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_interrupted_write_leaves_nothing(tmp_path, error):
  final = tmp_path / "out.txt"
  with pytest.raises(error):
    with atomic_io.atomic_open(str(final)) as f:
      f.write("half")
      raise error()
  assert os.listdir(tmp_path) == []


def test_stale_partials_are_removed(tmp_path):
  (tmp_path / "x.partial-1234abcd").write_text("junk")
  (tmp_path / "keep.txt").write_text("ok")
  atomic_io.remove_stale_partials(str(tmp_path))
  assert os.listdir(tmp_path) == ["keep.txt"]


@pytest.mark.slow
def test_create_vocab_killed_at_random_moments_never_leaves_a_partial_vocab(
    tmp_path):
  corpus = tmp_path / "corpus.txt"
  sample = open(os.path.join(REPO_ROOT, "sample_data", "corpus.txt")).read()
  corpus.write_text(sample * 40)
  rng = random.Random(0)
  for trial in range(3):
    out = tmp_path / ("vocab%d.txt" % trial)
    proc = subprocess.Popen(
        [sys.executable, "create_vocab.py", "--input_file=%s" % corpus,
         "--output_file=%s" % out, "--vocab_size=3000"], cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(1.0, 6.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if out.exists():
      # Finished before the kill: then the file must be complete.
      tokens = out.read_text().splitlines()
      assert tokens[0] == "[PAD]" and len(tokens) > 1000
    leftovers = [p for p in os.listdir(tmp_path)
                 if p.startswith("vocab%d.txt" % trial) and p != out.name]
    assert all(".partial-" in p for p in leftovers)
