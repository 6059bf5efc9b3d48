"""Reading a program's command line: absl's parsing, refusing what absl would
silently ignore (a stray argument, a flagfile line without its `--`) or
accept although no program can use it (a float flag given nan or inf).

TensorFlow-free, so that a mistyped command fails in a fraction of a second;
`parse_flags`, every program's absl flag parser, turns a CommandLineError
into one `error:` line.
"""

import math
import os
import sys

from absl import flags

from bertkit.common import errors
from bertkit.common import text_files

_FLAG_FORM = "flags take the form --name=value"


class CommandLineError(Exception):
  """The command line holds something no program understands; the message
  names it."""


def parse(argv, flag_values):
  """Parses `argv` into `flag_values` as absl does, then refuses the rest.

  Args:
    argv: the program's argv, its name first.
    flag_values: the absl FlagValues holding the program's flags.

  Returns:
    argv[0] and the arguments after a lone `--` (flags run_glue.py passes on
    to run_classifier.py), as absl returns them.

  Raises:
    CommandLineError: an unreadable flagfile or a line of one that is no flag,
      a value absl refuses, an argument that is no flag, or a float flag
      given a value that is not finite.
  """
  check_flagfiles(argv[1:], flag_values)
  try:
    rest = flag_values(argv)
  except (flags.Error, ValueError) as e:  # ValueError: --nodo_train=x
    # absl puts each missing required flag on a line of its own.
    raise CommandLineError("; ".join(str(e).splitlines())) from None
  refuse_positional(rest[1:])
  refuse_non_finite(flag_values)
  return rest


def check_flagfiles(args, flag_values):
  """Checks the flagfiles that `args` (argv without the program) name.

  absl reads `--flagfile=PATH` and `--flagfile PATH` up to a lone `--`, and
  nested `--flagfile=PATH` lines; it drops a line without a leading `-`
  (`learning_rate=1e-4`) into the unparsed arguments, where no program looks.

  Raises:
    CommandLineError: a flagfile cannot be read, or holds a line that is
      neither a flag, the value of the flag on the line before (absl's
      `--name` then `value`), a comment (`#`, `//`) nor blank.
  """
  i = 0
  while i < len(args) and args[i] != "--":
    if args[i] in ("--flagfile", "-flagfile") and i + 1 < len(args):
      _check_flagfile(os.path.expanduser(args[i + 1]), flag_values, [], "")
      i += 1
    else:
      path = _flagfile_named(args[i])
      if path is not None:
        _check_flagfile(path, flag_values, [], "")
    i += 1


def _flagfile_named(text):
  """The path `--flagfile=PATH` or `-flagfile=PATH` names, as absl reads it;
  None for any other text."""
  for prefix in ("--flagfile=", "-flagfile="):
    if text.startswith(prefix):
      return os.path.expanduser(text[len(prefix):].strip())
  return None


def _check_flagfile(path, flag_values, including, named_in):
  """check_flagfiles for one file; `including` are the files naming it (absl
  skips a file that includes itself), `named_in` where it is named."""
  if not path or path in including:  # absl ignores both
    return
  try:
    # Its lines as absl reads them, a byte-order mark included.
    with text_files.open_text(path, "--flagfile=%s%s" % (path, named_in),
                              keep_bom=True) as f:
      lines = f.readlines()
  except FileNotFoundError:
    raise CommandLineError("--flagfile=%s%s: no such file"
                           % (path, named_in)) from None
  except OSError as e:
    raise CommandLineError("--flagfile=%s%s cannot be read: %s" % (
        path, named_in, e.strerror or e)) from None
  except errors.UserError as e:  # not UTF-8
    raise CommandLineError(str(e)) from None
  awaits_value = False
  for number, line in enumerate(lines, 1):
    # absl's own tests, on the line as read: an indented `#` is no comment.
    if line.isspace() or line.startswith(("#", "//")):
      continue
    nested = _flagfile_named(line)
    if nested is not None:
      _check_flagfile(nested, flag_values, including + [path],
                      " (%s line %d)" % (path, number))
      awaits_value = False
      continue
    text = line.strip()
    if text.startswith("-"):
      awaits_value = _awaits_value(text, flag_values)
    elif awaits_value:
      awaits_value = False
    else:
      raise CommandLineError("--flagfile=%s line %d: %r is not a flag; %s"
                             % (path, number, text, _FLAG_FORM))


def _awaits_value(text, flag_values):
  """Whether absl takes the next argument as the value of flag `text`: it
  is `--name` without `=`, of a known flag that is not boolean."""
  name = text[2:] if text.startswith("--") else text[1:]
  return ("=" not in name and name in flag_values
          and not flag_values[name].boolean)


def refuse_positional(args):
  """Raises CommandLineError for the first of `args` (what absl left
  unparsed) that is not a flag: no program takes positional arguments, and
  `--do_train false` would otherwise train."""
  for arg in args:
    if arg == "-" or not arg.startswith("-"):
      raise CommandLineError("unexpected argument %r: %s" % (arg, _FLAG_FORM))


def refuse_non_finite(flag_values):
  """Raises CommandLineError for a float flag given on the command line a
  value that is not finite (nan, inf, 1e999): absl's FloatParser takes them,
  and every such flag is a rate, a size or a time that nan or inf turns
  into a run that ends in a traceback or never ends."""
  for name in sorted(flag_values):
    flag = flag_values[name]
    if (name != flag.name or not flag.present
        or not isinstance(flag.parser, flags.FloatParser)):
      continue
    values = flag.value if isinstance(flag.value, list) else [flag.value]
    for value in values:
      if value is not None and not math.isfinite(value):
        raise CommandLineError("--%s=%r is not a finite number"
                               % (name, value))


def parse_flags(argv):
  """absl's flag parser for `app.run(..., flags_parser=parse_flags)`, shared
  by every program: what absl refuses (an enum outside its choices, a number
  that is not one, an unknown flag) and what it would let through unnoticed
  (a stray argument, a flagfile line without `--`, a missing flagfile, a
  float flag given nan or inf) give one `error:` line and
  exit 2, as every other bad input does, before the program's main runs.
  --help (and --helpshort, --helpfull, --helpxml) print what was asked
  for and exit 0: absl exits 1 after them, but help given is no failure."""
  try:
    return parse(argv, flags.FLAGS)
  except CommandLineError as e:
    print("error: %s" % e, file=sys.stderr, flush=True)
    sys.exit(errors.EXIT_USER_ERROR)
  except SystemExit as e:  # absl's help flags are the only ones that exit
    sys.exit(0 if e.code == 1 else e.code)
