"""Options declared once: each field of an options dataclass says its flag.

A program's options are a frozen dataclass whose every field is declared
with `option`: its default, its help, its range or choices. The program's
absl flags are made from those fields (option_flags.py) and read back into
the dataclass, so a flag and its option cannot drift apart; a field's name is
its flag's, so a message about a field names the flag a user typed.

Every check lives here, once: `check_fields` applies each field's range and
choices, refuses NaN and infinity in every float and a missing required
value, when an option is built; rules between fields are the dataclass's
`__post_init__`. Nothing here imports TensorFlow or absl, so a bad value is
refused before either loads and tests build options in-process.
"""

import dataclasses
import math
import typing
from typing import Optional

from bertkit.common.errors import UserError

# The `default` of a required option: its flag has no default, and building
# the options without a value is one "--NAME is required" line.
REQUIRED = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Range:
  """The values a numeric option takes: low <= value (< when low_open), and
  value <= high (< when high_open); None: no bound on that side."""
  low: Optional[float] = None
  high: Optional[float] = None
  low_open: bool = False
  high_open: bool = False

  def problem(self, name, value):
    """The message for `value` of option `name` outside the range, or None."""
    too_low = self.low is not None and (
        value <= self.low if self.low_open else value < self.low)
    too_high = self.high is not None and (
        value >= self.high if self.high_open else value > self.high)
    if not (too_low or too_high):
      return None
    if self.high is None:
      return "--%s must be %s %s, got %r" % (
          name, ">" if self.low_open else ">=", _number(self.low), value)
    return "--%s=%r is out of range; expected %s%s %s %s%s" % (
        name, value,
        "" if self.low is None else _number(self.low) + " ",
        "" if self.low is None else ("<" if self.low_open else "<="),
        name, "<" if self.high_open else "<=", " " + _number(self.high))


def _number(bound):
  return "%d" % bound if float(bound).is_integer() else "%g" % bound


AT_LEAST_ONE = dict(low=1)
NOT_NEGATIVE = dict(low=0)
POSITIVE = dict(low=0, low_open=True)
PROBABILITY = dict(low=0, high=1, high_open=True)  # 0 <= p < 1
FRACTION = dict(low=0, high=1)  # 0 <= f <= 1


# What a path option names (`option(..., path=FILE)`): checked, when given,
# before TensorFlow is imported (file_patterns.check_paths).
FILE = "file"
DIRECTORY = "directory"


# Size: the keyword arguments are what a field can say of its flag.
def option(default, help_text, *, choices=None, unset=None, parse=None,
           path=None, **bounds):
  """A dataclass field that declares one option and its flag.

  Args:
    default: the value when the flag is not given; REQUIRED: none, the flag
      must be given.
    help_text: the flag's help.
    choices: the values a string option takes (its flag is an enum).
    unset: for a default of None, what not giving the flag means ("the
      --init_checkpoint directory's"); --help shows it as the default.
    parse: function(the flag's string) -> the field's value, for a value a
      plain flag type cannot hold ("A,B" of --profile_steps); raises
      UserError.
    path: FILE or DIRECTORY: the option names a local one (or a URL) that
      must exist when given.
    **bounds: the Range of a numeric option (None, where it is the default,
      means "not given" and is not checked).

  Returns:
    A dataclasses.field.
  """
  if default is None and unset is None:
    raise ValueError("an option defaulting to None says what that means "
                     "(unset=...): %r" % help_text)
  metadata = {"help": help_text, "unset": unset, "parse": parse,
              "path": path,
              "choices": tuple(choices) if choices else None,
              "range": Range(**bounds) if bounds else None}
  if default is REQUIRED:
    return dataclasses.field(metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def is_required(field):
  """Whether a field must be given a value (declared without a default)."""
  return (field.default is dataclasses.MISSING and
          field.default_factory is dataclasses.MISSING)


def check_fields(options):
  """Refuses a missing required value, a value outside its field's choices
  or Range, and a float that is not finite.

  Raises:
    UserError: naming the flag of the first field that is wrong.
  """
  for field in dataclasses.fields(options):
    value = getattr(options, field.name)
    if dataclasses.is_dataclass(value):
      continue
    if is_required(field) and value in (None, "", ()):
      raise UserError("--%s is required" % field.name)
    choices = field.metadata.get("choices")
    if choices and value is not None:
      one_of(field.name, value, choices)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      continue
    if isinstance(value, float) and not math.isfinite(value):
      raise UserError("--%s=%r is not a finite number" % (field.name, value))
    bounds = field.metadata.get("range")
    problem = bounds and bounds.problem(field.name, value)
    if problem:
      raise UserError(problem)


def one_of(name, value, choices):
  """Refuses `value` of option `name` outside `choices`."""
  if value not in choices:
    raise UserError("--%s=%s is not one of %s" % (name, value,
                                                  ", ".join(choices)))


def paths(options):
  """(name, value, FILE or DIRECTORY) of every path option given a value, in
  `options` and the options dataclasses it holds."""
  found = []
  for field in dataclasses.fields(options):
    value = getattr(options, field.name)
    if dataclasses.is_dataclass(value):
      found.extend(paths(value))
    elif value and field.metadata.get("path"):
      found.append((field.name, value, field.metadata["path"]))
  return found


def option_fields(cls):
  """(field, type) of every option of `cls` and of the options dataclasses
  its fields hold (RunOptions' optimizer, ...), in declaration order; the
  type without Optional."""
  hints = typing.get_type_hints(cls)
  found = []
  for field in dataclasses.fields(cls):
    hint = hints[field.name]
    if dataclasses.is_dataclass(hint):
      found.extend(option_fields(hint))
      continue
    inner = [t for t in typing.get_args(hint) if t is not type(None)]
    if typing.get_origin(hint) is typing.Union and len(inner) == 1:
      hint = inner[0]
    found.append((field, hint))
  return found


def build(cls, values, **given):
  """An options dataclass of `cls` from one flat mapping of values.

  Each field takes the value of its name, a field that is itself an options
  dataclass (RunOptions' optimizer, ...; PretrainingOptions' run) is built
  from the same mapping, and a field without a value keeps its default. The
  dataclass checks itself, once.

  Args:
    cls: an options dataclass.
    values: {name: value}, e.g. every parsed flag's.
    **given: field values that win over `values`.

  Raises:
    UserError: a value out of its range or contradicting another.
  """
  hints = typing.get_type_hints(cls)
  fields = {}
  for field in dataclasses.fields(cls):
    if field.name in given:
      fields[field.name] = given[field.name]
    elif dataclasses.is_dataclass(hints[field.name]):
      fields[field.name] = build(hints[field.name], values)
    elif field.name in values:
      fields[field.name] = values[field.name]
    elif is_required(field):
      fields[field.name] = None  # check_fields names it
  return cls(**fields)
