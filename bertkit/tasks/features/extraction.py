# coding=utf-8
"""Token features and sentence vectors of a BERT model (extract_features.py).

Upstream's rules, in our words, for the examples of data/extraction_input.py:
the first text is tokenized whole, a pair (data/pair_encoding.py) is truncated by dropping the last
token of the longer text until it fits S - 3 ([CLS], [SEP], [SEP]), a single
text is cut to S - 2. The tokens written are those the model saw, [CLS] and
[SEP] included; each value is round(float(x), 6).

`run` resolves and checks the model, and the model runs through the task
runner (engine/loop/runner.py) as a Task whose
predictions are the requested encoder layers [B, S, H], or one pooled vector
[B, H] (features/pooling.py); `runner.predictions` yields them in the order
it is given, on one device or on every replica of the run's strategy. Each
batch is padded to its longest row only, and sentence vectors are predicted
longest first within windows of lines (batch_order), as sentence-transformers
batches; in_input_order puts them back.

Shape notation: B = batch, S = the batch's longest row (at most
max_seq_length), H = hidden size.
"""

import collections
import dataclasses
import functools
import json
import tempfile
import time
from typing import List, Optional

from absl import logging
import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common import heads
from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.data import pair_encoding
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.checkpointing import run_directory
from bertkit.engine.distributed import distribution
from bertkit.engine.input import input_pipeline
from bertkit.engine.loop import model_spec
from bertkit.engine.loop import runner
from bertkit.tasks.features import options as feature_options
from bertkit.tasks.features import pooling as sentence_pooling
import modeling
import tokenization

# Upstream's --max_seq_length default, for models that do not say theirs.
UPSTREAM_MAX_SEQ_LENGTH = 128
# Sentence vectors: batches sorted by length within windows of this many.
SORT_WINDOW_BATCHES = 64
# Strategies of one process: the replicas share this process's batches.
ONE_PROCESS_STRATEGIES = ("one_device", "mirrored", "central_storage")


FEATURE_NAMES = ("unique_ids", "input_ids", "input_mask", "segment_ids")
# Seconds between progress lines.
PROGRESS_EVERY_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class Feature:
  """One example as the model reads it.

  Attributes:
    unique_id: the example's.
    tokens: its wordpieces with [CLS] and [SEP], at most S.
    input_ids, input_mask, segment_ids: one per token; the input pads each
      batch to its longest row (padding changes no real token's vectors:
      the attention gives padding a weight of exactly 0).
  """
  unique_id: int
  tokens: List[str]
  input_ids: List[int]
  input_mask: List[int]
  segment_ids: List[int]


def convert_example(example, seq_length, tokenizer):
  """The Feature of one Example (upstream's truncation and layout)."""
  tokens, segment_ids = pair_encoding.encode(
      tokenizer.tokenize(example.text_a),
      (tokenizer.tokenize(example.text_b) if example.text_b else None) or None,
      seq_length)
  return Feature(unique_id=example.unique_id, tokens=tokens,
                 input_ids=tokenizer.convert_tokens_to_ids(tokens),
                 input_mask=[1] * len(tokens), segment_ids=segment_ids)


def check_layers(layer_indexes, num_layers):
  """Raises UserError unless every index names one of `num_layers` layers
  (Python indexing: -L..L-1)."""
  for index in layer_indexes:
    if not -num_layers <= index < num_layers:
      raise UserError(
          "--layers: %d is out of range for a model of %d encoder layers; "
          "expected indexes from %d to %d (negative: from the last)" % (
              index, num_layers, -num_layers, num_layers - 1))


@dataclasses.dataclass(frozen=True)
class Output:
  """What the model outputs per example.

  Attributes:
    layer_indexes: the encoder layers (one, with pooling).
    pooling: None for token features, else a sentence_pooling rule.
    normalize: L2-normalise the pooled vectors.
  """
  layer_indexes: tuple
  pooling: Optional[str] = None
  normalize: bool = False


