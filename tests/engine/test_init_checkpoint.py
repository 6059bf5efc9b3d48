"""--init_checkpoint under every strategy of one process: the variables start
as the checkpoint's, exactly.

TensorFlow 2.15's tf.train.init_from_checkpoint set the restore on central
storage's AggregatingVariable wrapper, whose `initializer` is the wrapped
variable's: central_storage runs silently started from random weights. The
fast tests read the variables straight after initialisation; the slow ones
train a step at learning rate 0, and fine-tune, as users run the programs.
"""

import json

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import options
from bertkit.engine.checkpointing import checkpoints
from bertkit.engine.distributed import distribution
from bertkit.engine.loop import engine_setup
from bertkit.tasks.classification import task as classification
from bertkit.tasks.features import extraction
from bertkit.tasks.ner import task as ner
from bertkit.tasks.pretraining import task as pretraining
from bertkit.tasks.reranking import input_fns as rerank_input
from bertkit.tasks.reranking import task as rerank
from bertkit.tasks.squad import model as squad_model
from bertkit.tasks.swag import task as swag
import modeling
from conftest import (TINY_CONFIG, load_checkpoint, pretrain_in_process,
                      program_in_process, read_eval_results,
                      tiny_bert_config)

STRATEGIES = ["one_device", "mirrored", "central_storage", "multi_worker"]


@pytest.fixture(autouse=True)
def no_cluster(monkeypatch):
  monkeypatch.delenv("TF_CONFIG", raising=False)


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory):
  """A tiny BertModel's checkpoint in which every variable, LayerNorm and
  biases included, holds random values no initializer gives."""
  path = str(tmp_path_factory.mktemp("init") / "model.ckpt")
  with tf.Graph().as_default():
    build_bert()
    tf.set_random_seed(5)
    randomise = [v.assign(tf.random.normal(v.shape, seed=i))
                 for i, v in enumerate(tf.global_variables())]
    with tf.Session() as sess:
      sess.run(tf.global_variables_initializer())
      sess.run(randomise)
      tf.train.Saver().save(sess, path)
  return path


def build_bert():
  ids = tf.zeros([1, 2], tf.int32)
  modeling.BertModel(modeling.BertConfig.from_dict(TINY_CONFIG), False, ids,
                     ids, ids)


def build_strategy(name):
  plan = distribution.plan(options.DistributionOptions(
      distribution_strategy=None if name == "one_device" else name,
      cpu_replicas=1 if name == "one_device" else 2, num_gpus=0,
      multi_gpu=False, all_reduce_alg="auto", collective_timeout_seconds=600),
                           0)
  assert plan.name == name
  return plan, distribution.build_strategy(plan)


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_copy_of_every_variable_starts_as_the_checkpoints(
    random_checkpoint, name):
  plan, strategy = build_strategy(name)
  expected = load_checkpoint(random_checkpoint)
  with tf.Graph().as_default():
    def model_fn():  # as model_spec.model_fn_builder's, on each replica
      build_bert()
      checkpoints.init_from_checkpoint(random_checkpoint)

    with strategy.scope():
      strategy.extended.call_for_each_replica(model_fn)
    tvars = tf.trainable_variables()
    copies = {v.op.name: strategy.experimental_local_results(v)
              for v in tvars}
    config = strategy.update_config_proto(
        engine_setup.session_config(plan, use_xla=False))
    with tf.Session(config=config) as sess:
      sess.run(tf.global_variables_initializer())
      values = sess.run(copies)
  assert sorted(values) == sorted(expected)
  for var_name, per_copy in values.items():
    assert len(per_copy) == (2 if name in ("mirrored", "multi_worker") else 1)
    for value in per_copy:
      np.testing.assert_array_equal(value, expected[var_name],
                                    err_msg=var_name)


RUN_FLAGS = {
    "one_device": [],
    "mirrored": ["--distribution_strategy=mirrored", "--cpu_replicas=2"],
    "central_storage": ["--distribution_strategy=central_storage",
                        "--cpu_replicas=2"],
    "multi_worker": ["--distribution_strategy=multi_worker",
                     "--cpu_replicas=2"],
}


def model_weights(checkpoint):
  """The model's own variables of a pretraining checkpoint: no optimizer
  slots, no global step."""
  return {name: value for name, value in load_checkpoint(checkpoint).items()
          if name.startswith(("bert/", "cls/")) and "/adam_" not in name}


@pytest.fixture(scope="module")
def pretrained(workdir):
  """A pretraining run's checkpoint from another seed than the runs below:
  weights their own initialisation would not give."""
  out = workdir / "init_checkpoint_seed2"
  pretrain_in_process(workdir, out, "--tf_random_seed=2", steps=1)
  return out


