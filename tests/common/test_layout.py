"""The repository's layout rules (bertkit/__init__.py states them).

Programs at the root, the library in the bertkit package by concern, imports
pointing down, no program imported by another module, and the data and common
layers free of TensorFlow at import time. Read from the source with `ast`, so a
new module or import is checked the day it lands.
"""
import ast
import json
import os
import re
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
API_MODULES = {"modeling", "optimization", "tokenization"}
# Lowest first; a module may import its own layer or a lower one.
# optimization.py gives upstream's names to the engine's optimizers: above
# the engine, so the package never imports it.
LAYERS = {"bertkit.common": 0, "tokenization": 1, "modeling": 1,
          "bertkit.kernels": 1, "bertkit.data": 2, "bertkit.engine": 3, "optimization": 4,
          "bertkit.tasks": 4, "bertkit.perf": 5}
PROGRAM_LAYER = 6
MAX_ROOT_FILES = 15
MAX_FUNCTION_LINES = 80
MAX_FUNCTION_PARAMETERS = 10
SIZE_REASON = "# Size:"


def _is_program(path):
  with open(path) as f:
    return "if __name__ == \"__main__\":" in f.read()


def _root_files():
  return sorted(f for f in os.listdir(REPO_ROOT) if f.endswith(".py"))


def _package_modules():
  """Dotted names of every module in bertkit, packages' __init__ included."""
  names = []
  for directory, _, files in os.walk(os.path.join(REPO_ROOT, "bertkit")):
    rel = os.path.relpath(directory, REPO_ROOT).replace(os.sep, ".")
    for f in sorted(files):
      if f.endswith(".py"):
        names.append(rel if f == "__init__.py" else rel + "." + f[:-3])
  return sorted(names)


def _source_files():
  """(path, module name or None) of every Python file outside tests."""
  out = [(os.path.join(REPO_ROOT, f), f[:-3]) for f in _root_files()]
  for name in _package_modules():
    path = os.path.join(REPO_ROOT, *name.split("."))
    path = (os.path.join(path, "__init__.py") if os.path.isdir(path)
            else path + ".py")
    out.append((path, name))
  for folder in ("benchmarks", "patches", "sample_data", "scripts"):
    for directory, _, files in os.walk(os.path.join(REPO_ROOT, folder)):
      out.extend((os.path.join(directory, f), None)
                 for f in sorted(files) if f.endswith(".py"))
  return out


