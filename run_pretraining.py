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

import collections
import sys

from absl import app
from absl import flags
from absl import logging

from bertkit.common import console
from bertkit.common import cpu_kernels
from bertkit.common.errors import UserError, main_with_user_errors, parse_flags
from bertkit.common import file_patterns
from bertkit.common import shared_flags
from bertkit.common import training_flags
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
import tokenization

# Nothing above imports TensorFlow: the flags and files are checked
# (check_flags) before it is, in the functions that need it, so that a bad
# flag is refused at once. Before it is imported: its C++ runtime reads its
# log level and its choice of CPU kernels then.
console.quiet_native_logs(sys.argv)
cpu_kernels.prefer_onednn()
# pylint: disable=g-import-not-at-top

# Upstream's API of this module: google-research/bert's run_pretraining.py
# defines these names, and code written for it imports them from here
# (from bertkit/tasks/pretraining.py, on first use: it imports TensorFlow).
UPSTREAM_API = ("gather_indexes", "get_masked_lm_output",
                "get_next_sentence_output", "model_fn_builder")


def __getattr__(name):
  if name not in UPSTREAM_API:
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
  from bertkit.tasks import pretraining  # pylint: disable=g-import-not-at-top
  return getattr(pretraining, name)


FLAGS = flags.FLAGS

# --masking: create_pretraining_data's two kinds, or whichever the records
# need.
MASKING_AUTO = "auto"
# The masking rate of evaluated records without masks of their own: BERT's,
# whatever the training recipe masks, so recipes answer the same questions
# (Wettig et al. train at 30 % and evaluate at 15 %).
EVAL_MASKED_LM_PROB = 0.15
# Warm-up share of a time budget when --warmup_proportion is not given.
DEFAULT_BUDGET_WARMUP_PROPORTION = 0.01


def define_flags():
  """Upstream's pretraining flags beyond the runner's
  (training_flags.define_runner_flags).

  Called by the program only: importing this module (e.g. for upstream's
  names above) defines no flags.
  """
  training_flags.define_runner_flags()
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
  flags.DEFINE_integer("num_warmup_steps", 10000,
                       "Number of warm-up steps; wins over "
                       "--warmup_proportion when given.")
  flags.DEFINE_float("warmup_proportion", None,
                     "Warm-up as a share of --num_train_steps (or of "
                     "--train_time_budget_hours), so that a recipe's warm-up "
                     "scales with the run.")
  flags.DEFINE_float("train_time_budget_hours", None,
                     "Train for this much training time (evaluation left "
                     "out; a resumed run continues the clock): the "
                     "learning-rate schedule runs over it and training stops "
                     "when it is spent (or at --num_train_steps).")
  flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")
  flags.DEFINE_string("eval_input_file", None,
                      "Held-out records to evaluate (comma-separated globs); "
                      "without it, --input_file as upstream. Their masks do "
                      "not depend on the training flags: masked records keep "
                      "theirs, others get masks drawn once at 15%% with a "
                      "fixed seed.")
  flags.DEFINE_integer("eval_every_n_steps", None,
                       "Evaluate --max_eval_steps batches every N global "
                       "steps during training and at the end, inside the "
                       "training session; each evaluation is a line of "
                       "output_dir/eval_history.jsonl.")
  flags.DEFINE_float("target_masked_lm_accuracy", None,
                     "Stop training at the first evaluation whose held-out "
                     "masked_lm_accuracy reaches this (0 < A <= 1); "
                     "output_dir/time_to_target.json says when.")
  flags.DEFINE_float("hidden_dropout_prob", None,
                     "Overrides the config's hidden_dropout_prob.")
  flags.DEFINE_float("attention_probs_dropout_prob", None,
                     "Overrides the config's attention_probs_dropout_prob.")


