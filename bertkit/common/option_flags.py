"""A program's absl flags, made from its options dataclass and read back.

Each field declared with option_fields.option becomes one flag of the same
name, default and help (its Range and choices are checked when the options
are built, or by absl for an enum); `options_from_flags` turns the parsed
flags into the dataclass. Flags are only ever made here, so a program's flags
are exactly its options' fields (tests/programs/test_program_options.py).

absl files a flag under the module that defines it, and `--help` shows those
of the main module: this module disclaims its definitions, so that they are
filed under the program that asks for them.
"""

from absl import flags

from bertkit.common import flag_parsing
from bertkit.common import option_fields
from bertkit.common.errors import UserError

flags.disclaim_key_flags()


def _help(field):
  """The flag's help; for a default of None, what that means (absl shows
  the other defaults itself)."""
  if option_fields.is_required(field):
    return "%s (required)" % field.metadata["help"]
  if field.default is None:
    return "%s (default: %s)" % (field.metadata["help"],
                                 field.metadata["unset"])
  return field.metadata["help"]


def define(cls, flag_values=flags.FLAGS):
  """Defines a flag for every option of `cls` (options dataclasses nested
  in it included).

  Args:
    cls: an options dataclass whose fields were declared with
      option_fields.option.
    flag_values: where to define them (absl's FLAGS for a program).

  Raises:
    ValueError: a field of a type no flag holds, or two fields of one name.
  """
  for field, kind in option_fields.option_fields(cls):
    name = field.name
    default = None if option_fields.is_required(field) else field.default
    if field.metadata.get("parse"):
      if default is not None:
        raise ValueError("option %s with a parse function defaults to None"
                         % name)
      kind = str
    help_text = _help(field)
    if name in flag_values:
      raise ValueError("two options named %s in %s" % (name, cls.__name__))
    if field.metadata.get("choices"):
      flags.DEFINE_enum(name, default, field.metadata["choices"], help_text,
                        flag_values=flag_values)
    elif kind is bool:
      flags.DEFINE_bool(name, default, help_text, flag_values=flag_values)
    elif kind is int:
      flags.DEFINE_integer(name, default, help_text, flag_values=flag_values)
    elif kind is float:
      flags.DEFINE_float(name, default, help_text, flag_values=flag_values)
    elif kind is str:
      flags.DEFINE_string(name, default, help_text, flag_values=flag_values)
    elif _is_tuple_of_str(kind):
      flags.DEFINE_list(name, None if default is None else list(default),
                        help_text, flag_values=flag_values)
    else:
      raise ValueError("no flag holds option %s of type %s" % (name, kind))


def _is_tuple_of_str(kind):
  return getattr(kind, "__origin__", None) is tuple and kind.__args__ in (
      (str, Ellipsis),)


def values_of(cls, flag_values=flags.FLAGS):
  """{option name: value} of the parsed flags of `cls`'s options: a list
  flag's value as a tuple, a `parse` option's string parsed."""
  values = {}
  for field, kind in option_fields.option_fields(cls):
    value = flag_values[field.name].value
    parse = field.metadata.get("parse")
    if parse is not None:
      value = parse(value) if flag_values[field.name].present else (
          field.default)
    elif value is not None and _is_tuple_of_str(kind):
      value = tuple(value)
    values[field.name] = value
  return values


def options_from_flags(cls, flag_values=flags.FLAGS):
  """The options dataclass `cls` of the parsed flags, checked.

  Raises:
    UserError: a value out of its range or contradicting another.
  """
  return option_fields.build(cls, values_of(cls, flag_values))


def options_from_args(cls, args):
  """The options `cls` of command-line arguments, parsed as the program
  parses them but into flags of their own (no program state touched).

  Args:
    cls: an options dataclass.
    args: the arguments without the program's name ("--name=value", ...).

  Raises:
    UserError: what the program refuses in one `error:` line: an argument
      absl refuses (flag_parsing.py), a value out of its range or
      contradicting another.
  """
  flag_values = flags.FlagValues()
  define(cls, flag_values)
  try:
    flag_parsing.parse(["program"] + list(args), flag_values)
  except flag_parsing.CommandLineError as e:
    raise UserError(str(e)) from None
  return options_from_flags(cls, flag_values)
