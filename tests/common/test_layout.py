"""The repository's layout rules (bertkit/__init__.py states them).

Programs at the root, the library in the bertkit package by concern, imports
pointing down, no program imported by another module, the data and common
layers free of TensorFlow at import time, module-level state only where a
module's docstring declares it, and no test module imported by another.
Read from the source with `ast`, so a new module or import is checked the day
it lands.
"""
import ast
import collections
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
          "bertkit.kernels": 1, "bertkit.data": 2, "bertkit.engine": 3,
          "optimization": 4, "bertkit.tasks": 4, "bertkit.perf": 5}
PROGRAM_LAYER = 6
MAX_ROOT_FILES = 20
MAX_FUNCTION_LINES = 80
MAX_FUNCTION_PARAMETERS = 10
# Lines of a module of the package or the root: one a newcomer can read
# through to find a thing.
MAX_MODULE_LINES = 600
SIZE_REASON = "# Size:"
# How a module's docstring declares its module-level state (rule 4).
STATE_DECLARATION = "Module state:"
# Methods that change a list, dict, set or deque in place.
MUTATING_METHODS = {"append", "extend", "insert", "pop", "popitem", "remove",
                    "clear", "update", "setdefault", "add", "discard",
                    "appendleft", "popleft", "extendleft", "sort", "reverse"}
# Calls that make a mutable container (builtins and collections').
CONTAINER_CALLS = {"list", "dict", "set", "OrderedDict", "defaultdict",
                   "deque", "Counter"}


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


def _importable_modules():
  """{name Python imports it by: path} of the package's modules, the root's
  and the benchmarks' (each benchmark puts benchmarks/ on its path)."""
  modules = {name: path for path, name in _source_files() if name}
  folder = os.path.join(REPO_ROOT, "benchmarks")
  modules.update((f[:-3], os.path.join(folder, f))
                 for f in os.listdir(folder) if f.endswith(".py"))
  return modules


def _resolve(imported, modules):
  """The module of `modules` an import names (`from a.b import c` is a.b.c
  when that is a module, else a.b), or None: another library's."""
  while imported and imported not in modules:
    imported = imported.rpartition(".")[0]
  return imported or None


def _unit(name, modules):
  """The package a module belongs to (a package's __init__: the package);
  a module of the root or of benchmarks/ is a unit of its own."""
  if os.path.basename(modules[name]) == "__init__.py" or "." not in name:
    return name
  return name.rpartition(".")[0]


def _strongly_connected(graph):
  """The components of more than one node of {node: set of nodes}, each a
  sorted list (Tarjan's algorithm, without recursion)."""
  index, low, on_stack, stack, found = {}, {}, set(), [], []
  for root in sorted(graph):
    if root in index:
      continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = len(index)
    stack.append(root)
    on_stack.add(root)
    while work:
      node, successors = work[-1]
      for successor in successors:
        if successor not in index:
          index[successor] = low[successor] = len(index)
          stack.append(successor)
          on_stack.add(successor)
          work.append((successor, iter(sorted(graph.get(successor, ())))))
          break
        if successor in on_stack:
          low[node] = min(low[node], index[successor])
      else:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
          component = []
          while True:
            member = stack.pop()
            on_stack.discard(member)
            component.append(member)
            if member == node:
              break
          if len(component) > 1:
            found.append(sorted(component))
  return sorted(found)


def _import_cycles(modules):
  """One line per cycle of imports among `modules` ({name: path}): modules
  importing each other, at any depth (an import inside a function counts),
  or packages whose modules import each other's."""
  graph = {name: {_resolve(i, modules) for i in _imports(path)} - {None, name}
           for name, path in modules.items()}
  units = collections.defaultdict(set)
  for name, imported in graph.items():
    units[_unit(name, modules)].update(
        _unit(i, modules) for i in imported)
  units = {unit: imported - {unit} for unit, imported in units.items()}
  return (["modules import each other: %s" % ", ".join(c)
           for c in _strongly_connected(graph)] +
          ["packages import each other: %s" % ", ".join(c)
           for c in _strongly_connected(units)])


