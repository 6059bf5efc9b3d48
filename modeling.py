# coding=utf-8
"""The BERT model: configuration, embeddings, Transformer encoder and pooler.

The module API is that of google-research/bert's `modeling.py` (BertConfig,
BertModel and the helper functions it exposes), written for the TF1 graph API
of `tensorflow.compat.v1`. Variables are named exactly as in Google's released
checkpoints (`bert/embeddings/...`, `bert/encoder/layer_K/...`,
`bert/pooler/dense/...`), so those checkpoints load as `--init_checkpoint` and
checkpoints written here load in code expecting Google's.

The ops with hand-written gradients the model is built from (the GELU's,
layer norm's, the dense layers' weight gradient) are bertkit/kernels.py's;
this module keeps upstream's API and what it builds.

Shape notation: B = batch size, S = sequence length (F = "from", T = "to"
sequence in attention), H = hidden size, N = attention heads, D = H / N,
I = intermediate size, V = vocabulary size.
"""
# Size: upstream's API is one module (google-research/bert's modeling.py,
# about 1000 lines): its users import BertConfig, BertModel and each of its
# helpers from `modeling`, and read them in one file. What is not that API,
# the kernels with hand-written gradients, is bertkit/kernels.py's.

import collections
import contextlib
import copy
import json
import math
import re

import tensorflow.compat.v1 as tf

from bertkit import kernels
from bertkit.common import errors
from bertkit.common import options
from bertkit.common import text_files

# Fields a bert_config.json must define; the rest have BertConfig defaults.
REQUIRED_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers",
                   "num_attention_heads", "intermediate_size")
_POSITIVE_INT_FIELDS = REQUIRED_FIELDS + ("max_position_embeddings",
                                          "type_vocab_size")
_PROBABILITY_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob")


class BertConfig(object):
  """Configuration of a `BertModel` (the contents of bert_config.json)."""

  # Size: upstream's BertConfig, one keyword per field of bert_config.json.
  def __init__(self,
               vocab_size,
               hidden_size=768,
               num_hidden_layers=12,
               num_attention_heads=12,
               intermediate_size=3072,
               hidden_act="gelu",
               hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1,
               max_position_embeddings=512,
               type_vocab_size=16,
               initializer_range=0.02):
    """Constructs BertConfig.

    Args:
      vocab_size: V, the size of the WordPiece vocabulary.
      hidden_size: H, the width of the encoder layers and the pooler.
      num_hidden_layers: L, the number of Transformer layers.
      num_attention_heads: N, the attention heads per layer; must divide H.
      intermediate_size: I, the width of the feed-forward ("intermediate")
        layer of each Transformer layer.
      hidden_act: the feed-forward activation: a name known to
        `get_activation` or a function.
      hidden_dropout_prob: dropout probability of the embeddings and of the
        outputs of every dense layer in the encoder.
      attention_probs_dropout_prob: dropout probability of the attention
        probabilities.
      max_position_embeddings: the longest sequence the model can take.
      type_vocab_size: the number of token types (segments).
      initializer_range: stddev of the truncated normal initializer of all
        weight matrices.
    """
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.hidden_act = hidden_act
    self.intermediate_size = intermediate_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range

  @classmethod
  def from_dict(cls, json_object, source="BERT config"):
    """Builds and validates a BertConfig from a parsed bert_config.json.

    Keys beyond BertConfig's own (some released configs carry extra ones,
    e.g. "directionality") are kept as attributes, as upstream does.

    Args:
      json_object: the parsed JSON object.
      source: what to call the config in error messages (its file name).

    Returns:
      The BertConfig.

    Raises:
      errors.UserError: a required field is missing or a value is invalid.
    """
    if not isinstance(json_object, dict):
      raise errors.UserError(
          "%s: expected a JSON object of model hyperparameters, got %s" %
          (source, type(json_object).__name__))
    for field in REQUIRED_FIELDS:
      if field not in json_object:
        raise errors.UserError("%s: missing required field %r" %
                               (source, field))
    config = cls(vocab_size=None)
    for key, value in json_object.items():
      config.__dict__[key] = value
    config.validate(source)
    return config

  @classmethod
  def from_json_file(cls, json_file):
    """Reads and validates a bert_config.json file.

    Args:
      json_file: local path or gfile URL of the file.

    Returns:
      The BertConfig.

    Raises:
      errors.UserError: the file is missing, unreadable, not UTF-8, not
        JSON, or not a valid BERT config; the message names the file.
    """
    try:
      with tf.io.gfile.GFile(json_file, "rb") as reader:
        text = text_files.decode(reader.read(), json_file)
    except tf.errors.NotFoundError:
      raise errors.UserError("BERT config file %s: no such file" % json_file)
    except tf.errors.OpError as e:
      raise errors.UserError("BERT config file %s: cannot read it (%s)" %
                             (json_file, e))
    try:
      json_object = json.loads(text)
    except ValueError as e:
      raise errors.UserError("BERT config file %s: not valid JSON (%s)" %
                             (json_file, e))
    return cls.from_dict(json_object, source="BERT config file %s" % json_file)

  def validate(self, source="BERT config"):
    """Checks every hyperparameter's type and range.

    Args:
      source: what to call the config in error messages (its file name).

    Raises:
      errors.UserError: naming `source`, the field and the bad value.
    """
    for field in _POSITIVE_INT_FIELDS:
      value = getattr(self, field)
      if not _is_int(value) or value < 1:
        raise errors.UserError("%s: field %r must be a positive integer, got %r"
                               % (source, field, value))
    for field in _PROBABILITY_FIELDS:
      value = getattr(self, field)
      if not _is_number(value) or not 0.0 <= value < 1.0:
        raise errors.UserError(
            "%s: field %r must be a number in [0, 1), got %r" %
            (source, field, value))
    if not _is_number(self.initializer_range) or self.initializer_range <= 0:
      raise errors.UserError(
          "%s: field 'initializer_range' must be a positive number, got %r" %
          (source, self.initializer_range))
    if not callable(self.hidden_act) and (
        not isinstance(self.hidden_act, str) or
        self.hidden_act.lower() not in _ACTIVATIONS):
      raise errors.UserError("%s: field 'hidden_act' must be one of %s, got %r"
                             % (source, ", ".join(sorted(_ACTIVATIONS)),
                                self.hidden_act))
    if self.hidden_size % self.num_attention_heads:
      raise errors.UserError(
          "%s: hidden_size %d is not a multiple of num_attention_heads %d" %
          (source, self.hidden_size, self.num_attention_heads))

  def to_dict(self):
    """Returns a deep copy of the config as a dict."""
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    """Returns the config as a JSON string, keys sorted (as upstream)."""
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


