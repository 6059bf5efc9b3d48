"""What every fine-tuning program is told besides its task's options."""

import dataclasses
from typing import Optional

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.common.option_fields import (AT_LEAST_ONE, FRACTION, POSITIVE,
                                          option)

# The stages a fine-tuning program may have, in the order they run.
STAGES = ("do_train", "do_eval", "do_predict")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FineTuningOptions(options.TrainingOptions):
  """What the fine-tuning programs share (run_classifier, run_squad, run_ner,
  run_swag); each task's options add its own. A task that evaluates its dev
  set adds options.EvaluationOptions."""
  max_seq_length: int = options.max_seq_length_option(128, low=3)
  do_predict: bool = option(
      False, "Whether to predict the test set (SQuAD: --predict_file, "
      "evaluated too).")
  predict_batch_size: int = option(options.UPSTREAM_EVAL_BATCH_SIZE,
                                   "Total batch size for predict.",
                                   **AT_LEAST_ONE)
  num_train_epochs: float = option(3.0, "Epochs of training.", **POSITIVE)
  warmup_proportion: float = option(
      0.1, "Fraction of the training steps with linear warm-up.", **FRACTION)

  def __post_init__(self):
    if not any(getattr(self, stage) for stage in self.stages):
      flags = ["--" + stage for stage in self.stages]
      raise UserError("At least one of %s or %s must be True" % (
          ", ".join(flags[:-1]), flags[-1]))
    option_fields.check_fields(self)

  @property
  def stages(self):
    """The --do_* options this program has."""
    return tuple(stage for stage in STAGES if hasattr(self, stage))

  @property
  def evaluation_stages(self):
    """The --do_* options besides --do_train, as a message names them
    ("--do_eval/--do_predict")."""
    return "/".join("--" + stage for stage in self.stages
                    if stage != "do_train")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TeacherOptions:
  """A student trained on a teacher's outputs (fine_tuning/distillation.py,
  docs/distillation.md): what every task that distills adds (run_rerank's
  Margin-MSE; with DistillationOptions, the classifying tasks)."""
  teacher_outputs: Optional[str] = option(
      None, "Distill: the predict_logits.jsonl a teacher's --do_predict "
      "wrote over the training file; its rows must be that file's "
      "examples, in its order.", path=option_fields.FILE,
      unset="no distillation: the labels alone")
  distillation_weight: float = option(
      1.0, "With --teacher_outputs: the teacher's share of a labelled "
      "example's loss, (1 - w) x label loss + w x teacher loss; unlabelled "
      "examples learn from the teacher alone. 0 trains as without a "
      "teacher.", **FRACTION)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DistillationOptions(TeacherOptions):
  """Any file of the task's format, and a student trained on a teacher's
  logits at a temperature: what the tasks that classify and distill
  (run_classifier, run_ner, run_swag) add."""
  train_file: Optional[str] = option(
      None, "--do_train trains on this file of the task's format instead of "
      "--data_dir's training file; with --teacher_outputs its examples may "
      "be unlabelled (a transfer set).", path=option_fields.FILE,
      unset="--data_dir's")
  predict_file: Optional[str] = option(
      None, "--do_predict predicts this file of the task's format, labelled "
      "or not (e.g. a transfer set), instead of --data_dir's test file. "
      "Every prediction also writes predict_logits.jsonl: each example's "
      "raw logits in full precision, a student's --teacher_outputs.",
      path=option_fields.FILE, unset="--data_dir's")
  temperature: float = option(
      1.0, "With --teacher_outputs: the softmax temperature T of the "
      "teacher's and the student's distributions (loss x T^2, Hinton et "
      "al.); a regression head learns the teacher's score by squared "
      "error, whatever T.", **POSITIVE)
