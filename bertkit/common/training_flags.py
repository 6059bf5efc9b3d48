"""The flags every training program shares, and the choices they offer.

run_pretraining.py, run_classifier.py and run_squad.py define these flags
(`define_runner_flags`) and check what they can before TensorFlow is
imported, so that a bad flag is refused in well under a second rather than
after the seconds TensorFlow's import takes. The engine reads the parsed
values (engine/runner.py, engine/distribution.py, engine/training_setup.py);
the choices of the enum flags and the optimizer's default hyperparameters
are defined here, where the flags and the engine both find them.
"""

import collections
import os

from absl import flags

from bertkit.common import shared_flags
from bertkit.common import slurm_env
from bertkit.common.errors import UserError

# --distribution_strategy and --all_reduce_alg (engine/distribution.py).
STRATEGIES = ("one_device", "mirrored", "multi_worker", "central_storage",
              "horovod", "byteps")
ALL_REDUCE_ALGS = ("auto", "nccl", "hierarchical_copy", "one_device", "ring")

# --optimizer (engine/optimizers.py).
OPTIMIZERS = ("adamw", "lamb")

# The update's hyperparameters, upstream's values as defaults (weight decay
# 0.01, betas 0.9 / 0.999, epsilon 1e-6, clipping to global norm 1.0).
# clip_norm None: no clipping.
AdamHyperparameters = collections.namedtuple(
    "AdamHyperparameters",
    ["beta_1", "beta_2", "epsilon", "weight_decay_rate", "clip_norm"])
UPSTREAM_HYPERPARAMETERS = AdamHyperparameters(
    beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay_rate=0.01,
    clip_norm=1.0)

