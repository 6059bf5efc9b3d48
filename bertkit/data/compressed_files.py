"""Corpus files opened as bytes, decompressed as their names say.

corpus_input.py reads every corpus through `open_binary`: a local path or a
URL fsspec serves, gzip, bz2, xz or zstd by the file's suffix, decompressed
as a stream (a file is never held whole in memory). Compressed files are
read whole by one worker (`is_splittable`: only plain files are split at
byte offsets between shards).
"""

import io
import os
import zlib

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.common import file_patterns

# File name suffix -> the compression it stands for.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".xz": "xz", ".lzma": "xz",
                ".zst": "zstd"}
# Bytes read at a time from a compressed file (and from its decompressor).
_READ_BYTES = 1 << 16


def compression_of(path):
  """The compression a file name's suffix says ("gzip", ...), or None."""
  return COMPRESSIONS.get(os.path.splitext(path.lower())[1])


def is_splittable(path):
  """Whether a file can be cut into byte ranges (not compressed)."""
  return compression_of(path) is None


class _ZstdFrames(io.RawIOBase):
  """The decompressed bytes of a file of zstd frames, one after another.

  The file must end where a frame does (the library tells when a frame is
  complete): a file cut anywhere else, even where the text decompressed so
  far ends a line, raises EOFError. Damaged data raises OSError.
  """

  def __init__(self, raw):
    super().__init__()
    import zstandard  # pylint: disable=g-import-not-at-top
    self._zstd = zstandard
    self._decompressor = zstandard.ZstdDecompressor()
    self._raw = raw
    self._frame = None  # The decompressobj of the frame being read.
    self._input = b""  # Compressed bytes no frame has taken yet.
    self._output = memoryview(b"")  # Decompressed bytes not yet read.

  def readable(self):
    return True

  def readinto(self, buffer):
    while not self._output:
      if not self._input:
        self._input = self._raw.read(_READ_BYTES)
        if not self._input:
          if self._frame is not None and not self._frame.eof:
            raise EOFError("the file ends inside a zstd frame")
          return 0
      if self._frame is None or self._frame.eof:
        self._frame = self._decompressor.decompressobj()
      data, self._input = self._input, b""
      try:
        self._output = memoryview(self._frame.decompress(data))
      except self._zstd.ZstdError as e:
        raise OSError(str(e)) from None
      if self._frame.eof:
        self._input = self._frame.unused_data
    size = min(len(buffer), len(self._output))
    buffer[:size] = self._output[:size]
    self._output = self._output[size:]
    return size


def _decompressor(compression, raw):
  """A reader of the decompressed bytes of binary file `raw`, and the
  exceptions by which it says the data is truncated or damaged."""
  # Imported here: a corpus in one format loads no other's code.
  # pylint: disable=g-import-not-at-top
  if compression == "gzip":
    import gzip
    return gzip.GzipFile(fileobj=raw, mode="rb"), (EOFError, OSError,
                                                  zlib.error)
  if compression == "bz2":
    import bz2
    return bz2.BZ2File(raw), (EOFError, OSError)
  if compression == "xz":
    import lzma
    return lzma.LZMAFile(raw), (EOFError, OSError, lzma.LZMAError)
  return _ZstdFrames(raw), (EOFError, OSError)


class _DecompressedFile(io.RawIOBase):
  """The decompressed bytes of a compressed input file.

  Data that is truncated or not of the file's compression raises a
  UserError naming the file; closing closes the file too.
  """

  def __init__(self, path, raw, compression):
    super().__init__()
    self._path = path
    self._raw = raw
    self._compression = compression
    self._stream, self._errors = _decompressor(compression, raw)

  def readable(self):
    return True

  def readinto(self, buffer):
    try:
      return self._stream.readinto(buffer)
    except EOFError:
      raise errors.UserError(
          "input file %s is truncated: its %s data ends before the end of "
          "its compressed stream (an interrupted download or copy?); "
          "expected the complete file" % (self._path, self._compression)
      ) from None
    except self._errors as e:
      raise errors.UserError(
          "input file %s is not valid %s data (%s); expected the "
          "compression its name says" % (self._path, self._compression, e)
      ) from None

  def close(self):
    if not self.closed:
      self._stream.close()
      self._raw.close()
    super().close()


def open_raw(path):
  """The file at a local path or URL, opened for reading bytes."""
  if atomic_io.is_url(path):
    fs, inner = file_patterns.url_filesystem(path)
    return fs.open(inner, "rb")
  return open(path, "rb")


def open_binary(path):
  """Opens a local path or URL for reading bytes, decompressing by suffix.

  Raises:
    errors.UserError: the file cannot be opened; or, as it is read, it
      is truncated or not of the compression its name says.
  """
  try:
    raw = open_raw(path)
  except OSError as e:
    raise errors.UserError("cannot read input file %s: %s" % (
        path, e.strerror or e)) from None
  compression = compression_of(path)
  if compression is None:
    return raw
  return io.BufferedReader(_DecompressedFile(path, raw, compression),
                           buffer_size=_READ_BYTES)
