# coding=utf-8
"""SQuAD reading, features, predictions and evaluation against upstream.

tests/fixtures/squad/golden_upstream.json holds what google-research/bert's
run_squad.py (read_squad_examples, convert_examples_to_features,
write_predictions) made of squad_v1.json / squad_v2.json with vocab.txt at
max_seq_length 64, doc_stride 32, max_query_length 16, lower case; the
predictions come from the random logits stored beside them, with n_best_size
20, max_answer_length 10 and null_score_diff_threshold 0.0 and 1.5.
"""

import json
import os

import pytest

from bertkit.tasks.squad import data as squad_data
from bertkit.tasks.squad import evaluation as squad_evaluation
from bertkit.tasks.squad import predictions as squad_predictions
import tokenization
from conftest import REPO_ROOT
from bertkit.common.errors import UserError

DATA = os.path.join(REPO_ROOT, "tests", "fixtures", "squad")
V1 = os.path.join(DATA, "squad_v1.json")
V2 = os.path.join(DATA, "squad_v2.json")


@pytest.fixture(scope="module")
def golden():
  with open(os.path.join(DATA, "golden_upstream.json"), encoding="utf-8") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def tokenizer():
  return tokenization.FullTokenizer(os.path.join(DATA, "vocab.txt"),
                                    do_lower_case=True)


def features_of(path, is_training, version_2, tokenizer, golden):
  examples, _ = squad_data.read_squad_examples(path, is_training, version_2)
  return examples, list(squad_data.convert_examples_to_features(
      examples, tokenizer, golden["max_seq_length"], golden["doc_stride"],
      golden["max_query_length"], is_training))


def example_dict(example):
  return {"qas_id": example.qas_id, "doc_tokens": example.doc_tokens,
          "orig_answer_text": example.orig_answer_text,
          "start_position": example.start_position,
          "end_position": example.end_position,
          "is_impossible": example.is_impossible}


def compact(feature):
  """A feature in the golden file's layout."""
  positions = sorted(feature.token_to_orig_map)
  return {"unique_id": feature.unique_id,
          "example_index": feature.example_index,
          "doc_span_index": feature.doc_span_index,
          "tokens": " ".join(feature.tokens), "doc_offset": positions[0],
          "token_to_orig": [feature.token_to_orig_map[p] for p in positions],
          "max_context": "".join(
              "1" if feature.token_is_max_context[p] else "0"
              for p in positions),
          "input_ids": feature.input_ids,
          "input_mask": "".join(map(str, feature.input_mask)),
          "segment_ids": "".join(map(str, feature.segment_ids))}


# ------------------------------------------------------------------ reading


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("split", ["train", "predict"])
def test_examples_equal_upstream(golden, version, split):
  path = V1 if version == "v1" else V2
  examples, skipped = squad_data.read_squad_examples(
      path, split == "train", version == "v2")
  assert skipped == 0
  assert [example_dict(e) for e in examples] == golden[
      "%s_examples_%s" % (version, split)]


def test_words_split_on_upstream_whitespace_only():
  words, offsets = squad_data.split_words(
      "a\u3000b  c\u202fd\te\u00a0f\ng")
  # U+3000 and U+00A0 are not upstream's whitespace; U+202F is.
  assert words == ["a\u3000b", "c", "d", "e\u00a0f", "g"]
  assert offsets == [0, 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 4]


# ----------------------------------------------------------------- features


def test_features_equal_upstream(golden, tokenizer):
  _, features = features_of(V2, False, True, tokenizer, golden)
  assert [compact(f) for f in features] == golden["v2_features"]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_training_positions_equal_upstream(golden, tokenizer, version):
  path = V1 if version == "v1" else V2
  _, features = features_of(path, True, version == "v2", tokenizer, golden)
  assert [[f.unique_id, f.start_position, f.end_position, f.is_impossible]
          for f in features] == golden["%s_train_positions" % version]
  if version == "v2":  # training windows are the prediction windows
    assert [compact(f) for f in features] == golden["v2_features"]


