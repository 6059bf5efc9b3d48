# coding=utf-8
"""Tests for tokenization.py: equality with upstream and bad-input errors.

The golden files under tests/fixtures/tokenization/ were produced by running
google-research/bert's tokenization.py (behaviour of commit eedf5716) on the
inputs they contain; see golden_tokens.json's "generator" field.
"""

import json
import os
import unicodedata

import pytest
import tensorflow.compat.v1 as tf

from bertkit.common import errors
import tokenization
from conftest import REPO_ROOT

DATA_DIR = os.path.join(REPO_ROOT, "tests", "fixtures", "tokenization")
VOCAB_FILE = os.path.join(DATA_DIR, "vocab.txt")

# The vocab of upstream's own tokenization_test.py.
SMALL_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa", "un",
               "runn", "##ing", ","]


def _load_json(name):
  with open(os.path.join(DATA_DIR, name), encoding="utf-8") as f:
    return json.load(f)


GOLDEN_CASES = _load_json("golden_tokens.json")["cases"]


def _case_id(case):
  return "%s:%s" % ("lower" if case["do_lower_case"] else "cased",
                    case["text"][:30].encode("unicode_escape").decode("ascii"))


@pytest.fixture(scope="module")
def full_tokenizers():
  return {lower: tokenization.FullTokenizer(VOCAB_FILE, do_lower_case=lower)
          for lower in (True, False)}


def _write(tmp_path, name, data):
  path = tmp_path / name
  path.write_bytes(data)
  return str(path)


# ---------------------------------------------------------------------------
# Golden equality with upstream.


def test_golden_covers_both_casings_and_the_listed_hazards():
  texts = [c["text"] for c in GOLDEN_CASES]
  assert len(GOLDEN_CASES) >= 100
  assert {c["do_lower_case"] for c in GOLDEN_CASES} == {True, False}
  for hazard in ("\u2028", "\u200b", "\ufffd", "\x00", "\t", "\u535a",
                 "\uc548", "\U0001f600", "\u00e9", "\u0005", "\u00a1"):
    assert any(hazard in t for t in texts), repr(hazard)
  assert any(len(t) > 200 and " " not in t for t in texts)


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=_case_id)
def test_full_tokenizer_matches_upstream(case, full_tokenizers):
  tokenizer = full_tokenizers[case["do_lower_case"]]
  tokens = tokenizer.tokenize(case["text"])
  assert tokens == case["tokens"]
  assert tokenizer.convert_tokens_to_ids(tokens) == case["ids"]
  assert tokenizer.convert_ids_to_tokens(case["ids"]) == case["tokens"]


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=_case_id)
def test_basic_tokenizer_matches_upstream(case):
  basic = tokenization.BasicTokenizer(do_lower_case=case["do_lower_case"])
  assert basic.tokenize(case["text"]) == case["basic_tokens"]


def test_golden_vocab_loads_like_upstream():
  vocab = tokenization.load_vocab(VOCAB_FILE)
  with open(VOCAB_FILE, encoding="utf-8") as f:
    lines = f.read().split("\n")[:-1]
  assert list(vocab.items()) == [(t, i) for i, t in enumerate(lines)]


def test_load_vocab_edge_cases_match_upstream():
  """Duplicates keep the last id, blank lines take an id, CRLF and padding are
  stripped, U+2028 does not split a line, a missing final newline is fine."""
  golden = _load_json("golden_vocab_tricky.json")
  vocab = tokenization.load_vocab(os.path.join(DATA_DIR, golden["vocab_file"]))
  assert isinstance(vocab, dict)
  assert [list(item) for item in vocab.items()] == golden["items"]


def _ranges(predicate, limit):
  """Inclusive [start, end] runs of code points (surrogates excluded)."""
  runs = []
  start = None
  for cp in range(limit + 1):
    hit = cp < limit and not 0xD800 <= cp <= 0xDFFF and predicate(cp)
    if hit and start is None:
      start = cp
    elif not hit and start is not None:
      runs.append([start, cp - 1])
      start = None
  return runs


def test_character_classes_match_upstream_everywhere():
  golden = _load_json("golden_char_classes.json")
  if golden["unicode_version"] != unicodedata.unidata_version:
    pytest.skip("golden classes were computed with Unicode %s, this Python "
                "has %s" % (golden["unicode_version"],
                            unicodedata.unidata_version))
  limit = golden["limit"]
  predicates = {
      "whitespace": lambda cp: tokenization._is_whitespace(chr(cp)),
      "control": lambda cp: tokenization._is_control(chr(cp)),
      "punctuation": lambda cp: tokenization._is_punctuation(chr(cp)),
      "chinese": tokenization._is_chinese_char,
  }
  for name, predicate in predicates.items():
    assert _ranges(predicate, limit) == golden[name], name


