# coding=utf-8
"""Reads corpora where they live, in the formats they come in, as documents.

Both modes of create_pretraining_data read their input here, as lists of
`ShardPiece`s (faithful mode: one piece per whole file).

Where: local paths, or any URL fsspec serves (s3://, gs://, hdfs://, ...,
with the matching fsspec package installed; memory:// and file:// always).

Formats, from the file name unless --input_format says otherwise:
  * text: upstream's format, one sentence per line, a blank line between
    documents;
  * jsonl (`.jsonl`, `.ndjson`): one JSON object per line, one document, its
    text in --text_field;
  * parquet (`.parquet`): one document per row, its text in the column
    --text_field.
A `.gz`, `.bz2`, `.xz` (`.lzma`) or `.zst` suffix is decompressed (text and
jsonl), and a file that ends before its compressed stream does (an
interrupted copy) or is not of that compression is refused, naming it.
Text and JSONL files are UTF-8: a byte that is not is refused naming its
line (common/text_files.py), and a byte-order mark at the start is dropped.
JSONL and Parquet documents are split into sentences (one per upstream line)
by blingfire's segmenter (chosen in docs/benchmarks_data.md: 30x faster than
syntok and pysbd, and 11 of 12 right on hard cases); lines within a document
are segmented one by one.

Splitting a file between shards: a piece [start, end) of a text file owns
the documents after the first blank line at or after `start`, up to the
first blank line at or after `end`; of a JSONL file the lines, of a Parquet
file the row groups, that start in [start, end). Consecutive pieces of a file
thus read each document exactly once. A compressed file is never split.

What a format needs (fsspec, zstandard, pyarrow, blingfire: 2 to 50 MB each)
is imported when a file needs it, so that the processes of data creation
stay small (every forked worker holds what its parent imported).
"""

import collections
import dataclasses
import functools
import json
import os

from bertkit.common import errors
from bertkit.common import file_patterns
from bertkit.common import text_files
from bertkit.data import compressed_files

FORMATS = ("text", "jsonl", "parquet")
DEFAULT_TEXT_FIELD = "text"
# JSON's names of the types a field can hold, for the messages.
_JSON_TYPES = {bool: "true/false", int: "a number", float: "a number",
               list: "an array", dict: "an object"}
# The help of the programs' --input_format and --text_field, which say what
# a `Corpus` holds.
@dataclasses.dataclass(frozen=True)
class Corpus:
  """The text to make records of, as --input_file and its flags give it.

  Attributes:
    input_file: comma-separated files, globs, directories or URLs
      (`expand_inputs`).
    input_format: "auto" (by file name), "text", "jsonl" or "parquet".
    text_field: the JSON field / Parquet column holding a document.
  """
  input_file: str
  input_format: str = "auto"
  text_field: str = DEFAULT_TEXT_FIELD


InputFile = collections.namedtuple("InputFile", ["path", "size", "format"])
InputFile.__doc__ = """One input file: path or URL, size in bytes, format."""


@dataclasses.dataclass(frozen=True)
class ShardPiece:
  """The documents of `path` that begin in bytes [start, end).

  See the module docstring for what "begin" means per format.

  Attributes:
    path: the file's local path or URL.
    start: the first byte of the range.
    end: the byte after the range.
    format: the file's format, one of FORMATS.
  """
  path: str
  start: int
  end: int
  format: str = "text"


def format_of(path, input_format="auto"):
  """The format of `path`: `input_format` unless "auto", else by suffix.

  Raises:
    errors.UserError: `input_format` is not "auto" or one of FORMATS.
  """
  if input_format != "auto":
    if input_format not in FORMATS:
      raise errors.UserError(
          "--input_format=%s is not a known format; expected auto, %s"
          % (input_format, ", ".join(FORMATS)))
    return input_format
  name = path.lower()
  if compressed_files.compression_of(name):
    name = os.path.splitext(name)[0]
  if name.endswith((".jsonl", ".ndjson")):
    return "jsonl"
  if name.endswith(".parquet"):
    return "parquet"
  return "text"


