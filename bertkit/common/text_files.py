"""The text files a user gives the programs, decoded as UTF-8 in one place.

Every reader of user text (the tasks' data files, corpora, vocab files,
flagfiles) decodes it here, so that a file holding a byte that is not UTF-8
(a Latin-1 or cp1252 file) is refused in one line naming the file, the line,
the byte and the encoding expected, whichever program reads it, e.g.:

  data/train.txt line 3: not valid UTF-8 (byte 0xe9 at column 4, byte
  offset 27); save the file as UTF-8

Lines are counted from 1 and end at "\\n", columns count the
characters before the byte plus one, and offsets count bytes from the start
of the file (of its decompressed text for a compressed corpus). A UTF-8
byte-order mark at the start of a file, which Windows editors write, is
dropped; vocab files and flagfiles keep it (`keep_bom`), as upstream's
tokenization and absl read them.

Readers of local files open them with `open_text`; readers of URLs read the
bytes where they are (tf.io.gfile, imported only then: atomic_io.open_file)
and `decode` them; corpora, opened by data.corpus_input (fsspec, compressed
files), are decoded a line at a time by `decode_line`.
"""

import codecs
import contextlib

from bertkit.common import errors

BOM = codecs.BOM_UTF8


def _not_utf8(name, line_number, before, byte, offset):
  """The UserError for a byte that is not UTF-8.

  Args:
    name: the file as messages name it (its path, `--flagfile=x`, ...).
    line_number: the 1-based number of the byte's line.
    before: the bytes of its line before it (valid UTF-8).
    byte: the byte's value.
    offset: the byte's offset in the file.
  """
  return errors.UserError(
      "%s line %d: not valid UTF-8 (byte 0x%02x at column %d, byte offset "
      "%d); save the file as UTF-8" % (
          name, line_number, byte, len(before.decode("utf-8")) + 1, offset))


def decode(data, name, keep_bom=False):
  """The text of a whole file's bytes.

  Args:
    data: the file's bytes.
    name: the file as messages name it (its path, `--flagfile=x`, ...).
    keep_bom: keep a leading byte-order mark as the text's first character
      instead of dropping it.

  Returns:
    The text, as `str`.

  Raises:
    errors.UserError: a byte is not UTF-8; names the first one.
  """
  start = 0 if keep_bom or not data.startswith(BOM) else len(BOM)
  try:
    return data[start:].decode("utf-8")
  except UnicodeDecodeError as e:
    offset = start + e.start
    line_start = max(start, data.rfind(b"\n", 0, offset) + 1)
    raise _not_utf8(name, data.count(b"\n", 0, offset) + 1,
                    data[line_start:offset], data[offset], offset) from None


def decode_line(raw, name, offset, line_number_at):
  """The text of one line of a file read as lines of bytes.

  For readers that need each line's byte offset (corpus_input); a
  byte-order mark at offset 0 is dropped.

  Args:
    raw: the line's bytes.
    name: the file as messages name it.
    offset: the offset of the line's first byte in the file.
    line_number_at: function(offset of a line) -> its 1-based number,
      called only for the message (it may read the file again).

  Returns:
    The line, as `str`.

  Raises:
    errors.UserError: a byte is not UTF-8; names the first one.
  """
  if offset == 0 and raw.startswith(BOM):
    raw, offset = raw[len(BOM):], len(BOM)
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise _not_utf8(name, line_number_at(offset), raw[:e.start],
                    raw[e.start], offset + e.start) from None


@contextlib.contextmanager
def open_text(path, name=None, newline=None, keep_bom=False):
  """Opens a local text file for reading as UTF-8.

  `with open_text(path) as f:` reads like `open(path, encoding="utf-8")`,
  with a leading byte-order mark dropped; a byte that is not UTF-8, met as
  the block reads, raises the UserError naming it.

  Args:
    path: the file's path.
    name: the file as messages name it; default `path`.
    newline: as `open`'s ("" for the csv module).
    keep_bom: keep a leading byte-order mark as the text's first character.

  Yields:
    The text stream.

  Raises:
    errors.UserError: a byte is not UTF-8; names the first one.
    OSError: the file cannot be opened (as `open`).
  """
  with open(path, encoding="utf-8" if keep_bom else "utf-8-sig",
            newline=newline) as stream:
    try:
      yield stream
    except UnicodeDecodeError:
      # The stream decodes in chunks: the file, read again, names the line.
      with open(path, "rb") as f:
        decode(f.read(), name or path, keep_bom)
      raise  # The file is UTF-8: the block decoded other bytes.
