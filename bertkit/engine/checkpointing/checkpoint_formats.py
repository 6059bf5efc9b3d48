"""BERT weights in other layouts: Hugging Face names, weights-only checkpoints.

One table relates each variable of our models (Google's names,
`bert/encoder/layer_0/attention/self/query/kernel`) to the parameter Hugging
Face transformers' BERT classes hold (`bert.encoder.layer.0.attention.self.
query.weight`). export_checkpoint.py reads it one way, and an
`--init_checkpoint` that is a Hugging Face directory the other way
(`hf_dir_to_checkpoint`, used by checkpoints.resolve_init_checkpoint).
Reading and writing needs NumPy and the `safetensors` package, never
PyTorch. Configs go both ways too (`hf_config`, `hf_bert_config`), with the
activation names translated so that the same function runs: Hugging Face's
"gelu" is the exact erf GELU, BERT's the tanh one.

Shape notation: V = vocabulary size, H = hidden size, I = intermediate size,
P = max_position_embeddings, T = type_vocab_size, C = number of classes.

Module state: the checkpoints this process converted Hugging Face
directories to. `converted_hf_checkpoint` writes a directory's on its first
use and reads it on every later one (run_directory and checkpoints resolve
--init_checkpoint several times a run); the files go at exit.
"""

import atexit
import collections
import json
import os
import shutil
import tempfile

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import heads
from bertkit.common import text_files
from bertkit.common.errors import UserError
import modeling

# Hugging Face's class of a model whose "classifier" layer no head of its
# class claims (or of no class): its sentence classifier's.
_HF_DEFAULT_CLASS = heads.CLASSIFIER.hf_architecture

HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"

# Our bert_config.json "hidden_act" -> the Hugging Face activation computing
# the same function. BERT's gelu is the tanh approximation: HF's "gelu" is the
# exact erf form (our "gelu_exact"), "gelu_new" the tanh one.
HF_ACTIVATIONS = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu",
                  "tanh": "tanh", "linear": "linear"}
# And back: a Hugging Face config.json "hidden_act" -> ours.
FROM_HF_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu",
                       "gelu_pytorch_tanh": "gelu", "relu": "relu",
                       "tanh": "tanh", "linear": "linear"}

# Fields copied unchanged between bert_config.json and HF's config.json.
_SHARED_CONFIG_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
    "max_position_embeddings", "type_vocab_size", "initializer_range")


def _dense(tf_scope, hf_scope, in_size, out_size):
  # TF kernels are [in, out]; torch.nn.Linear weights are [out, in].
  return [(tf_scope + "/kernel", hf_scope + ".weight", [in_size, out_size],
           True),
          (tf_scope + "/bias", hf_scope + ".bias", [out_size], False)]


def _layer_norm(tf_scope, hf_scope, size):
  return [(tf_scope + "/gamma", hf_scope + ".weight", [size], False),
          (tf_scope + "/beta", hf_scope + ".bias", [size], False)]


def weight_table(config, head, num_labels=None):
  """Every weight of a model: our name, Hugging Face's name, shape, transpose.

  Args:
    config: modeling.BertConfig.
    head: a heads.Head (heads.ENCODER for the encoder alone).
    num_labels: C, for a head whose outputs are the checkpoint's
      (head.outputs None: the classifier, token classification).

  Returns:
    A list of (tf_name, hf_name, tf_shape, transpose) in model order;
    `transpose` says the HF array is the transposed TF array. hf_name is
    None for a weight the Hugging Face class does not have (the pooler,
    where head.hf_pooler is False: BertForQuestionAnswering,
    BertForTokenClassification, BertForMaskedLM).
  """
  h, i = config.hidden_size, config.intermediate_size
  table = [
      ("bert/embeddings/word_embeddings",
       "bert.embeddings.word_embeddings.weight", [config.vocab_size, h], False),
      ("bert/embeddings/token_type_embeddings",
       "bert.embeddings.token_type_embeddings.weight",
       [config.type_vocab_size, h], False),
      ("bert/embeddings/position_embeddings",
       "bert.embeddings.position_embeddings.weight",
       [config.max_position_embeddings, h], False),
  ]
  table += _layer_norm("bert/embeddings/LayerNorm", "bert.embeddings.LayerNorm",
                       h)
  for k in range(config.num_hidden_layers):
    tf_layer = "bert/encoder/layer_%d" % k
    hf_layer = "bert.encoder.layer.%d" % k
    for part in ("query", "key", "value"):
      table += _dense("%s/attention/self/%s" % (tf_layer, part),
                      "%s.attention.self.%s" % (hf_layer, part), h, h)
    table += _dense(tf_layer + "/attention/output/dense",
                    hf_layer + ".attention.output.dense", h, h)
    table += _layer_norm(tf_layer + "/attention/output/LayerNorm",
                         hf_layer + ".attention.output.LayerNorm", h)
    table += _dense(tf_layer + "/intermediate/dense",
                    hf_layer + ".intermediate.dense", h, i)
    table += _dense(tf_layer + "/output/dense", hf_layer + ".output.dense", i,
                    h)
    table += _layer_norm(tf_layer + "/output/LayerNorm",
                         hf_layer + ".output.LayerNorm", h)
  pooler = _dense("bert/pooler/dense", "bert.pooler.dense", h, h)
  if not head.hf_pooler:
    pooler = [(tf_name, None, shape, transpose)
              for tf_name, _, shape, transpose in pooler]
  table += pooler
  return table + _head_weights(config, head, num_labels)


