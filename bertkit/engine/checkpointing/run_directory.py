"""The model a directory describes: its config, its vocab and its casing.

Three layouts describe the model next to its weights:

  a training --output_dir of this toolkit  bert_config.json (our activation
                  names), vocab.txt and tokenizer_config.json
                  ({"do_lower_case": ...}), written by every training program
                  (`write_description`) next to its checkpoints;
  Google's model directories  bert_config.json and vocab.txt next to
                  bert_model.ckpt (no casing);
  Hugging Face directories  config.json (its activation names,
                  checkpoint_formats.hf_bert_config), vocab.txt and
                  tokenizer_config.json.

A checkpoint prefix is described by its directory. `resolve` is the one
place a program learns its model: from the flags, from the directory of the
checkpoint it reads (which the flags may then leave out, and must agree with
when given), and from the description already in the --output_dir it resumes
(which the run must agree with).
"""

import dataclasses
import json
import os
from typing import Any, Optional

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.checkpointing import checkpoints
import modeling
import tokenization

CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
# Hugging Face's file of the tokenizer's settings, so that one reader
# (_read_casing) serves both layouts.
CASING_FILE = "tokenizer_config.json"

# The fields that decide the function a model computes: a config given
# beside a described directory must agree with it on these. Dropout and
# initializer_range are training settings, taken from the file given.
MODEL_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size", "hidden_act",
                "max_position_embeddings", "type_vocab_size")


@dataclasses.dataclass(frozen=True)
class Description:
  """What a directory says about its model; None where it says nothing.

  Attributes:
    name: the directory as messages name it, e.g. "--init_checkpoint out/x"
      or "the Hugging Face --checkpoint hf/".
    config_name: the file holding the config there (config.json or
      bert_config.json).
    bert_config: modeling.BertConfig, or None.
    vocab_file: the path of its vocab.txt, or None.
    do_lower_case: its casing, or None.
    is_hf: a Hugging Face directory (its activation names differ).
  """
  name: str
  config_name: str
  bert_config: Any = None
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None
  is_hf: bool = False


@dataclasses.dataclass(frozen=True)
class Model:
  """The model a program trains or reads, with where each part came from.

  Attributes:
    bert_config: modeling.BertConfig.
    config_source: where it came from, for messages ("--bert_config_file
      x.json", "the bert_config.json of --init_checkpoint out/x").
    vocab_file: the vocab's path, or None when neither a flag nor the
      directory names one.
    do_lower_case: the casing: stated by the flag or the directory, else
      upstream's default, True.
    casing_stated: whether a flag or the directory stated it; only a
      stated casing is written into a run's description.
  """
  bert_config: Any
  config_source: str
  vocab_file: Optional[str]
  do_lower_case: bool
  casing_stated: bool

  def require_vocab(self, why=""):
    """The vocab's path.

    Args:
      why: what needs it, appended to the message.

    Raises:
      UserError: there is none.
    """
    if not self.vocab_file:
      raise UserError("--vocab_file is required%s (it may be left out when "
                      "the checkpoint read is a directory holding %s)" %
                      (why, VOCAB_FILE))
    return self.vocab_file


def _read_casing(directory):
  """do_lower_case of a directory's CASING_FILE, or None when there is none
  or it does not say."""
  path = os.path.join(directory, CASING_FILE)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      value = json.load(f).get("do_lower_case")
  except (ValueError, AttributeError):
    return None
  return value if isinstance(value, bool) else None


def describe(path, flag):
  """What the directory of a checkpoint flag's value says about its model.

  Args:
    path: a directory (training output_dir, Google's or Hugging Face's) or
      a checkpoint prefix, whose directory is read.
    flag: the flag's name, for messages.

  Returns:
    A Description (its fields None where the directory says nothing).
  """
  directory = (path if tf.io.gfile.isdir(path) else
               os.path.dirname(path) or ".")
  vocab = os.path.join(directory, VOCAB_FILE)
  vocab = vocab if tf.io.gfile.exists(vocab) else None
  if checkpoint_formats.is_hf_dir(path):
    return Description(
        name="the Hugging Face --%s %s" % (flag, path),
        config_name=checkpoint_formats.HF_CONFIG,
        bert_config=checkpoint_formats.hf_bert_config(path),
        vocab_file=vocab, do_lower_case=_read_casing(path), is_hf=True)
  config = os.path.join(directory, CONFIG_FILE)
  return Description(
      name="--%s %s" % (flag, path), config_name=CONFIG_FILE,
      bert_config=(modeling.BertConfig.from_json_file(config)
                   if tf.io.gfile.exists(config) else None),
      vocab_file=vocab, do_lower_case=_read_casing(directory))


