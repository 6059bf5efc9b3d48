# coding=utf-8
"""BERT fine-tuning for sentence (pair) classification with tf.estimator.

Upstream's flags, processors and files (TPU flags dropped), run by the task
runner (bertkit/engine/runner.py) as run_pretraining.py is: one device,
MirroredStrategy, MultiWorkerMirroredStrategy, CentralStorageStrategy or
horovod ranks, fp16,
gradient accumulation, preemption, throughput logs, a run summary.
`--train_batch_size` is the global batch over all replicas.

This program holds the flags and their checks; the task lives in
bertkit/tasks: classification/registry.py (every task's names, files and labels),
classification/data.py (processors), classification/features.py (features,
records), classification/task.py (head, task, output files).

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
         it. Predict also writes ranked_results.tsv (below).
Columns are tab-separated and never quoted; blank lines are skipped.

Outputs in --output_dir (besides checkpoints and throughput logs):
  train.tf_record, eval.tf_record, predict.tf_record  the features.
  eval_results.txt  `name = value` lines: eval_accuracy, eval_loss,
                    global_step, loss (sts-b: no eval_accuracy); a GLUE
                    task adds its metrics (bertkit/tasks/glue/task_outputs.py):
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

import functools
import importlib
import sys

from absl import app
from absl import flags
from absl import logging

from bertkit.common import console
from bertkit.common import cpu_kernels
from bertkit.common.errors import UserError, main_with_user_errors, parse_flags
from bertkit.common import options
from bertkit.common import shared_flags
from bertkit.common import training_flags
import tokenization

# Nothing above imports TensorFlow: the flags and files are checked
# (check_flags) before it is, in the functions that need it, so that a bad
# flag is refused at once. Before it is imported: its C++ runtime reads its
# log level and its choice of CPU kernels then.
console.quiet_native_logs(sys.argv)
cpu_kernels.prefer_onednn()
# pylint: disable=g-import-not-at-top

# Upstream's API of this module: google-research/bert's run_classifier.py
# defines these names, and code written for it imports them from here
# (from the bertkit/tasks module named, on first use: they import
# TensorFlow).
UPSTREAM_API = dict(
    [(name, "bertkit.tasks.classification.task")
     for name in ("create_model", "model_fn_builder")] +
    [(name, "bertkit.tasks.classification.data")
     for name in ("ColaProcessor", "DataProcessor", "InputExample",
                  "MnliProcessor", "MrpcProcessor", "XnliProcessor")] +
    [(name, "bertkit.tasks.classification.features")
     for name in ("InputFeatures", "PaddingInputExample",
                  "convert_single_example",
                  "file_based_convert_examples_to_features")])


def __getattr__(name):
  if name not in UPSTREAM_API:
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
  return getattr(importlib.import_module(UPSTREAM_API[name]), name)


FLAGS = flags.FLAGS


def define_flags():
  """Upstream's fine-tuning flags beyond the runner's, and the tsv task's.

  Called by the program only: importing this module (e.g. in tests next to
  run_pretraining) defines no flags.
  """
  training_flags.define_runner_flags()
  flags.DEFINE_string(
      "data_dir", None,
      "Directory with the task's .tsv files (see --task_name).")
  flags.DEFINE_string("task_name", None,
                      "A GLUE task (cola, sst-2, mrpc, sts-b, qqp, mnli, "
                      "qnli, rte, wnli, ax), xnli, tsv or rerank.")
  shared_flags.define_do_lower_case()
  shared_flags.define_max_seq_length(128)
  shared_flags.define_evaluation()
  shared_flags.define_fine_tuning()
  flags.DEFINE_string("text_a_column", "0",
                      "tsv task: column of the first text (number or name).")
  flags.DEFINE_string("text_b_column", None,
                      "tsv task: column of the second text of a pair task.")
  flags.DEFINE_string("label_column", "1",
                      "tsv task: column of the label (number or name).")
  flags.DEFINE_bool("tsv_has_header", True,
                    "tsv task: the first line of each file is a header.")
  flags.DEFINE_list("labels", None,
                    "tsv task: the labels, comma-separated; default: the "
                    "sorted distinct labels of train.tsv.")
  flags.DEFINE_bool(
      "pack_sequences", False,
      "Pack up to --max_sequences_per_pack examples into each row of "
      "--max_seq_length tokens (bertkit/tasks/classification/packing.py): no "
      "compute spent on padding, the same logits per example. "
      "--*_batch_size then count rows.")
  flags.DEFINE_integer(
      "max_sequences_per_pack", 3,
      "With --pack_sequences: the most examples in one row.")


def options_from_flags():
  """The run's options.ClassifierOptions, from the parsed flags."""
  return training_flags.options_from_flags(
      options.ClassifierOptions, FLAGS,
      run=training_flags.run_options_from_flags(FLAGS),
      do_lower_case=shared_flags.given(FLAGS, "do_lower_case"),
      labels=tuple(FLAGS.labels) if FLAGS.labels else None)


