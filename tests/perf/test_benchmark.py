"""Tests of benchmark.py and its parts in bertkit.perf: FLOP formula,
tables, efficiency, a real sweep."""

import csv
import dataclasses
import glob
import json
import os
import subprocess
import sys

import pytest

from bertkit.common import errors
from bertkit.perf import model_flops
from bertkit.perf import profiles
from bertkit.perf import reports
from bertkit.perf import sweep
import modeling
from conftest import REPO_ROOT, requires_horovod, run_program

TINY_CONFIG = {"vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 64,
               "max_position_embeddings": 64, "type_vocab_size": 2}


def test_flops_of_a_toy_shape_by_hand():
  # H=2, L=1, I=4, V=3, S=2, P=1.
  # Encoder kernels: 4*H*H + 2*H*I = 16 + 16 = 32 weights; 6 * 32 * S = 384.
  # Attention: QK^T and AV are 2*S*S*H = 16 FLOPs each forward, 32 together,
  #   x3 with the backward = 96.
  # MLM head on 1 position: 6 * (H*H + H*V) = 6 * (4 + 6) = 60.
  flops = model_flops.pretraining_flops(
      hidden_size=2, num_layers=1, intermediate_size=4, vocab_size=3,
      seq_length=2, max_predictions_per_seq=1)
  assert flops == {"encoder": 384, "attention": 96, "mlm_head": 60,
                   "total": 540}


def test_flops_of_bert_mini_by_hand():
  # BERT-mini: L=4, H=256, I=1024, V=30522; S=128, P=20.
  # Encoder weights: 4 * (4*256^2 + 2*256*1024) = 4 * 786432 = 3145728.
  encoder = 6 * 3145728 * 128                 # 2415919104
  attention = 12 * 4 * 128 * 128 * 256        # 201326592
  mlm_head = 6 * 20 * (256 * 256 + 256 * 30522)  # 945500160
  config = modeling.BertConfig.from_json_file(
      os.path.join(REPO_ROOT, "configs", "bert_mini.json"))
  flops = model_flops.pretraining_flops(
      config.hidden_size, config.num_hidden_layers, config.intermediate_size,
      config.vocab_size, 128, 20)
  assert flops == {"encoder": 2415919104, "attention": 201326592,
                   "mlm_head": 945500160, "total": 3562745856}
  assert flops["total"] == encoder + attention + mlm_head
  assert model_flops.flops_for_config(config, 128, 20) == 3562745856
  # A step of batch 32 is 114.0 GFLOP.
  assert 32 * flops["total"] == 114007867392


def fake_row(replicas, eps, precision="fp32", batch=4, strategy="multi_worker",
             status="ok"):
  return {"strategy": strategy, "config_file": "configs/bert_base.json",
          "seq_length": 512, "xla": "off", "precision": precision,
          "per_replica_batch": batch, "replicas": replicas,
          "global_batch": batch * replicas, "examples_per_sec": eps,
          "examples_per_sec_per_replica": eps / replicas if eps else None,
          "status": status, "note": ""}


def published_rtx2080ti_rows():
  """The published BERT-Base seq-512 table of a multi-GPU Estimator fork
  (RTX 2080 Ti, MultiWorkerMirroredStrategy; docs/benchmarks.md) as fake
  cell results."""
  rows = []
  for replicas, fp32, fp16 in ((1, 29.0, 34.0), (2, 41.2, 55.6),
                               (4, 57.6, 76.8)):
    rows.append(fake_row(replicas, fp32, "fp32", 4))
    rows.append(fake_row(replicas, fp16, "fp16", 6))
  return rows


def test_scaling_efficiency_is_against_the_same_series_at_one_replica():
  rows = published_rtx2080ti_rows()
  rows.append(fake_row(2, 50.0, batch=8))  # a series with no 1-replica cell
  rows.append(fake_row(4, None, status="failed", batch=6, precision="fp16"))
  reports.add_scaling_efficiency(rows)
  eff = [r["scaling_efficiency"] for r in rows]
  assert eff[0] == 1.0 and eff[1] == 1.0
  assert eff[2] == pytest.approx(41.2 / (2 * 29.0))
  assert eff[3] == pytest.approx(55.6 / (2 * 34.0))
  assert eff[4] == pytest.approx(57.6 / (4 * 29.0))
  assert eff[5] == pytest.approx(76.8 / (4 * 34.0))
  assert eff[6] is None
  assert eff[7] is None


