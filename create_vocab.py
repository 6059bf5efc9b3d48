# coding=utf-8
"""Trains a WordPiece vocab.txt for BERT from the corpus of the records.

Input: what create_pretraining_data.py reads, read by the same code
(bertkit/data/corpus_input.py): text files with one sentence per line (blank
lines, which separate documents there, are ignored here), JSONL or Parquet
documents (--input_format, --text_field), compressed or not, local paths,
directories or URLs fsspec serves. Training uses the
`tokenizers` library's BertWordPieceTokenizer, whose normalisation and
pre-tokenization mirror tokenization.BasicTokenizer, so the learned pieces are
the ones tokenization.FullTokenizer will look up.

Layout of the written vocab (one token per line, id = line number):

  --vocab_size >= 1000 (Google's released layout, so tooling that assumes
  those ids keeps working):
    [PAD]=0, [unused0]..[unused98]=1..99, [UNK]=100, [CLS]=101, [SEP]=102,
    [MASK]=103, then the learned tokens from id 104 on. (Google's own files
    also put [unused99].. after [MASK]; here those slots hold learned tokens.)

  --vocab_size < 1000 (tiny vocabs for tests and toy models, where 99 unused
  slots would crowd out the learned tokens):
    [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then the learned tokens.

The file holds at most --vocab_size tokens (fewer when the corpus does not
support that many merges at --min_frequency). It is written atomically: a
killed run never leaves a partial vocab.txt under the final name.

The trainer breaks ties between equally frequent pieces in an arbitrary
order, so two runs on the same input can differ in the order of the alphabet
and in a few rare tokens near the size limit; layout and size do not change.

Example:
  python create_vocab.py --input_file=sample_data/corpus.txt \\
    --output_file=/tmp/vocab.txt --vocab_size=3000
"""

import dataclasses
import os

from absl import logging
import tokenizers

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common import file_patterns
from bertkit.common import option_fields
from bertkit.common import programs
from bertkit.common.option_fields import REQUIRED, option
from bertkit.data import corpus_input
from bertkit.data import shared_options
import tokenization

GOOGLE_LAYOUT_MIN_VOCAB_SIZE = 1000
NUM_UNUSED_TOKENS = 99
SPECIAL_TOKENS = tokenization.SPECIAL_TOKENS
_LINES_PER_BATCH = 1000



def special_tokens(vocab_size):
  """The reserved tokens at the start of the vocab, in id order.

  Args:
    vocab_size: the requested vocab size.

  Returns:
    A list of token strings; see the module docstring for the layout.
  """
  if vocab_size < GOOGLE_LAYOUT_MIN_VOCAB_SIZE:
    return list(SPECIAL_TOKENS)
  unused = ["[unused%d]" % i for i in range(NUM_UNUSED_TOKENS)]
  return [tokenization.PAD_TOKEN] + unused + list(SPECIAL_TOKENS[1:])


class CorpusReader(object):
  """Streams the sentences of a corpus in batches, counting them.

  Attributes:
    files: the `corpus_input.InputFile`s, read in order.
    text_field: the JSON field / Parquet column of JSONL/Parquet files.
    num_lines: sentences yielded so far.
  """

  def __init__(self, files, text_field=corpus_input.DEFAULT_TEXT_FIELD):
    self.files = files
    self.text_field = text_field
    self.num_lines = 0

  def batches(self):
    """Yields lists of sentences (non-blank, stripped lines).

    Raises:
      errors.UserError: a file is unreadable or malformed (names it).
    """
    batch = []
    for f in self.files:
      piece = corpus_input.ShardPiece(f.path, 0, f.size, f.format)
      for line, _ in corpus_input.iter_piece_lines(piece, self.text_field):
        if line:
          batch.append(line)
          self.num_lines += 1
          if len(batch) == _LINES_PER_BATCH:
            yield batch
            batch = []
    if batch:
      yield batch


def train_wordpieces(reader, num_learned, do_lower_case, min_frequency,
                     limit_alphabet):
  """Trains WordPiece on the reader's lines.

  Args:
    reader: a CorpusReader.
    num_learned: room for learned tokens (vocab size minus reserved tokens).
    do_lower_case: lower-case and strip accents, like BasicTokenizer.
    min_frequency: minimum count for a merge.
    limit_alphabet: maximum number of distinct characters kept.

  Returns:
    The learned tokens (reserved tokens excluded) in the trainer's id order:
    the alphabet first, then merges from most to least frequent.
  """
  tokenizer = tokenizers.BertWordPieceTokenizer(
      clean_text=True, handle_chinese_chars=True,
      strip_accents=do_lower_case, lowercase=do_lower_case,
      wordpieces_prefix="##")
  # The trainer counts its special tokens in vocab_size; passing ours keeps
  # them out of the learned pieces.
  tokenizer.train_from_iterator(
      reader.batches(), vocab_size=num_learned + len(SPECIAL_TOKENS),
      min_frequency=min_frequency, limit_alphabet=limit_alphabet,
      special_tokens=list(SPECIAL_TOKENS), show_progress=False,
      wordpieces_prefix="##")
  trained = tokenizer.get_vocab()
  return [t for t in sorted(trained, key=trained.get)
          if t not in SPECIAL_TOKENS]


