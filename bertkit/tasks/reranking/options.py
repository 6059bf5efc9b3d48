"""What run_rerank.py is told besides the fine-tuning options."""

import dataclasses
from typing import Optional

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.common.option_fields import (AT_LEAST_ONE, NOT_NEGATIVE,
                                          option)
from bertkit.tasks.fine_tuning.options import (FineTuningOptions,
                                               TeacherOptions)

FILE = option_fields.FILE


@dataclasses.dataclass(frozen=True, kw_only=True)
class RerankOptions(FineTuningOptions, options.EvaluationOptions,
                    TeacherOptions):
  """What run_rerank.py is told: MS MARCO's files, the length budget, the
  training steps, the candidates re-ranked; a teacher's scores of the
  triples (Margin-MSE) and the triples a teacher scores."""
  # Nogueira and Cho's: 64 query tokens, the passage 448.
  max_seq_length: int = options.max_seq_length_option(
      512, low=4, help_text="Pair length S after WordPiece tokenization: "
      "[CLS] query [SEP] passage [SEP], the query cut to --max_query_length "
      "first, the passage filling the rest; each batch is padded to its "
      "longest pair only.")
  max_query_length: int = option(
      64, "Query tokens kept (cut first; MS MARCO's re-rankers' 64).",
      **AT_LEAST_ONE)
  train_triples: Optional[str] = option(
      None, "triples.train.small.tsv (plain or .gz/.bz2/.xz/.zst): query, "
      "positive passage, negative passage per line; read from the start, "
      "only as many triples as the steps need.", path=FILE,
      unset="none; --do_train needs it")
  num_train_steps: int = option(
      400000, "Training steps (Nogueira and Cho's 400000); each takes "
      "--train_batch_size triples, two pairs each, from --train_triples (read "
      "again from the start if it holds fewer).", **AT_LEAST_ONE)
  num_train_epochs: float = option(
      1.0, "Unused by run_rerank.py: its training is --num_train_steps "
      "(accepted as every fine-tuning program accepts it).", low=0.0,
      low_open=True)
  candidates: Optional[str] = option(
      None, "The candidates to re-rank: top1000.dev.tsv (qid, pid, query, "
      "passage), an MS MARCO run (qid, pid, rank) or a TREC run (qid Q0 pid "
      "rank score tag) with --queries and --collection.", path=FILE,
      unset="none; --do_eval and --do_predict need it")
  queries: Optional[str] = option(
      None, "queries.*.tsv (qid, query) of a run file's queries.", path=FILE,
      unset="none: --candidates holds the texts (top1000)")
  collection: Optional[str] = option(
      None, "collection.tsv (pid, passage) of a run file's passages.",
      path=FILE, unset="none: --candidates holds the texts (top1000)")
  qrels: Optional[str] = option(
      None, "TREC qrels (qid 0 pid relevance) of the candidates' queries: "
      "MRR@10, Recall@1000 and nDCG@10 of the first stage and of the "
      "re-ranked run.", path=FILE, unset="none; --do_eval needs it")
  num_eval_docs: int = option(
      1000, "Candidates re-ranked per query: each query's first ones in "
      "first-stage order (Nogueira and Cho's 1000).", **AT_LEAST_ONE)
  eval_every_n_steps: int = option(
      0, "With --do_train: MRR@10 of --held_out_queries queries of --qrels "
      "every N steps and at the end, in eval_history.jsonl and TensorBoard "
      "(0: none).", **NOT_NEGATIVE)
  target_mrr_at_10: Optional[float] = option(
      None, "With --eval_every_n_steps: stop training at the first held-out "
      "evaluation whose MRR@10 reaches this (time_to_target.json).",
      unset="none: train --num_train_steps", low=0.0, high=1.0)
  held_out_queries: int = option(
      200, "Queries of --qrels (the first ones) evaluated during training.",
      **AT_LEAST_ONE)
  predict_triples: Optional[str] = option(
      None, "--do_predict scores this triples file (query, positive, "
      "negative) instead of re-ranking --candidates: predict_logits.jsonl, "
      "one row per triple, logits [the positive's, the negative's] (a "
      "Margin-MSE student's --teacher_outputs).", path=FILE,
      unset="none: --do_predict re-ranks --candidates")
  pad_to_max_seq_length: bool = option(
      False, "Pad every pair to --max_seq_length (one shape for every batch, "
      "as upstream's records) instead of each batch to its longest pair.")
  predict_batch_size: int = option(64, "Pairs per batch when re-ranking.",
                                   **AT_LEAST_ONE)
  eval_batch_size: int = option(64, "Pairs per batch of the held-out "
                                "evaluation.", **AT_LEAST_ONE)
  run_tag: str = option("bertkit", "The TREC run's tag column.")
  num_workers: Optional[int] = option(
      None, "Processes writing the records.", unset="every core",
      low=1)

  def __post_init__(self):
    super().__post_init__()
    if self.do_train and not self.train_triples:
      raise UserError("--do_train needs --train_triples")
    if self.predict_triples and (self.do_eval or self.candidates or
                                 not self.do_predict):
      raise UserError("--predict_triples is what --do_predict scores, in a "
                      "run of its own: give --do_predict, without --do_eval "
                      "and --candidates")
    if ((self.do_eval or self.do_predict) and not self.candidates and
        not self.predict_triples):
      raise UserError("--do_eval/--do_predict need --candidates")
    if (self.do_eval or self.eval_every_n_steps) and not self.qrels:
      raise UserError("--do_eval and --eval_every_n_steps need --qrels")
    if self.target_mrr_at_10 is not None and not self.eval_every_n_steps:
      raise UserError("--target_mrr_at_10 is watched by the held-out "
                      "evaluation: it needs --eval_every_n_steps")
    if self.eval_every_n_steps and not (self.do_train and self.candidates):
      raise UserError("--eval_every_n_steps evaluates during --do_train; it "
                      "needs --do_train and --candidates")
    if self.max_seq_length - self.max_query_length - 3 < 1:
      raise UserError(
          "--max_seq_length=%d must be greater than --max_query_length=%d + "
          "3 ([CLS] and two [SEP]): no room is left for the passage" % (
              self.max_seq_length, self.max_query_length))