def _is_int(value):
  # JSON true/false arrive as bool, which Python counts as an int.
  return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
  return _is_int(value) or isinstance(value, float)


def check_seq_length_fits(config, max_seq_length):
  """Checks that sequences of `max_seq_length` have position embeddings.

  Args:
    config: the BertConfig.
    max_seq_length: the value of --max_seq_length.

  Raises:
    errors.UserError: max_seq_length > config.max_position_embeddings.
  """
  if max_seq_length > config.max_position_embeddings:
    raise errors.UserError(
        "--max_seq_length %d exceeds the model's max_position_embeddings %d "
        "(from the BERT config); use --max_seq_length <= %d" %
        (max_seq_length, config.max_position_embeddings,
         config.max_position_embeddings))


class BertModel(object):
  """BERT: embeddings, a stack of Transformer layers and a pooler.

  Example:

  ```python
  config = modeling.BertConfig.from_json_file("configs/bert_tiny.json")
  model = modeling.BertModel(config=config, is_training=True,
                             input_ids=input_ids, input_mask=input_mask,
                             token_type_ids=token_type_ids)
  pooled_output = model.get_pooled_output()  # [B, H]
  ```
  """

  # Size: upstream's BertModel constructor, kept argument for argument.
  def __init__(self,
               config,
               is_training,
               input_ids,
               input_mask=None,
               token_type_ids=None,
               use_one_hot_embeddings=False,
               scope=None,
               sequence_ids=None,
               position_ids=None,
               cls_positions=None):
    """Builds the model in the default graph.

    Packed rows (several sequences in one row, see bertkit/data/packing.py) pass
    `sequence_ids`, `position_ids` and `cls_positions`: a token then attends
    only to the tokens of its own sequence, its position embedding is that of
    its position within its sequence, and the pooler reads each sequence's
    own [CLS]; each sequence computes what it computes alone in a row. No
    variable is added.

    Args:
      config: a BertConfig.
      is_training: True for training; False turns off dropout.
      input_ids: int32 Tensor [B, S] of WordPiece ids.
      input_mask: optional int32 Tensor [B, S], 1 for real tokens and 0 for
        padding. Defaults to all ones.
      token_type_ids: optional int32 Tensor [B, S] of segment ids. Defaults to
        all zeros.
      use_one_hot_embeddings: look up word embeddings with a one-hot matmul
        instead of tf.gather.
      scope: variable scope; defaults to "bert".
      sequence_ids: optional int32 Tensor [B, S] for packed rows: which
        sequence of its row a token belongs to (1, 2, ...; 0 for padding).
        Attention is then block-diagonal (`input_mask` is not used).
      position_ids: optional int32 Tensor [B, S], each token's position
        within its sequence (restarting at 0); default 0..S-1.
      cls_positions: optional int32 Tensor [B, N], the index of each
        sequence's [CLS] in its row (any index for empty slots); the pooled
        output is then [B, N, H] instead of [B, H].

    Raises:
      ValueError: the config or the input shapes are inconsistent.
    """
    config = copy.deepcopy(config)
    if not is_training:
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0

    batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
    if input_mask is None:
      input_mask = tf.ones([batch_size, seq_length], dtype=tf.int32)
    if token_type_ids is None:
      token_type_ids = tf.zeros([batch_size, seq_length], dtype=tf.int32)

    with tf.variable_scope(scope, default_name="bert"):
      with tf.variable_scope("embeddings"):
        self.embedding_output, self.embedding_table = embedding_lookup(
            input_ids=input_ids,
            vocab_size=config.vocab_size,
            embedding_size=config.hidden_size,
            initializer_range=config.initializer_range,
            word_embedding_name="word_embeddings",
            use_one_hot_embeddings=use_one_hot_embeddings)
        self.embedding_output = embedding_postprocessor(
            input_tensor=self.embedding_output,
            use_token_type=True,
            token_type_ids=token_type_ids,
            token_type_vocab_size=config.type_vocab_size,
            token_type_embedding_name="token_type_embeddings",
            use_position_embeddings=True,
            position_embedding_name="position_embeddings",
            initializer_range=config.initializer_range,
            max_position_embeddings=config.max_position_embeddings,
            dropout_prob=config.hidden_dropout_prob,
            position_ids=position_ids)

      with tf.variable_scope("encoder"):
        if sequence_ids is None:
          attention_mask = create_attention_mask_from_input_mask(
              input_ids, input_mask)
        else:
          attention_mask = create_attention_mask_from_sequence_ids(
              sequence_ids)
        self.all_encoder_layers = transformer_model(
            input_tensor=self.embedding_output,
            attention_mask=attention_mask,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size,
            intermediate_act_fn=get_activation(config.hidden_act),
            hidden_dropout_prob=config.hidden_dropout_prob,
            attention_probs_dropout_prob=config.attention_probs_dropout_prob,
            initializer_range=config.initializer_range,
            do_return_all_layers=True)
      self.sequence_output = self.all_encoder_layers[-1]

      # The pooler maps the [CLS] token's final hidden state through a tanh
      # layer; sentence-level heads (next sentence, classifiers) read it.
      with tf.variable_scope("pooler"):
        if cls_positions is None:
          first_token_tensor = self.sequence_output[:, 0]
        else:
          first_token_tensor = tf.gather(self.sequence_output, cls_positions,
                                         batch_dims=1)  # [B, N, H]
        self.pooled_output = tf.layers.dense(
            first_token_tensor,
            config.hidden_size,
            activation=tf.tanh,
            kernel_initializer=create_initializer(config.initializer_range))

  def get_pooled_output(self):
    """Returns the pooled [CLS] representation, float Tensor [B, H] ([B, N, H]
    with `cls_positions`: one per packed sequence)."""
    return self.pooled_output

  def get_sequence_output(self):
    """Returns the final encoder layer, float Tensor [B, S, H]."""
    return self.sequence_output

  def get_all_encoder_layers(self):
    """Returns the output of every encoder layer, a list of L [B, S, H]."""
    return self.all_encoder_layers

  def get_embedding_output(self):
    """Returns the encoder's input: word + token type + position embeddings,
    layer-normalized and dropped out; float Tensor [B, S, H]."""
    return self.embedding_output

  def get_embedding_table(self):
    """Returns the word embedding table, float Tensor [V, H]."""
    return self.embedding_table


