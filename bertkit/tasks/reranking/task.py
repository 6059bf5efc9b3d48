# coding=utf-8
"""Passage re-ranking (Nogueira and Cho's BERT re-ranker on MS MARCO): the
head, its loss, the input, the held-out MRR@10, the runs written, and its
description for the fine-tuning driver (RerankFineTuning).

The head: BERT's pooled [CLS] output of `[CLS] query [SEP] passage [SEP]`,
dropout, then `cls/reranker/output_weights` [1, H], `.../output_bias` [1]:
one logit per pair, the pair's relevance score. Training is pointwise, as
Nogueira and Cho's: each triple's two pairs (positive, negative) are one
record [2, S], and the loss is the sigmoid cross-entropy of each pair's
logit with its label (1, 0), averaged over the batch's pairs. A student
(--teacher_outputs) mixes it with Margin-MSE to its teacher's logits of the
same two pairs (fine_tuning/distillation.py) by --distillation_weight. (Their
two-class softmax scores with the difference of two logits; one logit is
the same family of scores, and what Hugging Face's and
sentence-transformers' cross-encoders hold: BertForSequenceClassification
with num_labels=1, CrossEncoder.predict giving sigmoid(logit).)

Shape notation: B = batch, P = pairs per record (2 for a triple, 1 for a
scored pair), L = the batch's longest pair (at most S), H = hidden size,
Q = held-out queries, D = their most candidates.
"""

import functools
import itertools
import json
import os

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.input import input_pipeline
from bertkit.engine.loop import model_spec
from bertkit.engine.loop import runner
from bertkit.tasks.fine_tuning import distillation
from bertkit.tasks.fine_tuning import driver
from bertkit.tasks.reranking import input_fns
from bertkit.tasks.reranking import metrics as ranking_metrics
from bertkit.tasks.reranking import msmarco
from bertkit.tasks.reranking import records as rerank_records
from bertkit.tasks.swag import task as multiple_choice

RESULTS_FILE = "rerank_results.json"
MSMARCO_RUN = "rerank_run.tsv"
TREC_RUN = "rerank_run.trec"
FIRST_STAGE_RUN = "first_stage_run.tsv"


def pair_logits(bert_config, is_training, features):
  """The logit of each pair [B, P]."""
  return multiple_choice.create_model(
      bert_config, is_training,
      *(features[name] for name in input_fns.SEQUENCE_FEATURES),
      head=heads.RERANKER)


def triple_losses(logits, features, distill=None):
  """The training loss of each triple [B] of its logits [B, 2]: the mean
  sigmoid cross-entropy of its two pairs' logits with their labels, and
  with a distillation.Distillation, (1 - w) x that + w x Margin-MSE to the
  teacher's logits of the same pairs."""
  pointwise = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
      labels=features["labels"], logits=logits), axis=1)
  return distillation.per_example_losses(pointwise, logits, features,
                                         distill, margin=True)


def serving_outputs(bert_config, input_ids, input_mask, segment_ids,
                    num_labels):
  """export_checkpoint's SavedModel outputs (heads.RERANKER.serving): from
  one pair per row [B, S], scores [B] (the logit)."""
  del num_labels  # one relevance logit
  pairs = [t[:, None] for t in (input_ids, input_mask, segment_ids)]
  return {"scores": multiple_choice.create_model(
      bert_config, False, *pairs, head=heads.RERANKER)[:, 0]}


class HeldOut:
  """The held-out queries' candidates, as the in-graph MRR@10 reads them.

  Attributes:
    index: int32 [Q, D]: each query's candidates' pair_index in first-stage
      order, -1 past its last.
    labels: float32 [Q, D]: 1 where the candidate is relevant.
    num_judged: the queries of the qrels evaluated (the denominator; a query
      without candidates counts 0).
    num_pairs: the held-out pairs.
  """

  def __init__(self, qrels, candidates):
    queries = [qid for qid in qrels if qid in candidates.pids]
    width = max([len(candidates.pids[qid]) for qid in queries] or [1])
    self.index = np.full([max(len(queries), 1), width], -1, np.int32)
    self.labels = np.zeros(self.index.shape, np.float32)
    pair = 0
    for row, qid in enumerate(queries):
      for column, pid in enumerate(candidates.pids[qid]):
        self.index[row, column] = pair
        self.labels[row, column] = float(qrels[qid].get(pid, 0) > 0)
        pair += 1
    self.num_judged = len(qrels)
    self.num_pairs = pair


