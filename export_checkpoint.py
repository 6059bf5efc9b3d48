"""Exports a trained model for use outside this toolkit.

From a checkpoint of run_pretraining.py, run_classifier.py, run_squad.py,
run_ner.py, run_swag.py or run_rerank.py (the head is read from its variables), or from a
Hugging Face BERT directory (a BertModel, with no head, is exported as the
encoder alone). A training output_dir, Google's and Hugging Face's
directories hold the model's config, vocab and casing
(bertkit/engine/checkpointing/run_directory.py): --bert_config_file,
--vocab_file and --do_lower_case may then be left out. Writes each requested
format to its own sub-directory of --output_dir:

  google/        bert_model.ckpt.{index,data-*} with the model's weights only
                 (no optimizer slots, loss scale or step counter),
                 bert_config.json, vocab.txt: the layout of Google's released
                 models, for upstream's run_classifier, --init_checkpoint and
                 Hugging Face's load_tf_weights_in_bert.
  huggingface/   config.json, model.safetensors, vocab.txt and the tokenizer
                 files: `from_pretrained` loads it as BertForPreTraining,
                 BertForSequenceClassification (num_labels=1 and
                 problem_type "regression" for a regression head) or
                 BertForQuestionAnswering, BertForTokenClassification
                 (run_ner.py; id2label from its labels.txt),
                 BertForMultipleChoice (run_swag.py),
                 BertForSequenceClassification with num_labels=1 (run_rerank.py:
                 the relevance logit; CrossEncoder's score is its sigmoid)
                 (BertForMaskedLM for a model pretrained without
                 next-sentence prediction), no conversion step.
  saved_model/   a TF SavedModel whose `serving_default` signature takes int32
                 input_ids, input_mask, segment_ids [B, S] and returns
                 pooled_output [B, H] + sequence_output [B, S, H]
                 (pretraining), probabilities [B, C] (classifier),
                 predictions [B] (a regression head: one output, STS-B),
                 start_logits + end_logits [B, S] (SQuAD), logits
                 [B, S, C] (NER) or, from input_ids, input_mask and
                 segment_ids [B, C, S] (C choices), logits [B, C]
                 (multiple choice), scores [B] (re-ranker: the logit).

Everything is built in a temporary directory next to --output_dir and renamed
to it when complete. Needs NumPy and safetensors, not PyTorch.
"""

import dataclasses
import json
import os
import shutil
from typing import Optional, Tuple
import uuid

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import file_patterns
from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common import programs
from bertkit.common.errors import UserError
from bertkit.common.option_fields import REQUIRED, option
import tokenization

# Nothing above imports TensorFlow: the options and files are checked (run)
# before it is, in the functions that need it, so that a bad flag is refused
# at once.
# pylint: disable=g-import-not-at-top

FORMATS = ("google", "huggingface", "saved_model")
SPECIAL_TOKENS = {"unk_token": tokenization.UNK_TOKEN,
                  "sep_token": tokenization.SEP_TOKEN,
                  "pad_token": tokenization.PAD_TOKEN,
                  "cls_token": tokenization.CLS_TOKEN,
                  "mask_token": tokenization.MASK_TOKEN}

@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportOptions(options.ModelFiles):
  """What export_checkpoint.py is told. The vocab is needed by the google
  and huggingface formats; the casing is written to the Hugging Face
  tokenizer config."""
  checkpoint: str = option(
      REQUIRED, "A training --output_dir (its latest checkpoint), a "
      "checkpoint prefix, or a Hugging Face BERT directory (config.json, "
      "model.safetensors); the config, vocab and casing it holds stand for "
      "the flags.")
  output_dir: str = option(REQUIRED, "Where the formats' sub-directories "
                           "go.")
  format: Tuple[str, ...] = option(
      FORMATS, "Comma-separated formats to write: %s." % ", ".join(FORMATS))
  labels: Optional[Tuple[str, ...]] = option(
      None, "Classifier checkpoints: the class names in output order.",
      unset="the labels.txt the training program wrote next to the "
      "checkpoint, else LABEL_0, LABEL_1, ...")
  overwrite: bool = option(False, "Replace a non-empty --output_dir (never "
                           "one that is or holds what the export reads).")

  def __post_init__(self):
    option_fields.check_fields(self)


