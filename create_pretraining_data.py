# coding=utf-8
"""Creates masked LM / next sentence prediction TFRecords for BERT pretraining.

Input: plain text, one sentence per line, a blank line between documents.
Output: `tf.train.Example` records with the features `run_pretraining.py`
reads (input_ids, input_mask, segment_ids, masked_lm_positions,
masked_lm_ids, masked_lm_weights, next_sentence_labels).
--next_sentence_prediction=false writes single segments of consecutive
sentences instead (RoBERTa's FULL-SENTENCES), without next_sentence_labels.

Two modes:

Faithful (the default): one process, exactly upstream's output. For the
same input files, vocab and flags (including --random_seed) the records are
identical, record for record, to those of google-research/bert's
create_pretraining_data.py: a single `random.Random(random_seed)` is drawn
from in exactly upstream's order, over the whole corpus, and the records are
written round-robin over the comma-separated --output_file list. Like
upstream it holds every tokenized document in memory (about 3.5 x the
text), but not the instances: each is serialized as soon as it is made
(pretraining_instances.InstanceMaker) and waits in a scratch file for the
final shuffle, so memory does not grow with --dupe_factor.

Sharded (--num_workers, --output_dir or --dask_scheduler): for corpora of
any size, on every core or on a Dask cluster; see
bertkit/data/sharded_mode.py.
Each shard is upstream's algorithm over that shard, so the records differ
from faithful mode's.

Both modes read local paths and URLs (through fsspec), in upstream's text
format, JSONL or Parquet (see bertkit/data/corpus_input.py).

--tokenizer_backend=fast (the default) tokenizes with
fast_tokenization.FastTokenizer, which gives exactly
tokenization.FullTokenizer's tokens (so the same records) several times
faster; --tokenizer_backend=python runs tokenization.py itself.

TensorFlow is imported only to write non-local paths (gs://...).
Unlike upstream, bad input (a glob matching nothing, a file that is not
UTF-8 or a JSONL line that is not JSON, a truncated or damaged compressed
or Parquet file, an unusable vocab or flag value, an unwritable output
directory, an unreachable Dask scheduler) ends
the program with one `error:` line, and output files only appear under
their final names once completely written.
"""

import dataclasses
import os
import random
import sys

from absl import app
from absl import flags
from absl import logging

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common import file_patterns
from bertkit.common import shared_flags
from bertkit.data import corpus_input
from bertkit.data import creation_options
from bertkit.data import creation_progress
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.data import sharded_mode

FLAGS = flags.FLAGS
# The flags' defaults: those of the options they make.
DEFAULTS = creation_options.CreationOptions

# The shell's status for a command ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def define_flags():
  """Defines the command-line flags (only when run as a program, so that
  tests can import several programs into one process)."""
  _define_input_and_output_flags()
  _define_tokenizer_flags()
  _define_instance_flags()
  _define_sharded_mode_flags()


def _define_input_and_output_flags():
  """The corpus (`corpus_input.Corpus`) and faithful mode's output."""
  flags.DEFINE_string("input_file", None,
                      "Input raw text file (or comma-separated list of files). "
                      "Each item may be a glob, a directory (sharded mode) or "
                      "a URL fsspec serves (s3://, gs://, hdfs://, ... with "
                      "the matching fsspec package installed).")
  flags.DEFINE_string("input_format", DEFAULTS.input_format,
                      corpus_input.INPUT_FORMAT_HELP)
  flags.DEFINE_string("text_field", DEFAULTS.text_field,
                      corpus_input.TEXT_FIELD_HELP)
  flags.DEFINE_string(
      "output_file", DEFAULTS.output_file,
      "Output TF example file (or comma-separated list of files).")


def _define_tokenizer_flags():
  """The vocab, and how text becomes its tokens."""
  shared_flags.define_vocab_file()
  shared_flags.define_do_lower_case()
  flags.DEFINE_enum(
      "tokenizer_backend", DEFAULTS.tokenizer_backend, ["fast", "python"],
      "fast: bertkit/data/fast_tokenization.py. python: tokenization.py "
      "(upstream's code). Same tokens, so the same records.")


