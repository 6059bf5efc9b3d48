"""run_pretraining.py end to end: run(options) in this process, and launched
as a user runs it where the process is the point (console output, C++ log
lines, --use_fp16's process-wide rewrite, several workers, exit codes)."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (REPO_ROOT, TINY_CONFIG, expect_user_error,
                      load_checkpoint, pretrain_args, pretrain_in_process,
                      program_in_process, read_json, run_ok, run_program)
from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
import modeling

@pytest.fixture(scope="module")
def strategy_runs(workdir):
  """Same data and global batch 8: 1 device x 8, 2 replicas x 4 (two ways)."""
  runs = {}
  for name, extra in [
      ("one_device", []),
      ("mirrored", ["--distribution_strategy=mirrored", "--cpu_replicas=2",
                    "--do_eval", "--max_eval_steps=4"]),
      ("multi_worker", ["--distribution_strategy=multi_worker",
                        "--cpu_replicas=2"]),
      ("central_storage", ["--distribution_strategy=central_storage",
                           "--cpu_replicas=2", "--do_eval",
                           "--max_eval_steps=4"])]:
    out = workdir / ("run_" + name)
    runs[name] = (out, pretrain_in_process(workdir, out, *extra))
  return runs


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["mirrored", "multi_worker",
                                      "central_storage"])
def test_two_replicas_equal_one_device_with_the_global_batch(strategy_runs,
                                                             strategy):
  reference = load_checkpoint(str(strategy_runs["one_device"][0]))
  replicated = load_checkpoint(str(strategy_runs[strategy][0]))
  assert set(reference) == set(replicated)
  assert replicated["global_step"] == 6
  for name, value in reference.items():
    np.testing.assert_allclose(replicated[name], value, rtol=1e-4, atol=1e-6,
                               err_msg=name)
  # The update moved the weights: equality is not two untouched copies.
  assert np.abs(reference["bert/pooler/dense/kernel/adam_m"]).max() > 0


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["mirrored", "multi_worker"])
def test_replicas_hold_identical_weights(strategy_runs, strategy):
  fingerprint = read_json(strategy_runs[strategy][0] / "final_weights.local.json")
  assert fingerprint["local_replicas"] == 2
  assert fingerprint["replicas_identical"] is True
  assert fingerprint["global_step"] == 6


@pytest.mark.slow
def test_central_storage_keeps_one_copy_evaluates_and_resumes(strategy_runs,
                                                              workdir):
  out, result = strategy_runs["central_storage"]
  assert "strategy=central_storage replicas=2" in result.stderr
  assert "global_batch=8 per_replica_batch=4" in result.stderr
  # The variables exist once (on the CPU), not once per replica.
  fingerprint = read_json(out / "final_weights.local.json")
  assert fingerprint["local_replicas"] == 1
  assert fingerprint["global_step"] == 6
  # Checkpoints are named as one device's, and the same variables are in them.
  reference = strategy_runs["one_device"][0]
  assert (tf.train.latest_checkpoint(str(out)) ==
          str(out / "model.ckpt-6"))
  assert (dict(tf.train.list_variables(str(out))) ==
          dict(tf.train.list_variables(str(reference))))
  lines = (out / "eval_results.txt").read_text().splitlines()
  results = dict(line.split(" = ") for line in lines)
  assert int(results["global_step"]) == 6
  assert 0.0 <= float(results["masked_lm_accuracy"]) <= 1.0
  # Resume in a copy: two more steps from the checkpoint of step 6.
  resumed = workdir / "central_storage_resumed"
  shutil.copytree(str(out), str(resumed))
  pretrain_in_process(workdir, resumed, "--cpu_replicas=2",
                      "--distribution_strategy=central_storage", steps=8)
  summary = read_json(resumed / "throughput_summary.json")
  assert summary["first_step"] == 6 and summary["final_step"] == 8
  after = load_checkpoint(str(resumed))
  assert after["global_step"] == 8
  before = load_checkpoint(str(out))
  assert not np.allclose(after["bert/pooler/dense/kernel"],
                         before["bert/pooler/dense/kernel"])


@pytest.mark.slow
def test_log_states_global_and_per_replica_batch(strategy_runs):
  stderr = strategy_runs["mirrored"][1].stderr
  assert "strategy=mirrored replicas=2" in stderr
  assert "global_batch=8 per_replica_batch=4" in stderr


@pytest.mark.slow
def test_eval_under_a_strategy_writes_upstream_metrics(strategy_runs):
  out = strategy_runs["mirrored"][0]
  lines = (out / "eval_results.txt").read_text().splitlines()
  results = dict(line.split(" = ") for line in lines)
  for key in ("masked_lm_accuracy", "masked_lm_loss",
              "next_sentence_accuracy", "next_sentence_loss"):
    assert key in results
  assert 0.0 <= float(results["masked_lm_accuracy"]) <= 1.0
  assert float(results["masked_lm_loss"]) > 0.0
  assert int(results["global_step"]) == 6


@pytest.mark.slow
def test_throughput_is_logged_to_jsonl_summary_and_tensorboard(strategy_runs):
  out = strategy_runs["mirrored"][0]
  records = [json.loads(l) for l in (out / "throughput.jsonl").read_text()
             .splitlines()]
  assert [r["steps_run"] for r in records] == [2, 4, 6]
  for r in records:
    assert r["examples_per_sec"] > 0
    assert r["examples_per_sec_per_replica"] == pytest.approx(
        r["examples_per_sec"] / 2, rel=1e-3)
    assert np.isfinite(r["loss"])
  summary = read_json(out / "throughput_summary.json")
  assert summary["num_replicas"] == 2 and summary["global_batch_size"] == 8
  assert summary["steps_run"] == 6 and summary["final_step"] == 6
  assert summary["steps_excluded_warmup"] == 2
  assert summary["steps_counted"] + summary["steps_excluded_checkpoint"] == 4
  assert summary["examples_per_sec"] > 0
  tags = set()
  for event_file in tf.io.gfile.glob(str(out / "events.out.tfevents.*")):
    for event in tf.train.summary_iterator(event_file):
      tags.update(v.tag for v in event.summary.value)
  assert "throughput/examples_per_sec" in tags
  assert "throughput/examples_per_sec_per_replica" in tags


@pytest.mark.slow
def test_each_log_line_is_printed_once(workdir):
  # The console of a launched program (its absl and TensorFlow handlers):
  # the mirrored run of strategy_runs, launched.
  # TensorFlow's own INFO lines (e.g. "Saving checkpoints") show only with
  # -v 1; test_user_messages checks those are printed once too.
  log = run_ok(pretrain_args(
      workdir, workdir / "printed_once", "--distribution_strategy=mirrored",
      "--cpu_replicas=2", "--do_eval", "--max_eval_steps=4")).stderr
  assert "INFO:tensorflow:" not in log
  for line in ("strategy=mirrored replicas=2", "Throughput (steady state)"):
    assert len([l for l in log.splitlines() if line in l]) == 1, (line, log)


@pytest.mark.slow
def test_rerun_resumes_and_counts_throughput_from_the_resume_point(workdir):
  out = workdir / "resume"
  pretrain_in_process(workdir, out, "--save_checkpoints_steps=4", steps=4)
  first = load_checkpoint(str(out))
  pretrain_in_process(workdir, out, "--save_checkpoints_steps=4", steps=8)
  summary = read_json(out / "throughput_summary.json")
  assert summary["first_step"] == 4 and summary["final_step"] == 8
  assert summary["steps_run"] == 4
  second = load_checkpoint(str(out))
  assert second["global_step"] == 8
  # Optimizer slots carried over: they are not a fresh start.
  assert np.abs(first["bert/pooler/dense/kernel/adam_v"]).max() > 0


@pytest.mark.slow
def test_init_checkpoint_loads_weights_only(strategy_runs, workdir):
  source = strategy_runs["one_device"][0]
  out = workdir / "from_init"
  result = pretrain_in_process(
      workdir, out, "--init_checkpoint=%s" % source, "--learning_rate=0",
      steps=1)
  assert "variable(s) loaded, 0 initialised fresh" in result.stderr
  loaded, original = load_checkpoint(str(out)), load_checkpoint(str(source))
  assert loaded["global_step"] == 1
  for name in original:
    if name.startswith(("bert/", "cls/")) and "adam" not in name:
      np.testing.assert_array_equal(loaded[name], original[name], err_msg=name)
  # Slots start fresh: after one step m = 0.1 * g, not the source's m.
  assert not np.allclose(loaded["bert/pooler/dense/kernel/adam_m"],
                         original["bert/pooler/dense/kernel/adam_m"])


@pytest.mark.slow
def test_use_xla_compiles_on_cpu_and_trains_the_same_model(strategy_runs,
                                                           workdir):
  out = workdir / "xla"
  result = run_ok(pretrain_args(workdir, out, "--use_xla"),
                  env={"TF_CPP_MIN_LOG_LEVEL": "0"})
  # Without --tf_xla_cpu_global_jit (programs.allow_xla_on_cpu) the
  # session's jit level is ignored on CPU and nothing is compiled.
  assert "Compiled cluster using XLA" in result.stderr
  plain = load_checkpoint(str(strategy_runs["one_device"][0]))
  compiled = load_checkpoint(str(out))
  assert compiled["global_step"] == plain["global_step"] == 6
  for name, value in plain.items():
    np.testing.assert_allclose(compiled[name], value, atol=1e-4, err_msg=name)


@pytest.mark.slow
def test_use_fp16_runs_on_cpu_and_says_it_has_no_effect(workdir):
  out = workdir / "fp16"
  result = run_ok(pretrain_args(
      workdir, out, "--use_fp16", "--init_loss_scale=1024",
      "--loss_scale_growth_steps=2", "--cpu_replicas=2", steps=6))
  notes = [l for l in result.stderr.splitlines() if "--use_fp16" in l]
  assert len(notes) == 1 and "no GPU" in notes[0]
  # 6 finite steps with growth every 2: 1024 * 2**3, and it is checkpointed.
  assert load_checkpoint(str(out))["current_loss_scale"] == 8192
  records = [json.loads(l) for l in (out / "throughput.jsonl").read_text()
             .splitlines()]
  assert "loss_scale" in records[-1]
  run_ok(pretrain_args(workdir, out, "--use_fp16", "--init_loss_scale=1024",
                       "--loss_scale_growth_steps=2", "--cpu_replicas=2",
                       steps=8))
  # Resumed with the saved scale, not --init_loss_scale: one more doubling.
  assert load_checkpoint(str(out))["current_loss_scale"] == 16384


@pytest.mark.slow
def test_two_workers_on_loopback_finish_with_the_same_weights(workdir):
  out = workdir / "multiworker"
  args = pretrain_args(workdir, out)[1:]
  env = dict(os.environ, PYTHON=sys.executable, NUM_WORKERS="2",
             TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run(
      ["bash", os.path.join(REPO_ROOT, "scripts", "run_multiworker_local.sh")]
      + args, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
      timeout=600)
  assert result.returncode == 0, result.stderr + result.stdout
  chief = read_json(out / "final_weights.worker-0.json")
  worker = read_json(out / "final_weights.worker-1.json")
  assert chief["global_step"] == worker["global_step"] == 6
  assert chief["sha256"] == worker["sha256"]
  assert load_checkpoint(str(out))["global_step"] == 6



def expect_refused(error, *fragments):
  """Asserts a UserError (the text after a launch's `error: `) holding every
  fragment."""
  for fragment in fragments:
    assert fragment in str(error.value), str(error.value)


def test_records_with_other_lengths_are_refused(workdir):
  with pytest.raises(UserError) as e:
    pretrain_in_process(workdir, workdir / "bad_len", "--max_seq_length=48")
  expect_refused(e, "input_ids", "length 32", "--max_seq_length=48")


def test_batch_must_divide_by_replicas(workdir):
  with pytest.raises(UserError) as e:
    pretrain_in_process(workdir, workdir / "bad_batch", "--cpu_replicas=3")
  expect_refused(e, "--train_batch_size=8", "3 replicas")


def test_a_batch_that_splits_into_no_micro_batches_makes_no_output_dir(
    workdir):
  out = workdir / "bad_accumulation"
  with pytest.raises(UserError) as e:
    pretrain_in_process(workdir, out, "--num_accumulation_steps=3")
  expect_refused(e, "--train_batch_size=8 (the global batch per update) "
                 "must divide by 1 replicas x --num_accumulation_steps=3")
  assert not out.exists()


def test_pretraining_into_another_programs_run_is_refused(workdir,
                                                          tmp_path):
  """A classifier's run as --output_dir: its checkpoint lacks the
  pretraining heads this run would resume with; nothing is written."""
  out = tmp_path / "classifier_run"
  out.mkdir()
  rng = np.random.RandomState(0)
  checkpoint_formats.write_checkpoint(str(out / "model.ckpt-3"), {
      name: rng.standard_normal(shape).astype(np.float32)
      for name, _, shape, _ in checkpoint_formats.weight_table(
          modeling.BertConfig.from_dict(TINY_CONFIG),
          heads.CLASSIFIER, 2)})
  tf.train.update_checkpoint_state(str(out), str(out / "model.ckpt-3"))
  before = sorted(os.listdir(out))
  with pytest.raises(UserError) as e:
    pretrain_in_process(workdir, out)
  expect_refused(e, "--output_dir %s holds model.ckpt-3, which this run "
                 "would resume from, but it lacks 7 of the model's variables "
                 "(cls/predictions/output_bias, " % out,
                 "another program's run; give another --output_dir")
  assert sorted(os.listdir(out)) == before


def test_more_gpus_than_present_is_refused(workdir):
  with pytest.raises(UserError) as e:
    pretrain_in_process(workdir, workdir / "bad_gpus", "--num_gpus=2")
  expect_refused(e, "--num_gpus=2", "0 GPU")


@pytest.mark.slow
def test_init_checkpoint_with_other_shapes_is_refused(strategy_runs, workdir):
  bigger = dict(TINY_CONFIG, hidden_size=64, intermediate_size=128)
  with open(workdir / "bigger.json", "w") as f:
    json.dump(bigger, f)
  run_dir = strategy_runs["one_device"][0]
  # The run directory describes its model: the first field that differs.
  # Without a description, the checkpoint's shapes are what differ.
  undescribed = workdir / "undescribed_init"
  shutil.copytree(run_dir, undescribed,
                  ignore=shutil.ignore_patterns("bert_config.json"))
  for init, refusal in ((run_dir, "says hidden_size 64, but the "
                         "bert_config.json of --init_checkpoint"),
                        (undescribed, "differ in shape")):
    args = pretrain_args(workdir, workdir / "bad_init",
                         "--init_checkpoint=%s" % init)
    args[1] = "--bert_config_file=%s" % (workdir / "bigger.json")
    with pytest.raises(UserError) as e:
      program_in_process(args)
    expect_refused(e, refusal)
    assert not (workdir / "bad_init" / "checkpoint").exists()


def test_input_glob_matching_nothing_is_refused(workdir):
  args = pretrain_args(workdir, workdir / "bad_glob")
  args[2] = "--input_file=%s" % (workdir / "nothing-*.tfrecord")
  with pytest.raises(UserError) as e:
    program_in_process(args)
  expect_refused(e, "matches no file")


@pytest.mark.slow
def test_malformed_tf_config_is_refused(workdir):
  result = run_program(pretrain_args(workdir, workdir / "bad_tfconfig"),
                       env={"TF_CONFIG": "{not json"})
  expect_user_error(result, "TF_CONFIG is not valid JSON")
