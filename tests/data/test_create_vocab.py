# coding=utf-8
"""Tests of create_vocab.py: its `run` in this process, and a few launches
of the program (flags, printed summary, exit code).
"""

import os

import pytest

import create_vocab
from bertkit.common import errors
import tokenization
from conftest import REPO_ROOT, partial_files, run_program

CORPUS = os.path.join(REPO_ROOT, "sample_data", "corpus.txt")
GOOGLE_RESERVED = (["[PAD]"] + ["[unused%d]" % i for i in range(99)] +
                   ["[UNK]", "[CLS]", "[SEP]", "[MASK]"])
SMALL_RESERVED = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Sentences that are not in the corpus but use its everyday vocabulary.
NEW_SENTENCES = [
    "The baker walked along the river before breakfast, humming an old tune.",
    "On a cold Tuesday in March, 42 children visited the library and the "
    "market.",
    "Volunteers repaired the bridge, the fence and three bicycles last "
    "summer!",
]


def _create_vocab(tmp_path, *flags, input_file=CORPUS, name="vocab.txt"):
  """Launches the program."""
  output = tmp_path / name
  result = run_program(["create_vocab.py", "--input_file=%s" % input_file,
                        "--output_file=%s" % output] + list(flags))
  return result, str(output)


def _run(tmp_path, input_file=CORPUS, **options):
  """create_vocab.run in this process; returns (summary line, output)."""
  output = str(tmp_path / "vocab.txt")
  return create_vocab.run(create_vocab.VocabOptions(
      input_file=input_file, output_file=output, **options)), output


def _assert_refused(tmp_path, *fragments, **options):
  """In process: a one-line UserError, no output left behind."""
  with pytest.raises(errors.UserError) as raised:
    _run(tmp_path, **options)
  message = str(raised.value)
  assert "\n" not in message
  for fragment in fragments:
    assert fragment in message, message
  assert not os.path.exists(tmp_path / "vocab.txt")
  assert not partial_files(tmp_path)
  return message


def _read_lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().split("\n")[:-1]


def _corpus_sentences():
  with open(CORPUS, encoding="utf-8") as f:
    return [line for line in f.read().split("\n") if line.strip()]


def _assert_user_error(result, tmp_path, *fragments):
  """Exit code 2, a single `error:` line at the end, no output left behind."""
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  lines = [line for line in result.stderr.splitlines() if line.strip()]
  error_lines = [line for line in lines if line.startswith("error:")]
  assert len(error_lines) == 1, result.stderr
  assert lines[-1] == error_lines[0]
  for fragment in fragments:
    assert fragment in error_lines[0], error_lines[0]
  assert not os.path.exists(tmp_path / "vocab.txt")
  assert not partial_files(tmp_path)
  return error_lines[0]


@pytest.fixture(scope="module")
def uncased_vocab(tmp_path_factory):
  return _run(tmp_path_factory.mktemp("uncased"), vocab_size=3000)


# ---------------------------------------------------------------------------
# Google layout (vocab_size >= 1000), uncased.


def test_reports_one_line_summary_and_leaves_no_partial_file(uncased_vocab):
  summary, path = uncased_vocab
  assert summary == (
      "Wrote 3000 tokens (104 reserved, 2896 learned) to %s" % path)
  assert os.listdir(os.path.dirname(path)) == ["vocab.txt"]


