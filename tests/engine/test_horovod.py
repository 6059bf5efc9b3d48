"""Tests of --distribution_strategy=horovod (horovod_engine.py).

The tests that launch ranks need horovod (scripts/install_horovod.sh) and are
skipped, with that reason, without it. How ranks share out the input (the
runner's InputContext), the launcher script's argument checks and the
missing-horovod error run everywhere; the last hides an installed horovod
behind a package that fails to import.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from conftest import (REPO_ROOT, TINY_CONFIG, load_checkpoint,
                      requires_horovod, run_program)
from bertkit.engine.input import input_pipeline
from bertkit.perf import synthetic_data
from bertkit.tasks.classification import features as classifier_features
from helpers.processes import hide_horovod, horovodrun

SEQ, PREDS, VOCAB = 32, 5, 128
PER_RANK_BATCH, STEPS, RECORDS_PER_FILE = 4, 6, 16
# Large enough for the weights to move far beyond the comparison tolerance.
LEARNING_RATE = "1e-3"


def rank_lines(output, tag):
  """Payloads of lines `[r]<stdout>:TAG {json}` from horovodrun's output."""
  found = {}
  for match in re.finditer(r"^\[(\d+)\]<stdout>:%s (.*)$" % tag, output,
                           re.MULTILINE):
    found[int(match.group(1))] = json.loads(match.group(2))
  return found


def pretraining_rows(files, num_ranks, rank, num_rows, start_step=None):
  """The input_ids rows (as tuples) that rank `rank` of `num_ranks` reads,
  one per step (per-rank batch 1), as the runner feeds a horovod rank; with
  num_ranks=None, the whole stream one process reads."""
  context = None
  if num_ranks:
    context = tf.distribute.InputContext(num_input_pipelines=num_ranks,
                                         input_pipeline_id=rank,
                                         num_replicas_in_sync=num_ranks)
  with tf.Graph().as_default():
    input_fn = input_pipeline.pretraining_input_fn_builder(
        files, input_pipeline.PretrainingInput(SEQ, PREDS), is_training=True,
        global_batch_size=num_ranks or 1, num_replicas=num_ranks or 1,
        deterministic=True,
        start_step_fn=(lambda: start_step) if start_step else None)
    batch = tf.data.make_one_shot_iterator(
        input_fn(input_context=context)).get_next()["input_ids"]
    with tf.Session() as sess:
      return [tuple(sess.run(batch)[0].tolist()) for _ in range(num_rows)]


@pytest.mark.parametrize("num_ranks", [2, 3])
def test_fewer_files_than_ranks_share_out_the_records_exactly(tmp_path,
                                                               num_ranks):
  path = synthetic_data.write_synthetic_pretraining_records(
      str(tmp_path / "one.tfrecord"), 12, SEQ, PREDS, VOCAB)
  assert input_pipeline.shards_by_record(1, num_ranks)
  stream = pretraining_rows([path], None, 0, 24)  # two epochs, in order
  assert len(set(stream[:12])) == 12
  per_epoch = 12 // num_ranks
  shares = [pretraining_rows([path], num_ranks, rank, 2 * per_epoch)
            for rank in range(num_ranks)]
  for rank, share in enumerate(shares):
    # Rank r reads records r, r+N, r+2N, ... of the stream, epoch after epoch.
    assert share == stream[rank::num_ranks]
  # Disjoint and covering: every record once per epoch over all ranks.
  first_epoch = [row for share in shares for row in share[:per_epoch]]
  assert sorted(first_epoch) == sorted(stream[:12])
  # A rank resuming at step 2 starts where the uninterrupted run would be.
  for rank in range(num_ranks):
    assert pretraining_rows([path], num_ranks, rank, 1, start_step=2) == [
        stream[2 * num_ranks + rank]]


def test_at_least_as_many_files_as_ranks_share_out_whole_files(tmp_path):
  paths = [synthetic_data.write_synthetic_pretraining_records(
      str(tmp_path / ("f%d.tfrecord" % i)), 4, SEQ, PREDS, VOCAB, seed=i)
           for i in range(3)]
  assert not input_pipeline.shards_by_record(3, 2)
  files_read = [pretraining_rows(paths, 2, rank, 4 * (2 - rank))
                for rank in (0, 1)]
  # Rank 0 reads files 0 and 2, rank 1 file 1, each in order.
  assert files_read[0] == (pretraining_rows([paths[0]], None, 0, 4) +
                           pretraining_rows([paths[2]], None, 0, 4))
  assert files_read[1] == pretraining_rows([paths[1]], None, 0, 4)


