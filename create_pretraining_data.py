# coding=utf-8
"""Creates masked LM / next sentence prediction TFRecords for BERT pretraining.

Input: plain text, one sentence per line, a blank line between documents.
Output: `tf.train.Example` records with the features `run_pretraining.py`
reads (input_ids, input_mask, segment_ids, masked_lm_positions,
masked_lm_ids, masked_lm_weights, next_sentence_labels).

Two modes:

Faithful (the default): one process, exactly upstream's program. For the
same input files, vocab and flags (including --random_seed) the records are
identical, record for record, to those of google-research/bert's
create_pretraining_data.py: a single `random.Random(random_seed)` is drawn
from in exactly upstream's order, over the whole corpus, and the records are
written round-robin over the comma-separated --output_file list. Any change
to the order of `rng` calls in this file changes every record after it. Like
upstream it holds every document and every instance of every --dupe_factor
pass in memory, so it needs memory proportional to corpus x dupe_factor.

Sharded (--num_workers and/or --output_dir): for corpora of any size. The
input (globs, comma lists, directories, read recursively) is cut into
shards of about --shard_size_mb: consecutive small files are packed
together, a large file is split into byte ranges that are moved to document
boundaries (blank lines). Each shard is processed by one of --num_workers
processes with upstream's algorithm, as if it were the whole corpus, drawing
from its own `random.Random(shard_seed(random_seed, shard_index))`; so:
  * random next-sentence segments come from documents of the same shard, and
    instances are shuffled within the shard;
  * a document ends at the end of its file (faithful mode, like upstream,
    continues it into the next file when the file lacks a final blank line);
  * the output is deterministic whatever --num_workers is, and shard i's
    file depends only on its own input (flags, seed, shard index): it equals
    the faithful output for that text with --random_seed=shard_seed(...);
  * memory is bounded by the shard size, not by the corpus size or
    dupe_factor: a worker holds its shard's tokenized documents (about 3.5 x
    the shard's text) on top of ~50 MB of code (and, with the fast
    tokenizer, a word cache of at most 200k words), and spills the shard's
    records to a scratch file next to the output until it writes them
    shuffled (disk: about twice the shard's output while it is written);
  * one output file per shard, `<prefix>-00003-of-00012.tfrecord`, where
    the prefix is `<output_dir>/part`, or --output_file minus a `.tfrecord`
    suffix. run_pretraining.py reads them with a glob, e.g.
    --input_file='<output_dir>/*.tfrecord';
  * a shard file gets its final name only once complete, and a rerun skips
    shards whose file exists (--resume, on by default). `<prefix>.manifest.json`
    records the inputs and flags; resuming into an output whose manifest
    differs is refused (use --noresume to start over).
  * local files only; TensorFlow is never imported (workers stay small) except
    by --tokenizer_backend=python, whose tokenization.py reads the vocab with
    tf.io.gfile.

--tokenizer_backend=fast tokenizes with fast_tokenization.FastTokenizer,
which gives exactly tokenization.FullTokenizer's tokens (so the same records)
several times faster.

Unlike upstream, bad input (a glob matching nothing, a file that is not UTF-8,
an unusable vocab or flag value, an unwritable output directory) ends the
program with one `error:` line, and output files only appear under their
final names once completely written.
"""

import array
import collections
import contextlib
import glob
import importlib
import json
import multiprocessing
import os
import random
import signal
import sys
import time
import uuid
import zlib

from absl import app
from absl import flags
from absl import logging

import errors
import fast_tokenization


class _LazyModule(object):
  """A module imported on its first attribute access.

  Worker processes are started with "spawn", which re-runs this script in
  each of them, and sharded mode's memory is that of all its processes:
  TensorFlow (~430 MB, ~5 s per process), the modules that import it, and
  numpy (~25 MB, needed by workers only) are loaded only by the code paths
  that use them.
  """

  def __init__(self, name):
    self._name = name

  def __getattr__(self, attr):
    return getattr(importlib.import_module(self._name), attr)


tf = _LazyModule("tensorflow.compat.v1")
atomic_io = _LazyModule("atomic_io")
tokenization = _LazyModule("tokenization")
pretraining_records = _LazyModule("pretraining_records")

FLAGS = flags.FLAGS


def define_flags():
  """Defines the command-line flags (only when run as a program, so that
  tests can import several programs into one process)."""
  flags.DEFINE_string("input_file", None,
                      "Input raw text file (or comma-separated list of files). "
                      "Each item may be a glob.")
  flags.DEFINE_string(
      "output_file", None,
      "Output TF example file (or comma-separated list of files).")
  flags.DEFINE_string("vocab_file", None,
                      "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_bool(
      "do_lower_case", True,
      "Whether to lower case the input text. Should be True for uncased "
      "models and False for cased models.")
  flags.DEFINE_bool(
      "do_whole_word_mask", False,
      "Whether to use whole word masking rather than per-WordPiece masking.")
  flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked LM predictions per sequence.")
  flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
  flags.DEFINE_integer(
      "dupe_factor", 10,
      "Number of times to duplicate the input data (with different masks).")
  flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
  flags.DEFINE_float(
      "short_seq_prob", 0.1,
      "Probability of creating sequences which are shorter than the "
      "maximum length.")
  flags.DEFINE_enum(
      "tokenizer_backend", "python", ["python", "fast"],
      "python: tokenization.FullTokenizer (upstream's code). fast: "
      "fast_tokenization.FastTokenizer, same tokens, several times faster.")
  flags.DEFINE_integer(
      "num_workers", None,
      "Sharded mode (see the module doc): number of worker processes (default "
      "when --output_dir is given: one per core).")
  flags.DEFINE_string(
      "output_dir", None,
      "Sharded mode: directory for the shard files "
      "part-SSSSS-of-NNNNN.tfrecord (created if missing). Without it, "
      "--output_file is the shards' prefix.")
  flags.DEFINE_float(
      "shard_size_mb", 16.0,
      "Sharded mode: input MB per shard. Small files are packed together up "
      "to this size; larger files are split at document boundaries. Worker "
      "memory grows with it; next-sentence negatives come from the same shard.")
  flags.DEFINE_bool(
      "resume", True,
      "Sharded mode: skip shards whose output file already exists (files get "
      "their final name only once complete). --noresume rewrites every shard.")


# [CLS] + at least one token of A + [SEP] + at least one of B + [SEP].
MIN_SEQ_LENGTH = 5
# Far above any BERT position table; a larger value is almost surely a typo.
MAX_SEQ_LENGTH = 8192

# Tokens the records are built from: every instance uses [CLS] and [SEP],
# masking uses [MASK], and WordPiece emits [UNK] for uncoverable words.
REQUIRED_VOCAB_TOKENS = ("[CLS]", "[SEP]", "[MASK]", "[UNK]")

# Examples logged in full, as upstream does, so a run can be eyeballed.
NUM_EXAMPLES_TO_LOG = 20
LOG_EVERY_N_INSTANCES = 100000

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids",
                 "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                 "next_sentence_labels")

InstanceParams = collections.namedtuple("InstanceParams", [
    "max_seq_length", "short_seq_prob", "masked_lm_prob",
    "max_predictions_per_seq", "do_whole_word_mask"
])
InstanceParams.__doc__ = """How instances are cut and masked (flag values).

Attributes:
  max_seq_length: tokens per instance, [CLS] and [SEP]s included.
  short_seq_prob: chance a document aims for a random shorter length.
  masked_lm_prob: fraction of an instance's tokens to mask.
  max_predictions_per_seq: cap on masked tokens per instance.
  do_whole_word_mask: mask all wordpieces of a word together.
"""