def masking_for_records(masking, record_kind, vocab_file, max_seq_length,
                        max_predictions_per_seq, masked_lm_prob,
                        do_whole_word_mask, flag_name="--input_file"):
  """What to mask the records with, from the flags and the records' kind.

  Args:
    masking: the --masking value.
    record_kind: the records' pretraining_records.RecordKind.
    vocab_file: the --vocab_file value (None if not given).
    max_seq_length, max_predictions_per_seq, masked_lm_prob,
    do_whole_word_mask: the flags' values.
    flag_name: the flag naming the records, for the messages.

  Returns:
    A dynamic_masking.MaskingParams, or None to use the records' masks.

  Raises:
    UserError: --masking=static on records without masks, a masked_lm_prob
      the masks cannot follow, or no --vocab_file to draw masks with.
  """
  from bertkit.engine import dynamic_masking
  if not pretraining_records.holds_masks(record_kind):
    if masking == pretraining_instances.STATIC:
      raise UserError(
          "--masking=static but the %s records are %s: they hold "
          "no masks; drop --masking=static (masks are then drawn in the "
          "input pipeline) or make the records with create_pretraining_data"
          ".py --masking=static" % (flag_name, record_kind.name))
  elif masking != pretraining_instances.DYNAMIC:
    return None
  problem = dynamic_masking.check_masked_lm_prob(
      masked_lm_prob, max_seq_length, max_predictions_per_seq)
  if problem:
    raise UserError(problem)
  if not vocab_file:
    raise UserError(
        "--vocab_file is required to draw masks (%s %s records%s): the ids "
        "of [CLS], [SEP], [MASK] come from it" % (
            flag_name, record_kind.name, ", --masking=dynamic"
            if pretraining_records.holds_masks(record_kind) else ""))
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


# What check_flags found before TensorFlow is imported: whether the run
# evaluates, the training records, and the records evaluated with the flag
# naming them (--eval_input_file, else --input_file).
Checked = collections.namedtuple(
    "Checked", ["evaluate", "input_files", "eval_flag", "eval_files"])

# What validate_flags found: the model's config, the training records and
# their input_pipeline.PretrainingInput, the records evaluated and theirs
# (eval_files None: no evaluation), and the learning-rate schedule.
Plan = collections.namedtuple(
    "Plan", ["bert_config", "input_files", "train_input", "eval_files",
             "eval_input", "schedule"])


def check_ranges():
  """The numeric flags' ranges and combinations, before anything is read."""
  training_flags.check_optimizer_flags(FLAGS)
  for name in ("eval_batch_size", "num_train_steps",
               "max_predictions_per_seq"):
    if getattr(FLAGS, name) < 1:
      raise UserError("--%s must be >= 1, got %d"
                      % (name, getattr(FLAGS, name)))
  if FLAGS.num_warmup_steps < 0:
    raise UserError("--num_warmup_steps must be >= 0")
  if FLAGS.eval_every_n_steps is not None and FLAGS.eval_every_n_steps < 1:
    raise UserError("--eval_every_n_steps must be >= 1, got %d" %
                    FLAGS.eval_every_n_steps)
  target = FLAGS.target_masked_lm_accuracy
  if target is not None and not 0.0 < target <= 1.0:
    raise UserError("--target_masked_lm_accuracy=%r is out of range; "
                    "expected 0 < A <= 1" % target)
  budget = FLAGS.train_time_budget_hours
  if budget is not None and budget <= 0.0:
    raise UserError("--train_time_budget_hours must be > 0, got %r" % budget)
  if budget is not None and FLAGS["num_warmup_steps"].present:
    raise UserError(
        "--num_warmup_steps counts steps but --train_time_budget_hours "
        "runs the schedule over training time; give the warm-up as "
        "--warmup_proportion of the budget")
  for name in ("warmup_proportion", "hidden_dropout_prob",
               "attention_probs_dropout_prob"):
    value = getattr(FLAGS, name)
    if value is not None and not 0.0 <= value < 1.0:
      raise UserError("--%s=%r is out of range; expected 0 <= %s < 1" % (
          name, value, name))


