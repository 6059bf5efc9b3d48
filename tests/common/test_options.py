"""common/options.py: every option checked once, where it is built, and no
engine module handed absl's flags."""

import dataclasses
import math
import os
import re
import typing

import pytest

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.tasks.classification.options import ClassifierOptions
from bertkit.tasks.pretraining.options import PretrainingOptions
from bertkit.tasks.squad.options import SquadOptions
from bertkit.tasks.pretraining import options as pretraining_options
from bertkit.common.errors import UserError
from conftest import REPO_ROOT

RUN = options.RunOptions(output_dir="out")
# The smallest valid options of each kind, to vary one field at a time.
VALID = {
    options.DistributionOptions: options.DistributionOptions(),
    options.PrecisionOptions: options.PrecisionOptions(),
    options.OptimizerOptions: options.OptimizerOptions(),
    options.RunOptions: RUN,
    PretrainingOptions: PretrainingOptions(
        run=RUN, input_file="train.tfrecord", do_train=True),
    ClassifierOptions: ClassifierOptions(
        run=RUN, do_train=True, vocab_file="vocab.txt", data_dir="glue/MRPC",
        task_name="mrpc"),
    SquadOptions: SquadOptions(
        run=RUN, do_train=True, vocab_file="vocab.txt",
        train_file="train.json"),
}


def float_fields():
  """(options class, field name) of every float option."""
  found = []
  for cls in VALID:
    for name, hint in typing.get_type_hints(cls).items():
      if float in (hint, *typing.get_args(hint)):
        found.append((cls, name))
  return found


def test_every_float_option_is_listed():
  names = {name for _, name in float_fields()}
  assert {"learning_rate", "adam_epsilon", "clip_norm", "masked_lm_prob",
          "train_time_budget_hours", "num_train_epochs",
          "null_score_diff_threshold"} <= names