# ---------------------------------------------------------------------------
# Upstream's own unit tests (tokenization_test.py), restated.


def test_full_tokenizer_upstream_example(tmp_path):
  vocab_file = _write(tmp_path, "vocab.txt",
                      "".join(t + "\n" for t in SMALL_VOCAB).encode("utf-8"))
  tokenizer = tokenization.FullTokenizer(vocab_file)
  tokens = tokenizer.tokenize("UNwant\u00E9d,running")
  assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
  assert tokenizer.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
  assert tokenizer.inv_vocab[4] == "##want"
  assert tokenizer.convert_ids_to_tokens([7, 4, 5]) == ["un", "##want", "##ed"]


def test_chinese():
  assert tokenization.BasicTokenizer().tokenize("ah\u535A\u63A8zz") == [
      "ah", "\u535A", "\u63A8", "zz"]


def test_basic_tokenizer_lower():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=True)
  assert tokenizer.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "hello", "!", "how", "are", "you", "?"]
  assert tokenizer.tokenize("H\u00E9llo") == ["hello"]


def test_basic_tokenizer_no_lower():
  tokenizer = tokenization.BasicTokenizer(do_lower_case=False)
  assert tokenizer.tokenize(" \tHeLLo!how  \n Are yoU?  ") == [
      "HeLLo", "!", "how", "Are", "yoU", "?"]
  assert tokenizer.tokenize("H\u00E9llo") == ["H\u00E9llo"]


def test_wordpiece_tokenizer():
  vocab = {t: i for i, t in enumerate(SMALL_VOCAB)}
  tokenizer = tokenization.WordpieceTokenizer(vocab=vocab)
  assert tokenizer.tokenize("") == []
  assert tokenizer.tokenize("unwanted running") == [
      "un", "##want", "##ed", "runn", "##ing"]
  assert tokenizer.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]


def test_wordpiece_length_limit_and_custom_unk():
  tokenizer = tokenization.WordpieceTokenizer(
      vocab={"a", "##a"}, unk_token="<unk>", max_input_chars_per_word=3)
  assert tokenizer.tokenize("aaa aaaa a") == ["a", "##a", "##a", "<unk>", "a"]
  default = tokenization.WordpieceTokenizer(vocab={"a", "##a"})
  assert default.tokenize("a" * 200) == ["a"] + ["##a"] * 199
  assert default.tokenize("a" * 201) == ["[UNK]"]


def test_convert_tokens_to_ids():
  vocab = {t: i for i, t in enumerate(SMALL_VOCAB)}
  assert tokenization.convert_tokens_to_ids(
      vocab, ["un", "##want", "##ed", "runn", "##ing"]) == [7, 4, 5, 8, 9]
  inv_vocab = {i: t for t, i in vocab.items()}
  assert tokenization.convert_ids_to_tokens(inv_vocab, [7, 4]) == [
      "un", "##want"]


def test_convert_unknown_token_raises_key_error_like_upstream():
  with pytest.raises(KeyError):
    tokenization.convert_tokens_to_ids({"a": 0}, ["a", "b"])


def test_is_whitespace():
  for char in (" ", "\t", "\r", "\n", "\u00A0", "\u3000"):
    assert tokenization._is_whitespace(char), repr(char)
  for char in ("A", "-", "\u2028", "\u200b"):
    assert not tokenization._is_whitespace(char), repr(char)


def test_is_control():
  for char in ("\u0005", "\u200b", "\ufeff", "\u00ad", "\x7f"):
    assert tokenization._is_control(char), repr(char)
  # Private-use and unassigned characters (Co, Cn) are not control.
  for char in ("A", " ", "\t", "\r", "\n", "\ue000", "\U000e0fff"):
    assert not tokenization._is_control(char), repr(char)


def test_is_punctuation():
  for char in ("-", "$", "`", ".", "\u00bf", "\u3002", "\u2014"):
    assert tokenization._is_punctuation(char), repr(char)
  for char in ("A", " ", "7", "\u20ac", "\u00b0"):
    assert not tokenization._is_punctuation(char), repr(char)


def test_is_chinese_char_block_edges():
  for cp in (0x4E00, 0x9FFF, 0x3400, 0x4DBF, 0x20000, 0x2CEAF, 0xF900,
             0x2FA1F):
    assert tokenization._is_chinese_char(cp), hex(cp)
  for cp in (0x4DFF, 0x33FF, 0xAC00, 0x3042, 0x30AB, 0x2CEB0, 0x2F7FF):
    assert not tokenization._is_chinese_char(cp), hex(cp)


# ---------------------------------------------------------------------------
# Unicode helpers and the checkpoint-casing check.


