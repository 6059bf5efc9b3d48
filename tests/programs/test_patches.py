"""Tests for patches/apply.py and patches/loss_scale_good_steps_int32.patch.

Every run acts on a copy of the installed loss_scale.py under tmp_path; the
installed file itself is only ever read, and the last test checks that.
"""

import hashlib
import importlib.metadata
import importlib.util
import os
import py_compile
import shutil
import stat
import subprocess

import pytest

from conftest import REPO_ROOT
from conftest import run_program

APPLY_PY = os.path.join("patches", "apply.py")
PATCH_FILE = os.path.join(REPO_ROOT, "patches",
                          "loss_scale_good_steps_int32.patch")
RELPATH = os.path.join("python", "training", "experimental", "loss_scale.py")
BACKUP_SUFFIX = ".orig-bert-patch"

INSTALLED_TF_DIR = list(
    importlib.util.find_spec("tensorflow").submodule_search_locations)[0]
INSTALLED_LOSS_SCALE = os.path.join(INSTALLED_TF_DIR, RELPATH)


def _load_apply_module():
  spec = importlib.util.spec_from_file_location(
      "bert_patches_apply", os.path.join(REPO_ROOT, APPLY_PY))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


apply_mod = _load_apply_module()


def _read(path):
  with open(path, "rb") as f:
    return f.read()


def _write(path, data):
  with open(path, "wb") as f:
    f.write(data)


def _fingerprint(path):
  return hashlib.sha256(_read(path)).hexdigest(), os.stat(path).st_mtime_ns


def _run(*args):
  return run_program([APPLY_PY] + list(args))


def _status(result):
  return result.stdout.strip().splitlines()[-1]


def _assert_one_error_line(result):
  assert result.returncode == 2, result.stdout + result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith("error: ")


@pytest.fixture(scope="module", autouse=True)
def installed_snapshot():
  """Hash and mtime of the installed loss_scale.py before this module runs."""
  return _fingerprint(INSTALLED_LOSS_SCALE)


@pytest.fixture
def original():
  return _read(INSTALLED_LOSS_SCALE)


@pytest.fixture
def copy(tmp_path, original):
  path = tmp_path / "loss_scale.py"
  _write(path, original)
  return str(path)


def _fake_tf_tree(root, original, version=None, dist_name="tensorflow_gpu",
                  setup_version=None):
  """A tensorflow package dir under root/site with an optional version."""
  tf_dir = root / "site" / "tensorflow"
  target = tf_dir / RELPATH
  target.parent.mkdir(parents=True)
  _write(target, original)
  if version:
    info = root / "site" / ("%s-%s.dist-info" % (dist_name, version))
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" %
        (dist_name.replace("_", "-"), version))
    (info / "top_level.txt").write_text("tensorflow\n")
  if setup_version:
    setup_py = tf_dir / "tools" / "pip_package" / "setup.py"
    setup_py.parent.mkdir(parents=True)
    setup_py.write_text("import sys\n_VERSION = '%s'\n" % setup_version)
  return str(tf_dir), str(target)


# ---- pure helpers -----------------------------------------------------------


@pytest.mark.parametrize("version,expected", [
    ("1.14.0", "affected: "),
    ("1.15.5", "affected: "),
    ("2.0.0", "not affected: variable creators pass the dtype through"),
    ("2.15.1", "not affected: variable creators pass the dtype through"),
    ("1.13.1", "unknown: "),
    (None, "unknown: TensorFlow version not found"),
])
def test_defect_verdict_rule(version, expected):
  assert apply_mod.defect_verdict(version).startswith(expected)


def test_installed_file_is_unpatched_int64(original):
  assert apply_mod.patch_state(original) == (apply_mod.NOT_APPLIED,
                                             "good_steps is int64")


@pytest.mark.parametrize("call,state", [
    (b"self._add_weight(\n    name=\"good_steps\",\n    dtype = dtypes.int64,"
     b"\n    initial_value=0)", "not-applied"),
    (b"self._add_weight('good_steps', 0, dtype=dtypes.int32)", "applied"),
    (b"self._add_weight(name='good_steps', initial_value=int(0),\n"
     b"                 dtype=dtypes.int64)", "not-applied"),
])
def test_call_layout_tolerated_and_only_its_dtype_changes(call, state):
  neighbour = b"x = self._add_weight(name='other', dtype=dtypes.int64)\n"
  comment = b"# good_steps: dtype=dtypes.int64\n"
  source = comment + neighbour + b"y = " + call + b"\n" + neighbour
  assert apply_mod.patch_state(source)[0] == state
  patched = apply_mod.with_good_steps_dtype(source, apply_mod.APPLIED)
  unpatched = apply_mod.with_good_steps_dtype(source, apply_mod.NOT_APPLIED)
  call_at = source.index(b"y = ")
  expected_patched = (source[:call_at] +
                      source[call_at:].replace(b"int64", b"int32", 1))
  if state == "not-applied":
    assert patched == expected_patched
    assert unpatched == source
  else:
    assert patched == source
    assert unpatched == (source[:call_at] +
                         source[call_at:].replace(b"int32", b"int64", 1))