def test_no_import_cycles():
  """Rule 1 makes the layers a ladder; within a layer, modules and packages
  still import one way only, imports inside functions included."""
  modules = _importable_modules()
  assert {"bertkit.common.errors", "modeling", "time_to_accuracy"} <= set(
      modules)
  assert _import_cycles(modules) == []


@pytest.mark.parametrize("files,cycle", [
    # Hidden inside a function, as a lazy import hides it.
    ({"pkg/a.py": "import pkg.b\n",
      "pkg/b.py": "def f():\n  from pkg import a\n"},
     "modules import each other: pkg.a, pkg.b"),
    # Three modules round.
    ({"pkg/a.py": "from pkg.b import x\n", "pkg/b.py": "import pkg.c\n",
      "pkg/c.py": "def f():\n  import pkg.a\n"},
     "modules import each other: pkg.a, pkg.b, pkg.c"),
    # No two modules import each other, but their packages do.
    ({"pkg/x/m.py": "from pkg.y import n\n",
      "pkg/y/n.py": "X = 1\n", "pkg/y/k.py": "from pkg.x import m\n"},
     "packages import each other: pkg.x, pkg.y"),
])
def test_the_cycle_rule_finds_a_planted_cycle(tmp_path, files, cycle):
  modules = {}
  for relative, source in files.items():
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    modules[relative[:-3].replace("/", ".")] = str(path)
  assert _import_cycles(modules) == [cycle]
  # One way only, as the package's are: no cycle.
  one_way = {name: path for name, path in modules.items()
             if name != sorted(modules)[-1]}
  assert _import_cycles(one_way) == []


def _test_module_imports(tests_dir):
  """One line per module under `tests_dir` and test module it imports, at
  any depth (an import inside a function counts)."""
  paths = sorted(os.path.join(folder, name)
                 for folder, _, files in os.walk(tests_dir)
                 for name in files if name.endswith(".py"))
  test_modules = {os.path.basename(path)[:-3] for path in paths
                  if os.path.basename(path).startswith("test_")}
  return sorted({"%s imports %s" % (os.path.relpath(path, tests_dir),
                                     name.split(".")[0])
                 for path in paths for name in _imports(path)
                 if name.split(".")[0] in test_modules})


def test_no_test_module_imports_another():
  """What tests share lives in tests/conftest.py or tests/helpers/, so no
  module under tests/ imports a test module, and pytest.ini's pythonpath
  needs tests/ only."""
  tests_dir = os.path.join(REPO_ROOT, "tests")
  assert "helpers.processes.start" in _imports(
      os.path.join(tests_dir, "engine", "test_preemption.py"))
  assert _test_module_imports(tests_dir) == []


@pytest.mark.parametrize("files,found", [
    # At the top, as test modules once imported each other's helpers.
    ({"a/test_a.py": "from test_b import SAMPLE\n",
      "b/test_b.py": "SAMPLE = 1\n"},
     ["a/test_a.py imports test_b"]),
    # Hidden inside a function.
    ({"a/test_a.py": "def f():\n  import test_b\n", "b/test_b.py": ""},
     ["a/test_a.py imports test_b"]),
    # A helper module importing a test module.
    ({"helpers/h.py": "from test_b import SAMPLE\n",
      "b/test_b.py": "SAMPLE = 1\n"},
     ["helpers/h.py imports test_b"]),
])
def test_the_test_import_rule_finds_a_planted_import(tmp_path, files, found):
  for relative, source in files.items():
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
  assert _test_module_imports(str(tmp_path)) == found
  # The same import from a helpers module: nothing found.
  for relative, source in files.items():
    (tmp_path / relative).write_text(source.replace("test_b", "helpers.b"))
  assert _test_module_imports(str(tmp_path)) == []


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