def extraction_model_spec(bert_config, output):
  """The runner Task predicting `output` of a BertModel.

  Predictions: "unique_id" [B] and either "layer_output_J" [B, S, H] for the
  J-th of output.layer_indexes, or "embedding" [B, H].
  """

  def build_model(features):
    return modeling.BertModel(
        config=bert_config, is_training=False,
        input_ids=features["input_ids"], input_mask=features["input_mask"],
        token_type_ids=features["segment_ids"])

  def predictions(features):
    layers = build_model(features).get_all_encoder_layers()
    result = {"unique_id": features["unique_ids"]}
    if output.pooling is None:
      for j, index in enumerate(output.layer_indexes):
        result["layer_output_%d" % j] = layers[index]
      return result
    vectors = sentence_pooling.pool(layers[output.layer_indexes[0]],
                                    features["input_mask"], output.pooling)
    result["embedding"] = (sentence_pooling.l2_normalize(vectors)
                           if output.normalize else vectors)
    return result

  return model_spec.ModelSpec(variable_shapes=functools.partial(
      checkpoint_formats.variable_shapes, bert_config,
      heads.ENCODER),
                            train_loss_fns=None, eval_outputs=None,
                            predictions=predictions)


def batch_order(features, window):
  """The order the features are predicted in: within each run of `window`
  consecutive features, longest first (ties in input order), so that a
  batch holds rows of similar length and pads little, as
  sentence-transformers sorts its input.

  Returns:
    A list of indexes into `features`.
  """
  order = []
  for start in range(0, len(features), window):
    order += sorted(range(start, min(start + window, len(features))),
                    key=lambda i: -len(features[i].tokens))
  return order


def input_fn_builder(features, order, batch_size):
  """An input_fn of the features in `order`, batched, each batch padded to
  its longest row (the last batch may be smaller)."""

  def rows():
    for i in order:
      f = features[i]
      yield {"unique_ids": f.unique_id, "input_ids": f.input_ids,
             "input_mask": f.input_mask, "segment_ids": f.segment_ids}

  def input_fn(params=None, input_context=None):
    del params, input_context  # one pipeline: prediction is one process
    shapes = {name: [] if name == "unique_ids" else [None]
              for name in FEATURE_NAMES}
    dataset = tf.data.Dataset.from_generator(rows, output_signature={
        name: tf.TensorSpec(shape, tf.int32)
        for name, shape in shapes.items()})
    return input_pipeline.with_fixed_tuning(dataset.padded_batch(
        batch_size, padded_shapes=shapes, drop_remainder=False))

  return input_fn


def token_features_line(feature, prediction, layer_indexes):
  """Upstream's JSON line of one example's token features.

  Args:
    feature: the example's Feature.
    prediction: its prediction dict ("layer_output_J": [S, H]).
    layer_indexes: the layers, in --layers order.

  Returns:
    One line of JSON (no newline): {"linex_index", "features": [{"token",
    "layers": [{"index", "values"}]}]}, keys in that order.
  """
  tokens = []
  for i, token in enumerate(feature.tokens):
    layers = [collections.OrderedDict([
        ("index", index),
        ("values", [round(float(x), 6)
                    for x in prediction["layer_output_%d" % j][i]])])
              for j, index in enumerate(layer_indexes)]
    tokens.append(collections.OrderedDict([("token", token),
                                           ("layers", layers)]))
  return json.dumps(collections.OrderedDict([
      ("linex_index", feature.unique_id), ("features", tokens)]))


def embedding_line(unique_id, vector):
  """The JSON line of one sentence vector: {"linex_index", "embedding"},
  values rounded as upstream rounds token features."""
  return json.dumps(collections.OrderedDict([
      ("linex_index", unique_id),
      ("embedding", [round(float(x), 6) for x in vector])]))


def progress_line(done, total, elapsed_seconds):
  """"N/T lines (P %), R lines/sec, ETA E s" for the log."""
  rate = done / elapsed_seconds if elapsed_seconds > 0 else 0.0
  eta = "%.0f s" % ((total - done) / rate) if rate > 0 else "unknown"
  return "%d/%d lines (%.1f %%), %.1f lines/sec, ETA %s" % (
      done, total, 100.0 * done / total, rate, eta)


