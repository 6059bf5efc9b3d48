# coding=utf-8
"""MS MARCO's passage-ranking files as downloaded, read and written.

Every file may be plain or compressed (.gz, .bz2, .xz, .zst: data/
compressed_files.py) and is read a line at a time; a byte that is not UTF-8
is one error naming the file and line (common/text_files.py). Ids are
MS MARCO's, non-negative integers, kept as the text the file gives.

  collection.tsv            pid<TAB>passage
  queries.*.tsv             qid<TAB>query
  qrels.*.tsv (TREC qrels)  qid 0 pid relevance (tabs or spaces); relevance
                            > 0 is relevant (MS MARCO's qrels hold only 1)
  triples.train.small.tsv   query<TAB>positive passage<TAB>negative passage
  top1000.dev/eval.tsv      qid<TAB>pid<TAB>query<TAB>passage: a query's
                            candidates in the file's order
  MS MARCO run              qid<TAB>pid<TAB>rank
  TREC run                  qid Q0 pid rank score tag

A candidates file is any of the last three (told apart by its columns);
each query's candidates are kept in first-stage order (a run's ranks, a
top1000 file's line order). Every bad line is one UserError naming the file
and line. No TensorFlow here.
"""

import collections
import dataclasses
from typing import Dict, List

from bertkit.common import atomic_io
from bertkit.common import text_files
from bertkit.common.errors import UserError
from bertkit.data import compressed_files

TOP1000_COLUMNS = 4
MSMARCO_RUN_COLUMNS = 3
TREC_RUN_COLUMNS = 6
QRELS_COLUMNS = 4


def lines(path):
  """(line number, text) of each line of `path` that is not blank, without
  its line break; the text decoded as UTF-8 (one UserError naming the line
  otherwise)."""
  with compressed_files.open_binary(path) as f:
    offset = 0
    for number, raw in enumerate(f, 1):
      text = text_files.decode_line(raw, path, offset,
                                    lambda _, n=number: n)
      offset += len(raw)
      text = text.rstrip("\r\n")
      if text.strip():
        yield number, text


def check_id(value, what, where):
  """`value` if it is an MS MARCO id (digits), else a UserError."""
  if not value.isdigit():
    raise UserError("%s: %s %r is not a number (MS MARCO's ids are "
                    "non-negative integers)" % (where, what, value))
  return value


def tab_fields(path, number, text, count, layout):
  """The `count` tab-separated fields of a line, each non-empty.

  Raises:
    UserError: another number of fields, or an empty one.
  """
  fields = text.split("\t")
  where = "%s line %d" % (path, number)
  if len(fields) != count:
    raise UserError("%s: %d tab-separated column(s), expected %d (%s)" % (
        where, len(fields), count, layout))
  for field, name in zip(fields, layout.split("<TAB>")):
    if not field.strip():
      raise UserError("%s: the %s is empty" % (where, name))
  return fields


def read_id_texts(path, what, needed=None):
  """{id: text} of a collection.tsv (what="pid", "passage") or queries.tsv
  (what="qid", "query") file.

  Args:
    path: the file.
    what: (id name, text name).
    needed: ids to keep (None: all); the others are checked and dropped.

  Raises:
    UserError: a line without two columns, a non-numeric id, an empty text,
      an id given twice.
  """
  id_name, text_name = what
  texts = {}
  for number, text in lines(path):
    key, value = tab_fields(path, number, text, 2,
                            "%s<TAB>%s" % (id_name, text_name))
    check_id(key, id_name, "%s line %d" % (path, number))
    if needed is not None and key not in needed:
      continue
    if key in texts:
      raise UserError("%s line %d: %s %s is given twice" % (
          path, number, id_name, key))
    texts[key] = value.strip()
  return texts


def read_collection(path, needed=None):
  """{pid: passage} of collection.tsv (read_id_texts)."""
  return read_id_texts(path, ("pid", "passage"), needed)


def read_queries(path, needed=None):
  """{qid: query} of a queries.*.tsv file (read_id_texts)."""
  return read_id_texts(path, ("qid", "query"), needed)


