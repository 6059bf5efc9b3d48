# coding=utf-8
"""BERT fine-tuning for multiple choice (SWAG) with tf.estimator.

Run by the task runner (bertkit/engine/runner.py) as run_classifier.py is:
one device, MirroredStrategy, MultiWorkerMirroredStrategy,
CentralStorageStrategy, horovod or BytePS, --use_fp16, --use_bf16, gradient
accumulation, preemption, throughput logs, a run summary.
`--train_batch_size` is the global batch of examples (each C sequences)
over all replicas.

This program holds the flags and their checks; the task lives in
bertkit/tasks: swag/data.py (reading, encoding each choice with its
context) and swag/task.py (head, loss, records, outputs).

Files read from --data_dir (each split: the first name present):
  train  train.csv or train.jsonl                     (--do_train)
  dev    val.csv, dev.csv, val.jsonl or dev.jsonl     (--do_eval)
  test   test.csv or test.jsonl                       (--do_predict;
                                                       labels optional)
SWAG's CSV (sent1, sent2, ending0..3, label; SWAG's header) or JSONL lines
{"question", "choices", "label"}. Each choice is encoded as
[CLS] sent1 [SEP] sent2 + ending [SEP] (JSONL: [CLS] question [SEP] choice
[SEP]); every example of a run has the same number of choices C.

Outputs in --output_dir (besides checkpoints and throughput logs):
  train.tf_record, eval.tf_record, predict.tf_record  the examples.
  dev_results.tsv, test_results.tsv  one line per example, in file order:
                    the C choice probabilities, tab-separated.
  eval_results.txt  `name = value` lines: eval_accuracy, eval_loss (dev),
                    test_accuracy, test_loss (a labelled test set),
                    global_step.
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
from bertkit.tasks.swag import data as swag_data
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
                      "Directory with train.csv, val.csv, test.csv (SWAG) "
                      "or train.jsonl, dev.jsonl, test.jsonl.")
  shared_flags.define_do_lower_case()
  shared_flags.define_max_seq_length(128)
  shared_flags.define_evaluation()
  shared_flags.define_fine_tuning()


def options_from_flags():
  """The run's options.MultipleChoiceOptions, from the parsed flags."""
  return training_flags.options_from_flags(
      options.MultipleChoiceOptions, FLAGS,
      run=training_flags.run_options_from_flags(FLAGS),
      do_lower_case=shared_flags.given(FLAGS, "do_lower_case"))


def check_files(opts):
  """The files and the directory named, checked before TensorFlow is
  imported."""
  shared_flags.check_local_files(opts, ("bert_config_file", "vocab_file"))
  shared_flags.check_data_dir(opts.data_dir)


def read_splits(opts):
  """{split: Examples} of the splits the --do_* options read.

  Raises:
    UserError: a file is bad or missing, train or dev has an unlabelled
      example, or the splits' numbers of choices differ.
  """
  examples = {}
  for split in shared_flags.stage_splits(opts):
    path = swag_data.split_path(opts.data_dir, split)
    examples[split] = swag_data.read_examples(path)
    if split != "test":
      swag_data.check_labelled(examples[split], path)
  counts = {split: len(e[0].endings) for split, e in examples.items()}
  if len(set(counts.values())) > 1:
    raise UserError("the splits have different numbers of choices: %s" %
                    ", ".join("%s %d" % item for item in counts.items()))
  return examples


def validate(opts):
  """Checks the rest (with TensorFlow) and reads every file before any long
  work or any output.

  Returns:
    (model, {split: Examples}): model is the run_directory.Model.
  """
  import tensorflow.compat.v1 as tf
  from bertkit.tasks.fine_tuning.driver import load_checked_model
  model = load_checked_model(opts)
  examples = read_splits(opts)
  if (not opts.do_train and not opts.run.init_checkpoint and
      not tf.train.latest_checkpoint(opts.run.output_dir)):
    raise UserError("--do_eval/--do_predict without --do_train need a "
                    "fine-tuned checkpoint in --output_dir %s or an "
                    "--init_checkpoint; there is none" % opts.run.output_dir)
  return model, examples


def run(opts):
  """Fine-tunes, evaluates and predicts as `opts` say.

  Args:
    opts: an options.MultipleChoiceOptions.
  """
  check_files(opts)
  from bertkit.engine import runner
  from bertkit.engine import distribution
  distribution.use_slurm_cluster(opts.run.distribution)  # before the strategy
  from bertkit.tasks.swag import task as multiple_choice
  from bertkit.tasks.fine_tuning.driver import train_steps
  model, examples = validate(opts)
  num_choices = len(next(iter(examples.values()))[0].endings)
  prepared = runner.prepare(opts.run,
                            multiple_choice.multiple_choice_task(
                                model.bert_config), model)
  files = multiple_choice.write_inputs(
      opts.run.output_dir, examples,
      tokenization.FullTokenizer(model.vocab_file, model.do_lower_case),
      opts.max_seq_length)
  num_train_steps, num_warmup_steps = 0, 0
  if opts.do_train:
    num_train_steps, num_warmup_steps = train_steps(
        len(examples["train"]), opts.run.train_batch_size,
        opts.num_train_epochs, opts.warmup_proportion)
    logging.info("***** Training: %d examples of %d choices, global batch "
                 "%d, %d steps *****", len(examples["train"]), num_choices,
                 opts.run.train_batch_size, num_train_steps)
  predicted = [s for s in multiple_choice.PREDICTED_SPLITS if s in examples]
  runner.run(
      prepared, multiple_choice.input_fn_maker(num_choices,
                                               opts.max_seq_length),
      runner.Schedule(num_train_steps, num_warmup_steps),
      train_files=files.get("train"),
      prediction=runner.PredictStage(
          files=[f for s in predicted for f in files[s]] or None,
          batch_size=opts.predict_batch_size,
          message="***** Predict: %s, batch %d *****" % (
              ", ".join("%s %d examples" % (s, len(examples[s]))
                        for s in predicted), opts.predict_batch_size),
          use_predictions=functools.partial(
              multiple_choice.use_predictions, opts.run.output_dir,
              {s: examples[s] for s in predicted})))


def main(argv):
  del argv
  run(options_from_flags())


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main), flags_parser=parse_flags)