@pytest.mark.slow
@pytest.mark.parametrize("name", STRATEGIES)
def test_a_step_at_learning_rate_0_keeps_the_checkpoints_weights(
    workdir, pretrained, name):
  out = workdir / ("from_checkpoint_" + name)
  pretrain_in_process(workdir, out, "--init_checkpoint=%s" % pretrained,
                      *RUN_FLAGS[name], steps=1, learning_rate="0")
  expected = model_weights(str(pretrained))
  actual = model_weights(str(out))
  assert sorted(actual) == sorted(expected)
  for var_name, value in expected.items():
    np.testing.assert_array_equal(actual[var_name], value, err_msg=var_name)


@pytest.mark.slow
def test_fine_tuning_from_a_checkpoint_starts_where_one_device_does(tmp_path):
  # The training loss of a first step cannot be compared: the classifier
  # head's dropout draws other masks on each replica. The loss of the
  # weights a step at learning rate 0 leaves, on unreplicated eval, is that
  # of the weights fine-tuning started from.
  data = tmp_path / "data"
  data.mkdir()
  rows = "sentence\tlabel\n" + "rain on snow\tsky\nsnow on rain\tground\n" * 8
  (data / "train.tsv").write_text(rows)
  (data / "dev.tsv").write_text(rows)
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "on", "rain", "snow"]
  (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
  (tmp_path / "tiny.json").write_text(
      json.dumps(tiny_bert_config(vocab_size=len(vocab))))

  def fine_tune(out, learning_rate, *extra):
    args = ["run_classifier.py", "--task_name=tsv", "--data_dir=%s" % data,
            "--labels=ground,sky", "--vocab_file=%s" % (tmp_path / "vocab.txt"),
            "--bert_config_file=%s" % (tmp_path / "tiny.json"),
            "--output_dir=%s" % out, "--max_seq_length=16", "--do_train",
            "--do_eval", "--train_batch_size=8", "--eval_batch_size=8",
            "--num_train_epochs=0.5", "--learning_rate=%s" % learning_rate]
    program_in_process(args + list(extra))
    return read_eval_results(out)

  # Head included: a fresh head's initial values would depend on the graph
  # each strategy builds.
  fine_tune(tmp_path / "init", "1e-3", "--tf_random_seed=2")
  results = {name: fine_tune(tmp_path / name, "0", "--tf_random_seed=1",
                             "--init_checkpoint=%s" % (tmp_path / "init"),
                             *RUN_FLAGS[name])
             for name in ("one_device", "central_storage")}
  assert results["central_storage"]["global_step"] == 1
  assert (results["central_storage"]["eval_loss"] ==
          results["one_device"]["eval_loss"])


def built_shapes(build):
  with tf.Graph().as_default():
    build()
    return {v.op.name: v.shape.as_list() for v in tf.trainable_variables()}


def extraction_model(config):
  ids = tf.zeros([1, 2], tf.int32)
  extraction.extraction_model_spec(config, extraction.Output((-1,))).predictions(
      {"unique_ids": tf.zeros([1], tf.int32), "input_ids": ids,
       "input_mask": ids, "segment_ids": ids})


# Each program's Task, and the model it builds.
TASK_MODELS = {
    "pretraining": (pretraining.pretraining_model_spec,
                    pretraining.build_pretraining_variables),
    "masked_lm": (lambda c: pretraining.pretraining_model_spec(c, False),
                  lambda c: pretraining.build_pretraining_variables(c, False)),
    "classifier": (lambda c: classification.classifier_model_spec(c, 3),
                   lambda c: classification.build_classifier_variables(c, 3)),
    "regression": (lambda c: classification.classifier_model_spec(c, 1),
                   lambda c: classification.build_classifier_variables(c, 1)),
    "ner": (lambda c: ner.token_classification_model_spec(c, 5),
            lambda c: ner.build_variables(c, 5)),
    "squad": (squad_model.question_answering_model_spec,
              squad_model.build_squad_variables),
    "swag": (swag.multiple_choice_model_spec, swag.build_variables),
    "rerank": (rerank.rerank_model_spec, lambda c: rerank.pair_logits(
        c, False, {name: tf.zeros([1, 2, 2], tf.int32)
                   for name in rerank_input.SEQUENCE_FEATURES})),
    "extract_features": (lambda c: extraction.extraction_model_spec(
        c, extraction.Output((-1,))), extraction_model),
}


@pytest.mark.parametrize("name", sorted(TASK_MODELS))
def test_each_tasks_variable_shapes_are_those_its_model_builds(name):
  """--init_checkpoint is checked against Task.variable_shapes (a table, no
  model built for it): the table must be the model's, head and labels
  included."""
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  make_task, build = TASK_MODELS[name]
  assert make_task(config).variable_shapes() == built_shapes(
      lambda: build(config))
