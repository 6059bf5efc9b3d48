# coding=utf-8
"""Token features or sentence vectors of a BERT model, one per input line.

Upstream's flags and output: each line of --input_file (`text_a ||| text_b`
for a pair) becomes one JSON line of --output_file,

  {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [
      {"index": -1, "values": [0.123456, ...]}, ...]}, ...]}

holding, for each token the model saw ([CLS] and [SEP] included), the
outputs of the encoder layers --layers (default -1,-2,-3,-4), each value
rounded to 6 decimals. TPU flags are dropped.

Beyond upstream:
  * --init_checkpoint is any checkpoint the toolkit reads: a checkpoint
    prefix, a training output directory, Google's model directory or a
    Hugging Face directory (then --bert_config_file, --vocab_file and
    --do_lower_case may be left out: what the directory holds stands for
    them, and a flag given must agree with it);
  * --pooling=cls|mean|max writes one sentence vector per line instead
    (.npy float32 [lines, H] or .jsonl, by --output_file's suffix), masked
    as sentence-transformers masks padding; --normalize divides each by its
    L2 norm. --pooling=model takes the rule of a sentence-transformers
    directory (its modules.json and 1_Pooling/config.json), whose
    normalisation and max_seq_length are also the defaults;
  * --cpu_replicas / --num_gpus / --multi_gpu and --distribution_strategy
    (mirrored, central_storage, one_device): the replicas predict each batch
    together, the output in input order;
  * input as text, JSON lines or Parquet (--input_format, --text_field), as
    create_pretraining_data.py reads them: one record (line, JSON line, row)
    per example;
  * progress lines (lines done, lines/sec, ETA) every 10 seconds;
  * bad input is one `error:` line and exit code 2, and --output_file
    appears only once complete.

docs/extract_features.md has the details.
"""

import os
import sys
import tempfile

from absl import app
from absl import flags
from absl import logging

from bertkit.common import atomic_io
from bertkit.common import console
from bertkit.common import cpu_kernels
from bertkit.common import options
from bertkit.common import shared_flags
from bertkit.common import training_flags
from bertkit.common.errors import UserError, main_with_user_errors, parse_flags
from bertkit.data import corpus_input
from bertkit.data import extraction_input

# Nothing above imports TensorFlow: flags and files are checked first (see
# run_classifier.py).
console.quiet_native_logs(sys.argv)
cpu_kernels.prefer_onednn()
# pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
# Upstream's --max_seq_length default, for models that do not say theirs.
UPSTREAM_MAX_SEQ_LENGTH = 128
# Sentence vectors: batches sorted by length within windows of this many.
SORT_WINDOW_BATCHES = 64
# Strategies of one process: the replicas share this process's batches.
ONE_PROCESS_STRATEGIES = ("one_device", "mirrored", "central_storage")


def define_flags():
  """Upstream's flags (TPU ones dropped), then ours."""
  flags.DEFINE_string("input_file", None,
                      "One example per line, 'text_a ||| text_b' for a pair; "
                      "also JSON lines or Parquet (--input_format), several "
                      "files or globs, comma-separated.")
  flags.DEFINE_string("output_file", None,
                      "JSON lines of token features; with --pooling, .npy "
                      "or .jsonl sentence vectors.")
  flags.DEFINE_string("layers", options.UPSTREAM_LAYERS,
                      "Encoder layers to output, comma-separated; negative "
                      "count from the last. With --pooling: the one layer "
                      "pooled (default -1).")
  shared_flags.define_bert_config_file()
  flags.DEFINE_integer("max_seq_length", UPSTREAM_MAX_SEQ_LENGTH,
                       "Sequence length S after WordPiece tokenization: "
                       "longer lines are truncated. Default: a "
                       "sentence-transformers directory's max_seq_length, "
                       "else 128.")
  flags.DEFINE_string("init_checkpoint", None,
                      "The model: a checkpoint prefix, a training output "
                      "directory, Google's model directory or a Hugging Face "
                      "(or sentence-transformers) directory.")
  flags.DEFINE_string("vocab_file", None,
                      "The model's vocab.txt (default: a Hugging Face "
                      "directory's).")
  shared_flags.define_do_lower_case()
  flags.DEFINE_integer("batch_size",
                       options.FeatureExtractionOptions.batch_size,
                       "Batch size for predictions, over all replicas.")
  flags.DEFINE_enum("pooling", None, options.POOLINGS,
                    "Write one sentence vector per line: the [CLS] vector, "
                    "the mean or the maximum over the real tokens, or "
                    "'model': a sentence-transformers directory's rule.")
  flags.DEFINE_bool("normalize", None,
                    "With --pooling: divide each vector by its L2 norm. "
                    "Default: as a sentence-transformers directory does "
                    "(a Normalize module), else not.")
  flags.DEFINE_enum("input_format", "auto", ("auto",) + corpus_input.FORMATS,
                    "auto: by file name (.jsonl/.ndjson[.gz|.zst]: jsonl, "
                    ".parquet: parquet, else text). text: one example per "
                    "line. jsonl: one per JSON line, its text in "
                    "--text_field. parquet: one per row, its text in the "
                    "column --text_field.")
  flags.DEFINE_string("text_field", corpus_input.DEFAULT_TEXT_FIELD,
                      corpus_input.TEXT_FIELD_HELP)
  training_flags.define_distribution_flags()


