# coding=utf-8
"""TFRecord files without TensorFlow: framing, checksums, the scratch file.

create_pretraining_data's worker processes write their records as TFRecord
files byte-identical to `tf.io.TFRecordWriter`'s (the tests check) without
importing TensorFlow: `write_tfrecord_file` frames them, computing the
CRC32C checksums of a whole batch of records at once with numpy.
`ScratchRecords` keeps the unshuffled records of a run on disk until
upstream's final shuffle.

TFRecord: uint64 length, masked CRC32C of those 8 bytes, data, masked CRC32C
of data.

Module state: the CRC32C tables, built by `_frame` at this process's first
checksum and read by every later one (a worker process writes millions of
records).
"""

import array
import importlib
import os
import struct

from bertkit.common import atomic_io


def load_numpy():
  """Imports numpy now (it is otherwise imported by the first checksum).

  numpy (~20 MB) is imported by the first checksum: a process that only
  plans work (create_pretraining_data's parent in sharded mode) skips it.

  Returns:
    The numpy module.
  """
  return importlib.import_module("numpy")


_CRC32C_POLY = 0x82F63B78  # Castagnoli, bit-reflected.
_CRC_MASK_DELTA = 0xA282EAD8


def _crc32c_byte_table():
  np = load_numpy()
  table = np.arange(256, dtype=np.uint32)
  for _ in range(8):
    table = np.where(table & 1, (table >> 1) ^ np.uint32(_CRC32C_POLY),
                     table >> 1).astype(np.uint32)
  return table


class _Crc32c(object):
  """CRC32C of many byte strings at once.

  The table-driven CRC runs over all messages in lock step, four bytes (one
  little-endian 32-bit column) per numpy step: the per-byte work is
  vectorized across messages. Messages are right-aligned in a zero-padded
  matrix; each row starts from the register value that its p bytes of
  padding turn into the standard initial value 0xFFFFFFFF.
  """

  def __init__(self):
    np = load_numpy()
    self._table = _crc32c_byte_table()
    # A step with data byte b is a zero-byte step of register ^ b, and
    # zero-byte steps are linear: four of them on a register x are
    # low[x & 0xFFFF] ^ high[x >> 16].
    low = np.arange(1 << 16, dtype=np.uint32)
    high = low << 16
    for _ in range(4):
      low = self._table[low & 0xFF] ^ (low >> 8)
      high = self._table[high & 0xFF] ^ (high >> 8)
    self._four_steps_low = low
    self._four_steps_high = high
    # The top byte of table[b] differs for every b: it identifies the low
    # byte that a step consumed, which makes a zero-byte step invertible.
    self._low_byte_of_top = np.zeros(256, dtype=np.int64)
    self._low_byte_of_top[self._table >> 24] = np.arange(256)
    self._padded_init = [0xFFFFFFFF]

  def _unstep_zero(self, register):
    low = int(self._low_byte_of_top[register >> 24])
    return (((register ^ int(self._table[low])) << 8) & 0xFFFFFFFF) | low

  def masked(self, messages):
    """Masked CRC32C (as TFRecord stores it) of each message.

    Args:
      messages: a non-empty list of bytes.

    Returns:
      A uint32 array, one checksum per message.
    """
    np = load_numpy()
    lengths = np.array([len(m) for m in messages], dtype=np.int64)
    width = -(-int(lengths.max()) // 4) * 4
    while len(self._padded_init) <= width:
      self._padded_init.append(self._unstep_zero(self._padded_init[-1]))
    padded = b"".join([b"\x00" * (width - len(m)) + m for m in messages])
    # Strided column views: no transposed copy of the batch.
    columns = np.frombuffer(padded, dtype="<u4").reshape(
        len(messages), width // 4).T
    crc = np.array(self._padded_init, dtype=np.uint32)[width - lengths]
    low, high = self._four_steps_low, self._four_steps_high
    for column in columns:
      crc ^= column
      crc = low[crc & 0xFFFF] ^ high[crc >> 16]
    crc ^= np.uint32(0xFFFFFFFF)
    return ((crc >> 15) | (crc << 17)) + np.uint32(_CRC_MASK_DELTA)


_CRC = None
# Record bytes per CRC batch: bounds the work matrices (a few times this).
_BATCH_BYTES = 1 << 19


def _frame(records):
  """The TFRecord bytes of a list of records."""
  global _CRC
  if _CRC is None:
    _CRC = _Crc32c()
  lengths = [len(r) for r in records]
  length_crcs = _CRC.masked([struct.pack("<Q", n) for n in lengths])
  data_crcs = _CRC.masked(records)
  parts = []
  for record, length, length_crc, data_crc in zip(
      records, lengths, length_crcs.tolist(), data_crcs.tolist()):
    parts.append(struct.pack("<QI", length, length_crc))
    parts.append(record)
    parts.append(struct.pack("<I", data_crc))
  return b"".join(parts)


def tfrecord_chunks(records):
  """Frames records as a TFRecord file, byte-identical to TFRecordWriter's.

  Args:
    records: an iterable of bytes.

  Yields:
    Byte strings whose concatenation is the TFRecord file.
  """
  batch = []
  batch_bytes = 0
  for record in records:
    batch.append(record)
    batch_bytes += len(record)
    if batch_bytes >= _BATCH_BYTES:
      yield _frame(batch)
      batch = []
      batch_bytes = 0
  if batch:
    yield _frame(batch)


def write_tfrecord_file(path, records):
  """Writes `records` (an iterable of bytes) as a TFRecord file.

  Args:
    path: local path or URL (through tf.io.gfile).
    records: an iterable of bytes.

  Returns:
    The number of records written.
  """
  count = 0

  def counted():
    nonlocal count
    for record in records:
      count += 1
      yield record

  with atomic_io.open_file(path, "wb") as f:
    for chunk in tfrecord_chunks(counted()):
      f.write(chunk)
    if not atomic_io.is_url(path):
      f.flush()
      os.fsync(f.fileno())
  return count


class ScratchRecords(object):
  """Records kept in a scratch file, read back in any order.

  Upstream shuffles all instances of all dupe_factor passes: holding them on
  disk (in the page cache, which the OS may evict) instead of as Python
  objects in memory keeps memory independent of corpus size x dupe_factor.

  Args:
    path: the scratch file (local), removed on `close`.
  """

  def __init__(self, path):
    self._path = path
    self._file = open(path, "w+b")
    self._offsets = array.array("q", [0])

  def append(self, record):
    self._file.write(record)
    self._offsets.append(self._offsets[-1] + len(record))

  def __len__(self):
    return len(self._offsets) - 1

  def read_in_order(self, order):
    """Yields the records at the positions listed in `order`."""
    self._file.flush()
    fd = self._file.fileno()
    offsets = self._offsets
    for i in order:
      yield os.pread(fd, offsets[i + 1] - offsets[i], offsets[i])

  def close(self):
    self._file.close()
    if os.path.exists(self._path):
      os.remove(self._path)
