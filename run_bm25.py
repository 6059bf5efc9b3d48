# coding=utf-8
"""The first stage of re-ranking: BM25 over collection.tsv with bm25s.

For every query of --queries, the top --top_k passages of --collection by
BM25 (Lucene's, k1 0.9 and b 0.4, English stop words removed, words
stemmed: bertkit/tasks/reranking/bm25.py); a passage sharing no term with
the query is not retrieved. Equal scores rank in collection order. Files
are MS MARCO's (plain or compressed): collection.tsv (pid, passage),
queries.*.tsv (qid, query), TREC qrels.

Outputs in --output_dir:
  bm25_run.trec    the TREC run (qid Q0 pid rank score tag), run_rerank.py's
                   --candidates (with --queries and --collection).
  bm25_run.tsv     the same in MS MARCO's run format (qid, pid, rank).
  bm25_results.json  the runs' paths and, with --qrels, MRR@10 (as MS
                   MARCO's evaluator), Recall@1000 and nDCG@10 over the
                   queries of the qrels.
With --qrels, the last line printed is "BM25: MRR@10 ..., run <bm25_run.tsv>".
"""

import dataclasses
import json
import os
from typing import Optional

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import file_patterns
from bertkit.common import option_fields
from bertkit.common import programs
from bertkit.common.option_fields import AT_LEAST_ONE, REQUIRED, option

FILE = option_fields.FILE
TREC_RUN = "bm25_run.trec"
MSMARCO_RUN = "bm25_run.tsv"
RESULTS_FILE = "bm25_results.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Bm25Options:
  """What run_bm25.py is told."""
  collection: str = option(REQUIRED, "collection.tsv: pid<TAB>passage.",
                           path=FILE)
  queries: str = option(REQUIRED, "queries.*.tsv: qid<TAB>query.", path=FILE)
  output_dir: str = option(REQUIRED, "Where the runs and figures go.")
  qrels: Optional[str] = option(
      None, "TREC qrels of the queries: MRR@10, Recall@1000, nDCG@10.",
      path=FILE, unset="none: no figures")
  top_k: int = option(1000, "Passages retrieved per query.", **AT_LEAST_ONE)
  k1: float = option(0.9, "BM25's k1 (Anserini's default).", low=0.0)
  b: float = option(0.4, "BM25's b (Anserini's default).", low=0.0, high=1.0)
  run_tag: str = option("bm25", "The TREC run's tag column.")

  def __post_init__(self):
    option_fields.check_fields(self)


def run(opts):
  """Retrieves, writes the runs and, with --qrels, the figures; returns the
  line that sums them up (printed)."""
  # pylint: disable=g-import-not-at-top
  from bertkit.tasks.reranking import bm25
  from bertkit.tasks.reranking import metrics
  from bertkit.tasks.reranking import msmarco
  file_patterns.check_paths(opts)
  collection = msmarco.read_collection(opts.collection)
  queries = msmarco.read_queries(opts.queries)
  qrels = msmarco.read_qrels(opts.qrels) if opts.qrels else None
  logging.info("BM25 over %d passages for %d queries, top %d",
               len(collection), len(queries), opts.top_k)
  ranking = bm25.retrieve(collection, queries, opts.top_k,
                          bm25.Bm25Settings(k1=opts.k1, b=opts.b))
  os.makedirs(opts.output_dir, exist_ok=True)
  paths = {name: os.path.join(opts.output_dir, name)
           for name in (TREC_RUN, MSMARCO_RUN)}
  msmarco.write_trec_run(paths[TREC_RUN], ranking, opts.run_tag)
  msmarco.write_msmarco_run(paths[MSMARCO_RUN], ranking)
  results = {"run": paths[MSMARCO_RUN], "trec_run": paths[TREC_RUN]}
  said = "BM25: run %s" % paths[MSMARCO_RUN]
  if qrels is not None:
    results.update(metrics.figures(qrels, msmarco.run_pids(ranking)))
    said = "%s; run %s" % (metrics.describe("BM25", results),
                           paths[MSMARCO_RUN])
  with atomic_io.atomic_open(os.path.join(opts.output_dir,
                                          RESULTS_FILE)) as f:
    f.write(json.dumps(results, indent=2, sort_keys=True) + "\n")
  return said


if __name__ == "__main__":
  programs.main(Bm25Options, run)