def gelu(x):
  """Gaussian Error Linear Unit, tanh approximation (as BERT was trained).

  gelu(x) = 0.5 x (1 + tanh(z)), z = sqrt(2 / pi) (x + 0.044715 x^3); see
  https://arxiv.org/abs/1606.08415. Hugging Face calls it "gelu_new".
  Computed as x * sigmoid(2 z) with its derivative written out
  (kernels.tanh_gelu): the same function, in 6 elementwise ops where
  upstream's form takes 9. The values agree with upstream's form to 1e-6
  over [-8, 8] (an ulp of x); for x < -1 the sigmoid form is the closer of
  the two to the function, because upstream's 1 + tanh(z) cancels there in
  float32.

  Args:
    x: float Tensor.

  Returns:
    `x` with the activation applied.
  """
  return kernels.tanh_gelu(x)


def gelu_exact(x):
  """Gaussian Error Linear Unit, exact: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).

  What Hugging Face's "gelu" (and PyTorch's default GELU) computes: models
  trained there with "gelu" need this one, not the tanh approximation
  `gelu`, which differs from it by up to 4.7e-4 (at x = -2.7).

  Args:
    x: float Tensor.

  Returns:
    `x` with the activation applied.
  """
  return 0.5 * x * (1.0 + tf.math.erf(x * math.sqrt(0.5)))


# Activation names accepted in bert_config.json's "hidden_act".
_ACTIVATIONS = {
    "linear": None,
    "relu": tf.nn.relu,
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "tanh": tf.tanh,
}


