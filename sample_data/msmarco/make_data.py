"""Regenerates the sample passage-ranking task in MS MARCO's files.

From sample_data/corpus.txt (80 documents of one sentence a line): each
document is cut into groups of GROUP consecutive sentences. One sentence of
each group, drawn at random, is held out as a query; the group's other
sentences, in order, are its passage: the task is Lee et al.'s inverse
cloze task (find the passage a sentence was taken from), on real text, with
one relevant passage per query. The corpus repeats sentences across
documents: a sentence is kept in the first document that has it only, and
documents sharing sentences (a family) are never split. The documents are
split by family: the passages of at least DEV_DOCUMENTS documents form
collection.tsv and their held-out sentences the dev queries
(queries.dev.small.tsv, qrels.dev.small.tsv); the others are the training
documents, whose text only the triples hold (as MS MARCO's triples hold
their passages' text): the re-ranker is evaluated on passages it never saw
in training, as a re-ranker of MS MARCO's 8.8 million passages sees almost
none of its dev candidates in training.

triples.train.small.tsv holds, as MS MARCO's, a training query, a relevant
passage and a passage BM25 retrieves for the query that is not relevant
(bertkit/tasks/reranking/bm25.py; NEGATIVES of its top BM25_DEPTH, drawn at
random, over the training documents' passages). Every sentence of a training
document serves as a query there, its relevant passage being the rest of its
group; a negative is another group of the training documents less one of its
sentences, drawn at random. Positives and negatives are alike in kind (a
group less one sentence; as often the collection's passage of the group as
not), and no triple holds text of a dev document.

collection_sentences.txt is the collection as create_pretraining_data.py's
text (one sentence a line, a blank line between passages), for pretraining
on the collection alone: the queries' sentences are not in it.

Usage (from the repository root; the output is deterministic):
  python sample_data/msmarco/make_data.py
"""

import importlib.util
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO_ROOT)

from bertkit.tasks.reranking import bm25  # noqa: E402  pylint: disable=g-import-not-at-top

SEED = 20261207
GROUP = 5
DEV_DOCUMENTS = 20
NEGATIVES = 4
BM25_DEPTH = 50
PRETRAINING_TEXT = "collection_sentences.txt"


def documents():
  """The corpus's documents, each a list of sentences (lines), as the SWAG
  sample reads them (sample_data/swag/make_data.py)."""
  spec = importlib.util.spec_from_file_location(
      "swag_make_data", os.path.join(REPO_ROOT, "sample_data", "swag",
                                     "make_data.py"))
  swag = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(swag)
  return [[" ".join(words) for words in doc] for doc in swag.documents()]


def families(docs):
  """The documents' families: documents sharing a sentence, and those
  sharing one with them (the corpus repeats sentences across documents)."""
  parent = list(range(len(docs)))

  def root(d):
    while parent[d] != d:
      d = parent[d]
    return d

  first = {}
  for d, doc in enumerate(docs):
    for sentence in doc:
      parent[root(d)] = root(first.setdefault(sentence, d))
  members = {}
  for d in range(len(docs)):
    members.setdefault(root(d), []).append(d)
  return list(members.values())


def unique_sentences(docs):
  """Each document without the sentences an earlier one has: no sentence is
  twice in the sample (a query is never a passage's sentence)."""
  seen, result = set(), []
  for doc in docs:
    result.append([s for s in doc if s not in seen])
    seen.update(doc)
  return result


def groups_of(doc):
  """The document's groups of GROUP sentences (a short last one joins the
  one before)."""
  groups = [doc[i:i + GROUP] for i in range(0, len(doc), GROUP)]
  if len(groups) > 1 and len(groups[-1]) < 3:
    last = groups.pop()
    groups[-1] = groups[-1] + last
  return groups


def without(group, index):
  """The group's sentences but the index-th, in order, as one passage."""
  return " ".join(s for i, s in enumerate(group) if i != index)


def write_tsv(name, rows):
  with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
    for row in rows:
      f.write("\t".join(str(x) for x in row) + "\n")


def main():
  rng = random.Random(SEED)
  docs = documents()
  # Whole families go to dev (at least DEV_DOCUMENTS documents), so that no
  # training document shares a sentence with a dev document.
  dev_docs = set()
  for family in rng.sample(families(docs), len(families(docs))):
    if len(dev_docs) < DEV_DOCUMENTS:
      dev_docs.update(family)
  docs = unique_sentences(docs)
  collection, passages = {}, {}
  queries, qrels = {"dev": {}}, {"dev": []}
  train_queries = []  # (query, positive passage, its group's pid)
  train_groups = {}  # pid -> the sentences of a training document's group
  for d, doc in enumerate(docs):
    for group in groups_of(doc) if len(doc) >= GROUP else ():
      held = rng.randrange(len(group))
      pid = str(len(passages))
      passages[pid] = [s for i, s in enumerate(group) if i != held]
      if d in dev_docs:
        collection[pid] = without(group, held)
        queries["dev"][str(1000 + int(pid))] = group[held]
        qrels["dev"].append((str(1000 + int(pid)), 0, pid, 1))
      else:
        train_groups[pid] = group
        for i, sentence in enumerate(group):
          train_queries.append((sentence, without(group, i), pid))
  retrieved = bm25.retrieve(
      {pid: " ".join(passages[pid]) for pid in train_groups},
      {str(i): q for i, (q, _, _) in enumerate(train_queries)},
      BM25_DEPTH + 1)
  triples = []
  for i, (query, positive, own) in enumerate(train_queries):
    others = [pid for pid, _ in retrieved[str(i)] if pid != own]
    for pid in rng.sample(others, min(NEGATIVES, len(others))):
      group = train_groups[pid]
      triples.append((query, positive,
                      without(group, rng.randrange(len(group)))))
  rng.shuffle(triples)
  write_tsv("collection.tsv", collection.items())
  write_tsv("queries.dev.small.tsv", queries["dev"].items())
  write_tsv("qrels.dev.small.tsv", qrels["dev"])
  write_tsv("triples.train.small.tsv", triples)
  # The collection as a pretraining corpus (no query's text): one sentence
  # a line, a blank line after each passage.
  with open(os.path.join(HERE, PRETRAINING_TEXT), "w", encoding="utf-8") as f:
    for sentences in passages.values():
      f.write("\n".join(sentences) + "\n\n")
  print("%d passages, %d dev queries, %d triples of %d training queries" % (
      len(collection), len(queries["dev"]), len(triples),
      len(train_queries)))


if __name__ == "__main__":
  main()