def learning_rate_schedule_of_flags():
  """The runner.Schedule of the step, warm-up and time-budget flags.

  --num_warmup_steps, when given, wins over --warmup_proportion; with
  --train_time_budget_hours (which check_ranges keeps apart from
  --num_warmup_steps) the warm-up is a share of the budget
  (--warmup_proportion, 0.01 if not given: upstream's 10k of 1M steps).
  """
  from bertkit.engine import runner
  if FLAGS.train_time_budget_hours is not None:
    seconds = FLAGS.train_time_budget_hours * 3600.0
    proportion = (DEFAULT_BUDGET_WARMUP_PROPORTION
                  if FLAGS.warmup_proportion is None
                  else FLAGS.warmup_proportion)
    return runner.Schedule(FLAGS.num_train_steps, 0,
                           time_budget_seconds=seconds,
                           warmup_seconds=proportion * seconds)
  warmup_steps = FLAGS.num_warmup_steps
  if (FLAGS.warmup_proportion is not None and
      not FLAGS["num_warmup_steps"].present):
    warmup_steps = int(round(FLAGS.warmup_proportion * FLAGS.num_train_steps))
  return runner.Schedule(FLAGS.num_train_steps, warmup_steps)


def training_input(bert_config, input_files):
  """The PretrainingInput of the training records, from the flags."""
  from bertkit.engine import input_pipeline
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
  return input_pipeline.PretrainingInput(
      FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, record_kind,
      max_sequences_per_pack, masking, masking_seed=FLAGS.tf_random_seed)


def evaluation_input(bert_config, eval_files, flag_name):
  """The PretrainingInput of the evaluated records: the same questions
  whatever the training recipe.

  Masked records keep their own masks (and their own
  max_predictions_per_seq); records without masks get masks drawn at
  EVAL_MASKED_LM_PROB, per wordpiece, with the eval seed, once.
  """
  from bertkit.engine import input_pipeline
  predictions = input_pipeline.predictions_per_record(eval_files[0])
  if predictions is None:
    predictions = max(1, int(round(EVAL_MASKED_LM_PROB *
                                   FLAGS.max_seq_length)))
  record_kind, max_sequences_per_pack = (
      input_pipeline.check_pretraining_records(
          eval_files, FLAGS.max_seq_length, predictions,
          vocab_size=bert_config.vocab_size, flag_name=flag_name))
  masking = masking_for_records(
      MASKING_AUTO, record_kind, FLAGS.vocab_file, FLAGS.max_seq_length,
      predictions, EVAL_MASKED_LM_PROB, False, flag_name)
  return input_pipeline.PretrainingInput(
      FLAGS.max_seq_length, predictions, record_kind,
      max_sequences_per_pack, masking)


def check_flags():
  """The checks that need no TensorFlow, made before it is imported: the
  flags, their ranges, the files named and the input globs.

  Returns:
    A Checked.
  """
  evaluate = bool(FLAGS.do_eval or FLAGS.eval_input_file or
                  FLAGS.eval_every_n_steps or FLAGS.target_masked_lm_accuracy)
  if not FLAGS.do_train and not evaluate:
    raise UserError("At least one of --do_train or --do_eval must be True")
  shared_flags.require(FLAGS, ("input_file", "output_dir"))
  check_ranges()
  shared_flags.check_local_files(FLAGS, ("bert_config_file", "vocab_file"))
  input_files = file_patterns.expand_file_patterns(FLAGS.input_file)
  # Built whatever the flags: a TF_CONFIG cluster's train_and_evaluate
  # is handed an eval input_fn even when nothing evaluates.
  flag_name = "eval_input_file" if FLAGS.eval_input_file else "input_file"
  eval_files = file_patterns.expand_file_patterns(
      getattr(FLAGS, flag_name), flag_name)
  return Checked(evaluate, input_files, flag_name, eval_files)


