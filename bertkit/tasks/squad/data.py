# coding=utf-8
"""SQuAD 1.1 / 2.0 examples and features, as upstream's run_squad.py makes them.

Reading (`read_squad_examples`): each paragraph's context is split into words
on whitespace (space, tab, CR, LF and U+202F, nothing else), and every
character remembers its word. A training answer's word span comes from its
`answer_start` and length; when the words of that span do not contain the
answer text, the question is skipped with a warning and counted. SQuAD 2.0
questions marked `is_impossible` keep word positions -1.

Features (`convert_examples_to_features`): the question is WordPiece-tokenized
and cut to max_query_length; each word is tokenized and its sub-tokens
remember it; a long context is covered by windows of the room left
(max_seq_length - len(query) - 3) moving by doc_stride. A window reads
[CLS] query [SEP] context-window [SEP], segment ids 0 then 1, zero-padded to
max_seq_length (S). A training answer is tightened to the sub-tokens that
spell the tokenized answer; a window that does not hold all of it (or an
impossible question) points at [CLS] (position 0).

Pure Python on tokenization.FullTokenizer; no TensorFlow.
"""

import collections
import json

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import text_files
from bertkit.common.errors import UserError
import tokenization

FIRST_UNIQUE_ID = 1000000000

# Upstream's whitespace: Python's str.isspace() would also split on U+00A0,
# U+3000 and others, which moves word boundaries (and so answers) against
# upstream's features.
_WHITESPACE = frozenset(" \t\r\n\u202f")


class SquadExample(object):
  """One question on one context.

  Attributes:
    qas_id: the question's "id".
    question_text: the question.
    doc_tokens: the context's whitespace-separated words.
    orig_answer_text: the training answer ("" for an impossible question),
      None when not training.
    start_position, end_position: word indexes of the training answer
      (inclusive; -1 for an impossible question), None when not training.
    is_impossible: a SQuAD 2.0 training question without an answer.
  """

  def __init__(self, qas_id, question_text, doc_tokens, orig_answer_text=None,
               start_position=None, end_position=None, is_impossible=False):
    self.qas_id = qas_id
    self.question_text = question_text
    self.doc_tokens = doc_tokens
    self.orig_answer_text = orig_answer_text
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible


class SquadFeatures(object):
  """The model input of one window of one example.

  Attributes:
    unique_id: counts from FIRST_UNIQUE_ID over all windows of a file.
    example_index: index of the example in the list given.
    doc_span_index: which window of the example.
    tokens: [CLS] query [SEP] window [SEP], unpadded.
    token_to_orig_map: {position in tokens: word index} of the window.
    token_is_max_context: {position in tokens: bool}: this window is the one
      where the token has the most context on both sides.
    input_ids, input_mask, segment_ids: S ints each.
    start_position, end_position: training answer positions in tokens (0 for
      no answer in this window), None when not training.
    is_impossible: the example is an impossible training question.
  """

  # Size: upstream's record, field for field and in its order: code written
  # for upstream's run_squad.SquadFeatures builds it the same way.
  def __init__(self, unique_id, example_index, doc_span_index, tokens,
               token_to_orig_map, token_is_max_context, input_ids, input_mask,
               segment_ids, start_position=None, end_position=None,
               is_impossible=None):
    self.unique_id = unique_id
    self.example_index = example_index
    self.doc_span_index = doc_span_index
    self.tokens = tokens
    self.token_to_orig_map = token_to_orig_map
    self.token_is_max_context = token_is_max_context
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.start_position = start_position
    self.end_position = end_position
    self.is_impossible = is_impossible


DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def split_words(text):
  """Upstream's context split.

  Returns:
    (words, char_to_word_offset): the whitespace-separated words, and for
    every character of `text` the index of its word (a whitespace character
    maps to the word before it, -1 before the first word).
  """
  words = []
  char_to_word_offset = []
  prev_is_whitespace = True
  for c in text:
    if c in _WHITESPACE:
      prev_is_whitespace = True
    else:
      if prev_is_whitespace:
        words.append(c)
      else:
        words[-1] += c
      prev_is_whitespace = False
    char_to_word_offset.append(len(words) - 1)
  return words, char_to_word_offset


def load_squad_json(input_file):
  """The "data" list of a SQuAD json file.

  Raises:
    UserError: the file is missing, not UTF-8 or not JSON (with the line
      and column), or has no "data" list.
  """
  try:
    with atomic_io.open_file(input_file, "rb") as f:
      raw = f.read()
  except (OSError, IOError) as e:
    raise UserError("cannot read SQuAD file %s: %s" % (input_file, e))
  except Exception as e:  # tf.errors.NotFoundError for URLs
    raise UserError("cannot read SQuAD file %s: %s" % (
        input_file, getattr(e, "message", e)))
  try:
    document = json.loads(text_files.decode(raw, input_file))
  except json.JSONDecodeError as e:
    raise UserError("%s is not valid JSON: %s: line %d column %d (char %d)"
                    % (input_file, e.msg, e.lineno, e.colno, e.pos))
  if not isinstance(document, dict) or not isinstance(
      document.get("data"), list):
    raise UserError('%s is not a SQuAD file: expected a JSON object with a '
                    '"data" list' % input_file)
  return document["data"]


