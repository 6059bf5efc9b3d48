# coding=utf-8
"""What the fine-tuning programs (run_classifier.py, run_squad.py) share."""

from bertkit.common.errors import UserError
from bertkit.engine import run_directory
import modeling
import tokenization


def load_checked_model(opts):
  """The model of a fine-tuning run, once the sequence length and the vocab
  fit it.

  Its config, vocab and casing are the flags', or what the --init_checkpoint
  directory (or the --output_dir resumed) says (run_directory.resolve).

  Args:
    opts: an options.FineTuningOptions (or a subclass).

  Returns:
    A run_directory.Model whose vocab_file is set.

  Raises:
    UserError: no config or vocab anywhere, a flag that disagrees with the
      directory, or a sequence length or vocab the model cannot take.
  """
  model = run_directory.resolve(
      opts.run.init_checkpoint, opts.bert_config_file, opts.vocab_file,
      opts.do_lower_case, output_dir=opts.run.output_dir)
  modeling.check_seq_length_fits(model.bert_config, opts.max_seq_length)
  tokenization.check_vocab_fits_config(model.require_vocab(),
                                       model.bert_config.vocab_size)
  return model


def train_steps(num_examples, train_batch_size, num_train_epochs,
                warmup_proportion):
  """(num_train_steps, num_warmup_steps), as upstream computes them.

  Raises:
    UserError: the examples make no whole step.
  """
  num_train_steps = int(num_examples / train_batch_size * num_train_epochs)
  if num_train_steps < 1:
    raise UserError("%d training examples at --train_batch_size=%d for "
                    "--num_train_epochs=%s make no whole step" %
                    (num_examples, train_batch_size, num_train_epochs))
  return num_train_steps, int(num_train_steps * warmup_proportion)
