"""--use_bf16, and how long a training process takes to exit after its last
step, on records create_pretraining_data.py makes from sample_data/corpus.txt.

bfloat16 runs through TensorFlow's oneDNN graph rewrite, which only acts when
TensorFlow turned its oneDNN kernels on at import (TF_ENABLE_ONEDNN_OPTS=1).
The programs ask for them when the variable is unset (cpu_kernels); the
end-to-end test runs them without it, so bfloat16 really computes on any
machine (emulated where the CPU has no bfloat16 instructions).
"""

import json
import os
import time
import types

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from tensorflow.python.data.ops import multi_device_iterator_ops  # pylint: disable=g-direct-tensorflow-import

from bertkit.common import cpu_kernels
from bertkit.engine.input import input_pipeline
from bertkit.engine.loop import engine_setup
from bertkit.engine.loop.precision import LossScale
from bertkit.tasks.features import extraction as feature_extraction
from conftest import (REPO_ROOT, TINY_CONFIG, expect_user_error,
                      load_checkpoint, read_json, run_ok, run_program)
from bertkit.common.errors import UserError

SEQ, PREDS = 32, 5
# A user's environment without the variable: the programs' own default.
KERNELS_UNSET = {"TF_ENABLE_ONEDNN_OPTS": None}
# From the end of the last step to the exit: 1-3 s on a quiet machine, 10-17 s
# for the tiny model with 13 runnable processes per core; a lost tf.data
# autotuning wake-up added up to 60 s more (docs/benchmarks.md). The cause
# itself is guarded by test_input_pipelines_run_without_the_autotuning_thread.
EXIT_BOUND_SECONDS = 30.0