def test_google_layout_special_ids(uncased_vocab):
  vocab = tokenization.load_vocab(uncased_vocab[1])
  assert list(vocab)[:104] == GOOGLE_RESERVED
  assert (vocab["[PAD]"], vocab["[unused0]"], vocab["[unused98]"]) == (0, 1, 99)
  assert [vocab[t] for t in ("[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [
      100, 101, 102, 103]


def test_vocab_has_no_duplicates_and_fits(uncased_vocab):
  lines = _read_lines(uncased_vocab[1])
  assert len(lines) == 3000
  assert len(set(lines)) == len(lines)
  assert all(line and line == line.strip() for line in lines)
  tokenization.check_vocab_fits_config(uncased_vocab[1], 3000)
  learned = lines[104:]
  assert all(t == t.lower() for t in learned)
  assert any(t.startswith("##") for t in learned)
  for word in ("the", "train", "garden", "river", "."):
    assert word in learned


def test_round_trip_through_full_tokenizer(uncased_vocab):
  tokenizer = tokenization.FullTokenizer(uncased_vocab[1], do_lower_case=True)
  texts = _corpus_sentences()[::10] + NEW_SENTENCES
  num_tokens = 0
  num_unk = 0
  for text in texts:
    tokens = tokenizer.tokenize(text)
    ids = tokenizer.convert_tokens_to_ids(tokens)
    assert tokenizer.convert_ids_to_tokens(ids) == tokens
    assert all(0 <= i < 3000 for i in ids)
    # The pieces spell the basic tokens back exactly.
    joined = " ".join(tokens).replace(" ##", "")
    assert joined.split() == tokenizer.basic_tokenizer.tokenize(text)
    num_tokens += len(tokens)
    num_unk += tokens.count("[UNK]")
  assert num_tokens > 1000
  assert num_unk == 0
  assert tokenizer.tokenize("The garden was quiet.") == [
      "the", "garden", "was", "quiet", "."]


# ---------------------------------------------------------------------------
# Small layout (vocab_size < 1000), cased, several input files.


@pytest.mark.slow
def test_small_cased_vocab_from_glob_and_comma_list(tmp_path):
  sentences = _corpus_sentences()
  half = len(sentences) // 2
  parts = tmp_path / "parts"
  parts.mkdir()
  (parts / "a.txt").write_text("\n".join(sentences[:half]) + "\n",
                               encoding="utf-8")
  (parts / "b.txt").write_text("\n".join(sentences[half:]) + "\n",
                               encoding="utf-8")
  other = tmp_path / "other.txt"
  other.write_text("Zebra quagga xylophone.\n" * 3, encoding="utf-8")
  out = tmp_path / "out"  # Created by the program.
  result, path = _create_vocab(
      out, "--vocab_size=500", "--nodo_lower_case",
      input_file="%s,%s" % (parts / "*.txt", other))
  assert result.returncode == 0, result.stderr
  assert result.stdout.splitlines() == [
      "Wrote 500 tokens (5 reserved, 495 learned) to %s" % path]
  lines = _read_lines(path)
  assert lines[:5] == SMALL_RESERVED
  assert "[unused0]" not in lines
  assert len(lines) == len(set(lines)) == 500
  assert "The" in lines and "Z" in lines and "Q" in lines
  tokenizer = tokenization.FullTokenizer(path, do_lower_case=False)
  tokens = tokenizer.tokenize("The Zebra and the garden.")
  assert "[UNK]" not in tokens
  assert tokens[0] == "The"


def test_small_vocab_below_corpus_alphabet_is_an_error(tmp_path):
  message = _assert_refused(tmp_path, "--vocab_size=40", "alphabet",
                            "--limit_alphabet", vocab_size=40)
  assert "room for 35 learned tokens" in message


# ---------------------------------------------------------------------------
# Bad input.


def test_glob_matching_nothing(tmp_path):
  pattern = str(tmp_path / "missing" / "*.txt")
  message = _assert_refused(tmp_path, pattern, "matches no file",
                            input_file="%s,%s" % (CORPUS, pattern))
  assert message.startswith("--input_file pattern")


@pytest.mark.parametrize("data", [b"", b"\n\n   \n\t\n"])
def test_input_without_text(tmp_path, data):
  empty = tmp_path / "empty.txt"
  empty.write_bytes(data)
  _assert_refused(tmp_path, str(empty), "holds no text",
                  input_file=str(empty))


def test_non_utf8_input_names_file_and_offset(tmp_path):
  bad = tmp_path / "latin1.txt"
  bad.write_bytes(b"A fine day.\nA caf\xe9 on the corner.\n")
  _assert_refused(tmp_path, str(bad), "not valid UTF-8", "0xe9",
                  "byte offset 17", input_file=str(bad))


def test_non_utf8_offset_is_exact_past_the_first_read_chunk(tmp_path):
  # A valid 3-byte character straddles the 1 MiB read boundary, then a
  # truncated sequence follows: the reported offset must count every byte.
  head = (b"word " * 300000)[:(1 << 20) - 1]
  data = head + "\u20ac".encode("utf-8") + b" ok \xe2\x82 tail\n"
  bad_offset = data.index(b"\xe2\x82 ")
  bad = tmp_path / "big.txt"
  bad.write_bytes(data)
  _assert_refused(tmp_path, str(bad), "0xe2", "byte offset %d" % bad_offset,
                  input_file=str(bad))


@pytest.mark.parametrize("size", [5, -3])
def test_vocab_size_too_small_for_special_tokens(tmp_path, size):
  _assert_refused(tmp_path, "--vocab_size=%d" % size, "special tokens",
                  vocab_size=size)


@pytest.mark.slow
def test_program_prints_a_bad_flag_as_one_error_line(tmp_path):
  _assert_user_error(_create_vocab(tmp_path, "--vocab_size=-3")[0],
                     tmp_path, "--vocab_size=-3", "special tokens")
