"""What a training run is told: typed options, each checked once.

The programs parse their flags into these frozen dataclasses (the flag-
defining modules build them: common/training_flags.py for the runner's,
each program for its task's) and hand them to the engine, which never sees
absl's flag object. Every field is named as the flag that sets it, so that a
message about a field names the flag a user typed.

Every check lives here, once: a field's range is written beside it
(`ranged`) and `check_fields` applies every range, and refuses NaN and
infinity in every float, when an option is built; rules between fields are
the dataclass's `__post_init__`. Nothing here imports TensorFlow, so a bad
value is refused before it loads and tests build options in-process.
"""

import dataclasses
import math
import typing
from typing import Optional, Tuple

from bertkit.common.errors import UserError

# --distribution_strategy and --all_reduce_alg (engine/distribution.py).
STRATEGIES = ("one_device", "mirrored", "multi_worker", "central_storage",
              "horovod", "byteps")
ALL_REDUCE_ALGS = ("auto", "nccl", "hierarchical_copy", "one_device", "ring")

# BERT's masked LM (Devlin et al. 2018, section 3.1): 15 % of the tokens
# masked, at most 20 per 128-token sequence (upstream's flag defaults).
MASKED_LM_PROB = 0.15
MAX_PREDICTIONS_PER_SEQ = 20
# Upstream's --eval_batch_size (every program) and --predict_batch_size.
UPSTREAM_EVAL_BATCH_SIZE = 8

# --optimizer (engine/optimizers.py).
OPTIMIZERS = ("adamw", "lamb")

# --lr_schedule (engine/lr_schedules.py).
LINEAR = "linear"
WARMUP_STABLE_DECAY = "warmup_stable_decay"
COSINE = "cosine"
SCHEDULES = (LINEAR, WARMUP_STABLE_DECAY, COSINE)
DEFAULT_DECAY_PROPORTION = 0.1

# --init_distribution (modeling.create_initializer): upstream draws every
# weight from a normal truncated at two standard deviations of
# initializer_range, Hugging Face's BERT from the untruncated normal.
TRUNCATED_NORMAL = "truncated_normal"
NORMAL = "normal"
INIT_DISTRIBUTIONS = (TRUNCATED_NORMAL, NORMAL)


@dataclasses.dataclass(frozen=True)
class Range:
  """The values a numeric option takes: low <= value (< when low_open), and
  value <= high (< when high_open); None: no bound on that side."""
  low: Optional[float] = None
  high: Optional[float] = None
  low_open: bool = False
  high_open: bool = False

  def problem(self, name, value):
    """The message for `value` of option `name` outside the range, or None."""
    too_low = self.low is not None and (
        value <= self.low if self.low_open else value < self.low)
    too_high = self.high is not None and (
        value >= self.high if self.high_open else value > self.high)
    if not (too_low or too_high):
      return None
    if self.high is None:
      return "--%s must be %s %s, got %r" % (
          name, ">" if self.low_open else ">=", _number(self.low), value)
    return "--%s=%r is out of range; expected %s%s %s %s%s" % (
        name, value,
        "" if self.low is None else _number(self.low) + " ",
        "" if self.low is None else ("<" if self.low_open else "<="),
        name, "<" if self.high_open else "<=", " " + _number(self.high))


def _number(bound):
  return "%d" % bound if float(bound).is_integer() else "%g" % bound


def ranged(default, **bounds):
  """A dataclass field whose value must lie in Range(**bounds) (None, where
  it is the default, means "not given" and is not checked)."""
  return dataclasses.field(default=default,
                           metadata={"range": Range(**bounds)})


AT_LEAST_ONE = dict(low=1)
NOT_NEGATIVE = dict(low=0)
POSITIVE = dict(low=0, low_open=True)
PROBABILITY = dict(low=0, high=1, high_open=True)  # 0 <= p < 1
FRACTION = dict(low=0, high=1)  # 0 <= f <= 1