def write_tiny_config(directory):
  path = os.path.join(str(directory), "bert_config.json")
  with open(path, "w") as f:
    json.dump(TINY_CONFIG, f)
  return path


def test_engine_imports_without_horovod(tmp_path):
  result = run_program(
      ["-c", "from bertkit.engine.distributed import horovod_engine; "
       "print(horovod_engine.SCRATCH_ROOT_ENV)"],
      env=hide_horovod(tmp_path))
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "BERT_HOROVOD_SCRATCH_ROOT"


@pytest.mark.slow
def test_missing_horovod_is_one_error_line(tmp_path):
  data = synthetic_data.write_synthetic_pretraining_records(
      str(tmp_path / "data.tfrecord"), 8, SEQ, PREDS, VOCAB)
  result = run_program(
      ["run_pretraining.py", "--bert_config_file", write_tiny_config(tmp_path),
       "--input_file", data, "--output_dir", str(tmp_path / "out"),
       "--do_train", "--max_seq_length", str(SEQ),
       "--max_predictions_per_seq", str(PREDS), "--train_batch_size", "8",
       "--num_train_steps", "2", "--distribution_strategy", "horovod"],
      env=hide_horovod(tmp_path))
  assert result.returncode == 2, result.stderr[-2000:]
  errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
  assert len(errors) == 1, result.stderr[-2000:]
  assert "--distribution_strategy=horovod needs horovod" in errors[0]
  assert "scripts/install_horovod.sh" in errors[0]
  assert "Traceback" not in result.stderr


def test_launcher_help_and_missing_arguments():
  script = os.path.join(REPO_ROOT, "scripts", "run_pre_horovod.sh")
  shown = subprocess.run([script, "--help"], capture_output=True, text=True)
  assert shown.returncode == 0
  assert "--np N" in shown.stdout and "GLOBAL batch" in shown.stdout
  env = {k: v for k, v in os.environ.items()
         if k not in ("INPUT_FILE", "OUTPUT_DIR")}
  missing = subprocess.run([script, "-n", "2"], capture_output=True,
                           text=True, env=env)
  assert missing.returncode == 2
  assert missing.stderr.strip() == \
      "error: --input (or INPUT_FILE) is required"


# The start of each probe script that run_probe runs on 2 ranks.
PROBE_START = textwrap.dedent("""\
    import json, sys
    sys.path.insert(0, %(repo)r)
    import numpy as np
    import tensorflow.compat.v1 as tf
    tf.disable_v2_behavior()
    import types
    import optimization
    from bertkit.engine.distributed import cluster_environment
    from bertkit.engine.distributed import distribution
    from bertkit.engine.distributed import horovod_engine
    from bertkit.engine.input import input_pipeline
    from bertkit.engine.loop import engine_setup
    from bertkit.engine.loop.precision import LossScale

    plan = distribution.StrategyPlan(
        "horovod", ["/cpu:0"], cluster_environment.horovod_world_size(),
        "auto", 600, None)
    FP32 = engine_setup.resolve_precision(False, False, 0, False, set())
    FP16 = engine_setup.resolve_precision(True, False, 0, False, set(),
                                            LossScale(1024, 100))
    """)


