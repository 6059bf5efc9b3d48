# coding=utf-8
"""BERT fine-tuning for named-entity recognition (token classification).

Run by the task runner (bertkit/engine/runner.py) as run_classifier.py is:
one device, MirroredStrategy, MultiWorkerMirroredStrategy,
CentralStorageStrategy, horovod or BytePS, --use_fp16, --use_bf16, gradient
accumulation, preemption, throughput logs, a run summary.
`--train_batch_size` is the global batch (of windows) over all replicas.

This program holds the flags and their checks; the task lives in
bertkit/tasks: ner/data.py (files, IOB, windows, the CoNLL output, seqeval's
metrics) and ner/task.py (head, loss, records, outputs).

Files read from --data_dir (each split: the first name present):
  train  train.txt or eng.train            (--do_train)
  dev    dev.txt, valid.txt or eng.testa   (--do_eval)
  test   test.txt or eng.testb             (--do_predict; its gold tags
                                            are scored too)
CoNLL-2003's files as distributed (`token POS chunk NER` columns,
`-DOCSTART-` lines, a blank line after each sentence) or `token<TAB>tag`
lines; IOB1 or IOB2 tags, read as IOB2. Labels: --labels, else O and the
B-/I- tags of train's entity types (types sorted), else (no --do_train) the
labels.txt of --output_dir.

Each word's first WordPiece carries its label, the other pieces none; a
sentence longer than --max_seq_length - 2 pieces is cut between words into
several windows, so every word is predicted once.

Outputs in --output_dir (besides checkpoints and throughput logs):
  labels.txt        the labels in output order (export_checkpoint reads it).
  train.tf_record, eval.tf_record, predict.tf_record  the windows.
  dev_predictions.txt, test_predictions.txt  `token gold predicted` lines,
                    a blank line after each sentence (conlleval's input).
  eval_results.txt  `name = value` lines: eval_* of dev, test_* of test:
                    precision, recall, f1, support (entity level, seqeval's
                    default mode = conlleval's rules; overall the micro
                    average), the same per type (eval_PER_f1, ...), loss and
                    accuracy (token level, first pieces); global_step.
  eval_results.json the same figures as {"dev": {..., "types": {"PER":
                    {...}}}, "test": {...}}.
Dev and test are predicted at --predict_batch_size.
"""

import functools
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
from bertkit.tasks.ner import data as ner_data
import tokenization

# Nothing above imports TensorFlow: the flags and files are checked before
# it is, so that a bad flag is refused at once; its C++ runtime reads its
# log level and its choice of CPU kernels when it is imported.
console.quiet_native_logs(sys.argv)
cpu_kernels.prefer_onednn()
# pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS


def define_flags():
  """The task's flags beyond the runner's (training_flags)."""
  training_flags.define_runner_flags()
  flags.DEFINE_string("data_dir", None,
                      "Directory with the tagged files: train.txt, dev.txt, "
                      "test.txt (or CoNLL-2003's names).")
  flags.DEFINE_list("labels", None,
                    "The labels, comma-separated (O, B-TYPE, I-TYPE); "
                    "default: those of train.txt.")
  shared_flags.define_do_lower_case()
  shared_flags.define_max_seq_length(128)
  shared_flags.define_evaluation()
  shared_flags.define_fine_tuning()


def options_from_flags():
  """The run's options.NerOptions, from the parsed flags."""
  return training_flags.options_from_flags(
      options.NerOptions, FLAGS,
      run=training_flags.run_options_from_flags(FLAGS),
      do_lower_case=shared_flags.given(FLAGS, "do_lower_case"),
      labels=tuple(FLAGS.labels) if FLAGS.labels else None)


def check_files(opts):
  """The files and the directory named, checked before TensorFlow is
  imported."""
  shared_flags.check_local_files(opts, ("bert_config_file", "vocab_file"))
  shared_flags.check_data_dir(opts.data_dir)


