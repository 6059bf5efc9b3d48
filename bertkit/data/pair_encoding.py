# coding=utf-8
"""The one encoder of BERT's two-segment input: `[CLS] A [SEP] B [SEP]`.

Every program that feeds BERT a text, or a pair of texts, lays it out here:
run_classifier's records, extract_features' lines, run_swag's choices and
run_rerank's query/passage pairs. Two truncation rules:

  * upstream's (google-research/bert's `_truncate_seq_pair`): one token at a
    time from the end of the longer segment (the second on a tie) until the
    pair fits S - 3; a single text is cut to S - 2;
  * with `max_first_length` (MS MARCO's re-rankers, Nogueira and Cho's
    `--max_query_length`): the first segment (the query) is cut to that
    length first, and the second (the passage) fills the rest of S - 3.

No TensorFlow here: data conversion workers import it.
"""

# [CLS], [SEP], [SEP].
PAIR_SPECIAL_TOKENS = 3
# [CLS], [SEP].
SINGLE_SPECIAL_TOKENS = 2


def truncate_pair(first, second, max_length):
  """Upstream's pair truncation, on copies.

  Args:
    first, second: token sequences.
    max_length: the most tokens the two may hold together.

  Returns:
    (first, second) as new lists: the last token of the longer (of `second`
    on a tie) dropped until they fit.
  """
  first, second = list(first), list(second)
  while len(first) + len(second) > max_length:
    (first if len(first) > len(second) else second).pop()
  return first, second


def encode(tokens_a, tokens_b, max_seq_length, max_first_length=None,
           cls="[CLS]", sep="[SEP]"):
  """The tokens and segment ids BERT reads for one text or one pair.

  Args:
    tokens_a: the first segment's wordpieces.
    tokens_b: the second's, or None for a single text (an empty list is a
      pair whose second segment is empty: `[CLS] A [SEP] [SEP]`).
    max_seq_length: S, the most tokens of the result.
    max_first_length: None for upstream's truncation; else the most tokens
      the first segment keeps (cut first), the second then filling the rest.
    cls, sep: the [CLS] and [SEP] tokens (their ids, to encode ids).

  Returns:
    (tokens, segment_ids) as lists: `[CLS] A [SEP]` in segment 0, then `B [SEP]` in
    segment 1 for a pair; at most S of each.
  """
  if max_first_length is not None:
    tokens_a = list(tokens_a)[:max_first_length]
  if tokens_b is None:
    first = list(tokens_a)[:max_seq_length - SINGLE_SPECIAL_TOKENS]
    tokens = [cls] + first + [sep]
    return tokens, [0] * len(tokens)
  budget = max_seq_length - PAIR_SPECIAL_TOKENS
  if max_first_length is not None:
    first = tokens_a[:budget]
    second = list(tokens_b)[:budget - len(first)]
  else:
    first, second = truncate_pair(tokens_a, tokens_b, budget)
  tokens = [cls] + first + [sep] + second + [sep]
  return tokens, [0] * (len(first) + 2) + [1] * (len(second) + 1)
