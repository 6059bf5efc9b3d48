# coding=utf-8
"""Sharded mode's resume manifest: `<prefix>.manifest.json`.

It records the inputs, flags and complete shards of a run. A rerun skips
shards whose file exists (--resume, on by default); resuming into an output
whose inputs or flags differ is refused (--noresume starts over).
"""

import dataclasses
import json
import os
import time
import zlib

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.data import shard_plan

MANIFEST_FORMAT_VERSION = 2
# How often the list of complete shards is rewritten during a run.
WRITE_INTERVAL_SECONDS = 0.5


def manifest_of(settings, shards, shard_bytes):
  """What a run's shard files depend on (inputs and flags), as JSON data.

  The written manifest also lists the complete shards ("complete", see
  `CompletedShards`), which is not part of what a run depends on.
  """
  vocab_text = "\n".join("%s\t%d" % item for item in settings.vocab.items())
  manifest = {
      "format": MANIFEST_FORMAT_VERSION,
      "vocab_crc32": zlib.crc32(vocab_text.encode("utf-8")),
      "do_lower_case": settings.do_lower_case,
      "params": dataclasses.asdict(settings.params),
      "random_seed": settings.random_seed,
      "dupe_factor": settings.dupe_factor,
      "text_field": settings.text_field,
      "shard_bytes": shard_bytes,
      "shards": [[list(dataclasses.astuple(piece)) for piece in pieces]
                 for pieces in shards],
  }
  if settings.max_sequences_per_pack is not None:
    manifest["max_sequences_per_pack"] = settings.max_sequences_per_pack
  return manifest


def _read_json(path):
  try:
    with open(path) as f:
      return json.load(f)
  except FileNotFoundError:
    return None
  except (OSError, ValueError) as e:
    raise errors.UserError("cannot read %s: %s" % (path, e)) from None


def remove_partial_files(prefix):
  """Deletes the temporary files of shards of `prefix` (of stopped runs)."""
  atomic_io.remove_stale_partials(os.path.dirname(prefix) or ".",
                                  os.path.basename(prefix) + "-")


def prepare_output(prefix, manifest, resume):
  """Checks/writes the manifest and lists the shards still to make.

  Args:
    prefix: the shard file prefix.
    manifest: this run's manifest (`manifest_of`).
    resume: the --resume value.

  Returns:
    The indices of the shards to make.

  Raises:
    errors.UserError: the output directory is missing or not writable, or
      resuming into the output of a run with other inputs or flags.
  """
  directory = os.path.dirname(prefix) or "."
  if not os.path.isdir(directory):
    raise errors.UserError("output directory %s does not exist" % directory)
  manifest_path = prefix + ".manifest.json"
  previous = _read_json(manifest_path)
  if previous is not None:
    previous.pop("complete", None)
  if previous is not None and previous != manifest:
    if resume:
      raise errors.UserError(
          "%s belongs to a run with other input files or flags; resuming it "
          "would mix their shards. Use another --output_dir/--output_file, or "
          "--noresume to replace its shards" % manifest_path)
    for path in shard_plan.shard_paths(prefix,
                                      len(previous.get("shards", []))):
      if os.path.exists(path):
        os.remove(path)
  remove_partial_files(prefix)  # Left by a killed run.
  paths = shard_plan.shard_paths(prefix, len(manifest["shards"]))
  complete = [i for i, path in enumerate(paths)
              if resume and os.path.exists(path)]
  try:
    write_manifest(manifest_path, manifest, complete)
  except OSError as e:
    raise errors.UserError("cannot write to output directory %s: %s" % (
        directory, e.strerror)) from None
  return [i for i in range(len(paths)) if i not in set(complete)]


def write_manifest(path, manifest, complete):
  """Writes the manifest with the sorted list of complete shard indices."""
  with atomic_io.atomic_open(path, "w") as f:
    json.dump(dict(manifest, complete=sorted(complete)), f, indent=1)


class CompletedShards(object):
  """Records complete shards in the manifest as their results arrive.

  A shard's file is complete as soon as it has its final name (that is what
  a rerun checks); the manifest's list says the same for whoever watches a
  run, rewritten at most every WRITE_INTERVAL_SECONDS and at the end.
  """

  def __init__(self, path, manifest, complete):
    self._path = path
    self._manifest = manifest
    self._complete = set(complete)
    self._written = time.monotonic()

  def add(self, index):
    self._complete.add(index)
    if time.monotonic() - self._written >= WRITE_INTERVAL_SECONDS:
      self.write()

  def write(self):
    write_manifest(self._path, self._manifest, self._complete)
    self._written = time.monotonic()