@pytest.fixture(scope="module")
def corpus_run_dir(tmp_path_factory):
  """A vocab, records and a tiny config made from sample_data/corpus.txt."""
  d = tmp_path_factory.mktemp("precision")
  run_ok(["create_vocab.py",
          "--input_file=%s" % os.path.join(REPO_ROOT, "sample_data",
                                           "corpus.txt"),
          "--output_file=%s" % (d / "vocab.txt"), "--vocab_size=512"])
  run_ok(["create_pretraining_data.py",
          "--input_file=%s" % os.path.join(REPO_ROOT, "sample_data",
                                           "corpus.txt"),
          "--output_file=%s" % (d / "records.tfrecord"),
          "--vocab_file=%s" % (d / "vocab.txt"),
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--dupe_factor=1"])
  config = dict(TINY_CONFIG)
  with open(d / "vocab.txt") as f:
    config["vocab_size"] = sum(1 for _ in f)
  with open(d / "tiny.json", "w") as f:
    json.dump(config, f)
  return d


def pretrain_args(d, output_dir, *extra, steps=8):
  return ["run_pretraining.py",
          "--bert_config_file=%s" % (d / "tiny.json"),
          "--input_file=%s" % (d / "records.tfrecord"),
          "--output_dir=%s" % output_dir, "--do_train",
          "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
          "--train_batch_size=8", "--num_train_steps=%d" % steps,
          "--num_warmup_steps=2", "--learning_rate=1e-3",
          "--log_every_n_steps=1", "--throughput_warmup_steps=2",
          "--tf_random_seed=1"] + list(extra)


def run_and_time_exit(args, env=None):
  """Runs a training program; returns (result, seconds from the end of its
  last step, when throughput_summary.json is written, to the exit)."""
  output_dir = [a.split("=", 1)[1] for a in args
                if a.startswith("--output_dir=")][0]
  result = run_ok(args, env=env)
  exited = time.time()
  written = os.path.getmtime(os.path.join(output_dir,
                                          "throughput_summary.json"))
  return result, exited - written


def logged_losses(output_dir):
  with open(os.path.join(output_dir, "throughput.jsonl")) as f:
    return [json.loads(line)["loss"] for line in f]


def test_programs_ask_for_onednn_unless_the_user_chose(monkeypatch):
  # This process asked before importing TensorFlow, as the programs do
  # (conftest), and TensorFlow took it (it reads the variable once).
  assert engine_setup.onednn_enabled()
  monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
  cpu_kernels.prefer_onednn()
  assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"
  monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
  cpu_kernels.prefer_onednn()
  assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"


def test_precision_flags_resolve_to_one_precision():
  assert engine_setup.resolve_precision(
      False, False, 0, False, set()).compute == "float32"
  with pytest.raises(UserError, match="mutually exclusive"):
    engine_setup.resolve_precision(True, True, 0, True, set())
  with pytest.raises(UserError, match="not available on GPUs"):
    engine_setup.resolve_precision(False, True, 1, True, set())
  # oneDNN off (TF_ENABLE_ONEDNN_OPTS=0): nothing to rewrite, said so.
  chosen = engine_setup.resolve_precision(False, True, 0, False, {"avx2"})
  assert (chosen.compute == "float32" and
          "TF_ENABLE_ONEDNN_OPTS=1" in chosen.reason)
  chosen = engine_setup.resolve_precision(False, True, 0, True,
                                            {"avx2", "avx512f"})
  assert chosen.compute == "mixed_bfloat16" and "emulated" in chosen.reason
  chosen = engine_setup.resolve_precision(
      False, True, 0, True, {"avx512f", "avx512_bf16", "amx_tile"})
  assert chosen.compute == "mixed_bfloat16"
  assert ("amx_tile, avx512_bf16" in chosen.reason and
          "emulated" not in chosen.reason)
  assert engine_setup.resolve_precision(
      True, False, 1, False, set()).compute == "mixed_float16"


def test_fp16_decides_loss_scaling_the_wire_and_the_loss_guard_at_once():
  fp16 = engine_setup.resolve_precision(True, False, 0, False, set(),
                                          LossScale(1024, 2), True)
  assert fp16.loss_scale == LossScale(1024, 2) and fp16.compress_gradients
  assert not fp16.stop_on_nonfinite_loss and fp16.fell_back
  assert fp16.summary() == {"precision": "float32", "use_fp16": True,
                            "use_bf16": False}
  fp32 = engine_setup.resolve_precision(False, False, 0, False, set(),
                                          LossScale(1024, 2), False)
  assert fp32.loss_scale is None and not fp32.compress_gradients
  assert not fp32.stop_on_nonfinite_loss and not fp32.fell_back


def test_only_bf16_turns_on_the_bfloat16_rewrite():
  plan = types.SimpleNamespace(name="one_device", devices=["/cpu:0"])
  rewrite = (lambda precision: engine_setup.session_config(
      plan, False, precision).graph_options.rewrite_options
             .auto_mixed_precision_onednn_bfloat16)
  on = engine_setup.rewriter_config_pb2.RewriterConfig.ON
  assert rewrite("mixed_bfloat16") == on
  assert rewrite("float32") != on and rewrite("mixed_float16") != on


def test_cpu_flags_reads_the_first_processor(tmp_path):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                     "processor\t: 1\nflags\t\t: fpu\n")
  assert engine_setup.cpu_flags(str(cpuinfo)) == {"fpu", "avx2",
                                                    "avx512_bf16"}
  assert engine_setup.cpu_flags(str(tmp_path / "missing")) == set()


def test_input_pipelines_run_without_the_autotuning_thread(corpus_run_dir):
  """The model thread whose lost wake-up stalled Session.close() 10-25 s."""
  pretraining = input_pipeline.pretraining_input_fn_builder(
      [str(corpus_run_dir / "records.tfrecord")],
      input_pipeline.PretrainingInput(SEQ, PREDS),
      is_training=True, global_batch_size=8, num_replicas=1)
  classifier = input_pipeline.records_input_fn(
      str(corpus_run_dir / "records.tfrecord"),
      input_pipeline.classifier_feature_spec(SEQ), is_training=True,
      drop_remainder=True, global_batch_size=8)
  extraction = feature_extraction.input_fn_builder(
      [feature_extraction.Feature(0, ["[CLS]", "[SEP]"], [101, 102], [1, 1],
                                  [0, 0])], [0], batch_size=8)
  with tf.Graph().as_default():
    for input_fn in (pretraining, classifier, extraction):
      assert input_fn().options().autotune.enabled is False



@pytest.mark.parametrize("strategy_name", ["one_device", "mirrored"])
def test_strategy_device_datasets_run_without_the_autotuning_thread(
    corpus_run_dir, strategy_name, monkeypatch):
  """The Estimator feeds replicas through tf.distribute's per-device datasets.

  Those do not inherit the input's options; their autotuning thread stalled
  close() 44-53 s in 4 of 10 runs after the input_fn's own datasets were
  fixed. The datasets are caught where tf.distribute builds them, and the
  pipeline is run for a few batches through the strategy's iterator.
  """
  input_fn = input_pipeline.pretraining_input_fn_builder(
      [str(corpus_run_dir / "records.tfrecord")],
      input_pipeline.PretrainingInput(SEQ, PREDS),
      is_training=True, global_batch_size=4, num_replicas=1)
  built = []
  with tf.Graph().as_default():
    input_fn()  # Installs the per-device fix, as the Estimator's call does.
    build = multi_device_iterator_ops._create_device_dataset  # pylint: disable=protected-access
    monkeypatch.setattr(multi_device_iterator_ops, "_create_device_dataset",
                        lambda *a, **k: built.append(build(*a, **k)) or
                        built[-1])
    strategy = (tf.distribute.OneDeviceStrategy("/cpu:0")
                if strategy_name == "one_device" else
                tf.distribute.MirroredStrategy(["/cpu:0"]))
    iterator = strategy.make_input_fn_iterator(lambda _: input_fn())
    features = iterator.get_next()
    with tf.Session() as session:
      session.run(iterator.initializer)
      for _ in range(3):
        batch = session.run(features)
        assert batch["input_ids"].shape == (4, SEQ)
  assert built and all(d.options().autotune.enabled is False for d in built)

@pytest.mark.slow
def test_bf16_trains_like_fp32_with_float32_variables(corpus_run_dir,
                                                      tmp_path):
  fp32_dir, bf16_dir = tmp_path / "fp32", tmp_path / "bf16"
  _, fp32_exit = run_and_time_exit(pretrain_args(corpus_run_dir, fp32_dir),
                                   env=KERNELS_UNSET)
  result, bf16_exit = run_and_time_exit(
      pretrain_args(corpus_run_dir, bf16_dir, "--use_bf16"), env=KERNELS_UNSET)
  assert fp32_exit < EXIT_BOUND_SECONDS and bf16_exit < EXIT_BOUND_SECONDS
  assert "precision: mixed_bfloat16" in result.stderr
  assert read_json(bf16_dir / "throughput_summary.json")["precision"] == (
      "mixed_bfloat16")
  assert read_json(fp32_dir / "throughput_summary.json")["precision"] == (
      "float32")
  fp32_losses, bf16_losses = (logged_losses(fp32_dir),
                              logged_losses(bf16_dir))
  assert len(fp32_losses) == len(bf16_losses) == 8
  # bfloat16 keeps 8 bits of mantissa: the losses of the same 8 steps agree
  # to about 1 %, and the weights differ (the rewrite did compute).
  np.testing.assert_allclose(bf16_losses, fp32_losses, rtol=0.02)
  assert bf16_losses[-1] < bf16_losses[0]
  fp32_vars, bf16_vars = load_checkpoint(str(fp32_dir)), load_checkpoint(
      str(bf16_dir))
  assert set(bf16_vars) == set(fp32_vars)
  floats = [n for n, v in fp32_vars.items() if v.dtype.kind == "f"]
  assert len(floats) > 40
  for name in floats:
    assert bf16_vars[name].dtype == np.float32, name
  kernel = "bert/encoder/layer_0/attention/self/query/kernel"
  assert not np.array_equal(bf16_vars[kernel], fp32_vars[kernel])
  np.testing.assert_allclose(bf16_vars[kernel], fp32_vars[kernel], atol=2e-3)


@pytest.mark.slow
def test_bf16_without_onednn_trains_in_float32_and_says_why(corpus_run_dir,
                                                            tmp_path):
  out = tmp_path / "bf16_default"
  result = run_ok(pretrain_args(corpus_run_dir, out, "--use_bf16", steps=3),
                  env={"TF_ENABLE_ONEDNN_OPTS": "0"})
  notes = [l for l in result.stderr.splitlines() if "precision:" in l]
  assert len(notes) == 1 and "TF_ENABLE_ONEDNN_OPTS=1" in notes[0]
  assert read_json(out / "throughput_summary.json")["precision"] == "float32"


@pytest.mark.slow
def test_bf16_and_fp16_together_is_one_error_line(corpus_run_dir, tmp_path):
  result = run_program(pretrain_args(corpus_run_dir, tmp_path / "both",
                                     "--use_bf16", "--use_fp16"))
  expect_user_error(result, "--use_bf16", "--use_fp16", "mutually exclusive")
  assert not (tmp_path / "both" / "checkpoint").exists()
