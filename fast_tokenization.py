# coding=utf-8
"""A fast WordPiece tokenizer whose output equals tokenization.FullTokenizer's.

`FastTokenizer` gives, for every input, the same wordpieces (and ids) as
`tokenization.FullTokenizer` with the same vocab and casing, at a fraction of
the cost, and without importing TensorFlow (create_pretraining_data's worker
processes use it; importing TensorFlow costs each process ~430 MB and ~5 s).

Why not the `tokenizers` library's own BERT pipeline (BertNormalizer +
BertPreTokenizer)? It differs from upstream on real text:
  * clean_text drops unassigned (Cn) and private-use (Co) characters, which
    upstream keeps (so its words become [UNK] instead of vanishing);
  * its CJK ranges start the fifth block at U+2B920 instead of U+2B820;
  * it lower-cases character by character, so a word-final capital sigma
    becomes "σ" where Python's str.lower() (upstream) gives "ς";
  * its Unicode tables are not Python's, so categories of recently assigned
    characters differ.
So the basic step (clean, isolate CJK ideographs, lower-case, strip accents,
split off punctuation) is done here with Python's own C-speed string methods
(`str.translate`, `str.lower`, `unicodedata.normalize`, `str.split`) over
per-character tables built from the same character classes as
tokenization.py, in upstream's order: the same primitives in the same order
make it identical by construction, and the tests compare it with
tokenization.py on varied text and on every code point's class. Only the
WordPiece step (greedy longest match, `##` continuations, a whole word ->
[UNK] when any position cannot be matched or when it is longer than 200
characters) runs in the `tokenizers` library, whose algorithm is upstream's;
its result is cached per distinct word, since natural text repeats words.
"""

import collections
import unicodedata

import errors

UNK_TOKEN = "[UNK]"
MAX_INPUT_CHARS_PER_WORD = 200

# Distinct words whose wordpiece ids are remembered; the cache is emptied when
# it is full so that memory stays bounded on corpora with huge vocabularies.
MAX_CACHED_WORDS = 200000

# CJK Unified Ideographs blocks (inclusive), as tokenization._CJK_RANGES.
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


def is_whitespace(char):
  """Space, tab, newline, carriage return, or category Zs (as upstream)."""
  return char in (" ", "\t", "\n", "\r") or unicodedata.category(char) == "Zs"


def is_control(char):
  """Categories Cc and Cf except tab, newline and CR (as upstream)."""
  if char in ("\t", "\n", "\r"):
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def is_punctuation(char):
  """Category P*, or any non-alphanumeric printable ASCII character."""
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def is_chinese_char(cp):
  """True for a code point in a CJK Unified Ideographs block."""
  return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


class _CharTable(dict):
  """A `str.translate` table filled in on first sight of each code point.

  Args:
    rule: code point -> replacement (a str, or None to delete the char).
  """

  def __init__(self, rule):
    super().__init__()
    self._rule = rule

  def __missing__(self, cp):
    value = self[cp] = self._rule(cp)
    return value


def _clean_rule(cp):
  """Upstream's _clean_text then _tokenize_chinese_chars, for one char."""
  char = chr(cp)
  if cp in (0, 0xFFFD) or is_control(char):
    return None
  if is_whitespace(char):
    return " "
  if is_chinese_char(cp):
    return " %s " % char
  return char


def _accent_rule(cp):
  """Upstream's _run_strip_accents after NFD: drop nonspacing marks."""
  char = chr(cp)
  return None if unicodedata.category(char) == "Mn" else char


def _punctuation_rule(cp):
  """Upstream's _run_split_on_punc: each punctuation char its own token."""
  char = chr(cp)
  return " %s " % char if is_punctuation(char) else char


def load_vocab(vocab_file):
  """Reads a vocab file exactly as tokenization.load_vocab does.

  Local files are read directly; other paths (gs://...) go through
  tokenization.load_vocab, which needs TensorFlow's file system.

  Args:
    vocab_file: path of the vocab file.

  Returns:
    An OrderedDict token -> id (id = 0-based line; a repeated token keeps its
    last line).

  Raises:
    errors.UserError: the file is missing, unreadable, not UTF-8, or holds no
      tokens.
  """
  if "://" in vocab_file:
    import tokenization  # pylint: disable=g-import-not-at-top
    return tokenization.load_vocab(vocab_file)
  try:
    with open(vocab_file, "rb") as f:
      data = f.read()
  except FileNotFoundError:
    raise errors.UserError("vocab file %s not found" % vocab_file) from None
  except OSError as e:
    raise errors.UserError(
        "cannot read vocab file %s: %s" % (vocab_file, e.strerror)) from None
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise errors.UserError(
        "vocab file %s is not valid UTF-8: bad byte 0x%02x at byte offset %d"
        % (vocab_file, data[e.start], e.start)) from None
  lines = text.split("\n")
  if lines[-1] == "":
    lines.pop()
  vocab = collections.OrderedDict()
  for index, line in enumerate(lines):
    vocab[line.strip()] = index
  if not any(vocab):
    raise errors.UserError(
        "vocab file %s holds no tokens; expected one token per line"
        % vocab_file)
  return vocab


class FastTokenizer(object):
  """Text -> wordpieces, identical to tokenization.FullTokenizer.

  Attributes:
    vocab: the token -> id mapping.
  """

  def __init__(self, vocab, do_lower_case=True):
    """Builds the tokenizer.

    Args:
      vocab: token -> id mapping (as `load_vocab` returns); must hold
        UNK_TOKEN.
      do_lower_case: lower-case and strip accents (uncased models).
    """
    # Imported here: processes that only use load_vocab (the parent of
    # create_pretraining_data's workers) need not load the library.
    import tokenizers  # pylint: disable=g-import-not-at-top
    self.vocab = vocab
    self.do_lower_case = do_lower_case
    self._inv_vocab = {i: t for t, i in vocab.items()}
    self._wordpiece = tokenizers.models.WordPiece(
        vocab=dict(vocab), unk_token=UNK_TOKEN,
        max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD)
    self._clean = _CharTable(_clean_rule)
    self._strip_accents = _CharTable(_accent_rule)
    self._split_punctuation = _CharTable(_punctuation_rule)
    self._word_ids = {}

  def basic_tokenize(self, text):
    """Upstream's BasicTokenizer.tokenize for a str."""
    text = text.translate(self._clean)
    if self.do_lower_case:
      # Whitespace bounds str.lower()'s final-sigma context, so lower-casing
      # the whole line equals upstream's token-by-token lower().
      text = text.lower()
      if not text.isascii():
        text = unicodedata.normalize("NFD", text).translate(
            self._strip_accents)
    return text.translate(self._split_punctuation).split()

  def _ids_of_word(self, word):
    if len(self._word_ids) >= MAX_CACHED_WORDS:
      self._word_ids.clear()
    ids = self._word_ids[word] = [
        token.id for token in self._wordpiece.tokenize(word)]
    return ids

  def tokenize_to_ids(self, text):
    """Returns the wordpiece ids of `text` (a str)."""
    word_ids = self._word_ids
    ids = []
    for word in self.basic_tokenize(text):
      pieces = word_ids.get(word)
      ids.extend(pieces if pieces is not None else self._ids_of_word(word))
    return ids

  def tokenize(self, text):
    """Returns the wordpiece strings of `text`, as FullTokenizer.tokenize."""
    inv_vocab = self._inv_vocab
    return [inv_vocab[i] for i in self.tokenize_to_ids(text)]

  def convert_tokens_to_ids(self, tokens):
    return [self.vocab[token] for token in tokens]
