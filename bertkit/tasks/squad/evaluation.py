# coding=utf-8
"""The official SQuAD 1.1 and 2.0 evaluation (exact match and F1).

An answer is normalised by lower-casing, removing ASCII punctuation, removing
the articles a/an/the and collapsing whitespace. Exact match is equality of
the normalised texts, F1 the harmonic mean of token precision and recall;
each question scores the best over its gold answers, and the figures are
percentages over the questions.

SQuAD 1.1 (`evaluate_v1`): {"exact_match", "f1"}.

SQuAD 2.0 (`evaluate_v2`): a question without gold answers scores 1 only for
the answer ""; the figures are "exact", "f1" and "total", split into
"HasAns_*" and "NoAns_*"; given the null odds (null_odds.json), a question
whose odds exceed na_prob_thresh counts as answered "" (as the official
script's --na-prob-thresh, default 1.0), and "best_exact"/"best_f1" with
their thresholds give the figures the best null-odds threshold would reach.
"""

import collections
import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text):
  """Lower text and remove punctuation, articles and extra whitespace."""
  text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
  text = _ARTICLES.sub(" ", text)
  return " ".join(text.split())


def exact_match(prediction, gold):
  """1 if the normalised texts are equal, else 0."""
  return int(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction, gold, empty_matches_empty):
  """Token-overlap F1 of the normalised texts.

  Args:
    prediction, gold: answer texts.
    empty_matches_empty: SQuAD 2.0's rule: when either normalises to no
      tokens, F1 is 1 if both do, else 0 (SQuAD 1.1 scores both empty 0).
  """
  pred_tokens = normalize_answer(prediction).split()
  gold_tokens = normalize_answer(gold).split()
  if empty_matches_empty and (not pred_tokens or not gold_tokens):
    return float(pred_tokens == gold_tokens)
  common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred_tokens)
  recall = num_same / len(gold_tokens)
  return 2 * precision * recall / (precision + recall)


def gold_answers(dataset):
  """{question id: [gold answer texts]} of a SQuAD "data" list."""
  answers = collections.OrderedDict()
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        answers[qa["id"]] = [a["text"] for a in qa.get("answers", [])]
  return answers


def has_answers(dataset):
  """True when any question of the "data" list has a gold answer: only then
  is there something to evaluate against."""
  return any(gold_answers(dataset).values())


def evaluate_v1(dataset, predictions):
  """SQuAD 1.1 figures; a question without a prediction scores 0.

  Args:
    dataset: the "data" list of the SQuAD file.
    predictions: {question id: answer text}.

  Returns:
    {"exact_match": %, "f1": %}.
  """
  golds = gold_answers(dataset)
  total_exact = total_f1 = 0.0
  for qid, answers in golds.items():
    if qid not in predictions or not answers:
      continue
    total_exact += max(exact_match(predictions[qid], a) for a in answers)
    total_f1 += max(f1(predictions[qid], a, False) for a in answers)
  return {"exact_match": 100.0 * total_exact / len(golds),
          "f1": 100.0 * total_f1 / len(golds)}


def raw_scores_v2(dataset, predictions):
  """({qid: exact}, {qid: f1}, {qid: has answer}) of the predicted questions.

  A gold answer that normalises to nothing does not count; a question left
  with none is unanswerable (gold "").
  """
  exact, f1s, has_ans = {}, {}, {}
  for qid, answers in gold_answers(dataset).items():
    answers = [a for a in answers if normalize_answer(a)]
    has_ans[qid] = bool(answers)
    if qid not in predictions:
      continue
    answers = answers or [""]
    exact[qid] = max(exact_match(predictions[qid], a) for a in answers)
    f1s[qid] = max(f1(predictions[qid], a, True) for a in answers)
  return exact, f1s, has_ans


def _apply_no_answer_threshold(scores, na_probs, has_ans, na_prob_thresh):
  return {qid: float(not has_ans[qid]) if na_probs[qid] > na_prob_thresh
          else score for qid, score in scores.items()}


def _mean_percent(scores, qids):
  return 100.0 * sum(scores[q] for q in qids) / len(qids)


def best_threshold(predictions, scores, na_probs, has_ans):
  """(best score %, its threshold) over null-odds thresholds.

  Going through the questions by increasing null odds, each threshold
  answers the questions up to it as predicted and the rest with "".
  """
  score = best = sum(1 for qid in has_ans if not has_ans[qid])
  best_thresh = 0.0
  for qid in sorted(na_probs, key=lambda q: na_probs[q]):
    if qid not in scores:
      continue
    if has_ans[qid]:
      score += scores[qid]
    elif predictions[qid]:
      score -= 1
    if score > best:
      best = score
      best_thresh = na_probs[qid]
  return 100.0 * best / len(scores), best_thresh


def evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0):
  """SQuAD 2.0 figures, as the official script prints them.

  Args:
    dataset: the "data" list of the SQuAD file.
    predictions: {question id: answer text ("" for no answer)}.
    na_probs: {question id: null odds} (null_odds.json), or None.
    na_prob_thresh: questions whose null odds exceed it count as answered "".

  Returns:
    An OrderedDict: exact, f1, total, HasAns_exact, HasAns_f1,
    HasAns_total, NoAns_exact, NoAns_f1, NoAns_total (the split parts when
    there are such questions), and with na_probs best_exact,
    best_exact_thresh, best_f1, best_f1_thresh.
  """
  exact_raw, f1_raw, has_ans = raw_scores_v2(dataset, predictions)
  odds = na_probs if na_probs is not None else {q: 0.0 for q in predictions}
  exact = _apply_no_answer_threshold(exact_raw, odds, has_ans, na_prob_thresh)
  f1s = _apply_no_answer_threshold(f1_raw, odds, has_ans, na_prob_thresh)
  qids = list(exact)
  result = collections.OrderedDict([
      ("exact", _mean_percent(exact, qids)), ("f1", _mean_percent(f1s, qids)),
      ("total", len(qids))])
  for prefix, wanted in (("HasAns", True), ("NoAns", False)):
    part = [q for q in qids if has_ans[q] == wanted]
    if part:
      result[prefix + "_exact"] = _mean_percent(exact, part)
      result[prefix + "_f1"] = _mean_percent(f1s, part)
      result[prefix + "_total"] = len(part)
  if na_probs is not None:
    result["best_exact"], result["best_exact_thresh"] = best_threshold(
        predictions, exact_raw, na_probs, has_ans)
    result["best_f1"], result["best_f1_thresh"] = best_threshold(
        predictions, f1_raw, na_probs, has_ans)
  return result