def variable_shapes(config, head, num_labels=None):
  """{name: shape} of every trainable variable of a model (weight_table's
  names and shapes): what --init_checkpoint is checked against before
  training, without building the model a second time."""
  return {name: shape for name, _, shape, _ in weight_table(config, head,
                                                            num_labels)}


def _head_weights(config, head, num_labels):
  """weight_table's rows of the head on top of the encoder."""
  sizes = {heads.HIDDEN: config.hidden_size, heads.VOCAB: config.vocab_size,
           heads.OUTPUTS: head.outputs or num_labels}
  return [(weight.name, weight.hf_name,
           [sizes.get(size, size) for size in weight.shape], weight.transpose)
          for weight in head.weights]


def detect_head(checkpoint_shapes):
  """(head, num_labels) of a checkpoint from its variable names and shapes.

  Args:
    checkpoint_shapes: {name: shape} of a checkpoint's variables.

  Returns:
    (the heads.Head it holds (heads.ENCODER for BERT weights with no
    head), C for a labelled head (the rows of its output weights), else
    None).

  Raises:
    UserError: no head and no BERT encoder is there.
  """
  head = heads.detect(checkpoint_shapes)
  if head is None:
    raise UserError(
        "the checkpoint has no head of this toolkit (%s) and no BERT "
        "encoder; it is not a model of this toolkit" % ", ".join(
            "%s: %s" % (known.name, known.variables[0])
            for known in heads.HEADS if known.weights))
  num_labels = None
  if head.labelled:
    num_labels = int(checkpoint_shapes[head.variables[0]][0])
  return head, num_labels


def model_weights(checkpoint, table):
  """Reads the model's weights from a training checkpoint, checking shapes.

  Optimizer slots, the loss scale, accumulators and step counters are not in
  `table` and are left behind.

  Args:
    checkpoint: checkpoint prefix.
    table: weight_table() of the model the config describes.

  Returns:
    OrderedDict {tf_name: float32 ndarray} in table order.

  Raises:
    UserError: a weight is missing or its shape differs (the first one is
      named, with both shapes).
  """
  reader = tf.train.load_checkpoint(checkpoint)
  shapes = reader.get_variable_to_shape_map()
  weights = collections.OrderedDict()
  for tf_name, _, shape, _ in table:
    if tf_name not in shapes:
      raise UserError("checkpoint %s has no variable %s, which the BERT "
                      "config's model has" % (checkpoint, tf_name))
    if list(shapes[tf_name]) != shape:
      raise UserError(
          "checkpoint %s does not fit the BERT config: %s is %s in the "
          "checkpoint but %s by the config" % (checkpoint, tf_name,
                                               list(shapes[tf_name]), shape))
    weights[tf_name] = reader.get_tensor(tf_name).astype(np.float32)
  return weights


def to_hf_state(weights, table):
  """{hf_name: contiguous float32 ndarray} of Hugging Face's layout."""
  state = collections.OrderedDict()
  for tf_name, hf_name, _, transpose in table:
    if hf_name is None:
      continue
    value = weights[tf_name]
    state[hf_name] = np.ascontiguousarray(value.T if transpose else value)
  return state


def write_checkpoint(prefix, weights):
  """Writes {name: ndarray} as a TF checkpoint `prefix.{index,data-*}`.

  Only the named tensors are written, under exactly these names (no
  `global_step`, no `checkpoint` state file): the layout of Google's
  released `bert_model.ckpt`.
  """
  with tf.Graph().as_default(), tf.Session() as sess:
    names = list(weights)
    feeds = [tf.placeholder(tf.float32, shape=weights[n].shape)
             for n in names]
    save = tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names,
                             shape_and_slices=[""] * len(names),
                             tensors=feeds)
    sess.run(save, feed_dict=dict(zip(feeds, [weights[n] for n in names])))