class ExtractionProgress:
  """Logs progress_line every PROGRESS_EVERY_SECONDS and at the end.

  The clock starts when the ExtractionProgress is made, before the model is
  built: the rate is what a stopwatch gives (start-up weighs on the first lines'
  ETA only), never the burst of one batch's lines arriving together.
  """

  def __init__(self, total, clock=time.monotonic):
    self._total, self._clock = total, clock
    self._start = self._last = clock()
    self.done = 0

  def add(self):
    self.done += 1
    now = self._clock()
    if self.done == 1:
      # Start-up ends here: a line now would say 0.1 lines/sec and an ETA of
      # hours, so the first line comes a full interval later.
      self._last = now
    if self.done == self._total or now - self._last >= PROGRESS_EVERY_SECONDS:
      self._last = now
      logging.info("extracted %s", progress_line(self.done, self._total,
                                                 now - self._start))


def in_input_order(predictions, features, order):
  """(Feature, prediction) pairs in input order, from predictions in
  `order` (batch_order); holds at most the predictions of one window.

  Raises:
    RuntimeError: a prediction is not the one `order` expects, or some are
      missing (a bug: the runner keeps the order it is given).
  """
  waiting, done = {}, 0
  for expected, prediction in zip(order, predictions):
    if int(prediction["unique_id"]) != features[expected].unique_id:
      raise RuntimeError("prediction for line %d arrived in place of %d" %
                         (int(prediction["unique_id"]), expected))
    waiting[expected] = prediction
    while done in waiting:
      yield features[done], waiting.pop(done)
      done += 1
  if done != len(features):
    raise RuntimeError("%d predictions for %d lines" % (done, len(features)))


def write_token_features(path, pairs, layer_indexes, progress):
  """Writes upstream's JSON lines atomically (nothing under `path` until the
  last line is written)."""
  with atomic_io.atomic_open(path, "w") as writer:
    for feature, prediction in pairs:
      writer.write(token_features_line(feature, prediction, layer_indexes)
                   + "\n")
      progress.add()


def write_embeddings(path, pairs, num_lines, hidden_size, progress):
  """Writes the sentence vectors atomically: .npy float32 [N, H], or
  .jsonl (embedding_line per line)."""
  if path.endswith(".jsonl"):
    with atomic_io.atomic_open(path, "w") as writer:
      for feature, prediction in pairs:
        writer.write(embedding_line(feature.unique_id,
                                    prediction["embedding"]) + "\n")
        progress.add()
    return
  vectors = np.zeros([num_lines, hidden_size], np.float32)
  for feature, prediction in pairs:
    vectors[feature.unique_id] = prediction["embedding"]
    progress.add()
  with atomic_io.atomic_open(path, "wb") as f:
    np.save(f, vectors)


def sentence_output(opts, model):
  """(rule, normalize) of --pooling and --normalize, the defaults taken
  from a sentence-transformers directory's ModelPooling `model` (or None)."""
  rule = opts.pooling
  if rule == feature_options.POOLING_FROM_MODEL:
    if model is None:
      raise UserError(
          "--pooling=model takes the pooling of a sentence-transformers "
          "directory (modules.json), but --init_checkpoint %s is none; pass "
          "--pooling=%s" % (opts.init_checkpoint,
                            "|".join(feature_options.POOLING_RULES)))
    if model.unsupported:
      raise UserError(model.unsupported)
    rule = model.rule
  normalize = opts.normalize
  if normalize is None:
    normalize = bool(model and model.normalize)
  return rule, normalize