def test_the_file_exercises_the_edge_cases(golden, tokenizer):
  """The golden covers what it is meant to: several windows, a query cut to
  max_query_length, answers on a window's first and last context token,
  answers outside a window, impossible questions, tightened answers."""
  examples, features = features_of(V2, True, True, tokenizer, golden)
  seq = golden["max_seq_length"]
  windows = {}
  for f in features:
    windows.setdefault(f.example_index, []).append(f)
  assert max(len(w) for w in windows.values()) >= 5
  assert any(len(f.tokens) - 3 - len(f.token_to_orig_map) ==
             golden["max_query_length"] for f in features)
  first = [f for f in features if f.start_position and
           f.start_position == min(f.token_to_orig_map)]
  last = [f for f in features if f.end_position and
          f.end_position == max(f.token_to_orig_map)]
  assert first and last
  assert any(f.start_position == 0 and not examples[
      f.example_index].is_impossible for f in features)
  assert sum(e.is_impossible for e in examples) == 5
  assert all(f.start_position == f.end_position == 0 for f in features
             if f.is_impossible)
  assert all(len(f.input_ids) == seq for f in features)
  # "35.9" and "1923" sit in words with punctuation or are tightened within
  # them; "Japan" stays the whole word "Japanese".
  by_id = {e.qas_id: i for i, e in enumerate(examples)}
  japan = [f for f in windows[by_id["t2"]] if f.start_position]
  assert " ".join(japan[0].tokens[japan[0].start_position:
                                  japan[0].end_position + 1]).replace(
                                      " ##", "") == "japanese"
  cold = [f for f in windows[by_id["w6"]] if f.start_position][0]
  assert cold.tokens[cold.start_position:cold.end_position + 1][-1] == (
      "degrees")


def test_unique_ids_count_from_upstream_base(golden, tokenizer):
  _, features = features_of(V1, False, False, tokenizer, golden)
  assert [f.unique_id for f in features] == list(
      range(1000000000, 1000000000 + len(features)))


# -------------------------------------------------------------- predictions


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_predictions_equal_upstream(golden, tokenizer, version):
  path = V1 if version == "v1" else V2
  examples, features = features_of(path, False, version == "v2", tokenizer,
                                   golden)
  results = [squad_predictions.RawResult(**r)
             for r in golden[version + "_raw_results"]]
  for expected in golden[version + "_predictions"]:
    predictions, nbest, null_odds = squad_predictions.compute_predictions(
        examples, features, results, expected["n_best_size"],
        expected["max_answer_length"], True, version == "v2",
        expected["threshold"])
    assert dict(predictions) == expected["predictions"]
    # The same arithmetic in the same order: equal to the last bit.
    assert json.loads(json.dumps(nbest)) == expected["nbest"]
    assert list(nbest) == list(expected["nbest"])
    if version == "v2":
      assert dict(null_odds) == expected["null_odds"]
    else:
      assert not null_odds


def gold_logits(features, seq):
  """Logits peaking at each feature's training positions."""
  results = []
  for f in features:
    start = [0.0] * seq
    end = [0.0] * seq
    start[f.start_position] = 10.0
    end[f.end_position] = 10.0
    results.append(squad_predictions.RawResult(f.unique_id, start, end))
  return results


# Answers upstream's reading cannot give back: U+3000 is not its whitespace,
# so "Tokyo\u3000(東京)" is one word whose basic-tokenized text does not
# line up with it (the whole word is the answer), and "Japan" is part of the
# word "Japanese".
UNRECOVERABLE = {"t1": "Tokyo\u3000(東京)", "t2": "Japanese",
                 "t6": "Tokyo\u3000(東京)"}


def without_questions(dataset, ids):
  return [{"paragraphs": [
      {"context": p["context"],
       "qas": [q for q in p["qas"] if q["id"] not in ids]}
      for p in article["paragraphs"]]} for article in dataset]


@pytest.mark.parametrize("path,version_2", [(V1, False), (V2, True)])
def test_gold_logits_give_full_marks(golden, tokenizer, path, version_2):
  examples, features = features_of(path, True, version_2, tokenizer, golden)
  predictions, _, null_odds = squad_predictions.compute_predictions(
      examples, features, gold_logits(features, golden["max_seq_length"]),
      20, 30, True, version_2)
  for qid, text in UNRECOVERABLE.items():
    assert predictions.pop(qid) == text
  dataset = without_questions(squad_data.load_squad_json(path),
                              UNRECOVERABLE)
  if version_2:
    result = squad_evaluation.evaluate_v2(dataset, predictions, null_odds)
    assert result["exact"] == result["f1"] == 100.0
    assert result["NoAns_total"] == 5
  else:
    result = squad_evaluation.evaluate_v1(dataset, predictions)
    assert result == {"exact_match": 100.0, "f1": 100.0}
  # The final-text alignment gives the original characters back (case, the
  # U+2212 minus); words are joined by a space, so the U+202F between "37"
  # and "million" becomes one, as upstream's (the evaluation's whitespace
  # split makes them equal).
  assert predictions["w7"] == "into the old barn behind the church"
  assert predictions["w6"] == "\u221221 degrees"
  assert predictions["t3"] == "37 million"