def check_files(opts):
  """The files and the directory named, checked before TensorFlow is
  imported."""
  shared_flags.check_local_files(opts, ("bert_config_file", "vocab_file"))
  shared_flags.check_data_dir(opts.data_dir)


def validate(opts):
  """Checks the rest of the flags (with TensorFlow) and reads the data before
  any long work.

  Returns:
    (model, processor, label_list, examples): model is the
    run_directory.Model; examples maps "train",
    "dev", "test" (and MNLI's "dev_mismatched", "test_mismatched") to the
    InputExamples of the requested steps.
  """
  import tensorflow.compat.v1 as tf
  from bertkit.tasks.classification import data as classifier_data
  from bertkit.tasks.fine_tuning.driver import load_checked_model
  model = load_checked_model(opts)
  processor = classifier_data.make_processor(
      opts.task_name, opts.data_dir, classifier_data.TsvOptions(
          opts.text_a_column, opts.label_column, opts.text_b_column,
          opts.tsv_has_header, opts.labels))
  examples = {split: read_split(processor, split, opts.data_dir)
              for split in wanted_splits(opts)}
  if opts.pack_sequences and classifier_data.is_regression(
      processor.get_labels()):
    raise UserError("--pack_sequences is for classification; task %s "
                    "regresses" % opts.task_name)
  # With --init_checkpoint a model can predict without fine-tuning here
  # (ax: an MNLI model on the diagnostic set).
  if ((opts.do_eval or opts.do_predict) and not opts.do_train and
      not opts.run.init_checkpoint and
      not tf.train.latest_checkpoint(opts.run.output_dir)):
    raise UserError("--do_eval/--do_predict without --do_train need a "
                    "fine-tuned checkpoint in --output_dir %s; there is none"
                    % opts.run.output_dir)
  return model, processor, processor.get_labels(), examples


def glue_task(task_name):
  """The task_registry name of --task_name, or None for a task outside
  GLUE."""
  from bertkit.tasks.classification import registry as task_registry
  task = task_registry.get(task_name)
  return task.name if task.is_glue else None


def wanted_splits(opts):
  """The processor splits the --do_* options read: train, dev and test, and
  the further dev and test sets of a GLUE task (MNLI's mismatched)."""
  from bertkit.tasks.classification import registry as task_registry
  glue = (task_registry.get(opts.task_name) if glue_task(opts.task_name)
          else None)
  splits = ["train"] if opts.do_train else []
  if opts.do_eval:
    # ax has no dev set: reading "dev" refuses --do_eval with one line.
    dev_sets = [split for _, split in glue.dev_sets] if glue else []
    splits += dev_sets or ["dev"]
  if opts.do_predict:
    splits += [split for _, split in glue.test_sets] if glue else ["test"]
  return splits


def read_split(processor, split, data_dir):
  """The InputExamples of one split of --data_dir."""
  read = {"train": processor.get_train_examples,
          "dev": processor.get_dev_examples,
          "test": processor.get_test_examples}.get(split)
  if read is None:
    return processor.get_split_examples(data_dir, split)
  return read(data_dir)