def run_probe(tmp_path, body, tag, **values):
  """Runs PROBE_START + `body` (with `values` filled in) on 2 horovod ranks.

  Returns:
    {rank: payload of its `TAG {json}` line}, for both ranks.
  """
  probe = tmp_path / "probe.py"
  probe.write_text((PROBE_START + body) % dict(values, repo=REPO_ROOT))
  result = subprocess.run(
      [horovodrun(), "-np", "2", "-H", "localhost:2", "--gloo",
       sys.executable, str(probe)], capture_output=True, text=True,
      timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  out = rank_lines(result.stdout, tag)
  assert sorted(out) == [0, 1]
  return out


PROBE = textwrap.dedent("""\
    group = horovod_engine.init(plan, FP32)
    is_chief, rank = group.rank == 0, group.rank
    value = tf.constant([1.0 / 3.0, rank + 1.0])
    sum32 = group.sum_across_processes([value], True)[0]
    group = horovod_engine.init(plan, FP16)
    sum16 = group.sum_across_processes([value], True)[0]
    tf.train.get_or_create_global_step()
    var = tf.get_variable("v", initializer=tf.constant([10.0 * rank + 1.0]))
    hook = horovod_engine.broadcast_hook()
    hook.begin()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      hook.after_create_session(sess, None)
      out = {"is_chief": is_chief, "sum32": sess.run(sum32).tolist(),
             "sum16": sess.run(sum16).tolist(),
             "dtype16": sess.run(sum16).dtype.name,
             "broadcast": sess.run(var).tolist()}
      context = engine_setup.input_context(types.SimpleNamespace(plan=plan))
      batches = input_pipeline.records_input_fn(
          %(records)r, input_pipeline.classifier_feature_spec(4),
          is_training=False, drop_remainder=False,
          global_batch_size=2)(input_context=context)
      labels = tf.data.make_one_shot_iterator(batches).get_next()["label_ids"]
      out["record_shard"] = [context.num_input_pipelines,
                             context.input_pipeline_id]
      out["labels"] = sess.run(labels).tolist() + sess.run(labels).tolist()
    print("PROBE " + json.dumps(out), flush=True)
    """)


@requires_horovod
@pytest.mark.slow
def test_two_ranks_sum_broadcast_and_shard(tmp_path):
  records = str(tmp_path / "classifier.tf_record")
  with tf.io.TFRecordWriter(records) as writer:
    for label in range(8):
      features = classifier_features.InputFeatures([label] * 4, [1] * 4,
                                                   [0] * 4, label_id=label)
      writer.write(classifier_features.serialize_features(features))
  out = run_probe(tmp_path, PROBE, "PROBE", records=records)
  third32, third16 = np.float32(1.0 / 3.0), np.float16(1.0 / 3.0)
  for rank in (0, 1):
    # SUM, not average: 1 + 2 = 3; identical on every rank.
    assert out[rank]["sum32"] == [float(third32 * 2), 3.0]
    # float16 on the wire: 1/3 arrives rounded to half precision.
    assert out[rank]["sum16"] == [float(np.float32(third16) * 2), 3.0]
    assert out[rank]["dtype16"] == "float32"
    # Rank 1 started from 11.0; the broadcast gives it rank 0's 1.0.
    assert out[rank]["broadcast"] == [1.0]
  assert out[0]["is_chief"] and not out[1]["is_chief"]
  # run_classifier's single train file: each rank reads its own records.
  assert out[0]["record_shard"] == [2, 0] and out[1]["record_shard"] == [2, 1]
  assert out[0]["labels"] == [0, 2, 4, 6] and out[1]["labels"] == [1, 3, 5, 7]


@pytest.fixture(scope="module")
def pretraining_data(tmp_path_factory):
  """Two per-rank files and the single file a 2x-batch process reads instead.

  Rank r reads file r and feeds PER_RANK_BATCH records per step, in order
  (--tf_random_seed makes reading deterministic). `combined` holds the same
  records with blocks of PER_RANK_BATCH taken alternately from rank 0's and
  rank 1's file, so its k-th batch of 2 * PER_RANK_BATCH is exactly rank 0's
  k-th batch followed by rank 1's. Every synthetic record has the same number
  of masked positions, so the mean of the two per-rank losses equals the loss
  of the concatenated batch, and the gradients must agree.
  """
  directory = tmp_path_factory.mktemp("horovod_data")
  per_rank = []
  for seed in (0, 1):
    rng = np.random.RandomState(seed)
    per_rank.append([synthetic_data.synthetic_example(
        rng, SEQ, PREDS, VOCAB).SerializeToString()
                     for _ in range(RECORDS_PER_FILE)])
  combined = []
  for start in range(0, RECORDS_PER_FILE, PER_RANK_BATCH):
    for records in per_rank:
      combined.extend(records[start:start + PER_RANK_BATCH])
  paths = {}
  for name, records in (("rank0", per_rank[0]), ("rank1", per_rank[1]),
                        ("combined", combined)):
    paths[name] = str(directory / ("%s.tfrecord" % name))
    with tf.io.TFRecordWriter(paths[name]) as writer:
      for record in records:
        writer.write(record)
  paths["config"] = write_tiny_config(directory)
  return paths


FP16_PROBE = textwrap.dedent("""\
    group = horovod_engine.init(plan, FP16)
    rank = group.rank
    inject = tf.placeholder_with_default(False, [])
    w = tf.get_variable("w", initializer=tf.constant([1.0, 2.0]))
    scale = tf.where(tf.logical_and(inject, tf.equal(rank, 1)), np.inf, 1.0)
    step = optimization.create_accumulating_optimizer(
        [lambda: tf.reduce_sum(tf.square(w)) * scale], 0.1, 10, 0,
        precision=FP16, replicas=distribution.Replicas(group))
    hook = horovod_engine.broadcast_hook()
    hook.begin()
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      hook.after_create_session(sess, None)
      states = []
      for poisoned in (False, True, False):
        sess.run(step.train_op, {inject: poisoned})
        global_step, loss_scale, weights = sess.run(
            [tf.train.get_global_step(), step.loss_scale, w])
        states.append([int(global_step), float(loss_scale),
                       weights.tolist()])
    print("FP16 " + json.dumps(states), flush=True)
    """)


@requires_horovod
@pytest.mark.slow
def test_fp16_step_overflowing_on_one_rank_is_skipped_on_every_rank(
    tmp_path):
  # The loss scale sees the gradients summed over the ranks, so rank 1's
  # overflow makes every rank skip the step and halve its scale.
  out = run_probe(tmp_path, FP16_PROBE, "FP16")
  assert out[0] == out[1]
  first, skipped, third = out[0]
  assert first[:2] == [1, 1024.0] and first[2] != [1.0, 2.0]
  assert skipped == [1, 512.0, first[2]]
  assert third[:2] == [2, 512.0] and third[2] != first[2]


def launch_two_ranks(data, output_dir, scratch_root, steps, extra=(),
                     inputs=None):
  """run_pretraining.py on 2 ranks through scripts/run_pre_horovod.sh, on
  `inputs` (default: one file per rank)."""
  env = dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2",
             BERT_HOROVOD_SCRATCH_ROOT=scratch_root)
  command = [
      os.path.join(REPO_ROOT, "scripts", "run_pre_horovod.sh"), "-n", "2",
      "-c", data["config"],
      "-i", inputs or "%s,%s" % (data["rank0"], data["rank1"]),
      "-o", output_dir, "-b", str(2 * PER_RANK_BATCH), "-s", str(SEQ),
      "-p", str(PREDS), "-t", str(steps), "-w", "2", "-l", LEARNING_RATE,
      "--", "--tf_random_seed", "1", "--log_every_n_steps", "1"] + list(extra)
  result = subprocess.run(command, capture_output=True, text=True,
                          timeout=600, env=env)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  return result