def expand_inputs(input_file, input_format="auto", read_directories=True):
  """Expands --input_file: globs, lists, directories, local or URLs.

  Args:
    input_file: comma-separated files, globs (matches sorted) or
      directories (their non-hidden files, recursively, sorted); local or
      URLs fsspec serves.
    input_format: --input_format ("auto": from each file's name).
    read_directories: whether a directory stands for its files (else it is
      an error).

  Returns:
    The list of `InputFile`s, in order.

  Raises:
    errors.UserError: an item matches nothing, a directory holds no file,
      a URL's fsspec package is missing, or the format is unknown.
  """
  format_of("", input_format)  # Checks the flag even if nothing matches.
  return [InputFile(path, size, format_of(path, input_format))
          for path, size in file_patterns.expand_corpus_files(
              input_file, read_directories=read_directories)]


def check_text_field(files, text_field):
  """Refuses a --text_field that no input file has a use for.

  Args:
    files: the `InputFile`s.
    text_field: the --text_field value.

  Raises:
    errors.UserError: `text_field` is not the default but every file is
      text, whose lines are the documents' sentences themselves.
  """
  if text_field == DEFAULT_TEXT_FIELD or any(
      f.format != "text" for f in files):
    return
  raise errors.UserError(
      "--text_field=%s names a JSON field or Parquet column, but the "
      "--input_file files (%s%s) are plain text; drop --text_field, or set "
      "--input_format=jsonl if they are JSON lines" % (
          text_field, files[0].path, ", ..." if len(files) > 1 else ""))


def expand_corpus(corpus, read_directories=True):
  """`expand_inputs` of a `Corpus`, its --text_field checked against them.

  Raises:
    errors.UserError: as `expand_inputs` and `check_text_field`.
  """
  files = expand_inputs(corpus.input_file, corpus.input_format,
                        read_directories)
  check_text_field(files, corpus.text_field)
  return files


def _line_number(path, offset):
  """1-based number of the line that starts at byte `offset` of `path`."""
  count = 0
  with compressed_files.open_binary(path) as f:
    remaining = offset
    while remaining > 0:
      block = f.read(min(remaining, 1 << 20))
      if not block:
        break
      count += block.count(b"\n")
      remaining -= len(block)
  return count + 1


def _is_blank(raw):
  # Lenient decoding: a bad line is reported by the piece that owns it.
  return not raw.decode("utf-8", "replace").strip()


def _piece_end(piece):
  # Byte offsets of a compressed file's pieces are not those of its lines.
  if compressed_files.is_splittable(piece.path):
    return piece.end
  return float("inf")


def _lines_starting_at(f, start):
  """(offset, raw line) of the lines of binary file `f` from the first line
  that starts at or after byte `start`."""
  offset = start
  if start > 0:
    f.seek(start - 1)
    offset += len(f.readline()) - 1
  for raw in f:
    yield offset, raw
    offset += len(raw)


def _iter_text_lines(piece):
  """(stripped line, bytes) of a text piece; "" ends a document."""
  end = _piece_end(piece)
  line_number_at = functools.partial(_line_number, piece.path)
  with compressed_files.open_binary(piece.path) as f:
    lines = _lines_starting_at(f, piece.start)
    if piece.start > 0:
      # Past the first blank line: documents before it belong to the
      # previous piece.
      for line_start, raw in lines:
        if _is_blank(raw):
          break
      else:
        return
      if line_start >= end:
        return
    for line_start, raw in lines:
      line = text_files.decode_line(raw, piece.path, line_start,
                                    line_number_at).strip()
      if not line and line_start >= end:
        return
      yield line, len(raw)


def segmenter():
  """blingfire's text_to_sentences: text -> its sentences joined by "\\n"."""
  import blingfire  # pylint: disable=g-import-not-at-top
  return blingfire.text_to_sentences


def document_lines(text, split_sentences):
  """The sentences of one document's text, stripped, in order.

  Args:
    text: the document.
    split_sentences: text -> its sentences joined by "\\n" (blingfire's
      `text_to_sentences`).

  Returns:
    The non-empty sentences of each non-empty line of `text`.
  """
  sentences = []
  for paragraph in text.split("\n"):
    if paragraph.strip():
      sentences.extend(s.strip() for s in
                       split_sentences(paragraph).split("\n") if s.strip())
  return sentences