def test_markdown_table_has_the_published_tables_layout():
  text = reports.markdown_tables(published_rtx2080ti_rows(), device="gpu")
  assert text == (
      "#### `multi_worker`, bert_base, seq 512, XLA off\n"
      "\n"
      "n_gpu | fp32(batch 4) | fp16(batch 6)\n"
      "---|---|---\n"
      "1 | 29.0 | 34.0\n"
      "2 | 41.2 | 55.6\n"
      "4 | 57.6 | 76.8\n")


def test_markdown_tables_group_by_strategy_and_label_cpu_replicas():
  rows = [fake_row(1, 8.25, strategy="mirrored"),
          fake_row(2, None, strategy="mirrored", status="failed"),
          fake_row(2, None, strategy="one_device", status="skipped")]
  text = reports.markdown_tables(rows, device="cpu")
  first = "n_replicas (CPU logical replicas, not GPUs) | fp32(batch 4)"
  assert text == (
      "#### `mirrored`, bert_base, seq 512, XLA off\n\n"
      + first + "\n---|---\n1 | 8.25\n2 | failed\n\n"
      "#### `one_device`, bert_base, seq 512, XLA off\n\n"
      + first + "\n---|---\n2 | skipped\n")


def test_mfu_peak_is_per_gpu_but_shared_on_cpu():
  gpu = fake_row(4, 100.0)
  model_flops.add_mfu(gpu, flops_per_example=2e9, peak_tflops=10.0,
                      peak_scales_with_replicas=True)
  assert gpu["model_tflops"] == pytest.approx(0.2)
  assert gpu["peak_tflops"] == 40.0
  assert gpu["mfu"] == pytest.approx(0.2 / 40.0)
  cpu = fake_row(2, 10.0)
  model_flops.add_mfu(cpu, flops_per_example=3e9, peak_tflops=0.1,
                      peak_scales_with_replicas=False)
  assert cpu["mfu"] == pytest.approx(0.03 / 0.1)
  none = fake_row(1, None, status="failed")
  model_flops.add_mfu(none, 3e9, 0.1, False)
  assert none["model_tflops"] is None and none["mfu"] is None


# The cell of the command-line tests; each strategy's is a replace() of it.
CELL = sweep.Cell(strategy="mirrored", config_file="c.json", seq_length=128,
                  xla="on", precision="fp16", per_replica_batch=8, replicas=2)


def test_cell_commands():
  cell = CELL
  argv = sweep.cell_command(cell, "/c.json", "/d/*.tfrecord", "/out/x",
                            max_predictions=20, num_steps=30,
                            warmup_steps=10, device="cpu")
  assert argv[1].endswith("run_pretraining.py")
  for flag in ("--train_batch_size=16", "--cpu_replicas=2",
               "--distribution_strategy=mirrored", "--use_fp16=True",
               "--use_xla=True", "--max_seq_length=128",
               "--num_train_steps=30", "--throughput_warmup_steps=10",
               "--output_dir=/out/x", "--input_file=/d/*.tfrecord"):
    assert flag in argv
  gpu = sweep.cell_command(cell, "/c.json", "/d", "/o", 20, 30, 10, "gpu")
  assert "--num_gpus=2" in gpu and "--cpu_replicas=2" not in gpu
  bps = sweep.cell_command(
      dataclasses.replace(cell, strategy="byteps", replicas=4), "/c.json",
      "/d", "/o", 20, 30, 10, "cpu")
  # The launcher with its own arguments, then the cell's flags after `--`,
  # which override the launcher's defaults (absl keeps a flag's last value).
  assert bps[:12] == ["env", "PYTHON=%s" % sys.executable,
                      sweep.RUN_PRE_BYTEPS, "-n", "4", "-c", "/c.json",
                      "-i", "/d", "-o", "/o", "--"]
  assert bps[12] == "--do_train"
  assert "--train_batch_size=32" in bps and "--distribution_strategy=byteps" \
      in bps
  assert not any(a.startswith(("--cpu_replicas", "--num_gpus")) for a in bps)
  assert sweep.cell_name(cell) == "mirrored-c-s128-xla_on-fp16-b8-r2"
  assert "--use_bf16=False" in argv
  bf16 = sweep.cell_command(dataclasses.replace(cell, precision="bf16"),
                            "/c.json", "/d", "/o", 20, 30, 10, "cpu")
  assert "--use_bf16=True" in bf16 and "--use_fp16=False" in bf16
  # Central storage runs in one process over the local devices, as mirrored.
  central = sweep.cell_command(
      dataclasses.replace(cell, strategy="central_storage"), "/c.json", "/d",
      "/o", 20, 30, 10, "cpu")
  assert "--distribution_strategy=central_storage" in central
  assert "--cpu_replicas=2" in central and central[0] == sys.executable