MaskedLmInstance = collections.namedtuple("MaskedLmInstance",
                                          ["index", "label"])


class TrainingInstance(object):
  """A single training instance (sentence pair)."""

  def __init__(self, tokens, segment_ids, masked_lm_positions, masked_lm_labels,
               is_random_next):
    self.tokens = tokens
    self.segment_ids = segment_ids
    self.is_random_next = is_random_next
    self.masked_lm_positions = masked_lm_positions
    self.masked_lm_labels = masked_lm_labels

  def __str__(self):
    return ("tokens: %s\nsegment_ids: %s\nis_random_next: %s\n"
            "masked_lm_positions: %s\nmasked_lm_labels: %s\n\n" % (
                " ".join(tokenization.printable_text(x) for x in self.tokens),
                " ".join(str(x) for x in self.segment_ids),
                self.is_random_next,
                " ".join(str(x) for x in self.masked_lm_positions),
                " ".join(tokenization.printable_text(x)
                         for x in self.masked_lm_labels)))

  def __repr__(self):
    return self.__str__()


def validate_params(params, dupe_factor):
  """Checks flag values before any work is done.

  Args:
    params: an `InstanceParams`.
    dupe_factor: the --dupe_factor value.

  Raises:
    errors.UserError: a value is outside the range the algorithm supports.
  """
  if not MIN_SEQ_LENGTH <= params.max_seq_length <= MAX_SEQ_LENGTH:
    raise errors.UserError(
        "--max_seq_length=%d is out of range; expected %d <= max_seq_length "
        "<= %d" % (params.max_seq_length, MIN_SEQ_LENGTH, MAX_SEQ_LENGTH))
  if not 0.0 < params.masked_lm_prob <= 1.0:
    raise errors.UserError(
        "--masked_lm_prob=%r is out of range; expected 0 < masked_lm_prob <= 1"
        % params.masked_lm_prob)
  if not 0.0 <= params.short_seq_prob <= 1.0:
    raise errors.UserError(
        "--short_seq_prob=%r is out of range; expected 0 <= short_seq_prob "
        "<= 1" % params.short_seq_prob)
  if params.max_predictions_per_seq < 1:
    raise errors.UserError(
        "--max_predictions_per_seq=%d must be at least 1"
        % params.max_predictions_per_seq)
  if dupe_factor < 1:
    raise errors.UserError("--dupe_factor=%d must be at least 1" % dupe_factor)


def split_file_list(value, flag_name):
  """Splits a comma-separated flag value, rejecting empty items.

  Args:
    value: the flag's value.
    flag_name: the flag's name, for the error message.

  Returns:
    The list of items.

  Raises:
    errors.UserError: an item is empty (e.g. a trailing comma).
  """
  items = value.split(",")
  if not all(items):
    raise errors.UserError(
        "--%s=%r has an empty entry; expected a comma-separated list of "
        "file names" % (flag_name, value))
  return items


def expand_input_patterns(patterns):
  """Expands input globs, in the order given.

  Args:
    patterns: file names or globs.

  Returns:
    The matching files: each pattern's matches, pattern after pattern.

  Raises:
    errors.UserError: a pattern matches no file, or matches a directory
      (which would silently read as empty).
  """
  input_files = []
  for pattern in patterns:
    matches = tf.io.gfile.glob(pattern)
    if not matches:
      raise errors.UserError(
          "--input_file pattern %s matches no file" % pattern)
    for match in matches:
      if tf.io.gfile.isdir(match):
        raise errors.UserError(
            "--input_file %s is a directory; expected text files (use a glob "
            "such as %s/*.txt, or sharded mode, --num_workers, which reads "
            "directories)" % (match, match.rstrip("/")))
    input_files.extend(matches)
  return input_files


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
    if not tf.io.gfile.isdir(directory):
      raise errors.UserError(
          "output directory %s (of --output_file %s) does not exist"
          % (directory, path))
    # Permission bits do not tell (root ignores them, gs:// has none):
    # creating a file is the only reliable test.
    probe = atomic_io.partial_name(path)
    try:
      with tf.io.gfile.GFile(probe, "w") as f:
        f.write("")
      tf.io.gfile.remove(probe)
    except tf.errors.OpError as e:
      raise errors.UserError(
          "cannot write to output directory %s (of --output_file %s): %s"
          % (directory, path, e.message)) from None


def check_vocab(vocab, vocab_file):
  """Raises errors.UserError if `vocab` lacks one of REQUIRED_VOCAB_TOKENS."""
  missing = [t for t in REQUIRED_VOCAB_TOKENS if t not in vocab]
  if missing:
    raise errors.UserError(
        "vocab file %s lacks the special token(s) %s; a BERT vocab needs %s"
        % (vocab_file, " ".join(missing), " ".join(REQUIRED_VOCAB_TOKENS)))


def load_tokenizer(vocab_file, do_lower_case, backend="python"):
  """Loads the tokenizer and checks its vocab has the special tokens.

  Args:
    vocab_file: path of the vocab file.
    do_lower_case: the --do_lower_case value.
    backend: "python" or "fast" (the --tokenizer_backend value).

  Returns:
    A `tokenization.FullTokenizer` or a `fast_tokenization.FastTokenizer`
    (same tokens).

  Raises:
    errors.UserError: the vocab file is missing, empty, not UTF-8, or lacks
      one of REQUIRED_VOCAB_TOKENS.
  """
  if backend == "fast":
    tokenizer = fast_tokenization.FastTokenizer(
        fast_tokenization.load_vocab(vocab_file), do_lower_case=do_lower_case)
  else:
    tokenizer = tokenization.FullTokenizer(
        vocab_file=vocab_file, do_lower_case=do_lower_case)
  check_vocab(tokenizer.vocab, vocab_file)
  return tokenizer


def _read_lines(input_file):
  """Yields (line_number, text) for each line of a UTF-8 file.

  Lines end at "\\n" only, as upstream's `GFile.readline` does: other Unicode
  line breaks stay inside the line (and `strip` or the tokenizer handle them).

  Raises:
    errors.UserError: the file cannot be read or is not valid UTF-8.
  """
  try:
    with tf.io.gfile.GFile(input_file, "rb") as reader:
      for line_number, raw in enumerate(reader, start=1):
        try:
          yield line_number, raw.decode("utf-8")
        except UnicodeDecodeError as e:
          raise errors.UserError(
              "input file %s line %d is not valid UTF-8 (bad byte 0x%02x at "
              "byte %d of the line); expected UTF-8 text" % (
                  input_file, line_number, raw[e.start], e.start + 1)) from None
  except tf.errors.OpError as e:
    raise errors.UserError(
        "cannot read input file %s: %s" % (input_file, e.message)) from None


def read_documents(input_files, tokenizer):
  """Reads and tokenizes documents.

  Each stripped, non-empty line whose tokens are not empty is one segment of
  the current document; an empty line starts a new document. As upstream,
  a file boundary does not: a file not ending in a blank line continues its
  last document into the next file.

  Args:
    input_files: paths, read in this order.
    tokenizer: anything with `tokenize(text) -> list of wordpieces`.

  Returns:
    The non-empty documents, each a list of segments (lists of wordpieces).

  Raises:
    errors.UserError: a file is unreadable or not UTF-8, or no document
      holds any token.
  """
  documents = [[]]
  for input_file in input_files:
    num_lines = 0
    for num_lines, line in _read_lines(input_file):
      line = line.strip()
      if not line:
        documents.append([])
        continue
      tokens = tokenizer.tokenize(line)
      if tokens:
        documents[-1].append(tokens)
    tf.logging.info("Read %d lines from %s", num_lines, input_file)
  documents = [d for d in documents if d]
  if not documents:
    raise errors.UserError(
        "no usable document in --input_file %s: every line is empty or "
        "tokenizes to nothing" % ",".join(input_files))
  tf.logging.info("Read %d documents (%d sentences) from %d file(s)",
                  len(documents), sum(len(d) for d in documents),
                  len(input_files))
  return documents