def _module_header(source):
  """The lines above a module's first statement after its docstring, the
  docstring's own left out."""
  body = ast.parse(source).body
  lines = source.split("\n")
  docstring = range(0)
  if (body and isinstance(body[0], ast.Expr)
      and isinstance(body[0].value, ast.Constant)
      and isinstance(body[0].value.value, str)):
    docstring = range(body[0].lineno - 1, body[0].end_lineno)
    body = body[1:]
  end = body[0].lineno - 1 if body else len(lines)
  return [line for i, line in enumerate(lines[:end]) if i not in docstring]


def _long_modules(source_files):
  """One line per module over MAX_MODULE_LINES without a `# Size:` comment
  in its header (above its first statement after the docstring)."""
  unexplained = []
  for path, _ in source_files:
    with open(path) as f:
      source = f.read()
    length = len(source.splitlines())
    if length > MAX_MODULE_LINES and not any(
        line.strip().startswith(SIZE_REASON)
        for line in _module_header(source)):
      unexplained.append("%s (%d lines)" % (
          os.path.relpath(path, REPO_ROOT), length))
  return unexplained


def test_long_modules_say_why():
  """The package's modules and the root's (programs and upstream's API):
  over 600 lines only with a `# Size:` comment giving the reason, between
  the module docstring and the first statement."""
  library = [(path, name) for path, name in _source_files()
             if name is not None]
  assert len(library) >= 90
  assert _long_modules(library) == []


@pytest.mark.parametrize("source,explained", [
    ('"""Doc."""\n# Size: one thing, kept whole.\n\nimport os\n', True),
    ('# coding=utf-8\n# Size: one thing.\n"""Doc."""\nimport os\n', True),
    ('"""Doc.\n\n# Size: not a comment.\n"""\nimport os\n', False),
    ('"""Doc."""\nimport os\n# Size: below the first statement.\n', False),
    ('"""Doc."""\nimport os\n', False),
])
def test_a_long_module_is_explained_in_its_header_only(tmp_path, source,
                                                       explained):
  module = tmp_path / "m.py"
  module.write_text(source + "X = 1\n" * MAX_MODULE_LINES)
  assert _long_modules([(str(module), "m")]) == (
      [] if explained else ["%s (%d lines)" % (
          os.path.relpath(str(module), REPO_ROOT),
          MAX_MODULE_LINES + len(source.splitlines()))])


def _root_name(node):
  """`a` of a, a.b, a[k], a[k].b ...; None if the chain starts elsewhere."""
  while isinstance(node, (ast.Attribute, ast.Subscript)):
    node = node.value
  return node.id if isinstance(node, ast.Name) else None


def _makes_container(value):
  if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp,
                        ast.DictComp, ast.SetComp)):
    return True
  if isinstance(value, ast.Call):
    func = value.func
    name = (func.id if isinstance(func, ast.Name) else
            func.attr if isinstance(func, ast.Attribute) else None)
    return name in CONTAINER_CALLS
  return False


def _module_state(source):
  """Sorted names of the module-level state `source` keeps, as its functions
  change it.

  A name is state when a function declares it `global` (it rebinds it), or
  when the module binds it at import to a mutable container (a list, dict or
  set display or comprehension, or a call of list, dict, set or one of
  collections' containers) and a function changes that container: assigns or
  deletes an item or attribute of it (or of what it holds), or calls a
  mutating method (append, update, pop, ...) on it. Tables built at import
  and never changed afterwards, and containers local to a function, are not
  state.
  """
  tree = ast.parse(source)
  containers = set()
  for node in tree.body:
    if isinstance(node, ast.Assign) and _makes_container(node.value):
      containers.update(t.id for t in node.targets
                        if isinstance(t, ast.Name))
    elif (isinstance(node, ast.AnnAssign) and node.value is not None
          and _makes_container(node.value)
          and isinstance(node.target, ast.Name)):
      containers.add(node.target.id)
  state = set()
  functions = [n for n in ast.walk(tree)
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
  for function in functions:
    for node in ast.walk(function):
      if isinstance(node, ast.Global):
        state.update(node.names)
      targets = []
      if isinstance(node, (ast.Assign, ast.Delete)):
        targets = node.targets
      elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
      for target in targets:
        if (isinstance(target, (ast.Attribute, ast.Subscript))
            and _root_name(target) in containers):
          state.add(_root_name(target))
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr in MUTATING_METHODS
          and _root_name(node.func.value) in containers):
        state.add(_root_name(node.func.value))
  return sorted(state)