def config_difference(config, other):
  """The first of MODEL_FIELDS in which two configs differ, or None.

  Activations are compared as the functions they name.

  Returns:
    (field, config's value, other's value), or None.
  """
  for field in MODEL_FIELDS:
    ours, theirs = getattr(config, field), getattr(other, field)
    if field == "hidden_act":
      same = modeling.get_activation(ours) is modeling.get_activation(theirs)
    else:
      same = ours == theirs
    if not same:
      return field, ours, theirs
  return None


def _shown(field, value, description):
  """A described config's value as messages show it: a Hugging Face
  activation also in Hugging Face's name."""
  if field == "hidden_act" and description.is_hf:
    return "%r (Hugging Face's %r)" % (
        value, checkpoint_formats.HF_ACTIVATIONS[value])
  return repr(value)


def vocab_difference(vocab_file, other_file):
  """How two vocab files differ, or None when they hold the same tokens.

  Returns:
    (what, vocab_file's, other_file's): ("size", n, m) or
    ("token %d" % id, token, token) for the first id whose token differs.
  """
  if os.path.abspath(vocab_file) == os.path.abspath(other_file):
    return None
  ours, theirs = (tokenization.load_vocab(f) for f in (vocab_file, other_file))
  if ours == theirs:
    return None
  ours_by_id, theirs_by_id = ({i: t for t, i in v.items()}
                              for v in (ours, theirs))
  size = max(max(ours_by_id), max(theirs_by_id)) + 1
  for i in range(size):
    if ours_by_id.get(i) != theirs_by_id.get(i):
      if i in ours_by_id and i in theirs_by_id:
        return "token %d" % i, ours_by_id[i], theirs_by_id[i]
      break
  return "size", len(ours), len(theirs)


def _config(bert_config_file, described):
  """(BertConfig, its source): the file's, checked against the
  directory's, else the directory's."""
  there = described.bert_config if described else None
  if not bert_config_file:
    if there is None:
      raise UserError(
          "--bert_config_file is required (it may be left out when the "
          "checkpoint read is a training output directory, a Google model "
          "directory or a Hugging Face directory: they hold the config)")
    return there, "the %s of %s" % (described.config_name, described.name)
  config = modeling.BertConfig.from_json_file(bert_config_file)
  difference = there and config_difference(config, there)
  if difference:
    field, ours, theirs = difference
    raise UserError(
        "--bert_config_file %s says %s %r, but the %s of %s says %s; leave "
        "out --bert_config_file to use it" % (
            bert_config_file, field, ours, described.config_name,
            described.name, _shown(field, theirs, described)))
  return config, "--bert_config_file %s" % bert_config_file


def _vocab(vocab_file, described):
  """The vocab's path: the flag's, checked against the directory's, else
  the directory's (None: neither)."""
  there = described.vocab_file if described else None
  if not vocab_file or not there:
    return vocab_file or there
  difference = vocab_difference(vocab_file, there)
  if difference:
    what, ours, theirs = difference
    raise UserError(
        "--vocab_file %s differs from the %s of %s: %s is %r in the file "
        "but %r there; leave out --vocab_file to use it" % (
            vocab_file, VOCAB_FILE, described.name, what, ours, theirs))
  return vocab_file


def _casing(do_lower_case, described):
  """The casing: the flag's, checked against the directory's, else the
  directory's; None when neither says."""
  there = described.do_lower_case if described else None
  if do_lower_case is not None and there is not None and (
      do_lower_case != there):
    raise UserError(
        "--do_lower_case=%s but the %s of %s says do_lower_case=%s; leave "
        "out --do_lower_case to use it" % (do_lower_case, CASING_FILE,
                                           described.name, there))
  return there if do_lower_case is None else do_lower_case


def _check_google_name(do_lower_case, prefix):
  """Upstream's check of the casing against Google's released model names
  (tokenization.validate_case_matches_checkpoint), as a UserError."""
  try:
    tokenization.validate_case_matches_checkpoint(do_lower_case, prefix)
  except ValueError as e:
    raise UserError(str(e))


