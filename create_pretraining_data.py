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
bertkit/data/pretraining_shards.py.
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
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.data import pretraining_shards

FLAGS = flags.FLAGS

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
  corpus_input.define_flags()  # --input_format, --text_field
  flags.DEFINE_string(
      "output_file", None,
      "Output TF example file (or comma-separated list of files).")


def _define_tokenizer_flags():
  """The vocab, and how text becomes its tokens."""
  shared_flags.define_vocab_file()
  shared_flags.define_do_lower_case()
  flags.DEFINE_enum(
      "tokenizer_backend", "fast", ["fast", "python"],
      "fast: bertkit/data/fast_tokenization.py. python: tokenization.py "
      "(upstream's code). Same tokens, so the same records.")


def _define_instance_flags():
  """How instances are cut, masked, repeated and packed."""
  shared_flags.define_max_seq_length(128)
  shared_flags.define_masking_rate()
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
  flags.DEFINE_integer(
      "dupe_factor", None,
      "Number of times to duplicate the input data (with different masks). "
      "Default: 10 (upstream's) with --masking=static, 1 with "
      "--masking=dynamic.")
  flags.DEFINE_enum(
      "masking", pretraining_instances.STATIC,
      list(pretraining_instances.MASKING_CHOICES),
      "static: upstream's records, masks drawn here once per record. "
      "dynamic: records without masks (input_ids, input_mask, segment_ids, "
      "next_sentence_labels), of the same token pairs; run_pretraining.py "
      "draws new masks every epoch.")
  flags.DEFINE_bool(
      "next_sentence_prediction", True,
      "true: upstream's segment pairs with next-sentence labels. false: "
      "RoBERTa's FULL-SENTENCES: each record is one segment of consecutive "
      "sentences filling --max_seq_length, across documents (an extra [SEP] "
      "between two), without the next_sentence_labels feature; "
      "run_pretraining.py then trains the masked LM alone. "
      "--short_seq_prob does not apply to it.")
  flags.DEFINE_float(
      "short_seq_prob", 0.1,
      "Probability of creating sequences which are shorter than the "
      "maximum length.")
  flags.DEFINE_bool(
      "pack_sequences", False,
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
      "max_sequences_per_pack", 3,
      "With --pack_sequences: the most sequences in one row.")


