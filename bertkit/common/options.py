"""What the engine is told: typed options, each declared once with its flag.

The training programs' options hold a RunOptions (the runner's: where the
run writes, its batch and checkpoints, the optimizer's options, where the
replicas run and in what precision); every program reading a model holds the
ModelFiles. Each field is declared with option_fields.option: its flag is
made from it (option_flags.py), and its checks run when the options are
built. Each task's own options live beside it (bertkit/tasks/*/options.py).
Nothing here imports TensorFlow.
"""

import dataclasses
from typing import Optional, Tuple

from bertkit.common import option_fields
from bertkit.common import slurm_env
from bertkit.common.errors import UserError
from bertkit.common.option_fields import (AT_LEAST_ONE, NOT_NEGATIVE,
                                          POSITIVE, PROBABILITY, option)

# --distribution_strategy and --all_reduce_alg
# (engine/distributed/distribution.py).
STRATEGIES = ("one_device", "mirrored", "multi_worker", "central_storage",
              "horovod", "byteps")
ALL_REDUCE_ALGS = ("auto", "nccl", "hierarchical_copy", "one_device", "ring")

# BERT's masked LM (Devlin et al. 2018, section 3.1): 15 % of the tokens
# masked, at most 20 per 128-token sequence (upstream's flag defaults).
MASKED_LM_PROB = 0.15
MAX_PREDICTIONS_PER_SEQ = 20
# Upstream's --eval_batch_size (every program) and --predict_batch_size.
UPSTREAM_EVAL_BATCH_SIZE = 8

# --optimizer (engine/update/optimizers.py).
OPTIMIZERS = ("adamw", "lamb")

# --lr_schedule (engine/update/lr_schedules.py).
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
class DistributionOptions:
  """Where the replicas run (engine/distributed/distribution.py decides the
  plan)."""
  distribution_strategy: Optional[str] = option(
      None, "One of %s." % ", ".join(STRATEGIES), choices=STRATEGIES,
      unset="multi_worker when TF_CONFIG or a Slurm job step of several "
      "tasks (srun -n N) names a cluster, mirrored with --multi_gpu, "
      "--num_gpus > 1 or --cpu_replicas > 1, else one_device")
  multi_gpu: bool = option(False, "Use every visible GPU (mirrored).")
  num_gpus: int = option(0, "Number of GPUs to use (0: all with "
                         "--multi_gpu, else 1 if any).", **NOT_NEGATIVE)
  cpu_replicas: int = option(
      0, "Split the CPU into N logical devices and train one replica on "
      "each (for machines without GPUs).", **NOT_NEGATIVE)
  all_reduce_alg: str = option(
      "auto", "mirrored: nccl, hierarchical_copy or one_device; "
      "multi_worker: ring or nccl; auto picks per device type.",
      choices=ALL_REDUCE_ALGS)
  collective_timeout_seconds: int = option(
      600, "multi_worker: a collective that waits longer than this (e.g. a "
      "peer died) fails instead of hanging; with several workers, horovod "
      "ranks or BytePS workers, also the longest a training step may take; "
      "0: no limit.", **NOT_NEGATIVE)
  slurm_port_base: Optional[int] = option(
      None, "Under srun with several tasks (and no TF_CONFIG): each task "
      "listens on this port + its SLURM_LOCALID.",
      unset="%d + (SLURM_JOB_ID mod %d) * %d, below the ephemeral ports and "
      "apart for jobs sharing a node (docs/slurm.md)" % (
          slurm_env.DEFAULT_PORT_FIRST, slurm_env.DEFAULT_PORT_SLOTS,
          slurm_env.DEFAULT_PORT_STRIDE), low=1, high=65535)

  def __post_init__(self):
    option_fields.check_fields(self)
    if self.cpu_replicas and (self.num_gpus or self.multi_gpu):
      raise UserError("--cpu_replicas cannot be combined with --num_gpus or "
                      "--multi_gpu")