def _declares_state(source):
  """Whether the module docstring has a paragraph beginning `Module state:`."""
  docstring = ast.get_docstring(ast.parse(source)) or ""
  return any(paragraph.startswith(STATE_DECLARATION)
             for paragraph in docstring.split("\n\n"))


def test_module_state_lives_only_where_a_docstring_declares_it():
  """Rule 4: the modules keeping state are the modules declaring it, and the
  package's statement of the rule names each of them."""
  keeping, declaring = {}, set()
  for path, name in _source_files():
    with open(path) as f:
      source = f.read()
    shown = name or os.path.relpath(path, REPO_ROOT)
    state = _module_state(source)
    if state:
      keeping[shown] = state
    if _declares_state(source):
      declaring.add(shown)
  undeclared = {m: s for m, s in keeping.items() if m not in declaring}
  assert undeclared == {}, "module state without a `Module state:` paragraph"
  assert sorted(declaring - set(keeping)) == [], "declared, but no state"
  import bertkit  # pylint: disable=g-import-not-at-top
  rule = bertkit.__doc__[bertkit.__doc__.index("  4. "):]
  unnamed = [m for m in sorted(declaring)
             if m.replace("bertkit.", "", 1) not in " ".join(rule.split())]
  assert unnamed == [], "rule 4 in bertkit/__init__.py does not name them"
  assert len(declaring) >= 4


@pytest.mark.parametrize("source,state", [
    ("_X = None\ndef f():\n  global _X\n  _X = 1\n", ["_X"]),
    ("_S = {'a': None}\ndef f():\n  _S['a'] = 1\n", ["_S"]),
    ("_S = [None]\ndef f():\n  del _S[0]\n", ["_S"]),
    ("_S = {}\ndef f():\n  _S.setdefault('k', []).append(1)\n", ["_S"]),
    ("_S = {'k': []}\ndef f():\n  _S['k'].append(1)\n", ["_S"]),
    ("_S = dict()\nclass C:\n  def m(self):\n    _S.update(a=1)\n",
     ["_S"]),
    ("import collections\n_S = collections.deque()\n"
     "def f():\n  _S.appendleft(1)\n", ["_S"]),
    ("_S: dict = {}\ndef f():\n  _S['k'] += 1\n", ["_S"]),
    # Tables built at import, read by functions; a function's own list.
    ("T = {}\nT['a'] = 1\nfor k in 'bc':\n  T[k] = 2\n"
     "def f():\n  return T['a']\n", []),
    ("def f():\n  out = []\n  out.append(1)\n  return out\n", []),
    ("import os\ndef f():\n  os.environ['X'] = '1'\n", []),
])
def test_the_state_rule_finds_each_kind_of_state(source, state):
  assert _module_state(source) == state


def test_a_state_declaration_is_a_docstring_paragraph():
  assert _declares_state('"""Title.\n\nModule state: the flag; f writes it,'
                         ' g reads it.\n"""\n')
  assert not _declares_state('"""Title; no Module state: mid-line."""\n')
  assert not _declares_state("# Module state: a comment\nX = 1\n")


@pytest.mark.parametrize("name,source", [
    (None, "import run_pretraining\n"),
    ("bertkit.perf.sweep", "from run_classifier import create_model\n"),
    ("bertkit.data.packing", "from bertkit.engine.loop import runner\n"),
    ("modeling", "import optimization\n"),
    ("bertkit.engine.loop.runner", "import optimization\n"),
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
