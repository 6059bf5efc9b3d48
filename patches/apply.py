r"""Checks, applies or reverts the good_steps int32 patch to TF's loss_scale.py.

TensorFlow 1.14 creates DynamicLossScale's `good_steps` variable as int64 from
the Python int 0; MultiWorkerMirroredStrategy's variable creator converts that
0 without a dtype (int32) and then asks for int64, so mixed-precision training
under that strategy fails before the first step. Declaring the variable int32
avoids it. See patches/README.md.

The edit is found by content, not by line number: the one `_add_weight(...)`
call named 'good_steps' has its `dtype=dtypes.int64` changed to
`dtypes.int32`, and nothing else in the file changes. TensorFlow is located
without importing it, so this also works where importing it would fail.

Usage:
  python patches/apply.py --check
  python patches/apply.py --apply
  python patches/apply.py --revert
  python patches/apply.py --check --file /path/to/loss_scale.py
  python patches/apply.py --check --tf_dir /path/to/site-packages/tensorflow

Exit codes: 0 when the requested state was reached or reported, 2 on a user
error (printed as one `error: ...` line; the file is then left untouched).
"""

import importlib.metadata
import importlib.util
import os
import re
import stat
import sys
import tempfile

from absl import app
from absl import flags

# `python patches/apply.py` puts patches/ on sys.path, not the repository root.
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO_ROOT not in sys.path:
  sys.path.insert(0, _REPO_ROOT)

from bertkit.common import errors  # noqa: E402  pylint: disable=g-import-not-at-top
from bertkit.common import flag_parsing  # noqa: E402  pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS

flags.DEFINE_bool("check", False,
                  "Report the TensorFlow version, whether the defect can "
                  "occur there, and whether the patch is applied.")
flags.DEFINE_bool("apply", False,
                  "Declare good_steps int32. Idempotent; keeps a backup.")
flags.DEFINE_bool("revert", False,
                  "Declare good_steps int64 again. Idempotent.")
flags.DEFINE_string("file", None,
                    "Act on this loss_scale.py instead of the one of the "
                    "installed TensorFlow.")
flags.DEFINE_string("tf_dir", None,
                    "A tensorflow package directory (the one holding "
                    "__init__.py) to use instead of the installed one.")

LOSS_SCALE_RELPATH = os.path.join("python", "training", "experimental",
                                  "loss_scale.py")
BACKUP_SUFFIX = ".orig-bert-patch"

APPLIED = "applied"
NOT_APPLIED = "not-applied"
UNRECOGNISED = "unrecognised"

_ORIGINAL_DTYPE = b"int64"
_PATCHED_DTYPE = b"int32"
_DTYPE_BY_STATE = {NOT_APPLIED: _ORIGINAL_DTYPE, APPLIED: _PATCHED_DTYPE}
_STATE_WORDS = {APPLIED: "applied", NOT_APPLIED: "not applied",
                UNRECOGNISED: "file unrecognised"}

_CALL_OPEN_RE = re.compile(rb"\b_add_weight\s*\(")
# The name is either the `name=` keyword or the first positional argument.
_GOOD_STEPS_NAME_RE = re.compile(
    rb"""(?:^\s*|\bname\s*=\s*)(['"])good_steps\1""")
_DTYPE_ARG_RE = re.compile(rb"\bdtype\s*=\s*dtypes\s*\.\s*(int64|int32)\b")


class UnrecognisedSourceError(Exception):
  """The file is not a loss_scale.py this program knows how to edit."""


def _call_arguments(source):
  """Yields the argument span of every `_add_weight(...)` in `source`.

  Args:
    source: file contents (bytes).

  Yields:
    (start, end) offsets of the text between the parentheses.
  """
  for match in _CALL_OPEN_RE.finditer(source):
    depth = 1
    pos = match.end()
    while pos < len(source) and depth:
      char = source[pos:pos + 1]
      if char == b"(":
        depth += 1
      elif char == b")":
        depth -= 1
      pos += 1
    if depth == 0:
      yield match.end(), pos - 1