def parse_formats(values, name="--format"):
  """The requested formats, in FORMATS order, each once.

  Args:
    values: the formats named.
    name: what named them, for the message: the flag, or the scripts'
      EXPORT_FORMAT setting (scripts/settings.sh asks this function).

  Raises:
    UserError: a format is unknown, or none is named.
  """
  formats = [v.strip() for v in values or [] if v.strip()]
  unknown = [f for f in formats if f not in FORMATS]
  if unknown or not formats:
    raise UserError("%s=%s: unknown format %s; choose from %s" %
                    (name, ",".join(values or []),
                     ", ".join(unknown) or "(none given)", ",".join(FORMATS)))
  return [f for f in FORMATS if f in formats]


def class_labels(labels, head, num_labels):
  """The class names of a labelled head (None for any other).

  Raises:
    UserError: --labels given for a head without labels, or of the wrong
      count.
  """
  if not head.labelled:
    if labels:
      raise UserError("--labels is for classifier checkpoints; this one has "
                      "the %s head" % head.name)
    return None
  if not labels:
    return ["LABEL_%d" % i for i in range(num_labels)]
  labels = [label.strip() for label in labels]
  if len(labels) != num_labels or len(set(labels)) != len(labels):
    raise UserError("--labels=%s names %d distinct label(s), but the "
                    "classifier has %d outputs" %
                    (",".join(labels), len(set(labels)), num_labels))
  return labels


def check_output_dir(output_dir, overwrite, read=()):
  """Refuses an --output_dir the export may not replace.

  Checked first, --overwrite or not: one that is, or holds, what the export
  reads (replacing it would delete the model exported); then a non-empty one
  without --overwrite, or a file.

  Args:
    output_dir: the --output_dir.
    overwrite: --overwrite.
    read: (flag, path) of each input: --checkpoint (a directory, or a
      prefix, whose directory counts), --bert_config_file, --vocab_file.

  Raises:
    UserError: naming the input the --output_dir is or holds.
  """
  for flag, path in read:
    kept = input_kept_from(output_dir, flag, path)
    if kept:
      raise UserError(kept)
  if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
    raise UserError("--output_dir %s is not empty; pass --overwrite to "
                    "replace it" % output_dir)
  if os.path.exists(output_dir) and not os.path.isdir(output_dir):
    raise UserError("--output_dir %s exists and is not a directory" %
                    output_dir)


def input_kept_from(output_dir, flag, path):
  """The refusal of an --output_dir that is, or holds, the input `path`
  (given as --`flag`), or None. Real paths are compared, symlinks
  resolved; a checkpoint prefix stands for its directory."""
  if not path or atomic_io.is_url(path) or atomic_io.is_url(output_dir):
    return None
  what = "--%s %s" % (flag, path)
  if flag == "checkpoint" and os.path.isdir(path):
    what = "the --checkpoint directory %s" % path
  elif flag == "checkpoint":
    prefix, path = path, os.path.dirname(path) or "."
    what = "the directory %s of --checkpoint %s" % (path, prefix)
  output, read = os.path.realpath(output_dir), os.path.realpath(path)
  if os.path.commonpath([output, read]) != output:
    return None
  return ("--output_dir %s %s %s, which the export reads: replacing it "
          "would delete it (--overwrite or not); give another --output_dir, "
          "e.g. %s" % (output_dir, "is" if output == read else "holds", what,
                       os.path.join(path if os.path.isdir(read) else
                                    os.path.dirname(path), "export")))


def exported_inputs(checkpoint, bert_config_file, vocab_file):
  """check_output_dir's `read`: the inputs named on the command line."""
  return (("checkpoint", checkpoint), ("bert_config_file", bert_config_file),
          ("vocab_file", vocab_file))


def write_google(directory, weights, bert_config_file, bert_config,
                 vocab_file):
  """google/: bert_model.ckpt, bert_config.json, vocab.txt.

  bert_config.json is a copy of `bert_config_file`, or `bert_config` written
  out when there is no file (a Hugging Face --checkpoint's config).
  """
  from bertkit.engine.checkpointing import checkpoint_formats
  os.makedirs(directory)
  checkpoint_formats.write_checkpoint(
      os.path.join(directory, "bert_model.ckpt"), weights)
  config_path = os.path.join(directory, "bert_config.json")
  if bert_config_file:
    shutil.copyfile(bert_config_file, config_path)
  else:
    with open(config_path, "w", encoding="utf-8") as f:
      f.write(bert_config.to_json_string())
  shutil.copyfile(vocab_file, os.path.join(directory, "vocab.txt"))