def read_qrels(path):
  """{qid: {pid: relevance}} of a TREC qrels file, in file order.

  Raises:
    UserError: a line without four columns, a non-numeric id or relevance,
      a (qid, pid) judged twice, or no line at all.
  """
  qrels = collections.OrderedDict()
  for number, text in lines(path):
    fields = text.split()
    where = "%s line %d" % (path, number)
    if len(fields) != QRELS_COLUMNS:
      raise UserError("%s: %d column(s), expected %d (TREC qrels: qid 0 pid "
                      "relevance)" % (where, len(fields), QRELS_COLUMNS))
    qid = check_id(fields[0], "qid", where)
    pid = check_id(fields[2], "pid", where)
    try:
      relevance = int(fields[3])
    except ValueError:
      raise UserError("%s: relevance %r is not an integer" % (
          where, fields[3])) from None
    judged = qrels.setdefault(qid, {})
    if pid in judged:
      raise UserError("%s: qid %s, pid %s is judged twice" % (where, qid,
                                                                pid))
    judged[pid] = relevance
  if not qrels:
    raise UserError("%s has no judgement" % path)
  return qrels


@dataclasses.dataclass(frozen=True)
class Triple:
  """One line of triples.train.small.tsv.

  Attributes:
    line: its line number in the file (from 1).
    query, positive, negative: its three texts.
  """
  line: int
  query: str
  positive: str
  negative: str


def read_triples(path, first_line=1):
  """The Triples of a triples file from line `first_line` on, streamed
  (one line in memory at a time).

  Raises:
    UserError: a line without three tab-separated texts.
  """
  for number, text in lines(path):
    if number < first_line:
      continue
    query, positive, negative = tab_fields(
        path, number, text, 3, "query<TAB>positive passage<TAB>negative "
        "passage")
    yield Triple(number, query.strip(), positive.strip(), negative.strip())


@dataclasses.dataclass
class Candidates:
  """The first stage's candidates of each query.

  Attributes:
    pids: {qid: [pid]} in first-stage order, queries in file order.
    queries: {qid: query} (a top1000 file's own; else filled from
      queries.tsv by `with_texts`).
    passages: {pid: passage}, the same way.
    source_format: "top1000", "msmarco" or "trec".
  """
  pids: Dict[str, List[str]]
  queries: Dict[str, str]
  passages: Dict[str, str]
  source_format: str

  @property
  def num_pairs(self):
    return sum(len(p) for p in self.pids.values())


def candidates_format(path):
  """"top1000", "msmarco" or "trec", from the first line's columns.

  Raises:
    UserError: the file is empty or its first line is none of the three.
  """
  for number, text in lines(path):
    tabs = len(text.split("\t"))
    if tabs == TOP1000_COLUMNS:
      return "top1000"
    if tabs == MSMARCO_RUN_COLUMNS:
      return "msmarco"
    if len(text.split()) == TREC_RUN_COLUMNS:
      return "trec"
    raise UserError(
        "%s line %d: %d tab-separated column(s); a candidates file is "
        "top1000 (qid<TAB>pid<TAB>query<TAB>passage), an MS MARCO run "
        "(qid<TAB>pid<TAB>rank) or a TREC run (qid Q0 pid rank score tag)"
        % (path, number, tabs))
  raise UserError("%s has no candidate (it is empty)" % path)


def _run_line(path, number, text, source_format):
  """(qid, pid, rank) of one line of a run file."""
  where = "%s line %d" % (path, number)
  if source_format == "msmarco":
    fields = tab_fields(path, number, text, MSMARCO_RUN_COLUMNS,
                        "qid<TAB>pid<TAB>rank")
    qid, pid, rank = fields
  else:
    fields = text.split()
    if len(fields) != TREC_RUN_COLUMNS:
      raise UserError("%s: %d column(s), expected %d (TREC run: qid Q0 pid "
                      "rank score tag)" % (where, len(fields),
                                           TREC_RUN_COLUMNS))
    qid, _, pid, rank = fields[:4]
  if not rank.isdigit() or int(rank) < 1:
    raise UserError("%s: rank %r is not a whole number from 1" % (where,
                                                                  rank))
  return (check_id(qid, "qid", where), check_id(pid, "pid", where),
          int(rank))