def _field(value, key, where, input_file, kind):
  if not isinstance(value, dict) or key not in value:
    raise UserError('%s: %s has no "%s"' % (input_file, where, key))
  if not isinstance(value[key], kind):
    raise UserError('%s: "%s" of %s is not a %s' % (
        input_file, key, where, {list: "list", str: "string",
                                 int: "integer"}.get(kind, "value")))
  return value[key]


def iter_questions(data, input_file):
  """Yields (context, qa) for every question of a SQuAD "data" list.

  Raises:
    UserError: an article, paragraph or question lacks a field, naming it.
  """
  for i, entry in enumerate(data):
    where = "article %d" % i
    for j, paragraph in enumerate(_field(entry, "paragraphs", where,
                                         input_file, list)):
      where = "article %d paragraph %d" % (i, j)
      context = _field(paragraph, "context", where, input_file, str)
      for k, qa in enumerate(_field(paragraph, "qas", where, input_file,
                                    list)):
        where = "article %d paragraph %d question %d" % (i, j, k)
        _field(qa, "id", where, input_file, (str, int))
        _field(qa, "question", where, input_file, str)
        yield context, qa


def _answer_span(qa, words, char_to_word_offset, input_file):
  """(answer text, first word, last word), or None if it cannot be found."""
  answer = qa["answers"][0]
  if not (isinstance(answer, dict) and isinstance(answer.get("text"), str)
          and isinstance(answer.get("answer_start"), int)):
    raise UserError('%s: question %s: an answer needs "text" and an integer '
                    '"answer_start"' % (input_file, qa["id"]))
  text = answer["text"]
  start = answer["answer_start"]
  end = start + len(text) - 1
  if not text or start < 0 or end >= len(char_to_word_offset):
    logging.warning("Could not find answer of %s: answer_start %d and "
                    "length %d are outside the context", qa["id"], start,
                    len(text))
    return None
  first = char_to_word_offset[start]
  last = char_to_word_offset[end]
  # Only answers whose text can be recovered from the words are kept: an
  # answer_start that does not match the text gives a span without it.
  actual = " ".join(words[first:last + 1])
  cleaned = " ".join(tokenization.whitespace_tokenize(text))
  if actual.find(cleaned) == -1:
    logging.warning("Could not find answer of %s: '%s' vs. '%s'", qa["id"],
                    actual, cleaned)
    return None
  return text, first, last


def read_squad_examples(input_file, is_training, version_2_with_negative):
  """Reads a SQuAD json file into SquadExamples.

  Args:
    input_file: path of the json (local or a URL tf.io.gfile reads).
    is_training: read the answers (one per question) into word positions.
    version_2_with_negative: the file is SQuAD 2.0 (questions may be
      `is_impossible`).

  Returns:
    (examples, num_skipped): num_skipped counts training questions left out
    because their answer_start does not point at their answer text.

  Raises:
    UserError: the file is not SQuAD json; it has impossible questions but
      version_2_with_negative is False; a training question has not exactly
      one answer.
  """
  data = load_squad_json(input_file)
  examples = []
  num_skipped = 0
  context_words = {}
  for context, qa in iter_questions(data, input_file):
    if qa.get("is_impossible") and not version_2_with_negative:
      raise UserError(
          "%s is a SQuAD 2.0 file (question %s is_impossible); pass "
          "--version_2_with_negative" % (input_file, qa["id"]))
    if context not in context_words:
      context_words = {context: split_words(context)}
    words, char_to_word_offset = context_words[context]
    example = SquadExample(qas_id=qa["id"], question_text=qa["question"],
                           doc_tokens=words)
    if is_training:
      example.is_impossible = bool(version_2_with_negative and
                                   qa.get("is_impossible", False))
      answers = qa.get("answers", [])
      if example.is_impossible:
        example.orig_answer_text = ""
        example.start_position = example.end_position = -1
      elif not isinstance(answers, list) or len(answers) != 1:
        raise UserError(
            "%s: training question %s has %s answers; each needs exactly 1 "
            "(or \"is_impossible\": true with --version_2_with_negative)" %
            (input_file, qa["id"],
             len(answers) if isinstance(answers, list) else "no list of"))
      else:
        span = _answer_span(qa, words, char_to_word_offset, input_file)
        if span is None:
          num_skipped += 1
          continue
        (example.orig_answer_text, example.start_position,
         example.end_position) = span
    examples.append(example)
  if num_skipped:
    logging.warning("%s: skipped %d of %d training question(s) whose "
                    "answer_start does not point at their answer text",
                    input_file, num_skipped, num_skipped + len(examples))
  return examples, num_skipped