def get_activation(activation_string):
  """Maps an activation name to its function.

  "gelu" is upstream's meaning, the tanh approximation Google's checkpoints
  were trained with (Hugging Face's "gelu_new"); "gelu_exact" is the erf form
  (Hugging Face's "gelu"), for models trained with it.

  Args:
    activation_string: a name ("linear", "relu", "gelu", "gelu_exact",
      "tanh", any case), an empty value (meaning linear), or already a
      function.

  Returns:
    The function, or None for a linear activation. A non-string argument is
    returned unchanged.

  Raises:
    ValueError: the name is unknown.
  """
  if not isinstance(activation_string, str):
    return activation_string
  if not activation_string:
    return None
  name = activation_string.lower()
  if name not in _ACTIVATIONS:
    raise ValueError("Unsupported activation: %s" % activation_string)
  return _ACTIVATIONS[name]


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
  """Matches model variables with checkpoint variables of the same name.

  The result feeds `tf.train.init_from_checkpoint(init_checkpoint,
  assignment_map)`; variables the checkpoint lacks keep their initializers.

  Args:
    tvars: the model's variables (usually tf.trainable_variables()).
    init_checkpoint: a checkpoint prefix, or a directory with a checkpoint.

  Returns:
    (assignment_map, initialized_variable_names): an OrderedDict mapping each
    shared checkpoint name to the same variable name, and a dict whose keys
    are the initialized variables' names, both with and without ":0".

  Raises:
    errors.UserError: the checkpoint cannot be read, or a shared variable has
      a different shape in the checkpoint (a config/checkpoint mismatch).
  """
  name_to_variable = collections.OrderedDict()
  for var in tvars:
    name = re.sub(r":\d+$", "", var.name)
    name_to_variable[name] = var

  try:
    checkpoint_variables = tf.train.list_variables(init_checkpoint)
  except (tf.errors.OpError, ValueError) as e:
    raise errors.UserError("init checkpoint %s: cannot read it (%s)" %
                           (init_checkpoint, e))

  assignment_map = collections.OrderedDict()
  initialized_variable_names = {}
  for name, shape in checkpoint_variables:
    if name not in name_to_variable:
      continue
    model_shape = name_to_variable[name].shape.as_list()
    if list(shape) != model_shape:
      raise errors.UserError(
          "init checkpoint %s: variable %s has shape %s but the model built "
          "from the BERT config has %s; use the bert_config.json that came "
          "with the checkpoint" % (init_checkpoint, name, list(shape),
                                   model_shape))
    assignment_map[name] = name
    initialized_variable_names[name] = 1
    initialized_variable_names[name + ":0"] = 1
  return assignment_map, initialized_variable_names


def dropout(input_tensor, dropout_prob):
  """Drops out `input_tensor` with probability `dropout_prob`.

  Args:
    input_tensor: float Tensor.
    dropout_prob: probability of dropping each value (not of keeping it);
      None or 0.0 returns `input_tensor` itself and adds no ops.

  Returns:
    The Tensor after dropout.
  """
  if dropout_prob is None or dropout_prob == 0.0:
    return input_tensor
  return tf.nn.dropout(input_tensor, rate=dropout_prob)


def layer_norm(input_tensor, name=None):
  """Layer normalization over the last axis, as tf.contrib.layers.layer_norm.

  Creates variables `<name or LayerNorm>/beta` (zeros) and `.../gamma` (ones)
  of shape [H]. The arithmetic is contrib's: moments, then one fused scale
  and shift, so outputs match Google's checkpoints' training code exactly
  (kernels.normalize, its gradient in closed form).

  Args:
    input_tensor: float Tensor [..., H] with H statically known.
    name: variable scope; defaults to "LayerNorm".

  Returns:
    The normalized Tensor, same shape.
  """
  with tf.variable_scope(name, default_name="LayerNorm"):
    width = input_tensor.shape[-1:]
    dtype = input_tensor.dtype.base_dtype
    beta = tf.get_variable("beta", width, dtype=dtype,
                           initializer=tf.zeros_initializer())
    gamma = tf.get_variable("gamma", width, dtype=dtype,
                            initializer=tf.ones_initializer())
    return kernels.normalize(input_tensor, tf.convert_to_tensor(beta),
                             tf.convert_to_tensor(gamma))


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
  """Runs layer normalization followed by dropout."""
  return dropout(layer_norm(input_tensor, name), dropout_prob)


_INITIALIZERS = {options.TRUNCATED_NORMAL: tf.truncated_normal_initializer,
                 options.NORMAL: tf.random_normal_initializer}
# The default graph's collection of `init_distribution` choices, innermost
# last: the choice belongs to the graph being built, not to the process.
_INIT_DISTRIBUTIONS = "bertkit_init_distributions"


@contextlib.contextmanager
def init_distribution(name):
  """Within it, create_initializer draws from `name`, one of
  options.INIT_DISTRIBUTIONS (run_pretraining.py --init_distribution, checked
  by options.PretrainingOptions).

  The choice is held by the default graph (a graph collection, removed on
  exit), so it reaches the initializers created in that graph while the
  context is open, and nothing outside it.

  Args:
    name: one of options.INIT_DISTRIBUTIONS.

  Yields:
    None.
  """
  graph = tf.get_default_graph()
  choices = graph.get_collection_ref(_INIT_DISTRIBUTIONS)
  choices.append(name)
  try:
    yield
  finally:
    choices.pop()
    if not choices:
      graph.clear_collection(_INIT_DISTRIBUTIONS)


