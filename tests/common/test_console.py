"""How a program's log lines look: its own `[program] ...` lines by default,
absl's full format with -v 1, each line once."""

import logging
import os
import re
import sys

from absl import logging as absl_logging
import pytest

from bertkit.common import console
from bertkit.common import errors
from conftest import REPO_ROOT, run_program

CPD_DATA = os.path.join(REPO_ROOT, "tests", "fixtures", "create_pretraining_data")

# absl's prefix: level, date, time, thread id, file:line.
ABSL_PREFIX = re.compile(
    r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] ")


def record(level, message, *args, exc_info=None):
  """A log record as absl's logger makes it, from create_vocab.py:245."""
  return logging.LogRecord("absl", level, "create_vocab.py", 245, message,
                           args, exc_info)


@pytest.fixture
def absl_handler():
  """absl's handler, its formatter put back after the test."""
  handler = absl_logging.get_absl_handler()
  original = handler.python_handler.formatter
  yield handler
  handler.setFormatter(original)


def test_program_name_is_the_file_name_without_py():
  assert console.program_name("/x/y/run_pretraining.py") == "run_pretraining"
  assert console.program_name("two_phase.py") == "two_phase"


def test_program_lines_name_the_program_and_the_level_above_info():
  formatter = console.ProgramFormatter("create_vocab")
  line = formatter.format(record(logging.INFO, "Training a %d-token vocab",
                                 500))
  assert line == "[create_vocab] Training a 500-token vocab"
  assert formatter.format(record(logging.WARNING, "shard %d is empty", 4)) == (
      "[create_vocab] warning: shard 4 is empty")
  assert formatter.format(record(logging.ERROR, "weights differ")) == (
      "[create_vocab] error: weights differ")


def test_a_logged_exception_keeps_its_traceback_below_the_line():
  try:
    raise ValueError("bad value")
  except ValueError:
    exc_info = sys.exc_info()
  lines = console.ProgramFormatter("benchmark").format(
      record(logging.ERROR, "cell failed", exc_info=exc_info)).splitlines()
  assert lines[0] == "[benchmark] error: cell failed"
  assert lines[1] == "Traceback (most recent call last):"
  assert lines[-1] == "ValueError: bad value"


@pytest.mark.parametrize("verbosity", [-1, 0])
def test_absl_handler_writes_program_lines_below_detail(absl_handler,
                                                        verbosity):
  console.use_program_format("/repo/run_squad.py", verbosity)
  assert absl_handler.format(record(logging.WARNING, "skipped %d", 3)) == (
      "[run_squad] warning: skipped 3")


def test_absl_handler_writes_absl_format_with_detail(absl_handler):
  console.use_program_format("/repo/run_squad.py", 0)
  console.use_program_format("/repo/run_squad.py", console.DETAIL_VERBOSITY)
  line = absl_handler.format(record(logging.WARNING, "skipped %d", 3))
  assert re.fullmatch(ABSL_PREFIX.pattern + "skipped 3", line), line
  assert line.startswith("W") and "create_vocab.py:245] " in line


def test_every_program_gets_the_format_from_main_with_user_errors(
    absl_handler):
  seen = []
  main = lambda argv: seen.append(absl_handler.format(record(logging.INFO,
                                                             "hello")))
  errors.main_with_user_errors(main)(["/repo/export_checkpoint.py"])
  assert seen == ["[export_checkpoint] hello"]


def cpd_args(*extra):
  """create_pretraining_data.py's arguments on the tests' small corpus."""
  return ["create_pretraining_data.py",
          "--input_file=%s" % os.path.join(CPD_DATA, "corpus.txt"),
          "--vocab_file=%s" % os.path.join(CPD_DATA, "vocab.txt"),
          "--max_seq_length=32", "--max_predictions_per_seq=5",
          "--dupe_factor=1"] + list(extra)


def stderr_lines(result):
  """The lines a successful run printed on stderr."""
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stderr.splitlines()


@pytest.mark.slow
def test_a_program_prints_its_own_lines_and_absl_lines_with_v_1(tmp_path):
  prefix = "[create_pretraining_data] "
  default = stderr_lines(run_program(cpd_args(
      "--output_file=%s" % (tmp_path / "a.tfrecord"))))
  assert default and all(l.startswith(prefix) for l in default), default
  assert not any(ABSL_PREFIX.search(l) for l in default), default
  assert len(set(default)) == len(default), default
  messages = [l[len(prefix):] for l in default]
  assert messages[-1].startswith("Wrote 33 total instances to ")

  verbose = stderr_lines(run_program(cpd_args(
      "--output_file=%s" % (tmp_path / "b.tfrecord"), "-v", "1")))
  assert all(ABSL_PREFIX.match(l) for l in verbose), verbose
  assert not any(prefix in l for l in verbose), verbose
  # Each of the default's lines once, in order, among the DEBUG detail (the
  # rate on the progress line differs between runs; the file name too).
  said = lambda m: not m.startswith(("done: ", "Wrote "))
  verbose_messages = [ABSL_PREFIX.sub("", l, count=1) for l in verbose]
  assert [m for m in verbose_messages if m in messages and said(m)] == [
      m for m in messages if said(m)]
  assert verbose_messages.count("*** Example ***") == 20


@pytest.mark.slow
def test_sharded_creation_with_worker_processes_prints_program_lines(
    tmp_path):
  lines = stderr_lines(run_program(cpd_args(
      "--output_dir=%s" % (tmp_path / "shards"), "--num_workers=2",
      "--shard_size_mb=0.001")))
  assert len(lines) == 3 and len(set(lines)) == 3, lines
  assert all(l.startswith("[create_pretraining_data] ") for l in lines), lines
  assert "2 local worker(s)" in lines[0] and lines[1].startswith(
      "[create_pretraining_data] done: shards 3/3 ")