def mrr_at_10_metric(held_out, scores, pair_index):
  """MS MARCO's MRR@10 of the held-out queries as a tf.metrics pair.

  The scores of each batch go into a local table by pair_index; the value
  ranks each query's candidates by score, equal scores in first-stage
  order (a stable sort), as msmarco.ranked and metrics.mrr_at_10 do.

  Returns:
    (value, update_op).
  """
  table = tf.Variable(tf.fill([held_out.num_pairs + 1], -np.inf),
                      trainable=False, name="held_out_scores",
                      collections=[tf.GraphKeys.LOCAL_VARIABLES])
  update = tf.scatter_update(table, pair_index, scores)
  # The table's last entry, -inf, stands for the places past a query's
  # last candidate.
  gathered = tf.gather(table, np.where(held_out.index < 0,
                                       held_out.num_pairs, held_out.index))
  order = tf.argsort(-gathered, axis=1, stable=True)[:, :ranking_metrics.
                                                      MRR_DEPTH]
  relevant = tf.gather(tf.constant(held_out.labels), order, batch_dims=1) > 0
  first = tf.argmax(tf.cast(relevant, tf.int32), axis=1, output_type=tf.int32)
  reciprocal = tf.where(tf.reduce_any(relevant, axis=1),
                        1.0 / tf.cast(first + 1, tf.float32),
                        tf.zeros_like(first, tf.float32))
  return (tf.reduce_sum(reciprocal) / float(held_out.num_judged), update)


def rerank_model_spec(bert_config, held_out=None, distill=None):
  """The re-ranker as a model_spec.ModelSpec.

  Training: the mean of triple_losses (with `distill`, a student's).
  Evaluation: the loss and, on scored pairs, MRR@10 of the held-out queries
  (`held_out`); on triples (a cluster's evaluation of the training records),
  the share of triples whose positive pair scores above the negative.
  Predictions: of scored pairs, "score" [B] and "pair_index" [B]; of
  triples, "scores" [B, 2] (the positive's, the negative's) and "line" [B].
  """

  def mean_loss(features):
    return tf.reduce_mean(triple_losses(
        pair_logits(bert_config, True, features), features, distill))

  def eval_outputs(features):
    logits = pair_logits(bert_config, False, features)
    losses = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=features["labels"], logits=logits)
    metric_ops = {"eval_loss": tf.metrics.mean(losses)}
    if "pair_index" in features and held_out is not None:
      metric_ops["mrr_at_10"] = mrr_at_10_metric(
          held_out, logits[:, 0], features["pair_index"])
    else:
      metric_ops["eval_accuracy"] = tf.metrics.mean(
          tf.cast(logits[:, 0] > logits[:, 1], tf.float32))
    return tf.reduce_mean(losses), metric_ops

  def predictions(features):
    logits = pair_logits(bert_config, False, features)
    if "line" in features:  # triples (--predict_triples)
      return {"scores": logits, "line": features["line"]}
    return {"score": logits[:, 0], "pair_index": features["pair_index"]}

  return model_spec.ModelSpec(
      variable_shapes=lambda: checkpoint_formats.variable_shapes(
          bert_config, heads.RERANKER),
      train_loss_fns=model_spec.mean_loss_shares(mean_loss),
      eval_outputs=eval_outputs, predictions=predictions)


def count_triples(path, needed=None):
  """Reads and checks the first `needed` triples of `path` (all of them
  when it holds fewer, or `needed` is None), before anything is written;
  returns how many.

  Raises:
    UserError: a bad line (msmarco.read_triples), or no triple at all.
  """
  count = 0
  for _ in msmarco.read_triples(path):
    count += 1
    if count == needed:
      break
  if not count:
    raise UserError("%s has no triple (it is empty)" % path)
  return count


