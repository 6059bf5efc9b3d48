"""The flags every training program shares, and the choices they offer.

run_pretraining.py, run_classifier.py and run_squad.py define these flags
(`define_runner_flags`) and check what they can before TensorFlow is
imported, so that a bad flag is refused in well under a second rather than
after the seconds TensorFlow's import takes. The flags become the runner's
options.RunOptions here (`run_options_from_flags`), the one place the
engine's values leave absl; the choices and defaults are those of
common/options.py.
"""

import os

from absl import flags

from bertkit.common import options
from bertkit.common import shared_flags
from bertkit.common import slurm_env
from bertkit.common.options import (ALL_REDUCE_ALGS, OPTIMIZERS, SCHEDULES,
                                    STRATEGIES)

# The flags' defaults are the options' (RunOptions needs an output_dir).
RUN = options.RunOptions
OPTIMIZER = options.OptimizerOptions
DISTRIBUTION = options.DistributionOptions
PRECISION = options.PrecisionOptions


def allow_xla_on_cpu():
  """Lets --use_xla's global_jit_level cluster CPU ops too.

  TensorFlow auto-clusters only GPU ops for XLA unless TF_XLA_FLAGS has
  --tf_xla_cpu_global_jit; without it --use_xla would silently do nothing on
  a CPU. The flag only widens what a session with global_jit_level ON_1
  compiles, so it changes nothing for runs without --use_xla. TensorFlow reads
  TF_XLA_FLAGS once, early, hence this runs from define_runner_flags, before
  TensorFlow is imported.
  """
  current = os.environ.get("TF_XLA_FLAGS", "")
  if "--tf_xla_cpu_global_jit" not in current.split():
    os.environ["TF_XLA_FLAGS"] = (current + " --tf_xla_cpu_global_jit").strip()


def define_distribution_flags():
  """The flags choosing the distribution strategy and its devices."""
  flags.DEFINE_bool("multi_gpu", False, "Use every visible GPU (mirrored).")
  flags.DEFINE_integer("num_gpus", DISTRIBUTION.num_gpus,
                       "Number of GPUs to use (0: all with --multi_gpu, else "
                       "1 if any).")
  flags.DEFINE_enum("distribution_strategy", None, STRATEGIES,
                    "Default: multi_worker when TF_CONFIG or a Slurm job "
                    "step of several tasks (srun -n N) names a cluster, "
                    "mirrored with --multi_gpu, --num_gpus > 1 or "
                    "--cpu_replicas > 1, else one_device.")
  flags.DEFINE_enum("all_reduce_alg", DISTRIBUTION.all_reduce_alg,
                    ALL_REDUCE_ALGS,
                    "mirrored: nccl, hierarchical_copy or one_device; "
                    "multi_worker: ring or nccl; auto picks per device type.")
  flags.DEFINE_integer("cpu_replicas", DISTRIBUTION.cpu_replicas,
                       "Split the CPU into N logical devices and train one "
                       "replica on each (for machines without GPUs).")
  flags.DEFINE_integer("collective_timeout_seconds",
                       DISTRIBUTION.collective_timeout_seconds,
                       "multi_worker: a collective that waits longer than "
                       "this (e.g. a peer died) fails instead of hanging; "
                       "with several workers, horovod ranks or BytePS "
                       "workers, also the longest a training step may "
                       "take.")
  flags.DEFINE_integer("slurm_port_base", None,
                       "Under srun with several tasks (and no TF_CONFIG): "
                       "each task listens on this port + its SLURM_LOCALID. "
                       "Default: %d + (SLURM_JOB_ID mod %d) * %d, below "
                       "the ephemeral ports and apart for jobs sharing a "
                       "node (docs/slurm.md)." % (
                           slurm_env.DEFAULT_PORT_FIRST,
                           slurm_env.DEFAULT_PORT_SLOTS,
                           slurm_env.DEFAULT_PORT_STRIDE))