@requires_horovod
def test_horovod_cell_command():
  hvd = sweep.cell_command(
      dataclasses.replace(CELL, strategy="horovod", replicas=4), "/c.json",
      "/d", "/o", 20, 30, 10, "cpu")
  assert hvd[1:3] == ["-np", "4"]
  assert "--train_batch_size=32" in hvd
  assert not any(a.startswith(("--cpu_replicas", "--num_gpus")) for a in hvd)


def test_last_error_line_prefers_the_programs_error(tmp_path):
  log = tmp_path / "run.log"
  log.write_text("I starting\n[1]<stderr>:error: --input_file matches 1 "
                 "file(s)\nTraceback\nRuntimeError: Horovod detected that\n")
  assert sweep._last_error_line(str(log)) == (
      "error: --input_file matches 1 file(s)")


def test_op_totals_sum_op_executions_by_type():
  events = [("bert/layer_0/MatMul:MatMul", 3_000_000_000),
            ("ExecutorState::Process", 9_000_000_000),
            ("ParallelFor", 5_000_000_000),
            ("gradients/layer_0/MatMul_grad/MatMul:MatMul", 1_500_000_000),
            ("bert/dropout/random_uniform/RandomUniform:RandomUniform",
             2_000_000_000),
            ("cls/predictions/BiasAdd:_FusedMatMul", 500_000_000)]
  totals = profiles.op_totals(events)
  assert totals == [("MatMul", 4.5, 2), ("RandomUniform", 2.0, 1),
                    ("_FusedMatMul", 0.5, 1)]
  assert profiles.top_ops_markdown(totals, limit=2) == (
      "op type | ms | share | executions\n"
      "---|---|---|---\n"
      "MatMul | 4.5 | 64.3% | 2\n"
      "RandomUniform | 2.0 | 28.6% | 1\n"
      "all ops | 7.0 | 100% | 4\n")


def test_busy_times_count_each_moment_once():
  """Two threads: products overlapping each other and an elementwise op;
  bookkeeping events (the executor's, with no op type) are left out."""
  ms = 1_000_000_000  # picoseconds
  intervals = [
      ("ExecutorState::Process", 0, 100 * ms),
      ("bert/layer_0/MatMul:_MklMatMul", 10 * ms, 40 * ms),
      ("gradients/MatMul_grad/MatMul:_MklMatMul", 30 * ms, 50 * ms),
      ("bert/layer_0/gelu/mul:Mul", 45 * ms, 60 * ms),
      ("attention/MatMul:_MklBatchMatMulV2", 70 * ms, 80 * ms),
      ("ParallelFor", 60 * ms, 95 * ms)]
  busy = profiles.busy_times(intervals)
  assert busy == {"traced": 70.0, "any_op": 60.0, "matmul": 50.0}
  assert profiles.busy_line(busy) == (
      "traced 70.0 ms: some op running 60.0 ms (85.7%), a matrix product "
      "running 50.0 ms (71.4%)")
  assert profiles.busy_times([("ParallelFor", 0, ms)])["traced"] == 0.0