def test_null_answer_switches_exactly_at_the_threshold(golden, tokenizer):
  examples, features = features_of(V2, False, True, tokenizer, golden)
  index = [e.qas_id for e in examples].index("w1")
  mine = [f for f in features if f.example_index == index]
  results = []
  for f in mine:
    start = [0.0] * golden["max_seq_length"]
    end = [0.0] * golden["max_seq_length"]
    start[0], end[0] = 2.0, 1.5      # null score 3.5 in every window
    span = min(f.token_to_orig_map)
    if f.doc_span_index == 0:
      start[span + 1], end[span + 2] = 1.25, 1.0   # best non-null 2.25
    results.append(squad_predictions.RawResult(f.unique_id, start, end))
  def answer(threshold):
    predictions, _, odds = squad_predictions.compute_predictions(
        [examples[index]], [_reindex(f) for f in mine], results, 20, 30,
        True, True, threshold)
    return predictions["w1"], odds["w1"]
  # tokens span+1..span+2 of window 0 are "weather in".
  assert answer(1.25) == ("weather in", 1.25)      # 1.25 > 1.25 is false
  assert answer(1.2499) == ("", 1.25)
  assert answer(1.3)[0] == "weather in"


def _reindex(feature):
  feature.example_index = 0
  return feature


def test_no_qualifying_span_under_v2_answers_null(golden, tokenizer):
  """Upstream fails on this (only the null answer in the n-best)."""
  examples, features = features_of(V2, False, True, tokenizer, golden)
  mine = [_reindex(f) for f in features if f.example_index == 0]
  results = [squad_predictions.RawResult(
      f.unique_id, [5.0] + [0.0] * 63, [5.0] + [0.0] * 63) for f in mine]
  predictions, nbest, odds = squad_predictions.compute_predictions(
      [examples[0]], mine, results, 1, 30, True, True)
  assert predictions["w1"] == ""
  assert odds["w1"] == 10.0
  assert [e["text"] for e in nbest["w1"]] == ["empty", ""]


def test_final_text_maps_back_to_original_characters():
  assert squad_predictions.final_text(
      "steve smith", "Steve Smith's", True) == "Steve Smith"
  assert squad_predictions.final_text("fete", "fête,", True) == "fête"
  # Not found: the original words whole.
  assert squad_predictions.final_text("xyz", "Steve", True) == "Steve"


def test_prediction_files_are_upstreams_layout(tmp_path):
  paths = squad_predictions.write_predictions(
      str(tmp_path), {"q": "a"}, {"q": [{"text": "a"}]}, {"q": -1.5}, True)
  assert [os.path.basename(p) for p in paths] == [
      "predictions.json", "nbest_predictions.json", "null_odds.json"]
  assert (tmp_path / "predictions.json").read_text() == (
      '{\n    "q": "a"\n}\n')
  assert json.loads((tmp_path / "null_odds.json").read_text()) == {
      "q": -1.5}
  assert sorted(os.listdir(tmp_path)) == sorted(
      os.path.basename(p) for p in paths)


# --------------------------------------------------------------- evaluation

# Hand-made gold and predictions. The expected figures are those of the
# official evaluate-v2.0.py logic (transformers' port of it, squad_metrics,
# computed outside this repository) and, for 1.1, by hand.
EVAL_DATA = [{"paragraphs": [{"context": "unused", "qas": [
    {"id": "a", "answers": [{"text": "The Eiffel Tower"}, {"text": "Eiffel"}]},
    {"id": "b", "answers": [{"text": "in 1889"}]},
    {"id": "c", "answers": [{"text": "Gustave Eiffel's company"}]},
    {"id": "d", "answers": []},
    {"id": "e", "answers": []},
    {"id": "f", "answers": [{"text": "three hundred metres"}]},
]}]}]
EVAL_PREDICTIONS = {"a": "eiffel tower!", "b": "1889", "c": "Gustave Eiffel",
                    "d": "", "e": "the tower", "f": ""}
EVAL_NULL_ODDS = {"a": -3.0, "b": -1.0, "c": 0.5, "d": 2.0, "e": -0.5,
                  "f": 1.5}


def test_v1_evaluation_by_hand():
  data = [{"paragraphs": [{"context": "x", "qas": [
      q for q in EVAL_DATA[0]["paragraphs"][0]["qas"] if q["answers"]]}]}]
  result = squad_evaluation.evaluate_v1(data, EVAL_PREDICTIONS)
  # a: exact (articles, case, punctuation); b: F1 2*(1*.5)/1.5 = 2/3;
  # c: "gustave eiffel" vs "gustave eiffels company": 1 of 2 and 1 of 3
  # tokens -> 0.4 ("eiffel's" loses its apostrophe: "eiffels");
  # f: "" -> 0.
  assert result["exact_match"] == pytest.approx(100.0 / 4)
  assert result["f1"] == pytest.approx(100.0 * (1 + 2 / 3 + 0.4 + 0) / 4)