def locate_good_steps_dtype(source):
  """Finds the dtype token of the single `_add_weight` call named good_steps.

  Args:
    source: contents of loss_scale.py (bytes).

  Returns:
    (start, end) offsets of the `int64` or `int32` token in `source`.

  Raises:
    UnrecognisedSourceError: there is not exactly one such call, or its dtype
      is not given as `dtype=dtypes.int64` / `dtype=dtypes.int32`.
  """
  calls = [(start, end) for start, end in _call_arguments(source)
           if _GOOD_STEPS_NAME_RE.search(source[start:end])]
  if len(calls) != 1:
    raise UnrecognisedSourceError(
        "expected exactly one _add_weight call named 'good_steps', found %d" %
        len(calls))
  start, end = calls[0]
  dtypes_found = list(_DTYPE_ARG_RE.finditer(source[start:end]))
  if len(dtypes_found) != 1:
    raise UnrecognisedSourceError(
        "the good_steps _add_weight call does not have exactly one "
        "dtype=dtypes.int64 or dtype=dtypes.int32 argument")
  token = dtypes_found[0]
  return start + token.start(1), start + token.end(1)


def patch_state(source):
  """Classifies a loss_scale.py.

  Args:
    source: file contents (bytes).

  Returns:
    (state, detail): state is APPLIED, NOT_APPLIED or UNRECOGNISED; detail is
    a short human-readable explanation.
  """
  try:
    start, end = locate_good_steps_dtype(source)
  except UnrecognisedSourceError as e:
    return UNRECOGNISED, str(e)
  dtype = source[start:end]
  state = APPLIED if dtype == _PATCHED_DTYPE else NOT_APPLIED
  return state, "good_steps is %s" % dtype.decode("ascii")


def with_good_steps_dtype(source, state):
  """Returns `source` with good_steps declared as the dtype of `state`.

  Args:
    source: contents of a recognisable loss_scale.py (bytes).
    state: APPLIED (int32) or NOT_APPLIED (int64).

  Returns:
    The new contents; only the dtype token differs from `source`.
  """
  start, end = locate_good_steps_dtype(source)
  return source[:start] + _DTYPE_BY_STATE[state] + source[end:]


def find_installed_tf_dir():
  """The installed tensorflow package directory, or None; TF is not imported."""
  try:
    spec = importlib.util.find_spec("tensorflow")
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.submodule_search_locations:
    return None
  return list(spec.submodule_search_locations)[0]


def read_tf_version(tf_dir):
  """Reads the version of the TensorFlow in `tf_dir` without importing it.

  The wheel's metadata (tensorflow, tensorflow-gpu, tf-nightly, ...) next to
  the package directory is preferred; a tree without it falls back to the
  `_VERSION` literal of tools/pip_package/setup.py, shipped in the package.

  Args:
    tf_dir: a tensorflow package directory.

  Returns:
    The version string, or None when neither source has it.
  """
  tf_dir = os.path.abspath(tf_dir)
  package = os.path.basename(tf_dir)
  dists = importlib.metadata.distributions(path=[os.path.dirname(tf_dir)])
  for dist in sorted(dists, key=lambda d: d.metadata["Name"] or ""):
    if package in (dist.read_text("top_level.txt") or "").split():
      return dist.version
  setup_py = os.path.join(tf_dir, "tools", "pip_package", "setup.py")
  if os.path.isfile(setup_py):
    with open(setup_py, encoding="utf-8", errors="replace") as f:
      match = re.search(r"""^_VERSION\s*=\s*['"]([^'"]+)['"]""", f.read(),
                        re.MULTILINE)
    if match:
      return match.group(1)
  return None