def model_inputs(opts, model):
  """(run_directory.Model, max_seq_length), each checked against the model.

  The config, vocab and casing are the flags', or what the --init_checkpoint
  directory says (run_directory.resolve: a training output directory,
  Google's or a Hugging Face directory).
  """
  resolved = run_directory.resolve(opts.init_checkpoint,
                                   opts.bert_config_file, opts.vocab_file,
                                   opts.do_lower_case)
  max_seq_length = (opts.max_seq_length or (model and model.max_seq_length)
                    or UPSTREAM_MAX_SEQ_LENGTH)
  modeling.check_seq_length_fits(resolved.bert_config, max_seq_length)
  tokenization.check_vocab_fits_config(resolved.require_vocab(),
                                       resolved.bert_config.vocab_size)
  return resolved, max_seq_length


def check_distribution(opts):
  """Refuses strategies of several processes and a batch the replicas do
  not share evenly."""
  plan = distribution.plan(
      opts.distribution, len(tf.config.list_physical_devices("GPU")))
  if plan.name not in ONE_PROCESS_STRATEGIES or plan.num_workers > 1:
    raise UserError(
        "extract_features predicts in one process; --distribution_strategy="
        "%s needs several. Use %s (with --cpu_replicas or --num_gpus)" % (
            plan.name, ", ".join(ONE_PROCESS_STRATEGIES)))
  if opts.batch_size % plan.num_replicas:
    raise UserError("--batch_size=%d must divide by the %d replicas (%s)" % (
        opts.batch_size, plan.num_replicas, plan.name))


def describe(output, num_lines, seq_length):
  """The log line saying what this run computes."""
  if output.pooling is None:
    what = "token features of layers %s" % ",".join(
        map(str, output.layer_indexes))
  else:
    what = "%s pooling of layer %d%s" % (
        output.pooling, output.layer_indexes[0],
        ", normalised" if output.normalize else "")
  return "%d lines, max_seq_length %d, %s" % (num_lines, seq_length, what)


def predict_and_write(opts, prepared, features, output, hidden_size):
  """Predicts `features` with the prepared run and writes --output_file."""
  # Sorting by length within windows saves padding; token features are
  # large, so they keep the input order (windows of one line).
  order = batch_order(features, 1 if output.pooling is None else
                         opts.batch_size * SORT_WINDOW_BATCHES)
  pairs = in_input_order(runner.predictions(
      prepared, input_fn_builder(features, order, opts.batch_size)),
                            features, order)
  progress = ExtractionProgress(len(features))
  if output.pooling is None:
    write_token_features(opts.output_file, pairs, output.layer_indexes,
                            progress)
  else:
    write_embeddings(opts.output_file, pairs, len(features), hidden_size,
                        progress)


def run(opts, examples):
  """Writes the features or sentence vectors `opts` ask for.

  Args:
    opts: a FeatureExtractionOptions.
    examples: the input's extraction_input.Examples (read_checked).
  """
  model = sentence_pooling.model_pooling(opts.init_checkpoint)
  rule, normalize = sentence_output(opts, model) if opts.pooling else (
      None, False)
  resolved, seq_length = model_inputs(opts, model)
  bert_config = resolved.bert_config
  check_layers(opts.layer_indexes, bert_config.num_hidden_layers)
  check_distribution(opts)
  tokenizer = tokenization.FullTokenizer(resolved.vocab_file,
                                         resolved.do_lower_case)
  features = [convert_example(e, seq_length, tokenizer) for e in examples]
  output = Output(opts.layer_indexes, rule, normalize)
  logging.info("%s", describe(output, len(features), seq_length))
  # The runner's model_dir: prediction writes nothing there that is kept.
  with tempfile.TemporaryDirectory(prefix="extract-features-") as scratch:
    prepared = runner.prepare(
        options.RunOptions(output_dir=scratch,
                           init_checkpoint=opts.init_checkpoint,
                           train_batch_size=opts.batch_size,
                           distribution=opts.distribution,
                           precision=options.PrecisionOptions(
                               use_bf16=opts.precision.use_bf16)),
        extraction_model_spec(bert_config, output), resolved)
    predict_and_write(opts, prepared, features, output,
                      bert_config.hidden_size)
  logging.info("wrote %s", opts.output_file)
