# coding=utf-8
"""Sentence embeddings: token vectors pooled into one vector per input line.

The pooling rules and their masking are sentence-transformers' (its
`Pooling` and `Normalize` modules), so that a sentence-transformers model
read here gives the vectors `SentenceTransformer(dir).encode` gives:

  cls   the vector of the first token, [CLS];
  mean  the mean over the real tokens ([CLS] and [SEP] included), padding
        left out; the count is clamped at 1e-9 as sentence-transformers
        clamps it;
  max   the element-wise maximum over the real tokens, padding set to -inf
        first (older sentence-transformers releases set it to -1e9; every
        row has [CLS] and [SEP], so both give the same maximum).

Normalising divides by the L2 norm, at least 1e-12 (torch's
F.normalize). `model_pooling` reads a sentence-transformers directory's
modules.json, 1_Pooling/config.json and sentence_bert_config.json.

Shape notation: B = batch, S = sequence length, H = hidden size.
"""

import dataclasses
import json
import os
from typing import Optional

import tensorflow.compat.v1 as tf

from bertkit.common import text_files
from bertkit.common.errors import UserError

CLS = "cls"
MEAN = "mean"
MAX = "max"
RULES = (CLS, MEAN, MAX)

# sentence-transformers' module types (modules.json) this toolkit computes.
_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
# 1_Pooling/config.json's older boolean keys -> the rule each turns on, in
# the order sentence-transformers reads them.
_LEGACY_MODE_KEYS = (("pooling_mode_cls_token", CLS),
                     ("pooling_mode_max_tokens", MAX),
                     ("pooling_mode_mean_tokens", MEAN),
                     ("pooling_mode_mean_sqrt_len_tokens",
                      "mean_sqrt_len_tokens"),
                     ("pooling_mode_weightedmean_tokens", "weightedmean"),
                     ("pooling_mode_lasttoken", "lasttoken"))


@dataclasses.dataclass(frozen=True)
class ModelPooling:
  """What a sentence-transformers directory says about its sentence vectors.

  Attributes:
    rule: one of RULES, or None when the directory computes its vectors
      otherwise than this program can (`unsupported` says how).
    normalize: whether a Normalize module follows the pooling.
    max_seq_length: the tokens it encodes at most (sentence_bert_config.json),
      or None when it does not say.
    unsupported: None, or the message refusing --pooling=model.
  """
  rule: Optional[str]
  normalize: bool
  max_seq_length: Optional[int]
  unsupported: Optional[str] = None


def pool(sequence_output, input_mask, rule):
  """One vector per row, as sentence-transformers' Pooling computes it.

  Args:
    sequence_output: float32 [B, S, H], a layer's token vectors.
    input_mask: int [B, S], 1 for real tokens, 0 for padding.
    rule: one of RULES.

  Returns:
    float32 [B, H].
  """
  if rule == CLS:
    return sequence_output[:, 0]
  mask = tf.cast(tf.expand_dims(input_mask, -1), sequence_output.dtype)
  if rule == MEAN:
    total = tf.reduce_sum(sequence_output * mask, axis=1)
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1e-9)
    return total / count
  if rule == MAX:
    padded = tf.where(tf.broadcast_to(mask > 0, tf.shape(sequence_output)),
                      sequence_output,
                      tf.fill(tf.shape(sequence_output), float("-inf")))
    return tf.reduce_max(padded, axis=1)
  raise ValueError("unknown pooling rule %r" % rule)


def l2_normalize(vectors):
  """[B, H] vectors divided by their L2 norm (at least 1e-12), as torch's
  F.normalize(p=2, dim=1) does."""
  norm = tf.sqrt(tf.reduce_sum(tf.square(vectors), axis=1, keepdims=True))
  return vectors / tf.maximum(norm, 1e-12)


def _read_json(path):
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      return json.loads(text_files.decode(f.read(), path))
  except ValueError as e:
    raise UserError("%s is not valid JSON (%s)" % (path, e)) from None


def _rule_of(config, path):
  """(rule, None) of a 1_Pooling/config.json, or (None, why not)."""
  modes = config.get("pooling_mode") if isinstance(config, dict) else None
  if modes is None:
    modes = [mode for key, mode in _LEGACY_MODE_KEYS
             if isinstance(config, dict) and config.get(key)]
    # sentence-transformers pools the mean when no mode is switched on.
    modes = modes or [MEAN]
  elif isinstance(modes, str):
    modes = [modes]
  if len(modes) == 1 and modes[0] in RULES:
    return modes[0], None
  return None, (
      "%s asks for pooling %s; this program computes one of %s: pass "
      "--pooling=%s to choose one" % (path, "+".join(map(str, modes)),
                                      ", ".join(RULES), "|".join(RULES)))


def _modules_problem(types, paths, modules_path):
  """Why the modules of modules.json are not ours to compute, or None."""
  if (types[:2] == [_TRANSFORMER, _POOLING] and
      types[2:] in ([], [_NORMALIZE]) and not paths[0]):
    return None
  return ("%s lists the modules %s; --pooling=model computes a Transformer "
          "at the directory's root, then Pooling, then optionally Normalize: "
          "pass --pooling=%s to pool the Transformer's output yourself" % (
              modules_path, ", ".join(str(t).rsplit(".", 1)[-1]
                                      for t in types) or "none",
              "|".join(RULES)))


def model_pooling(model_dir):
  """What a sentence-transformers directory says of its vectors, or None.

  Args:
    model_dir: a directory; a sentence-transformers one has modules.json.

  Returns:
    A ModelPooling, or None when `model_dir` has no modules.json. Its rule
    is None when the modules are not Transformer, Pooling (one rule of
    RULES) and optionally Normalize.

  Raises:
    UserError: its files are not valid JSON.
  """
  modules_path = os.path.join(model_dir, "modules.json")
  if not tf.io.gfile.isdir(model_dir) or not tf.io.gfile.exists(
      modules_path):
    return None
  modules = _read_json(modules_path)
  modules = [m for m in modules if isinstance(m, dict)] if isinstance(
      modules, list) else []
  types = [m.get("type") for m in modules]
  paths = [m.get("path") or "" for m in modules]
  max_seq_length = None
  bert_config_path = os.path.join(model_dir, "sentence_bert_config.json")
  if tf.io.gfile.exists(bert_config_path):
    max_seq_length = _read_json(bert_config_path).get("max_seq_length")
  rule, unsupported = None, _modules_problem(types, paths, modules_path)
  if unsupported is None:
    pooling_path = os.path.join(model_dir, paths[1], "config.json")
    rule, unsupported = _rule_of(_read_json(pooling_path), pooling_path)
  return ModelPooling(rule=rule, normalize=_NORMALIZE in types,
                      max_seq_length=max_seq_length, unsupported=unsupported)