def _jsonl_text(raw, path, line_start, text_field):
  """The text of one JSONL line, or raises a UserError naming the line."""
  try:
    record = json.loads(raw.rstrip("\r\n"))
  except json.JSONDecodeError as e:
    # The line is the whole JSON text: JSON's own line is always 1.
    raise errors.UserError(
        "input file %s line %d is not JSON (%s: column %d); expected one "
        "JSON object per line" % (path, _line_number(path, line_start),
                                  e.msg, e.colno)) from None
  if not isinstance(record, dict) or text_field not in record:
    fields = sorted(record) if isinstance(record, dict) else []
    raise errors.UserError(
        "input file %s line %d has no field %r (its fields: %s); set "
        "--text_field to the field holding the document's text" % (
            path, _line_number(path, line_start), text_field,
            ", ".join(fields) or "none, it is not an object"))
  text = record[text_field]
  if text is None:
    return ""
  if not isinstance(text, str):
    raise errors.UserError(
        "input file %s line %d: field %r holds %s; expected a string (the "
        "document's text)" % (path, _line_number(path, line_start),
                              text_field, _JSON_TYPES[type(text)]))
  return text


def _iter_jsonl_lines(piece, text_field):
  """(sentence, bytes) of a JSONL piece; "" ends each document."""
  split_sentences = segmenter()
  end = _piece_end(piece)
  line_number_at = functools.partial(_line_number, piece.path)
  with compressed_files.open_binary(piece.path) as f:
    for line_start, raw in _lines_starting_at(f, piece.start):
      if line_start >= end:
        return
      if _is_blank(raw):
        yield "", len(raw)
        continue
      text = _jsonl_text(text_files.decode_line(raw, piece.path, line_start,
                                                line_number_at),
                         piece.path, line_start, text_field)
      for sentence in document_lines(text, split_sentences):
        yield sentence, 0
      yield "", len(raw)


def _row_group_starts(metadata):
  """The byte offset where each row group of a Parquet file begins."""
  starts = []
  for i in range(metadata.num_row_groups):
    row_group = metadata.row_group(i)
    offsets = []
    for c in range(row_group.num_columns):
      column = row_group.column(c)
      offsets.append(column.data_page_offset)
      if column.has_dictionary_page and column.dictionary_page_offset:
        offsets.append(column.dictionary_page_offset)
    starts.append(min(offsets))
  return starts


def _parquet_texts(path, text_field, in_piece=None):
  """The text of each row of a Parquet file (None as ""), in order.

  Args:
    path: the file's local path or URL.
    text_field: the column holding the text.
    in_piece: function(row group start byte) -> whether to read that row
      group; None: every row group.
  """
  import pyarrow  # pylint: disable=g-import-not-at-top
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  with compressed_files.open_binary(path) as f:
    try:
      parquet = pq.ParquetFile(f)
    except pyarrow.ArrowException as e:
      raise errors.UserError("input file %s is not a Parquet file (%s)" % (
          path, e)) from None
    names = parquet.schema_arrow.names
    if text_field not in names:
      raise errors.UserError(
          "input file %s has no column %r (its columns: %s); set "
          "--text_field to the column holding the documents' text" % (
              path, text_field, ", ".join(names)))
    groups = [i for i, start in enumerate(_row_group_starts(parquet.metadata))
              if in_piece is None or in_piece(start)]
    if not groups:
      return
    batches = parquet.iter_batches(batch_size=1024, row_groups=groups,
                                   columns=[text_field])
    try:
      for batch in batches:
        for text in batch.column(0).to_pylist():
          if not isinstance(text, (str, type(None))):
            raise errors.UserError(
                "input file %s: column %r holds %s values; expected strings"
                % (path, text_field, type(text).__name__))
          yield text or ""
    except (OSError, pyarrow.ArrowException) as e:
      # Pages that fail to decompress or decode, under an intact footer.
      raise errors.UserError(
          "input file %s is a damaged Parquet file: its column %r cannot be "
          "read (%s); expected the complete, uncorrupted file" % (
              path, text_field, str(e).rstrip("."))) from None