def hf_config(bert_config, head, labels=None):
  """Hugging Face's config.json for a model of ours.

  Args:
    bert_config: modeling.BertConfig.
    head: a heads.Head.
    labels: the class names of a labelled head, in output order (one name:
      a regression head, problem_type "regression" for the classifier).

  Returns:
    A JSON-serialisable dict.

  Raises:
    UserError: the activation has no Hugging Face equivalent.
  """
  act = bert_config.hidden_act
  if not isinstance(act, str) or act.lower() not in HF_ACTIVATIONS:
    raise UserError("hidden_act %r has no Hugging Face equivalent (known: %s)"
                    % (act, ", ".join(sorted(HF_ACTIVATIONS))))
  config = {"model_type": "bert",
            "architectures": [head.hf_architecture],
            "hidden_act": HF_ACTIVATIONS[act.lower()],
            "layer_norm_eps": 1e-12,
            "pad_token_id": 0,
            "position_embedding_type": "absolute",
            "tie_word_embeddings": True,
            "torch_dtype": "float32"}
  for field in _SHARED_CONFIG_FIELDS:
    config[field] = getattr(bert_config, field)
  if head.labelled:
    config["id2label"] = {str(i): label for i, label in enumerate(labels)}
    config["label2id"] = {label: i for i, label in enumerate(labels)}
  if head.hf_config_fields:
    config.update(head.hf_config_fields(labels))
  return config


def is_hf_dir(path):
  """True when `path` is a directory holding a Hugging Face config.json."""
  return tf.io.gfile.isdir(path) and tf.io.gfile.exists(
      os.path.join(path, HF_CONFIG))


def _read_hf_config(hf_dir):
  path = os.path.join(hf_dir, HF_CONFIG)
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      config = json.loads(text_files.decode(f.read(), path))
  except ValueError as e:
    raise UserError("%s is not valid JSON (%s)" % (path, e))
  if not isinstance(config, dict) or config.get("model_type") != "bert":
    raise UserError(
        "%s: model_type is %r, but only Hugging Face BERT models (model_type "
        "\"bert\") can initialise this model" %
        (path, config.get("model_type") if isinstance(config, dict)
         else None))
  return config


def hf_bert_config(hf_dir):
  """The BertConfig of a Hugging Face BERT directory, from its config.json.

  The sizes, dropout probabilities and initializer_range are copied;
  hidden_act becomes the name of the same function here
  (FROM_HF_ACTIVATIONS: Hugging Face's "gelu" is the exact erf form,
  "gelu_exact" here, not BERT's tanh "gelu").

  Args:
    hf_dir: a directory with config.json (model_type bert).

  Returns:
    modeling.BertConfig.

  Raises:
    UserError: config.json describes a model computed otherwise than ours
      (its activation, its position embeddings) or misses a size; the
      message names the file, the field and the value.
  """
  config = _read_hf_config(hf_dir)
  path = os.path.join(hf_dir, HF_CONFIG)
  # Absent fields take Hugging Face's defaults where ours differ.
  act = config.get("hidden_act", "gelu")
  if not isinstance(act, str) or act.lower() not in FROM_HF_ACTIVATIONS:
    raise UserError("%s: hidden_act %r has no equivalent here (known: %s)"
                    % (path, act, ", ".join(sorted(FROM_HF_ACTIVATIONS))))
  position = config.get("position_embedding_type", "absolute")
  if position != "absolute":
    raise UserError("%s: position_embedding_type %r, but this model has "
                    "BERT's absolute position embeddings only" %
                    (path, position))
  fields = {f: config[f] for f in _SHARED_CONFIG_FIELDS if f in config}
  fields.setdefault("type_vocab_size", 2)
  fields["hidden_act"] = FROM_HF_ACTIVATIONS[act.lower()]
  return modeling.BertConfig.from_dict(fields, source=path)


def hf_labels(hf_dir):
  """A Hugging Face classifier's class names in output order, or None."""
  id2label = _read_hf_config(hf_dir).get("id2label")
  if not isinstance(id2label, dict):
    return None
  try:
    return [id2label[str(i)] for i in range(len(id2label))]
  except KeyError:
    return None


def _hf_key_to_table_name(key):
  """A key of any BERT class's state dict in BertForPreTraining's naming."""
  # BertModel saves without the "bert." prefix; old checkpoints still use
  # TensorFlow's LayerNorm gamma/beta names.
  if key.startswith(("embeddings.", "encoder.", "pooler.")):
    key = "bert." + key
  if key.endswith(".gamma"):
    key = key[:-len(".gamma")] + ".weight"
  elif key.endswith(".beta"):
    key = key[:-len(".beta")] + ".bias"
  return key