def create_initializer(initializer_range=0.02):
  """Returns upstream's truncated normal initializer, stddev
  `initializer_range` (within `init_distribution(NORMAL)` in the default
  graph, the untruncated normal)."""
  choices = tf.get_collection(_INIT_DISTRIBUTIONS)
  name = choices[-1] if choices else options.TRUNCATED_NORMAL
  return _INITIALIZERS[name](stddev=initializer_range)


def embedding_lookup(input_ids,
                     vocab_size,
                     embedding_size=128,
                     initializer_range=0.02,
                     word_embedding_name="word_embeddings",
                     use_one_hot_embeddings=False):
  """Looks up word embeddings, creating the table variable.

  Args:
    input_ids: int32 Tensor [B, S] of word ids.
    vocab_size: V, rows of the table.
    embedding_size: columns of the table (H in BertModel).
    initializer_range: stddev of the table's initializer.
    word_embedding_name: name of the table variable.
    use_one_hot_embeddings: multiply a one-hot matrix by the table instead of
      using tf.gather (faster on TPUs, slower on CPUs and GPUs).

  Returns:
    (embeddings [B, S, embedding_size], table [V, embedding_size]).
  """
  input_shape = get_shape_list(input_ids, expected_rank=2)
  embedding_table = tf.get_variable(
      name=word_embedding_name,
      shape=[vocab_size, embedding_size],
      initializer=create_initializer(initializer_range))
  if use_one_hot_embeddings:
    one_hot_ids = tf.one_hot(tf.reshape(input_ids, [-1]), depth=vocab_size)
    output = tf.reshape(tf.matmul(one_hot_ids, embedding_table),
                        input_shape + [embedding_size])
  else:
    # Gather from the table's value, not the variable: a sparse read
    # (ResourceGather) switches the variable to copy-on-read, after which every
    # dense read of it (the MLM output layer, the optimizer) copies all V x H
    # floats; a BERT-mini CPU profile showed ~70 ms of such copies per step.
    output = tf.gather(tf.convert_to_tensor(embedding_table), input_ids)
  return output, embedding_table


# Size: upstream's signature; its callers pass these keywords by name.
def embedding_postprocessor(input_tensor,
                            use_token_type=False,
                            token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02,
                            max_position_embeddings=512,
                            dropout_prob=0.1,
                            position_ids=None):
  """Adds token type and position embeddings, then layer norm and dropout.

  Args:
    input_tensor: float Tensor [B, S, H] of word embeddings.
    use_token_type: whether to add token type embeddings.
    token_type_ids: int32 Tensor [B, S]; required if `use_token_type`.
    token_type_vocab_size: rows of the token type table.
    token_type_embedding_name: name of the token type table variable.
    use_position_embeddings: whether to add position embeddings.
    position_embedding_name: name of the position table variable.
    initializer_range: stddev of the tables' initializer.
    max_position_embeddings: rows of the position table; S must not exceed it.
    dropout_prob: dropout probability applied to the output.
    position_ids: optional int32 Tensor [B, S] of positions (packed rows:
      restarting at 0 for each sequence); default 0..S-1 in every row.

  Returns:
    float Tensor [B, S, H].

  Raises:
    ValueError: token_type_ids is missing, or S is statically known to exceed
      max_position_embeddings (when S is only known at run time, tf.slice
      fails instead).
  """
  batch_size, seq_length, width = get_shape_list(input_tensor, expected_rank=3)
  output = input_tensor

  if use_token_type:
    if token_type_ids is None:
      raise ValueError("`token_type_ids` must be specified if "
                       "`use_token_type` is True.")
    token_type_table = tf.get_variable(
        name=token_type_embedding_name,
        shape=[token_type_vocab_size, width],
        initializer=create_initializer(initializer_range))
    # A one-hot matmul, not tf.gather: its gradient is a dense [T, H] tensor
    # rather than IndexedSlices with a row per token, which would be costly
    # to all-reduce across replicas for a table of 2 rows.
    one_hot_ids = tf.one_hot(tf.reshape(token_type_ids, [-1]),
                             depth=token_type_vocab_size)
    token_type_embeddings = tf.matmul(one_hot_ids, token_type_table)
    output += tf.reshape(token_type_embeddings, [batch_size, seq_length, width])

  if use_position_embeddings:
    if isinstance(seq_length, int) and seq_length > max_position_embeddings:
      raise ValueError("Sequence length %d exceeds max_position_embeddings %d"
                       % (seq_length, max_position_embeddings))
    full_position_embeddings = tf.get_variable(
        name=position_embedding_name,
        shape=[max_position_embeddings, width],
        initializer=create_initializer(initializer_range))
    if position_ids is None:
      # Positions are 0..S-1 in every example, so the first S rows of the
      # table broadcast over the batch; no per-token lookup is needed.
      output += tf.slice(full_position_embeddings, [0, 0], [seq_length, -1])
    else:
      # From the table's value, as embedding_lookup does (a sparse read would
      # make the variable copy-on-read).
      output += tf.gather(tf.convert_to_tensor(full_position_embeddings),
                          position_ids)

  return layer_norm_and_dropout(output, dropout_prob)