def options_from_flags():
  """The options.FeatureExtractionOptions of the parsed flags."""
  given = {name: shared_flags.given(FLAGS, name)
           for name in ("layers", "max_seq_length", "do_lower_case")}
  return training_flags.options_from_flags(
      options.FeatureExtractionOptions, FLAGS, **given)


def check_files(opts):
  """The named local files, and the output's directory, before TensorFlow
  is imported."""
  shared_flags.check_local_files(opts, ("bert_config_file", "vocab_file"))
  if atomic_io.is_url(opts.output_file):
    return
  directory = os.path.dirname(os.path.abspath(opts.output_file))
  if not os.path.isdir(directory):
    raise UserError("--output_file %s: the directory %s does not exist" % (
        opts.output_file, directory))
  if os.path.isdir(opts.output_file):
    raise UserError("--output_file %s is a directory; expected a file name"
                    % opts.output_file)


def sentence_output(opts, model):
  """(rule, normalize) of --pooling and --normalize, the defaults taken
  from a sentence-transformers directory's ModelPooling `model` (or None)."""
  rule = opts.pooling
  if rule == options.POOLING_FROM_MODEL:
    if model is None:
      raise UserError(
          "--pooling=model takes the pooling of a sentence-transformers "
          "directory (modules.json), but --init_checkpoint %s is none; pass "
          "--pooling=%s" % (opts.init_checkpoint,
                            "|".join(options.POOLING_RULES)))
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
  from bertkit.engine import run_directory
  import modeling
  import tokenization
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
  import tensorflow as tf2
  from bertkit.engine import distribution
  plan = distribution.plan(
      opts.distribution, len(tf2.config.list_physical_devices("GPU")))
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
  from bertkit.engine import runner
  from bertkit.tasks.features import extraction as fx
  # Sorting by length within windows saves padding; token features are
  # large, so they keep the input order (windows of one line).
  order = fx.batch_order(features, 1 if output.pooling is None else
                         opts.batch_size * SORT_WINDOW_BATCHES)
  pairs = fx.in_input_order(runner.predictions(
      prepared, fx.input_fn_builder(features, order, opts.batch_size)),
                            features, order)
  progress = fx.Progress(len(features))
  if output.pooling is None:
    fx.write_token_features(opts.output_file, pairs, output.layer_indexes,
                            progress)
  else:
    fx.write_embeddings(opts.output_file, pairs, len(features), hidden_size,
                        progress)


def run(opts):
  """Writes the features or sentence vectors `opts` ask for.

  Args:
    opts: an options.FeatureExtractionOptions.
  """
  check_files(opts)
  examples = extraction_input.read_examples(
      corpus_input.expand_corpus(corpus_input.Corpus(
          opts.input_file, opts.input_format, opts.text_field)),
      opts.text_field)
  from bertkit.engine import runner
  from bertkit.tasks.features import extraction as fx
  from bertkit.tasks.features import pooling as sentence_pooling
  import tokenization
  model = sentence_pooling.model_pooling(opts.init_checkpoint)
  rule, normalize = sentence_output(opts, model) if opts.pooling else (
      None, False)
  resolved, seq_length = model_inputs(opts, model)
  bert_config = resolved.bert_config
  fx.check_layers(opts.layer_indexes, bert_config.num_hidden_layers)
  check_distribution(opts)
  tokenizer = tokenization.FullTokenizer(resolved.vocab_file,
                                         resolved.do_lower_case)
  features = [fx.convert_example(e, seq_length, tokenizer) for e in examples]
  output = fx.Output(opts.layer_indexes, rule, normalize)
  logging.info("%s", describe(output, len(features), seq_length))
  # The runner's model_dir: prediction writes nothing there that is kept.
  with tempfile.TemporaryDirectory(prefix="extract-features-") as scratch:
    prepared = runner.prepare(
        options.RunOptions(output_dir=scratch,
                           init_checkpoint=opts.init_checkpoint,
                           train_batch_size=opts.batch_size,
                           distribution=opts.distribution),
        fx.extraction_task(bert_config, output), resolved)
    predict_and_write(opts, prepared, features, output,
                      bert_config.hidden_size)
  logging.info("wrote %s", opts.output_file)


def main(argv):
  del argv
  run(options_from_flags())


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main), flags_parser=parse_flags)