def test_missing_trace_is_a_user_error(tmp_path):
  with pytest.raises(errors.UserError, match="no \\*.xplane.pb"):
    profiles.latest_trace(str(tmp_path))


def write_tiny_config(tmp_path):
  path = tmp_path / "tiny.json"
  path.write_text(json.dumps(TINY_CONFIG))
  return str(path)


@pytest.mark.slow
def test_tiny_sweep_writes_csv_markdown_and_png(tmp_path):
  out = tmp_path / "bench"
  # Through scripts/benchmark.sh: its defaults are overridden by the flags
  # after the output directory.
  result = subprocess.run(
      ["bash", os.path.join(REPO_ROOT, "scripts", "benchmark.sh"), str(out),
       "--bert_config_files=%s" % write_tiny_config(tmp_path),
       "--seq_lengths=32", "--max_predictions_per_seq=5",
       "--per_replica_batches=4", "--replicas=1,2", "--precisions=fp32",
       "--strategies=mirrored", "--num_train_steps=8",
       "--throughput_warmup_steps=2", "--num_synthetic_records=64"],
      env=dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2"),
      capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  with open(out / "results.csv") as f:
    rows = list(csv.DictReader(f))
  assert [(r["replicas"], r["status"]) for r in rows] == [("1", "ok"),
                                                          ("2", "ok")]
  for row in rows:
    assert float(row["examples_per_sec"]) > 0
    assert int(row["steps_counted"]) == 6
    assert 0 < float(row["mfu"]) < 1
    assert float(row["peak_tflops"]) > 0  # measured: no --peak_tflops given
  eps1, eps2 = (float(r["examples_per_sec"]) for r in rows)
  assert float(rows[0]["scaling_efficiency"]) == 1.0
  assert float(rows[1]["scaling_efficiency"]) == pytest.approx(
      eps2 / (2 * eps1))
  # Each cell's figure is its run's own steady-state summary.
  with open(os.path.join(rows[1]["cell_dir"], "throughput_summary.json")) as f:
    summary = json.load(f)
  assert summary["examples_per_sec"] == pytest.approx(eps2)
  # Synthetic records are unpacked and unpadded: one sequence per example,
  # every token real.
  assert float(rows[1]["sequences_per_sec"]) == pytest.approx(
      summary["sequences_per_sec"]) == pytest.approx(eps2)
  assert float(rows[1]["real_tokens_per_sec"]) == pytest.approx(
      summary["real_tokens_per_sec"])
  assert summary["num_replicas"] == 2 and summary["global_batch_size"] == 8
  text = (out / "results.md").read_text()
  assert "n_replicas (CPU logical replicas, not GPUs) | fp32(batch 4)" in text
  assert "\n1 | %s\n" % reports._format_number(eps1) in text
  assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_benchmark_script_needs_an_output_dir():
  result = subprocess.run(
      ["bash", os.path.join(REPO_ROOT, "scripts", "benchmark.sh"),
       "--replicas=1"], capture_output=True, text=True, timeout=60)
  assert result.returncode == 2
  assert "error: the first argument must be the output directory" in (
      result.stderr)


@pytest.mark.slow
def test_bad_axis_value_is_a_user_error(tmp_path):
  result = run_program(["benchmark.py", "--output_dir=%s" % tmp_path,
                        "--precisions=fp32,fp8"])
  assert result.returncode == 2
  assert "error: --precisions: 'fp8' is not one of fp32, fp16, bf16" in (
      result.stderr)


@pytest.mark.slow
def test_profile_steps_write_an_xplane_trace(tmp_path):
  from bertkit.perf import synthetic_data  # pylint: disable=g-import-not-at-top
  records = str(tmp_path / "records.tfrecord")
  synthetic_data.write_synthetic_pretraining_records(records, 32, 32, 5, 120)
  out = tmp_path / "run"
  result = run_program([
      "run_pretraining.py", "--do_train",
      "--bert_config_file=%s" % write_tiny_config(tmp_path),
      "--input_file=%s" % records, "--output_dir=%s" % out,
      "--max_seq_length=32", "--max_predictions_per_seq=5",
      "--train_batch_size=4", "--num_train_steps=5",
      "--profile_steps=2,3"])
  assert result.returncode == 0, result.stderr[-3000:]
  traces = glob.glob(str(out / "plugins" / "profile" / "*" / "*.xplane.pb"))
  assert len(traces) == 1
  totals = dict((op, ms) for op, ms, _ in profiles.op_totals(
      profiles.trace_events(traces[0])))
  # The traced steps ran the model's matmuls and the optimizer.
  # (MatMul, _FusedMatMul or oneDNN's _Mkl... variants, by the build.)
  assert any("MatMul" in op and "BatchMatMul" not in op for op in totals)
  assert "SparseSoftmaxCrossEntropyWithLogits" in totals
  shown = run_program(["benchmark.py", "--top_ops_of=%s" % out])
  assert shown.returncode == 0, shown.stderr[-2000:]
  assert "op type | ms | share | executions" in shown.stdout
  busy = profiles.busy_times(profiles.trace_intervals(traces[0]))
  assert 0 < busy["matmul"] < busy["any_op"] <= busy["traced"]
  assert profiles.busy_line(busy) in shown.stdout


def test_pytorch_comparison_summary_takes_medians_ratio_and_numpy_mfu():
  sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
  import compare_pytorch  # pylint: disable=g-import-not-at-top
  rounds = [{"ours": 20.0, "pytorch": 10.0}, {"ours": 12.0, "pytorch": 16.0},
            {"ours": 30.0, "pytorch": 20.0}]
  summary = compare_pytorch.summarize(rounds, numpy_gflops=100.0,
                                      gflop_per_example=3.0)
  assert summary["ours_examples_per_sec"] == 20.0
  assert summary["pytorch_examples_per_sec"] == 16.0
  # The median of the per-round ratios (2.0, 0.75, 1.5), not 20 / 16.
  assert summary["ratio"] == 1.5
  assert summary["ours_mfu"] == pytest.approx(0.6)
  assert summary["pytorch_mfu"] == pytest.approx(0.48)


def sweep_sees(monkeypatch, packages, horovodrun):
  """Makes the sweep find `packages` (and none other) and horovodrun at
  `horovodrun` (None: nowhere), whatever is installed here."""
  monkeypatch.setattr(sweep.importlib.util, "find_spec",
                      lambda name: object() if name in packages else None)
  monkeypatch.setattr(sweep, "_horovodrun_path", lambda: horovodrun)


def axes(strategies):
  """parse_axes of a small sweep of `strategies`."""
  return sweep.parse_axes(strategies, ["configs/bert_tiny.json"], ["128"],
                          ["off"], ["fp32"], ["8"], ["1", "2"], 30, 10)


def test_what_a_missing_engine_lacks_names_this_python(monkeypatch):
  sweep_sees(monkeypatch, (), None)
  assert sweep.missing_engines() == {
      "horovod": "horovod is not installed for %s" % sys.executable,
      "byteps": "byteps is not installed for %s" % sys.executable}
  # The package without its launcher (a PATH without the venv's bin).
  sweep_sees(monkeypatch, ("horovod", "byteps"), None)
  assert sweep.missing_engines() == {
      "horovod": "horovodrun is neither beside %s nor on PATH" %
                 sys.executable}
  sweep_sees(monkeypatch, ("horovod", "byteps"), "/v/bin/horovodrun")
  assert sweep.missing_engines() == {}


def test_a_strategy_without_its_engine_is_refused_before_any_cell(
    monkeypatch):
  sweep_sees(monkeypatch, (), None)
  with pytest.raises(errors.UserError) as refused:
    axes(["mirrored", "horovod"])
  assert str(refused.value) == (
      "--strategies has horovod, but horovod is not installed for %s: run "
      "scripts/install_horovod.sh, or leave horovod out of --strategies" %
      sys.executable)
  # Every missing engine in the one line, each once.
  with pytest.raises(errors.UserError) as refused:
    axes(["byteps", "horovod", "byteps"])
  assert str(refused.value) == (
      "--strategies has byteps, but byteps is not installed for %s: run "
      "scripts/install_byteps.sh, or leave byteps out of --strategies; "
      "--strategies has horovod, but horovod is not installed for %s: run "
      "scripts/install_horovod.sh, or leave horovod out of --strategies" %
      (sys.executable, sys.executable))
  # The other strategies do not need them.
  cells = axes(["mirrored", "one_device"])
  assert [(c.strategy, c.replicas) for c in cells] == [
      ("mirrored", 1), ("mirrored", 2), ("one_device", 1), ("one_device", 2)]
  # pylint: disable-next=protected-access
  assert [sweep._skip_reason(c) for c in cells] == [
      "", "", "", "one_device runs 1 replica"]


def test_a_horovod_cell_command_without_horovodrun_is_refused(monkeypatch):
  # A caller of cell_command that did not check the engines first.
  sweep_sees(monkeypatch, ("horovod", "byteps"), None)
  with pytest.raises(errors.UserError) as refused:
    sweep.cell_command(dataclasses.replace(CELL, strategy="horovod"),
                       "/c.json", "/d", "/o", 20, 30, 10, "cpu")
  assert str(refused.value) == (
      "--strategies has horovod, but horovodrun is neither beside %s nor on "
      "PATH: run scripts/install_horovod.sh, or leave horovod out of "
      "--strategies" % sys.executable)


# benchmark.py run as a user runs it, with the sweep seeing no horovod
# wherever the test runs.
WITHOUT_HOROVOD = """
import runpy, sys
sys.argv = sys.argv[1:]
sys.path.insert(0, '.')
from bertkit.perf import sweep
sweep.missing_engines = lambda: {"horovod": "horovod is not installed here"}
runpy.run_path(sys.argv[0], run_name='__main__')
"""


@pytest.mark.slow
def test_benchmark_refuses_a_missing_engine_in_one_line_and_runs_nothing(
    tmp_path):
  out = tmp_path / "bench"
  result = run_program(["-c", WITHOUT_HOROVOD, "benchmark.py",
                        "--output_dir=%s" % out,
                        "--strategies=mirrored,horovod"])
  assert result.returncode == errors.EXIT_USER_ERROR, result.stderr[-2000:]
  assert result.stderr.strip().splitlines()[-1] == (
      "error: --strategies has horovod, but horovod is not installed here: "
      "run scripts/install_horovod.sh, or leave horovod out of --strategies")
  assert "Traceback" not in result.stderr
  assert not out.exists()


def fake_python(tmp_path, installed):
  """A PYTHON for scripts/benchmark.sh that has the engines `installed`
  and prints the arguments it would run benchmark.py with."""
  path = tmp_path / "python"
  path.write_text(
      "#!/usr/bin/env bash\n"
      "if [[ $1 == -c ]]; then\n"  # the script's question: is $engine there?
      "  for engine in %s; do [[ $2 == *\"'$engine'\"* ]] && exit 0; done\n"
      "  exit 1\n"
      "fi\n"
      "printf '%%s\\n' \"$@\"\n" % " ".join(installed))
  path.chmod(0o755)
  return str(path)


def test_benchmark_script_sweeps_the_engines_installed_unless_told(
    tmp_path):
  script = os.path.join(REPO_ROOT, "scripts", "benchmark.sh")
  python = fake_python(tmp_path, ["byteps"])
  result = subprocess.run(["bash", script, "/o"], capture_output=True,
                          text=True, timeout=60,
                          env=dict(os.environ, PYTHON=python))
  assert result.returncode == 0, result.stderr
  assert [a for a in result.stdout.split() if a.startswith("--strategies")
         ] == ["--strategies=mirrored,multi_worker,byteps"]
  assert result.stderr == (
      "note: horovod is not installed for %s: the default sweep leaves its "
      "cells out (scripts/install_horovod.sh installs it)\n" % python)
  # Strategies given are the user's to choose: benchmark.py refuses any
  # whose engine is missing.
  result = subprocess.run(["bash", script, "/o", "--strategies=horovod"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHON=python))
  assert result.returncode == 0 and result.stderr == ""
  assert result.stdout.split()[-1] == "--strategies=horovod"
