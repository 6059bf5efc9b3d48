"""Text a user gives is UTF-8, or one line says where it is not.

bertkit/common/text_files.py decodes for every reader of user text; the
readers' own tests (a Latin-1 byte fed to each) are in
tests/programs/test_bad_inputs.py.
"""

import pytest

from bertkit.common import errors
from bertkit.common import text_files

BOM = b"\xef\xbb\xbf"
# A NER file saved as Latin-1: the third line's "e acute" is the byte 0xe9.
LATIN1 = b"EU B-ORG\nrejects O\nCaf\xe9 O\n"
LATIN1_MESSAGE = ("%s line 3: not valid UTF-8 (byte 0xe9 at column 4, byte "
                  "offset 22); save the file as UTF-8")


def refusal(function, *args, **kwargs):
  """The message of the UserError `function(*args, **kwargs)` raises."""
  with pytest.raises(errors.UserError) as raised:
    function(*args, **kwargs)
  return str(raised.value)


def read_through(path, **kwargs):
  with text_files.open_text(path, **kwargs) as f:
    return f.read()


def test_a_latin1_byte_names_the_file_line_column_and_offset(tmp_path):
  path = tmp_path / "train.txt"
  path.write_bytes(LATIN1)
  assert refusal(text_files.decode, LATIN1, "train.txt") == (
      LATIN1_MESSAGE % "train.txt")
  assert refusal(read_through, str(path)) == LATIN1_MESSAGE % path
  assert refusal(read_through, str(path), name="--flagfile=x") == (
      LATIN1_MESSAGE % "--flagfile=x")
  third = LATIN1.split(b"\n")[2]
  assert refusal(text_files.decode_line, third, "train.txt", 19,
                 lambda offset: {19: 3}[offset]) == (
                     LATIN1_MESSAGE % "train.txt")


def test_the_column_counts_characters_and_the_offset_bytes():
  # "ete " with two e acute: 4 characters, 6 bytes, then a cp1252 quote.
  data = b"ok\n\xc3\xa9t\xc3\xa9 \x92quoted\x92\n"
  assert refusal(text_files.decode, data, "a.txt") == (
      "a.txt line 2: not valid UTF-8 (byte 0x92 at column 5, byte offset "
      "9); save the file as UTF-8")


def test_a_sequence_cut_short_is_named_by_its_first_byte(tmp_path):
  path = tmp_path / "cut.txt"
  path.write_bytes(b"fine\ncaf\xc3")
  expected = ("%s line 2: not valid UTF-8 (byte 0xc3 at column 4, byte "
              "offset 8); save the file as UTF-8" % path)
  assert refusal(text_files.decode, path.read_bytes(), str(path)) == expected
  assert refusal(read_through, str(path)) == expected


def test_a_byte_past_the_first_chunk_read_is_named_exactly(tmp_path):
  path = tmp_path / "big.txt"
  head = b"".join(b"line %d\n" % i for i in range(20000))
  path.write_bytes(head + b"caf\xe9\nmore\n")
  assert refusal(read_through, str(path)) == (
      "%s line 20001: not valid UTF-8 (byte 0xe9 at column 4, byte offset "
      "%d); save the file as UTF-8" % (path, len(head) + 3))


def test_a_byte_order_mark_is_dropped_at_the_start_only(tmp_path):
  data = BOM + b"a\n" + BOM + b"b\n"
  assert text_files.decode(data, "x") == "a\n\ufeffb\n"
  assert text_files.decode(data, "x", keep_bom=True) == "\ufeffa\n\ufeffb\n"
  path = tmp_path / "bom.txt"
  path.write_bytes(data)
  assert read_through(str(path)) == "a\n\ufeffb\n"
  assert read_through(str(path), keep_bom=True) == "\ufeffa\n\ufeffb\n"
  assert text_files.decode_line(BOM + b"a\n", "x", 0, None) == "a\n"
  assert text_files.decode_line(BOM + b"b\n", "x", 5, None) == "\ufeffb\n"


def test_offsets_count_the_byte_order_mark_and_columns_do_not(tmp_path):
  expected = ("x line 1: not valid UTF-8 (byte 0xe9 at column 4, byte offset "
              "6); save the file as UTF-8")
  assert refusal(text_files.decode, BOM + b"caf\xe9\n", "x") == expected
  assert refusal(text_files.decode_line, BOM + b"caf\xe9\n", "x", 0,
                 lambda offset: 1) == expected
  path = tmp_path / "bom.txt"
  path.write_bytes(BOM + b"caf\xe9\n")
  assert refusal(read_through, str(path), name="x") == expected


@pytest.mark.parametrize("newline", [None, ""])
def test_open_text_reads_lines_as_open_does(tmp_path, newline):
  path = tmp_path / "lines.txt"
  path.write_bytes("a\r\nb\rc\u2028d\x0ce\n".encode("utf-8"))
  with open(path, encoding="utf-8", newline=newline) as f:
    expected = f.readlines()
  with text_files.open_text(str(path), newline=newline) as f:
    assert f.readlines() == expected


def test_another_decoding_error_in_the_block_is_not_the_file_s(tmp_path):
  path = tmp_path / "fine.txt"
  path.write_bytes("caf\u00e9\n".encode("utf-8"))
  with pytest.raises(UnicodeDecodeError):
    with text_files.open_text(str(path)) as f:
      f.read()
      b"\xe9".decode("utf-8")


def test_a_valid_line_counts_no_lines():
  def count_lines(offset):
    raise AssertionError("line %d counted" % offset)

  assert text_files.decode_line("\u00e9t\u00e9\n".encode("utf-8"), "x", 40,
                                count_lines) == "\u00e9t\u00e9\n"
