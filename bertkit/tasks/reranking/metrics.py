# coding=utf-8
"""The figures of a ranking against qrels: MRR@10 as MS MARCO's official
evaluator (ms_marco_eval.py) computes it, Recall@1000 and nDCG@10 from
ir-measures.

MRR@10 (official): over the queries of the qrels, the reciprocal of the
position (1..10) of the first relevant passage of each query's ranking, 0
when none is in its top 10 or the run does not rank the query; a run
ranking no query of the qrels is refused (the evaluator's "No matching
QIDs"). Relevant is a relevance > 0 (MS MARCO's qrels hold only 1).
Recall@1000 and nDCG@10 are ir-measures' (trec_eval's through
pytrec_eval), averaged over the same queries (ir-measures counts a qrels
query the run lacks as 0 as well). The ranking handed in is in rank
order already (msmarco.ranked: ties keep the first stage's order); the
library is given scores that keep exactly that order.

No TensorFlow here.
"""

import ir_measures

from bertkit.common.errors import UserError

MRR_DEPTH = 10
# The figures of a ranking, by name.
FIGURES = ("mrr_at_10", "recall_at_1000", "ndcg_at_10")
# The library's measures, by the name the figures carry.
LIBRARY_MEASURES = {"recall_at_1000": ir_measures.R @ 1000,
                    "ndcg_at_10": ir_measures.nDCG @ 10}


def mrr_at_10(qrels, run):
  """MS MARCO's MRR@10.

  Args:
    qrels: {qid: {pid: relevance}}.
    run: {qid: [pid]} in rank order.

  Returns:
    float.

  Raises:
    UserError: the run ranks no query of the qrels.
  """
  if not any(qid in qrels for qid in run):
    raise UserError("the run ranks none of the %d queries of the qrels "
                    "(is it the same set?)" % len(qrels))
  total = 0.0
  for qid, judged in qrels.items():
    for position, pid in enumerate(run.get(qid, ())[:MRR_DEPTH], 1):
      if judged.get(pid, 0) > 0:
        total += 1.0 / position
        break
  return total / len(qrels)


def library_inputs(qrels, run):
  """ir-measures' Qrels and ScoredDocs of a run in rank order: the score of
  rank r is -r, so the library's order is the run's whatever its own rule
  for equal scores."""
  judgements = [ir_measures.Qrel(qid, pid, relevance)
                for qid, judged in qrels.items()
                for pid, relevance in judged.items()]
  scored = [ir_measures.ScoredDoc(qid, pid, -float(rank))
            for qid, pids in run.items()
            for rank, pid in enumerate(pids, 1)]
  return judgements, scored


def library_figures(qrels, run, measures=None):
  """{name: value} of ir-measures' measures (LIBRARY_MEASURES by default),
  averaged over the queries of the qrels."""
  measures = measures or LIBRARY_MEASURES
  judgements, scored = library_inputs(qrels, run)
  values = ir_measures.calc_aggregate(list(measures.values()), judgements,
                                      scored)
  return {name: float(values[measure]) for name, measure in measures.items()}


def figures(qrels, run):
  """MRR@10, Recall@1000 and nDCG@10 of `run` ({qid: [pid]} in rank order),
  and the counts they are over."""
  result = {"mrr_at_10": mrr_at_10(qrels, run)}
  result.update(library_figures(qrels, run))
  result["queries_judged"] = len(qrels)
  result["queries_ranked"] = sum(1 for qid in qrels if qid in run)
  return result


def describe(name, result):
  """"NAME: MRR@10 0.3650, Recall@1000 ..., nDCG@10 ... (N of M queries
  of the qrels ranked)"."""
  return ("%s: MRR@10 %.4f, Recall@1000 %.4f, nDCG@10 %.4f (%d of %d "
          "queries of the qrels ranked)" % (
              name, result["mrr_at_10"], result["recall_at_1000"],
              result["ndcg_at_10"], result["queries_ranked"],
              result["queries_judged"]))