def defect_verdict(version):
  """Whether the good_steps defect can occur in a TensorFlow version.

  The rule: 1.14.x is known to fail (reported with MultiWorkerMirroredStrategy
  and mixed precision); 1.15.x ships the same loss_scale.py and is treated
  the same, erring on the side of patching; in 2.x the variable creators pass
  the requested dtype through. Older releases are not judged.

  Args:
    version: a version string such as "1.14.0", or None.

  Returns:
    A one-line verdict starting with "affected", "not affected" or "unknown".
  """
  match = re.match(r"(\d+)\.(\d+)", version or "")
  if not match:
    return "unknown: TensorFlow version not found"
  major, minor = int(match.group(1)), int(match.group(2))
  if major == 1 and minor in (14, 15):
    return ("affected: with MultiWorkerMirroredStrategy and --use_fp16, "
            "creating good_steps fails with 'Tensor conversion requested "
            "dtype int64 for Tensor with dtype int32'")
  if major >= 2:
    return "not affected: variable creators pass the dtype through"
  return ("unknown: the rule covers 1.14.x and 1.15.x (affected) and 2.x "
          "(not affected)")


def _read_bytes(path):
  with open(path, "rb") as f:
    return f.read()


def _atomic_write(path, data, mode):
  """Writes `data` to `path` via a temporary file in the same directory."""
  fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".",
                             suffix=".partial", dir=os.path.dirname(path))
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def remove_stale_bytecode(path):
  """Deletes cached bytecode of the module at `path`.

  The edit keeps the file size and can land within the same mtime second as
  the cached .pyc, in which case Python would keep running the old bytecode.

  Args:
    path: a .py file.

  Returns:
    The paths removed.
  """
  directory = os.path.dirname(path)
  stem = os.path.splitext(os.path.basename(path))[0]
  candidates = [os.path.join(directory, stem + ".pyc")]  # Python 2 layout.
  cache_dir = os.path.join(directory, "__pycache__")
  if os.path.isdir(cache_dir):
    candidates += [os.path.join(cache_dir, name)
                   for name in sorted(os.listdir(cache_dir))
                   if name.startswith(stem + ".") and name.endswith(".pyc")]
  removed = [p for p in candidates if os.path.isfile(p)]
  for p in removed:
    os.remove(p)
  return removed


def _require_writable(path):
  directory = os.path.dirname(os.path.abspath(path))
  if not (os.access(path, os.W_OK) and
          os.access(directory, os.W_OK | os.X_OK)):
    raise errors.UserError(
        "%s (or its directory) is not writable; run as the user that "
        "installed TensorFlow" % path)


def _write_file(path, data, mode_from):
  """Atomically writes `path` with the permission bits of `mode_from`."""
  try:
    _atomic_write(path, data, stat.S_IMODE(os.stat(mode_from).st_mode))
  except OSError as e:
    raise errors.UserError("could not write %s: %s" % (path, e)) from e


def _bytecode_lines(path):
  return ["removed stale bytecode %s" % p for p in remove_stale_bytecode(path)]


def _recognised_state(path, source):
  state, detail = patch_state(source)
  if state == UNRECOGNISED:
    raise errors.UserError("%s: %s; not touching it" % (path, detail))
  return state


def apply_patch(path, source):
  """Declares good_steps int32 in `path`, keeping a one-time backup.

  Args:
    path: the loss_scale.py to edit.
    source: its current contents (bytes).

  Returns:
    Lines describing what was done.
  """
  if _recognised_state(path, source) == APPLIED:
    return ["patch already applied; %s left unchanged" % path]
  _require_writable(path)
  backup = path + BACKUP_SUFFIX
  lines = []
  if os.path.exists(backup):
    lines.append("kept the existing backup %s" % backup)
  else:
    _write_file(backup, source, mode_from=path)
    lines.append("backup written to %s" % backup)
  _write_file(path, with_good_steps_dtype(source, APPLIED), mode_from=path)
  lines += _bytecode_lines(path)
  lines.append("patched %s: good_steps is now int32" % path)
  return lines


