"""Each program's flags are exactly its options' fields, made from them
(common/option_flags.py), and its --help lists every option with its
default. Read from the programs as launched: a flag defined by hand
anywhere on a program's way to main, or a field no flag sets, fails here.
Every program, the benchmarks' too, answers --help with exit 0."""

import json
import os
import re

import pytest

from bertkit.common import option_fields
from conftest import PROGRAM_OPTIONS, REPO_ROOT, run_program

# Runs PROGRAM up to absl's app.run, then prints as JSON the flags filed
# under the program itself (absl files a flag under the module that asks
# for it; the option machinery disclaims its own definitions).
_PROGRAM_FLAGS = """
import json, runpy, sys
from absl import app, flags

def report(main, **kwargs):
  print(json.dumps(sorted(
      f.name for f in flags.FLAGS.flags_by_module_dict().get(sys.argv[0], []))))

app.run = report
sys.argv = sys.argv[1:]
sys.path.insert(0, '.')
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def field_names(program):
  cls = PROGRAM_OPTIONS[program[:-len(".py")]]()
  return sorted(field.name for field, _ in option_fields.option_fields(cls))


@pytest.mark.parametrize("program", sorted(p + ".py" for p in PROGRAM_OPTIONS))
def test_a_programs_flags_are_its_options_fields(program):
  result = run_program(["-c", _PROGRAM_FLAGS, program], timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  assert json.loads(result.stdout.splitlines()[-1]) == field_names(program)


def help_entries(text, program):
  """{flag: its help} of the flags --help lists under `program`."""
  section = text.split("\n%s:\n" % program, 1)[1]
  section = re.split(r"\n\S", section, 1)[0]
  entries = re.split(r"\n  --", "\n" + section.strip("\n"))[1:]
  found = {}
  for entry in entries:
    name = re.match(r"(?:\[no\])?(\w+)", entry).group(1)
    found[name] = " ".join(entry.split())
  return found


def launched_programs():
  """Every program at the root and in benchmarks/, found by listing the
  files: a .py file that runs as a script (`if __name__ == "__main__":`)."""
  found = []
  for folder in ("", "benchmarks"):
    for name in sorted(os.listdir(os.path.join(REPO_ROOT, folder))):
      path = os.path.join(folder, name)
      if name.endswith(".py"):
        with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
          if 'if __name__ == "__main__":' in f.read():
            found.append(path)
  return found


def argparse_flags(program):
  """The flags (and positional arguments) a benchmark program's source
  gives argparse by name: `add_argument("--name", ...)`, `add("--name")`."""
  with open(os.path.join(REPO_ROOT, program), encoding="utf-8") as f:
    return sorted(set(re.findall(r'\badd(?:_argument)?\(\s*"([-\w]+)"',
                                 f.read())))


def test_the_programs_are_found_by_listing_them():
  programs = launched_programs()
  assert sorted(p for p in programs if "/" not in p) == sorted(
      p + ".py" for p in PROGRAM_OPTIONS)
  assert {"benchmarks/time_to_accuracy.py", "benchmarks/seeded_comparison.py",
          "benchmarks/pytorch_peer.py"} <= set(programs)
  assert "benchmarks/startup_data.py" not in programs  # a module, no program


@pytest.mark.parametrize("program", launched_programs())
def test_help_exits_0_and_lists_every_flag(program):
  """As launched: exit 0, no traceback; a root program lists each option
  with its default, a benchmark every flag its parser is given."""
  result = run_program([program, "--help"], timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  if "/" in program:
    flags = argparse_flags(program)
    assert flags, program
    for flag in flags:
      assert flag in result.stdout, flag
    return
  assert "Try --helpfull" in result.stdout
  entries = help_entries(result.stdout, program)
  assert sorted(entries) == field_names(program)
  without_default = [name for name, text in entries.items()
                     if "(default: " not in text and "(required)" not in text]
  assert without_default == []