@pytest.mark.parametrize("source,reason", [
    (b"v = self._add_weight(name='steps', dtype=dtypes.int64)\n",
     "found 0"),
    (b"a = self._add_weight(name='good_steps', dtype=dtypes.int64)\n"
     b"b = self._add_weight(name='good_steps', dtype=dtypes.int32)\n",
     "found 2"),
    (b"a = self._add_weight(name='good_steps', dtype=dtypes.float32)\n",
     "does not have exactly one"),
    (b"a = self._add_weight(name='good_steps', initial_value=0)\n",
     "does not have exactly one"),
])
def test_unrecognised_sources(source, reason):
  state, detail = apply_mod.patch_state(source)
  assert state == apply_mod.UNRECOGNISED
  assert reason in detail


def test_version_from_metadata_then_setup_py(tmp_path, original):
  tf_dir, _ = _fake_tf_tree(tmp_path / "a", original, version="1.14.0",
                            setup_version="9.9.9")
  assert apply_mod.read_tf_version(tf_dir) == "1.14.0"
  tf_dir, _ = _fake_tf_tree(tmp_path / "b", original, setup_version="1.15.2")
  assert apply_mod.read_tf_version(tf_dir) == "1.15.2"
  tf_dir, _ = _fake_tf_tree(tmp_path / "c", original)
  assert apply_mod.read_tf_version(tf_dir) is None
  assert (apply_mod.read_tf_version(INSTALLED_TF_DIR) ==
          importlib.metadata.version("tensorflow"))


# ---- the program ------------------------------------------------------------


@pytest.mark.slow
def test_check_finds_installed_tensorflow_without_flags():
  result = _run("--check")
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0] == "TensorFlow: %s (%s)" % (
      importlib.metadata.version("tensorflow"), INSTALLED_TF_DIR)
  assert lines[1] == ("defect: not affected: variable creators pass the "
                      "dtype through")
  assert lines[2] == "file: %s" % INSTALLED_LOSS_SCALE
  assert lines[-1] == "status: not-applied"