def revert_patch(path, source):
  """Declares good_steps int64 again in `path`.

  The backup is restored (and then removed) only when it is exactly the
  un-patched form of the current file; a backup from another TensorFlow
  release would otherwise silently downgrade the file, so in that case the
  edit is undone in place and the backup is left alone.

  Args:
    path: the loss_scale.py to edit.
    source: its current contents (bytes).

  Returns:
    Lines describing what was done.
  """
  if _recognised_state(path, source) == NOT_APPLIED:
    return ["patch not applied; %s left unchanged" % path]
  _require_writable(path)
  original = with_good_steps_dtype(source, NOT_APPLIED)
  backup = path + BACKUP_SUFFIX
  has_backup = os.path.isfile(backup)
  backup_matches = has_backup and _read_bytes(backup) == original
  _write_file(path, original, mode_from=path)
  lines = []
  if backup_matches:
    os.remove(backup)
    lines.append("restored %s from %s (backup removed)" % (path, backup))
  else:
    lines.append("reverted %s in place: good_steps is int64 again" % path)
    if has_backup:
      lines.append("left %s alone: it is not the un-patched form of the "
                   "current file" % backup)
  return lines + _bytecode_lines(path)


def resolve_target(file_flag, tf_dir_flag):
  """Chooses the TensorFlow directory and the loss_scale.py to act on.

  Args:
    file_flag: value of --file, or None.
    tf_dir_flag: value of --tf_dir, or None.

  Returns:
    (tf_dir, path): tf_dir may be None when only --file was given and no
    TensorFlow is installed.
  """
  if file_flag and tf_dir_flag:
    raise errors.UserError("give --file or --tf_dir, not both")
  if tf_dir_flag:
    if not os.path.isdir(tf_dir_flag):
      raise errors.UserError(
          "--tf_dir=%s is not a directory; expected a tensorflow package "
          "directory" % tf_dir_flag)
    tf_dir = tf_dir_flag
  else:
    tf_dir = find_installed_tf_dir()
  if file_flag:
    return tf_dir, file_flag
  if tf_dir is None:
    raise errors.UserError(
        "no TensorFlow installed for %s; pass --tf_dir or --file" %
        sys.executable)
  return tf_dir, os.path.join(tf_dir, LOSS_SCALE_RELPATH)


def _selected_action(check, apply, revert):
  chosen = [name for name, on in (("check", check), ("apply", apply),
                                  ("revert", revert)) if on]
  if len(chosen) != 1:
    raise errors.UserError(
        "give exactly one of --check, --apply, --revert (got %s)" %
        (", ".join("--" + c for c in chosen) or "none"))
  return chosen[0]


def main(argv):
  if len(argv) > 1:
    raise errors.UserError("unexpected arguments: %s" % " ".join(argv[1:]))
  action = _selected_action(FLAGS.check, FLAGS.apply, FLAGS.revert)
  tf_dir, path = resolve_target(FLAGS.file, FLAGS.tf_dir)
  if not os.path.isfile(path):
    raise errors.UserError(
        "%s does not exist; expected TensorFlow's loss_scale.py" % path)
  source = _read_bytes(path)

  version = read_tf_version(tf_dir) if tf_dir else None
  verdict = defect_verdict(version)
  if tf_dir:
    print("TensorFlow: %s (%s)" % (version or "version unknown", tf_dir))
  else:
    print("TensorFlow: not installed for %s" % sys.executable)
  print("defect: %s" % verdict)
  print("file: %s" % path)

  if action == "check":
    state, detail = patch_state(source)
    print("patch: %s (%s)" % (_STATE_WORDS[state], detail))
    print("status: %s" % state)
    return 0
  if action == "apply":
    if (verdict.startswith("not affected") and
        patch_state(source)[0] == NOT_APPLIED):
      print("note: this TensorFlow does not need the patch; applying anyway")
    lines = apply_patch(path, source)
  else:
    lines = revert_patch(path, source)
  for line in lines:
    print(line)
  return 0


if __name__ == "__main__":
  app.run(errors.main_with_user_errors(main),
          flags_parser=flag_parsing.parse_flags)
