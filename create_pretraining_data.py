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

import os
import random
import sys

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common import file_patterns
from bertkit.common import programs
from bertkit.data import corpus_input
from bertkit.data import creation_options
from bertkit.data import creation_progress
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.data import sharded_mode

# The shell's status for a command ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


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
  file_patterns.check_output_reads_nothing(
      "output_file", output_files, [("input_file", f.path)
                                    for f in input_files] +
      [("vocab_file", options.vocab_file)])
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


def run_until_interrupted(options):
  """`run`, saying on Ctrl-C in sharded mode that the finished shards are
  kept."""
  try:
    run(options)
  except KeyboardInterrupt:
    if not options.sharded:
      raise
    print("\ninterrupted: complete shard files are kept; rerun the same "
          "command to make the others", file=sys.stderr, flush=True)
    sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
  programs.main(creation_options.CreationOptions, run_until_interrupted)