def _iter_parquet_lines(piece, text_field):
  """(sentence, 0) of a Parquet piece's row groups; "" ends a document."""
  split_sentences = segmenter()
  for text in _parquet_texts(piece.path, text_field,
                             lambda start: piece.start <= start < piece.end):
    for sentence in document_lines(text, split_sentences):
      yield sentence, 0
    yield "", 0


def iter_record_texts(input_file, text_field=DEFAULT_TEXT_FIELD):
  """The texts of a file one record at a time, unsplit, in order.

  A record is a line of a text file (blank lines included, as upstream's
  extract_features reads them), a JSON line's --text_field (blank lines are
  no records) or a Parquet row's column --text_field. Texts are stripped.

  Args:
    input_file: an `InputFile`.
    text_field: the JSON field / Parquet column of the text.

  Yields:
    (where, text): `where` names the record for messages ("line N" or
    "row N", 1-based).

  Raises:
    errors.UserError: the input is unreadable or malformed.
  """
  path = input_file.path
  if input_file.format == "parquet":
    for row, text in enumerate(_parquet_texts(path, text_field), 1):
      yield "row %d" % row, text.strip()
    return
  line_number_at = functools.partial(_line_number, path)
  with compressed_files.open_binary(path) as f:
    for number, (line_start, raw) in enumerate(_lines_starting_at(f, 0), 1):
      if input_file.format == "text":
        yield "line %d" % number, text_files.decode_line(
            raw, path, line_start, line_number_at).strip()
      elif not _is_blank(raw):
        text = _jsonl_text(text_files.decode_line(raw, path, line_start,
                                                  line_number_at),
                           path, line_start, text_field)
        yield "line %d" % number, text.strip()


def iter_piece_lines(piece, text_field=DEFAULT_TEXT_FIELD):
  """Yields a piece's documents as upstream's lines.

  Args:
    piece: the `ShardPiece`.
    text_field: the JSON field / Parquet column of the text.

  Yields:
    (stripped sentence, bytes of input it stands for); "" is a document
    boundary.

  Raises:
    errors.UserError: the input is unreadable or malformed (names the file
      and, where there is one, the line).
  """
  if piece.format == "jsonl":
    return _iter_jsonl_lines(piece, text_field)
  if piece.format == "parquet":
    return _iter_parquet_lines(piece, text_field)
  return _iter_text_lines(piece)


def read_documents(pieces, tokenize, report, text_field=DEFAULT_TEXT_FIELD,
                   files_end_documents=True):
  """Reads and tokenizes the documents of `pieces`, in order.

  Each stripped, non-empty line whose tokens are not empty is one segment of
  the current document; an empty line starts a new document.

  Args:
    pieces: `ShardPiece`s, read in order.
    tokenize: text -> list of tokens (in any representation).
    report: called as report(num_bytes, 0) as input is read; the bytes add
      up to the pieces' sizes.
    text_field: the JSON field / Parquet column of JSONL/Parquet pieces.
    files_end_documents: whether each piece ends a document. Upstream (so
      faithful mode) continues a text file's last document into the next
      file when the file lacks a final blank line; sharded mode does not.

  Returns:
    The non-empty documents: lists of segments (lists of tokens).
  """
  documents = [[]]
  for piece in pieces:
    if files_end_documents:
      documents.append([])
    # Progress counts the piece's own bytes: the lines skipped at its start
    # are added at its end, those read past its end (to finish its last
    # document) are not, so that progress adds up to the input size.
    unreported = piece.end - piece.start
    for line, num_bytes in iter_piece_lines(piece, text_field):
      if not line:
        documents.append([])
      else:
        tokens = tokenize(line)
        if tokens:
          documents[-1].append(tokens)
      num_bytes = min(num_bytes, unreported)
      unreported -= num_bytes
      if num_bytes:
        report(num_bytes, 0)
    if unreported:
      report(unreported, 0)
  return [d for d in documents if d]
