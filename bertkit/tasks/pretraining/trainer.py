"""Pretraining as run_pretraining.py asks: the records checked and how they
are masked, the schedule, and the runner's run.

What the records hold decides the input: masked records train on their own
masks, records without masks get masks drawn in the input pipeline
(dynamic_masking.py), packed rows keep theirs; evaluated records get the same
questions whatever the training recipe. The model, its heads and losses
live in task.py.
"""

import dataclasses
from typing import Any, List, Optional

from absl import logging

from bertkit.common import file_patterns
from bertkit.common.errors import UserError
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.tasks.pretraining import options as pretraining_options
import tokenization

# The masking rate of evaluated records without masks of their own: BERT's,
# whatever the training recipe masks, so recipes answer the same questions
# (Wettig et al. train at 30 % and evaluate at 15 %).
EVAL_MASKED_LM_PROB = 0.15


def masking_for_records(masking, record_kind, vocab_file, max_seq_length,
                        max_predictions_per_seq, masked_lm_prob,
                        do_whole_word_mask, flag_name="--input_file",
                        mask_rule=pretraining_instances.UPSTREAM_MASKS):
  """What to mask the records with, from the flags and the records' kind.

  Args:
    masking: the --masking value.
    record_kind: the records' pretraining_records.RecordKind.
    vocab_file: the --vocab_file value (None if not given).
    max_seq_length, max_predictions_per_seq, masked_lm_prob,
    do_whole_word_mask: the flags' values.
    flag_name: the flag naming the records, for the messages.
    mask_rule: --mask_rule, how drawn masks choose and replace tokens.

  Returns:
    A dynamic_masking.MaskingParams, or None to use the records' masks.

  Raises:
    UserError: --masking=static on records without masks, a masked_lm_prob
      the masks cannot follow, or no --vocab_file to draw masks with.
  """
  from bertkit.engine.input import dynamic_masking
  if not pretraining_records.holds_masks(record_kind):
    if masking == pretraining_instances.STATIC:
      raise UserError(
          "--masking=static but the %s records are %s: they hold "
          "no masks; drop --masking=static (masks are then drawn in the "
          "input pipeline) or make the records with create_pretraining_data"
          ".py --masking=static" % (flag_name, record_kind.name))
  elif masking != pretraining_instances.DYNAMIC:
    if mask_rule != pretraining_instances.UPSTREAM_MASKS:
      raise UserError(
          "--mask_rule=%s is a rule of masks drawn in the input pipeline, "
          "but the %s records hold their own; give --masking=dynamic to draw "
          "new ones" % (mask_rule, flag_name))
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
      max_predictions_per_seq, masked_lm_prob, do_whole_word_mask, mask_rule)


def describe_masking(record_kind, masking):
  """One log line: the records' kind and where the masks come from."""
  if masking is None:
    return "input records: %s; training on the masks they hold" % (
        record_kind.description)
  return ("input records: %s; masks drawn in the input pipeline, new every "
          "epoch: masked_lm_prob %g, at most %d per sequence, %s, rule %s" % (
              record_kind.description, masking.masked_lm_prob,
              masking.max_predictions_per_seq,
              "whole words" if masking.do_whole_word_mask
              else "per wordpiece", masking.mask_rule))


@dataclasses.dataclass(frozen=True)
class Checked:
  """What check_inputs found before TensorFlow is imported.

  Attributes:
    input_files: the training records.
    eval_flag: the flag naming the evaluated records: "eval_input_file",
      else "input_file".
    eval_files: the records it names.
  """
  input_files: List[str]
  eval_flag: str
  eval_files: List[str]


@dataclasses.dataclass(frozen=True)
class Plan:
  """What validate found.

  Attributes:
    model: the model's run_directory.Model (config, vocab, casing).
    input_files: the training records.
    train_input: their input_pipeline.PretrainingInput.
    eval_files: the records evaluated, or None: no evaluation.
    eval_input: the evaluated records' input_pipeline.PretrainingInput.
    schedule: the learning-rate schedule, a runner.TrainingSchedule.
  """
  # Any: the modules of these types import TensorFlow, which this one
  # imports only once the flags are checked.
  model: Any
  input_files: List[str]
  train_input: Any
  eval_files: Optional[List[str]]
  eval_input: Any
  schedule: Any


