"""The flags several programs take, each defined here once.

A program calls the `define_*` of every group it takes, in its own
define_flags; what differs between programs is an argument (the sequence
length's default), never a second definition. `require` is the one check of
flags without which a program cannot start.
"""

import os

from absl import flags

from bertkit.common import atomic_io
from bertkit.common import options
from bertkit.common.errors import UserError

# The fine-tuning flags' defaults are the options'.
FINE_TUNING = options.FineTuningOptions



def define_bert_config_file():
  """--bert_config_file: the model's shape."""
  flags.DEFINE_string("bert_config_file", None,
                      "bert_config.json of the model; optional when "
                      "--init_checkpoint (export_checkpoint: --checkpoint) "
                      "is a directory holding the config: a training "
                      "output_dir, Google's or Hugging Face's.")


def define_vocab_file():
  """--vocab_file: the model's WordPiece vocab."""
  flags.DEFINE_string("vocab_file", None,
                      "The WordPiece vocab.txt the model was (or is) trained "
                      "with; optional when the checkpoint read is a "
                      "directory holding vocab.txt.")


def define_do_lower_case():
  """--do_lower_case: one value for the vocab, the records and the model."""
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case and strip accents: True for uncased models, "
                    "False for cased ones. The vocab, the records and the "
                    "model must agree. Not given: what the checkpoint's "
                    "directory says (tokenizer_config.json), else True.")


def define_max_seq_length(default):
  """--max_seq_length with this program's default (128, SQuAD's 384)."""
  flags.DEFINE_integer("max_seq_length", default,
                       "Sequence length S after WordPiece tokenization: "
                       "longer inputs are truncated, shorter padded.")


def define_masking_rate():
  """--masked_lm_prob, --max_predictions_per_seq and --do_whole_word_mask."""
  flags.DEFINE_float("masked_lm_prob", options.MASKED_LM_PROB,
                     "Fraction of a sequence's tokens masked.")
  flags.DEFINE_integer("max_predictions_per_seq",
                       options.MAX_PREDICTIONS_PER_SEQ,
                       "Masked positions per sequence (P): the records' "
                       "slots, at most this many masked.")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "Mask all WordPieces of a word together rather than "
                    "each WordPiece on its own.")


def define_evaluation():
  """--do_eval and --eval_batch_size."""
  flags.DEFINE_bool("do_eval", False,
                    "Whether to evaluate (pretraining: the input records; "
                    "fine-tuning: the dev set).")
  flags.DEFINE_integer("eval_batch_size", FINE_TUNING.eval_batch_size,
                       "Total batch size for eval.")


def define_fine_tuning():
  """The fine-tuning programs' prediction and epoch flags."""
  flags.DEFINE_bool("do_predict", False,
                    "Whether to predict the test set (SQuAD: --predict_file, "
                    "evaluated too).")
  flags.DEFINE_integer("predict_batch_size", FINE_TUNING.predict_batch_size,
                       "Total batch size for predict.")
  flags.DEFINE_float("num_train_epochs", FINE_TUNING.num_train_epochs,
                     "Epochs of training.")
  flags.DEFINE_float("warmup_proportion", FINE_TUNING.warmup_proportion,
                     "Fraction of the training steps with linear warm-up.")


def given(flag_values, name):
  """A flag's value when it was given on the command line, else None.

  A boolean flag always has a value; this tells "--do_lower_case" from its
  default, which a directory's own casing may then stand for.
  """
  return getattr(flag_values, name) if flag_values[name].present else None


def require(flag_values, names):
  """Raises UserError naming the first of `names` that is not set.

  Args:
    flag_values: the parsed flags (absl's FLAGS).
    names: flag names in the order a user should hear of them.

  Raises:
    UserError: "--NAME is required" for the first flag that is None or empty.
  """
  for name in names:
    if getattr(flag_values, name) in (None, "", []):
      raise UserError("--%s is required" % name)


def check_local_files(values, names):
  """Raises UserError for a flag naming a local file that is not there.

  The programs call it before importing TensorFlow, so a mistyped path is
  refused at once; a URL is checked when it is read (tf.io.gfile).

  Args:
    values: a program's options (or its parsed flags).
    names: names of the flags (fields) holding one file's path (None or "":
      not given).

  Raises:
    UserError: "--NAME PATH: no such file" for the first one missing.
  """
  for name in names:
    path = getattr(values, name)
    if path and not atomic_io.is_url(path) and not os.path.isfile(path):
      raise UserError("--%s %s: no such file" % (name, path))


def check_data_dir(data_dir):
  """Raises UserError when --data_dir is not a directory (local or URL)."""
  if not (atomic_io.gfile().isdir(data_dir) if atomic_io.is_url(data_dir)
          else os.path.isdir(data_dir)):
    raise UserError("--data_dir %s is not a directory" % data_dir)


def stage_splits(values):
  """The splits a fine-tuning run's --do_train, --do_eval and --do_predict
  read, in that order: train, dev, test."""
  return [split for split, wanted in (("train", values.do_train),
                                      ("dev", values.do_eval),
                                      ("test", values.do_predict)) if wanted]
