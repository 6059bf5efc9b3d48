"""What users see on the console: quiet by default, TensorFlow's detail with
-v 1, and error lines that speak of what the user gave."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bertkit.common import console
from bertkit.common import heads
from bertkit.engine.checkpointing import checkpoint_formats
import modeling
from conftest import (REPO_ROOT, RUN_AND_REPORT_TENSORFLOW, TINY_CONFIG,
                      expect_user_error, pretrain_args, requires_horovod,
                      run_program)

CPD_DATA = os.path.join(REPO_ROOT, "tests", "fixtures", "create_pretraining_data")

# Lines a default run must not print: TensorFlow's deprecation notices and
# INFO detail, Python warnings about tf.layers, the C++ runtime's start-up.
NOISE = ("Instructions for updating", "is deprecated", "UserWarning",
         "Using config", "Calling model_fn", "Unable to register",
         "cpu_feature_guard")


@pytest.mark.parametrize("argv,expected", [
    ([], 0), (["-v", "1"], 1), (["-v=1"], 1), (["--verbosity=1"], 1),
    (["--verbosity", "2"], 2), (["--v=-1"], -1), (["-v", "x"], 0),
    (["--do_train", "-v", "1", "--", "-v", "3"], 1), (["-v"], 0)])
def test_verbosity_is_read_from_the_command_line_as_absl_reads_it(
    argv, expected):
  assert console.verbosity_from_argv(["prog"] + argv) == expected


def run_as_user(args):
  """A program run with the environment a user has: no TF_CPP_MIN_LOG_LEVEL."""
  env = dict(os.environ)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  return subprocess.run([sys.executable] + args, cwd=REPO_ROOT, env=env,
                        capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_pretraining_prints_progress_and_summary_and_no_tensorflow_noise(
    workdir):
  args = pretrain_args(workdir, workdir / "quiet", "--do_eval",
                       "--max_eval_steps=2", steps=4)
  quiet = run_as_user(args)
  assert quiet.returncode == 0, quiet.stderr[-3000:]
  output = quiet.stdout + quiet.stderr
  for noise in NOISE:
    assert noise not in output, noise
  assert "strategy=one_device replicas=1" in quiet.stderr
  assert "step 3/4: " in quiet.stderr and "examples/sec" in quiet.stderr
  assert "***** Run summary: " in quiet.stdout
  assert "eval masked_lm_accuracy = " in quiet.stdout
  assert "Eval results" not in quiet.stderr  # printed once, in the summary
  # Setup, progress, eval and the summary: a screenful.
  assert len(output.splitlines()) <= 30, output

  verbose = run_as_user(args[:-1] + ["--output_dir=%s" % (workdir / "loud"),
                                     "-v", "1"])
  assert verbose.returncode == 0, verbose.stderr[-3000:]
  for detail in ("Instructions for updating", "Calling model_fn",
                 "Using config"):
    assert detail in verbose.stderr, detail
  assert "***** Run summary: " in verbose.stdout
  # One handler: each of TensorFlow's lines once, not also TF's own format.
  assert "INFO:tensorflow:" not in verbose.stderr
  saves = [l for l in verbose.stderr.splitlines()
           if "Saving checkpoints for 4 " in l]
  assert len(saves) == 1, saves


@pytest.mark.slow
def test_create_pretraining_data_logs_its_examples_with_v_1_only(tmp_path):
  args = ["create_pretraining_data.py",
          "--input_file=%s" % os.path.join(CPD_DATA, "corpus.txt"),
          "--vocab_file=%s" % os.path.join(CPD_DATA, "vocab.txt"),
          "--output_file=%s" % (tmp_path / "out.tfrecord"),
          "--max_seq_length=32", "--max_predictions_per_seq=5",
          "--dupe_factor=1"]
  quiet = run_as_user(args)
  assert quiet.returncode == 0, quiet.stderr[-3000:]
  assert "*** Example ***" not in quiet.stderr
  assert "Wrote " in quiet.stderr
  verbose = run_as_user(args + ["-v", "1"])
  assert verbose.returncode == 0, verbose.stderr[-3000:]
  assert verbose.stderr.count("*** Example ***") == 20


def test_a_text_file_as_input_file_is_said_to_be_no_tfrecord_file(workdir):
  text = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
  args = pretrain_args(workdir, workdir / "text_input")
  args = [a for a in args if not a.startswith("--input_file=")]
  line = expect_user_error(run_program(args + ["--input_file=" + text]),
                           text, "is not a TFRecord file")
  assert "ends at byte" not in line


def write_hf_dir(directory, config_dict):
  """A Hugging Face BertForPreTraining directory of random weights."""
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig.from_dict(config_dict)
  table = checkpoint_formats.weight_table(config,
                                          heads.PRETRAINING)
  rng = np.random.RandomState(0)
  weights = {name: rng.standard_normal(shape).astype(np.float32)
             for name, _, shape, _ in table}
  os.makedirs(directory)
  save_file(checkpoint_formats.to_hf_state(weights, table),
            os.path.join(directory, "model.safetensors"))
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(checkpoint_formats.hf_config(config,
                                           heads.PRETRAINING), f)


def test_a_hugging_face_init_checkpoint_of_another_size_is_named_as_given(
    workdir):
  hf_dir = str(workdir / "hf_wider")
  write_hf_dir(hf_dir, dict(TINY_CONFIG, intermediate_size=48))
  line = expect_user_error(
      run_program(pretrain_args(workdir, workdir / "hf_init",
                                "--init_checkpoint=" + hf_dir)),
      "says intermediate_size 64, but the config.json of the Hugging Face "
      "--init_checkpoint %s says 48" % hf_dir)
  assert "hf-init-checkpoint" not in line


@pytest.mark.slow
@requires_horovod
def test_horovod_launcher_ends_with_the_ranks_error_line_and_code(workdir):
  env = dict(os.environ, PYTHON=sys.executable)
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  result = subprocess.run(
      [os.path.join(REPO_ROOT, "scripts", "run_pre_horovod.sh"), "-n", "2",
       "-c", str(workdir / "tiny.json"), "-i", str(workdir / "data.tfrecord"),
       "-o", str(workdir / "horovod_bad_accumulation"), "-b", "8",
       "-s", "32", "-p", "5", "-t", "4", "--",
       "--num_accumulation_steps=3"],
      cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
  output = result.stdout + result.stderr
  assert result.returncode == 2, output[-3000:]
  assert "Traceback" not in output and "RuntimeError" not in output
  error_lines = [l for l in output.splitlines() if "error:" in l]
  assert error_lines == [result.stderr.rstrip().splitlines()[-1]], output
  # Found by every rank once horovod has started (the batch splits between
  # the 2 ranks, not into their micro-batches).
  assert error_lines[0] == (
      "error: --train_batch_size=8 (the global batch per update) must divide "
      "by 2 replicas x --num_accumulation_steps=3 = 6")




@pytest.mark.parametrize("program,args,expected", [
    ("run_pretraining.py", ["--do_train", "--input_file={tmp}/none-*.tfrecord",
                            "--output_dir={tmp}/out"],
     "--input_file pattern {tmp}/none-*.tfrecord matches no file"),
    ("run_classifier.py", ["--do_train", "--task_name=cola",
                           "--data_dir={tmp}", "--vocab_file={tmp}/vocab.txt",
                           "--output_dir={tmp}/out", "--max_seq_length=2"],
     "--max_seq_length must be >= 3"),
    ("run_squad.py", ["--do_train", "--train_file={tmp}/train.json",
                      "--vocab_file={tmp}/no-vocab.txt",
                      "--output_dir={tmp}/out"],
     "--vocab_file {tmp}/no-vocab.txt: no such file"),
    ("export_checkpoint.py", ["--checkpoint={tmp}", "--output_dir={tmp}/out",
                              "--format=google,onnx"],
     "unknown format onnx"),
])
def test_a_bad_flag_is_refused_before_tensorflow_is_imported(
    tmp_path, program, args, expected):
  result = run_program(
      ["-c", RUN_AND_REPORT_TENSORFLOW, program] +
      [arg.format(tmp=tmp_path) for arg in args])
  expect_user_error(result, expected.format(tmp=tmp_path))
  assert result.stdout.splitlines()[-1] == "tensorflow imported: False"
