# coding=utf-8
"""Named-entity recognition data: reading tagged sentences, their labels,
the windows the model sees, and the CoNLL predictions file.

Files (one table, SPLIT_FILES): each split of --data_dir is the first of its
names present, CoNLL-2003's own names included.

Two layouts (a line with a tab is split on tabs, any other on whitespace);
every token line of a file has as many columns as its first:
  CoNLL   whitespace-separated columns, the token first and the tag last
          (CoNLL-2003: `token POS chunk NER`).
  tsv     `token<TAB>tag`.
Blank lines end a sentence; `-DOCSTART-` lines end one too and are skipped.
Tags are IOB1 or IOB2 (O, B-TYPE, I-TYPE); both are read, and IOB1 is
converted to IOB2 (`to_iob2`), the scheme training and metrics use.

Windows follow the BERT paper (section 5.3): each word's first WordPiece
carries its label, the other pieces none (the loss and the prediction skip
them). A sentence longer than a window is cut between words into
consecutive windows, so every word is in exactly one window and predicted
once. No TensorFlow here.
"""

import dataclasses
from typing import Optional, Tuple

import numpy as np

from bertkit.common import atomic_io
from bertkit.common import file_patterns
from bertkit.common import text_files
from bertkit.common.errors import UserError

# Each split's file names in --data_dir, the first present is read:
# ours, then CoNLL-2003's two distributions (valid.txt, eng.testa, ...).
SPLIT_FILES = {"train": ("train.txt", "eng.train"),
               "dev": ("dev.txt", "valid.txt", "eng.testa"),
               "test": ("test.txt", "eng.testb")}
DOCSTART = "-DOCSTART-"
OUTSIDE = "O"
BEGIN, INSIDE = "B-", "I-"
# The [CLS] and [SEP] of every window.
SPECIAL_TOKENS = 2


@dataclasses.dataclass(frozen=True)
class Sentence:
  """One tagged sentence.

  Attributes:
    words: its tokens, as in the file.
    tags: their IOB2 tags; None: unlabelled (a file of tokens alone, read
      as a transfer set).
    lines: the 1-based line number of each word in `path`.
    path: the file it was read from.
  """
  words: Tuple[str, ...]
  tags: Optional[Tuple[str, ...]]
  lines: Tuple[int, ...]
  path: str


@dataclasses.dataclass(frozen=True)
class Window:
  """The WordPieces of consecutive words of one sentence, with labels.

  Attributes:
    sentence: the index of its sentence.
    first_word: the index of its first word in the sentence.
    tokens: [CLS] pieces [SEP].
    word_starts: the position in `tokens` of each word's first piece.
  """
  sentence: int
  first_word: int
  tokens: Tuple[str, ...]
  word_starts: Tuple[int, ...]


def split_path(data_dir, split):
  """The file of `split` in data_dir (SPLIT_FILES; file_patterns.split_file)."""
  return file_patterns.split_file(data_dir, split, SPLIT_FILES[split])


def check_tag(tag, path, line_number):
  """Refuses a tag that is not O, B-TYPE or I-TYPE."""
  if tag != OUTSIDE and not (tag[:2] in (BEGIN, INSIDE) and tag[2:]):
    raise UserError("%s:%d: tag %r is not IOB (O, B-TYPE or I-TYPE)" %
                    (path, line_number, tag))


def entity_type(tag):
  """The TYPE of B-TYPE / I-TYPE; None for O."""
  return None if tag == OUTSIDE else tag[2:]


def to_iob2(tags):
  """IOB1 (or IOB2) tags as IOB2: an I-TYPE that starts an entity (after O or
  another type) becomes B-TYPE; everything else is kept."""
  converted = []
  previous = OUTSIDE
  for tag in tags:
    if tag.startswith(INSIDE) and entity_type(previous) != entity_type(tag):
      tag = BEGIN + tag[2:]
    converted.append(tag)
    previous = tag
  return tuple(converted)