def training_schedule(opts):
  """The runner.TrainingSchedule of a run's steps, warm-up and time budget."""
  from bertkit.engine.loop import runner
  if opts.train_time_budget_hours is not None:
    seconds = opts.train_time_budget_hours * 3600.0
    return runner.TrainingSchedule(
        opts.num_train_steps, 0, time_budget_seconds=seconds,
        warmup_seconds=opts.budget_warmup_proportion * seconds)
  return runner.TrainingSchedule(opts.num_train_steps, opts.warmup_steps)


def training_input(opts, model, input_files):
  """The PretrainingInput of the training records (of `model`, a
  run_directory.Model)."""
  from bertkit.engine.input import input_pipeline
  from bertkit.engine.input import record_checks
  record_kind, max_sequences_per_pack = (
      record_checks.check_pretraining_records(
          input_files, opts.max_seq_length, opts.max_predictions_per_seq,
          vocab_size=model.bert_config.vocab_size))
  if record_kind is pretraining_records.PACKED:
    if opts.masking == pretraining_instances.DYNAMIC:
      raise UserError(
          "--masking=dynamic but the --input_file rows are packed with their "
          "masks; drop --masking=dynamic, or make the rows with "
          "create_pretraining_data.py --pack_sequences --masking=dynamic")
    masking = masking_for_records(
        pretraining_instances.STATIC, record_kind, None, 0, 0, 0.0, False,
        mask_rule=opts.mask_rule)
  else:
    masking = masking_for_records(
        opts.masking, record_kind, model.vocab_file, opts.max_seq_length,
        opts.max_predictions_per_seq, opts.masked_lm_prob,
        opts.do_whole_word_mask, mask_rule=opts.mask_rule)
  return input_pipeline.PretrainingInput(
      opts.max_seq_length, opts.max_predictions_per_seq, record_kind,
      max_sequences_per_pack, masking, masking_seed=opts.run.tf_random_seed)


def evaluation_input(opts, model, eval_files, flag_name):
  """The PretrainingInput of the evaluated records: the same questions
  whatever the training recipe.

  Masked records keep their own masks (and their own
  max_predictions_per_seq); records without masks get masks drawn at
  EVAL_MASKED_LM_PROB, per wordpiece, with the eval seed, once.
  """
  from bertkit.engine.input import input_pipeline
  from bertkit.engine.input import record_checks
  predictions = record_checks.predictions_per_record(eval_files[0])
  if predictions is None:
    predictions = max(1, int(round(EVAL_MASKED_LM_PROB *
                                   opts.max_seq_length)))
  record_kind, max_sequences_per_pack = (
      record_checks.check_pretraining_records(
          eval_files, opts.max_seq_length, predictions,
          vocab_size=model.bert_config.vocab_size, flag_name=flag_name))
  masking = masking_for_records(
      pretraining_options.MASKING_AUTO, record_kind, model.vocab_file,
      opts.max_seq_length, predictions, EVAL_MASKED_LM_PROB, False,
      flag_name)
  return input_pipeline.PretrainingInput(
      opts.max_seq_length, predictions, record_kind,
      max_sequences_per_pack, masking)


def check_inputs(opts):
  """The checks that need no TensorFlow, made before it is imported: the
  files named and the input globs.

  Returns:
    A Checked.
  """
  file_patterns.check_paths(opts)
  input_files = file_patterns.expand_file_patterns(opts.input_file)
  # Built whatever the options: a TF_CONFIG cluster's train_and_evaluate
  # is handed an eval input_fn even when nothing evaluates.
  flag_name = "eval_input_file" if opts.eval_input_file else "input_file"
  eval_files = file_patterns.expand_file_patterns(
      getattr(opts, flag_name), flag_name)
  return Checked(input_files, flag_name, eval_files)