def _define_instance_flags():
  """How instances are cut, masked, repeated and packed."""
  shared_flags.define_max_seq_length(DEFAULTS.max_seq_length)
  shared_flags.define_masking_rate()
  flags.DEFINE_integer("random_seed", DEFAULTS.random_seed,
                       "Random seed for data generation.")
  flags.DEFINE_integer(
      "dupe_factor", DEFAULTS.dupe_factor,
      "Number of times to duplicate the input data (with different masks). "
      "Default: 10 (upstream's) with --masking=static, 1 with "
      "--masking=dynamic.")
  flags.DEFINE_enum(
      "masking", DEFAULTS.masking,
      list(pretraining_instances.MASKING_CHOICES),
      "static: upstream's records, masks drawn here once per record. "
      "dynamic: records without masks (input_ids, input_mask, segment_ids, "
      "next_sentence_labels), of the same token pairs; run_pretraining.py "
      "draws new masks every epoch.")
  flags.DEFINE_bool(
      "next_sentence_prediction", DEFAULTS.next_sentence_prediction,
      "true: upstream's segment pairs with next-sentence labels. false: "
      "RoBERTa's FULL-SENTENCES: each record is one segment of consecutive "
      "sentences filling --max_seq_length, across documents (an extra [SEP] "
      "between two), without the next_sentence_labels feature; "
      "run_pretraining.py then trains the masked LM alone. "
      "--short_seq_prob does not apply to it.")
  flags.DEFINE_float(
      "short_seq_prob", DEFAULTS.short_seq_prob,
      "Probability of creating sequences which are shorter than the "
      "maximum length.")
  flags.DEFINE_bool(
      "pack_sequences", DEFAULTS.pack_sequences,
      "Pack the instances into rows of --max_seq_length, at most "
      "--max_sequences_per_pack to a row (bertkit/data/packing.py: "
      "shortest-pack-first histogram packing), so that training computes "
      "little padding. The records then also say which sequence each "
      "token belongs to, its position in it, and each sequence's [CLS] "
      "index and next-sentence "
      "label; run_pretraining.py recognises them. With --masking=dynamic "
      "the rows hold no masks and run_pretraining.py draws each sequence's "
      "masks.")
  flags.DEFINE_integer(
      "max_sequences_per_pack", DEFAULTS.max_sequences_per_pack,
      "With --pack_sequences: the most sequences in one row.")


def _define_sharded_mode_flags():
  """Where and on what sharded mode runs (bertkit/data/sharded_mode.py)."""
  flags.DEFINE_integer(
      "num_workers", DEFAULTS.num_workers,
      "Sharded mode (see bertkit/data/sharded_mode.py): number of "
      "local worker processes (default when --output_dir is given: one per "
      "core).")
  flags.DEFINE_string(
      "dask_scheduler", DEFAULTS.dask_scheduler,
      "Sharded mode on a Dask cluster: the scheduler's address, "
      "tcp://HOST:PORT (as `dask scheduler` prints it). Its workers must "
      "import this repository, read --input_file and write the output "
      "directory at the same paths.")
  flags.DEFINE_string(
      "output_dir", DEFAULTS.output_dir,
      "Sharded mode: directory for the shard files "
      "part-SSSSS-of-NNNNN.tfrecord (created if missing). Without it, "
      "--output_file is the shards' prefix.")
  flags.DEFINE_float(
      "shard_size_mb", DEFAULTS.shard_size_mb,
      "Sharded mode: the largest input MB of a shard. Shards are planned "
      "from the corpus size (about 32 of them, none under 0.25 MB); small "
      "files are packed together, larger ones split at document boundaries. "
      "Worker memory grows with the shard size; next-sentence negatives come "
      "from the same shard.")
  flags.DEFINE_bool(
      "resume", DEFAULTS.resume,
      "Sharded mode: skip shards whose output file already exists (files get "
      "their final name only once complete). --noresume rewrites every shard.")


def check_output_files(output_files):
  """Checks that every output file can be created, before the long work.

  Args:
    output_files: the final output paths.

  Raises:
    errors.UserError: a file is listed twice, or its directory does not
      exist or cannot be written to.
  """
  seen = set()
  for path in output_files:
    if path in seen:
      raise errors.UserError(
          "--output_file lists %s twice; each output file must be distinct"
          % path)
    seen.add(path)
    directory = os.path.dirname(path) or "."
    isdir = (atomic_io.gfile().isdir if atomic_io.is_url(directory)
             else os.path.isdir)
    if not isdir(directory):
      raise errors.UserError(
          "output directory %s (of --output_file %s) does not exist"
          % (directory, path))
    # Permission bits do not tell (root ignores them, gs:// has none):
    # creating a file is the only reliable test.
    probe = atomic_io.partial_name(path)
    try:
      with atomic_io.open_file(probe, "w") as f:
        f.write("")
      atomic_io.remove(probe)
    except Exception as e:  # pylint: disable=broad-except
      # OSError, or tf.errors.OpError for a URL.
      raise errors.UserError(
          "cannot write to output directory %s (of --output_file %s): %s"
          % (directory, path, getattr(e, "strerror", None) or
             getattr(e, "message", None) or e)) from None


