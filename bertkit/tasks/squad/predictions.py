# coding=utf-8
"""From start/end logits to SQuAD answers, as upstream's write_predictions.

For each example, every window's n_best_size best start and end positions
are paired; a pair counts when both ends are context tokens, the start has
its maximum context in that window, end >= start and the answer is at most
max_answer_length sub-tokens. Pairs are ranked by start + end logit; the
answer text is the original words of the span, trimmed to what the
sub-tokens spell ("final text" alignment). SQuAD 2.0 adds the null answer:
its score is the smallest start_logit[0] + end_logit[0] over the example's
windows, and the answer is "" when that score exceeds the best non-null
score by more than null_score_diff_threshold.

Pure Python; no TensorFlow.
"""

import collections
import json
import math
import os

from absl import logging

from bertkit.common import atomic_io
import tokenization

RawResult = collections.namedtuple("RawResult",
                                   ["unique_id", "start_logits", "end_logits"])

_Candidate = collections.namedtuple(
    "_Candidate",
    ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])

_Entry = collections.namedtuple("_Entry", ["text", "start_logit", "end_logit"])

# What an example's n-best list holds when no span qualifies at all (too
# short a max_answer_length, say): upstream's stand-in, kept so that every
# question gets an entry.
NO_ANSWER_TEXT = "empty"


def best_indexes(logits, n_best_size):
  """Indexes of the n_best_size largest logits, largest first (stable)."""
  order = sorted(enumerate(logits), key=lambda x: x[1], reverse=True)
  return [index for index, _ in order[:n_best_size]]


def softmax(scores):
  """Probabilities of `scores` (a list of floats), computed stably."""
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(s - top) for s in scores]
  total = sum(exps)
  return [e / total for e in exps]


def _strip_spaces(text):
  """(text without spaces, {index in it: index in text})."""
  chars = []
  index_map = collections.OrderedDict()
  for i, c in enumerate(text):
    if c == " ":
      continue
    index_map[len(chars)] = i
    chars.append(c)
  return "".join(chars), index_map


def final_text(pred_text, orig_text, do_lower_case):
  """The part of `orig_text` (original words) that `pred_text` spells.

  pred_text is the de-tokenized WordPiece answer ("steve smith"); orig_text
  the whole words it came from ("Steve Smith's"). The words are run through
  the basic tokenizer (lower-casing, accents, punctuation split); when that
  text has the same characters as orig_text apart from spaces, the
  characters line up one to one and the answer's place in it maps back to
  orig_text ("Steve Smith"). Otherwise orig_text is returned whole.
  """
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  tok_text = " ".join(basic.tokenize(orig_text))
  start = tok_text.find(pred_text)
  if start == -1:
    logging.debug("Unable to find text: '%s' in '%s'", pred_text, orig_text)
    return orig_text
  end = start + len(pred_text) - 1

  orig_ns_text, orig_ns_to_s = _strip_spaces(orig_text)
  tok_ns_text, tok_ns_to_s = _strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    logging.debug("Length not equal after stripping spaces: '%s' vs '%s'",
                  orig_ns_text, tok_ns_text)
    return orig_text
  tok_s_to_ns = {s: ns for ns, s in tok_ns_to_s.items()}

  def to_orig(position):
    ns = tok_s_to_ns.get(position)
    return None if ns is None else orig_ns_to_s.get(ns)

  orig_start = to_orig(start)
  orig_end = to_orig(end)
  if orig_start is None or orig_end is None:
    logging.debug("Couldn't map '%s' back into '%s'", pred_text, orig_text)
    return orig_text
  return orig_text[orig_start:orig_end + 1]


def _span_text(example, feature, start_index, end_index, do_lower_case):
  """The answer text of tokens[start_index..end_index] of a window."""
  tok_text = " ".join(feature.tokens[start_index:end_index + 1])
  # Join the word pieces back into words, then normalise whitespace.
  tok_text = tok_text.replace(" ##", "").replace("##", "")
  tok_text = " ".join(tok_text.strip().split())
  orig_start = feature.token_to_orig_map[start_index]
  orig_end = feature.token_to_orig_map[end_index]
  orig_text = " ".join(example.doc_tokens[orig_start:orig_end + 1])
  return final_text(tok_text, orig_text, do_lower_case)


def _candidates(features, results_by_id, n_best_size, max_answer_length,
                version_2_with_negative):
  """The valid spans of one example, best first, and its null score.

  Returns:
    (candidates, null): candidates sorted by start + end logit (the null
    answer among them under SQuAD 2.0); null is (score, start_logit,
    end_logit) of the window with the smallest null score, or None.
  """
  candidates = []
  null = None
  null_feature_index = 0
  for feature_index, feature in enumerate(features):
    result = results_by_id[feature.unique_id]
    if version_2_with_negative:
      score = result.start_logits[0] + result.end_logits[0]
      if null is None or score < null[0]:
        null = (score, result.start_logits[0], result.end_logits[0])
        null_feature_index = feature_index
    for start in best_indexes(result.start_logits, n_best_size):
      for end in best_indexes(result.end_logits, n_best_size):
        # Spans into the question, [SEP] or padding are not answers.
        if (start not in feature.token_to_orig_map or
            end not in feature.token_to_orig_map or
            not feature.token_is_max_context.get(start, False) or
            end < start or end - start + 1 > max_answer_length):
          continue
        candidates.append(_Candidate(feature_index, start, end,
                                     result.start_logits[start],
                                     result.end_logits[end]))
  if version_2_with_negative:
    candidates.append(_Candidate(null_feature_index, 0, 0, null[1], null[2]))
  candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)
  return candidates, null