def validate(opts, checked):
  """Checks the model, the vocab and the records (with TensorFlow) before
  any long work; returns what they load.

  Args:
    opts: the PretrainingOptions.
    checked: what check_inputs returned.

  Returns:
    A Plan.
  """
  from bertkit.engine.checkpointing import run_directory
  import modeling
  model = run_directory.resolve(
      opts.run.init_checkpoint, opts.bert_config_file, opts.vocab_file,
      opts.do_lower_case, output_dir=opts.run.output_dir)
  bert_config = model.bert_config
  # The description written is the config trained with: the overrides in.
  for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
    if getattr(opts, name) is not None:
      setattr(bert_config, name, getattr(opts, name))
  modeling.check_seq_length_fits(bert_config, opts.max_seq_length)
  if model.vocab_file:
    tokenization.check_vocab_fits_config(model.vocab_file,
                                         bert_config.vocab_size)
  schedule = training_schedule(opts)
  train_input = training_input(opts, model, checked.input_files)
  flag_name = checked.eval_flag
  # Records of either next-sentence kind evaluate either model: the
  # masked-LM metrics always, the next-sentence ones where both have it
  # (pretraining.eval_outputs).
  eval_input = evaluation_input(opts, model, checked.eval_files,
                                "--" + flag_name)
  return Plan(model, checked.input_files, train_input,
              checked.eval_files if opts.evaluate else None, eval_input,
              schedule)


def input_fn_maker(train_input, eval_input, seed, output_dir):
  """The runner's make_input_fn over pretraining records.

  Args:
    train_input, eval_input: the PretrainingInputs of training and of
      evaluation (see validate).
    seed: --tf_random_seed: deterministic training input and its masks'
      seed; None: upstream's sloppy, shuffled reading.
    output_dir: where training resumes from (the chief's directory: horovod's
      other ranks keep a scratch one).
  """

  import tensorflow.compat.v1 as tf
  from bertkit.engine.input import input_pipeline

  def make_input_fn(files, mode, global_batch_size, num_replicas):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    return input_pipeline.pretraining_input_fn_builder(
        files, train_input if is_training else eval_input, is_training,
        global_batch_size, num_replicas,
        deterministic=not is_training or seed is not None,
        start_step_fn=(lambda: input_pipeline.checkpoint_step(output_dir))
        if is_training else None)
  return make_input_fn


def run(opts):
  """Pretrains (and evaluates) as `opts` say.

  Args:
    opts: a PretrainingOptions.

  Raises:
    UserError: inputs that do not fit the options or the machine.
    errors.TrainingFailed, errors.TrainingStopped: see runner.run.
  """
  checked = check_inputs(opts)
  from bertkit.engine.loop import runner
  from bertkit.engine.distributed import distribution
  distribution.use_slurm_cluster(opts.run.distribution)  # before the strategy
  from bertkit.tasks.pretraining.task import pretraining_model_spec
  plan = validate(opts, checked)
  train_input = plan.train_input
  prepared = runner.prepare(opts.run, pretraining_model_spec(
      plan.model.bert_config,
      pretraining_records.has_next_sentence(train_input.record_kind),
      opts.init_distribution), plan.model)
  logging.info("Input files: %d, first %s", len(plan.input_files),
               plan.input_files[0])
  if train_input.max_sequences_per_pack is not None:
    logging.info("packed records: up to %d sequences per row; "
                 "--train_batch_size counts rows",
                 train_input.max_sequences_per_pack)
  logging.info("%s", describe_masking(train_input.record_kind,
                                      train_input.masking))
  if plan.eval_files and opts.eval_input_file:
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
      prepared, input_fn_maker(train_input, plan.eval_input,
                               opts.run.tf_random_seed, opts.run.output_dir),
      plan.schedule,
      train_files=plan.input_files if opts.do_train else None,
      evaluation=runner.EvalStage(
          files=plan.eval_files, batch_size=opts.eval_batch_size,
          steps=opts.max_eval_steps, during_training=True,
          every_n_steps=opts.eval_every_n_steps,
          target=opts.target_masked_lm_accuracy))