def _define_sharded_mode_flags():
  """The job of sharded mode (`pretraining_shards.ShardedJob`)."""
  flags.DEFINE_integer(
      "num_workers", None,
      "Sharded mode (see bertkit/data/pretraining_shards.py): number of "
      "local worker processes (default when --output_dir is given: one per "
      "core).")
  flags.DEFINE_string(
      "dask_scheduler", None,
      "Sharded mode on a Dask cluster: the scheduler's address, "
      "tcp://HOST:PORT (as `dask scheduler` prints it). Its workers must "
      "import this repository, read --input_file and write the output "
      "directory at the same paths.")
  flags.DEFINE_string(
      "output_dir", None,
      "Sharded mode: directory for the shard files "
      "part-SSSSS-of-NNNNN.tfrecord (created if missing). Without it, "
      "--output_file is the shards' prefix.")
  flags.DEFINE_float(
      "shard_size_mb", 16.0,
      "Sharded mode: the largest input MB of a shard. Shards are planned "
      "from the corpus size (about 32 of them, none under 0.25 MB); small "
      "files are packed together, larger ones split at document boundaries. "
      "Worker memory grows with the shard size; next-sentence negatives come "
      "from the same shard.")
  flags.DEFINE_bool(
      "resume", True,
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


def run_faithful_mode(corpus, output_file, recipe):
  """Faithful mode, from flag values to written output files.

  Args:
    corpus: the `corpus_input.Corpus` (files, globs or URLs; directories
      are refused).
    output_file: comma-separated output files.
    recipe: the `pretraining_instances.RecordRecipe`; its random_seed seeds
      the one `random.Random` behind every choice.

  Returns:
    The number of records written.

  Raises:
    errors.UserError: on bad input; no output file is then created.
  """
  params, dupe_factor = recipe.params, recipe.dupe_factor
  pretraining_instances.validate_params(params, dupe_factor)
  output_files = file_patterns.split_file_list(output_file, "output_file")
  check_output_files(output_files)
  vocab = pretraining_instances.load_checked_vocab(recipe.vocab_file)
  input_files = corpus_input.expand_corpus(corpus, read_directories=False)
  logging.info("*** Reading from input files ***")
  for f in input_files:
    logging.info("  %s (%s)", f.path, f.format)

  tokenize_to_ids = pretraining_instances.make_tokenizer(
      vocab, recipe.do_lower_case, recipe.tokenizer_backend).tokenize_to_ids
  codes = pretraining_instances.make_encoder(vocab, params).token_codes
  input_bytes = sum(f.size for f in input_files)
  progress = pretraining_instances.Progress(sys.stderr,
                                            input_bytes * (1 + dupe_factor))
  documents = read_corpus_documents(
      input_files, lambda text: [codes[i] for i in tokenize_to_ids(text)],
      progress.add, corpus.text_field)
  num_records = pretraining_instances.write_instances(
      documents, random.Random(recipe.random_seed), vocab, params,
      dupe_factor, output_files, progress.add, pass_work=input_bytes,
      log_example=_example_logger(vocab),
      max_sequences_per_pack=recipe.max_sequences_per_pack)
  progress.close()
  logging.info("done: %s", progress.line())
  logging.info("Wrote %d total instances to %s", num_records,
               ", ".join(output_files))
  return num_records


def recipe_from_flags():
  """The `pretraining_instances.RecordRecipe` the flags ask for.

  Raises:
    errors.UserError: --pack_sequences with --max_sequences_per_pack < 1
      or with --next_sentence_prediction=false.
  """
  params = pretraining_instances.InstanceParams(
      max_seq_length=FLAGS.max_seq_length,
      short_seq_prob=FLAGS.short_seq_prob,
      masked_lm_prob=FLAGS.masked_lm_prob,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      do_whole_word_mask=FLAGS.do_whole_word_mask,
      masking=FLAGS.masking,
      next_sentence_prediction=FLAGS.next_sentence_prediction)
  dupe_factor = FLAGS.dupe_factor
  if dupe_factor is None:
    dupe_factor = 1 if FLAGS.masking == pretraining_instances.DYNAMIC else 10
  max_sequences_per_pack = None
  if FLAGS.pack_sequences and not FLAGS.next_sentence_prediction:
    raise errors.UserError(
        "--pack_sequences with --next_sentence_prediction=false: its "
        "sequences already fill --max_seq_length, there is nothing to pack; "
        "drop --pack_sequences")
  if FLAGS.pack_sequences:
    if FLAGS.max_sequences_per_pack < 1:
      raise errors.UserError(
          "--max_sequences_per_pack=%d must be at least 1"
          % FLAGS.max_sequences_per_pack)
    max_sequences_per_pack = FLAGS.max_sequences_per_pack
  return pretraining_instances.RecordRecipe(
      FLAGS.vocab_file, FLAGS.do_lower_case, params, FLAGS.random_seed,
      dupe_factor, FLAGS.tokenizer_backend, max_sequences_per_pack)


def main(argv):
  del argv  # Unused.
  recipe = recipe_from_flags()
  corpus = corpus_input.Corpus(FLAGS.input_file, FLAGS.input_format,
                               FLAGS.text_field)
  if (FLAGS.num_workers is not None or FLAGS.output_dir is not None or
      FLAGS.dask_scheduler is not None):
    try:
      output = pretraining_shards.run_sharded(
          corpus, recipe, pretraining_shards.ShardedJob(
              FLAGS.output_file, FLAGS.output_dir, FLAGS.num_workers,
              FLAGS.shard_size_mb, FLAGS.resume, FLAGS.dask_scheduler))
    except KeyboardInterrupt:
      print("\ninterrupted: complete shard files are kept; rerun the same "
            "command to make the others", file=sys.stderr, flush=True)
      sys.exit(EXIT_INTERRUPTED)
    logging.info("Wrote %d total instances to %s (%d shard file(s) now "
                 "complete; run_pretraining.py reads them with "
                 "--input_file='%s')", output.num_instances, output.pattern,
                 len(output.paths), output.pattern)
    return
  if not FLAGS.output_file:
    raise errors.UserError(
        "--output_file is required (or --output_dir/--num_workers/"
        "--dask_scheduler for sharded mode)")
  run_faithful_mode(corpus, FLAGS.output_file, recipe)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("vocab_file")
  app.run(errors.main_with_user_errors(main),
          flags_parser=errors.parse_flags)