def judged_candidates(qrels, candidates, path, candidates_path):
  """Warns of the qrels queries without candidates (they count 0, as the
  official evaluator counts them).

  Raises:
    UserError: the candidates rank none of the qrels' queries (the
      evaluator's "No matching QIDs").
  """
  missing = msmarco.qrels_queries_missing(qrels, candidates.pids)
  if len(missing) == len(qrels):
    raise UserError("%s ranks none of the %d queries of %s (is it the same "
                    "set?)" % (candidates_path, len(qrels), path))
  if missing:
    logging.warning(
        "%d of the %d queries of %s have no candidates in %s (first: qid "
        "%s); they count 0 in MRR@10, Recall@1000 and nDCG@10, as MS "
        "MARCO's evaluator counts them", len(missing), len(qrels), path,
        candidates_path, missing[0])


def held_out_inputs(qrels, candidates, num_queries):
  """(qrels, candidates) of the first `num_queries` queries of the qrels."""
  qids = list(qrels)[:num_queries]
  kept = {qid: candidates.pids[qid] for qid in qids if qid in candidates.pids}
  return ({qid: qrels[qid] for qid in qids},
          msmarco.Candidates(kept, candidates.queries, candidates.passages,
                             candidates.source_format))


def read_inputs(opts):
  """Reads and checks every input the options name.

  Returns:
    {"triples": the number of records (triples) trained on,
     "train_triples": their file, "predict_triples": the number of triples
     of --predict_triples,
     "candidates": msmarco.Candidates with their texts, "qrels": {...},
     "held_out": (qrels, Candidates) evaluated during training}, each where
    the options ask for it.
  """
  inputs = {}
  if opts.do_train:
    inputs["triples"] = count_triples(
        opts.train_triples, opts.num_train_steps * opts.run.train_batch_size)
    inputs["train_triples"] = opts.train_triples
  if opts.predict_triples:
    inputs["predict_triples"] = count_triples(opts.predict_triples)
  if opts.candidates:
    inputs["candidates"] = msmarco.with_texts(
        msmarco.read_candidates(opts.candidates, opts.num_eval_docs),
        opts.queries, opts.collection)
  if opts.qrels and opts.candidates:
    qrels = inputs["qrels"] = msmarco.read_qrels(opts.qrels)
    judged_candidates(qrels, inputs["candidates"], opts.qrels,
                      opts.candidates)
    if opts.eval_every_n_steps and opts.do_train:
      inputs["held_out"] = held_out_inputs(qrels, inputs["candidates"],
                                           opts.held_out_queries)
  return inputs


def pair_items(candidates, qrels=None):
  """The (pair_index, query, passage, label) of every candidate, queries in
  order, each query's candidates in first-stage order."""
  index = 0
  for qid, pids in candidates.pids.items():
    judged = (qrels or {}).get(qid, {})
    for pid in pids:
      yield (index, candidates.queries[qid], candidates.passages[pid],
             int(judged.get(pid, 0) > 0))
      index += 1


def triples_of(path, count, teacher=None):
  """The first `count` msmarco.Triples of `path`; with `teacher` (each
  triple's teacher scores [2], in file order), (Triple, scores) pairs."""
  triples = itertools.islice(msmarco.read_triples(path), count)
  if teacher is None:
    return triples
  return zip(triples, ([float(x) for x in scores] for scores in teacher))


