"""Masked LM and next-sentence pretraining of BERT with tf.estimator.

Upstream's flags (TPU ones dropped) plus the distribution flags of
bertkit/engine/distribution.py: the Estimator gets a MirroredStrategy,
MultiWorkerMirroredStrategy or CentralStorageStrategy through its RunConfig,
runs on one device, or runs as one horovod rank of several
(--distribution_strategy=horovod, launched by horovodrun).
`--train_batch_size` is the global batch over all replicas, per update: with
`--num_accumulation_steps K` each replica runs K micro-batches of
train_batch_size / (replicas * K) examples, then the summed gradient makes
one all-reduce and one update (one global step).

This program holds the flags, their checks and the input: what the records
hold and how they are masked; the model, its heads and losses live in
bertkit/tasks/pretraining.py.
"""

import sys

from bertkit.common import console
from bertkit.common import cpu_kernels

# Before TensorFlow is imported: its C++ runtime reads its log level and its
# choice of CPU kernels then.
console.quiet_native_logs(sys.argv)
cpu_kernels.prefer_onednn()
# pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app
from absl import flags
from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common.errors import UserError, main_with_user_errors
from bertkit.common import file_patterns
from bertkit.common import shared_flags
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.engine import dynamic_masking
from bertkit.engine import input_pipeline
from bertkit.engine import runner
from bertkit.tasks.pretraining import pretraining_task
import modeling
import tokenization

# Upstream's API of this module: google-research/bert's run_pretraining.py
# defines these names, and code written for it imports them from here.
# pylint: disable=unused-import
from bertkit.tasks.pretraining import (gather_indexes, get_masked_lm_output,
                                       get_next_sentence_output,
                                       model_fn_builder)
# pylint: enable=unused-import

FLAGS = flags.FLAGS

# --masking: create_pretraining_data's two kinds, or whichever the records
# need.
MASKING_AUTO = "auto"


def define_flags():
  """Upstream's pretraining flags beyond the runner's (runner.define_flags).

  Called by the program only: importing this module (e.g. for upstream's
  names above) defines no flags.
  """
  runner.define_flags()
  flags.DEFINE_string("input_file", None,
                      "Input TFRecord file(s): comma-separated globs.")
  flags.DEFINE_enum(
      "masking", MASKING_AUTO,
      [MASKING_AUTO] + list(pretraining_instances.MASKING_CHOICES),
      "auto: the records' own masks (create_pretraining_data.py "
      "--masking=static), or masks drawn in the input pipeline, anew every "
      "epoch, for records without masks (--masking=dynamic). static: the "
      "records' own masks only. dynamic: draw masks for either kind (masked "
      "records get their original tokens back and new masks).")
  # Drawn masks (--masking=dynamic) follow these; static records carry
  # their own.
  shared_flags.define_masking_rate()
  shared_flags.define_max_seq_length(128)
  shared_flags.define_evaluation()
  flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
  flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warm-up steps.")
  flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")


def masking_for_records(masking, record_kind, vocab_file, max_seq_length,
                        max_predictions_per_seq, masked_lm_prob,
                        do_whole_word_mask):
  """What to mask the records with, from the flags and the records' kind.

  Args:
    masking: the --masking value.
    record_kind: the records' pretraining_records.RecordKind.
    vocab_file: the --vocab_file value (None if not given).
    max_seq_length, max_predictions_per_seq, masked_lm_prob,
    do_whole_word_mask: the flags' values.

  Returns:
    A dynamic_masking.MaskingParams, or None to use the records' masks.

  Raises:
    UserError: --masking=static on records without masks, a masked_lm_prob
      the masks cannot follow, or no --vocab_file to draw masks with.
  """
  if record_kind is not pretraining_records.MASKED:
    if masking == pretraining_instances.STATIC:
      raise UserError(
          "--masking=static but the --input_file records are %s: they hold "
          "no masks; drop --masking=static (masks are then drawn in the "
          "input pipeline) or make the records with create_pretraining_data"
          ".py --masking=static" % record_kind.name)
  elif masking != pretraining_instances.DYNAMIC:
    return None
  problem = dynamic_masking.check_masked_lm_prob(
      masked_lm_prob, max_seq_length, max_predictions_per_seq)
  if problem:
    raise UserError(problem)
  if not vocab_file:
    raise UserError(
        "--vocab_file is required to draw masks (%s records%s): the ids of "
        "[CLS], [SEP], [MASK] come from it" % (
            record_kind.name, ", --masking=dynamic"
            if record_kind is pretraining_records.MASKED else ""))
  return dynamic_masking.masking_params_from_vocab(
      pretraining_instances.load_checked_vocab(vocab_file), max_seq_length,
      max_predictions_per_seq, masked_lm_prob, do_whole_word_mask)