def build_vocab(vocab_size, learned, limit_alphabet):
  """Reserved tokens followed by the learned ones.

  Raises:
    errors.UserError: the learned tokens do not fit. The trainer always keeps
      the whole alphabet, even beyond its vocab_size.
  """
  reserved = special_tokens(vocab_size)
  if len(reserved) + len(learned) > vocab_size:
    raise errors.UserError(
        "--vocab_size=%d leaves room for %d learned tokens, but the corpus "
        "alphabet alone needs %d (characters and their ## forms); raise "
        "--vocab_size or lower --limit_alphabet (now %d)"
        % (vocab_size, vocab_size - len(reserved), len(learned),
           limit_alphabet))
  return reserved + learned


def write_vocab(tokens, output_file):
  """Writes one token per line, atomically."""
  directory = os.path.dirname(output_file)
  if atomic_io.is_url(directory):
    atomic_io.gfile().makedirs(directory)
  elif directory:
    os.makedirs(directory, exist_ok=True)
  with atomic_io.atomic_open(output_file, "w") as f:
    f.write("".join(token + "\n" for token in tokens))


def check_sizes(vocab_size, min_frequency, limit_alphabet):
  """Raises errors.UserError for flag values that cannot work."""
  num_reserved = len(special_tokens(vocab_size))
  if vocab_size <= num_reserved:
    raise errors.UserError(
        "--vocab_size=%d is too small to hold the %d special tokens plus at "
        "least one learned token" % (vocab_size, num_reserved))
  if min_frequency < 1:
    raise errors.UserError(
        "--min_frequency=%d must be at least 1" % min_frequency)
  if limit_alphabet < 1:
    raise errors.UserError(
        "--limit_alphabet=%d must be at least 1" % limit_alphabet)


@dataclasses.dataclass(frozen=True, kw_only=True)
class VocabOptions(shared_options.CorpusFormat):
  """What a create_vocab run is told."""
  input_file: str = option(
      REQUIRED, "The corpus, as create_pretraining_data.py reads it: "
      "comma-separated files, globs, directories or URLs fsspec serves. "
      "Text: one sentence per line; blank lines are ignored.")
  output_file: str = option(REQUIRED, "Where to write vocab.txt.")
  vocab_size: int = option(
      30522, "Maximum number of tokens in the vocab, special tokens "
      "included. From %d up: [PAD]=0, [unused0..98]=1..99, [UNK]=100, "
      "[CLS]=101, [SEP]=102, [MASK]=103 (Google's layout); below that: "
      "[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4. Learned tokens follow."
      % GOOGLE_LAYOUT_MIN_VOCAB_SIZE)
  do_lower_case: bool = option(
      True, "Lower-case and strip accents: True for uncased models, False "
      "for cased ones. The vocab, the records and the model must agree.")
  min_frequency: int = option(2, "Only merge pieces seen at least this many "
                              "times.")
  limit_alphabet: int = option(1000, "Keep at most this many distinct "
                               "characters (the most frequent ones).")

  def __post_init__(self):
    option_fields.check_fields(self)


def run(options):
  """Trains and writes the vocab the options ask for.

  Returns:
    The one-line summary the program prints.

  Raises:
    errors.UserError: a bad value, an unusable corpus, or learned tokens
      that do not fit.
  """
  check_sizes(options.vocab_size, options.min_frequency,
              options.limit_alphabet)
  files = corpus_input.expand_corpus(corpus_input.Corpus(
      options.input_file, options.input_format, options.text_field))
  file_patterns.check_output_reads_nothing(
      "output_file", [options.output_file],
      [("input_file", f.path) for f in files])
  logging.info("Training a %d-token vocab on %d file(s)", options.vocab_size,
               len(files))
  reader = CorpusReader(files, options.text_field)
  num_reserved = len(special_tokens(options.vocab_size))
  learned = train_wordpieces(reader, options.vocab_size - num_reserved,
                             options.do_lower_case, options.min_frequency,
                             options.limit_alphabet)
  if reader.num_lines == 0:
    raise errors.UserError(
        "--input_file %s holds no text (only empty or blank lines)"
        % ",".join(f.path for f in files))
  tokens = build_vocab(options.vocab_size, learned, options.limit_alphabet)
  write_vocab(tokens, options.output_file)
  return ("Wrote %d tokens (%d reserved, %d learned) to %s"
          % (len(tokens), num_reserved, len(learned), options.output_file))


if __name__ == "__main__":
  programs.main(VocabOptions, run)