def write_inputs(opts, inputs, tokenizer, distill=None):
  """Writes the records of the triples (a student's with their teacher's
  scores, `distill`), the candidates, the held-out queries and the triples
  scored (records.write_split) into --output_dir.

  Returns:
    {split: [record file]} of "train", "rerank", "heldout", "test" (the
    triples of --predict_triples).
  """
  settings = rerank_records.EncodingSettings(
      tokenizer.vocab, tokenizer.basic_tokenizer.do_lower_case,
      opts.max_seq_length, opts.max_query_length)
  workers = rerank_records.num_workers_default(opts.num_workers)
  write = functools.partial(rerank_records.write_split, opts.run.output_dir,
                            settings=settings, num_workers=workers)
  files = {}
  if "triples" in inputs:
    count = inputs["triples"]
    identity = {"triples": os.path.abspath(opts.train_triples),
                "bytes": os.path.getsize(opts.train_triples), "count": count}
    kind = rerank_records.TRIPLE
    if distill is not None:
      kind = rerank_records.TEACHER_TRIPLE
      identity["teacher_outputs"] = [
          os.path.abspath(opts.teacher_outputs),
          os.path.getsize(opts.teacher_outputs)]
    files["train"], _ = write(
        "train", kind, triples_of(opts.train_triples, count,
                                  distill and distill.teacher),
        expected=count, identity=identity)
  if "predict_triples" in inputs:
    count = inputs["predict_triples"]
    files["test"], _ = write(
        "predict", rerank_records.TRIPLE,
        triples_of(opts.predict_triples, count), expected=count)
  if "candidates" in inputs and (opts.do_eval or opts.do_predict):
    candidates = inputs["candidates"]
    files["rerank"], _ = write(
        "rerank", rerank_records.PAIR,
        pair_items(candidates, inputs.get("qrels")),
        expected=candidates.num_pairs)
  if "held_out" in inputs:
    qrels, candidates = inputs["held_out"]
    files["heldout"], _ = write(
        "heldout", rerank_records.PAIR, pair_items(candidates, qrels),
        expected=candidates.num_pairs)
  return files


def ranking_of(candidates, scores):
  """{qid: [(pid, score)]} in rank order (msmarco.ranked) of the scores of
  every candidate, in pair_items' order."""
  ranking, start = {}, 0
  for qid, pids in candidates.pids.items():
    ranking[qid] = msmarco.ranked(pids, scores[start:start + len(pids)])
    start += len(pids)
  return ranking


def use_predictions(opts, inputs, predictions):
  """The runner's PredictStage.use_predictions (on the chief): the
  re-ranked run in MS MARCO's and TREC's formats, the first stage's in MS
  MARCO's, and with --qrels the figures of both (rerank_results.json; the
  re-ranked run's are returned for eval_results.txt)."""
  candidates = inputs["candidates"]
  scores = np.full([candidates.num_pairs], np.nan)
  for prediction in predictions:
    scores[int(prediction["pair_index"])] = float(prediction["score"])
  if np.isnan(scores).any():
    raise RuntimeError("%d of %d pairs were not scored" % (
        int(np.isnan(scores).sum()), len(scores)))
  ranking = ranking_of(candidates, scores)
  output_dir = opts.run.output_dir
  paths = {name: os.path.join(output_dir, name)
           for name in (MSMARCO_RUN, TREC_RUN, FIRST_STAGE_RUN)}
  msmarco.write_msmarco_run(paths[MSMARCO_RUN], ranking)
  msmarco.write_trec_run(paths[TREC_RUN], ranking, opts.run_tag)
  first_stage = {qid: [(pid, 0.0) for pid in pids]
                 for qid, pids in candidates.pids.items()}
  msmarco.write_msmarco_run(paths[FIRST_STAGE_RUN], first_stage)
  results = {"first_stage": {"run": paths[FIRST_STAGE_RUN],
                             "candidates": opts.candidates},
             "reranked": {"run": paths[MSMARCO_RUN],
                          "trec_run": paths[TREC_RUN]}}
  qrels = inputs.get("qrels")
  figures = None
  if qrels is not None and opts.do_eval:
    for name, run in (("first_stage", candidates.pids),
                      ("reranked", msmarco.run_pids(ranking))):
      results[name].update(ranking_metrics.figures(qrels, run))
      logging.info("%s; run %s", ranking_metrics.describe(
          name.replace("_", " "), results[name]), results[name]["run"])
    figures = {key: results["reranked"][key]
               for key in ranking_metrics.FIGURES}
    figures.update({"first_stage_" + key: results["first_stage"][key]
                    for key in ranking_metrics.FIGURES})
  with atomic_io.atomic_open(os.path.join(output_dir, RESULTS_FILE)) as f:
    f.write(json.dumps(results, indent=2, sort_keys=True) + "\n")
  logging.info("wrote %s (MS MARCO), %s (TREC)", paths[MSMARCO_RUN],
               paths[TREC_RUN])
  return figures