def _columns(line):
  """A token line's fields: tab-separated when it has a tab, else
  whitespace-separated."""
  return line.split("\t") if "\t" in line else line.split()


def read_sentences(path, unlabelled_allowed=False):
  """The sentences of a CoNLL or `token<TAB>tag` file, tags in IOB2; with
  `unlabelled_allowed`, a file of one token a line reads as untagged
  sentences (tags None).

  Raises:
    UserError: a byte is not UTF-8, a line's column count differs from the
      file's first token line (or is below 2), a tag is not IOB, or there
      is no sentence; each names the file and the line.
  """
  sentences, words, tags, lines = [], [], [], []
  width = None

  def end_sentence():
    if words:
      sentences.append(Sentence(tuple(words),
                                to_iob2(tags) if width > 1 else None,
                                tuple(lines), path))
      del words[:], tags[:], lines[:]

  with text_files.open_text(path) as f:
    for number, raw in enumerate(f, 1):
      line = raw.rstrip("\r\n")
      if not line.strip():
        end_sentence()
        continue
      fields = [field.strip() for field in _columns(line)]
      if fields[0] == DOCSTART:
        end_sentence()
        continue
      if width is None:
        width = len(fields)
        if width < 2 and not unlabelled_allowed:
          raise UserError("%s:%d: one column; expected the token and its "
                          "tag (CoNLL columns or token<TAB>tag)" %
                          (path, number))
      if len(fields) != width:
        raise UserError("%s:%d: %d columns, but the file's first token line "
                        "has %d" % (path, number, len(fields), width))
      if not all(fields):
        raise UserError("%s:%d: an empty column" % (path, number))
      if any(c.isspace() for c in fields[0]):
        # The predictions file separates its columns by spaces.
        raise UserError("%s:%d: token %r holds whitespace" %
                        (path, number, fields[0]))
      if width > 1:
        check_tag(fields[-1], path, number)
      words.append(fields[0])
      tags.append(fields[-1])
      lines.append(number)
  end_sentence()
  if not sentences:
    raise UserError("%s has no tagged sentence" % path)
  return sentences


def labels_of(sentences):
  """The label list of tagged sentences: O, then B- and I- of each entity
  type, types sorted."""
  types = sorted({entity_type(tag) for s in sentences for tag in s.tags or ()}
                 - {None})
  return [OUTSIDE] + [prefix + t for t in types for prefix in (BEGIN, INSIDE)]


def check_labels(sentences, label_list):
  """Refuses a tag outside label_list, naming its file and line."""
  known = set(label_list)
  for sentence in sentences:
    for tag, number in zip(sentence.tags or (), sentence.lines):
      if tag not in known:
        raise UserError("%s:%d: tag %s is not in the label list (%s)" % (
            sentence.path, number, tag, ", ".join(label_list)))


def check_label_list(label_list):
  """Refuses a --labels list without O, with a non-IOB or repeated label."""
  for label in label_list:
    check_tag(label, "--labels", 1)
  if OUTSIDE not in label_list or len(set(label_list)) != len(label_list):
    raise UserError("--labels=%s must hold O and each label once" %
                    ",".join(label_list))


def word_pieces(tokenizer, word):
  """A word's WordPieces; [UNK] for one the tokenizer reduces to nothing
  (a control character), so that every word keeps a labelled piece."""
  return tokenizer.tokenize(word) or [tokenizer.unk_token]


def sentence_windows(index, pieces, max_seq_length):
  """The windows of one sentence.

  Args:
    index: the sentence's index.
    pieces: each word's WordPieces.
    max_seq_length: S; a window holds S - 2 pieces.

  Returns:
    Windows of consecutive whole words, each at most S long, together
    covering every word once. A word of more than S - 2 pieces fills a
    window alone, its pieces past the window cut (its first piece, which
    carries the label, kept).
  """
  room = max_seq_length - SPECIAL_TOKENS
  windows, tokens, starts, first = [], [], [], 0
  for number, word in enumerate(pieces):
    if starts and len(tokens) + len(word) > room:
      windows.append(_window(index, first, tokens, starts))
      tokens, starts, first = [], [], number
    starts.append(len(tokens) + 1)  # after [CLS]
    tokens.extend(word[:room - len(tokens)])
  windows.append(_window(index, first, tokens, starts))
  return windows


