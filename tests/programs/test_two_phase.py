"""Two-phase pretraining: two_phase.py's step rule and scripts/run_two_phase.sh."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from bertkit.perf import synthetic_data
import two_phase
from conftest import REPO_ROOT, TINY_CONFIG, load_checkpoint
from bertkit.common.errors import UserError

SCRIPT = os.path.join(REPO_ROOT, "scripts", "run_two_phase.sh")


@pytest.mark.parametrize("args,expected", [
    # The defaults of the script: batch 512 reached by accumulation.
    ((512, 900000, 64, 1, 8), 900000),
    ((512, 100000, 16, 1, 32), 100000),
    # Twice the baseline's batch: half the steps; accumulation counts.
    ((512, 900000, 32, 8, 4), 450000),
    ((512, 900000, 64, 8, 1), 900000),
    # Seed 004's 32 GPUs x 64 sequences: 512 * 900k / 2048.
    ((512, 900000, 64, 32, 1), 225000),
    # Not a whole number of steps: rounded up (17066.67 -> 17067).
    ((512, 100, 3, 1, 1), 17067),
    ((16, 3, 2, 2, 2), 6),
])
def test_phase_steps(args, expected):
  assert two_phase.phase_steps(*args) == expected


@pytest.mark.parametrize("bad", [0, -1, 2.5, None])
def test_phase_steps_refuses_non_positive_or_fractional_values(bad):
  with pytest.raises(UserError) as e:
    two_phase.phase_steps(512, 900000, bad, 8, 1)
  assert "--batch_per_gpu must be a positive integer" in str(e.value)


@pytest.mark.parametrize("batch,lr,ratio", [
    # Seed 004's table: 16K -> 0.00354 / 0.1, 2K -> 0.00125 / 0.0125.
    (16384, 0.0035355, 0.1), (2048, 0.00125, 0.0125),
    # The LAMB paper's ends: 512 -> 5 / (2**3 * 10**3), 1/320; 32K -> 5e-3, 0.2.
    (512, 0.000625, 1 / 320.0), (32768, 0.005, 0.2)])
def test_lamb_paper_rule(batch, lr, ratio):
  assert two_phase.lamb_learning_rate(batch) == pytest.approx(lr, rel=1e-4)
  assert two_phase.lamb_warmup_ratio(batch) == pytest.approx(ratio, rel=1e-9)


def test_plan_phase_rounds_warmup_and_takes_explicit_values():
  plan = two_phase.plan_phase(512, 900000, 64, 1, 8)
  # 900000 / 320 = 2812.5 -> 2813.
  assert plan == (512, 900000, 2813, pytest.approx(0.000625))
  plan = two_phase.plan_phase(16, 2, 2, 2, 2, learning_rate=0.01,
                              warmup_ratio=0.25)
  assert plan == (8, 4, 1, 0.01)
  assert two_phase.format_plan(plan) == (
      "train_batch_size=8 num_train_steps=4 num_warmup_steps=1 "
      "learning_rate=0.01")
  with pytest.raises(UserError):
    two_phase.plan_phase(16, 2, 2, 2, 2, warmup_ratio=1.5)


def run_script(*args, env=None):
  full_env = dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2")
  full_env.update(env or {})
  return subprocess.run(["bash", SCRIPT] + list(args), env=full_env,
                        capture_output=True, text=True, timeout=900)


def test_help_documents_every_setting():
  result = run_script("--help")
  assert result.returncode == 0
  with open(SCRIPT) as f:
    text = f.read()
  settings = set(re.findall(r"\$\{([A-Z0-9_]+):?-", text))
  documented = set(re.findall(r"^  ([A-Z0-9_]+) ", result.stdout, re.M))
  accepted = set(re.search(r"VARIABLES=\(([^)]*)\)", text).group(1).split())
  assert len(settings) == 28 and "DRY_RUN" in settings
  assert documented == settings == accepted


def test_dry_run_prints_the_baseline_steps_and_both_commands(tmp_path):
  result = run_script("DRY_RUN=1", "OUTPUT_DIR=%s" % tmp_path, "--use_fp16")
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0] == (
      "[run_two_phase.sh] phase 1: seq 128, global batch 512 (64 per replica "
      "x 1 replica(s) x 8 micro-batches), 900000 steps (baseline 512 x "
      "900000), warm-up 2813, learning rate 0.000625")
  assert lines[1].startswith("[run_two_phase.sh] phase 2: seq 512, global "
                             "batch 512 (16 per replica x 1 replica(s) x 32 "
                             "micro-batches), 100000 steps")
  phase1, phase2 = lines[3], lines[4]
  for flag in ("--train_batch_size=512", "--num_accumulation_steps=8",
               "--num_train_steps=900000", "--num_warmup_steps=2813",
               "--max_seq_length=128", "--optimizer=lamb", "--use_fp16",
               "--output_dir=%s/phase1" % tmp_path):
    assert flag in phase1.split()
  for flag in ("--num_accumulation_steps=32", "--num_train_steps=100000",
               "--max_seq_length=512", "--max_predictions_per_seq=80",
               "--init_checkpoint=%s/phase1" % tmp_path,
               "--output_dir=%s/phase2" % tmp_path, "--use_fp16"):
    assert flag in phase2.split()
  assert "--init_checkpoint" not in phase1
  assert not (tmp_path / "phase1").exists()


def test_dry_run_scales_steps_with_replicas_and_accumulation():
  result = run_script("DRY_RUN=1", "NUM_GPUS=8", "PHASE1_BATCH_PER_GPU=32",
                      "PHASE1_ACCUMULATION=4", "PHASE2_BATCH_PER_GPU=8",
                      "PHASE2_ACCUMULATION=2")
  assert result.returncode == 0, result.stderr
  phase1, phase2 = result.stdout.splitlines()[3:5]
  # 512 * 900000 / (32 * 8 * 4) and 512 * 100000 / (8 * 8 * 2).
  assert "--num_train_steps=450000" in phase1.split()
  assert "--train_batch_size=1024" in phase1.split()
  assert "--num_gpus=8" in phase1.split()
  assert "--num_train_steps=400000" in phase2.split()
  assert "--train_batch_size=128" in phase2.split()


@pytest.mark.parametrize("args,message", [
    (["WORK_DIR={tmp}"], "run_two_phase.sh: error: PHASE1_INPUT_FILE: no file "
     "matches '{tmp}/data/pretrain_128.tfrecord'; make them with "
     "scripts/run_create.sh MAX_SEQ_LENGTH=128"),
    (["PHASE1_INPUT_FILE={data}", "WORK_DIR={tmp}"],
     "run_two_phase.sh: error: PHASE2_INPUT_FILE: no file matches "
     "'{tmp}/data/pretrain_512.tfrecord'"),
    (["PHASE1_INPUT_FILE={data}", "PHASE2_INPUT_FILE={data}",
      "BERT_CONFIG_FILE={tmp}/none.json"],
     "run_two_phase.sh: error: BERT_CONFIG_FILE={tmp}/none.json does not "
     "exist"),
    (["PHASE2_ACCUMULATION=0"], "run_two_phase.sh: error: PHASE2_ACCUMULATION "
     "must be a positive whole number, got '0'"),
    (["PHASE1_WARMUP_RATIO=2", "DRY_RUN=1"], "run_two_phase.sh: error: phase "
     "1: --warmup_ratio must be in [0, 1], got 2.0 (PHASE1_* settings)"),
    (["NUM_GPUS=2", "CPU_REPLICAS=2"], "run_two_phase.sh: error: set NUM_GPUS "
     "or CPU_REPLICAS, not both"),
    (["NUM_STEPS=3"], "run_two_phase.sh: error: unknown setting NUM_STEPS"),
    (["OPTIMIZER=sgd", "DRY_RUN=1"], "run_two_phase.sh: error: OPTIMIZER "
     "must be lamb or adamw, got 'sgd'"),
    # Phase 2's length against the config, before phase 1 trains (the
    # config's max_position_embeddings: 64).
    (["PHASE1_INPUT_FILE={data}", "PHASE2_INPUT_FILE={data}",
      "BERT_CONFIG_FILE={config}", "PHASE1_SEQ_LENGTH=32"],
     "run_two_phase.sh: error: PHASE2_SEQ_LENGTH=512 exceeds the "
     "max_position_embeddings 64 of BERT_CONFIG_FILE={config}; use a config "
     "that covers it, or PHASE2_SEQ_LENGTH <= 64"),
    (["DRY_RUN=1", "BERT_CONFIG_FILE={config}"], "run_two_phase.sh: error: "
     "PHASE1_SEQ_LENGTH=128 exceeds the max_position_embeddings 64"),
    # Phase 2's records, made for another length.
    (["PHASE1_INPUT_FILE={data}", "PHASE2_INPUT_FILE={records}",
      "BERT_CONFIG_FILE={config}", "PHASE1_SEQ_LENGTH=32",
      "PHASE2_SEQ_LENGTH=64", "PHASE2_MAX_PREDICTIONS=5"],
     "run_two_phase.sh: error: phase 2: {records}: feature input_ids has "
     "length 32 but --max_seq_length=64; recreate the data or pass "
     "--max_seq_length=32 (PHASE2_* settings)"),
    # A flag the script sets per phase, passed to both.
    (["DRY_RUN=1", "--max_seq_length=128"], "run_two_phase.sh: error: "
     "--max_seq_length=128: run_two_phase.sh sets --max_seq_length itself, "
     "from PHASE1_SEQ_LENGTH, PHASE2_SEQ_LENGTH; set those instead"),
    (["DRY_RUN=1", "--output_dir={tmp}/elsewhere"], "run_two_phase.sh: "
     "error: --output_dir={tmp}/elsewhere: run_two_phase.sh sets "
     "--output_dir itself, from OUTPUT_DIR; set that instead"),
    # A setting and its flag, given different values.
    (["DRY_RUN=1", "OPTIMIZER=lamb", "--optimizer=adamw"],
     "run_two_phase.sh: error: OPTIMIZER=lamb and --optimizer=adamw disagree "
     "(run_two_phase.sh passes OPTIMIZER as --optimizer); give one of them"),
])
def test_bad_settings_are_one_line_and_exit_2(tmp_path, args, message):
  """Before anything runs: nothing in OUTPUT_DIR."""
  data = tmp_path / "present.tfrecord"
  data.write_bytes(b"")
  (tmp_path / "tiny.json").write_text(json.dumps(TINY_CONFIG))
  records = tmp_path / "records_32.tfrecord"
  synthetic_data.write_synthetic_pretraining_records(str(records), 8, 32, 5,
                                                     128)
  fill = {"tmp": str(tmp_path), "data": str(data), "records": str(records),
          "config": str(tmp_path / "tiny.json")}
  result = run_script("OUTPUT_DIR=%s" % (tmp_path / "out"),
                      *[a.format(**fill) for a in args])
  assert result.returncode == 2
  assert result.stdout == ""
  lines = result.stderr.splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith(message.format(**fill)), lines[0]
  assert not (tmp_path / "out").exists()


def test_a_flag_of_a_setting_is_the_setting():
  """--cpu_replicas=2 is CPU_REPLICAS=2: the step rule counts 2 replicas."""
  result = run_script("DRY_RUN=1", "--cpu_replicas=2")
  assert result.returncode == 0, result.stderr
  assert "(64 per replica x 2 replica(s) x 8 micro-batches), 450000 steps" \
      in result.stdout.splitlines()[0]
  assert "--cpu_replicas=2" in result.stdout.splitlines()[3].split()


PHASE2_LR, PHASE2_STEPS = 0.01, 4


@pytest.mark.slow
def test_two_phases_end_to_end(tmp_path):
  """Seq 32 for 6 steps, then seq 64 for 4 steps from phase 1's weights."""
  config = tmp_path / "tiny.json"
  config.write_text(json.dumps(TINY_CONFIG))
  for name, seq, preds in (("short", 32, 5), ("long", 64, 10)):
    synthetic_data.write_synthetic_pretraining_records(
        str(tmp_path / (name + ".tfrecord")), 64, seq, preds, 128)
  out = tmp_path / "out"
  # Baseline 16 x 3 (then 16 x 2) at a global batch of 2 x 2 replicas x 2
  # micro-batches = 8: 6, then 4 steps.
  result = run_script(
      "BERT_CONFIG_FILE=%s" % config, "OUTPUT_DIR=%s" % out,
      "PHASE1_INPUT_FILE=%s" % (tmp_path / "short.tfrecord"),
      "PHASE2_INPUT_FILE=%s" % (tmp_path / "long.tfrecord"),
      "PHASE1_SEQ_LENGTH=32", "PHASE2_SEQ_LENGTH=64",
      "PHASE1_MAX_PREDICTIONS=5", "PHASE2_MAX_PREDICTIONS=10",
      "CPU_REPLICAS=2", "BASELINE_BATCH=16", "PHASE1_BASELINE_STEPS=3",
      "PHASE2_BASELINE_STEPS=2", "PHASE1_BATCH_PER_GPU=2",
      "PHASE2_BATCH_PER_GPU=2", "PHASE1_ACCUMULATION=2",
      "PHASE2_ACCUMULATION=2", "PHASE1_LEARNING_RATE=0.01",
      "PHASE2_LEARNING_RATE=%g" % PHASE2_LR, "PHASE1_WARMUP_RATIO=0.25",
      "PHASE2_WARMUP_RATIO=0.25", "--tf_random_seed=1",
      "--log_every_n_steps=2")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "6 steps (baseline 16 x 3), warm-up 2" in result.stdout
  assert "4 steps (baseline 16 x 2), warm-up 1" in result.stdout
  phase1 = load_checkpoint(str(out / "phase1"))
  phase2 = load_checkpoint(str(out / "phase2"))
  assert phase1["global_step"] == 6
  assert phase2["global_step"] == PHASE2_STEPS
  assert re.search(r"--init_checkpoint \S+/phase1/model\.ckpt-6: \d+ "
                   r"variable\(s\) loaded, 0 initialised fresh", result.stderr)
  weights = [n for n in phase1 if n.startswith(("bert/", "cls/"))
             and "adam_" not in n]
  assert len(weights) > 30
  # A LAMB step moves w by exactly lr_t * ||w_t|| (trust ratio) and
  # lr_t <= PHASE2_LR, so after phase 2's steps ||w2 - w1|| is at most
  # ||w1|| * ((1 + lr)**steps - 1): phase 2 continued from phase 1's
  # weights, not from fresh ones (which would be ~||w1|| away).
  bound = (1 + PHASE2_LR) ** PHASE2_STEPS - 1
  for name in weights:
    w1_norm = np.linalg.norm(phase1[name])
    moved = np.linalg.norm(phase2[name] - phase1[name])
    assert w1_norm > 0, name
    assert 0 < moved <= w1_norm * bound * (1 + 1e-4), (name, moved, w1_norm)
  # Fresh optimizer slots: phase 2's first moments are not phase 1's.
  assert not np.allclose(phase2["bert/pooler/dense/kernel/adam_m"],
                         phase1["bert/pooler/dense/kernel/adam_m"])