def test_v2_evaluation_equals_the_official_script():
  result = squad_evaluation.evaluate_v2(EVAL_DATA, EVAL_PREDICTIONS,
                                        EVAL_NULL_ODDS)
  expected = {
      "exact": 100.0 * 2 / 6,                      # a, d
      "f1": 100.0 * (1 + 2 / 3 + 0.4 + 1 + 0 + 0) / 6,
      "total": 6,
      "HasAns_exact": 100.0 * 1 / 4, "HasAns_f1": 100.0 * (1 + 2 / 3 + 0.4) / 4,
      "HasAns_total": 4, "NoAns_exact": 50.0, "NoAns_f1": 50.0,
      "NoAns_total": 2,
      # By increasing odds: a(+1) b(+0) e(-1, predicted non-empty) c(+0)
      # f(+0) d(0): best 2 unanswerables + a = 3/6 at a's odds -3.0 ...
      "best_exact": 50.0, "best_exact_thresh": -3.0,
      "best_f1": 100.0 * (2 + 1 + 2 / 3) / 6, "best_f1_thresh": -1.0,
  }
  assert dict(result) == pytest.approx(expected)


def test_v2_no_answer_threshold_overrides_like_the_official_default():
  """Odds above na_prob_thresh (1.0) count as answering "": f's 1.5 turns
  its "" into a scored no-answer... of a question that has an answer."""
  result = squad_evaluation.evaluate_v2(
      EVAL_DATA, dict(EVAL_PREDICTIONS, d="something"), EVAL_NULL_ODDS)
  # d (odds 2.0 > 1.0) scores as "" = right; f (1.5) scores 0 either way.
  assert result["NoAns_exact"] == 50.0
  result = squad_evaluation.evaluate_v2(
      EVAL_DATA, dict(EVAL_PREDICTIONS, d="something"), EVAL_NULL_ODDS,
      na_prob_thresh=5.0)
  assert result["NoAns_exact"] == 0.0


# -------------------------------------------------------------- bad input


def test_malformed_json_names_file_and_position(tmp_path):
  path = tmp_path / "bad.json"
  path.write_text('{"data": [\n  {"paragraphs": [}\n]}\n')
  with pytest.raises(UserError, match=r"bad.json is not valid JSON: [^:]*: "
                     r"line 2 column 19 \(char 29\)$"):
    squad_data.read_squad_examples(str(path), True, False)


def test_v2_file_without_the_flag_is_refused():
  with pytest.raises(UserError, match=r"squad_v2.json is a SQuAD 2.0 file "
                     r"\(question w9 is_impossible\); pass "
                     r"--version_2_with_negative"):
    squad_data.read_squad_examples(V2, False, False)


def test_answer_start_not_matching_is_skipped_and_counted(tmp_path, caplog):
  with open(V1, encoding="utf-8") as f:
    data = json.load(f)
  qas = data["data"][0]["paragraphs"][0]["qas"]
  qas[1]["answers"][0]["answer_start"] += 7   # "1923" -> somewhere else
  qas[2]["answers"][0]["answer_start"] = 10 ** 6   # past the context
  path = tmp_path / "shifted.json"
  path.write_text(json.dumps(data))
  examples, skipped = squad_data.read_squad_examples(str(path), True, False)
  assert skipped == 2
  assert [e.qas_id for e in examples][:3] == ["w1", "w4", "w5"]
  assert "Could not find answer of w2" in caplog.text
  assert "skipped 2 of 23 training question(s)" in caplog.text
  # Predicting reads no answers: nothing is skipped.
  assert squad_data.read_squad_examples(str(path), False, False)[1] == 0


def test_training_question_needs_exactly_one_answer(tmp_path):
  data = {"data": [{"paragraphs": [{"context": "a b", "qas": [
      {"id": "x", "question": "q", "answers": []}]}]}]}
  path = tmp_path / "none.json"
  path.write_text(json.dumps(data))
  with pytest.raises(UserError, match="training question x has 0 answers"):
    squad_data.read_squad_examples(str(path), True, False)


def test_missing_fields_are_named(tmp_path):
  path = tmp_path / "nofield.json"
  path.write_text(json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}))
  with pytest.raises(UserError, match='article 0 paragraph 0 has no '
                     '"context"'):
    squad_data.read_squad_examples(str(path), False, False)
  path.write_text(json.dumps({"version": "1.1"}))
  with pytest.raises(UserError, match='expected a JSON object with a "data"'):
    squad_data.read_squad_examples(str(path), False, False)