def describe_masking(record_kind, masking):
  """One log line: the records' kind and where the masks come from."""
  if masking is None:
    return "input records: %s; training on the masks they hold" % (
        record_kind.description)
  return ("input records: %s; masks drawn in the input pipeline, new every "
          "epoch: masked_lm_prob %g, at most %d per sequence, %s" % (
              record_kind.description, masking.masked_lm_prob,
              masking.max_predictions_per_seq,
              "whole words" if masking.do_whole_word_mask
              else "per wordpiece"))


def validate_flags():
  """Checks flags and inputs before any long work; returns what they load.

  Returns:
    (bert_config, input_files, record kind, masking params or None, N: the
    sequence slots of packed rows or None for unpacked records).
  """
  if not FLAGS.do_train and not FLAGS.do_eval:
    raise UserError("At least one of --do_train or --do_eval must be True")
  shared_flags.require(FLAGS, ("bert_config_file", "input_file",
                               "output_dir"))
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  modeling.check_seq_length_fits(bert_config, FLAGS.max_seq_length)
  for name in ("eval_batch_size", "num_train_steps",
               "max_predictions_per_seq"):
    if getattr(FLAGS, name) < 1:
      raise UserError("--%s must be >= 1, got %d"
                      % (name, getattr(FLAGS, name)))
  if FLAGS.num_warmup_steps < 0:
    raise UserError("--num_warmup_steps must be >= 0")
  if FLAGS.vocab_file:
    tokenization.check_vocab_fits_config(FLAGS.vocab_file,
                                         bert_config.vocab_size)
  input_files = file_patterns.expand_file_patterns(FLAGS.input_file)
  record_kind, max_sequences_per_pack = (
      input_pipeline.check_pretraining_records(
          input_files, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
          vocab_size=bert_config.vocab_size))
  if record_kind is pretraining_records.PACKED:
    if FLAGS.masking == pretraining_instances.DYNAMIC:
      raise UserError(
          "--masking=dynamic but the --input_file rows are packed with their "
          "masks; drop --masking=dynamic, or make the rows with "
          "create_pretraining_data.py --pack_sequences --masking=dynamic")
    masking = None
  else:
    masking = masking_for_records(
        FLAGS.masking, record_kind, FLAGS.vocab_file, FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq, FLAGS.masked_lm_prob,
        FLAGS.do_whole_word_mask)
  return (bert_config, input_files, record_kind, masking,
          max_sequences_per_pack)


def input_fn_maker(max_seq_length, max_predictions_per_seq, record_kind,
                   masking, max_sequences_per_pack, seed, output_dir):
  """The runner's make_input_fn over pretraining records.

  Args:
    max_seq_length, max_predictions_per_seq: S and P of the records.
    record_kind, masking, max_sequences_per_pack: see validate_flags.
    seed: --tf_random_seed: deterministic training input and its masks'
      seed; None: upstream's sloppy, shuffled reading.
    output_dir: where training resumes from (the chief's directory: horovod's
      other ranks keep a scratch one).
  """
  spec = input_pipeline.PretrainingInput(
      max_seq_length, max_predictions_per_seq, record_kind,
      max_sequences_per_pack, masking, masking_seed=seed)

  def make_input_fn(files, mode, global_batch_size, num_replicas):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    return input_pipeline.pretraining_input_fn_builder(
        files, spec, is_training, global_batch_size, num_replicas,
        deterministic=not is_training or seed is not None,
        start_step_fn=(lambda: input_pipeline.checkpoint_step(output_dir))
        if is_training else None)
  return make_input_fn


def main(argv):
  del argv
  (bert_config, input_files, record_kind, masking,
   max_sequences_per_pack) = validate_flags()
  run = runner.prepare(FLAGS, pretraining_task(bert_config))
  logging.info("Input files: %d, first %s", len(input_files), input_files[0])
  if max_sequences_per_pack is not None:
    logging.info("packed records: up to %d sequences per row; "
                 "--train_batch_size counts rows", max_sequences_per_pack)
  logging.info("%s", describe_masking(record_kind, masking))
  runner.run(
      run, input_fn_maker(FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
                          record_kind, masking, max_sequences_per_pack,
                          FLAGS.tf_random_seed, FLAGS.output_dir),
      runner.Schedule(FLAGS.num_train_steps, FLAGS.num_warmup_steps),
      train_files=input_files if FLAGS.do_train else None,
      evaluation=runner.EvalStage(
          files=input_files if FLAGS.do_eval else None,
          batch_size=FLAGS.eval_batch_size, steps=FLAGS.max_eval_steps))


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main))