def read_hf_weights(hf_dir):
  """Our model's weights from a Hugging Face BERT directory.

  Args:
    hf_dir: a directory with config.json (model_type bert) and
      model.safetensors, as `save_pretrained` writes it.

  Returns:
    (weights, hf_config): OrderedDict {tf_name: float32 ndarray} of every
    weight we have a name for, and the parsed config.json.

  Raises:
    UserError: another model type, no safetensors file, or no BERT weights.
  """
  # pylint: disable-next=g-import-not-at-top
  from safetensors import safe_open, SafetensorError
  config = _read_hf_config(hf_dir)
  path = os.path.join(hf_dir, HF_WEIGHTS)
  if not tf.io.gfile.exists(path):
    present = sorted(n for n in tf.io.gfile.listdir(hf_dir)
                     if n.endswith((".bin", ".h5", ".safetensors", ".json")))
    raise UserError(
        "%s has no %s (found: %s); save the model with "
        "save_pretrained(..., safe_serialization=True) to get one" %
        (hf_dir, HF_WEIGHTS, ", ".join(present) or "nothing"))
  num_labels = len(config.get("id2label") or {}) or 2
  shape_config = _Shapes(config)
  by_hf_name = {}
  for head in _hf_readers((config.get("architectures") or [None])[0]):
    for tf_name, hf_name, _, transpose in weight_table(shape_config, head,
                                                       num_labels):
      if hf_name is not None:
        by_hf_name.setdefault(hf_name, (tf_name, transpose))
  weights = collections.OrderedDict()
  try:
    with safe_open(path, framework="np") as f:
      for key in f.keys():
        entry = by_hf_name.get(_hf_key_to_table_name(key))
        if entry is None:
          continue  # tied copies (decoder), buffers (position_ids)
        tf_name, transpose = entry
        value = f.get_tensor(key).astype(np.float32)
        weights[tf_name] = value.T if transpose else value
  except SafetensorError as e:
    # The header and the file's size disagree: most often an interrupted
    # download or copy.
    raise UserError("%s cannot be read as safetensors (%s): the file is "
                    "truncated or damaged; copy it again" % (path, e))
  except (OSError, ValueError, TypeError) as e:
    raise UserError("%s cannot be read as safetensors (%s)" % (path, e))
  if "bert/embeddings/word_embeddings" not in weights:
    raise UserError("%s holds no BERT weights (no word embeddings)" % path)
  return weights, config


def _hf_readers(architecture):
  """The heads a Hugging Face model of class `architecture` is read as, in
  the order they claim a name several share (Hugging Face calls every
  classifier's layer "classifier"; ours are scoped apart): those of its
  class, then those of the sentence classifier's class, then the rest, each
  in HEADS order; none that does not read back (head.hf_reads_back)."""
  return sorted((head for head in heads.HEADS if head.hf_reads_back),
                key=lambda head: (head.hf_architecture != architecture,
                                  head.hf_architecture != _HF_DEFAULT_CLASS))


class _Shapes(object):
  """The size fields of an HF config.json, as weight_table reads them."""

  def __init__(self, config):
    for field in ("vocab_size", "hidden_size", "num_hidden_layers",
                  "intermediate_size", "max_position_embeddings",
                  "type_vocab_size"):
      setattr(self, field, int(config.get(field, 0)))


def hf_dir_to_checkpoint(hf_dir, prefix):
  """Converts a Hugging Face BERT directory into a weights-only checkpoint.

  Args:
    hf_dir: see read_hf_weights.
    prefix: checkpoint prefix to write.

  Returns:
    The parsed config.json.
  """
  weights, config = read_hf_weights(hf_dir)
  write_checkpoint(prefix, weights)
  return config


# Hugging Face directory -> the checkpoint converted from it: a process
# resolves --init_checkpoint several times (checks, then each model_fn call)
# but converts once.
_CONVERTED = {}


def converted_hf_checkpoint(hf_dir):
  """The prefix of a checkpoint holding a Hugging Face directory's weights.

  Written to a private temporary directory, removed when the process ends.

  Args:
    hf_dir: see read_hf_weights.

  Returns:
    The checkpoint prefix.
  """
  key = os.path.abspath(hf_dir)
  if key not in _CONVERTED:
    scratch = tempfile.mkdtemp(prefix="hf-init-checkpoint-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    prefix = os.path.join(scratch, "bert_model.ckpt")
    config = hf_dir_to_checkpoint(hf_dir, prefix)
    logging.info("Hugging Face model %s (%s, hidden_act %s) converted to %s",
                 hf_dir, ",".join(config.get("architectures") or ["bert"]),
                 config.get("hidden_act"), prefix)
    _CONVERTED[key] = prefix
  return _CONVERTED[key]
