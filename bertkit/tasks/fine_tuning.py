# coding=utf-8
"""What the fine-tuning programs (run_classifier.py, run_squad.py) share."""

from bertkit.common.errors import UserError
from bertkit.engine import checkpoint_formats
from bertkit.engine import checkpoints
import modeling
import tokenization


def load_checked_config(bert_config_file, max_seq_length, vocab_file,
                        do_lower_case, init_checkpoint):
  """The BertConfig, once the sequence length, the vocab and the casing fit it.

  The config is --bert_config_file's, or the config.json of a Hugging Face
  --init_checkpoint (checkpoints.resolve_bert_config).

  Raises:
    UserError: one of them does not fit the model (or its checkpoint), or
      no config is given.
  """
  bert_config = checkpoints.resolve_bert_config(bert_config_file,
                                                init_checkpoint)
  modeling.check_seq_length_fits(bert_config, max_seq_length)
  tokenization.check_vocab_fits_config(vocab_file, bert_config.vocab_size)
  check_case(do_lower_case, init_checkpoint)
  return bert_config


def check_case(do_lower_case, init_checkpoint):
  """tokenization.validate_case_matches_checkpoint, as a UserError.

  A Hugging Face directory states its casing in tokenizer_config.json.
  """
  if not init_checkpoint:
    return
  hf_case = checkpoint_formats.hf_do_lower_case(init_checkpoint)
  if hf_case is not None and hf_case != do_lower_case:
    raise UserError(
        "--do_lower_case=%s but the Hugging Face model %s was trained with "
        "do_lower_case=%s (its tokenizer_config.json); pass "
        "--do_lower_case=%s" % (do_lower_case, init_checkpoint, hf_case,
                                hf_case))
  try:
    tokenization.validate_case_matches_checkpoint(
        do_lower_case, checkpoints.resolve_init_checkpoint(init_checkpoint))
  except ValueError as e:
    raise UserError(str(e))


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