@pytest.fixture(scope="module")
def two_rank_run(pretraining_data, tmp_path_factory):
  """A finished 2-rank training run (with eval), as the tests find it."""
  root = tmp_path_factory.mktemp("horovod_run")
  output_dir, scratch_root = str(root / "out"), str(root / "scratch")
  launch_two_ranks(pretraining_data, output_dir, scratch_root, STEPS,
                   extra=["--do_eval", "--max_eval_steps", "2"])
  return {"output_dir": output_dir, "scratch_root": scratch_root}


def rank1_final_checkpoint(scratch_root, step):
  scratch = [d for d in os.listdir(scratch_root)
             if d.startswith("bert-horovod-rank1-")]
  latest = [tf.train.latest_checkpoint(os.path.join(scratch_root, d))
            for d in scratch]
  return [p for p in latest if p and p.endswith("model.ckpt-%d" % step)]


@requires_horovod
@pytest.mark.slow
def test_two_ranks_finish_with_identical_weights(two_rank_run):
  output_dir = two_rank_run["output_dir"]
  rank0 = tf.train.latest_checkpoint(output_dir)
  assert rank0 == os.path.join(output_dir, "model.ckpt-%d" % STEPS)
  final0 = load_checkpoint(rank0)
  assert final0["global_step"] == STEPS
  # Rank 1 kept its final weights in its scratch model_dir, not output_dir.
  rank1 = rank1_final_checkpoint(two_rank_run["scratch_root"], STEPS)
  assert len(rank1) == 1
  final1 = load_checkpoint(rank1[0])
  assert sorted(final1) == sorted(final0)
  for name in final0:
    np.testing.assert_array_equal(final1[name], final0[name], err_msg=name)
  fingerprints = {}
  for rank in (0, 1):
    with open(os.path.join(output_dir, "final_weights.rank-%d.json" % rank)) as f:
      fingerprints[rank] = json.load(f)
  assert fingerprints[0]["global_step"] == fingerprints[1]["global_step"] == STEPS
  assert fingerprints[0]["sha256"] == fingerprints[1]["sha256"]