def create_attention_mask_from_input_mask(from_tensor, to_mask):
  """Builds the 3D attention mask letting every position attend to real tokens.

  Padding positions of `from_tensor` still attend (their outputs are ignored
  downstream); only attention *to* padding is masked.

  Args:
    from_tensor: Tensor [B, F] or [B, F, ...]; only its shape is used.
    to_mask: int32 Tensor [B, T], 1 for real tokens, 0 for padding.

  Returns:
    float32 Tensor [B, F, T]: mask[b, f, t] = to_mask[b, t].
  """
  batch_size, from_seq_length = get_shape_list(
      from_tensor, expected_rank=[2, 3])[:2]
  to_seq_length = get_shape_list(to_mask, expected_rank=2)[1]
  to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]),
                    tf.float32)
  return tf.broadcast_to(to_mask,
                         [batch_size, from_seq_length, to_seq_length])


def create_attention_mask_from_sequence_ids(sequence_ids):
  """Builds the block-diagonal attention mask of packed rows.

  A token attends only to the tokens of its own sequence; padding (id 0)
  attends to padding, whose outputs are ignored downstream.

  Args:
    sequence_ids: int32 Tensor [B, S], the sequence of its row each token
      belongs to (1, 2, ...; 0 for padding).

  Returns:
    float32 Tensor [B, S, S]: mask[b, f, t] = 1 if sequence_ids[b, f] ==
    sequence_ids[b, t], else 0.
  """
  return tf.cast(tf.equal(tf.expand_dims(sequence_ids, 2),
                          tf.expand_dims(sequence_ids, 1)), tf.float32)


# Size: upstream's signature, one argument per attention setting; the body
# is one layer read top to bottom (projections, scores, mask, context).
def attention_layer(from_tensor,
                    to_tensor,
                    attention_mask=None,
                    num_attention_heads=1,
                    size_per_head=512,
                    query_act=None,
                    key_act=None,
                    value_act=None,
                    attention_probs_dropout_prob=0.0,
                    initializer_range=0.02,
                    do_return_2d_tensor=False,
                    batch_size=None,
                    from_seq_length=None,
                    to_seq_length=None):
  """Multi-headed scaled dot-product attention, `from_tensor` to `to_tensor`.

  Creates dense layers `query`, `key` and `value` (kernels [H, N*D]) in the
  current variable scope. With from_tensor == to_tensor this is
  self-attention.

  Args:
    from_tensor: float Tensor [B, F, H], or [B*F, H] with the sizes given.
    to_tensor: float Tensor [B, T, H], or [B*T, H] with the sizes given.
    attention_mask: optional float32 Tensor [B, F, T] of 1 (may attend) and 0
      (may not).
    num_attention_heads: N.
    size_per_head: D.
    query_act: activation of the query projection (None: linear).
    key_act: activation of the key projection.
    value_act: activation of the value projection.
    attention_probs_dropout_prob: dropout probability of the attention
      probabilities.
    initializer_range: stddev of the kernels' initializer.
    do_return_2d_tensor: return [B*F, N*D] instead of [B, F, N*D].
    batch_size: B, required when the inputs are 2D.
    from_seq_length: F, required when the inputs are 2D.
    to_seq_length: T, required when the inputs are 2D.

  Returns:
    float Tensor [B, F, N*D] or [B*F, N*D].

  Raises:
    ValueError: the input ranks disagree, or 2D inputs come without sizes.
  """
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])
  if len(from_shape) != len(to_shape):
    raise ValueError(
        "The rank of `from_tensor` must match the rank of `to_tensor`.")
  if len(from_shape) == 3:
    batch_size, from_seq_length = from_shape[:2]
    to_seq_length = to_shape[1]
  elif batch_size is None or from_seq_length is None or to_seq_length is None:
    raise ValueError(
        "When passing in rank 2 tensors to attention_layer, the values "
        "for `batch_size`, `from_seq_length`, and `to_seq_length` "
        "must all be specified.")

  from_tensor_2d = reshape_to_matrix(from_tensor)
  to_tensor_2d = reshape_to_matrix(to_tensor)
  width = num_attention_heads * size_per_head
  initializer = create_initializer(initializer_range)
  if from_tensor is to_tensor:
    query, key, value = _fused_projections(
        from_tensor_2d, width, (query_act, key_act, value_act), initializer)
  else:
    query = tf.layers.dense(from_tensor_2d, width, activation=query_act,
                            name="query", kernel_initializer=initializer)
    key = tf.layers.dense(to_tensor_2d, width, activation=key_act,
                          name="key", kernel_initializer=initializer)
    value = tf.layers.dense(to_tensor_2d, width, activation=value_act,
                            name="value", kernel_initializer=initializer)

  # The 1/sqrt(D) of scaled dot-product attention goes on the queries: they
  # have B*F*N*D elements, the scores B*N*F*T. For D = 64 (every released
  # model) the factor is 1/8, a power of two, so the result is bitwise that of
  # scaling the scores.
  query *= 1.0 / math.sqrt(float(size_per_head))
  query = _split_heads(query, batch_size, from_seq_length, num_attention_heads,
                       size_per_head)
  key = _split_heads(key, batch_size, to_seq_length, num_attention_heads,
                     size_per_head)
  attention_scores = tf.matmul(query, key, transpose_b=True)  # [B, N, F, T]

  if attention_mask is not None:
    # 0 where attention is allowed and -10000 where not: added before the
    # softmax, this is as good as removing the masked positions.
    adder = (1.0 - tf.expand_dims(attention_mask, axis=1)) * -10000.0
    attention_scores += adder

  attention_probs = dropout(tf.nn.softmax(attention_scores),
                            attention_probs_dropout_prob)
  value = _split_heads(value, batch_size, to_seq_length, num_attention_heads,
                       size_per_head)
  context = tf.matmul(attention_probs, value)  # [B, N, F, D]
  context = tf.transpose(context, [0, 2, 1, 3])  # [B, F, N, D]
  if do_return_2d_tensor:
    return tf.reshape(context, [batch_size * from_seq_length, width])
  return tf.reshape(context, [batch_size, from_seq_length, width])


