"""Step time of two or more checkouts' modeling.py, interleaved in one process.

On a loaded machine two runs minutes apart differ by more than most single
optimisations give. This builds one BERT pretraining step graph (model, masked
LM head on the masked positions, next-sentence head, this checkout's AdamW)
per CHECKOUT[:INTER_OP_THREADS] argument, each from that checkout's
modeling.py, and runs their steps in turn (ABC ABC ..., reversed every other
round), so that load changes hit all alike. Prints per variant the median step
time and the median of its per-round speed-ups against the first variant, by
wall clock and by process CPU time.

Example (what a commit gave):
  git worktree add /tmp/before HEAD~1
  python benchmarks/paired_steps.py /tmp/before . --steps=20
  python benchmarks/paired_steps.py . .:1 .:4     # inter-op thread pools
"""

import argparse
import importlib.util
import os
import statistics
import sys
import time

import numpy as np
import tensorflow.compat.v1 as tf

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

import optimization  # pylint: disable=g-import-not-at-top,wrong-import-position


def load_modeling(checkout, index):
  """`checkout`/modeling.py as a module of its own."""
  spec = importlib.util.spec_from_file_location(
      "modeling_%d" % index, os.path.join(checkout, "modeling.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def build_step(modeling, config_file, batch, seq_length, predictions):
  """Train op of one step on fixed random inputs; returns it."""
  rng = np.random.RandomState(0)
  ids = rng.randint(5, 30522, (batch, seq_length)).astype(np.int32)
  positions = np.stack([np.sort(rng.choice(np.arange(1, seq_length),
                                           predictions, replace=False))
                        for _ in range(batch)]).astype(np.int32)
  labels = rng.randint(5, 30522, (batch * predictions,)).astype(np.int32)
  segments = np.tile((np.arange(seq_length) >= seq_length // 2), (batch, 1))
  config = modeling.BertConfig.from_json_file(config_file)
  model = modeling.BertModel(config, True, tf.constant(ids),
                             tf.ones([batch, seq_length], tf.int32),
                             tf.constant(segments.astype(np.int32)))
  sequence = tf.reshape(model.get_sequence_output(),
                        [batch * seq_length, config.hidden_size])
  offsets = (np.arange(batch) * seq_length)[:, None].astype(np.int32)
  masked = tf.gather(sequence, tf.reshape(positions + offsets, [-1]))
  with tf.variable_scope("cls/predictions/transform"):
    masked = modeling.layer_norm(tf.layers.dense(
        masked, config.hidden_size,
        activation=modeling.get_activation(config.hidden_act)))
  logits = tf.matmul(masked, model.get_embedding_table(), transpose_b=True)
  loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.constant(labels), logits=logits))
  nsp_logits = tf.layers.dense(model.get_pooled_output(), 2)
  loss += tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.zeros([batch], tf.int32), logits=nsp_logits))
  return optimization.create_optimizer(loss, 1e-4, 1000, 10)


def main(args):
  sessions = []
  for index, variant in enumerate(args.variants):
    checkout, _, inter_op = variant.partition(":")
    modeling = load_modeling(checkout, index)
    graph = tf.Graph()
    with graph.as_default():
      train_op = build_step(modeling, args.bert_config_file, args.batch,
                            args.seq_length, args.predictions)
      config = tf.ConfigProto()
      if inter_op:
        config.inter_op_parallelism_threads = int(inter_op)
      session = tf.Session(graph=graph, config=config)
      session.run(tf.global_variables_initializer())
      for _ in range(args.warmup_steps):
        session.run(train_op)
    sessions.append((session, train_op))
  wall = [[] for _ in sessions]
  cpu = [[] for _ in sessions]
  for step in range(args.steps):
    order = list(range(len(sessions)))
    for k in (order if step % 2 == 0 else reversed(order)):
      session, train_op = sessions[k]
      start_wall, start_cpu = time.perf_counter(), time.process_time()
      session.run(train_op)
      wall[k].append(time.perf_counter() - start_wall)
      cpu[k].append(time.process_time() - start_cpu)
  for k, variant in enumerate(args.variants):
    print("%-28s step %.3f s (%.1f examples/sec), speed-up %.3f; "
          "CPU %.3f s/step, speed-up %.3f" % (
              variant, statistics.median(wall[k]),
              args.batch / statistics.median(wall[k]),
              statistics.median(a / b for a, b in zip(wall[0], wall[k])),
              statistics.median(cpu[k]),
              statistics.median(a / b for a, b in zip(cpu[0], cpu[k]))))


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("variants", nargs="+",
                      help="CHECKOUT or CHECKOUT:INTER_OP_THREADS")
  parser.add_argument("--bert_config_file",
                      default=os.path.join(REPO_ROOT, "configs",
                                           "bert_mini.json"))
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--seq_length", type=int, default=128)
  parser.add_argument("--predictions", type=int, default=20)
  parser.add_argument("--steps", type=int, default=20)
  parser.add_argument("--warmup_steps", type=int, default=3)
  return parser.parse_args(argv)


if __name__ == "__main__":
  main(parse_args())