def write_json(path, value):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2, sort_keys=True)
    f.write("\n")


def write_huggingface(directory, weights, table, bert_config, head, labels,
                      vocab_file, do_lower_case):
  """huggingface/: what `from_pretrained` and `AutoTokenizer` read."""
  from safetensors.numpy import save_file
  from bertkit.engine.checkpointing import checkpoint_formats
  os.makedirs(directory)
  save_file(checkpoint_formats.to_hf_state(weights, table),
            os.path.join(directory, checkpoint_formats.HF_WEIGHTS),
            metadata={"format": "pt"})
  write_json(os.path.join(directory, checkpoint_formats.HF_CONFIG),
             checkpoint_formats.hf_config(bert_config, head, labels))
  shutil.copyfile(vocab_file, os.path.join(directory, "vocab.txt"))
  tokenizer_config = dict(SPECIAL_TOKENS)
  tokenizer_config.update({
      "tokenizer_class": "BertTokenizer",
      "do_lower_case": do_lower_case,
      # BERT's basic tokenizer strips accents exactly when it lower-cases.
      "strip_accents": None,
      "tokenize_chinese_chars": True,
      "model_max_length": bert_config.max_position_embeddings,
      "clean_up_tokenization_spaces": True})
  write_json(os.path.join(directory, "tokenizer_config.json"),
             tokenizer_config)
  write_json(os.path.join(directory, "special_tokens_map.json"),
             SPECIAL_TOKENS)


def write_saved_model(directory, weights, bert_config, head, num_labels):
  """saved_model/: the serving_default signature over modeling.BertModel,
  with the outputs head.serving builds (the encoder's without one)."""
  import importlib
  import tensorflow.compat.v1 as tf
  import modeling
  with tf.Graph().as_default(), tf.Session() as sess:
    inputs = {name: tf.placeholder(tf.int32, [None] * head.input_rank,
                                   name=name)
              for name in ("input_ids", "input_mask", "segment_ids")}
    if head.serving:
      module, function = head.serving.split(":")
      outputs = getattr(importlib.import_module(module), function)(
          bert_config, inputs["input_ids"], inputs["input_mask"],
          inputs["segment_ids"], num_labels)
    else:
      model = modeling.BertModel(
          config=bert_config, is_training=False,
          input_ids=inputs["input_ids"], input_mask=inputs["input_mask"],
          token_type_ids=inputs["segment_ids"])
      outputs = {"pooled_output": model.get_pooled_output(),
                 "sequence_output": model.get_sequence_output()}
    for var in tf.global_variables():
      var.load(weights[var.op.name], sess)
    builder = tf.saved_model.builder.SavedModelBuilder(directory)
    signature = tf.saved_model.signature_def_utils.predict_signature_def(
        inputs=inputs, outputs=outputs)
    builder.add_meta_graph_and_variables(
        sess, [tf.saved_model.tag_constants.SERVING],
        signature_def_map={"serving_default": signature},
        strip_default_attrs=True)
    builder.save()