def _imports(path):
  """Dotted names `path` imports (`from a import b` as a.b), at any depth."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names.update(node.module + "." + alias.name for alias in node.names)
  return names


def _layer(name, programs):
  if name in programs:
    return PROGRAM_LAYER
  for prefix in sorted(LAYERS, key=len, reverse=True):
    if name == prefix or name.startswith(prefix + "."):
      return LAYERS[prefix]
  return None


def test_root_holds_programs_and_upstreams_api_only():
  root = _root_files()
  assert len(root) <= MAX_ROOT_FILES, root
  libraries = [f for f in root if f[:-3] not in API_MODULES
               and not _is_program(os.path.join(REPO_ROOT, f))]
  assert libraries == [], "library modules at the root: %s" % libraries
  assert API_MODULES <= {f[:-3] for f in root}


def _programs():
  return {f[:-3] for f in _root_files()
          if _is_program(os.path.join(REPO_ROOT, f))}


def _violations(source_files, programs):
  """One line per import of a program or import of a higher layer."""
  wrong = []
  for path, name in source_files:
    own = PROGRAM_LAYER if name is None else _layer(name, programs)
    for imported in sorted(_imports(path)):
      if imported.split(".")[0] in programs:
        wrong.append("%s imports the program %s"
                     % (path, imported.split(".")[0]))
        continue
      theirs = _layer(imported, programs)
      if theirs is not None and theirs > own:
        wrong.append("%s (layer %d) imports %s (layer %d)"
                     % (path, own, imported, theirs))
  return wrong


def test_no_module_imports_a_program_and_imports_point_down():
  programs = _programs()
  assert {"run_pretraining", "run_classifier", "benchmark"} <= programs
  assert _violations(_source_files(), programs) == []


def test_every_package_module_imports_and_common_and_data_load_no_tensorflow():
  """One fresh interpreter per question, so nothing is imported already."""
  modules = _package_modules()
  light = [m for m in modules
           if m.startswith(("bertkit.common", "bertkit.data"))]
  assert len(light) >= 10
  script = (
      "import importlib, json, sys\n"
      "out = {}\n"
      "for name in %r:\n"
      "  importlib.import_module(name)\n"
      "  out[name] = sorted(m for m in ('tensorflow', 'horovod', 'torch')\n"
      "                     if m in sys.modules)\n"
      "print(json.dumps(out))\n")
  result = subprocess.run(
      [sys.executable, "-c", script % (light,)], cwd=REPO_ROOT,
      capture_output=True, text=True, timeout=120, check=True)
  heavy = {m: v for m, v in json.loads(result.stdout).items() if v}
  assert heavy == {}
  result = subprocess.run(
      [sys.executable, "-c", script % (modules,)], cwd=REPO_ROOT,
      capture_output=True, text=True, timeout=300,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert result.returncode == 0, result.stderr[-2000:]


def _functions(path):
  with open(path) as f:
    source = f.read()
  lines = source.split("\n")
  for node in ast.walk(ast.parse(source, path)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      args = node.args
      count = (len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
               + bool(args.vararg) + bool(args.kwarg))
      if args.args and args.args[0].arg in ("self", "cls"):
        count -= 1
      first = min([d.lineno for d in node.decorator_list] + [node.lineno])
      above = first - 2  # the line before the def (0-based)
      while above >= 0 and lines[above].strip().startswith("#"):
        above -= 1
      comment = [l.strip() for l in lines[above + 1:first - 1]]
      yield node, node.end_lineno - node.lineno + 1, count, comment


def test_long_functions_say_why():
  """Over 80 lines or 10 parameters only with a `# Size:` comment above."""
  unexplained = []
  for path, _ in _source_files():
    for node, length, count, comment in _functions(path):
      if ((length > MAX_FUNCTION_LINES or count > MAX_FUNCTION_PARAMETERS)
          and not any(l.startswith(SIZE_REASON) for l in comment)):
        unexplained.append("%s:%d %s (%d lines, %d parameters)" % (
            os.path.relpath(path, REPO_ROOT), node.lineno, node.name,
            length, count))
  assert unexplained == []


@pytest.mark.parametrize("name,source", [
    (None, "import run_pretraining\n"),
    ("bertkit.perf.sweep", "from run_classifier import create_model\n"),
    ("bertkit.data.packing", "from bertkit.engine import runner\n"),
    ("modeling", "import optimization\n"),
    ("bertkit.engine.runner", "import optimization\n"),
    ("bertkit.common.errors", "def f():\n  from bertkit.data import packing\n"),
])
def test_the_import_rule_catches_each_kind_of_violation(tmp_path, name, source):
  module = tmp_path / "m.py"
  module.write_text(source)
  assert len(_violations([(str(module), name)], _programs())) == 1


def test_every_slurm_cluster_module_shares_one_xdist_work_unit():
  """The session's Slurm cluster is started once per worker that runs a
  test using it: every such module must fall into one work unit."""
  from conftest import xdist_work_unit
  tests_dir = os.path.join(REPO_ROOT, "tests")
  users = set()
  for folder, _, files in os.walk(tests_dir):
    for name in files:
      if name.startswith("test_") and name.endswith(".py"):
        path = os.path.join(folder, name)
        with open(path) as f:
          # A test or fixture taking the cluster as an argument.
          if re.search(r"def \w+\([^)]*\bslurm_cluster\b", f.read()):
            users.add(os.path.relpath(path, REPO_ROOT))
  assert len(users) >= 2, users
  assert {xdist_work_unit(path + "::test_x") for path in users} == {"slurm"}
  # Every other module is a unit of its own: its module fixtures build once.
  assert xdist_work_unit("tests/engine/test_byteps.py::test_x[a-b]") == (
      "tests/engine/test_byteps.py")