def example_prediction(example, features, results_by_id, n_best_size,
                       max_answer_length, do_lower_case,
                       version_2_with_negative, null_score_diff_threshold):
  """The answer of one example from the results of its windows.

  Args:
    example: a SquadExample.
    features: its SquadFeatures, in window order.
    results_by_id: {unique_id: RawResult} covering the features.
    n_best_size, max_answer_length, do_lower_case, version_2_with_negative,
    null_score_diff_threshold: as the flags of the same names.

  Returns:
    (answer text, n-best list of OrderedDicts with text, probability,
    start_logit, end_logit, null score minus best non-null score or None).
  """
  candidates, null = _candidates(features, results_by_id, n_best_size,
                                 max_answer_length, version_2_with_negative)
  seen = set()
  nbest = []
  for candidate in candidates:
    if len(nbest) >= n_best_size:
      break
    if candidate.start_index > 0:
      text = _span_text(example, features[candidate.feature_index],
                        candidate.start_index, candidate.end_index,
                        do_lower_case)
      if text in seen:
        continue
    else:
      text = ""
    seen.add(text)
    nbest.append(_Entry(text, candidate.start_logit, candidate.end_logit))

  if version_2_with_negative and "" not in seen:
    nbest.append(_Entry("", null[1], null[2]))
  best_non_null = next((e for e in nbest if e.text), None)
  if best_non_null is None:
    # Upstream fails here under SQuAD 2.0 (only the null answer qualified);
    # the stand-in scores 0, as it does in upstream's SQuAD 1.1 path.
    best_non_null = _Entry(NO_ANSWER_TEXT, 0.0, 0.0)
    nbest.insert(0, best_non_null)

  probabilities = softmax([e.start_logit + e.end_logit for e in nbest])
  nbest_json = [collections.OrderedDict([
      ("text", e.text), ("probability", p), ("start_logit", e.start_logit),
      ("end_logit", e.end_logit)]) for e, p in zip(nbest, probabilities)]

  if not version_2_with_negative:
    return nbest_json[0]["text"], nbest_json, None
  score_diff = null[0] - best_non_null.start_logit - best_non_null.end_logit
  answer = "" if score_diff > null_score_diff_threshold else (
      best_non_null.text)
  return answer, nbest_json, score_diff


def compute_predictions(examples, features, results, n_best_size,
                        max_answer_length, do_lower_case,
                        version_2_with_negative=False,
                        null_score_diff_threshold=0.0):
  """Answers of every example, as upstream's write_predictions computes them.

  Args:
    examples: SquadExamples in file order.
    features: their SquadFeatures.
    results: RawResults, one per feature (any order).
    n_best_size: spans kept per example (and start/end positions tried per
      window).
    max_answer_length: longest answer, in sub-tokens.
    do_lower_case: the tokenizer's casing (for the final-text alignment).
    version_2_with_negative: allow the null answer "".
    null_score_diff_threshold: predict "" when null score - best non-null
      score exceeds it.

  Returns:
    (predictions, nbest, null_odds): OrderedDicts by question id of the
    answer text, the n-best list, and (SQuAD 2.0, else empty) the score
    difference.
  """
  features_by_example = collections.defaultdict(list)
  for feature in features:
    features_by_example[feature.example_index].append(feature)
  results_by_id = {r.unique_id: r for r in results}

  predictions = collections.OrderedDict()
  nbest = collections.OrderedDict()
  null_odds = collections.OrderedDict()
  for example_index, example in enumerate(examples):
    answer, nbest_json, score_diff = example_prediction(
        example, features_by_example[example_index], results_by_id,
        n_best_size, max_answer_length, do_lower_case,
        version_2_with_negative, null_score_diff_threshold)
    predictions[example.qas_id] = answer
    nbest[example.qas_id] = nbest_json
    if version_2_with_negative:
      null_odds[example.qas_id] = score_diff
  return predictions, nbest, null_odds


PREDICTIONS_FILE = "predictions.json"
NBEST_FILE = "nbest_predictions.json"
NULL_ODDS_FILE = "null_odds.json"


def write_json(path, value):
  """Writes `value` as upstream's files are (indent 4, newline), atomically."""
  with atomic_io.atomic_open(path, "w") as f:
    f.write(json.dumps(value, indent=4) + "\n")


def write_predictions(output_dir, predictions, nbest, null_odds,
                      version_2_with_negative):
  """predictions.json, nbest_predictions.json and (2.0) null_odds.json.

  Returns:
    The paths written.
  """
  paths = [os.path.join(output_dir, name)
           for name in (PREDICTIONS_FILE, NBEST_FILE)]
  write_json(paths[0], predictions)
  write_json(paths[1], nbest)
  if version_2_with_negative:
    paths.append(os.path.join(output_dir, NULL_ODDS_FILE))
    write_json(paths[2], null_odds)
  return paths
