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
per-character tables built from tokenization.py's own character classes,
in upstream's order: the same primitives in the same order
make it identical by construction, and the tests compare it with
tokenization.py on varied text. Only the
WordPiece step (greedy longest match, `##` continuations, a whole word ->
[UNK] when any position cannot be matched or when it is longer than 200
characters) runs in the `tokenizers` library, whose algorithm is upstream's;
its result is cached per distinct word, since natural text repeats words.
"""

import unicodedata

import tokenization

UNK_TOKEN = tokenization.UNK_TOKEN
MAX_INPUT_CHARS_PER_WORD = 200

# Distinct words whose wordpiece ids are remembered; the cache is emptied when
# it is full so that memory stays bounded on corpora with huge vocabularies.
MAX_CACHED_WORDS = 200000

# The character classes are tokenization.py's own functions (one source of
# truth): the tables below only cache their answers per code point.
# pylint: disable=protected-access
_is_whitespace = tokenization._is_whitespace
_is_control = tokenization._is_control
_is_punctuation = tokenization._is_punctuation
_is_chinese_char = tokenization._is_chinese_char
# pylint: enable=protected-access


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
  if cp in (0, 0xFFFD) or _is_control(char):
    return None
  if _is_whitespace(char):
    return " "
  if _is_chinese_char(cp):
    return " %s " % char
  return char


def _accent_rule(cp):
  """Upstream's _run_strip_accents after NFD: drop nonspacing marks."""
  char = chr(cp)
  return None if unicodedata.category(char) == "Mn" else char


def _punctuation_rule(cp):
  """Upstream's _run_split_on_punc: each punctuation char its own token."""
  char = chr(cp)
  return " %s " % char if _is_punctuation(char) else char


class FastTokenizer(object):
  """Text -> wordpieces, identical to tokenization.FullTokenizer.

  Attributes:
    vocab: the token -> id mapping.
  """

  def __init__(self, vocab, do_lower_case=True):
    """Builds the tokenizer.

    Args:
      vocab: token -> id mapping (as `tokenization.load_vocab` returns);
        must hold UNK_TOKEN.
      do_lower_case: lower-case and strip accents (uncased models).
    """
    # Imported here: processes that never tokenize (the parent of
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
