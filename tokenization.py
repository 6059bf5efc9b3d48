# coding=utf-8
"""WordPiece tokenization, behaving exactly like google-research/bert's.

Same public API as upstream `tokenization.py`: `FullTokenizer` (basic
tokenization followed by WordPiece), `BasicTokenizer`, `WordpieceTokenizer`,
`load_vocab` and the small conversion helpers. Token output is identical to
upstream for every input; the only differences are on bad input, where this
module raises `errors.UserError` naming the file instead of a traceback:
a missing or empty vocab file, and a vocab file that is not UTF-8.

Local vocab files are read with the os module; other paths (gs://...) with
tf.io.gfile, so TensorFlow is imported only for those: tokenizing (and
create_pretraining_data's worker processes) does not load it.
"""

import collections
import re
import unicodedata

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common import text_files

# The special tokens, as Google's vocab files spell them; create_vocab.py
# writes them in this order at the start of a vocab.
PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, CLS_TOKEN, SEP_TOKEN, MASK_TOKEN)

# Google's released checkpoints whose names reveal their casing (the casing is
# not stored in bert_config.json, so upstream guesses it from the path).
_UNCASED_MODELS = frozenset([
    "uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
    "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12",
])
_CASED_MODELS = frozenset([
    "cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
    "multi_cased_L-12_H-768_A-12",
])