def check_same_model(model, description):
  """Refuses a run into an --output_dir that describes another model.

  Args:
    model: the run's Model.
    description: describe(output_dir, "output_dir").

  Raises:
    UserError: the config (a field of MODEL_FIELDS), the vocab or the casing
      differs from what the directory says: the first difference, with both
      values.
  """
  refuse = ("%s holds a run of another model: %s, but %s; use another "
            "--output_dir, or the flags of that run")
  difference = (description.bert_config is not None and
                config_difference(model.bert_config, description.bert_config))
  if difference:
    field, ours, theirs = difference
    raise UserError(refuse % (
        description.name, "its %s says %s %r" % (CONFIG_FILE, field, theirs),
        "%s says %s %r" % (model.config_source, field, ours)))
  difference = (model.vocab_file and description.vocab_file and
                vocab_difference(model.vocab_file, description.vocab_file))
  if difference:
    what, ours, theirs = difference
    raise UserError(refuse % (
        description.name, "its %s has %s %r" % (VOCAB_FILE, what, theirs),
        "the vocab %s has %r" % (model.vocab_file, ours)))
  if (model.casing_stated and description.do_lower_case is not None and
      model.do_lower_case != description.do_lower_case):
    raise UserError(refuse % (
        description.name, "its %s says do_lower_case=%s" % (
            CASING_FILE, description.do_lower_case),
        "this run's is do_lower_case=%s" % model.do_lower_case))


def resolve(checkpoint=None, bert_config_file=None, vocab_file=None,
            do_lower_case=None, flag="init_checkpoint", output_dir=None):
  """The model a program reads or trains: its config, vocab and casing.

  Each comes from its flag when given, else from the directory of
  `checkpoint` (or, without one, from the description of the `output_dir`
  the run resumes), and a flag given beside a directory that says the same
  thing must agree with it. A directory that says nothing (a checkpoint
  written before runs described themselves) leaves everything to the
  flags, as before.

  Args:
    checkpoint: the checkpoint flag's value (a training output_dir, a
      checkpoint prefix, Google's or a Hugging Face directory), or None.
    bert_config_file: --bert_config_file, or None.
    vocab_file: --vocab_file, or None.
    do_lower_case: --do_lower_case when given explicitly, None when not
      (options.ModelFiles).
    flag: the name of the checkpoint flag, for messages.
    output_dir: a training program's --output_dir, or None: when it holds
      a description (a resumed run), the model must be the one described.

  Returns:
    A Model.

  Raises:
    UserError: no checkpoint at `checkpoint` (or unreadable Hugging Face
      weights); no config anywhere; a flag that disagrees with the directory
      (the first differing field, with both values) or, for Google's model
      names, upstream's casing check; a resumed --output_dir describing
      another model (check_same_model).
  """
  described = prefix = None
  if checkpoint:
    # Before anything else, and before anything is written: a checkpoint
    # that is not there, or Hugging Face weights that cannot be read.
    if checkpoint_formats.is_hf_dir(checkpoint):
      prefix = checkpoint_formats.converted_hf_checkpoint(checkpoint)
    else:
      prefix = checkpoints.resolve(checkpoint, flag)
    described = describe(checkpoint, flag)
  resumed = None
  if output_dir and tf.io.gfile.exists(os.path.join(output_dir,
                                                    CONFIG_FILE)):
    resumed = describe(output_dir, "output_dir")
  if described is None or described.bert_config is None and resumed:
    described, resumed = resumed, None
  bert_config, source = _config(bert_config_file, described)
  casing = _casing(do_lower_case, described)
  model = Model(bert_config=bert_config, config_source=source,
                vocab_file=_vocab(vocab_file, described),
                do_lower_case=True if casing is None else casing,
                casing_stated=casing is not None)
  if prefix:
    _check_google_name(model.do_lower_case, prefix)
  if resumed:
    check_same_model(model, resumed)
  logging.info("Model: config from %s, vocab %s, do_lower_case=%s%s",
               source, model.vocab_file, model.do_lower_case,
               "" if model.casing_stated else " (the default)")
  return model


def write_description(output_dir, model):
  """Writes the model's description into a training --output_dir.

  bert_config.json (the activation in our names), a copy of the vocab and
  tokenizer_config.json with the casing, each atomically and only when
  missing; bert_config.json last, so that a directory holding it is
  described. The chief calls it once the model is checked (runner.prepare):
  an existing description was compared with the model by `resolve`.

  Args:
    output_dir: the run's --output_dir.
    model: the Model it trains.
  """
  tf.io.gfile.makedirs(output_dir)
  files = []
  if model.vocab_file:
    with atomic_io.open_file(model.vocab_file, "rb") as f:
      files.append((VOCAB_FILE, f.read(), "wb"))
  if model.casing_stated:
    files.append((CASING_FILE, json.dumps(
        {"do_lower_case": model.do_lower_case}, indent=2) + "\n", "w"))
  files.append((CONFIG_FILE, model.bert_config.to_json_string(), "w"))
  for name, content, mode in files:
    path = os.path.join(output_dir, name)
    if not atomic_io.exists(path):
      with atomic_io.atomic_open(path, mode) as f:
        f.write(content)
