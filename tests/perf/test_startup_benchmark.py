"""benchmarks/startup.py: each program's first training step and whole
process, from the step ends its throughput.jsonl records."""

import importlib.util
import json
import os
import sys

import pytest

from conftest import REPO_ROOT, run_ok, run_program

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import startup
import startup_data


def test_step_ends_give_the_first_step_and_the_steady_step_time(tmp_path):
  """Lines as ThroughputHook writes them with --log_every_n_steps=1 (out
  of order here: they are sorted by step)."""
  steps_file = tmp_path / "throughput.jsonl"
  ends = {1: 1000.5, 2: 1001.0, 3: 1001.25, 4: 1001.5, 5: 1001.75,
          6: 1002.25, 7: 1002.5}
  steps_file.write_text("".join(
      json.dumps({"step": step, "steps_run": step, "examples_per_sec": 1.0,
                  "time": ends[step]}) + "\n" for step in (2, 1, 3, 4, 5, 6,
                                                          7)))
  times = startup.read_step_times(str(steps_file))
  assert times == [ends[s] for s in range(1, 8)]
  # After the first 3 ends: differences 0.25, 0.25, 0.5, 0.25.
  assert startup.steady_step_seconds(times) == 0.25
  figures = startup.run_figures(10.0, launched=995.0, times=times)
  assert figures == {"steps": 7, "first_step_seconds": 5.5,
                     "steady_step_seconds": 0.25, "whole_seconds": 10.0,
                     "overhead_seconds": 8.25}
  # Too few steps for a difference after the first 3: no steady figure.
  assert startup.steady_step_seconds(times[:4]) is None
  assert startup.run_figures(3.0, 999.0, times[:4])["overhead_seconds"] is (
      None)
  # The peer: no step ends, its step count and step time; no training.
  assert startup.run_figures(20.0, steps=12, steady=1.5) == {
      "steps": 12, "first_step_seconds": None, "steady_step_seconds": 1.5,
      "whole_seconds": 20.0, "overhead_seconds": 2.0}
  assert startup.run_figures(4.0)["overhead_seconds"] is None
  with pytest.raises(RuntimeError, match="holds no step"):
    startup.read_step_times(str(tmp_path / "missing.jsonl"))


def test_epochs_make_the_steps_and_medians_summarize_the_runs():
  for count in (232, 400, 480):
    epochs = float("%.6g" % startup.epochs_for_steps(count, 32, 10))
    assert int(count / 32 * epochs) == 10
  rows = [dict(program="ner", run=i, steps=10, first_step_seconds=f,
               steady_step_seconds=0.1, whole_seconds=w,
               overhead_seconds=w - 1.0)
          for i, (f, w) in enumerate([(4.0, 9.0), (6.0, 8.0), (5.0, 7.0)])]
  rows.append(dict(program="extract_features", run=0, steps=0,
                   first_step_seconds=None, steady_step_seconds=None,
                   whole_seconds=3.0, overhead_seconds=None))
  summary = startup.summarize(["ner", "extract_features"], rows)
  assert summary["ner"]["first_step_seconds"] == {"median": 5.0, "min": 4.0,
                                                  "max": 6.0}
  assert (summary["ner"]["whole_seconds"],
          summary["ner"]["overhead_seconds"]) == (8.0, 7.0)
  assert summary["extract_features"]["first_step_seconds"] is None
  assert summary["extract_features"]["whole_seconds"] == 3.0


def test_the_squad_file_asks_for_spans_of_its_contexts():
  documents = [["The fog rattled the windows.", "Edith checks the barometer.",
                "It rained.", "A cat sat."], ["Big words appear here."]]
  squad, count = startup_data.squad_json(documents, limit=3)
  qas = [(p["context"], qa) for d in squad["data"] for p in d["paragraphs"]
         for qa in p["qas"]]
  assert count == len(qas) == 3
  for context, qa in qas:
    answer = qa["answers"][0]
    start = answer["answer_start"]
    assert context[start:start + len(answer["text"])] == answer["text"]
  # The longest word (the first of equals), at most `limit` questions.
  assert [(qa["question"], qa["answers"][0]["text"]) for _, qa in qas] == [
      ("The fog what the windows?", "rattled"),
      ("Edith checks the what?", "barometer"), ("It what?", "rained")]


@pytest.mark.slow
def test_an_unknown_program_or_a_missing_corpus_is_one_error_line(tmp_path):
  for flag, says in (("--programs=pretraining,bogus", "unknown bogus"),
                     ("--corpus=%s" % (tmp_path / "none.txt"),
                      "no such file")):
    result = run_program(["benchmarks/startup.py",
                          "--output_dir=%s" % tmp_path, flag])
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [l for l in result.stderr.splitlines()
              if l.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "summary.json")


@pytest.mark.slow
def test_smoke_run_times_every_program(tmp_path):
  programs = list(startup.PROGRAMS)
  if not all(importlib.util.find_spec(m) for m in ("torch", "transformers")):
    programs.remove("peer")
  out = tmp_path / "startup"
  result = run_ok(["benchmarks/startup.py", "--output_dir=%s" % out,
                   "--smoke", "--programs=%s" % ",".join(programs)],
                  timeout=1800)
  summary = json.loads((out / "summary.json").read_text())
  assert list(summary["programs"]) == programs
  table = (out / "summary.md").read_text()
  assert table in result.stdout
  for program, p in summary["programs"].items():
    assert "| %s | 1 |" % program in table
    assert p["runs"] == 1 and len(p["per_run"]) == 1
    run = p["per_run"][0]
    assert run["whole_seconds"] > 0
    if program == "extract_features":
      assert (run["first_step_seconds"], run["steady_step_seconds"],
              run["overhead_seconds"], run["steps"]) == (None, None, None, 0)
      continue
    if program == "peer":
      assert run["first_step_seconds"] is None
      assert run["steps"] == startup.SMOKE_STEPS + startup.PEER_WARMUP_STEPS
    else:
      assert 0 < run["first_step_seconds"] < run["whole_seconds"]
      assert run["steps"] >= startup.SMOKE_STEPS
      assert p["first_step_seconds"]["median"] == run["first_step_seconds"]
    assert run["steady_step_seconds"] > 0
    assert run["overhead_seconds"] == pytest.approx(
        run["whole_seconds"] - run["steps"] * run["steady_step_seconds"],
        abs=0.01)
    assert p["overhead_seconds"] == run["overhead_seconds"]
  # A second run with the same flags reuses the prepared data.
  made = [out / "data" / name for name in ("vocab.txt",
                                          "pretrained/checkpoint")]
  before = [path.stat().st_mtime for path in made]
  run_ok(["benchmarks/startup.py", "--output_dir=%s" % out, "--smoke",
          "--programs=extract_features"], timeout=600)
  assert [path.stat().st_mtime for path in made] == before