def create_training_instances(documents, rng, vocab_words, params,
                              dupe_factor):
  """Makes all instances of a corpus: shuffle, `dupe_factor` passes, shuffle.

  Args:
    documents: list of documents (lists of segments); not modified.
    rng: the `random.Random` that drives all choices.
    vocab_words: vocab tokens in id order, for random replacement tokens.
    params: an `InstanceParams`.
    dupe_factor: how many passes over the documents (each masks anew).

  Returns:
    The list of `TrainingInstance`s, in shuffled order.
  """
  documents = list(documents)
  rng.shuffle(documents)
  instances = []
  for pass_index in range(dupe_factor):
    for document_index in range(len(documents)):
      instances.extend(create_instances_from_document(
          documents, document_index, rng, vocab_words, params))
    tf.logging.info("Pass %d of %d: %d instances so far", pass_index + 1,
                    dupe_factor, len(instances))
  rng.shuffle(instances)
  return instances


def _pick_random_next(documents, document_index, target_b_length, rng):
  """Segment B for a random-next instance: a run of another document.

  Returns:
    The tokens of B: segments of a random other document from a random
    start, until B holds at least `target_b_length` tokens or it ends.
  """
  # With few documents the draw may keep hitting this one; after 10 tries
  # upstream accepts it.
  for _ in range(10):
    random_document_index = rng.randint(0, len(documents) - 1)
    if random_document_index != document_index:
      break
  random_document = documents[random_document_index]
  tokens_b = []
  for segment in random_document[rng.randint(0, len(random_document) - 1):]:
    tokens_b.extend(segment)
    if len(tokens_b) >= target_b_length:
      break
  return tokens_b


def _make_instance(tokens_a, tokens_b, is_random_next, rng, vocab_words,
                   params):
  """Truncates a pair, adds [CLS]/[SEP], masks it: one TrainingInstance."""
  truncate_seq_pair(tokens_a, tokens_b, params.max_seq_length - 3, rng)
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
  segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
  tokens, masked_lm_positions, masked_lm_labels = create_masked_lm_predictions(
      tokens, params.masked_lm_prob, params.max_predictions_per_seq,
      vocab_words, rng, do_whole_word_mask=params.do_whole_word_mask)
  return TrainingInstance(
      tokens=tokens,
      segment_ids=segment_ids,
      is_random_next=is_random_next,
      masked_lm_positions=masked_lm_positions,
      masked_lm_labels=masked_lm_labels)


def create_instances_from_document(documents, document_index, rng,
                                   vocab_words, params):
  """Cuts one document into sentence-pair instances.

  Segments are gathered into a chunk until it reaches the target length;
  the chunk is split at a random segment boundary into A and B, or (half the
  time, and always for a one-segment chunk) B comes from another document
  and the chunk's unused segments are put back for the next instance.

  Args:
    documents: all documents (for random-next segments).
    document_index: index of the document to cut.
    rng: the `random.Random` that drives all choices.
    vocab_words: vocab tokens in id order.
    params: an `InstanceParams`.

  Returns:
    A list of `TrainingInstance`s.
  """
  document = documents[document_index]
  max_num_tokens = params.max_seq_length - 3  # [CLS], [SEP], [SEP].
  # Mostly fill the whole sequence (padding is wasted compute), but sometimes
  # aim shorter so pretraining also sees the short inputs of fine-tuning.
  target_seq_length = max_num_tokens
  if rng.random() < params.short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)

  instances = []
  chunk = []
  chunk_length = 0
  i = 0
  while i < len(document):
    chunk.append(document[i])
    chunk_length += len(document[i])
    if i == len(document) - 1 or chunk_length >= target_seq_length:
      a_end = 1 if len(chunk) == 1 else rng.randint(1, len(chunk) - 1)
      tokens_a = [t for segment in chunk[:a_end] for t in segment]
      is_random_next = len(chunk) == 1 or rng.random() < 0.5
      if is_random_next:
        tokens_b = _pick_random_next(documents, document_index,
                                     target_seq_length - len(tokens_a), rng)
        i -= len(chunk) - a_end
      else:
        tokens_b = [t for segment in chunk[a_end:] for t in segment]
      instances.append(_make_instance(tokens_a, tokens_b, is_random_next, rng,
                                      vocab_words, params))
      chunk = []
      chunk_length = 0
    i += 1
  return instances


def create_masked_lm_predictions(tokens, masked_lm_prob,
                                 max_predictions_per_seq, vocab_words, rng,
                                 do_whole_word_mask=False):
  """Chooses the masked LM targets of one instance and masks them.

  n = min(max_predictions_per_seq, max(1, round(len(tokens) *
  masked_lm_prob))) positions other than [CLS]/[SEP] are chosen at random;
  each becomes [MASK] 80% of the time, stays 10%, becomes a random vocab
  token 10%.

  Args:
    tokens: the instance's tokens, [CLS]/[SEP] included; not modified.
    masked_lm_prob: fraction of tokens to mask.
    max_predictions_per_seq: cap on the number of masked tokens.
    vocab_words: vocab tokens in id order, for random replacements.
    rng: the `random.Random` that drives all choices.
    do_whole_word_mask: mask a word's "##" pieces together with it; a word
      that would overshoot n is skipped.

  Returns:
    (output_tokens, masked_lm_positions, masked_lm_labels): the masked
    tokens, and the masked positions (ascending) with their original tokens.
  """
  cand_indexes = []
  for i, token in enumerate(tokens):
    if token in ("[CLS]", "[SEP]"):
      continue
    # Upstream joins a "##" piece to the previous group even across [SEP].
    if do_whole_word_mask and cand_indexes and token.startswith("##"):
      cand_indexes[-1].append(i)
    else:
      cand_indexes.append([i])
  rng.shuffle(cand_indexes)

  output_tokens = list(tokens)
  num_to_predict = min(max_predictions_per_seq,
                       max(1, int(round(len(tokens) * masked_lm_prob))))
  masked_lms = []
  covered_indexes = set()
  for index_set in cand_indexes:
    if len(masked_lms) >= num_to_predict:
      break
    if len(masked_lms) + len(index_set) > num_to_predict:
      continue
    if any(index in covered_indexes for index in index_set):
      continue
    for index in index_set:
      covered_indexes.add(index)
      output_tokens[index] = _masked_token(tokens[index], vocab_words, rng)
      masked_lms.append(MaskedLmInstance(index=index, label=tokens[index]))

  masked_lms.sort(key=lambda x: x.index)
  return (output_tokens, [p.index for p in masked_lms],
          [p.label for p in masked_lms])


def _masked_token(token, vocab_words, rng):
  """What a chosen token becomes: [MASK] 80%, itself 10%, random 10%."""
  if rng.random() < 0.8:
    return "[MASK]"
  if rng.random() < 0.5:
    return token
  return vocab_words[rng.randint(0, len(vocab_words) - 1)]


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
  """Truncates a pair in place until len(a) + len(b) <= max_num_tokens.

  The longer side (B on a tie) loses one token at a time, from the front or
  the back at random, so that truncation does not bias towards either end.
  """
  while len(tokens_a) + len(tokens_b) > max_num_tokens:
    trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    if rng.random() < 0.5:
      del trunc_tokens[0]
    else:
      trunc_tokens.pop()