def validate_flags(checked):
  """Checks the rest of the flags and the inputs (with TensorFlow) before
  any long work; returns what they load.

  Args:
    checked: what check_flags returned.

  Returns:
    A Plan.
  """
  from bertkit.engine import checkpoints
  from bertkit.engine import runner
  import modeling
  bert_config = checkpoints.resolve_bert_config(FLAGS.bert_config_file,
                                                FLAGS.init_checkpoint)
  for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
    if getattr(FLAGS, name) is not None:
      setattr(bert_config, name, getattr(FLAGS, name))
  modeling.check_seq_length_fits(bert_config, FLAGS.max_seq_length)
  if FLAGS.vocab_file:
    tokenization.check_vocab_fits_config(FLAGS.vocab_file,
                                         bert_config.vocab_size)
  schedule = learning_rate_schedule_of_flags()
  train_input = training_input(bert_config, checked.input_files)
  flag_name = checked.eval_flag
  eval_input = evaluation_input(bert_config, checked.eval_files,
                                "--" + flag_name)
  if (pretraining_records.has_next_sentence(eval_input.record_kind) !=
      pretraining_records.has_next_sentence(train_input.record_kind)):
    raise UserError(
        "--%s holds %s but --input_file holds %s: evaluate records made "
        "with the same --next_sentence_prediction as the training ones" % (
            flag_name, eval_input.record_kind.description,
            train_input.record_kind.description))
  return Plan(bert_config, checked.input_files, train_input,
              checked.eval_files if checked.evaluate else None, eval_input,
              schedule)


def input_fn_maker(train_input, eval_input, seed, output_dir):
  """The runner's make_input_fn over pretraining records.

  Args:
    train_input, eval_input: the PretrainingInputs of training and of
      evaluation (see validate_flags).
    seed: --tf_random_seed: deterministic training input and its masks'
      seed; None: upstream's sloppy, shuffled reading.
    output_dir: where training resumes from (the chief's directory: horovod's
      other ranks keep a scratch one).
  """

  import tensorflow.compat.v1 as tf
  from bertkit.engine import input_pipeline

  def make_input_fn(files, mode, global_batch_size, num_replicas):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    return input_pipeline.pretraining_input_fn_builder(
        files, train_input if is_training else eval_input, is_training,
        global_batch_size, num_replicas,
        deterministic=not is_training or seed is not None,
        start_step_fn=(lambda: input_pipeline.checkpoint_step(output_dir))
        if is_training else None)
  return make_input_fn


def main(argv):
  del argv
  checked = check_flags()
  from bertkit.engine import runner
  from bertkit.engine import distribution
  distribution.use_slurm_cluster(FLAGS)  # before the strategy is built
  from bertkit.tasks.pretraining import pretraining_task
  plan = validate_flags(checked)
  train_input = plan.train_input
  run = runner.prepare(FLAGS, pretraining_task(
      plan.bert_config,
      pretraining_records.has_next_sentence(train_input.record_kind)))
  logging.info("Input files: %d, first %s", len(plan.input_files),
               plan.input_files[0])
  if train_input.max_sequences_per_pack is not None:
    logging.info("packed records: up to %d sequences per row; "
                 "--train_batch_size counts rows",
                 train_input.max_sequences_per_pack)
  logging.info("%s", describe_masking(train_input.record_kind,
                                      train_input.masking))
  if plan.eval_files and FLAGS.eval_input_file:
    eval_input = plan.eval_input
    logging.info(
        "held-out evaluation: %d file(s), first %s; %s records, %s",
        len(plan.eval_files), plan.eval_files[0],
        eval_input.record_kind.name,
        "their own masks" if eval_input.masking is None else
        "masks drawn once with a fixed seed: %g, at most %d per sequence" % (
            eval_input.masking.masked_lm_prob,
            eval_input.masking.max_predictions_per_seq))
  runner.run(
      run, input_fn_maker(train_input, plan.eval_input, FLAGS.tf_random_seed,
                          FLAGS.output_dir),
      plan.schedule,
      train_files=plan.input_files if FLAGS.do_train else None,
      evaluation=runner.EvalStage(
          files=plan.eval_files, batch_size=FLAGS.eval_batch_size,
          steps=FLAGS.max_eval_steps, during_training=True,
          every_n_steps=FLAGS.eval_every_n_steps,
          target=FLAGS.target_masked_lm_accuracy))


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main), flags_parser=parse_flags)