def read_corpus_documents(input_files, tokenize, report, text_field):
  """Faithful mode's reading: every input file, documents as upstream's.

  Args:
    input_files: `corpus_input.InputFile`s, read in this order.
    tokenize: text -> list of tokens (in any representation).
    report: called as report(num_bytes, 0) as input is read.
    text_field: the JSON field / Parquet column of JSONL/Parquet files.

  Returns:
    The non-empty documents, each a list of segments (lists of tokens).

  Raises:
    errors.UserError: a file is unreadable or malformed, or no document
      holds any token.
  """
  pieces = [corpus_input.ShardPiece(f.path, 0, f.size, f.format)
            for f in input_files]
  documents = corpus_input.read_documents(pieces, tokenize, report,
                                          text_field,
                                          files_end_documents=False)
  if not documents:
    raise errors.UserError(
        "no usable document in --input_file %s: every line is empty or "
        "tokenizes to nothing" % ",".join(f.path for f in input_files))
  logging.info("Read %d documents (%d sentences) from %d file(s)",
               len(documents), sum(len(d) for d in documents),
               len(input_files))
  return documents


def _example_logger(vocab):
  """A function that logs one record as upstream logs its first examples
  (at DEBUG: shown with -v 1)."""
  inv_vocab = {i: t for t, i in vocab.items()}

  def log_example(record):
    features = pretraining_records.parse_example(record)
    length = sum(features["input_mask"])
    logging.debug("*** Example ***")
    logging.debug("tokens: %s", " ".join(
        inv_vocab[i] for i in features["input_ids"][:length]))
    for feature in pretraining_records.record_kind_of(features).features:
      logging.debug("%s: %s", feature.name,
                    " ".join(str(x) for x in features[feature.name]))

  return log_example


def run_faithful_mode(options):
  """Faithful mode, from the options to written output files.

  Args:
    options: the `creation_options.CreationOptions` (files, globs or URLs;
      directories are refused); its random_seed seeds the one
      `random.Random` behind every choice.

  Returns:
    The number of records written.

  Raises:
    errors.UserError: on bad input; no output file is then created.
  """
  if not options.output_file:
    raise errors.UserError(
        "--output_file is required (or --output_dir/--num_workers/"
        "--dask_scheduler for sharded mode)")
  params, dupe_factor = options.params, options.num_passes
  output_files = file_patterns.split_file_list(options.output_file,
                                               "output_file")
  check_output_files(output_files)
  vocab = pretraining_instances.load_checked_vocab(options.vocab_file)
  input_files = corpus_input.expand_corpus(options.corpus,
                                           read_directories=False)
  logging.info("*** Reading from input files ***")
  for f in input_files:
    logging.info("  %s (%s)", f.path, f.format)

  tokenize_to_ids = pretraining_instances.make_tokenizer(
      vocab, options.do_lower_case, options.tokenizer_backend).tokenize_to_ids
  codes = pretraining_instances.make_encoder(vocab, params).token_codes
  input_bytes = sum(f.size for f in input_files)
  progress = creation_progress.Progress(sys.stderr,
                                        input_bytes * (1 + dupe_factor))
  documents = read_corpus_documents(
      input_files, lambda text: [codes[i] for i in tokenize_to_ids(text)],
      progress.add, options.text_field)
  num_records = pretraining_instances.write_instances(
      documents, random.Random(options.random_seed), vocab, params,
      dupe_factor, output_files, progress.add, pass_work=input_bytes,
      log_example=_example_logger(vocab),
      max_sequences_per_pack=options.pack_limit)
  progress.close()
  logging.info("done: %s", progress.line())
  logging.info("Wrote %d total instances to %s", num_records,
               ", ".join(output_files))
  return num_records


def options_from_flags():
  """The `creation_options.CreationOptions` the flags ask for, checked.

  Raises:
    errors.UserError: a flag value is out of range (`creation_options`).
  """
  return creation_options.CreationOptions(**{
      field.name: getattr(FLAGS, field.name)
      for field in dataclasses.fields(creation_options.CreationOptions)})


def run(options):
  """One run of the program, faithful or sharded as the options say.

  Raises:
    errors.UserError: on bad input.
    errors.TrainingFailed: a local worker died or the Dask scheduler was
      lost (sharded mode).
  """
  if not options.sharded:
    run_faithful_mode(options)
    return
  output = sharded_mode.run_sharded(options)
  logging.info("Wrote %d total instances to %s (%d shard file(s) now "
               "complete; run_pretraining.py reads them with "
               "--input_file='%s')", output.num_instances, output.pattern,
               len(output.paths), output.pattern)


def main(argv):
  del argv  # Unused.
  options = options_from_flags()
  try:
    run(options)
  except KeyboardInterrupt:
    if not options.sharded:
      raise
    print("\ninterrupted: complete shard files are kept; rerun the same "
          "command to make the others", file=sys.stderr, flush=True)
    sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("vocab_file")
  app.run(errors.main_with_user_errors(main),
          flags_parser=errors.parse_flags)
