# coding=utf-8
"""Sharded mode's plan: the shards of a corpus, their seeds and file names.

The input is cut into shards: consecutive small files are packed together,
a large file is split into byte ranges (moved to document boundaries when
read, see corpus_input.py; a compressed file stays whole). The shard size
comes from the input sizes alone (`plan_shard_bytes`): about
TARGET_NUM_SHARDS shards, none smaller than MIN_SHARD_BYTES nor larger than
--shard_size_mb, so a corpus of a few MB already keeps many workers busy,
and memory does not grow with the corpus. Nothing is read to plan but file
sizes, and the plan never depends on the workers.
"""

import os
import random

from bertkit.common import errors
from bertkit.data import compressed_files
from bertkit.data import corpus_input

SHARD_NAME_FORMAT = "%s-%05d-of-%05d.tfrecord"
DEFAULT_OUTPUT_BASENAME = "part"
# Enough shards to keep the cores of a large machine busy and to balance the
# load, but none so small that its next-sentence negatives come from a
# handful of documents.
TARGET_NUM_SHARDS = 32
MIN_SHARD_BYTES = 250000


def shard_seed(random_seed, shard_index):
  """The seed of shard `shard_index`'s `random.Random`: a 64-bit int.

  Derived through a hash (`random.Random` seeds from a str via SHA-512, the
  same on every platform and Python 3 version), so that different
  (random_seed, shard_index) pairs do not collide as random_seed +
  shard_index would.
  """
  return random.Random("%d:%d" % (random_seed, shard_index)).getrandbits(64)


def shard_paths(prefix, num_shards):
  """The final output paths of the shards, in shard order."""
  return [SHARD_NAME_FORMAT % (prefix, i, num_shards)
          for i in range(num_shards)]


def shard_pattern(prefix, num_shards):
  """The glob of the shard files (prefix-*-of-NNNNN.tfrecord)."""
  return "%s-*-of-%05d.tfrecord" % (prefix, num_shards)


def output_prefix(output_file, output_dir):
  """The shard file prefix from --output_file or --output_dir.

  Raises:
    errors.UserError: both or neither are given, or --output_file is a list.
  """
  if bool(output_file) == bool(output_dir):
    raise errors.UserError(
        "sharded mode needs exactly one of --output_dir (shards go to "
        "<output_dir>/part-SSSSS-of-NNNNN.tfrecord) or --output_file (used as "
        "the shards' prefix); got %s" % (
            "both" if output_file else "neither"))
  if output_dir:
    return os.path.join(output_dir, DEFAULT_OUTPUT_BASENAME)
  if "," in output_file:
    raise errors.UserError(
        "--output_file=%s: sharded mode writes one file per shard, named "
        "from a single prefix; give one path (or --output_dir)" % output_file)
  root, extension = os.path.splitext(output_file)
  return root if extension == ".tfrecord" else output_file


def plan_shard_bytes(total_bytes, max_shard_bytes):
  """The shard size for a corpus: from its size, at most `max_shard_bytes`.

  About TARGET_NUM_SHARDS shards, but none under MIN_SHARD_BYTES (unless
  --shard_size_mb asks for less): a 4 MB corpus gets 16 shards of 250 KB, a
  40 MB one 32 of 1.25 MB, a 1 GB one 64 of 16 MB (the default
  --shard_size_mb). Independent of --num_workers, so that the output is too.

  Args:
    total_bytes: size of the whole input.
    max_shard_bytes: --shard_size_mb in bytes.

  Returns:
    The target shard size in bytes (>= 1).
  """
  wanted = max(MIN_SHARD_BYTES, -(-total_bytes // TARGET_NUM_SHARDS))
  return max(1, min(max_shard_bytes, wanted))


def plan_shards(files, shard_bytes):
  """Cuts the input into shards of about `shard_bytes` bytes.

  Consecutive files smaller than `shard_bytes` are packed into one shard; a
  larger file gets ceil(size / shard_bytes) shards of equal byte ranges
  (unless compressed: one shard). The plan depends only on the files and
  `shard_bytes`, never on the number of workers.

  Args:
    files: list of `corpus_input.InputFile`s, in order.
    shard_bytes: target shard size in bytes (> 0).

  Returns:
    A list of shards, each a tuple of `corpus_input.ShardPiece`s read in
    order.
  """
  shards = []
  pack = []
  pack_bytes = 0
  for path, size, file_format in files:
    if size > shard_bytes and compressed_files.is_splittable(path):
      if pack:
        shards.append(tuple(pack))
        pack, pack_bytes = [], 0
      num_chunks = -(-size // shard_bytes)
      bounds = [size * i // num_chunks for i in range(num_chunks + 1)]
      shards.extend((corpus_input.ShardPiece(path, start, end, file_format),)
                    for start, end in zip(bounds, bounds[1:]))
      continue
    if pack and pack_bytes + size > shard_bytes:
      shards.append(tuple(pack))
      pack, pack_bytes = [], 0
    pack.append(corpus_input.ShardPiece(path, 0, size, file_format))
    pack_bytes += size
  if pack:
    shards.append(tuple(pack))
  return shards


def shard_work(pieces, dupe_factor):
  """The progress units of a shard: its bytes, once read and per pass."""
  return sum(p.end - p.start for p in pieces) * (1 + dupe_factor)