@dataclasses.dataclass(frozen=True)
class Bfloat16Options:
  """The precision of a program that only predicts (extract_features.py):
  bfloat16 or not. Training programs have it inside PrecisionOptions."""
  use_bf16: bool = option(
      False, "Mixed precision: bfloat16 compute, float32 variables, no loss "
      "scaling, through TensorFlow's oneDNN bfloat16 graph rewrite (CPUs; "
      "fast with avx512_bf16 or amx).")


@dataclasses.dataclass(frozen=True)
class PrecisionOptions(Bfloat16Options):
  """What the kernels compute in (engine_setup.resolve_precision decides,
  with the machine's facts)."""
  use_fp16: bool = option(
      False, "Mixed precision: enable_mixed_precision_graph_rewrite with "
      "dynamic loss scaling (GPU kernels only).")
  init_loss_scale: int = option(2**15, "--use_fp16: initial dynamic loss "
                                "scale.", **AT_LEAST_ONE)
  loss_scale_growth_steps: int = option(
      2000, "--use_fp16: finite steps before the scale doubles.",
      **AT_LEAST_ONE)
  use_xla: bool = option(False, "XLA JIT compilation (level ON_1).")
  stop_on_nonfinite_loss: bool = option(
      True, "Without --use_fp16, stop at the first step whose loss is NaN "
      "or inf (naming the step) instead of training on.")

  def __post_init__(self):
    option_fields.check_fields(self)
    if self.use_fp16 and self.use_bf16:
      raise UserError("--use_bf16 and --use_fp16 are mutually exclusive: "
                      "pass one of them")