def prediction_stage(opts, examples, label_list, files, glue_run, packed):
  """The runner's PredictStage: the test set (a GLUE task: its dev and
  test sets, glue_tasks.GlueRun)."""
  from bertkit.engine import runner
  from bertkit.tasks.classification.task import write_predictions
  if glue_run is None:
    return runner.PredictStage(
        files=files.get("test"), batch_size=opts.predict_batch_size,
        message="***** Predict: %d examples, batch %d *****" % (
            len(examples.get("test", ())), opts.predict_batch_size),
        use_predictions=functools.partial(
            write_predictions, opts.run.output_dir, examples.get("test"),
            label_list, opts.task_name.lower() == "rerank", packed))
  return runner.PredictStage(
      files=glue_run.prediction_files() or None,
      batch_size=opts.predict_batch_size,
      message="***** Predict: %d dev and %d test examples, batch %d *****"
      % (sum(len(s.examples) for s in glue_run.dev_sets),
         sum(len(s.examples) for s in glue_run.test_sets),
         opts.predict_batch_size),
      use_predictions=functools.partial(glue_run.use_predictions,
                                        opts.run.output_dir))


def run(opts):
  """Fine-tunes, evaluates and predicts a classification task as `opts`
  say.

  Args:
    opts: an options.ClassifierOptions.
  """
  check_files(opts)
  from bertkit.engine import runner
  from bertkit.engine import distribution
  distribution.use_slurm_cluster(opts.run.distribution)  # before the strategy
  from bertkit.tasks.classification import data as classifier_data
  from bertkit.tasks.classification.task import (classifier_task, input_fn_maker,
                                        write_inputs)
  from bertkit.tasks.fine_tuning.driver import train_steps
  from bertkit.tasks.glue.task_outputs import GlueRun
  model, _, label_list, examples = validate(opts)
  logging.info("Task %s, labels %s", opts.task_name, label_list)
  prepared = runner.prepare(
      opts.run, classifier_task(model.bert_config, len(label_list)), model)
  per_pack = opts.max_sequences_per_pack if opts.pack_sequences else None
  files, counts = write_inputs(
      prepared.setup.is_chief, opts.run.output_dir, examples, label_list,
      tokenization.FullTokenizer(model.vocab_file, model.do_lower_case),
      opts.max_seq_length, opts.eval_batch_size, opts.predict_batch_size,
      per_pack)
  glue = glue_task(opts.task_name)
  glue_run = glue and GlueRun(glue, label_list, examples, files, counts,
                              per_pack is not None)
  if glue_run and prepared.setup.is_chief:
    glue_run.remove_stale_results(opts.run.output_dir)
  num_train_steps, num_warmup_steps = 0, 0
  if opts.do_train:
    num_train_steps, num_warmup_steps = train_steps(
        counts["train"], opts.run.train_batch_size, opts.num_train_epochs,
        opts.warmup_proportion)
    logging.info("***** Training: %d examples%s, global batch %d, %d steps "
                 "*****", len(examples["train"]),
                 " in %d packed rows" % counts["train"] if per_pack else "",
                 opts.run.train_batch_size, num_train_steps)
  runner.run(
      prepared, input_fn_maker(opts.max_seq_length, per_pack,
                          classifier_data.is_regression(label_list)),
      runner.Schedule(num_train_steps, num_warmup_steps),
      train_files=files.get("train"),
      evaluation=runner.EvalStage(
          files=files.get("dev"), batch_size=opts.eval_batch_size,
          message="***** Eval: %d examples, batch %d *****" % (
              len(examples.get("dev", ())), opts.eval_batch_size)),
      prediction=prediction_stage(opts, examples, label_list, files, glue_run,
                                  per_pack is not None))
  if glue_run and prepared.setup.is_chief:
    glue_run.write_results(opts.run.output_dir)


def main(argv):
  del argv
  run(options_from_flags())


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main), flags_parser=parse_flags)