def check_fields(options):
  """Refuses a non-finite float and a value outside its field's Range.

  Raises:
    UserError: naming the flag of the first field that is wrong.
  """
  for field in dataclasses.fields(options):
    value = getattr(options, field.name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      continue
    if isinstance(value, float) and not math.isfinite(value):
      raise UserError("--%s=%r is not a finite number" % (field.name, value))
    bounds = field.metadata.get("range")
    problem = bounds and bounds.problem(field.name, value)
    if problem:
      raise UserError(problem)


def _one_of(name, value, choices):
  if value not in choices:
    raise UserError("--%s=%s is not one of %s" % (name, value,
                                                  ", ".join(choices)))


@dataclasses.dataclass(frozen=True)
class DistributionOptions:
  """Where the replicas run (engine/distribution.py decides the plan).

  Attributes:
    distribution_strategy: one of STRATEGIES, or None to decide from the
      machine and the environment (TF_CONFIG, a Slurm job step).
    multi_gpu: use every visible GPU.
    num_gpus: GPUs to use (0: all with multi_gpu, else 1 if any).
    cpu_replicas: N logical CPU devices, one replica each (0: none).
    all_reduce_alg: one of ALL_REDUCE_ALGS.
    collective_timeout_seconds: the longest a collective (and, with several
      processes, a training step) may wait; 0: no limit.
    slurm_port_base: the first port of a Slurm job step's tasks, or None for
      the default of common/slurm_env.py.
  """
  distribution_strategy: Optional[str] = None
  multi_gpu: bool = False
  num_gpus: int = ranged(0, **NOT_NEGATIVE)
  cpu_replicas: int = ranged(0, **NOT_NEGATIVE)
  all_reduce_alg: str = "auto"
  collective_timeout_seconds: int = ranged(600, **NOT_NEGATIVE)
  slurm_port_base: Optional[int] = ranged(None, low=1, high=65535)

  def __post_init__(self):
    check_fields(self)
    if self.distribution_strategy is not None:
      _one_of("distribution_strategy", self.distribution_strategy,
              STRATEGIES)
    _one_of("all_reduce_alg", self.all_reduce_alg, ALL_REDUCE_ALGS)
    if self.cpu_replicas and (self.num_gpus or self.multi_gpu):
      raise UserError("--cpu_replicas cannot be combined with --num_gpus or "
                      "--multi_gpu")


@dataclasses.dataclass(frozen=True)
class PrecisionOptions:
  """What the kernels compute in (training_setup.resolve_precision decides,
  with the machine's facts).

  Attributes:
    use_fp16: mixed float16 with dynamic loss scaling (GPU kernels).
    use_bf16: mixed bfloat16 through oneDNN (CPUs).
    init_loss_scale: use_fp16's first loss scale.
    loss_scale_growth_steps: use_fp16's finite steps before the scale
      doubles.
    use_xla: XLA JIT compilation.
    stop_on_nonfinite_loss: stop at the first non-finite loss (not with
      use_fp16, whose loss scale skips such steps).
  """
  use_fp16: bool = False
  use_bf16: bool = False
  init_loss_scale: int = ranged(2**15, **AT_LEAST_ONE)
  loss_scale_growth_steps: int = ranged(2000, **AT_LEAST_ONE)
  use_xla: bool = False
  stop_on_nonfinite_loss: bool = True

  def __post_init__(self):
    check_fields(self)
    if self.use_fp16 and self.use_bf16:
      raise UserError("--use_bf16 and --use_fp16 are mutually exclusive: "
                      "pass one of them")


@dataclasses.dataclass(frozen=True)
class OptimizerOptions:
  """The update and the learning rate's schedule; defaults are upstream's
  (AdamW without bias correction, weight decay 0.01, betas 0.9 / 0.999,
  epsilon 1e-6, clipping to global norm 1.0, linear decay).

  Attributes:
    learning_rate: the peak learning rate.
    optimizer: one of OPTIMIZERS.
    adam_bias_correction: Adam's bias correction (optimizer adamw).
    lamb_bias_correction: the same for optimizer lamb.
    adam_beta_1, adam_beta_2, adam_epsilon: the moments' decays and the
      epsilon added to the second moment's root.
    weight_decay_rate: decoupled weight decay (not LayerNorm nor biases).
    clip_norm: the global norm gradients are clipped to; 0: no clipping.
    lr_schedule: one of SCHEDULES, after the linear warm-up.
    lr_decay_proportion: warmup_stable_decay's final decay share.
    num_accumulation_steps: micro-batches per update.
  """
  learning_rate: float = ranged(5e-5, **NOT_NEGATIVE)
  optimizer: str = "adamw"
  adam_bias_correction: bool = False
  lamb_bias_correction: bool = False
  adam_beta_1: float = ranged(0.9, **PROBABILITY)
  adam_beta_2: float = ranged(0.999, **PROBABILITY)
  adam_epsilon: float = ranged(1e-6, **POSITIVE)
  weight_decay_rate: float = ranged(0.01, **NOT_NEGATIVE)
  clip_norm: float = ranged(1.0, **NOT_NEGATIVE)
  lr_schedule: str = LINEAR
  lr_decay_proportion: float = ranged(DEFAULT_DECAY_PROPORTION, low=0,
                                       high=1, low_open=True)
  num_accumulation_steps: int = ranged(1, **AT_LEAST_ONE)

  def __post_init__(self):
    check_fields(self)
    _one_of("optimizer", self.optimizer, OPTIMIZERS)
    _one_of("lr_schedule", self.lr_schedule, SCHEDULES)
    if self.lamb_bias_correction and self.optimizer != "lamb":
      raise UserError("--lamb_bias_correction needs --optimizer=lamb; for "
                      "AdamW use --adam_bias_correction")
    if self.adam_bias_correction and self.optimizer != "adamw":
      raise UserError("--adam_bias_correction needs --optimizer=adamw; for "
                      "LAMB use --lamb_bias_correction")

  @property
  def bias_correction(self):
    """Whether the chosen optimizer corrects its moments' bias."""
    return self.adam_bias_correction or self.lamb_bias_correction


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """What every training program tells the runner (engine/runner.py).

  Attributes:
    output_dir: checkpoints, events and results; a rerun resumes from it.
    init_checkpoint: initial weights (a checkpoint, a training output_dir,
      Google's or a Hugging Face directory), or None.
    train_batch_size: the global batch of one update, over all replicas.
    save_checkpoints_steps: global steps between checkpoints.
    keep_checkpoint_max: checkpoints kept (0: all).
    log_every_n_steps: steps between throughput and loss lines.
    throughput_warmup_steps: leading steps left out of examples/sec.
    tf_random_seed: the graph seed (deterministic input too), or None.
    skip_corrupt_records: leave out records failing their CRC.
    profile_steps: (A, B): a profiler trace of steps A..B, or None.
    optimizer, distribution, precision: their options.
  """
  output_dir: str
  init_checkpoint: Optional[str] = None
  train_batch_size: int = ranged(32, **AT_LEAST_ONE)
  save_checkpoints_steps: int = ranged(1000, **AT_LEAST_ONE)
  keep_checkpoint_max: int = ranged(5, **NOT_NEGATIVE)
  log_every_n_steps: int = ranged(100, **AT_LEAST_ONE)
  throughput_warmup_steps: int = ranged(10, **NOT_NEGATIVE)
  tf_random_seed: Optional[int] = None
  skip_corrupt_records: bool = False
  profile_steps: Optional[Tuple[int, int]] = None
  optimizer: OptimizerOptions = OptimizerOptions()
  distribution: DistributionOptions = DistributionOptions()
  precision: PrecisionOptions = PrecisionOptions()

  def __post_init__(self):
    if not self.output_dir:
      raise UserError("--output_dir is required")
    check_fields(self)
    if self.profile_steps is not None:
      first, last = self.profile_steps
      if not 1 <= first <= last:
        raise UserError("--profile_steps needs 1 <= A <= B, got %d,%d" %
                        (first, last))


def parse_profile_steps(text):
  """--profile_steps' "A,B" as (A, B); None or "" as None.

  Raises:
    UserError: not two step numbers.
  """
  if not text:
    return None
  try:
    first, last = [int(x) for x in text.split(",")]
  except ValueError:
    raise UserError("--profile_steps must be two step numbers A,B, got %r" %
                    text) from None
  return first, last


def build(cls, values, **given):
  """An options dataclass of `cls` from one flat mapping of values.

  Each field takes the value of its name, a field that is itself an options
  dataclass (RunOptions' optimizer, ...; PretrainingOptions' run) is built
  from the same mapping, and a field without a value keeps its default. The
  dataclass checks itself, once.

  Args:
    cls: an options dataclass.
    values: {name: value}, e.g. every parsed flag's.
    **given: field values that win over `values`.

  Raises:
    UserError: a value out of its range or contradicting another.
  """
  hints = typing.get_type_hints(cls)
  fields = {}
  for field in dataclasses.fields(cls):
    if field.name in given:
      fields[field.name] = given[field.name]
    elif dataclasses.is_dataclass(hints[field.name]):
      fields[field.name] = build(hints[field.name], values)
    elif field.name in values:
      fields[field.name] = values[field.name]
  return cls(**fields)


# --masking: masks frozen into the records (upstream), or none written and
# drawn in run_pretraining.py's input pipeline, every epoch; run_pretraining
# also takes auto, whichever its records need.
STATIC = "static"
DYNAMIC = "dynamic"
MASKING_AUTO = "auto"
MASKING_CHOICES = (MASKING_AUTO, STATIC, DYNAMIC)
# Warm-up steps when neither --num_warmup_steps nor --warmup_proportion is
# given: upstream's flag default.
UPSTREAM_WARMUP_STEPS = 10000
# Warm-up share of a time budget when --warmup_proportion is not given
# (upstream's 10k of 1M steps).
DEFAULT_BUDGET_WARMUP_PROPORTION = 0.01


@dataclasses.dataclass(frozen=True)
class PretrainingOptions:
  """What run_pretraining.py is told, besides the runner's options.

  Attributes:
    run: the runner's RunOptions.
    input_file: the training records, comma-separated globs.
    do_train, do_eval: whether to train, and to evaluate after training.
    bert_config_file, vocab_file, do_lower_case: the model's config, vocab
      and casing; None: not given (a described init_checkpoint or resumed
      output_dir says them, engine/run_directory.py).
    masking: one of MASKING_CHOICES.
    masked_lm_prob, max_predictions_per_seq, do_whole_word_mask: how drawn
      masks are drawn.
    max_seq_length: the records' sequence length.
    eval_batch_size, max_eval_steps: evaluation's batch and batches.
    num_train_steps: the global step training ends at.
    num_warmup_steps: warm-up steps, None when not given (then
      warmup_proportion of the run, else UPSTREAM_WARMUP_STEPS).
    warmup_proportion: warm-up as a share of the steps or of the budget.
    train_time_budget_hours: train for this much training time, or None.
    eval_input_file: held-out records (None: input_file, as upstream).
    eval_every_n_steps: evaluate during training every N steps, or None.
    target_masked_lm_accuracy: stop at the first evaluation reaching it.
    hidden_dropout_prob, attention_probs_dropout_prob: override the
      config's, or None.
    init_distribution: one of INIT_DISTRIBUTIONS, what fresh weights are
      drawn from.
  """
  run: RunOptions
  input_file: str
  do_train: bool = False
  do_eval: bool = False
  bert_config_file: Optional[str] = None
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None
  masking: str = MASKING_AUTO
  masked_lm_prob: float = MASKED_LM_PROB
  max_predictions_per_seq: int = ranged(MAX_PREDICTIONS_PER_SEQ,
                                         **AT_LEAST_ONE)
  do_whole_word_mask: bool = False
  max_seq_length: int = ranged(128, **AT_LEAST_ONE)
  eval_batch_size: int = ranged(UPSTREAM_EVAL_BATCH_SIZE, **AT_LEAST_ONE)
  max_eval_steps: int = ranged(100, **AT_LEAST_ONE)
  num_train_steps: int = ranged(100000, **AT_LEAST_ONE)
  num_warmup_steps: Optional[int] = ranged(None, **NOT_NEGATIVE)
  warmup_proportion: Optional[float] = ranged(None, **PROBABILITY)
  train_time_budget_hours: Optional[float] = ranged(None, **POSITIVE)
  eval_input_file: Optional[str] = None
  eval_every_n_steps: Optional[int] = ranged(None, **AT_LEAST_ONE)
  target_masked_lm_accuracy: Optional[float] = ranged(
      None, low=0, high=1, low_open=True)
  hidden_dropout_prob: Optional[float] = ranged(None, **PROBABILITY)
  attention_probs_dropout_prob: Optional[float] = ranged(None,
                                                          **PROBABILITY)
  init_distribution: str = TRUNCATED_NORMAL

  def __post_init__(self):
    if not self.do_train and not self.evaluate:
      raise UserError("At least one of --do_train or --do_eval must be True")
    if not self.input_file:
      raise UserError("--input_file is required")
    check_fields(self)
    _one_of("masking", self.masking, MASKING_CHOICES)
    _one_of("init_distribution", self.init_distribution, INIT_DISTRIBUTIONS)
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


@dataclasses.dataclass(frozen=True)
class FineTuningOptions:
  """What the fine-tuning programs (run_classifier.py, run_squad.py) are
  told besides the runner's options; each program's options add its task's.

  Attributes:
    run: the runner's RunOptions.
    do_train, do_eval, do_predict: the stages to run.
    bert_config_file, vocab_file, do_lower_case: the model's config, vocab
      and casing; None: not given (a described init_checkpoint or resumed
      output_dir says them, else the casing is upstream's default, True:
      engine/run_directory.py).
    max_seq_length: the sequence length S.
    eval_batch_size, predict_batch_size: their batches.
    num_train_epochs: epochs of training.
    warmup_proportion: the share of the training steps warming up.
  """
  run: RunOptions
  do_train: bool = False
  do_eval: bool = False
  do_predict: bool = False
  bert_config_file: Optional[str] = None
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None
  max_seq_length: int = ranged(128, low=3)
  eval_batch_size: int = ranged(UPSTREAM_EVAL_BATCH_SIZE, **AT_LEAST_ONE)
  predict_batch_size: int = ranged(UPSTREAM_EVAL_BATCH_SIZE,
                                   **AT_LEAST_ONE)
  num_train_epochs: float = ranged(3.0, **POSITIVE)
  warmup_proportion: float = ranged(0.1, **FRACTION)

  def __post_init__(self):
    check_fields(self)


@dataclasses.dataclass(frozen=True)
class ClassifierOptions(FineTuningOptions):
  """What run_classifier.py is told.

  Attributes:
    data_dir: the task's files.
    task_name: a task of bertkit/tasks' registry, tsv or rerank.
    text_a_column, text_b_column, label_column, tsv_has_header, labels:
      the tsv task's columns (number or name), header and labels (None:
      those of train.tsv).
    pack_sequences, max_sequences_per_pack: packing of examples into rows.
  """
  data_dir: Optional[str] = None
  task_name: Optional[str] = None
  text_a_column: str = "0"
  text_b_column: Optional[str] = None
  label_column: str = "1"
  tsv_has_header: bool = True
  labels: Optional[Tuple[str, ...]] = None
  pack_sequences: bool = False
  max_sequences_per_pack: int = ranged(3, **AT_LEAST_ONE)

  def __post_init__(self):
    if not (self.do_train or self.do_eval or self.do_predict):
      raise UserError("At least one of --do_train, --do_eval or --do_predict "
                      "must be True")
    for name in ("data_dir", "task_name"):
      if not getattr(self, name):
        raise UserError("--%s is required" % name)
    super().__post_init__()


@dataclasses.dataclass(frozen=True)
class SquadOptions(FineTuningOptions):
  """What run_squad.py is told.

  Attributes:
    train_file, predict_file: SQuAD json files (predict_file with gold
      answers is evaluated too).
    doc_stride: sub-tokens between the starts of consecutive windows.
    max_query_length: questions are cut to this many sub-tokens.
    n_best_size, max_answer_length: answers kept per question, and the
      longest answer in sub-tokens.
    verbose_logging: log every answer that could not be aligned back.
    version_2_with_negative: SQuAD 2.0 (questions may have no answer).
    null_score_diff_threshold: SQuAD 2.0's threshold for answering "".
  """
  max_seq_length: int = ranged(384, low=3)
  train_file: Optional[str] = None
  predict_file: Optional[str] = None
  doc_stride: int = 128
  max_query_length: int = ranged(64, **AT_LEAST_ONE)
  n_best_size: int = ranged(20, **AT_LEAST_ONE)
  max_answer_length: int = ranged(30, **AT_LEAST_ONE)
  verbose_logging: bool = False
  version_2_with_negative: bool = False
  null_score_diff_threshold: float = 0.0

  def __post_init__(self):
    if not (self.do_train or self.do_predict):
      raise UserError("At least one of --do_train or --do_predict must be "
                      "True")
    super().__post_init__()
    if self.do_train and not self.train_file:
      raise UserError("--do_train needs --train_file")
    if self.do_predict and not self.predict_file:
      raise UserError("--do_predict needs --predict_file")
    room = self.max_seq_length - self.max_query_length - 3
    if room < 1:
      raise UserError(
          "--max_seq_length=%d must be greater than --max_query_length=%d + "
          "3 ([CLS] and two [SEP]): no room is left for the context" %
          (self.max_seq_length, self.max_query_length))
    if not 1 <= self.doc_stride < room:
      raise UserError(
          "--doc_stride=%d must be between 1 and the room left for the "
          "context (--max_seq_length - --max_query_length - 3 = %d), "
          "exclusive: windows moving by that much or more would not "
          "overlap, and a longer one would skip context tokens" % (
              self.doc_stride, room))


# extract_features.py --pooling: sentence-transformers' rules, or "model",
# the rule a sentence-transformers --init_checkpoint names
# (tasks/features/pooling.py).
POOLING_RULES = ("cls", "mean", "max")
POOLING_FROM_MODEL = "model"
POOLINGS = POOLING_RULES + (POOLING_FROM_MODEL,)
# Upstream's --layers: the last four encoder layers.
UPSTREAM_LAYERS = "-1,-2,-3,-4"
# The suffixes --output_file may have with --pooling, and what each writes.
EMBEDDING_SUFFIXES = (".npy", ".jsonl")


def parse_layers(text):
  """--layers' comma-separated layer indexes, as a tuple of ints.

  Raises:
    UserError: an item is not an integer.
  """
  indexes = []
  for item in text.split(","):
    try:
      indexes.append(int(item))
    except ValueError:
      raise UserError(
          "--layers=%s: %r is not an integer; expected comma-separated "
          "encoder layer indexes such as %s (negative: from the last)" % (
              text, item, UPSTREAM_LAYERS)) from None
  return tuple(indexes)


@dataclasses.dataclass(frozen=True)
class FeatureExtractionOptions:
  """What extract_features.py is told.

  Attributes:
    input_file: lines of text (`text_a ||| text_b` for a pair), JSON lines or
      Parquet (corpus_input's formats; several files, globs).
    output_file: token features as JSON lines; with `pooling`, .npy or
      .jsonl sentence vectors.
    init_checkpoint: the model's weights (a checkpoint, a training output
      directory, Google's or a Hugging Face directory).
    bert_config_file, vocab_file, do_lower_case: the model's config, vocab
      and casing (None: what the --init_checkpoint directory says,
      run_directory.resolve).
    layers: --layers as given (None: not given; UPSTREAM_LAYERS for token
      features, the last layer for pooling).
    max_seq_length: S (None: a sentence-transformers directory's, else 128).
    batch_size: the global batch of prediction, over all replicas.
    pooling: None (token features, upstream's output) or one of POOLINGS.
    normalize: L2-normalise the sentence vectors (None: as a
      sentence-transformers directory does, else not).
    input_format, text_field: corpus_input's --input_format and
      --text_field.
    distribution: the replicas predicting (one process).
  """
  input_file: str
  output_file: str
  init_checkpoint: str
  bert_config_file: Optional[str] = None
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None
  layers: Optional[str] = None
  max_seq_length: Optional[int] = ranged(None, low=3)
  batch_size: int = ranged(32, **AT_LEAST_ONE)
  pooling: Optional[str] = None
  normalize: Optional[bool] = None
  input_format: str = "auto"
  text_field: str = "text"
  distribution: DistributionOptions = DistributionOptions()

  def __post_init__(self):
    for name in ("input_file", "output_file", "init_checkpoint"):
      if not getattr(self, name):
        raise UserError("--%s is required" % name)
    check_fields(self)
    if self.layers is not None:
      parse_layers(self.layers)
    if self.pooling is None:
      if self.normalize is not None:
        raise UserError("--normalize applies to sentence vectors; give "
                        "--pooling=%s with it" % "|".join(POOLINGS))
      return
    _one_of("pooling", self.pooling, POOLINGS)
    if not self.output_file.endswith(EMBEDDING_SUFFIXES):
      raise UserError(
          "--output_file %s: with --pooling the sentence vectors are written "
          "as .npy (float32 [lines, hidden size]) or .jsonl (one JSON line "
          "per input line); expected a name ending in .npy or .jsonl" %
          self.output_file)
    if self.layers is not None and len(parse_layers(self.layers)) != 1:
      raise UserError(
          "--layers=%s names %d layers, but --pooling pools one; name one "
          "layer (default: the last, -1)" % (
              self.layers, len(parse_layers(self.layers))))

  @property
  def layer_indexes(self):
    """The encoder layers to output, as given or by default."""
    if self.layers is not None:
      return parse_layers(self.layers)
    return (-1,) if self.pooling else parse_layers(UPSTREAM_LAYERS)
def _require_stage_and_data_dir(options):
  if not (options.do_train or options.do_eval or options.do_predict):
    raise UserError("At least one of --do_train, --do_eval or --do_predict "
                    "must be True")
  if not options.data_dir:
    raise UserError("--data_dir is required")


@dataclasses.dataclass(frozen=True)
class NerOptions(FineTuningOptions):
  """What run_ner.py is told.

  Attributes:
    data_dir: the tagged files (bertkit/tasks/ner/data.py's SPLIT_FILES).
    labels: the label list (None: O and the B-/I- tags of train's entity
      types, or the labels.txt of a trained --output_dir).
  """
  data_dir: Optional[str] = None
  labels: Optional[Tuple[str, ...]] = None

  def __post_init__(self):
    _require_stage_and_data_dir(self)
    super().__post_init__()


@dataclasses.dataclass(frozen=True)
class MultipleChoiceOptions(FineTuningOptions):
  """What run_swag.py is told.

  Attributes:
    data_dir: the examples (bertkit/tasks/swag/data.py's SPLIT_FILES).
  """
  data_dir: Optional[str] = None

  def __post_init__(self):
    _require_stage_and_data_dir(self)
    super().__post_init__()