def _int_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _float_feature(values):
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def instance_to_tf_example(instance, vocab, max_seq_length,
                           max_predictions_per_seq):
  """Converts a `TrainingInstance` to a padded `tf.train.Example`.

  Args:
    instance: a `TrainingInstance` with at most `max_seq_length` tokens.
    vocab: token -> id mapping.
    max_seq_length: S, the padded length of the per-token features.
    max_predictions_per_seq: P, the padded length of the masked LM features.

  Returns:
    A `tf.train.Example`: int64 input_ids, input_mask, segment_ids [S];
    int64 masked_lm_positions, masked_lm_ids [P]; float masked_lm_weights
    [P] (1.0 per real prediction, 0.0 padding); int64 next_sentence_labels
    [1] (1 = B is a random sentence).
  """
  input_ids = tokenization.convert_tokens_to_ids(vocab, instance.tokens)
  seq_padding = [0] * (max_seq_length - len(input_ids))
  masked_lm_ids = tokenization.convert_tokens_to_ids(
      vocab, instance.masked_lm_labels)
  pred_padding = [0] * (max_predictions_per_seq - len(masked_lm_ids))

  features = collections.OrderedDict()
  features["input_ids"] = _int_feature(input_ids + seq_padding)
  features["input_mask"] = _int_feature([1] * len(input_ids) + seq_padding)
  features["segment_ids"] = _int_feature(
      list(instance.segment_ids) + seq_padding)
  features["masked_lm_positions"] = _int_feature(
      list(instance.masked_lm_positions) + pred_padding)
  features["masked_lm_ids"] = _int_feature(masked_lm_ids + pred_padding)
  features["masked_lm_weights"] = _float_feature(
      [1.0] * len(masked_lm_ids) + [0.0] * len(pred_padding))
  features["next_sentence_labels"] = _int_feature(
      [1 if instance.is_random_next else 0])
  return tf.train.Example(features=tf.train.Features(feature=features))


def _log_example(instance, example):
  """Logs one instance and its features, as upstream does."""
  tf.logging.info("*** Example ***")
  tf.logging.info("tokens: %s" % " ".join(
      tokenization.printable_text(x) for x in instance.tokens))
  for name in FEATURE_NAMES:
    feature = example.features.feature[name]
    values = feature.int64_list.value or feature.float_list.value
    tf.logging.info("%s: %s" % (name, " ".join(str(x) for x in values)))


def write_instances(instances, vocab, max_seq_length, max_predictions_per_seq,
                    output_files):
  """Writes instances round-robin over the output files.

  Each file is written under a temporary name and renamed only once every
  file is complete; on any exception (KeyboardInterrupt included) the
  temporary files are removed and nothing appears under the final names.

  Args:
    instances: the `TrainingInstance`s, in write order.
    vocab: token -> id mapping.
    max_seq_length: padded length of the per-token features.
    max_predictions_per_seq: padded length of the masked LM features.
    output_files: final output paths.

  Returns:
    The number of records written.
  """
  with contextlib.ExitStack() as stack:
    tmp_paths = [stack.enter_context(atomic_io.atomic_path(path))
                 for path in output_files]
    # Entered after all the atomic paths, so every writer is closed (and its
    # file complete) before the first rename.
    writers = [stack.enter_context(tf.io.TFRecordWriter(path))
               for path in tmp_paths]
    for inst_index, instance in enumerate(instances):
      example = instance_to_tf_example(instance, vocab, max_seq_length,
                                       max_predictions_per_seq)
      writers[inst_index % len(writers)].write(example.SerializeToString())
      if inst_index < NUM_EXAMPLES_TO_LOG:
        _log_example(instance, example)
      if (inst_index + 1) % LOG_EVERY_N_INSTANCES == 0:
        tf.logging.info("Wrote %d of %d instances", inst_index + 1,
                        len(instances))
  tf.logging.info("Wrote %d total instances", len(instances))
  return len(instances)


def run(input_file, output_file, vocab_file, do_lower_case, params,
        random_seed, dupe_factor, tokenizer_backend="python"):
  """Faithful mode, from flag values to written output files.

  Args:
    input_file: comma-separated input files or globs.
    output_file: comma-separated output files.
    vocab_file: the vocab file.
    do_lower_case: lower-case the input (uncased models).
    params: an `InstanceParams`.
    random_seed: seed of the one `random.Random` behind every choice.
    dupe_factor: passes over the data, each masked differently.
    tokenizer_backend: "python" or "fast" (same tokens).

  Returns:
    The number of records written.

  Raises:
    errors.UserError: on bad input; no output file is then created.
  """
  validate_params(params, dupe_factor)
  output_files = split_file_list(output_file, "output_file")
  check_output_files(output_files)
  tokenizer = load_tokenizer(vocab_file, do_lower_case, tokenizer_backend)
  input_files = expand_input_patterns(split_file_list(input_file, "input_file"))

  tf.logging.info("*** Reading from input files ***")
  for path in input_files:
    tf.logging.info("  %s", path)
  documents = read_documents(input_files, tokenizer)

  rng = random.Random(random_seed)
  instances = create_training_instances(
      documents, rng, list(tokenizer.vocab.keys()), params, dupe_factor)

  tf.logging.info("*** Writing to output files ***")
  for path in output_files:
    tf.logging.info("  %s", path)
  return write_instances(instances, tokenizer.vocab, params.max_seq_length,
                         params.max_predictions_per_seq, output_files)


# ============================================================ sharded mode ==
#
# Everything below runs without TensorFlow (see the module docstring).

ShardPiece = collections.namedtuple("ShardPiece", ["path", "start", "end"])
ShardPiece.__doc__ = """The documents of `path` beginning in bytes [start, end).

A piece starting inside a file owns the documents after the first blank line
at or after `start`; it ends at the first blank line at or after `end` (the
next piece's start), so consecutive pieces cut a file exactly once at each
boundary and never split a document.
"""

ShardSettings = collections.namedtuple("ShardSettings", [
    "vocab", "vocab_file", "do_lower_case", "tokenizer_backend", "params",
    "random_seed", "dupe_factor"
])
ShardSettings.__doc__ = """What every worker needs to turn a shard into records.

Attributes:
  vocab: token -> id mapping (already checked).
  vocab_file: its path (the python tokenizer backend reads it itself).
  do_lower_case, tokenizer_backend, params, random_seed, dupe_factor: the
    flag values.
"""

ShardResult = collections.namedtuple(
    "ShardResult", ["index", "num_documents", "num_instances"])

SHARD_NAME_FORMAT = "%s-%05d-of-%05d.tfrecord"
DEFAULT_OUTPUT_BASENAME = "part"
MANIFEST_FORMAT_VERSION = 1
# How often workers report progress (and check that the parent is alive).
PROGRESS_INTERVAL_SECONDS = 0.5
LOG_INTERVAL_SECONDS = 30.0
# The shell's status for a command ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def shard_seed(random_seed, shard_index):
  """The seed of shard `shard_index`'s `random.Random`: a 64-bit int.

  Derived through a hash (`random.Random` seeds from a str via SHA-512, the
  same on every platform and Python 3 version), so that different
  (random_seed, shard_index) pairs do not collide as random_seed +
  shard_index would.
  """
  return random.Random("%d:%d" % (random_seed, shard_index)).getrandbits(64)


def shard_paths(prefix, num_shards):
  """The final output paths of the shards, in shard order."""
  return [SHARD_NAME_FORMAT % (prefix, i, num_shards)
          for i in range(num_shards)]