def read_candidates(path, num_docs=None):
  """The Candidates of a top1000 file or a run file (candidates_format).

  Args:
    path: the file.
    num_docs: keep each query's first num_docs candidates (None: all).

  Raises:
    UserError: a bad line (columns, a non-numeric id, an empty text), a
      (qid, pid) given twice, or a query whose ranks are not 1, 2, ... n.
  """
  source_format = candidates_format(path)
  pids = collections.OrderedDict()
  queries, passages = {}, {}
  first_line = {}  # (qid, pid) -> its line, for the message of a repeat
  ranks = {}  # qid -> {rank: line}
  for number, text in lines(path):
    where = "%s line %d" % (path, number)
    if source_format == "top1000":
      qid, pid, query, passage = tab_fields(
          path, number, text, TOP1000_COLUMNS,
          "qid<TAB>pid<TAB>query<TAB>passage")
      check_id(qid, "qid", where)
      check_id(pid, "pid", where)
      queries[qid], passages[pid] = query.strip(), passage.strip()
      rank = len(pids.get(qid, ())) + 1
    else:
      qid, pid, rank = _run_line(path, number, text, source_format)
      if rank in ranks.setdefault(qid, {}):
        raise UserError("%s: qid %s has rank %d twice (also line %d)" % (
            where, qid, rank, ranks[qid][rank]))
      ranks[qid][rank] = number
    if (qid, pid) in first_line:
      raise UserError("%s: qid %s ranks pid %s twice (also line %d); the "
                      "official evaluator refuses a passage ranked twice" %
                      (where, qid, pid, first_line[qid, pid]))
    first_line[qid, pid] = number
    pids.setdefault(qid, []).append((rank, pid))
  for qid, ranked in pids.items():
    ranked.sort()
    for expected, (rank, _) in enumerate(ranked, 1):
      if rank != expected:
        raise UserError(
            "%s line %d: qid %s has rank %d but no rank %d: ranks must run "
            "1, 2, ... without gaps" % (path, ranks[qid][rank], qid, rank,
                                        expected))
    pids[qid] = [pid for _, pid in ranked[:num_docs]]
  return Candidates(pids, queries, passages, source_format)


def with_texts(candidates, queries_path, collection_path):
  """`candidates` with every query's and passage's text: a top1000 file
  has them; a run file's come from queries.tsv and collection.tsv (only
  the ones ranked are kept in memory).

  Raises:
    UserError: a run file without --queries or --collection, or a qid or
      pid they lack.
  """
  if candidates.source_format == "top1000":
    return candidates
  if not (queries_path and collection_path):
    raise UserError("candidates in a run file (%s format) hold no text: "
                    "--queries and --collection must name queries.tsv and "
                    "collection.tsv" % candidates.source_format)
  needed = {pid for pids in candidates.pids.values() for pid in pids}
  queries = read_queries(queries_path, set(candidates.pids))
  passages = read_collection(collection_path, needed)
  for what, have, want, path in (("qid", queries, candidates.pids,
                                  queries_path),
                                 ("pid", passages, needed, collection_path)):
    missing = [key for key in want if key not in have]
    if missing:
      raise UserError("%s has no %s %s (of %d the candidates name)" % (
          path, what, missing[0], len(missing)))
  return dataclasses.replace(candidates, queries=queries, passages=passages)


def ranked(pids, scores):
  """The pids of one query from the highest score down; equal scores keep
  the first stage's order (`pids`' order). The one order of every run file
  and metric.

  Args:
    pids: the query's candidates, in first-stage order.
    scores: one float per candidate.

  Returns:
    [(pid, score)] in rank order.
  """
  order = sorted(range(len(pids)), key=lambda i: (-scores[i], i))
  return [(pids[i], float(scores[i])) for i in order]


def write_msmarco_run(path, ranking):
  """Writes an MS MARCO run, qid<TAB>pid<TAB>rank, atomically.

  Args:
    path: the file.
    ranking: {qid: [(pid, score)]} in rank order.
  """
  with atomic_io.atomic_open(path) as f:
    for qid, pairs in ranking.items():
      for rank, (pid, _) in enumerate(pairs, 1):
        f.write("%s\t%s\t%d\n" % (qid, pid, rank))


def write_trec_run(path, ranking, tag):
  """Writes a TREC run, qid Q0 pid rank score tag, atomically (see
  write_msmarco_run)."""
  with atomic_io.atomic_open(path) as f:
    for qid, pairs in ranking.items():
      for rank, (pid, score) in enumerate(pairs, 1):
        f.write("%s Q0 %s %d %.6f %s\n" % (qid, pid, rank, score, tag))


def run_pids(ranking):
  """{qid: [pid]} of a {qid: [(pid, score)]} ranking."""
  return {qid: [pid for pid, _ in pairs] for qid, pairs in ranking.items()}


def qrels_queries_missing(qrels, run):
  """The qids of `qrels` that `run` does not rank, in qrels order."""
  return [qid for qid in qrels if qid not in run]