class RerankFineTuning(driver.FineTuningTask):
  """Passage re-ranking (run_rerank.py's docstring): trained on triples,
  scoring each query's candidates, the runs and MRR@10 out."""
  head = heads.RERANKER

  def read(self, opts):
    return read_inputs(opts)

  def model_spec(self, bert_config, inputs, distill):
    held_out = inputs.get("held_out")
    return rerank_model_spec(bert_config, held_out and HeldOut(*held_out),
                             distill)

  def training_set(self, opts, inputs, tokenizer):
    return driver.TrainingSet(inputs["triples"], "triples")

  def write_records(self, opts, inputs, tokenizer, is_chief, training,
                    distill):
    files = write_inputs(opts, inputs, tokenizer, distill)
    if training is None:
      return driver.Records(files)
    needed = opts.num_train_steps * opts.run.train_batch_size
    return driver.Records(files, "triples of %s (two pairs each), %s" % (
        opts.train_triples, "%d in all" % needed if training.count >= needed
        else "its %d read %.1f times" % (training.count,
                                         needed / training.count)))

  def schedule(self, opts, training):
    if training is None:
      return runner.TrainingSchedule(0, 0)
    return runner.TrainingSchedule(
        opts.num_train_steps,
        int(opts.num_train_steps * opts.warmup_proportion))

  def input_fn_maker(self, opts, inputs, distill):
    pad_to = opts.max_seq_length if opts.pad_to_max_seq_length else None

    def make_input_fn(files, mode, global_batch_size, num_replicas):
      if mode == model_spec.TRAIN:
        return input_fns.train_input_fn(
            files, input_fns.chunk_counts(files, inputs["triples"]),
            global_batch_size, num_replicas,
            functools.partial(input_pipeline.checkpoint_step,
                              opts.run.output_dir),
            opts.run.tf_random_seed or input_fns.DEFAULT_SHUFFLE_SEED, pad_to,
            rerank_records.TEACHER_TRIPLE if distill
            else rerank_records.TRIPLE)
      kind = (rerank_records.TRIPLE
              if os.path.basename(files[0]).startswith(("train-", "predict-"))
              else rerank_records.PAIR)
      return input_fns.ordered_input_fn(files, kind, global_batch_size, pad_to)
    return make_input_fn

  def evaluation(self, opts, inputs, records):
    if "heldout" not in records.files:
      return runner.EvalStage()
    return runner.EvalStage(
        files=records.files["heldout"], batch_size=opts.eval_batch_size,
        during_training=True, every_n_steps=opts.eval_every_n_steps,
        target=opts.target_mrr_at_10, target_metric="mrr_at_10")

  def example_rows(self, inputs, split):
    """A teacher's row of each triple trained on: its line, its two
    pairs' logits."""
    del split  # the teacher's outputs are of the training triples
    return [(triple.line, (2,)) for triple in triples_of(
        inputs["train_triples"], inputs["triples"])]

  def predicted_rows(self, inputs, records, predictions):
    return [{"id": int(p["line"]), "logits": p["scores"]}
            for p in predictions]

  def prediction(self, opts, inputs, records, model):
    if "test" in records.files:
      return runner.PredictStage(
          files=records.files["test"], batch_size=opts.predict_batch_size,
          message="***** Scoring the triples of %s: %d, two pairs each, "
          "batch %d *****" % (opts.predict_triples,
                              inputs["predict_triples"],
                              opts.predict_batch_size),
          on_every_replica=True)
    if "rerank" not in records.files:
      return runner.PredictStage()
    candidates = inputs["candidates"]
    return runner.PredictStage(
        files=records.files["rerank"], batch_size=opts.predict_batch_size,
        message="***** Re-ranking: %d queries, %d pairs, batch %d *****" % (
            len(candidates.pids), candidates.num_pairs,
            opts.predict_batch_size),
        use_predictions=functools.partial(use_predictions, opts, inputs),
        on_every_replica=True)


TASK = RerankFineTuning()