def output_prefix(output_file, output_dir):
  """The shard file prefix from --output_file or --output_dir.

  Raises:
    errors.UserError: both or neither are given, or --output_file is a list.
  """
  if bool(output_file) == bool(output_dir):
    raise errors.UserError(
        "sharded mode needs exactly one of --output_dir (shards go to "
        "<output_dir>/part-SSSSS-of-NNNNN.tfrecord) or --output_file (used as "
        "the shards' prefix); got %s" % (
            "both" if output_file else "neither"))
  if output_dir:
    return os.path.join(output_dir, DEFAULT_OUTPUT_BASENAME)
  if "," in output_file:
    raise errors.UserError(
        "--output_file=%s: sharded mode writes one file per shard, named "
        "from a single prefix; give one path (or --output_dir)" % output_file)
  root, extension = os.path.splitext(output_file)
  return root if extension == ".tfrecord" else output_file


def _files_under(directory):
  """Non-hidden regular files below `directory`, recursively, sorted."""
  found = []
  for root, dirs, files in os.walk(directory):
    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    found.extend(os.path.join(root, f) for f in sorted(files)
                 if not f.startswith("."))
  return found


def expand_sharded_inputs(input_file):
  """Expands --input_file for sharded mode: globs, lists, directories.

  Args:
    input_file: comma-separated files, globs (matches sorted) or
      directories (their non-hidden files, recursively, sorted).

  Returns:
    The list of (path, size in bytes), in order.

  Raises:
    errors.UserError: an item matches nothing, a directory holds no file,
      or a path is not local.
  """
  paths = []
  for pattern in split_file_list(input_file, "input_file"):
    if "://" in pattern:
      raise errors.UserError(
          "--input_file %s: sharded mode reads local files only; copy the "
          "corpus locally or use faithful mode (no --num_workers/--output_dir)"
          % pattern)
    matches = sorted(glob.glob(pattern))
    if not matches:
      raise errors.UserError(
          "--input_file pattern %s matches no file" % pattern)
    for match in matches:
      if os.path.isdir(match):
        files = _files_under(match)
        if not files:
          raise errors.UserError(
              "--input_file directory %s holds no (non-hidden) file" % match)
        paths.extend(files)
      else:
        paths.append(match)
  return [(path, os.path.getsize(path)) for path in paths]


