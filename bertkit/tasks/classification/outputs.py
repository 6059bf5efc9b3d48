# coding=utf-8
"""What the classifier makes of its predictions: test_results.tsv (the class
probabilities, or the score, of each test example in file order) and, for
the rerank task, ranked_results.tsv (each query's passages by score).
"""

import collections
import os

import numpy as np

from bertkit.common import atomic_io
from bertkit.tasks.classification import packing as classifier_packing


def write_test_results(path, probabilities):
  """test_results.tsv: one line of tab-separated class probabilities each
  (a regression task's: its score)."""
  with atomic_io.atomic_open(path, "w") as writer:
    for row in probabilities:
      writer.write("\t".join(str(p) for p in np.atleast_1d(row)) + "\n")


def rank_passages(examples, scores):
  """Orders scored query/passage examples for ranked_results.tsv.

  Args:
    examples: RankingExamples in file order.
    scores: P(relevant) of each example.

  Returns:
    [(query_id, passage_id, score, rank)]: queries in order of first
    appearance; within one, passages by descending score (stable), rank 1..n.
  """
  by_query = collections.OrderedDict()
  for example, score in zip(examples, scores):
    by_query.setdefault(example.query_id, []).append(
        (example.passage_id, score))
  rows = []
  for query_id, passages in by_query.items():
    ordered = sorted(passages, key=lambda p: -p[1])
    rows.extend((query_id, passage_id, score, rank)
                for rank, (passage_id, score) in enumerate(ordered, 1))
  return rows


def write_ranked_results(path, examples, scores):
  """ranked_results.tsv: header, then query_id, passage_id, score, rank."""
  with atomic_io.atomic_open(path, "w") as writer:
    writer.write("query_id\tpassage_id\tscore\trank\n")
    for query_id, passage_id, score, rank in rank_passages(examples, scores):
      writer.write("%s\t%s\t%s\t%d\n" % (query_id, passage_id, score, rank))


def outputs_in_input_order(predictions, num_examples, packed, key=None):
  """The model's output for each real example, in input order.

  Args:
    predictions: Estimator.predict's dicts of one record file, in order
      (those past the examples are padding).
    num_examples: the number of real examples.
    packed: the records are packed rows (classification/packing.py).
    key: the output taken: "logits" [C]; None: the class probabilities
      [C] (a regression task's: its float score).

  Returns:
    list of num_examples outputs.
  """
  if key is None:
    key = ("predictions" if "predictions" in predictions[0]
           else "probabilities")
  if packed:
    return classifier_packing.predictions_in_input_order(
        predictions, num_examples, key)
  return [p[key] for p in predictions[:num_examples]]


def teacher_rows(examples, logits, is_ranking):
  """The teacher_outputs rows of predicted examples: each one's line and
  logits [C]; a ranking pair's ids and score (the log-odds of relevance,
  logits[1] - logits[0], label "1" being relevant) too."""
  rows = []
  for example, row_logits in zip(examples, logits):
    row = {"id": example.line, "logits": row_logits}
    if is_ranking:
      row.update(query_id=example.query_id, passage_id=example.passage_id,
                 score=float(row_logits[1]) - float(row_logits[0]))
    rows.append(row)
  return rows


def write_predictions(output_dir, examples, label_list, is_ranking, packed,
                      predictions):
  """test_results.tsv (and ranked_results.tsv) from the predict outputs.

  Args:
    output_dir: where the results go.
    examples: the test InputExamples.
    label_list: the task's labels.
    is_ranking: also write ranked_results.tsv (the rerank task).
    packed: the predictions are of packed rows (probabilities [N, C] and
      example_index [N] each).
    predictions: the prediction dicts, in file order; those past the
      examples are padding.
  """
  probabilities = outputs_in_input_order(predictions, len(examples), packed)
  write_test_results(os.path.join(output_dir, "test_results.tsv"),
                     probabilities)
  if is_ranking:
    write_ranked_results(
        os.path.join(output_dir, "ranked_results.tsv"), examples,
        [float(p[label_list.index("1")]) for p in probabilities])
