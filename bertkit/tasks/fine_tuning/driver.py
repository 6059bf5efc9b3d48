# coding=utf-8
"""The one driver of every fine-tuning program: run_classifier.py (and
run_glue.py through it), run_squad.py, run_ner.py, run_swag.py.

A task describes itself once, as a `FineTuningTask` (its folder's task.py):
its head, how it reads its files, the task_contract.Task it trains, the
records it writes, its input function, its evaluation and what it does with its
predictions. A program checks what needs no TensorFlow (`check_inputs`),
then hands its task and options to `run`, which holds the rules every task
follows, once:

  * the named files and directories exist (before TensorFlow is imported);
  * the model's config, vocab and casing fit the options (run_directory);
  * every input is read and checked before anything is written;
  * evaluating or predicting without --do_train needs weights holding the
    task's head: a checkpoint in --output_dir, else --init_checkpoint
    (chance-level figures that look real are refused);
  * the training steps, as upstream counts them, counted before anything is
    written (examples that make no whole step are refused with the output
    directory untouched), and one line saying so;
  * the engine, the output directory's description, the records, train /
    evaluate / predict (engine/runner.py);
  * distillation (distillation.py): a teacher's outputs (--teacher_outputs)
    are read and checked against the training file before anything is
    written, and every prediction writes the raw logits of the examples
    predicted (teacher_outputs.py), a student's teacher outputs.

This module imports TensorFlow only inside `run`, after `check_inputs`.
"""

import dataclasses
import os
from typing import Any, Dict, List

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import file_patterns
from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.tasks.fine_tuning import teacher_outputs


@dataclasses.dataclass(frozen=True)
class TrainingSet:
  """What --do_train trains on, counted before anything is written.

  Attributes:
    count: the number the training steps are counted from (upstream's
      examples, which for some tasks are not the records: NER's windows,
      packed rows, SQuAD's questions).
    counted: what `count` counts, plural, for the messages ("examples",
      "windows").
    computed: what counting it computed that write_records writes (NER's
      windows, the packed rows), or None.
  """
  count: int
  counted: str = "examples"
  computed: Any = None


@dataclasses.dataclass(frozen=True)
class Records:
  """The records a task wrote for a run.

  Attributes:
    files: {split: [record file]}: "train" is trained on; the task's
      evaluation and prediction read the others.
    train_description: what is trained on, for the log ("120 sentences in
      131 windows").
    details: what else the task's later stages need of the writing (the
      windows of each split, the records' counts).
  """
  files: Dict[str, List[str]]
  train_description: str = ""
  details: Any = None


class FineTuningTask:
  """What one fine-tuning task tells the driver; its folder's task.py makes
  the one instance (`TASK`) its program hands to `run`.

  Methods receive the run's options (the task's options dataclass) and what
  earlier methods returned; none keeps state.

  Attributes:
    head: the common.heads.Head it trains.
  """
  head = None

  def read(self, opts):
    """Reads and checks every input file the --do_* options need.

    Returns:
      The task's inputs (examples of each split, labels, ...).

    Raises:
      UserError: a file is bad or missing.
    """
    raise NotImplementedError

  def runner_task(self, bert_config, inputs, distill):
    """The task_contract.Task of the model with this task's head; with a
    distillation.Distillation, its training loss is per_example_losses'."""
    raise NotImplementedError

  def training_set(self, opts, inputs, tokenizer):
    """The TrainingSet of --do_train, counted without writing anything (the
    driver refuses one that makes no whole step before the output
    directory is touched)."""
    raise NotImplementedError

  def write_records(self, opts, inputs, tokenizer, is_chief, training,
                    distill):
    """Writes the records of each split read (and, on the chief, what else
    the output directory keeps, e.g. labels.txt); returns the Records.

    `training` is the training_set (None without --do_train): its
    `computed` part is what the train split's records are made of. With a
    Distillation, each training record also holds its teacher's logits
    (distillation.record_features)."""
    raise NotImplementedError

  def input_fn_maker(self, opts, inputs, distill):
    """The runner's make_input_fn over the records (with a Distillation,
    their teacher features too: distillation.feature_spec)."""
    raise NotImplementedError

  def example_rows(self, inputs, split):
    """[(id, shape of its logits)] of each example of `split` read, in
    file order: what a teacher's outputs over that file hold
    (teacher_outputs.py). The base: the task does not distill."""
    del inputs, split
    return None

  def predicted_rows(self, inputs, records, predictions):
    """The teacher_outputs rows ({"id", "logits", ...}) of the examples
    --do_predict read, in file order, from the prediction stage's dicts;
    None: the task writes none (the base)."""
    del inputs, records, predictions
    return None

  def evaluation(self, opts, inputs, records):
    """The runner.EvalStage of the dev set; none by default (tasks that
    score their dev set from predictions)."""
    del opts, inputs, records
    from bertkit.engine import runner  # pylint: disable=g-import-not-at-top
    return runner.EvalStage()

  def prediction(self, opts, inputs, records, model):
    """The runner.PredictStage: what is predicted and what becomes of it."""
    raise NotImplementedError

  def schedule(self, opts, training):
    """The runner.TrainingSchedule of the TrainingSet (None without
    --do_train): upstream's steps (training_schedule) by default; a task
    whose training is a number of steps says so here."""
    return training_schedule(opts, training)

  def finish(self, opts, inputs, records, is_chief):
    """After the run: what is written from all of its results."""