def plan_shards(files, shard_bytes):
  """Cuts the input into shards of about `shard_bytes` bytes.

  Consecutive files smaller than `shard_bytes` are packed into one shard; a
  larger file gets ceil(size / shard_bytes) shards of equal byte ranges. The
  plan depends only on the files and `shard_bytes`, never on the number of
  workers.

  Args:
    files: list of (path, size), in order.
    shard_bytes: target shard size in bytes (> 0).

  Returns:
    A list of shards, each a tuple of `ShardPiece`s read in order.
  """
  shards = []
  pack = []
  pack_bytes = 0
  for path, size in files:
    if size > shard_bytes:
      if pack:
        shards.append(tuple(pack))
        pack, pack_bytes = [], 0
      num_chunks = -(-size // shard_bytes)
      bounds = [size * i // num_chunks for i in range(num_chunks + 1)]
      shards.extend((ShardPiece(path, start, end),)
                    for start, end in zip(bounds, bounds[1:]))
      continue
    if pack and pack_bytes + size > shard_bytes:
      shards.append(tuple(pack))
      pack, pack_bytes = [], 0
    pack.append(ShardPiece(path, 0, size))
    pack_bytes += size
  if pack:
    shards.append(tuple(pack))
  return shards


def _line_number(path, offset):
  """1-based number of the line that starts at byte `offset` of `path`."""
  count = 0
  with open(path, "rb") as f:
    remaining = offset
    while remaining > 0:
      block = f.read(min(remaining, 1 << 20))
      if not block:
        break
      count += block.count(b"\n")
      remaining -= len(block)
  return count + 1


def _decode_line(raw, path, line_start):
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise errors.UserError(
        "input file %s line %d is not valid UTF-8 (bad byte 0x%02x at byte "
        "%d of the line); expected UTF-8 text" % (
            path, _line_number(path, line_start), raw[e.start], e.start + 1)
    ) from None


def _is_blank(raw):
  # Lenient decoding: a bad line is reported by the piece that owns it.
  return not raw.decode("utf-8", "replace").strip()


def iter_piece_lines(piece):
  """Yields the stripped lines of the documents a `ShardPiece` owns.

  Args:
    piece: the `ShardPiece`.

  Yields:
    (stripped text, size of the line in bytes); an empty text is a document
    boundary.

  Raises:
    errors.UserError: a line is not valid UTF-8 (names file and line).
  """
  with open(piece.path, "rb") as f:
    offset = piece.start
    if piece.start > 0:
      # Move to the first line starting at or after `start`, then past the
      # first blank line from there: documents before it belong to the
      # previous piece.
      f.seek(piece.start - 1)
      offset += len(f.readline()) - 1
      for raw in f:
        line_start, offset = offset, offset + len(raw)
        if _is_blank(raw):
          break
      else:
        return
      if line_start >= piece.end:
        return
    for raw in f:
      line_start, offset = offset, offset + len(raw)
      line = _decode_line(raw, piece.path, line_start).strip()
      if not line and line_start >= piece.end:
        return
      yield line, len(raw)


def read_shard_documents(pieces, tokenize, report):
  """Reads and tokenizes the documents of a shard.

  As `read_documents`, except that every piece (file) ends a document.

  Args:
    pieces: the shard's `ShardPiece`s.
    tokenize: text -> list of tokens (in any representation).
    report: called as report(num_bytes, num_documents, num_instances) with
      amounts done since its previous call.

  Returns:
    The non-empty documents: lists of segments (lists of tokens).
  """
  documents = []
  for piece in pieces:
    documents.append([])
    # Progress counts the piece's own bytes: the lines skipped at its start
    # are added at its end, those read past its end (to finish its last
    # document) are not, so that progress adds up to the input size.
    unreported = piece.end - piece.start
    for line, num_bytes in iter_piece_lines(piece):
      if not line:
        documents.append([])
      else:
        tokens = tokenize(line)
        if tokens:
          documents[-1].append(tokens)
      num_bytes = min(num_bytes, unreported)
      unreported -= num_bytes
      report(num_bytes, 0, 0)
    report(unreported, 0, 0)
  documents = [d for d in documents if d]
  report(0, len(documents), 0)
  return documents


def _concatenate(segments):
  """The tokens of `segments` in one new list."""
  tokens = []
  for segment in segments:
    tokens += segment
  return tokens


class ShardInstanceMaker(object):
  """Upstream's instance algorithm on token codes, straight to record bytes.

  Draws from `rng` in exactly the order of `create_training_instances` and
  the functions it calls (the tests check that the records are identical),
  but inlines `random.Random.shuffle`/`randint` (same draws: both reduce to
  `getrandbits` with rejection), handles tokens as their varint encodings
  (`encoder.token_codes[id]`) and serializes Examples directly: several
  times faster than the reference code above.

  Args:
    rng: the `random.Random` of the shard.
    params: an `InstanceParams`.
    vocab: token -> id mapping (the special tokens' ids; random
      replacements are drawn over its entries in order, as upstream draws
      from `list(vocab.keys())`).
    encoder: a `pretraining_records.ExampleEncoder` for `params`.
  """

  def __init__(self, rng, params, vocab, encoder):
    self._random = rng.random
    self._getrandbits = rng.getrandbits
    self._params = params
    self._max_num_tokens = params.max_seq_length - 3
    self._encoder = encoder
    codes = encoder.token_codes
    self._cls = codes[vocab["[CLS]"]]
    self._sep = codes[vocab["[SEP]"]]
    self._mask = codes[vocab["[MASK]"]]
    self._replacements = [codes[i] for i in vocab.values()]
    self._continuations = frozenset(
        codes[i] for token, i in vocab.items() if token.startswith("##"))
    # Bits of a draw in [0, i], for the inlined shuffle of candidates.
    self._draw_bits = [(i + 1).bit_length()
                       for i in range(params.max_seq_length)]

  def _below(self, n):
    """As `random.Random._randbelow(n)`: a draw in [0, n)."""
    getrandbits = self._getrandbits
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
      r = getrandbits(k)
    return r

  def _shuffle(self, items):
    """As `random.Random.shuffle(items)`: same draws, same result."""
    getrandbits = self._getrandbits
    for i in range(len(items) - 1, 0, -1):
      n = i + 1
      k = n.bit_length()
      j = getrandbits(k)
      while j >= n:
        j = getrandbits(k)
      items[i], items[j] = items[j], items[i]

  def make_records(self, documents, dupe_factor, sink, report):
    """All records of a shard, before `create_training_instances`' shuffle.

    Call `shuffled_order` next for the order in which to write them.

    Args:
      documents: the shard's documents: lists of segments, lists of token
        codes.
      dupe_factor: passes over the documents.
      sink: called with each serialized tf.train.Example.
      report: called as report(0, 0, num_instances) after each document.

    Returns:
      The number of records.
    """
    documents = list(documents)
    self._shuffle(documents)
    num_records = 0
    records = []
    for _ in range(dupe_factor):
      for document_index in range(len(documents)):
        self._document_records(documents, document_index, records)
        for record in records:
          sink(record)
        num_records += len(records)
        report(0, 0, len(records))
        records.clear()
    return num_records

  def shuffled_order(self, num_records):
    """The final shuffle of `create_training_instances` as a permutation.

    Returns:
      Indices into the records in `make_records` order: upstream's i-th
      record is the one at index order[i].
    """
    order = list(range(num_records))
    self._shuffle(order)
    return order

  def _document_records(self, documents, document_index, records):
    """As `create_instances_from_document`, appending serialized records."""
    random = self._random
    document = documents[document_index]
    max_num_tokens = self._max_num_tokens
    target_seq_length = max_num_tokens
    if random() < self._params.short_seq_prob:
      target_seq_length = 2 + self._below(max_num_tokens - 1)
    chunk = []
    chunk_length = 0
    i = 0
    while i < len(document):
      chunk.append(document[i])
      chunk_length += len(document[i])
      if i == len(document) - 1 or chunk_length >= target_seq_length:
        a_end = 1 if len(chunk) == 1 else 1 + self._below(len(chunk) - 1)
        tokens_a = _concatenate(chunk[:a_end])
        is_random_next = len(chunk) == 1 or random() < 0.5
        if is_random_next:
          tokens_b = self._random_next(documents, document_index,
                                       target_seq_length - len(tokens_a))
          i -= len(chunk) - a_end
        else:
          tokens_b = _concatenate(chunk[a_end:])
        records.append(self._record(tokens_a, tokens_b, is_random_next))
        chunk = []
        chunk_length = 0
      i += 1

  def _random_next(self, documents, document_index, target_b_length):
    """As `_pick_random_next`."""
    for _ in range(10):
      random_document_index = self._below(len(documents))
      if random_document_index != document_index:
        break
    random_document = documents[random_document_index]
    tokens_b = []
    for segment in random_document[self._below(len(random_document)):]:
      tokens_b.extend(segment)
      if len(tokens_b) >= target_b_length:
        break
    return tokens_b

  def _record(self, tokens_a, tokens_b, is_random_next):
    """As `_make_instance` then `instance_to_tf_example`, serialized."""
    random = self._random
    # truncate_seq_pair, on index ranges.
    a_start, a_end, b_start, b_end = 0, len(tokens_a), 0, len(tokens_b)
    while (a_end - a_start) + (b_end - b_start) > self._max_num_tokens:
      if a_end - a_start > b_end - b_start:
        if random() < 0.5:
          a_start += 1
        else:
          a_end -= 1
      elif random() < 0.5:
        b_start += 1
      else:
        b_end -= 1
    num_a = a_end - a_start
    tokens = [self._cls]
    tokens += tokens_a[a_start:a_end]
    tokens.append(self._sep)
    tokens += tokens_b[b_start:b_end]
    tokens.append(self._sep)
    positions = self._masked_positions(tokens, num_a)
    output = list(tokens)
    for position in positions:
      if random() < 0.8:
        output[position] = self._mask
      elif random() >= 0.5:
        output[position] = self._replacements[
            self._below(len(self._replacements))]
    positions.sort()
    return self._encoder.encode(output, num_a, positions,
                                [tokens[p] for p in positions],
                                is_random_next)

  def _masked_positions(self, tokens, num_a):
    """As `create_masked_lm_predictions`' choice: positions in draw order."""
    params = self._params
    num_to_predict = min(params.max_predictions_per_seq,
                         max(1, int(round(len(tokens) *
                                          params.masked_lm_prob))))
    candidates = list(range(1, num_a + 1))
    candidates.extend(range(num_a + 2, len(tokens) - 1))
    if params.do_whole_word_mask:
      return self._whole_word_positions(tokens, candidates, num_to_predict)
    # The hot loop: `self._shuffle(candidates)` inlined, with bit lengths
    # looked up. Each group is one position, so the first num_to_predict
    # positions after the shuffle are the chosen ones.
    getrandbits = self._getrandbits
    draw_bits = self._draw_bits
    for i in range(len(candidates) - 1, 0, -1):
      k = draw_bits[i]
      j = getrandbits(k)
      while j > i:
        j = getrandbits(k)
      candidates[i], candidates[j] = candidates[j], candidates[i]
    return candidates[:num_to_predict]

  def _whole_word_positions(self, tokens, candidates, num_to_predict):
    groups = []
    continuations = self._continuations
    for position in candidates:
      # As upstream, a "##" piece joins the previous word even across [SEP].
      if groups and tokens[position] in continuations:
        groups[-1].append(position)
      else:
        groups.append([position])
    self._shuffle(groups)
    positions = []
    for group in groups:
      if len(positions) >= num_to_predict:
        break
      if len(positions) + len(group) <= num_to_predict:
        positions.extend(group)
    return positions


@contextlib.contextmanager
def atomic_local_path(final_path):
  """As `atomic_io.atomic_path`, for local files and without TensorFlow.

  Yields a temporary path next to `final_path`; renames it to `final_path`
  only on success and removes it on any exception (KeyboardInterrupt and
  SystemExit included).
  """
  tmp = "%s.partial-%s" % (final_path, uuid.uuid4().hex[:8])
  try:
    yield tmp
    os.replace(tmp, final_path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def write_tfrecord_file(path, records):
  """Writes `records` (an iterable of bytes) as a TFRecord file."""
  with open(path, "wb") as f:
    for chunk in pretraining_records.tfrecord_chunks(records):
      f.write(chunk)
    f.flush()
    os.fsync(f.fileno())


class ScratchRecords(object):
  """Records kept in a scratch file, read back in any order.

  Upstream shuffles all instances of all dupe_factor passes: holding them on
  disk (in the page cache, which the OS may evict) instead of in memory keeps
  a worker's memory independent of dupe_factor.

  Args:
    path: the scratch file, removed on `close`.
  """

  def __init__(self, path):
    self._path = path
    self._file = open(path, "w+b")
    self._offsets = array.array("q", [0])

  def append(self, record):
    self._file.write(record)
    self._offsets.append(self._offsets[-1] + len(record))

  def __len__(self):
    return len(self._offsets) - 1

  def read_in_order(self, order):
    """Yields the records at the positions listed in `order`."""
    self._file.flush()
    fd = self._file.fileno()
    offsets = self._offsets
    for i in order:
      yield os.pread(fd, offsets[i + 1] - offsets[i], offsets[i])

  def close(self):
    self._file.close()
    if os.path.exists(self._path):
      os.remove(self._path)


class _PythonIdTokenizer(object):
  """tokenization.FullTokenizer with the `tokenize_to_ids` interface."""

  def __init__(self, vocab_file, do_lower_case):
    self._tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)

  def tokenize_to_ids(self, text):
    return self._tokenizer.convert_tokens_to_ids(
        self._tokenizer.tokenize(text))


# The state of a worker process, set once by _init_worker.
_worker = {}


def _init_worker(settings, progress_queue, parent_pid):
  """Pool initializer: builds the tokenizer once per worker process."""
  # Ctrl-C goes to the whole process group: the parent alone handles it and
  # stops the workers with SIGTERM, which unwinds them (removing any
  # partial file) instead of killing them mid-write.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, _exit_on_signal)
  if settings.tokenizer_backend == "fast":
    tokenizer = fast_tokenization.FastTokenizer(settings.vocab,
                                                settings.do_lower_case)
  else:
    tokenizer = _PythonIdTokenizer(settings.vocab_file, settings.do_lower_case)
  encoder = pretraining_records.ExampleEncoder(
      max(settings.vocab.values()) + 1, settings.params.max_seq_length,
      settings.params.max_predictions_per_seq)
  _worker.update(settings=settings, tokenizer=tokenizer, encoder=encoder,
                 progress_queue=progress_queue, parent_pid=parent_pid)


def _exit_on_signal(signum, frame):
  """SIGTERM in a worker: unwind a running task, else leave at once.

  Inside make_shard the SystemExit unwinds the task, whose context managers
  remove its partial file. Anywhere else (idle, or already exiting when the
  pool is stopped) there is nothing to clean up, and a SystemExit raised in
  threading's or logging's shutdown would print a traceback.
  """
  del frame  # Unused.
  if _worker.get("in_task"):
    raise SystemExit(128 + signum)
  os._exit(128 + signum)  # pylint: disable=protected-access


class _Reporter(object):
  """Accumulates a worker's progress and sends it to the parent now and then.

  Also stops the worker if the parent died (a killed parent cannot stop its
  workers, which would otherwise run on as orphans).
  """

  def __init__(self, progress_queue, parent_pid):
    self._queue = progress_queue
    self._parent_pid = parent_pid
    self._pending = [0, 0, 0]
    self._last_sent = time.monotonic()

  def __call__(self, num_bytes, num_documents, num_instances):
    pending = self._pending
    pending[0] += num_bytes
    pending[1] += num_documents
    pending[2] += num_instances
    if time.monotonic() - self._last_sent >= PROGRESS_INTERVAL_SECONDS:
      self.flush()

  def flush(self):
    if os.getppid() != self._parent_pid:
      raise SystemExit("parent process died")
    if any(self._pending):
      self._queue.put(tuple(self._pending))
      self._pending = [0, 0, 0]
    self._last_sent = time.monotonic()


def make_shard(task):
  """Worker task: one shard's records, written to its output file.

  Args:
    task: (shard index, tuple of `ShardPiece`s, output path).

  Returns:
    A `ShardResult`.
  """
  _worker["in_task"] = True
  try:
    return _write_shard(task)
  finally:
    _worker["in_task"] = False


def _write_shard(task):
  """make_shard's work, while SIGTERM unwinds it (see _exit_on_signal)."""
  shard_index, pieces, output_path = task
  settings = _worker["settings"]
  encoder = _worker["encoder"]
  report = _Reporter(_worker["progress_queue"], _worker["parent_pid"])
  tokenize_to_ids = _worker["tokenizer"].tokenize_to_ids
  codes = encoder.token_codes
  documents = read_shard_documents(
      pieces, lambda text: [codes[i] for i in tokenize_to_ids(text)], report)
  num_documents = len(documents)
  maker = ShardInstanceMaker(
      random.Random(shard_seed(settings.random_seed, shard_index)),
      settings.params, settings.vocab, encoder)
  with atomic_local_path(output_path) as tmp:
    scratch = ScratchRecords(tmp + ".unshuffled")
    try:
      maker.make_records(documents, settings.dupe_factor, scratch.append,
                         report)
      del documents  # Not needed while writing: lowers the peak.
      order = maker.shuffled_order(len(scratch))
      write_tfrecord_file(tmp, scratch.read_in_order(order))
    finally:
      scratch.close()
  report.flush()
  return ShardResult(shard_index, num_documents, len(order))


class Progress(object):
  """Progress of a sharded run: a bar on a terminal, log lines otherwise.

  Args:
    stream: where the bar is drawn (stderr).
    num_shards: shards to make in this run.
    total_bytes: their input bytes.
  """

  def __init__(self, stream, num_shards, total_bytes):
    self._stream = stream
    self._is_tty = stream.isatty()
    self._num_shards = num_shards
    self._total_bytes = total_bytes
    self._done = [0, 0, 0]
    self._shards_done = 0
    self._start = time.monotonic()
    self._last_shown = 0.0

  def add(self, num_bytes, num_documents, num_instances):
    self._done[0] += num_bytes
    self._done[1] += num_documents
    self._done[2] += num_instances
    self._show(force=False)

  def shard_done(self):
    self._shards_done += 1
    self._show(force=False)

  def _line(self):
    elapsed = max(time.monotonic() - self._start, 1e-9)
    mb_done = self._done[0] / 1e6
    return ("shards %d/%d | %.1f/%.1f MB | %d documents | %d instances | "
            "%.2f MB/s | %.0f instances/s" % (
                self._shards_done, self._num_shards, mb_done,
                self._total_bytes / 1e6, self._done[1], self._done[2],
                mb_done / elapsed, self._done[2] / elapsed))

  def _show(self, force):
    now = time.monotonic()
    interval = 0.2 if self._is_tty else LOG_INTERVAL_SECONDS
    if not force and now - self._last_shown < interval:
      return
    self._last_shown = now
    if self._is_tty:
      fraction = self._done[0] / max(self._total_bytes, 1)
      filled = int(20 * min(fraction, 1.0))
      self._stream.write("\r[%s%s] %s" % ("#" * filled, "." * (20 - filled),
                                          self._line()))
      self._stream.flush()
    else:
      logging.info("%s", self._line())

  def close(self):
    if self._is_tty:
      self._show(force=True)
      self._stream.write("\n")
      self._stream.flush()
    logging.info("done: %s", self._line())


def _manifest(settings, shards, shard_bytes):
  """What a run's shard files depend on (inputs and flags), as JSON data."""
  vocab_text = "\n".join("%s\t%d" % item for item in settings.vocab.items())
  return {
      "format": MANIFEST_FORMAT_VERSION,
      "vocab_crc32": zlib.crc32(vocab_text.encode("utf-8")),
      "do_lower_case": settings.do_lower_case,
      "params": settings.params._asdict(),
      "random_seed": settings.random_seed,
      "dupe_factor": settings.dupe_factor,
      "shard_bytes": shard_bytes,
      "shards": [[list(piece) for piece in pieces] for pieces in shards],
  }


def _read_json(path):
  try:
    with open(path) as f:
      return json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as e:
    raise errors.UserError("cannot read %s: %s" % (path, e)) from None


def remove_partial_files(prefix):
  """Deletes the temporary files of shards of `prefix` (of stopped runs)."""
  for path in glob.glob(glob.escape(prefix) + "-*.tfrecord.partial-*"):
    if os.path.exists(path):
      os.remove(path)


def prepare_output(prefix, manifest, resume):
  """Checks/writes the manifest and lists the shards still to make.

  Args:
    prefix: the shard file prefix.
    manifest: this run's manifest (`_manifest`).
    resume: the --resume value.

  Returns:
    The indices of the shards to make.

  Raises:
    errors.UserError: the output directory is missing or not writable, or
      resuming into the output of a run with other inputs or flags.
  """
  directory = os.path.dirname(prefix) or "."
  if not os.path.isdir(directory):
    raise errors.UserError("output directory %s does not exist" % directory)
  manifest_path = prefix + ".manifest.json"
  previous = _read_json(manifest_path)
  if previous is not None and previous != manifest:
    if resume:
      raise errors.UserError(
          "%s belongs to a run with other input files or flags; resuming it "
          "would mix their shards. Use another --output_dir/--output_file, or "
          "--noresume to replace its shards" % manifest_path)
    for path in shard_paths(prefix, len(previous.get("shards", []))):
      if os.path.exists(path):
        os.remove(path)
  remove_partial_files(prefix)  # Left by a killed run.
  try:
    with atomic_local_path(manifest_path) as tmp:
      with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
  except OSError as e:
    raise errors.UserError("cannot write to output directory %s: %s" % (
        directory, e.strerror)) from None
  paths = shard_paths(prefix, len(manifest["shards"]))
  return [i for i, path in enumerate(paths)
          if not (resume and os.path.exists(path))]


def _run_pool(settings, tasks, num_workers, progress, prefix):
  """Runs `make_shard` over `tasks` in worker processes.

  On any exception (a worker's UserError, KeyboardInterrupt) the workers are
  stopped and the partial files of `prefix` removed before it propagates.

  Returns:
    The `ShardResult`s, in completion order.
  """
  context = multiprocessing.get_context("spawn")
  # A SimpleQueue writes synchronously: a worker's progress is in the pipe
  # before its result is sent.
  progress_queue = context.SimpleQueue()
  pool = context.Pool(min(num_workers, len(tasks)), initializer=_init_worker,
                      initargs=(settings, progress_queue, os.getpid()))
  results = []
  try:
    pending = pool.imap_unordered(make_shard, tasks)
    while len(results) < len(tasks):
      try:
        result = pending.next(timeout=0.1)
      except multiprocessing.TimeoutError:
        result = None
      while not progress_queue.empty():
        progress.add(*progress_queue.get())
      if result is not None:
        results.append(result)
        progress.shard_done()
    pool.close()
  except BaseException:
    pool.terminate()
    pool.join()
    remove_partial_files(prefix)
    raise
  pool.join()
  return results


def run_sharded(input_file, output_file, output_dir, vocab_file,
                do_lower_case, params, random_seed, dupe_factor,
                num_workers=None, shard_size_mb=16.0,
                tokenizer_backend="python", resume=True):
  """Sharded mode: see the module docstring.

  Args:
    input_file: comma-separated files, globs or directories.
    output_file: the shards' prefix (a `.tfrecord` suffix is dropped), or
      None with `output_dir`.
    output_dir: directory for part-SSSSS-of-NNNNN.tfrecord, or None.
    vocab_file: the vocab file.
    do_lower_case: lower-case the input (uncased models).
    params: an `InstanceParams`.
    random_seed: base of every shard's seed (`shard_seed`).
    dupe_factor: passes over each shard's documents.
    num_workers: worker processes (None: one per core).
    shard_size_mb: target input size of a shard, in MB (1e6 bytes).
    tokenizer_backend: "python" or "fast" (same tokens).
    resume: skip shards whose output file exists.

  Returns:
    The shard file paths (all of them, including skipped ones).

  Raises:
    errors.UserError: on bad input.
  """
  validate_params(params, dupe_factor)
  if num_workers is None:
    num_workers = os.cpu_count() or 1
  if num_workers < 1:
    raise errors.UserError("--num_workers=%d must be at least 1" % num_workers)
  if not shard_size_mb > 0:
    raise errors.UserError(
        "--shard_size_mb=%r must be positive" % shard_size_mb)
  prefix = output_prefix(output_file, output_dir)
  if output_dir:
    try:
      os.makedirs(output_dir, exist_ok=True)
    except OSError as e:
      raise errors.UserError("cannot create --output_dir %s: %s" % (
          output_dir, e.strerror)) from None
  vocab = fast_tokenization.load_vocab(vocab_file)
  check_vocab(vocab, vocab_file)
  files = expand_sharded_inputs(input_file)
  shard_bytes = max(1, int(shard_size_mb * 1e6))
  shards = plan_shards(files, shard_bytes)
  settings = ShardSettings(vocab, vocab_file, do_lower_case, tokenizer_backend,
                           params, random_seed, dupe_factor)
  todo = prepare_output(prefix, _manifest(settings, shards, shard_bytes),
                        resume)
  paths = shard_paths(prefix, len(shards))
  logging.info("%d input file(s), %d shard(s) of <= %g MB; %d to make, %d "
               "already complete; %d worker(s); output %s", len(files),
               len(shards), shard_size_mb, len(todo), len(shards) - len(todo),
               num_workers, SHARD_NAME_FORMAT % (prefix, 0, len(shards)))
  if not todo:
    return paths
  progress = Progress(sys.stderr, len(todo),
                      sum(p.end - p.start for i in todo for p in shards[i]))
  results = _run_pool(settings, [(i, shards[i], paths[i]) for i in todo],
                      num_workers, progress, prefix)
  progress.close()
  for result in results:
    if not result.num_documents:
      logging.warning("shard %d (%s) holds no usable document: its file "
                      "has no records", result.index, paths[result.index])
  if not any(r.num_documents for r in results) and len(todo) == len(shards):
    raise errors.UserError(
        "no usable document in --input_file %s: every line is empty or "
        "tokenizes to nothing" % input_file)
  return paths


def main(argv):
  del argv  # Unused.
  params = InstanceParams(
      max_seq_length=FLAGS.max_seq_length,
      short_seq_prob=FLAGS.short_seq_prob,
      masked_lm_prob=FLAGS.masked_lm_prob,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      do_whole_word_mask=FLAGS.do_whole_word_mask)
  if FLAGS.num_workers is not None or FLAGS.output_dir is not None:
    logging.set_verbosity(logging.INFO)
    try:
      run_sharded(FLAGS.input_file, FLAGS.output_file, FLAGS.output_dir,
                  FLAGS.vocab_file, FLAGS.do_lower_case, params,
                  FLAGS.random_seed, FLAGS.dupe_factor,
                  num_workers=FLAGS.num_workers,
                  shard_size_mb=FLAGS.shard_size_mb,
                  tokenizer_backend=FLAGS.tokenizer_backend,
                  resume=FLAGS.resume)
    except KeyboardInterrupt:
      print("\ninterrupted: complete shard files are kept; rerun the same "
            "command to make the others", file=sys.stderr, flush=True)
      sys.exit(EXIT_INTERRUPTED)
    return
  if not FLAGS.output_file:
    raise errors.UserError(
        "--output_file is required (or --output_dir/--num_workers for "
        "sharded mode)")
  tf.logging.set_verbosity(tf.logging.INFO)
  run(FLAGS.input_file, FLAGS.output_file, FLAGS.vocab_file,
      FLAGS.do_lower_case, params, FLAGS.random_seed, FLAGS.dupe_factor,
      tokenizer_backend=FLAGS.tokenizer_backend)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("vocab_file")
  app.run(errors.main_with_user_errors(main))