@pytest.mark.slow
def test_check_apply_revert_cycle(copy, original):
  backup = copy + BACKUP_SUFFIX
  result = _run("--check", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert _status(result) == "status: not-applied"

  result = _run("--apply", "--file", copy)
  assert result.returncode == 0, result.stderr
  patched = _read(copy)
  old_lines = original.splitlines(keepends=True)
  new_lines = patched.splitlines(keepends=True)
  assert len(old_lines) == len(new_lines)
  changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b]
  assert len(changed) == 1
  old_line, new_line = old_lines[changed[0]], new_lines[changed[0]]
  assert b"good_steps" in old_line
  assert old_line.count(b"dtypes.int64") == 1
  assert new_line == old_line.replace(b"dtypes.int64", b"dtypes.int32")
  assert _read(backup) == original

  result = _run("--apply", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert "already applied" in result.stdout
  assert _read(copy) == patched
  assert _read(backup) == original

  result = _run("--check", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert _status(result) == "status: applied"
  py_compile.compile(copy, cfile=copy + "c.test", doraise=True)

  result = _run("--revert", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert _read(copy) == original
  assert not os.path.exists(backup)

  result = _run("--revert", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert "not applied" in result.stdout
  assert _read(copy) == original


@pytest.mark.slow
def test_apply_keeps_mode_removes_only_this_modules_bytecode(copy):
  os.chmod(copy, 0o640)
  cache = os.path.join(os.path.dirname(copy), "__pycache__")
  os.mkdir(cache)
  stale = os.path.join(cache, "loss_scale.cpython-311.pyc")
  other = os.path.join(cache, "loss_scale_optimizer.cpython-311.pyc")
  py_compile.compile(copy, cfile=stale, doraise=True)
  _write(other, b"not ours")

  result = _run("--apply", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert stat.S_IMODE(os.stat(copy).st_mode) == 0o640
  assert not os.path.exists(stale)
  assert _read(other) == b"not ours"
  assert sorted(os.listdir(os.path.dirname(copy))) == [
      "__pycache__", "loss_scale.py", "loss_scale.py" + BACKUP_SUFFIX]


@pytest.mark.slow
def test_existing_backup_is_never_overwritten(copy, original):
  backup = copy + BACKUP_SUFFIX
  _write(backup, b"someone else's backup\n")
  result = _run("--apply", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert _read(backup) == b"someone else's backup\n"
  assert apply_mod.patch_state(_read(copy))[0] == apply_mod.APPLIED

  # The backup is not the un-patched file: revert undoes the edit in place.
  result = _run("--revert", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert _read(copy) == original
  assert _read(backup) == b"someone else's backup\n"


def _without_good_steps(source):
  return source.replace(b"name='good_steps'", b"name='fine_steps'")


def _with_two_good_steps(source):
  return source + (b"\n\ndef _extra(self):\n  return self._add_weight(\n"
                   b"      name='good_steps', dtype=dtypes.int64, "
                   b"initial_value=0)\n")


def _with_float_good_steps(source):
  return source.replace(b"name='good_steps', dtype=dtypes.int64",
                        b"name='good_steps', dtype=dtypes.float32")


@pytest.mark.slow
@pytest.mark.parametrize("edit", [_without_good_steps, _with_two_good_steps,
                                  _with_float_good_steps])
def test_unrecognisable_file_is_refused_untouched(copy, original, edit):
  edited = edit(original)
  assert edited != original
  _write(copy, edited)
  for action in ("--apply", "--revert"):
    result = _run(action, "--file", copy)
    _assert_one_error_line(result)
    assert copy in result.stderr
    assert _read(copy) == edited
    assert not os.path.exists(copy + BACKUP_SUFFIX)
  result = _run("--check", "--file", copy)
  assert result.returncode == 0, result.stderr
  assert _status(result) == "status: unrecognised"


@pytest.mark.slow
def test_missing_file_is_a_user_error(tmp_path):
  missing = str(tmp_path / "nowhere" / "loss_scale.py")
  for action in ("--check", "--apply", "--revert"):
    result = _run(action, "--file", missing)
    _assert_one_error_line(result)
    assert missing in result.stderr
  assert not os.path.exists(os.path.dirname(missing))


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    [],
    ["--check", "--apply"],
    ["--apply", "--revert"],
    ["--check", "--file", "x.py", "--tf_dir", "y"],
])
def test_bad_flag_combinations(args):
  _assert_one_error_line(_run(*args))


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() == 0, reason="root can write any file")
def test_read_only_file_is_refused(copy, original):
  os.chmod(copy, 0o444)
  result = _run("--apply", "--file", copy)
  _assert_one_error_line(result)
  assert "not writable" in result.stderr
  assert _read(copy) == original
  assert not os.path.exists(copy + BACKUP_SUFFIX)


@pytest.mark.slow
def test_tf_dir_reports_version_and_patches_that_tree(tmp_path, original):
  tf_dir, target = _fake_tf_tree(tmp_path, original, version="1.14.0")
  result = _run("--check", "--tf_dir", tf_dir)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0] == "TensorFlow: 1.14.0 (%s)" % tf_dir
  assert lines[1].startswith("defect: affected: ")
  assert lines[2] == "file: %s" % target
  assert lines[-1] == "status: not-applied"

  result = _run("--apply", "--tf_dir", tf_dir)
  assert result.returncode == 0, result.stderr
  assert "note:" not in result.stdout
  assert apply_mod.patch_state(_read(target))[0] == apply_mod.APPLIED
  assert _read(target + BACKUP_SUFFIX) == original


@pytest.mark.slow
@pytest.mark.parametrize("setup_version,first_line,verdict", [
    ("1.15.0", "TensorFlow: 1.15.0", "defect: affected: "),
    (None, "TensorFlow: version unknown", "defect: unknown: "),
])
def test_tf_dir_without_metadata(tmp_path, original, setup_version, first_line,
                                 verdict):
  tf_dir, _ = _fake_tf_tree(tmp_path, original, setup_version=setup_version)
  result = _run("--check", "--tf_dir", tf_dir)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert lines[0] == "%s (%s)" % (first_line, tf_dir)
  assert lines[1].startswith(verdict)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
def test_patch_file_matches_the_program(tmp_path, original):
  tf_dir, target = _fake_tf_tree(tmp_path / "by_patch", original)

  def patch(*flags):
    with open(PATCH_FILE, "rb") as f:
      return subprocess.run(["patch", "-p1"] + list(flags), cwd=tf_dir,
                            stdin=f, capture_output=True, check=False)

  assert patch("--dry-run").returncode == 0
  assert _read(target) == original
  assert patch().returncode == 0
  assert _read(target) == apply_mod.with_good_steps_dtype(
      original, apply_mod.APPLIED)
  assert patch("-R").returncode == 0
  assert _read(target) == original


def test_installed_loss_scale_untouched(installed_snapshot):
  """Runs last: nothing above modified the installed TensorFlow."""
  assert _fingerprint(INSTALLED_LOSS_SCALE) == installed_snapshot
  assert not os.path.exists(INSTALLED_LOSS_SCALE + BACKUP_SUFFIX)