def _fused_projections(input_2d, width, activations, initializer):
  """Self-attention's query, key and value projections as one matmul.

  The variables are those of three `tf.layers.dense` layers named `query`,
  `key` and `value` (kernels [H, width], biases [width]), but the kernels are
  multiplied side by side: one [B*S, H] x [H, 3 * width] product keeps the
  cores busier than three narrow ones, and the backward pass gets one input
  gradient instead of three to add up.

  Args:
    input_2d: float Tensor [B*S, H].
    width: N*D.
    activations: (query_act, key_act, value_act), each None or a function.
    initializer: the kernels' initializer.

  Returns:
    (query, key, value), each [B*S, width].
  """
  input_width = input_2d.shape[-1]
  weights, biases = [], []
  for name in ("query", "key", "value"):
    with tf.variable_scope(name):
      weights.append(tf.get_variable("kernel", [input_width, width],
                                     initializer=initializer))
      biases.append(tf.get_variable("bias", [width],
                                    initializer=tf.zeros_initializer()))
  fused = tf.nn.bias_add(tf.matmul(input_2d, tf.concat(weights, axis=1)),
                         tf.concat(biases, axis=0))
  outputs = tf.split(fused, 3, axis=1)
  return [act(x) if act else x for x, act in zip(outputs, activations)]


def _split_heads(tensor_2d, batch_size, seq_length, num_heads, head_size):
  """Reshapes [B*S, N*D] to [B, N, S, D], the layout batched matmul needs."""
  tensor = tf.reshape(tensor_2d, [batch_size, seq_length, num_heads, head_size])
  return tf.transpose(tensor, [0, 2, 1, 3])


# Size: upstream's signature; the body is the layer loop, kept in one place
# so the per-layer order (attention, residual, norm, FFN) reads at once.
def transformer_model(input_tensor,
                      attention_mask=None,
                      hidden_size=768,
                      num_hidden_layers=12,
                      num_attention_heads=12,
                      intermediate_size=3072,
                      intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1,
                      initializer_range=0.02,
                      do_return_all_layers=False):
  """The Transformer encoder of "Attention is All You Need" as BERT uses it.

  Creates the scopes `layer_0` ... `layer_{L-1}` in the current variable
  scope. Activations stay [B*S, H] matrices between layers, so every dense
  layer is a single 2D matmul.

  Args:
    input_tensor: float Tensor [B, S, H].
    attention_mask: optional float32 Tensor [B, S, S], 1 where attention is
      allowed.
    hidden_size: H.
    num_hidden_layers: L.
    num_attention_heads: N; must divide H.
    intermediate_size: I.
    intermediate_act_fn: activation of the feed-forward layer.
    hidden_dropout_prob: dropout probability after each dense projection.
    attention_probs_dropout_prob: dropout probability of attention weights.
    initializer_range: stddev of the kernels' initializer.
    do_return_all_layers: return every layer's output, not just the last.

  Returns:
    float Tensor [B, S, H] (the last layer), or a list of L of them.

  Raises:
    ValueError: H is not a multiple of N, or the input width is not H.
  """
  if hidden_size % num_attention_heads != 0:
    raise ValueError(
        "The hidden size (%d) is not a multiple of the number of attention "
        "heads (%d)" % (hidden_size, num_attention_heads))
  input_shape = get_shape_list(input_tensor, expected_rank=3)
  batch_size, seq_length, input_width = input_shape
  # The residual connections add the input to the output of every sublayer.
  if input_width != hidden_size:
    raise ValueError("The width of the input tensor (%d) != hidden size (%d)" %
                     (input_width, hidden_size))

  prev_output = reshape_to_matrix(input_tensor)
  all_layer_outputs = []
  for layer_idx in range(num_hidden_layers):
    with tf.variable_scope("layer_%d" % layer_idx):
      layer_input = prev_output
      with tf.variable_scope("attention"):
        with tf.variable_scope("self"):
          attention_output = attention_layer(
              from_tensor=layer_input,
              to_tensor=layer_input,
              attention_mask=attention_mask,
              num_attention_heads=num_attention_heads,
              size_per_head=hidden_size // num_attention_heads,
              attention_probs_dropout_prob=attention_probs_dropout_prob,
              initializer_range=initializer_range,
              do_return_2d_tensor=True,
              batch_size=batch_size,
              from_seq_length=seq_length,
              to_seq_length=seq_length)
        with tf.variable_scope("output"):
          attention_output = _project_add_and_norm(
              attention_output, layer_input, hidden_size, hidden_dropout_prob,
              initializer_range)
      with tf.variable_scope("intermediate"), kernels.blocked_dense_gradient():
        intermediate_output = tf.layers.dense(
            attention_output,
            intermediate_size,
            activation=intermediate_act_fn,
            kernel_initializer=create_initializer(initializer_range))
      with tf.variable_scope("output"):
        prev_output = _project_add_and_norm(
            intermediate_output, attention_output, hidden_size,
            hidden_dropout_prob, initializer_range)
      all_layer_outputs.append(prev_output)

  if do_return_all_layers:
    return [reshape_from_matrix(x, input_shape) for x in all_layer_outputs]
  return reshape_from_matrix(prev_output, input_shape)