# --lr_schedule (engine/lr_schedules.py).
LINEAR = "linear"
WARMUP_STABLE_DECAY = "warmup_stable_decay"
COSINE = "cosine"
SCHEDULES = (LINEAR, WARMUP_STABLE_DECAY, COSINE)
DEFAULT_DECAY_PROPORTION = 0.1


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
  flags.DEFINE_integer("num_gpus", 0,
                       "Number of GPUs to use (0: all with --multi_gpu, else "
                       "1 if any).")
  flags.DEFINE_enum("distribution_strategy", None, STRATEGIES,
                    "Default: multi_worker when TF_CONFIG or a Slurm job "
                    "step of several tasks (srun -n N) names a cluster, "
                    "mirrored with --multi_gpu, --num_gpus > 1 or "
                    "--cpu_replicas > 1, else one_device.")
  flags.DEFINE_enum("all_reduce_alg", "auto", ALL_REDUCE_ALGS,
                    "mirrored: nccl, hierarchical_copy or one_device; "
                    "multi_worker: ring or nccl; auto picks per device type.")
  flags.DEFINE_integer("cpu_replicas", 0,
                       "Split the CPU into N logical devices and train one "
                       "replica on each (for machines without GPUs).")
  flags.DEFINE_integer("collective_timeout_seconds", 600,
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
  flags.DEFINE_integer("train_batch_size", 32,
                       "Total batch size for training, over all replicas.")
  flags.DEFINE_integer("num_accumulation_steps", 1,
                       "Gradient accumulation: micro-batches per update. Each "
                       "replica's micro-batch is train_batch_size / (replicas "
                       "* K); the update and global_step come once per K.")
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate.")
  flags.DEFINE_integer("save_checkpoints_steps", 1000,
                       "How often to save the model checkpoint.")
  flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints to keep.")
  flags.DEFINE_integer("iterations_per_loop", 1000,
                       "Accepted for upstream compatibility; unused off TPU.")
  flags.DEFINE_bool("use_fp16", False,
                    "Mixed precision: enable_mixed_precision_graph_rewrite "
                    "with dynamic loss scaling (GPU kernels only).")
  flags.DEFINE_bool("use_bf16", False,
                    "Mixed precision: bfloat16 compute, float32 variables, "
                    "no loss scaling, through TensorFlow's oneDNN bfloat16 "
                    "graph rewrite (CPUs; fast with avx512_bf16 or amx).")
  flags.DEFINE_integer("init_loss_scale", 2**15,
                       "--use_fp16: initial dynamic loss scale.")
  flags.DEFINE_integer("loss_scale_growth_steps", 2000,
                       "--use_fp16: finite steps before the scale doubles.")
  flags.DEFINE_integer("log_every_n_steps", 100,
                       "Steps between throughput/loss log lines.")
  flags.DEFINE_integer("throughput_warmup_steps", 10,
                       "Leading steps left out of the steady-state "
                       "examples/sec figure.")
  flags.DEFINE_integer("tf_random_seed", None,
                       "Graph-level seed; also makes the input order "
                       "deterministic (no sloppy interleave, no shuffle).")
  flags.DEFINE_bool("use_xla", False, "XLA JIT compilation (level ON_1).")
  flags.DEFINE_enum("optimizer", "adamw", OPTIMIZERS,
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
  flags.DEFINE_bool("stop_on_nonfinite_loss", True,
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
  defaults = UPSTREAM_HYPERPARAMETERS
  flags.DEFINE_float("adam_beta_1", defaults.beta_1,
                     "Decay of the first moment (AdamW and LAMB).")
  flags.DEFINE_float("adam_beta_2", defaults.beta_2,
                     "Decay of the second moment (RoBERTa: 0.98).")
  flags.DEFINE_float("adam_epsilon", defaults.epsilon,
                     "Added to the root of the second moment.")
  flags.DEFINE_float("weight_decay_rate", defaults.weight_decay_rate,
                     "Decoupled weight decay (none for LayerNorm and bias).")
  flags.DEFINE_float("clip_norm", defaults.clip_norm,
                     "Clip the summed gradient to this global norm; 0: no "
                     "clipping.")
  flags.DEFINE_enum("lr_schedule", LINEAR, SCHEDULES,
                    "After the linear warm-up: linear (upstream's decay to 0 "
                    "at the last step), warmup_stable_decay (hold the peak, "
                    "then decay to 0 over the last --lr_decay_proportion) or "
                    "cosine (to 0 at the last step).")
  flags.DEFINE_float("lr_decay_proportion", DEFAULT_DECAY_PROPORTION,
                     "--lr_schedule=warmup_stable_decay: the share of the run "
                     "its final decay takes.")


def check_optimizer_flags(values):
  """Raises UserError for optimizer flags no update can follow.

  Args:
    values: the parsed flags (absl's FLAGS).

  Raises:
    UserError: --lamb_bias_correction without --optimizer=lamb,
      --adam_bias_correction without --optimizer=adamw, or a
      hyperparameter out of its range.
  """
  if values.lamb_bias_correction and values.optimizer != "lamb":
    raise UserError("--lamb_bias_correction needs --optimizer=lamb; for "
                    "AdamW use --adam_bias_correction")
  if values.adam_bias_correction and values.optimizer != "adamw":
    raise UserError("--adam_bias_correction needs --optimizer=adamw; for "
                    "LAMB use --lamb_bias_correction")
  for name in ("adam_beta_1", "adam_beta_2"):
    if not 0.0 <= getattr(values, name) < 1.0:
      raise UserError("--%s=%r is out of range; expected 0 <= %s < 1" % (
          name, getattr(values, name), name))
  if values.adam_epsilon <= 0.0:
    raise UserError("--adam_epsilon=%r must be > 0" % values.adam_epsilon)
  for name in ("weight_decay_rate", "clip_norm"):
    if getattr(values, name) < 0.0:
      raise UserError("--%s=%r must be >= 0" % (name, getattr(values, name)))
  if not 0.0 < values.lr_decay_proportion <= 1.0:
    raise UserError("--lr_decay_proportion=%r is out of range; expected 0 < "
                    "lr_decay_proportion <= 1" % values.lr_decay_proportion)
