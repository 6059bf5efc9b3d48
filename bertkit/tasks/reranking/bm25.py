# coding=utf-8
"""The first stage: BM25 over a collection with bm25s, the top k passages of
each query.

Text is tokenized by bm25s (lower-cased words of two or more characters),
English stop words removed and the words stemmed with PyStemmer's Snowball
English stemmer; scores are Lucene's BM25 with k1 0.9 and b 0.4 (Anserini's
defaults, the MS MARCO passage baseline's). As Lucene, a passage sharing no
term with the query is not retrieved: a query may have fewer than k
candidates, or none. Equal scores are ranked in collection order (the
first line of collection.tsv first), so that a run is the same on every
machine. No TensorFlow here.
"""

import dataclasses

import numpy as np

from bertkit.common.errors import UserError


@dataclasses.dataclass(frozen=True)
class Bm25Settings:
  """BM25's parameters and the text processing.

  Attributes:
    k1: term frequency saturation.
    b: length normalisation.
    stopwords: bm25s's stop word list name ("en"), or "" for none.
    stemmer: PyStemmer's algorithm ("english"), or "" for none.
  """
  k1: float = 0.9
  b: float = 0.4
  stopwords: str = "en"
  stemmer: str = "english"


def _tokenize(texts, settings, return_ids):
  # pylint: disable=g-import-not-at-top
  import bm25s
  import Stemmer
  return bm25s.tokenize(
      texts, stopwords=settings.stopwords or None,
      stemmer=Stemmer.Stemmer(settings.stemmer) if settings.stemmer else None,
      return_ids=return_ids, show_progress=False)


def retrieve(collection, queries, k, settings=Bm25Settings(),
             num_threads=0):
  """The top `k` passages of each query by BM25.

  Args:
    collection: {pid: passage}, in collection order.
    queries: {qid: query}.
    k: candidates per query.
    settings: the Bm25Settings.
    num_threads: bm25s's threads (0: one).

  Returns:
    {qid: [(pid, score)]} in rank order, queries in `queries`' order.

  Raises:
    UserError: the collection is empty.
  """
  import bm25s  # pylint: disable=g-import-not-at-top
  pids = list(collection)
  if not pids:
    raise UserError("the collection holds no passage")
  retriever = bm25s.BM25(k1=settings.k1, b=settings.b)
  retriever.index(_tokenize([collection[pid] for pid in pids], settings,
                            True), show_progress=False)
  qids = list(queries)
  documents, scores = retriever.retrieve(
      _tokenize([queries[qid] for qid in qids], settings, False),
      k=min(k, len(pids)), show_progress=False, n_threads=num_threads)
  run = {}
  for qid, row, row_scores in zip(qids, documents, scores):
    order = np.lexsort((row, -row_scores))  # score down, then collection
    run[qid] = [(pids[row[i]], float(row_scores[i])) for i in order
                if row_scores[i] > 0]
  return run