def _project_add_and_norm(input_tensor, residual, hidden_size, dropout_prob,
                          initializer_range):
  """A sublayer's output: dense to H, dropout, + residual, layer norm.

  Args:
    input_tensor: float Tensor [B*S, width] (attention context or
      intermediate activations).
    residual: float Tensor [B*S, H], the sublayer's input.
    hidden_size: H.
    dropout_prob: dropout probability of the projection.
    initializer_range: stddev of the kernel's initializer.

  Returns:
    float Tensor [B*S, H].
  """
  with kernels.blocked_dense_gradient():
    output = tf.layers.dense(
        input_tensor, hidden_size,
        kernel_initializer=create_initializer(initializer_range))
  output = dropout(output, dropout_prob)
  return layer_norm(output + residual)


def get_shape_list(tensor, expected_rank=None, name=None):
  """Returns the shape as a list, static dimensions as Python ints.

  Args:
    tensor: a Tensor.
    expected_rank: optional int or list of ints; other ranks raise.
    name: the tensor's name in the error message (default: tensor.name).

  Returns:
    A list with an int for each static dimension and a scalar int32 Tensor
    for each dimension known only at run time.

  Raises:
    ValueError: the rank is not `expected_rank`.
  """
  if expected_rank is not None:
    assert_rank(tensor, expected_rank, name)
  shape = tensor.shape.as_list()
  dynamic_indexes = [i for i, dim in enumerate(shape) if dim is None]
  if dynamic_indexes:
    dynamic_shape = tf.shape(tensor)
    for index in dynamic_indexes:
      shape[index] = dynamic_shape[index]
  return shape


def reshape_to_matrix(input_tensor):
  """Reshapes a rank >= 2 Tensor [..., W] to a matrix [-1, W]."""
  ndims = input_tensor.shape.ndims
  if ndims < 2:
    raise ValueError("Input tensor must have at least rank 2. Shape = %s" %
                     (input_tensor.shape))
  if ndims == 2:
    return input_tensor
  return tf.reshape(input_tensor, [-1, input_tensor.shape[-1]])


def reshape_from_matrix(output_tensor, orig_shape_list):
  """Reshapes a matrix [-1, W] back to `orig_shape_list[:-1] + [W]`."""
  if len(orig_shape_list) == 2:
    return output_tensor
  width = get_shape_list(output_tensor)[-1]
  return tf.reshape(output_tensor, orig_shape_list[:-1] + [width])


def assert_rank(tensor, expected_rank, name=None):
  """Raises ValueError unless `tensor` has (one of) `expected_rank`.

  Args:
    tensor: a Tensor.
    expected_rank: an int or a list of ints.
    name: the tensor's name in the error message (default: tensor.name).
  """
  if name is None:
    name = tensor.name
  expected_ranks = (expected_rank if isinstance(expected_rank, (list, tuple))
                    else [expected_rank])
  actual_rank = tensor.shape.ndims
  if actual_rank not in expected_ranks:
    raise ValueError(
        "For the tensor `%s` in scope `%s`, the actual rank `%d` (shape = %s) "
        "is not equal to the expected rank `%s`" %
        (name, tf.get_variable_scope().name, actual_rank, tensor.shape,
         expected_rank))
