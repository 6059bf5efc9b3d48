"""What run_pretraining.py is told, besides the runner's options."""

import dataclasses
from typing import Optional

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.common.option_fields import (AT_LEAST_ONE, NOT_NEGATIVE,
                                          POSITIVE, PROBABILITY, REQUIRED,
                                          option)
from bertkit.data import pretraining_instances
from bertkit.data import shared_options

# --masking: the records' own masks (create_pretraining_data.py
# --masking=static), masks drawn in the input pipeline every epoch, or auto:
# whichever the records need.
STATIC = pretraining_instances.STATIC
DYNAMIC = pretraining_instances.DYNAMIC
MASKING_AUTO = "auto"
MASKING_CHOICES = (MASKING_AUTO, STATIC, DYNAMIC)
# Warm-up steps when neither --num_warmup_steps nor --warmup_proportion is
# given: upstream's flag default.
UPSTREAM_WARMUP_STEPS = 10000
# Warm-up share of a time budget when --warmup_proportion is not given
# (upstream's 10k of 1M steps).
DEFAULT_BUDGET_WARMUP_PROPORTION = 0.01


@dataclasses.dataclass(frozen=True, kw_only=True)
class PretrainingOptions(options.TrainingOptions, options.EvaluationOptions,
                         shared_options.MaskingRate):
  """What run_pretraining.py is told. Drawn masks (--masking=dynamic) follow
  the masking rate; static records carry their own masks. --do_lower_case is
  not read by training: it is recorded in --output_dir's description
  (engine/checkpointing/run_directory.py) for the programs that read the
  checkpoints."""
  input_file: str = option(REQUIRED, "Input TFRecord file(s): "
                           "comma-separated globs.")
  masking: str = option(
      MASKING_AUTO, "auto: the records' own masks (create_pretraining_data.py "
      "--masking=static), or masks drawn in the input pipeline, anew every "
      "epoch, for records without masks (--masking=dynamic). static: the "
      "records' own masks only. dynamic: draw masks for either kind (masked "
      "records get their original tokens back and new masks).",
      choices=MASKING_CHOICES)
  mask_rule: str = option(
      pretraining_instances.UPSTREAM_MASKS, "How masks drawn in the input "
      "pipeline choose and replace tokens: upstream (a fixed count per "
      "sequence, min(P, round(length * masked_lm_prob)); 80 % [MASK], 10 % "
      "kept, 10 % a random token), per_token (each token on its own with "
      "probability masked_lm_prob, as Hugging Face's collator; 80/10/10) or "
      "mask_only (upstream's count, every chosen token [MASK]).",
      choices=pretraining_instances.MASK_RULES)
  max_seq_length: int = options.max_seq_length_option(128)
  max_eval_steps: int = option(100, "Maximum number of eval steps.",
                               **AT_LEAST_ONE)
  num_train_steps: int = option(100000, "Number of training steps.",
                                **AT_LEAST_ONE)
  num_warmup_steps: Optional[int] = option(
      None, "Number of warm-up steps; wins over --warmup_proportion when "
      "given.", unset="--warmup_proportion of the run when given, else %d "
      "(upstream's)" % UPSTREAM_WARMUP_STEPS, **NOT_NEGATIVE)
  warmup_proportion: Optional[float] = option(
      None, "Warm-up as a share of --num_train_steps (or of "
      "--train_time_budget_hours), so that a recipe's warm-up scales with "
      "the run.", unset="--num_warmup_steps; with a time budget %g" %
      DEFAULT_BUDGET_WARMUP_PROPORTION, **PROBABILITY)
  train_time_budget_hours: Optional[float] = option(
      None, "Train for this much training time (evaluation left out; a "
      "resumed run continues the clock): the learning-rate schedule runs "
      "over it and training stops when it is spent (or at "
      "--num_train_steps).", unset="no budget: --num_train_steps",
      **POSITIVE)
  eval_input_file: Optional[str] = option(
      None, "Held-out records to evaluate (comma-separated globs). Their "
      "masks do not depend on the training flags: masked records keep "
      "theirs, others get masks drawn once at 15% with a fixed seed.",
      unset="--input_file, as upstream")
  eval_every_n_steps: Optional[int] = option(
      None, "Evaluate --max_eval_steps batches every N global steps during "
      "training and at the end, inside the training session; each "
      "evaluation is a line of output_dir/eval_history.jsonl.",
      unset="after training only", **AT_LEAST_ONE)
  target_masked_lm_accuracy: Optional[float] = option(
      None, "Stop training at the first evaluation whose held-out "
      "masked_lm_accuracy reaches this (0 < A <= 1); "
      "output_dir/time_to_target.json says when.", unset="no target",
      low=0, high=1, low_open=True)
  hidden_dropout_prob: Optional[float] = option(
      None, "Overrides the config's hidden_dropout_prob.",
      unset="the config's", **PROBABILITY)
  attention_probs_dropout_prob: Optional[float] = option(
      None, "Overrides the config's attention_probs_dropout_prob.",
      unset="the config's", **PROBABILITY)
  init_distribution: str = option(
      options.TRUNCATED_NORMAL, "What weights not loaded from "
      "--init_checkpoint are drawn from, with the config's initializer_range "
      "as the standard deviation: truncated_normal (upstream's, cut at two "
      "standard deviations) or normal (Hugging Face's).",
      choices=options.INIT_DISTRIBUTIONS)

  def __post_init__(self):
    if not self.do_train and not self.evaluate:
      raise UserError("At least one of --do_train or --do_eval must be True")
    option_fields.check_fields(self)
    if (self.mask_rule == pretraining_instances.PER_TOKEN_MASKS and
        self.do_whole_word_mask):
      raise UserError("--mask_rule=per_token draws wordpieces one by one; "
                      "--do_whole_word_mask takes upstream's rule (drop "
                      "--mask_rule or --do_whole_word_mask)")
    if (self.train_time_budget_hours is not None and
        self.num_warmup_steps is not None):
      raise UserError(
          "--num_warmup_steps counts steps but --train_time_budget_hours "
          "runs the schedule over training time; give the warm-up as "
          "--warmup_proportion of the budget")

  @property
  def evaluate(self):
    """Whether the run evaluates (after training, or during it)."""
    return bool(self.do_eval or self.eval_input_file or
                self.eval_every_n_steps or self.target_masked_lm_accuracy)

  @property
  def warmup_steps(self):
    """The warm-up steps of a run over steps: --num_warmup_steps when
    given, else --warmup_proportion of the steps, else upstream's."""
    if self.num_warmup_steps is not None:
      return self.num_warmup_steps
    if self.warmup_proportion is not None:
      return int(round(self.warmup_proportion * self.num_train_steps))
    return UPSTREAM_WARMUP_STEPS

  @property
  def budget_warmup_proportion(self):
    """The warm-up share of a time budget."""
    if self.warmup_proportion is None:
      return DEFAULT_BUDGET_WARMUP_PROPORTION
    return self.warmup_proportion