@requires_horovod
@pytest.mark.slow
def test_only_rank0_writes_summaries_and_results(two_rank_run):
  output_dir = two_rank_run["output_dir"]
  events = [n for n in os.listdir(output_dir) if n.startswith("events.out")]
  assert len(events) == 1
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    results = dict(line.strip().split(" = ") for line in f)
  assert int(results["global_step"]) == STEPS
  with open(os.path.join(output_dir, "throughput_summary.json")) as f:
    summary = json.load(f)
  assert summary["strategy"] == "horovod" and summary["num_replicas"] == 2
  assert summary["final_step"] == STEPS


@pytest.fixture(scope="module")
def one_device_run(pretraining_data, tmp_path_factory):
  """The run every 2-rank run must equal: one device, the `combined` file,
  double the per-rank batch, same steps, learning rate and seed. Returns
  its weights at the end and after its second step."""
  one_dir = str(tmp_path_factory.mktemp("one_device"))
  result = run_program(
      ["run_pretraining.py", "--bert_config_file", pretraining_data["config"],
       "--input_file", pretraining_data["combined"], "--output_dir", one_dir,
       "--do_train", "--max_seq_length", str(SEQ),
       "--max_predictions_per_seq", str(PREDS),
       "--train_batch_size", str(2 * PER_RANK_BATCH),
       "--num_train_steps", str(STEPS), "--num_warmup_steps", "2",
       "--learning_rate", LEARNING_RATE, "--tf_random_seed", "1",
       "--distribution_strategy", "one_device",
       "--save_checkpoints_steps", "2"])
  assert result.returncode == 0, result.stderr[-3000:]
  return (load_checkpoint(os.path.join(one_dir, "model.ckpt-%d" % STEPS)),
          load_checkpoint(os.path.join(one_dir, "model.ckpt-2")))


def assert_equal_weights(ranks, single):
  assert sorted(single) == sorted(ranks)
  for name in single:
    np.testing.assert_allclose(ranks[name], single[name], rtol=0, atol=1e-5,
                               err_msg=name)


@requires_horovod
@pytest.mark.slow
def test_two_ranks_equal_one_device_with_double_batch(two_rank_run,
                                                      one_device_run):
  single, after_two_steps = one_device_run
  assert_equal_weights(load_checkpoint(os.path.join(
      two_rank_run["output_dir"], "model.ckpt-%d" % STEPS)), single)
  # The weights moved by much more than the tolerance: the match means the
  # same updates, with the learning rate applied once, not times the ranks.
  moved = max(np.max(np.abs(single[n] - after_two_steps[n]))
              for n in after_two_steps if n != "global_step")
  assert moved > 1e-3


@requires_horovod
@pytest.mark.slow
def test_two_ranks_on_one_file_read_by_record_and_equal_one_device(
    pretraining_data, one_device_run, tmp_path):
  # Fewer files than ranks: each rank reads every other record of the one
  # file, so step k's two per-rank batches are together the one device's
  # k-th batch of the same file.
  output_dir = str(tmp_path / "ranks")
  result = launch_two_ranks(pretraining_data, output_dir,
                            str(tmp_path / "scratch"), STEPS,
                            inputs=pretraining_data["combined"])
  for rank in (0, 1):
    assert ("horovod rank %d of 2 reads one record in 2, from record %d, of "
            "1 input file(s)" % (rank, rank)) in result.stderr
  assert_equal_weights(load_checkpoint(os.path.join(
      output_dir, "model.ckpt-%d" % STEPS)), one_device_run[0])


@requires_horovod
@pytest.mark.slow
def test_two_ranks_resume_from_rank0_checkpoint(pretraining_data,
                                                two_rank_run):
  # Depends on two_rank_run's directory; runs after the tests reading it.
  output_dir = two_rank_run["output_dir"]
  result = launch_two_ranks(pretraining_data, output_dir,
                            two_rank_run["scratch_root"], STEPS + 2)
  assert "starts from %s" % os.path.join(output_dir, "model.ckpt-%d" % STEPS) \
      in result.stderr
  final0 = load_checkpoint(tf.train.latest_checkpoint(output_dir))
  assert final0["global_step"] == STEPS + 2
  rank1 = rank1_final_checkpoint(two_rank_run["scratch_root"], STEPS + 2)
  assert len(rank1) == 1
  final1 = load_checkpoint(rank1[0])
  for name in final0:
    np.testing.assert_array_equal(final1[name], final0[name], err_msg=name)