def test_convert_to_unicode_and_printable_text():
  assert tokenization.convert_to_unicode("caf\u00e9") == "caf\u00e9"
  # Invalid UTF-8 in text (not in vocab files) is dropped, as upstream does.
  assert tokenization.convert_to_unicode(b"caf\xc3\xa9\xff!") == "caf\u00e9!"
  assert tokenization.printable_text(b"ok\xff") == "ok"
  with pytest.raises(ValueError):
    tokenization.convert_to_unicode(3)
  assert tokenization.BasicTokenizer().tokenize(b"Caf\xc3\xa9 \xff ok") == [
      "cafe", "ok"]


def test_whitespace_tokenize():
  assert tokenization.whitespace_tokenize("  a\tb\u2028c \n") == [
      "a", "b", "c"]
  assert tokenization.whitespace_tokenize(" \n ") == []


@pytest.mark.parametrize("lower,path", [
    (False, "/models/uncased_L-12_H-768_A-12/bert_model.ckpt"),
    (False, "gs://b/chinese_L-12_H-768_A-12/bert_model.ckpt-0"),
    (True, "cased_L-24_H-1024_A-16/bert_model.ckpt"),
    (True, "/x/multi_cased_L-12_H-768_A-12/bert_model.ckpt"),
])
def test_validate_case_rejects_mismatched_casing(lower, path):
  with pytest.raises(ValueError, match="--do_lower_case=%s" % (not lower)):
    tokenization.validate_case_matches_checkpoint(lower, path)


@pytest.mark.parametrize("lower,path", [
    (True, "/models/uncased_L-12_H-768_A-12/bert_model.ckpt"),
    (False, "/models/cased_L-12_H-768_A-12/bert_model.ckpt"),
    (False, "/models/uncased_L-4_H-256_A-4/bert_model.ckpt"),
    (True, "/models/cased_L-12_H-768_A-12/model.ckpt-100"),
    (False, ""),
    (True, None),
])
def test_validate_case_accepts_matching_or_unknown(lower, path):
  tokenization.validate_case_matches_checkpoint(lower, path)


# ---------------------------------------------------------------------------
# Bad input.


def test_load_vocab_missing_file(tmp_path):
  path = str(tmp_path / "nope.txt")
  with pytest.raises(errors.UserError, match="nope.txt not found"):
    tokenization.load_vocab(path)
  with pytest.raises(errors.UserError, match="nope.txt"):
    tokenization.FullTokenizer(path)


def test_load_vocab_directory(tmp_path):
  with pytest.raises(errors.UserError, match="cannot read vocab file"):
    tokenization.load_vocab(str(tmp_path))


@pytest.mark.parametrize("data", [b"", b"\n", b"  \n\t\n\r\n"])
def test_load_vocab_empty(tmp_path, data):
  path = _write(tmp_path, "empty.txt", data)
  with pytest.raises(errors.UserError, match="empty.txt holds no tokens"):
    tokenization.load_vocab(path)


def test_load_vocab_not_utf8_names_file_and_offset(tmp_path):
  path = _write(tmp_path, "latin1.txt", b"[PAD]\n[UNK]\ncaf\xe9\n")
  with pytest.raises(errors.UserError) as info:
    tokenization.load_vocab(path)
  message = str(info.value)
  assert "latin1.txt" in message
  assert "byte offset 15" in message
  assert "0xe9" in message
  assert "\n" not in message


def test_load_vocab_through_gfile_url():
  path = "ram://test_tokenization/vocab.txt"
  with tf.io.gfile.GFile(path, "w") as f:
    f.write("[UNK]\nhello\n")
  assert tokenization.load_vocab(path) == {"[UNK]": 0, "hello": 1}


def test_check_vocab_fits_config(tmp_path):
  vocab = tokenization.load_vocab(VOCAB_FILE)
  size = len(vocab)
  tokenization.check_vocab_fits_config(VOCAB_FILE, size)
  tokenization.check_vocab_fits_config(vocab, size + 100)
  with pytest.raises(errors.UserError) as info:
    tokenization.check_vocab_fits_config(VOCAB_FILE, size - 1)
  message = str(info.value)
  assert VOCAB_FILE in message
  assert "%d tokens" % size in message
  assert "vocab_size is %d" % (size - 1) in message
  assert "NaN" in message
  with pytest.raises(errors.UserError, match="has 3 tokens.*vocab_size is 2"):
    tokenization.check_vocab_fits_config({"a": 0, "b": 1, "c": 2}, 2)


def test_check_vocab_fits_config_counts_ids_not_distinct_tokens(tmp_path):
  # A repeated token still uses up a line number, so ids reach 3.
  path = _write(tmp_path, "dup.txt", b"a\nb\na\nc\n")
  with pytest.raises(errors.UserError, match="has 4 tokens"):
    tokenization.check_vocab_fits_config(path, 3)
  with pytest.raises(errors.UserError, match="dup.txt"):
    tokenization.check_vocab_fits_config(str(tmp_path / "dup.txt"), 3)
