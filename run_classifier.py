# coding=utf-8
"""BERT fine-tuning for sentence (pair) classification with tf.estimator.

Upstream's flags, processors and files (TPU flags dropped), run by the task
runner (bertkit/engine/loop/runner.py) as run_pretraining.py is: one device,
MirroredStrategy, MultiWorkerMirroredStrategy, CentralStorageStrategy or
horovod ranks, fp16,
gradient accumulation, preemption, throughput logs, a run summary.
`--train_batch_size` is the global batch over all replicas.

Its options (flags): bertkit/tasks/classification/options.py, the
fine-tuning ones and the runner's; the task: bertkit/tasks/classification/
registry.py (every task's names, files and labels), data.py and
processors.py (the tasks' processors), features.py (features, records), task.py (head, the runner's task, records)
and outputs.py (output files), run by the fine-tuning driver
(bertkit/tasks/fine_tuning/driver.py); a GLUE task's metrics and
submission files: bertkit/tasks/classification/glue_outputs.py.

Tasks (`--task_name`) and the files they read from `--data_dir`:
  cola   train.tsv, dev.tsv (no header): label in column 1, sentence in 3;
         test.tsv (header): sentence in column 1. Labels 0, 1.
  mnli   train.tsv, dev_matched.tsv, test_matched.tsv (header): sentences
         in columns 8 and 9, label in the last column.
         Labels contradiction, entailment, neutral. Also
         dev_mismatched.tsv (--do_eval) and test_mismatched.tsv
         (--do_predict).
  mrpc   train.tsv, dev.tsv, test.tsv (header): label in column 0,
         sentences in 3 and 4. Labels 0, 1.
  sst-2 (or sst2)  train.tsv, dev.tsv (header sentence, label);
         test.tsv (header index, sentence). Labels 0, 1.
  qqp    train.tsv, dev.tsv (header id, qid1, qid2, question1, question2,
         is_duplicate); test.tsv (header id, question1, question2). Labels
         0, 1. Lines with another number of columns are skipped, counted
         in one warning per file.
  qnli   train.tsv, dev.tsv (header index, question, sentence, label);
         test.tsv (no label). Labels entailment, not_entailment.
  rte    train.tsv, dev.tsv (header index, sentence1, sentence2, label);
         test.tsv (no label). Labels entailment, not_entailment.
  wnli   as rte; labels 0, 1.
  sts-b (or stsb)  train.tsv, dev.tsv (header index, genre, filename, year,
         old_index, source1, source2, sentence1, sentence2, score); test.tsv
         (no score). Regression: one output, the score (a number), mean
         squared error.
  ax     diagnostic.tsv (header index, sentence1, sentence2): GLUE's
         diagnostic set, --do_predict only, with an MNLI fine-tuned
         --init_checkpoint (MNLI's labels).
  A GLUE file whose header is not its task's (above; for cola, mrpc and
  mnli the columns read) is refused.
  xnli   multinli/multinli.train.zh.tsv (header: premise, hypo, label;
         "contradictory" means contradiction) and xnli.dev.tsv (header;
         rows whose column 0 is "zh": label in 1, sentences in 6 and 7).
         No test set.
  tsv    train.tsv, dev.tsv, test.tsv of any layout: --text_a_column,
         --text_b_column (optional) and --label_column name a column by its
         0-based number or, with --tsv_has_header, by its header name.
         Labels from --labels, else the sorted distinct labels of
         train.tsv. The label column of test.tsv is not read.
  rerank query/passage re-ranking; train.tsv, dev.tsv, test.tsv with a
         header line and the columns
           query_id  passage_id  query  passage  label
         label is 1 (the passage answers the query) or 0; test.tsv may omit
         it. Predict also writes ranked_results.tsv (below). MS MARCO's
         files as downloaded (triples, top1000, run files, qrels), its
         length budget, MRR@10 and its run formats: run_rerank.py
         (docs/reranking.md).
Columns are tab-separated and never quoted; blank lines are skipped.

Outputs in --output_dir (besides checkpoints and throughput logs):
  train.tf_record, eval.tf_record, predict.tf_record  the features.
  eval_results.txt  `name = value` lines: eval_accuracy, eval_loss,
                    global_step, loss (sts-b: no eval_accuracy); a GLUE
                    task adds its metrics
                    (bertkit/tasks/classification/glue_outputs.py):
                    eval_<metric> of its dev set, eval_<dev set>_<metric>
                    of MNLI's dev_mismatched.
  eval_results.json a GLUE task's metrics per dev set, written last:
                    {"task", "global_step", "dev_sets": {"dev": {
                    "eval_loss", "accuracy", ..., "num_examples"}}}.
  test_results.tsv  one line per test example, in file order: the class
                    probabilities, tab-separated, in label-list order
                    (sts-b: the score). MNLI's mismatched test set:
                    test_results_test_mismatched.tsv.
  submission/       a GLUE task's leaderboard files (CoLA.tsv, ...,
                    MNLI-m.tsv and MNLI-mm.tsv, AX.tsv): a header line
                    `index<TAB>prediction`, then the test file's index and
                    the predicted label (sts-b: the score, 3 decimals).
  ranked_results.tsv (rerank only) a header line, then one line per test
                    example with the columns
                      query_id  passage_id  score  rank
                    score = P(label 1); the queries in order of first
                    appearance in test.tsv, each query's passages by
                    descending score (ties in file order), rank 1, 2, ...
"""

import importlib

from bertkit.common import programs
from bertkit.tasks.classification.options import ClassifierOptions

# Upstream's API of this module: google-research/bert's run_classifier.py
# defines these names, and code written for it imports them from here
# (from the bertkit/tasks module named, on first use: they import
# TensorFlow, which the flags' checks come before).
UPSTREAM_API = dict(
    [(name, "bertkit.tasks.classification.task")
     for name in ("create_model", "model_fn_builder")] +
    [(name, "bertkit.tasks.classification.data")
     for name in ("DataProcessor", "InputExample")] +
    [(name, "bertkit.tasks.classification.processors")
     for name in ("ColaProcessor", "MnliProcessor", "MrpcProcessor",
                  "XnliProcessor")] +
    [(name, "bertkit.tasks.classification.features")
     for name in ("InputFeatures", "PaddingInputExample",
                  "convert_single_example",
                  "file_based_convert_examples_to_features")])


def __getattr__(name):
  if name not in UPSTREAM_API:
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
  return getattr(importlib.import_module(UPSTREAM_API[name]), name)


def run(opts):
  """Fine-tunes, evaluates and predicts a classification task as `opts`
  (ClassifierOptions) say."""
  # pylint: disable=g-import-not-at-top
  from bertkit.tasks.fine_tuning import driver
  driver.check_inputs(opts)  # before TensorFlow is imported
  from bertkit.tasks.classification import task
  driver.run(task.TASK, opts)


if __name__ == "__main__":
  programs.main(ClassifierOptions, run)
