# coding=utf-8
"""BERT passage re-ranking on MS MARCO's files (Nogueira and Cho's re-ranker)
with tf.estimator.

Run by the task runner (bertkit/engine/loop/runner.py) as run_classifier.py is:
one device, MirroredStrategy, MultiWorkerMirroredStrategy,
CentralStorageStrategy, horovod or BytePS, --use_fp16, --use_bf16, gradient
accumulation, preemption, throughput logs, a run summary. Scoring runs on
every replica of the process. `--train_batch_size` is the global batch of
triples (each two pairs) over all replicas.

Its options (flags): bertkit/tasks/reranking/options.py, the fine-tuning ones
and the runner's; the task: bertkit/tasks/reranking/msmarco.py (the files),
records.py (conversion on every core), metrics.py (MRR@10 as MS MARCO's
evaluator, Recall@1000 and nDCG@10 from ir-measures) and task.py (head,
loss, input, runs), run by the fine-tuning driver
(bertkit/tasks/fine_tuning/driver.py). docs/reranking.md has the commands.

Files read (plain or .gz/.bz2/.xz/.zst), as MS MARCO distributes them:
  --train_triples  triples.train.small.tsv: query, positive, negative
                   (--do_train; its first --num_train_steps x
                   --train_batch_size triples, read again if it has fewer)
  --candidates     top1000.dev.tsv (qid, pid, query, passage), an MS MARCO
                   run (qid, pid, rank) or a TREC run (qid Q0 pid rank score
                   tag) (--do_eval, --do_predict); a run file's texts come
                   from --queries (queries.*.tsv) and --collection
                   (collection.tsv); each query's first --num_eval_docs
  --qrels          TREC qrels, qid 0 pid relevance (--do_eval,
                   --eval_every_n_steps)
Each pair is [CLS] query [SEP] passage [SEP], the query cut to
--max_query_length (64) first, the passage filling the rest of
--max_seq_length (512); each batch is padded to its longest pair.

Outputs in --output_dir (besides checkpoints and throughput logs):
  train-*.tf_record, rerank-*.tf_record, heldout-*.tf_record  the records
                    (train_records.json: what a rerun keeps).
  rerank_run.tsv    the re-ranked run, MS MARCO's format (qid, pid, rank);
                    highest score first, equal scores in first-stage order.
  rerank_run.trec   the same as a TREC run (score: the pair's logit).
  first_stage_run.tsv  the candidates re-ranked, in first-stage order.
  rerank_results.json  both runs' paths and (--do_eval) MRR@10,
                    Recall@1000, nDCG@10 over the queries of --qrels.
  eval_results.txt  `name = value`: mrr_at_10, recall_at_1000, ndcg_at_10,
                    first_stage_*, global_step.
  eval_history.jsonl  with --eval_every_n_steps: held-out MRR@10 during
                    training.
The model exports to Hugging Face (export_checkpoint.py) as
BertForSequenceClassification with num_labels=1; sentence-transformers'
CrossEncoder loads it and scores sigmoid(logit).
"""

from bertkit.common import programs
from bertkit.tasks.reranking.options import RerankOptions


def run(opts):
  """Fine-tunes a re-ranker and re-ranks candidates as `opts`
  (RerankOptions) say."""
  # pylint: disable=g-import-not-at-top
  from bertkit.tasks.fine_tuning import driver
  driver.check_inputs(opts)  # before TensorFlow is imported
  from bertkit.tasks.reranking import task
  driver.run(task.TASK, opts)


if __name__ == "__main__":
  programs.main(RerankOptions, run)