def label_list_of(opts, sentences):
  """The run's labels: --labels, train's, or the trained model's.

  Raises:
    UserError: none of them is there, or a tag read is not among them.
  """
  from bertkit.tasks.classification import task as classifier
  if opts.labels:
    labels = list(opts.labels)
    ner_data.check_label_list(labels)
  elif "train" in sentences:
    labels = ner_data.labels_of(sentences["train"])
  else:
    labels = classifier.read_labels(opts.run.output_dir)
    if not labels:
      raise UserError("without --do_train, give --labels or an --output_dir "
                      "holding the labels.txt of a training run")
  for split_sentences in sentences.values():
    ner_data.check_labels(split_sentences, labels)
  return labels


def check_fine_tuned(opts):
  """Evaluating or predicting without training needs a NER model."""
  import tensorflow.compat.v1 as tf
  from bertkit.engine import checkpoints
  from bertkit.tasks.ner import task as token_classification
  if opts.do_train or tf.train.latest_checkpoint(opts.run.output_dir):
    return
  if not opts.run.init_checkpoint or (
      token_classification.OUTPUT_WEIGHTS not in dict(tf.train.list_variables(
          checkpoints.resolve_init_checkpoint(opts.run.init_checkpoint)))):
    raise UserError("--do_eval/--do_predict without --do_train need a "
                    "fine-tuned checkpoint in --output_dir %s or a NER "
                    "--init_checkpoint (with %s)" % (
                        opts.run.output_dir,
                        token_classification.OUTPUT_WEIGHTS))


def validate(opts):
  """Checks the rest (with TensorFlow) and reads every file before any
  long work or any output.

  Returns:
    (model, label_list, {split: Sentences}): model is the
    run_directory.Model.
  """
  from bertkit.tasks.fine_tuning.driver import load_checked_model
  model = load_checked_model(opts)
  sentences = {split: ner_data.read_sentences(
      ner_data.split_path(opts.data_dir, split))
               for split in shared_flags.stage_splits(opts)}
  label_list = label_list_of(opts, sentences)
  check_fine_tuned(opts)
  return model, label_list, sentences


def run(opts):
  """Fine-tunes, evaluates and predicts as `opts` say.

  Args:
    opts: an options.NerOptions.
  """
  check_files(opts)
  from bertkit.engine import runner
  from bertkit.engine import distribution
  distribution.use_slurm_cluster(opts.run.distribution)  # before the strategy
  from bertkit.tasks.classification import task as classifier
  from bertkit.tasks.ner import task as token_classification
  from bertkit.tasks.fine_tuning.driver import train_steps
  model, label_list, sentences = validate(opts)
  logging.info("Labels %s", label_list)
  prepared = runner.prepare(opts.run,
                            token_classification.token_classification_task(
                                model.bert_config, len(label_list)), model)
  if prepared.setup.is_chief:
    classifier.write_labels(opts.run.output_dir, label_list)
  files, windows = token_classification.write_inputs(
      opts.run.output_dir, sentences, label_list,
      tokenization.FullTokenizer(model.vocab_file, model.do_lower_case),
      opts.max_seq_length)
  num_train_steps, num_warmup_steps = 0, 0
  if opts.do_train:
    num_train_steps, num_warmup_steps = train_steps(
        len(windows["train"]), opts.run.train_batch_size,
        opts.num_train_epochs, opts.warmup_proportion)
    logging.info("***** Training: %d sentences in %d windows, global batch "
                 "%d, %d steps *****", len(sentences["train"]),
                 len(windows["train"]), opts.run.train_batch_size,
                 num_train_steps)
  predicted = [s for s in token_classification.PREDICTED_SPLITS
               if s in windows]
  runner.run(
      prepared, token_classification.input_fn_maker(opts.max_seq_length),
      runner.Schedule(num_train_steps, num_warmup_steps),
      train_files=files.get("train"),
      prediction=runner.PredictStage(
          files=[f for s in predicted for f in files[s]] or None,
          batch_size=opts.predict_batch_size,
          message="***** Predict: %s, batch %d *****" % (
              ", ".join("%s %d sentences in %d windows" % (
                  s, len(sentences[s]), len(windows[s])) for s in predicted),
              opts.predict_batch_size),
          use_predictions=functools.partial(
              token_classification.use_predictions, opts.run.output_dir,
              sentences, {s: windows[s] for s in predicted}, label_list)))


def main(argv):
  del argv
  run(options_from_flags())


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main), flags_parser=parse_flags)