def improve_answer_span(doc_tokens, input_start, input_end, tokenizer,
                        orig_answer_text):
  """The sub-token span inside [input_start, input_end] spelling the answer.

  A word "(1895-1943)." holds the answer "1895" as one of its sub-tokens; the
  first (shortest-from-the-right) sub-span whose tokens join to the tokenized
  answer wins. When none does (the answer is part of a word piece, "Japan" in
  "Japanese"), the word span stays.

  Returns:
    (start, end) sub-token indexes.
  """
  tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
  for new_start in range(input_start, input_end + 1):
    for new_end in range(input_end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == tok_answer_text:
        return new_start, new_end
  return input_start, input_end


def doc_spans(num_tokens, max_tokens_for_doc, doc_stride):
  """The windows covering num_tokens sub-tokens: each as long as there is
  room, each starting doc_stride after the last, the last ending at the end.
  """
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append(DocSpan(start=start, length=length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def is_max_context(spans, span_index, position):
  """Whether spans[span_index] gives sub-token `position` the most context.

  A token's score in a window is min(left context, right context) + 0.01 *
  window length; the first window with the highest score wins.
  """
  best_score = None
  best_index = None
  for index, span in enumerate(spans):
    end = span.start + span.length - 1
    if position < span.start or position > end:
      continue
    score = (min(position - span.start, end - position) +
             0.01 * span.length)
    if best_score is None or score > best_score:
      best_score = score
      best_index = index
  return span_index == best_index


def _sub_tokens(example, tokenizer):
  """(all_doc_tokens, tok_to_orig_index, orig_to_tok_index) of the context."""
  tok_to_orig_index = []
  orig_to_tok_index = []
  all_doc_tokens = []
  for i, word in enumerate(example.doc_tokens):
    orig_to_tok_index.append(len(all_doc_tokens))
    for sub_token in tokenizer.tokenize(word):
      tok_to_orig_index.append(i)
      all_doc_tokens.append(sub_token)
  return all_doc_tokens, tok_to_orig_index, orig_to_tok_index


def convert_examples_to_features(examples, tokenizer, max_seq_length,
                                 doc_stride, max_query_length, is_training):
  """Yields the SquadFeatures of every window of every example, in order.

  Args:
    examples: SquadExamples (read with the same is_training).
    tokenizer: tokenization.FullTokenizer.
    max_seq_length: S.
    doc_stride: sub-tokens between the starts of consecutive windows.
    max_query_length: the question is cut to this many sub-tokens.
    is_training: compute start/end positions.
  """
  unique_id = FIRST_UNIQUE_ID
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    all_doc_tokens, tok_to_orig_index, orig_to_tok_index = _sub_tokens(
        example, tokenizer)

    tok_start = tok_end = None
    if is_training and not example.is_impossible:
      tok_start = orig_to_tok_index[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end = orig_to_tok_index[example.end_position + 1] - 1
      else:
        tok_end = len(all_doc_tokens) - 1
      tok_start, tok_end = improve_answer_span(
          all_doc_tokens, tok_start, tok_end, tokenizer,
          example.orig_answer_text)

    # [CLS], [SEP] and [SEP] take 3 positions.
    spans = doc_spans(len(all_doc_tokens),
                      max_seq_length - len(query_tokens) - 3, doc_stride)
    doc_offset = len(query_tokens) + 2
    for span_index, span in enumerate(spans):
      tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
      token_to_orig_map = {}
      token_is_max_context = {}
      for i in range(span.length):
        position = span.start + i
        token_to_orig_map[len(tokens)] = tok_to_orig_index[position]
        token_is_max_context[len(tokens)] = is_max_context(spans, span_index,
                                                           position)
        tokens.append(all_doc_tokens[position])
      tokens.append("[SEP]")
      segment_ids = [0] * doc_offset + [1] * (span.length + 1)
      input_ids = tokenizer.convert_tokens_to_ids(tokens)
      input_mask = [1] * len(input_ids)
      padding = [0] * (max_seq_length - len(input_ids))

      start_position = end_position = None
      if is_training:
        start_position = end_position = 0
        span_end = span.start + span.length - 1
        if (not example.is_impossible and tok_start >= span.start and
            tok_end <= span_end):
          start_position = tok_start - span.start + doc_offset
          end_position = tok_end - span.start + doc_offset

      yield SquadFeatures(
          unique_id=unique_id, example_index=example_index,
          doc_span_index=span_index, tokens=tokens,
          token_to_orig_map=token_to_orig_map,
          token_is_max_context=token_is_max_context,
          input_ids=input_ids + padding, input_mask=input_mask + padding,
          segment_ids=segment_ids + padding, start_position=start_position,
          end_position=end_position,
          is_impossible=example.is_impossible)
      unique_id += 1
