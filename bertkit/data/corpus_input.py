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
A `.gz`, `.bz2`, `.xz` or `.zst` suffix is decompressed (text and jsonl).
JSONL and Parquet documents are split into sentences (one per upstream line)
by blingfire's segmenter (chosen in docs/benchmarks_data.md: 30x faster than
syntok and pysbd, and 11 of 12 right on hard cases); lines within a document
are segmented one by one.

Splitting a file between shards: a piece [start, end) of a text file owns
the documents after the first blank line at or after `start`, up to the
first blank line at or after `end`; of a JSONL file the lines, of a Parquet
file the row groups, that start in [start, end). Consecutive pieces of a file
thus read each document exactly once. A compressed file is never split.
"""

import collections
import dataclasses
import io
import json
import os

import fsspec
from fsspec import utils as fsspec_utils

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common import file_patterns

FORMATS = ("text", "jsonl", "parquet")
DEFAULT_TEXT_FIELD = "text"


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

ShardPiece = collections.namedtuple("ShardPiece",
                                    ["path", "start", "end", "format"],
                                    defaults=("text",))
ShardPiece.__doc__ = """The documents of `path` that begin in bytes [start, end).

See the module docstring for what "begin" means per format.
"""


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
  if fsspec_utils.infer_compression(name):
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


def is_splittable(path):
  """Whether a file can be cut into byte ranges (not compressed)."""
  return fsspec_utils.infer_compression(path) is None


def open_binary(path):
  """Opens a local path or URL for reading bytes, decompressing by suffix.

  Raises:
    errors.UserError: the file cannot be opened.
  """
  try:
    if not atomic_io.is_url(path) and is_splittable(path):
      return open(path, "rb")
    f = fsspec.open(path, "rb", compression="infer").open()
    if is_splittable(path):
      return f
    # Decompressors (zstandard's) may read but not read lines.
    return io.BufferedReader(f)
  except OSError as e:
    raise errors.UserError("cannot read input file %s: %s" % (
        path, e.strerror or e)) from None


def _line_number(path, offset):
  """1-based number of the line that starts at byte `offset` of `path`."""
  count = 0
  with open_binary(path) as f:
    remaining = offset
    while remaining > 0:
      block = f.read(min(remaining, 1 << 20))
      if not block:
        break
      count += block.count(b"\n")
      remaining -= len(block)
  return count + 1


def _decode_line(raw, path, line_start):
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise errors.UserError(
        "input file %s line %d is not valid UTF-8 (bad byte 0x%02x at byte "
        "%d of the line); expected UTF-8 text" % (
            path, _line_number(path, line_start), raw[e.start], e.start + 1)
    ) from None


def _is_blank(raw):
  # Lenient decoding: a bad line is reported by the piece that owns it.
  return not raw.decode("utf-8", "replace").strip()


def _piece_end(piece):
  # Byte offsets of a compressed file's pieces are not those of its lines.
  return piece.end if is_splittable(piece.path) else float("inf")


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
  with open_binary(piece.path) as f:
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
      line = _decode_line(raw, piece.path, line_start).strip()
      if not line and line_start >= end:
        return
      yield line, len(raw)


def _segmenter():
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
    record = json.loads(raw)
  except ValueError as e:
    raise errors.UserError(
        "input file %s line %d is not JSON (%s); expected one JSON object "
        "per line" % (path, _line_number(path, line_start), e)) from None
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
        "input file %s line %d: field %r is a %s; expected a string" % (
            path, _line_number(path, line_start), text_field,
            type(text).__name__))
  return text


def _iter_jsonl_lines(piece, text_field):
  """(sentence, bytes) of a JSONL piece; "" ends each document."""
  split_sentences = _segmenter()
  end = _piece_end(piece)
  with open_binary(piece.path) as f:
    for line_start, raw in _lines_starting_at(f, piece.start):
      if line_start >= end:
        return
      if _is_blank(raw):
        yield "", len(raw)
        continue
      text = _jsonl_text(_decode_line(raw, piece.path, line_start),
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


def _iter_parquet_lines(piece, text_field):
  """(sentence, 0) of a Parquet piece's row groups; "" ends a document."""
  import pyarrow  # pylint: disable=g-import-not-at-top
  import pyarrow.parquet as pq  # pylint: disable=g-import-not-at-top
  split_sentences = _segmenter()
  with open_binary(piece.path) as f:
    try:
      parquet = pq.ParquetFile(f)
    except pyarrow.ArrowException as e:
      raise errors.UserError("input file %s is not a Parquet file (%s)" % (
          piece.path, e)) from None
    names = parquet.schema_arrow.names
    if text_field not in names:
      raise errors.UserError(
          "input file %s has no column %r (its columns: %s); set "
          "--text_field to the column holding the documents' text" % (
              piece.path, text_field, ", ".join(names)))
    groups = [i for i, start in enumerate(_row_group_starts(parquet.metadata))
              if piece.start <= start < piece.end]
    if not groups:
      return
    for batch in parquet.iter_batches(batch_size=1024, row_groups=groups,
                                      columns=[text_field]):
      for text in batch.column(0).to_pylist():
        if not isinstance(text, (str, type(None))):
          raise errors.UserError(
              "input file %s: column %r holds %s values; expected strings"
              % (piece.path, text_field, type(text).__name__))
        for sentence in document_lines(text or "", split_sentences):
          yield sentence, 0
        yield "", 0


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