@dataclasses.dataclass(frozen=True)
class OptimizerOptions:
  """The update and the learning rate's schedule; defaults are upstream's
  (AdamW without bias correction, weight decay 0.01, betas 0.9 / 0.999,
  epsilon 1e-6, clipping to global norm 1.0, linear decay)."""
  learning_rate: float = option(5e-5, "The initial learning rate.",
                                **NOT_NEGATIVE)
  optimizer: str = option(
      "adamw", "adamw: upstream's Adam with decoupled weight decay; lamb: "
      "LAMB (layer-wise trust ratio, arXiv:1904.00962).", choices=OPTIMIZERS)
  adam_bias_correction: bool = option(
      False, "--optimizer=adamw: Adam's bias correction of the moments (off "
      "in upstream's AdamW, on in torch.optim.AdamW and RoBERTa's).")
  lamb_bias_correction: bool = option(
      False, "--optimizer=lamb: Adam's bias correction of the moments (off in "
      "the LAMB paper's BERT recipe).")
  adam_beta_1: float = option(0.9, "Decay of the first moment (AdamW and "
                              "LAMB).", **PROBABILITY)
  adam_beta_2: float = option(0.999, "Decay of the second moment (RoBERTa: "
                              "0.98).", **PROBABILITY)
  adam_epsilon: float = option(1e-6, "Added to the root of the second "
                               "moment.", **POSITIVE)
  weight_decay_rate: float = option(0.01, "Decoupled weight decay (none for "
                                    "LayerNorm and bias).", **NOT_NEGATIVE)
  clip_norm: float = option(1.0, "Clip the summed gradient to this global "
                            "norm; 0: no clipping.", **NOT_NEGATIVE)
  lr_schedule: str = option(
      LINEAR, "After the linear warm-up: linear (upstream's decay to 0 at the "
      "last step), warmup_stable_decay (hold the peak, then decay to 0 over "
      "the last --lr_decay_proportion) or cosine (to 0 at the last step).",
      choices=SCHEDULES)
  lr_decay_proportion: float = option(
      DEFAULT_DECAY_PROPORTION, "--lr_schedule=warmup_stable_decay: the share "
      "of the run its final decay takes.", low=0, high=1, low_open=True)
  num_accumulation_steps: int = option(
      1, "Gradient accumulation: micro-batches per update. Each replica's "
      "micro-batch is train_batch_size / (replicas * K); the update and "
      "global_step come once per K.", **AT_LEAST_ONE)

  def __post_init__(self):
    option_fields.check_fields(self)
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunOptions:
  """What every training program tells the runner (engine/loop/runner.py)."""
  output_dir: str = option(
      option_fields.REQUIRED, "Checkpoints, events, throughput logs and "
      "results go here; a rerun with the same directory resumes.")
  init_checkpoint: Optional[str] = option(
      None, "Initial weights: a checkpoint prefix or a directory (a training "
      "output_dir, Google's .../bert_model.ckpt, or a Hugging Face BERT "
      "directory with config.json + model.safetensors); ignored when "
      "output_dir already has a checkpoint.", unset="none: fresh weights")
  train_batch_size: int = option(32, "Total batch size for training, over "
                                 "all replicas.", **AT_LEAST_ONE)
  save_checkpoints_steps: int = option(1000, "How often to save the model "
                                       "checkpoint.", **AT_LEAST_ONE)
  keep_checkpoint_max: int = option(5, "Checkpoints to keep (0: all).",
                                    **NOT_NEGATIVE)
  iterations_per_loop: int = option(1000, "Accepted for upstream "
                                    "compatibility; unused off TPU.")
  log_every_n_steps: int = option(100, "Steps between throughput/loss log "
                                  "lines.", **AT_LEAST_ONE)
  throughput_warmup_steps: int = option(
      10, "Leading steps left out of the steady-state examples/sec figure.",
      **NOT_NEGATIVE)
  tf_random_seed: Optional[int] = option(
      None, "Graph-level seed; also makes the input order deterministic (no "
      "sloppy interleave, no shuffle).", unset="none: a random seed")
  skip_corrupt_records: bool = option(
      False, "Leave out input records that fail their CRC check (reads every "
      "input file once before training; the count is logged and in "
      "throughput_summary.json) instead of stopping at the first one.")
  profile_steps: Optional[Tuple[int, int]] = option(
      None, "A,B: write a TensorFlow profiler trace of steps A..B (counted in "
      "this run) to output_dir/plugins/profile for TensorBoard's profile "
      "tab.", unset="no trace", parse=parse_profile_steps)
  optimizer: OptimizerOptions = OptimizerOptions()
  distribution: DistributionOptions = DistributionOptions()
  precision: PrecisionOptions = PrecisionOptions()

  def __post_init__(self):
    option_fields.check_fields(self)
    if self.profile_steps is not None:
      first, last = self.profile_steps
      if not 1 <= first <= last:
        raise UserError("--profile_steps needs 1 <= A <= B, got %d,%d" %
                        (first, last))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelFiles:
  """The model a program reads or trains: its config, vocab and casing.

  None: not given; a directory the program reads (a described
  --init_checkpoint, a resumed --output_dir) says them
  (engine/checkpointing/run_directory.py).
  """
  bert_config_file: Optional[str] = option(
      None, "bert_config.json of the model.", path=option_fields.FILE,
      unset="the config in the directory of --init_checkpoint (a training "
      "output_dir, Google's or Hugging Face's)")
  vocab_file: Optional[str] = option(
      None, "The WordPiece vocab.txt the model was (or is) trained with.",
      path=option_fields.FILE,
      unset="the vocab.txt in the directory of the checkpoint read")
  do_lower_case: Optional[bool] = option(
      None, "Lower-case and strip accents: True for uncased models, False for "
      "cased ones. The vocab, the records and the model must agree.",
      unset="what the checkpoint's directory says (tokenizer_config.json), "
      "else True")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingOptions(ModelFiles):
  """What every training program is told: the runner's options, the model's
  files, and whether to train."""
  run: RunOptions
  do_train: bool = option(False, "Whether to run training.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvaluationOptions:
  """Evaluation after (or during) training."""
  do_eval: bool = option(False, "Whether to evaluate (pretraining: the input "
                         "records; fine-tuning: the dev set).")
  eval_batch_size: int = option(UPSTREAM_EVAL_BATCH_SIZE, "Total batch size "
                                "for eval.", **AT_LEAST_ONE)


def max_seq_length_option(default, low=1, help_text="Sequence length S "
                          "after WordPiece tokenization: longer inputs are "
                          "truncated, shorter padded.", unset=None):
  """The --max_seq_length field, with a program's default (128, SQuAD's
  384) and lower bound."""
  return option(default, help_text, low=low, unset=unset)
