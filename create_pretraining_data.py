# coding=utf-8
"""Creates masked LM / next sentence prediction TFRecords for BERT pretraining.

Input: plain text, one sentence per line, a blank line between documents.
Output: `tf.train.Example` records with the features `run_pretraining.py`
reads (input_ids, input_mask, segment_ids, masked_lm_positions,
masked_lm_ids, masked_lm_weights, next_sentence_labels), written round-robin
over the comma-separated output files.

For the same input files, vocab and flags (including --random_seed) the
records are identical, record for record, to those of google-research/bert's
create_pretraining_data.py: a single `random.Random(random_seed)` is drawn
from in exactly upstream's order. Any change to the order of `rng` calls in
this file changes every record after it.

Unlike upstream, bad input (a glob matching nothing, a file that is not UTF-8,
an unusable vocab or flag value, an unwritable output directory) ends the
program with one `error:` line, and output files only appear under their
final names once completely written.
"""

import collections
import contextlib
import os
import random

from absl import app
from absl import flags
import tensorflow.compat.v1 as tf

import atomic_io
import errors
import tokenization

FLAGS = flags.FLAGS

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

# [CLS] + at least one token of A + [SEP] + at least one of B + [SEP].
MIN_SEQ_LENGTH = 5
# Far above any BERT position table; a larger value is almost surely a typo.
MAX_SEQ_LENGTH = 8192

# Tokens the records are built from: every instance uses [CLS] and [SEP],
# masking uses [MASK], and WordPiece emits [UNK] for uncoverable words.
REQUIRED_VOCAB_TOKENS = ("[CLS]", "[SEP]", "[MASK]", tokenization.UNK_TOKEN)

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
            "such as %s/*.txt)" % (match, match.rstrip("/")))
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


def load_tokenizer(vocab_file, do_lower_case):
  """Loads the tokenizer and checks its vocab has the special tokens.

  Args:
    vocab_file: path of the vocab file.
    do_lower_case: the --do_lower_case value.

  Returns:
    A `tokenization.FullTokenizer`.

  Raises:
    errors.UserError: the vocab file is missing, empty, not UTF-8, or lacks
      one of REQUIRED_VOCAB_TOKENS.
  """
  tokenizer = tokenization.FullTokenizer(
      vocab_file=vocab_file, do_lower_case=do_lower_case)
  missing = [t for t in REQUIRED_VOCAB_TOKENS if t not in tokenizer.vocab]
  if missing:
    raise errors.UserError(
        "vocab file %s lacks the special token(s) %s; a BERT vocab needs %s"
        % (vocab_file, " ".join(missing), " ".join(REQUIRED_VOCAB_TOKENS)))
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
        random_seed, dupe_factor):
  """The whole program, from flag values to written output files.

  Args:
    input_file: comma-separated input files or globs.
    output_file: comma-separated output files.
    vocab_file: the vocab file.
    do_lower_case: lower-case the input (uncased models).
    params: an `InstanceParams`.
    random_seed: seed of the one `random.Random` behind every choice.
    dupe_factor: passes over the data, each masked differently.

  Returns:
    The number of records written.

  Raises:
    errors.UserError: on bad input; no output file is then created.
  """
  validate_params(params, dupe_factor)
  output_files = split_file_list(output_file, "output_file")
  check_output_files(output_files)
  tokenizer = load_tokenizer(vocab_file, do_lower_case)
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


def main(argv):
  del argv  # Unused.
  tf.logging.set_verbosity(tf.logging.INFO)
  params = InstanceParams(
      max_seq_length=FLAGS.max_seq_length,
      short_seq_prob=FLAGS.short_seq_prob,
      masked_lm_prob=FLAGS.masked_lm_prob,
      max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      do_whole_word_mask=FLAGS.do_whole_word_mask)
  run(FLAGS.input_file, FLAGS.output_file, FLAGS.vocab_file,
      FLAGS.do_lower_case, params, FLAGS.random_seed, FLAGS.dupe_factor)


if __name__ == "__main__":
  flags.mark_flag_as_required("input_file")
  flags.mark_flag_as_required("output_file")
  flags.mark_flag_as_required("vocab_file")
  app.run(errors.main_with_user_errors(main))