# The class names of a labelled head, in output order, one a line, in the
# output directory of the run that trained it (export_checkpoint.py names the
# exported model's classes from it).
LABELS_FILE = "labels.txt"


def write_labels(output_dir, label_list):
  """Writes labels.txt into output_dir."""
  with atomic_io.atomic_open(os.path.join(output_dir, LABELS_FILE)) as f:
    f.write("".join(label + "\n" for label in label_list))


def read_labels(directory):
  """The labels.txt a training output directory holds, or None."""
  path = os.path.join(directory, LABELS_FILE)
  if not atomic_io.exists(path):
    return None
  with atomic_io.open_file(path, "r") as f:
    return f.read().splitlines()


def record_file(output_dir, split):
  """The records' file of a split in --output_dir, as upstream names them:
  train.tf_record, eval.tf_record (dev), predict.tf_record (test), and
  eval_X / predict_X.tf_record of a further dev or test set X."""
  names = {"train": "train", "dev": "eval", "test": "predict"}
  name = names.get(split) or "%s_%s" % (
      "eval" if split.startswith("dev") else "predict", split)
  return os.path.join(output_dir, name + ".tf_record")


def stage_splits(opts):
  """The splits --do_train, --do_eval and --do_predict read, in that order:
  train, dev, test."""
  return [split for split, stage in (("train", "do_train"),
                                     ("dev", "do_eval"),
                                     ("test", "do_predict"))
          if getattr(opts, stage, False)]


def predict_dev_and_test(opts, records, described, use_predictions):
  """The runner.PredictStage of a task that scores its dev and test sets
  from one prediction pass over both (NER, SWAG), at --predict_batch_size.

  Args:
    opts: the run's options.
    records: the task's Records.
    described: {split: what it holds, for the log ("12 examples")}.
    use_predictions: the stage's use_predictions (on the chief).
  """
  from bertkit.engine import runner  # pylint: disable=g-import-not-at-top
  predicted = [split for split in ("dev", "test") if split in records.files]
  return runner.PredictStage(
      files=[f for split in predicted for f in records.files[split]] or None,
      batch_size=opts.predict_batch_size,
      message="***** Predict: %s, batch %d *****" % (
          ", ".join("%s %s" % (split, described[split])
                    for split in predicted), opts.predict_batch_size),
      use_predictions=use_predictions)


def check_inputs(opts):
  """The checks of a fine-tuning run that need no TensorFlow: the files and
  directories its options name (option_fields.FILE, DIRECTORY), and that a
  teacher's outputs have a training run to teach."""
  file_patterns.check_paths(opts)
  if getattr(opts, "teacher_outputs", None) and not opts.do_train:
    raise UserError("--teacher_outputs=%s is what --do_train learns from; "
                    "give --do_train, or leave it out" % opts.teacher_outputs)


def run(task, opts):
  """Fine-tunes, evaluates and predicts `task` as `opts` say.

  Args:
    task: the task's FineTuningTask.
    opts: its options (a fine_tuning.options.FineTuningOptions).

  Raises:
    UserError: an input, option or model that does not fit.
    errors.TrainingFailed, errors.TrainingStopped: see runner.run.
  """
  check_inputs(opts)
  # pylint: disable=g-import-not-at-top
  from bertkit.engine import distribution
  from bertkit.engine import runner
  import tokenization
  distribution.use_slurm_cluster(opts.run.distribution)  # before the strategy
  model = load_checked_model(opts)
  inputs = task.read(opts)
  distill = read_distillation(task, opts, inputs)
  check_weights_hold_head(opts, task.head)
  tokenizer = tokenization.FullTokenizer(model.vocab_file,
                                         model.do_lower_case)
  training = task.training_set(opts, inputs, tokenizer) if opts.do_train \
      else None
  schedule = task.schedule(opts, training)
  # Nothing is written before this line.
  prepared = runner.prepare(opts.run, task.runner_task(
      model.bert_config, inputs, distill), model)
  records = task.write_records(opts, inputs, tokenizer,
                               prepared.setup.is_chief, training, distill)
  if training is not None:
    logging.info("***** Training: %s, global batch %d, %d steps *****",
                 records.train_description, opts.run.train_batch_size,
                 schedule.num_train_steps)
  runner.run(prepared, task.input_fn_maker(opts, inputs, distill), schedule,
             train_files=records.files.get("train"),
             evaluation=task.evaluation(opts, inputs, records),
             prediction=writing_logits(
                 task, opts, inputs, records,
                 task.prediction(opts, inputs, records, model)))
  task.finish(opts, inputs, records, prepared.setup.is_chief)