@pytest.mark.parametrize("cls,name", float_fields(),
                         ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_every_float_option_refuses_non_finite_values(cls, name, value):
  with pytest.raises(UserError) as e:
    dataclasses.replace(VALID[cls], **{name: value})
  assert str(e.value) == "--%s=%r is not a finite number" % (name, value)


@pytest.mark.parametrize("cls,changes,message", [
    (PretrainingOptions, dict(max_eval_steps=0),
     "--max_eval_steps must be >= 1, got 0"),
    (PretrainingOptions, dict(train_time_budget_hours=0.0),
     "--train_time_budget_hours must be > 0, got 0.0"),
    (PretrainingOptions, dict(target_masked_lm_accuracy=1.5),
     "--target_masked_lm_accuracy=1.5 is out of range; expected 0 < "
     "target_masked_lm_accuracy <= 1"),
    (PretrainingOptions, dict(train_time_budget_hours=1.0,
                                      num_warmup_steps=10),
     "--num_warmup_steps counts steps but --train_time_budget_hours runs "
     "the schedule over training time; give the warm-up as "
     "--warmup_proportion of the budget"),
    (PretrainingOptions, dict(mask_rule="per_token", do_whole_word_mask=True),
     "--mask_rule=per_token draws wordpieces one by one; "
     "--do_whole_word_mask takes upstream's rule (drop --mask_rule or "
     "--do_whole_word_mask)"),
    (PretrainingOptions, dict(mask_rule="bernoulli"),
     "--mask_rule=bernoulli is not one of upstream, per_token, mask_only"),
    (PretrainingOptions, dict(init_distribution="uniform"),
     "--init_distribution=uniform is not one of truncated_normal, normal"),
    (options.OptimizerOptions, dict(adam_beta_2=1.0),
     "--adam_beta_2=1.0 is out of range; expected 0 <= adam_beta_2 < 1"),
    (options.OptimizerOptions, dict(adam_epsilon=0.0),
     "--adam_epsilon must be > 0, got 0.0"),
    (options.OptimizerOptions, dict(lamb_bias_correction=True),
     "--lamb_bias_correction needs --optimizer=lamb; for AdamW use "
     "--adam_bias_correction"),
    (options.RunOptions, dict(train_batch_size=0),
     "--train_batch_size must be >= 1, got 0"),
    (options.RunOptions, dict(profile_steps=(5, 2)),
     "--profile_steps needs 1 <= A <= B, got 5,2"),
    (options.DistributionOptions, dict(cpu_replicas=2, num_gpus=1),
     "--cpu_replicas cannot be combined with --num_gpus or --multi_gpu"),
    (ClassifierOptions, dict(max_seq_length=2),
     "--max_seq_length must be >= 3, got 2"),
    (ClassifierOptions, dict(num_train_epochs=0.0),
     "--num_train_epochs must be > 0, got 0.0"),
    (SquadOptions, dict(warmup_proportion=1.5),
     "--warmup_proportion=1.5 is out of range; expected 0 <= "
     "warmup_proportion <= 1"),
])
def test_a_value_out_of_range_names_its_flag(cls, changes, message):
  with pytest.raises(UserError) as e:
    dataclasses.replace(VALID[cls], **changes)
  assert str(e.value) == message


def test_build_fills_nested_options_from_one_mapping():
  built = option_fields.build(PretrainingOptions, {
      "output_dir": "out", "input_file": "a.tfrecord", "do_train": True,
      "learning_rate": 1e-3, "cpu_replicas": 2, "use_xla": True,
      "num_train_steps": 7, "unrelated_flag": 1}, num_warmup_steps=3)
  assert built.run.output_dir == "out"
  assert built.run.optimizer.learning_rate == 1e-3
  assert built.run.distribution.cpu_replicas == 2
  assert built.run.precision.use_xla is True
  assert (built.num_train_steps, built.warmup_steps) == (7, 3)


def test_warm_up_comes_from_steps_then_proportion_then_upstream():
  base = VALID[PretrainingOptions]
  assert dataclasses.replace(base, num_train_steps=200,
                             warmup_proportion=0.1).warmup_steps == 20
  assert dataclasses.replace(base, num_train_steps=200, num_warmup_steps=5,
                             warmup_proportion=0.1).warmup_steps == 5
  assert base.warmup_steps == pretraining_options.UPSTREAM_WARMUP_STEPS


def test_options_are_frozen():
  with pytest.raises(dataclasses.FrozenInstanceError):
    RUN.train_batch_size = 0


# The modules that make and parse flags, and so may touch absl's flags.
FLAG_MODULES = {"bertkit/common/option_flags.py",
                "bertkit/common/programs.py",
                "bertkit/common/errors.py", "bertkit/common/flag_parsing.py"}


def test_only_the_flag_modules_of_the_package_read_absl_flags():
  readers = []
  for directory, _, files in os.walk(os.path.join(REPO_ROOT, "bertkit")):
    for name in files:
      path = os.path.join(directory, name)
      rel = os.path.relpath(path, REPO_ROOT)
      if not name.endswith(".py") or rel in FLAG_MODULES:
        continue
      with open(path, encoding="utf-8") as f:
        text = f.read()
      if re.search(r"from absl import flags|\bFLAGS\b|flag_values", text):
        readers.append(rel)
  assert readers == []


def test_no_program_reads_absl_flags_past_its_options():
  """Every program is its options and a function of them: none reads
  absl's FLAGS."""
  readers = []
  for name in sorted(os.listdir(REPO_ROOT)):
    if name.endswith(".py"):
      with open(os.path.join(REPO_ROOT, name), encoding="utf-8") as f:
        if re.search(r"\bFLAGS\b|flags\.DEFINE", f.read()):
          readers.append(name)
  assert readers == []


@pytest.mark.parametrize("changes,message", [
    (dict(num_workers=0), "--num_workers must be >= 1, got 0"),
    (dict(shard_size_mb=0.0), "--shard_size_mb must be > 0, got 0.0"),
    (dict(max_sequences_per_pack=0),
     "--max_sequences_per_pack must be >= 1, got 0"),
    (dict(short_seq_prob=math.inf), "--short_seq_prob=inf is not a finite "
     "number"),
])
def test_data_creation_ranges_are_written_once_too(changes, message):
  from bertkit.data import creation_options
  with pytest.raises(UserError) as e:
    creation_options.CreationOptions(input_file="in.txt",
                                     vocab_file="vocab.txt", **changes)
  assert str(e.value) == message