# CJK Unified Ideographs blocks (inclusive). Hangul, Hiragana and Katakana are
# deliberately absent: those scripts separate words with spaces.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Checks `do_lower_case` against the casing implied by a checkpoint name.

  Only Google's released model names (the directory holding
  `bert_model.ckpt`) are recognised; any other path passes.

  Args:
    do_lower_case: the value of the --do_lower_case flag.
    init_checkpoint: the value of the --init_checkpoint flag (may be empty).

  Raises:
    ValueError: the checkpoint is a known cased model and do_lower_case is
      True, or a known uncased model and do_lower_case is False.
  """
  if not init_checkpoint:
    return
  match = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if match is None:
    return
  model_name = match.group(1)
  if model_name in _UNCASED_MODELS and not do_lower_case:
    given, kind, wanted = "False", "lowercased", "True"
  elif model_name in _CASED_MODELS and do_lower_case:
    given, kind, wanted = "True", "cased", "False"
  else:
    return
  raise ValueError(
      "You passed in `--do_lower_case=%s` with `--init_checkpoint=%s`. "
      "However, `%s` seems to be a %s model, so you should pass in "
      "`--do_lower_case=%s` so that the fine-tuning matches how the model "
      "was pre-trained." % (given, init_checkpoint, model_name, kind, wanted))


def convert_to_unicode(text):
  """Returns `text` as `str`, decoding bytes as UTF-8 (bad bytes dropped)."""
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise ValueError("Unsupported string type: %s" % type(text))


def printable_text(text):
  """Returns `text` as a `str` suitable for print or logging."""
  return convert_to_unicode(text)


def _read_vocab_bytes(vocab_file):
  """The bytes of a vocab file, local or URL, with one-line errors."""
  if not atomic_io.is_url(vocab_file):
    try:
      with open(vocab_file, "rb") as f:
        return f.read()
    except FileNotFoundError:
      raise errors.UserError("vocab file %s not found" % vocab_file) from None
    except OSError as e:
      raise errors.UserError("cannot read vocab file %s: %s"
                             % (vocab_file, e.strerror)) from None
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  try:
    with tf.io.gfile.GFile(vocab_file, "rb") as reader:
      return reader.read()
  except tf.errors.NotFoundError:
    raise errors.UserError("vocab file %s not found" % vocab_file) from None
  except tf.errors.OpError as e:
    raise errors.UserError(
        "cannot read vocab file %s: %s" % (vocab_file, e.message)) from None


def load_vocab(vocab_file):
  """Loads a vocab file: one token a line, id = 0-based line number.

  Lines are split on "\\n" only (not on other Unicode line separators) and
  stripped, as upstream does; a repeated token keeps its last line number.

  Args:
    vocab_file: path of the vocab file (local or gfile URL).

  Returns:
    An OrderedDict mapping token -> id.

  Raises:
    errors.UserError: the file is missing or unreadable, is not UTF-8, or
      holds no tokens.
  """
  data = _read_vocab_bytes(vocab_file)
  # A byte-order mark stays in the first token, as upstream reads it.
  lines = text_files.decode(data, vocab_file, keep_bom=True).split("\n")
  if lines[-1] == "":
    lines.pop()  # The text after the final newline is not a line.
  vocab = collections.OrderedDict()
  for index, line in enumerate(lines):
    vocab[line.strip()] = index
  if not any(vocab):
    raise errors.UserError(
        "vocab file %s holds no tokens; expected one token per line"
        % vocab_file)
  return vocab


def check_vocab_fits_config(vocab_file_or_vocab, vocab_size):
  """Checks that every vocab id is a row of the model's embedding table.

  Upstream does not check this: an id >= vocab_size silently gathers outside
  the table (NaN losses on GPU).

  Args:
    vocab_file_or_vocab: a vocab file path, or a token -> id mapping.
    vocab_size: `vocab_size` from bert_config.json.

  Raises:
    errors.UserError: the vocab needs more than `vocab_size` ids.
  """
  if isinstance(vocab_file_or_vocab, str):
    vocab = load_vocab(vocab_file_or_vocab)
    name = "vocab file %s" % vocab_file_or_vocab
  else:
    vocab = vocab_file_or_vocab
    name = "the vocab"
  num_ids = max(vocab.values()) + 1 if vocab else 0
  if num_ids > vocab_size:
    raise errors.UserError(
        "%s has %d tokens but bert_config vocab_size is %d; use a "
        "bert_config whose vocab_size is at least %d (upstream would silently "
        "look up rows past the embedding table and produce NaN on GPU)"
        % (name, num_ids, vocab_size, num_ids))


def convert_by_vocab(vocab, items):
  """Maps each item through `vocab` (KeyError on an unknown item)."""
  return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab, tokens):
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
  """Splits `text` on whitespace, as `str.split()` does."""
  return text.split()


class FullTokenizer(object):
  """Basic tokenization followed by WordPiece: text -> wordpieces."""

  def __init__(self, vocab_file, do_lower_case=True):
    """Loads the vocab.

    Args:
      vocab_file: path of the vocab file.
      do_lower_case: lower-case and strip accents (uncased models).
    """
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

  def tokenize(self, text):
    """Returns the list of wordpiece strings for `text`."""
    pieces = []
    for token in self.basic_tokenizer.tokenize(text):
      pieces.extend(self.wordpiece_tokenizer.tokenize(token))
    return pieces

  def convert_tokens_to_ids(self, tokens):
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    return convert_by_vocab(self.inv_vocab, ids)


class BasicTokenizer(object):
  """Cleans text, isolates CJK ideographs and punctuation, optionally lowers."""

  def __init__(self, do_lower_case=True):
    """Constructs a BasicTokenizer.

    Args:
      do_lower_case: lower-case each token and strip its accents.
    """
    self.do_lower_case = do_lower_case

  def tokenize(self, text):
    """Returns the list of basic tokens for `text` (str or UTF-8 bytes)."""
    text = self._clean_text(convert_to_unicode(text))
    text = self._tokenize_chinese_chars(text)
    split_tokens = []
    for token in whitespace_tokenize(text):
      if self.do_lower_case:
        token = self._run_strip_accents(token.lower())
      split_tokens.extend(self._run_split_on_punc(token))
    # Upstream re-splits the joined pieces; kept so that no output token can
    # ever be empty or contain whitespace, whatever lower() and NFD produce.
    return whitespace_tokenize(" ".join(split_tokens))

  def _run_strip_accents(self, text):
    """Drops combining marks (category Mn) after NFD decomposition."""
    text = unicodedata.normalize("NFD", text)
    return "".join(c for c in text if unicodedata.category(c) != "Mn")

  def _run_split_on_punc(self, text):
    """Splits `text` so that each punctuation character is its own piece."""
    pieces = []
    current = []
    for char in text:
      if _is_punctuation(char):
        if current:
          pieces.append("".join(current))
          current = []
        pieces.append(char)
      else:
        current.append(char)
    if current:
      pieces.append("".join(current))
    return pieces

  def _tokenize_chinese_chars(self, text):
    """Surrounds every CJK ideograph with spaces."""
    return "".join(" %s " % c if _is_chinese_char(ord(c)) else c
                   for c in text)

  def _clean_text(self, text):
    """Drops NUL, U+FFFD and control characters; maps whitespace to " "."""
    output = []
    for char in text:
      if char in ("\x00", "\ufffd") or _is_control(char):
        continue
      output.append(" " if _is_whitespace(char) else char)
    return "".join(output)


class WordpieceTokenizer(object):
  """Greedy longest-match-first WordPiece over a fixed vocab."""

  def __init__(self, vocab, unk_token=UNK_TOKEN, max_input_chars_per_word=200):
    """Constructs a WordpieceTokenizer.

    Args:
      vocab: a container of wordpiece strings (continuations start "##").
      unk_token: what a word that cannot be covered becomes.
      max_input_chars_per_word: longer words become `unk_token` unsplit.
    """
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word

  def tokenize(self, text):
    """Splits whitespace-separated, basic-tokenized text into wordpieces.

    For example "unaffable" -> ["un", "##aff", "##able"]. A word with any
    position that no vocab piece matches becomes a single `unk_token`.

    Args:
      text: text already passed through `BasicTokenizer`.

    Returns:
      A list of wordpiece strings.
    """
    output = []
    for word in whitespace_tokenize(convert_to_unicode(text)):
      if len(word) > self.max_input_chars_per_word:
        output.append(self.unk_token)
        continue
      pieces = self._split_word(word)
      if pieces is None:
        output.append(self.unk_token)
      else:
        output.extend(pieces)
    return output

  def _split_word(self, word):
    """Returns the wordpieces of one word, or None if it cannot be covered."""
    pieces = []
    start = 0
    while start < len(word):
      prefix = "##" if start > 0 else ""
      for end in range(len(word), start, -1):
        piece = prefix + word[start:end]
        if piece in self.vocab:
          break
      else:
        return None
      pieces.append(piece)
      start = end
    return pieces


def _is_chinese_char(cp):
  """True for a code point in one of the CJK Unified Ideographs blocks."""
  return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _is_whitespace(char):
  """Space, tab, newline, carriage return, or Unicode category Zs."""
  if char in (" ", "\t", "\n", "\r"):
    return True
  return unicodedata.category(char) == "Zs"


def _is_control(char):
  """Categories Cc and Cf, except tab/newline/CR, which count as whitespace."""
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
  """Unicode category P*, or any non-alphanumeric printable ASCII character.

  ASCII symbols such as "$", "^" and "`" are not category P but are split off
  like punctuation for consistency.
  """
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")