def read_distillation(task, opts, inputs):
  """The run's distillation.Distillation, its teacher's outputs read and
  checked against the training examples; None without --teacher_outputs.

  Raises:
    UserError: the outputs do not describe the training file's examples
      (teacher_outputs.read).
  """
  if not getattr(opts, "teacher_outputs", None):
    return None
  # pylint: disable-next=g-import-not-at-top
  from bertkit.tasks.fine_tuning import distillation
  teacher = teacher_outputs.read(opts.teacher_outputs,
                                 task.example_rows(inputs, "train"))
  # Margin-MSE (run_rerank.py) compares scores: no temperature.
  temperature = getattr(opts, "temperature", None)
  logging.info("Distilling from %s: %d examples' logits, %s, weight %g on "
               "labelled examples", opts.teacher_outputs, len(teacher),
               "Margin-MSE" if temperature is None else
               "temperature %g" % temperature, opts.distillation_weight)
  return distillation.Distillation(temperature or 1.0,
                                   opts.distillation_weight, teacher)


def writing_logits(task, opts, inputs, records, stage):
  """`stage` (a runner.PredictStage) also writing teacher_outputs.FILE_NAME
  into --output_dir (on the chief): the raw logits of the examples
  --do_predict read, when the task has them (predicted_rows)."""
  if not stage.files or "test" not in records.files:
    return stage
  use_predictions = stage.use_predictions

  def use(predictions):
    figures = use_predictions(predictions) if use_predictions else None
    rows = task.predicted_rows(inputs, records, predictions)
    if rows is not None:
      teacher_outputs.write(os.path.join(opts.run.output_dir,
                                         teacher_outputs.FILE_NAME), rows)
    return figures

  return dataclasses.replace(stage, use_predictions=use)


def load_checked_model(opts):
  """The model of a fine-tuning run, once the sequence length and the vocab
  fit it.

  Its config, vocab and casing are the flags', or what the --init_checkpoint
  directory (or the --output_dir resumed) says (run_directory.resolve).

  Returns:
    A run_directory.Model whose vocab_file is set.

  Raises:
    UserError: no config or vocab anywhere, a flag that disagrees with the
      directory, or a sequence length or vocab the model cannot take.
  """
  # pylint: disable=g-import-not-at-top
  from bertkit.engine import run_directory
  import modeling
  import tokenization
  model = run_directory.resolve(
      opts.run.init_checkpoint, opts.bert_config_file, opts.vocab_file,
      opts.do_lower_case, output_dir=opts.run.output_dir)
  modeling.check_seq_length_fits(model.bert_config, opts.max_seq_length)
  tokenization.check_vocab_fits_config(model.require_vocab(),
                                       model.bert_config.vocab_size)
  return model


def check_weights_hold_head(opts, head):
  """Evaluating or predicting without training needs weights with `head`.

  Those weights are --output_dir's latest checkpoint when it has one (the
  Estimator restores it), else --init_checkpoint's (upstream predicts from
  a fine-tuned --init_checkpoint; run_glue.py's AX from MNLI's). Without
  the head, the head's variables would be drawn at random and the figures
  would be chance that looks like a result.

  Raises:
    UserError: there are no such weights, or they lack the head; the line
      names the checkpoint and the variables missing.
  """
  if opts.do_train:
    return
  # pylint: disable=g-import-not-at-top
  import tensorflow.compat.v1 as tf
  from bertkit.engine import checkpoints
  stages = opts.evaluation_stages
  path = shown = tf.train.latest_checkpoint(opts.run.output_dir)
  if not path and opts.run.init_checkpoint:
    path = checkpoints.resolve_init_checkpoint(opts.run.init_checkpoint)
    shown = "--init_checkpoint %s" % opts.run.init_checkpoint
  if not path:
    raise UserError("%s without --do_train need%s a fine-tuned checkpoint in "
                    "--output_dir %s; there is none" % (
                        stages, "" if "/" in stages else "s",
                        opts.run.output_dir))
  missing = heads.missing_variables(
      head, dict(tf.train.list_variables(path)))
  if missing:
    raise UserError(
        "%s without --do_train: %s has no %s head (%s %s missing), so its "
        "figures would be chance; fine-tune it with %s --do_train first" % (
            stages, shown, head.name, ", ".join(missing),
            "is" if len(missing) == 1 else "are", head.program))


def training_schedule(opts, training):
  """The runner.TrainingSchedule of a fine-tuning run: upstream's steps and
  warm-up; none without --do_train (`training` None).

  Args:
    opts: the run's options.
    training: the task's TrainingSet, or None.

  Raises:
    UserError: the training set makes no whole step.
  """
  from bertkit.engine import runner  # pylint: disable=g-import-not-at-top
  if training is None:
    return runner.TrainingSchedule(0, 0)
  num_train_steps = int(training.count / opts.run.train_batch_size *
                        opts.num_train_epochs)
  if num_train_steps < 1:
    raise UserError("%d training %s at --train_batch_size=%d for "
                    "--num_train_epochs=%s make no whole step; raise "
                    "--num_train_epochs or lower --train_batch_size" % (
                        training.count, training.counted,
                        opts.run.train_batch_size, opts.num_train_epochs))
  return runner.TrainingSchedule(num_train_steps,
                                 int(num_train_steps *
                                     opts.warmup_proportion))