def define_runner_flags():
  """The flags every training program has; each program adds its task's.

  Called by the programs only, before `app.run`; also enables XLA on CPUs
  (allow_xla_on_cpu), which must happen before TensorFlow is imported.
  """
  allow_xla_on_cpu()
  define_distribution_flags()
  shared_flags.define_bert_config_file()
  shared_flags.define_vocab_file()
  flags.DEFINE_string("output_dir", None,
                      "Checkpoints, events, throughput logs and results go "
                      "here; a rerun with the same directory resumes.")
  flags.DEFINE_string("init_checkpoint", None,
                      "Initial weights: a checkpoint prefix or a directory "
                      "(a training output_dir, Google's .../bert_model.ckpt, "
                      "or a Hugging Face BERT directory with config.json + "
                      "model.safetensors); ignored when output_dir already "
                      "has a checkpoint.")
  flags.DEFINE_bool("do_train", False, "Whether to run training.")
  flags.DEFINE_integer("train_batch_size", RUN.train_batch_size,
                       "Total batch size for training, over all replicas.")
  flags.DEFINE_integer("num_accumulation_steps",
                       OPTIMIZER.num_accumulation_steps,
                       "Gradient accumulation: micro-batches per update. Each "
                       "replica's micro-batch is train_batch_size / (replicas "
                       "* K); the update and global_step come once per K.")
  flags.DEFINE_float("learning_rate", OPTIMIZER.learning_rate,
                     "The initial learning rate.")
  flags.DEFINE_integer("save_checkpoints_steps", RUN.save_checkpoints_steps,
                       "How often to save the model checkpoint.")
  flags.DEFINE_integer("keep_checkpoint_max", RUN.keep_checkpoint_max,
                       "Checkpoints to keep.")
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "Accepted for upstream compatibility; unused off TPU.")
  flags.DEFINE_bool("use_fp16", False,
                    "Mixed precision: enable_mixed_precision_graph_rewrite "
                    "with dynamic loss scaling (GPU kernels only).")
  flags.DEFINE_bool("use_bf16", False,
                    "Mixed precision: bfloat16 compute, float32 variables, "
                    "no loss scaling, through TensorFlow's oneDNN bfloat16 "
                    "graph rewrite (CPUs; fast with avx512_bf16 or amx).")
  flags.DEFINE_integer("init_loss_scale", PRECISION.init_loss_scale,
                       "--use_fp16: initial dynamic loss scale.")
  flags.DEFINE_integer("loss_scale_growth_steps",
                       PRECISION.loss_scale_growth_steps,
                       "--use_fp16: finite steps before the scale doubles.")
  flags.DEFINE_integer("log_every_n_steps", RUN.log_every_n_steps,
                       "Steps between throughput/loss log lines.")
  flags.DEFINE_integer("throughput_warmup_steps", RUN.throughput_warmup_steps,
                       "Leading steps left out of the steady-state "
                       "examples/sec figure.")
  flags.DEFINE_integer("tf_random_seed", None,
                       "Graph-level seed; also makes the input order "
                       "deterministic (no sloppy interleave, no shuffle).")
  flags.DEFINE_bool("use_xla", False, "XLA JIT compilation (level ON_1).")
  flags.DEFINE_enum("optimizer", OPTIMIZER.optimizer, OPTIMIZERS,
                    "adamw: upstream's Adam with decoupled weight decay; "
                    "lamb: LAMB (layer-wise trust ratio, arXiv:1904.00962).")
  flags.DEFINE_bool("lamb_bias_correction", False,
                    "--optimizer=lamb: Adam's bias correction of the moments "
                    "(off in the LAMB paper's BERT recipe).")
  flags.DEFINE_bool("adam_bias_correction", False,
                    "--optimizer=adamw: Adam's bias correction of the moments "
                    "(off in upstream's AdamW, on in torch.optim.AdamW and "
                    "RoBERTa's).")
  define_optimizer_flags()
  flags.DEFINE_bool("stop_on_nonfinite_loss", PRECISION.stop_on_nonfinite_loss,
                    "Without --use_fp16, stop at the first step whose loss "
                    "is NaN or inf (naming the step) instead of training on.")
  flags.DEFINE_bool("skip_corrupt_records", False,
                    "Leave out input records that fail their CRC check "
                    "(reads every input file once before training; the "
                    "count is logged and in throughput_summary.json) instead "
                    "of stopping at the first one.")
  flags.DEFINE_string("profile_steps", None,
                      "A,B: write a TensorFlow profiler trace of steps A..B "
                      "(counted in this run) to output_dir/plugins/profile "
                      "for TensorBoard's profile tab.")


def define_optimizer_flags():
  """The update's hyperparameters and the learning-rate schedule's shape;
  their defaults are upstream's."""
  defaults = OPTIMIZER
  flags.DEFINE_float("adam_beta_1", defaults.adam_beta_1,
                     "Decay of the first moment (AdamW and LAMB).")
  flags.DEFINE_float("adam_beta_2", defaults.adam_beta_2,
                     "Decay of the second moment (RoBERTa: 0.98).")
  flags.DEFINE_float("adam_epsilon", defaults.adam_epsilon,
                     "Added to the root of the second moment.")
  flags.DEFINE_float("weight_decay_rate", defaults.weight_decay_rate,
                     "Decoupled weight decay (none for LayerNorm and bias).")
  flags.DEFINE_float("clip_norm", defaults.clip_norm,
                     "Clip the summed gradient to this global norm; 0: no "
                     "clipping.")
  flags.DEFINE_enum("lr_schedule", defaults.lr_schedule, SCHEDULES,
                    "After the linear warm-up: linear (upstream's decay to 0 "
                    "at the last step), warmup_stable_decay (hold the peak, "
                    "then decay to 0 over the last --lr_decay_proportion) or "
                    "cosine (to 0 at the last step).")
  flags.DEFINE_float("lr_decay_proportion", defaults.lr_decay_proportion,
                     "--lr_schedule=warmup_stable_decay: the share of the run "
                     "its final decay takes.")


def options_from_flags(cls, values, **given):
  """An options dataclass of `cls` (common/options.py) from parsed flags:
  each field takes the flag of its name (options.build).

  Args:
    cls: an options dataclass.
    values: the parsed flags (absl's FLAGS).
    **given: field values that win over the flags' (a flag whose value
      means something else, or no flag of that name).

  Raises:
    UserError: a value out of its range or contradicting another.
  """
  return options.build(cls, values.flag_values_dict(), **given)


def run_options_from_flags(values):
  """The runner's options.RunOptions from define_runner_flags' flags."""
  return options_from_flags(
      options.RunOptions, values,
      profile_steps=options.parse_profile_steps(values.profile_steps))