def export(checkpoint, bert_config_file, vocab_file, do_lower_case,
           output_dir, formats, labels=None, overwrite=False):
  """Exports `checkpoint` in `formats` to sub-directories of `output_dir`.

  Args:
    checkpoint: a training output directory, a checkpoint prefix or a
      Hugging Face BERT directory.
    bert_config_file: path of bert_config.json; None: the one the
      checkpoint's directory holds (run_directory.resolve).
    vocab_file: path of vocab.txt; None: the checkpoint directory's (none
      at all only for saved_model alone).
    do_lower_case: whether the model is uncased; None: as the checkpoint's
      directory says, else True.
    output_dir: the directory to create (or replace, with `overwrite`).
    formats: a list from FORMATS.
    labels: class names of a classifier, or None (labels.txt next to the
      checkpoint or a Hugging Face config's id2label, else LABEL_i).
    overwrite: replace a non-empty output_dir.

  Returns:
    (checkpoint prefix or Hugging Face directory, heads.Head): what was
    exported.

  Raises:
    UserError: any input does not fit; nothing is written then.
  """
  import tensorflow.compat.v1 as tf
  from bertkit.engine.checkpointing import checkpoint_formats
  from bertkit.engine.checkpointing import checkpoints
  from bertkit.engine.checkpointing import run_directory
  from bertkit.tasks.fine_tuning import driver
  hf_dir = checkpoint if checkpoint_formats.is_hf_dir(checkpoint) else None
  prefix = None if hf_dir else checkpoints.resolve(checkpoint, "checkpoint")
  model = run_directory.resolve(checkpoint, bert_config_file, vocab_file,
                                do_lower_case, flag="checkpoint")
  bert_config, vocab_file = model.bert_config, model.vocab_file
  if {"google", "huggingface"} & set(formats):
    model.require_vocab(" for the google and huggingface formats")
    tokenization.check_vocab_fits_config(vocab_file, bert_config.vocab_size)
  output_dir = os.path.abspath(output_dir)
  # The vocab may be the checkpoint directory's: it is read too.
  check_output_dir(output_dir, overwrite, exported_inputs(
      checkpoint, bert_config_file, vocab_file))
  if hf_dir:
    prefix = checkpoint_formats.converted_hf_checkpoint(hf_dir)
  shapes = dict(tf.train.list_variables(prefix))
  head, num_labels = checkpoint_formats.detect_head(shapes)
  if not labels and head.labelled:
    labels = (checkpoint_formats.hf_labels(hf_dir) if hf_dir else
              driver.read_labels(os.path.dirname(prefix)))
  labels = class_labels(labels, head, num_labels)
  table = checkpoint_formats.weight_table(bert_config, head, num_labels)
  weights = checkpoint_formats.model_weights(prefix, table)
  source = hf_dir or prefix
  logging.info("Exporting %s (%s head, %d weights) to %s: %s", source,
               head.name, len(weights), output_dir, ", ".join(formats))

  building = _building_dir(output_dir)
  try:
    os.makedirs(building)
    if "google" in formats:
      write_google(os.path.join(building, "google"), weights,
                   bert_config_file, bert_config, vocab_file)
      logging.info("Wrote google/ (bert_model.ckpt, bert_config.json, "
                   "vocab.txt)")
    if "huggingface" in formats:
      write_huggingface(os.path.join(building, "huggingface"), weights, table,
                        bert_config, head, labels, vocab_file,
                        model.do_lower_case)
      logging.info("Wrote huggingface/ (%s)", head.hf_architecture)
    if "saved_model" in formats:
      write_saved_model(os.path.join(building, "saved_model"), weights,
                        bert_config, head, num_labels)
      logging.info("Wrote saved_model/ (serving_default)")
    _replace_dir(building, output_dir)
  except BaseException:
    shutil.rmtree(building, ignore_errors=True)
    raise
  return source, head


def _building_dir(output_dir):
  """A fresh name next to `output_dir` to build the export in; removes those
  a killed export left."""
  parent = os.path.dirname(output_dir)
  os.makedirs(parent, exist_ok=True)
  # Not "*.partial-*": the training programs delete those as stale files
  # from their output_dir, and run_pre.sh exports into it.
  stale_prefix = os.path.basename(output_dir) + ".building-"
  for name in os.listdir(parent):
    if name.startswith(stale_prefix):  # left by a killed export
      shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
  return os.path.join(parent, stale_prefix + uuid.uuid4().hex[:8])


def _replace_dir(new, target):
  """Renames `new` to `target`, removing an old `target` only afterwards."""
  old = None
  if os.path.exists(target):
    old = "%s.old-%s" % (target, uuid.uuid4().hex[:8])
    os.rename(target, old)
  os.rename(new, target)
  if old:
    shutil.rmtree(old)


def run(opts):
  """Exports the model `opts` (ExportOptions) name; prints what it wrote."""
  formats = parse_formats(opts.format)
  # --bert_config_file and --vocab_file: export takes those the --checkpoint
  # directory holds when they are not given.
  file_patterns.check_paths(opts)
  check_output_dir(opts.output_dir, opts.overwrite, exported_inputs(
      opts.checkpoint, opts.bert_config_file, opts.vocab_file))
  prefix, head = export(opts.checkpoint, opts.bert_config_file,
                        opts.vocab_file, opts.do_lower_case, opts.output_dir,
                        formats, opts.labels, opts.overwrite)
  print("Exported %s (%s) to %s:" % (prefix, head.name, opts.output_dir))
  for name in formats:
    print("  %s" % os.path.join(opts.output_dir, name))


if __name__ == "__main__":
  programs.main(ExportOptions, run)