def _window(index, first, tokens, starts):
  return Window(index, first, ("[CLS]",) + tuple(tokens) + ("[SEP]",),
                tuple(starts))


def windows_of(sentences, tokenizer, max_seq_length):
  """Every sentence's windows, in order."""
  windows = []
  for index, sentence in enumerate(sentences):
    windows.extend(sentence_windows(
        index, [word_pieces(tokenizer, w) for w in sentence.words],
        max_seq_length))
  return windows


def window_labels(window, sentence, label_list):
  """The label id of each word of a window, in word order (0 for an
  untagged sentence's)."""
  if sentence.tags is None:
    return [0] * len(window.word_starts)
  tags = sentence.tags[window.first_word:
                       window.first_word + len(window.word_starts)]
  return [label_list.index(tag) for tag in tags]


def predicted_tags(sentences, windows, label_ids, label_list):
  """Each sentence's predicted tags.

  Args:
    sentences: the Sentences.
    windows: their windows (windows_of), in order.
    label_ids: for each window, the predicted label id at every position
      [S].
    label_list: the labels.

  Returns:
    A list of tag lists, one per sentence, one tag per word (the label of
    its first piece).
  """
  tags = [[None] * len(s.words) for s in sentences]
  for window, ids in zip(windows, label_ids):
    for offset, position in enumerate(window.word_starts):
      tags[window.sentence][window.first_word + offset] = (
          label_list[int(ids[position])])
  return tags


def write_conll(path, sentences, predicted):
  """The predictions as CoNLL lines `token gold predicted`, a blank line
  after each sentence: the layout conlleval and seqeval read; `token
  predicted` for untagged sentences (a tagged file read_sentences reads)."""
  with atomic_io.atomic_open(path, "w") as f:
    for sentence, tags in zip(sentences, predicted):
      for number, (word, guess) in enumerate(zip(sentence.words, tags)):
        gold = "" if sentence.tags is None else sentence.tags[number] + " "
        f.write("%s %s%s\n" % (word, gold, guess))
      f.write("\n")


def word_logits(sentences, windows, window_logits):
  """Each sentence's logits [W, C] of its W words (each word's first
  piece's), from its windows' logits [S, C], in order."""
  rows = [[None] * len(s.words) for s in sentences]
  for window, logits in zip(windows, window_logits):
    for offset, position in enumerate(window.word_starts):
      rows[window.sentence][window.first_word + offset] = logits[position]
  return [np.stack(row) for row in rows]


def entity_metrics(gold, predicted):
  """seqeval's entity-level figures (conlleval's rules, its default mode).

  Args:
    gold, predicted: lists of tag lists.

  Returns:
    {"precision", "recall", "f1", "support", "types": {TYPE: {"precision",
    "recall", "f1", "support"}}}: overall the micro average.
  """
  from seqeval import metrics  # pylint: disable=g-import-not-at-top
  report = metrics.classification_report(gold, predicted, output_dict=True,
                                         zero_division=0)

  def figures(row):
    return {"precision": float(row["precision"]),
            "recall": float(row["recall"]), "f1": float(row["f1-score"]),
            "support": int(row["support"])}

  overall = figures(report["micro avg"])
  overall["types"] = {name: figures(row) for name, row in report.items()
                      if not name.endswith(" avg")}
  return overall


def flat_metrics(prefix, metrics):
  """entity_metrics as eval_results.txt's `prefix_name` figures (per type:
  `prefix_TYPE_name`)."""
  flat = {"%s_%s" % (prefix, k): v for k, v in metrics.items()
          if k != "types"}
  for name, row in metrics["types"].items():
    flat.update({"%s_%s_%s" % (prefix, name, k): v for k, v in row.items()})
  return flat

