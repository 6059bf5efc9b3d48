"""The command line every program reads through flag_parsing.parse_flags
(bertkit/common/flag_parsing.py): a stray argument, a float flag given nan or
inf, a flagfile line without its `--` and a missing flagfile are one `error:`
line and exit 2, before the program's main runs."""

import json

from absl import flags
import pytest

from bertkit.common import flag_parsing
from conftest import (RUN_AND_REPORT_TENSORFLOW, expect_user_error,
                      run_program)

# Every program, with flags that get it past its required options (checked
# when its options are built, after the command line's checks under test).
PROGRAMS = {
    "run_pretraining.py": [],
    "run_classifier.py": [],
    "run_squad.py": [],
    "run_ner.py": [],
    "run_swag.py": [],
    "run_rerank.py": [],
    "run_bm25.py": [],
    "run_glue.py": [],
    "create_pretraining_data.py": ["--input_file=in.txt",
                                   "--vocab_file=vocab.txt"],
    "create_vocab.py": ["--input_file=in.txt", "--output_file=vocab.txt"],
    "export_checkpoint.py": [],
    "extract_features.py": [],
    "two_phase.py": [],
    "benchmark.py": [],
}

# Programs that import TensorFlow before parsing their flags: none (every
# program's options are TensorFlow-free).
IMPORTS_TENSORFLOW_FIRST = set()


# Runs PROGRAM up to absl's app.run, then prints as JSON, for every flag it
# defined that holds a float, what flag_parsing.parse says of `--NAME=nan`
# (null: nothing). Each flag is parsed alone into a fresh FlagValues, so that
# flags the program requires do not get in the way.
_FLOAT_FLAGS_REFUSING_NAN = """
import json, runpy, sys
from absl import app, flags
from bertkit.common import flag_parsing

def report(main, **kwargs):
  said = {}
  for name in flags.FLAGS:
    flag = flags.FLAGS[name]
    if name == flag.name and (isinstance(flag.default, float) or
                              isinstance(flag.parser, flags.FloatParser)):
      alone = flags.FlagValues()
      alone[name] = flag
      try:
        flag_parsing.parse(['prog', '--%s=nan' % name], alone)
        said[name] = None
      except flag_parsing.CommandLineError as e:
        said[name] = str(e)
  print(json.dumps(said))

app.run = report
sys.argv = sys.argv[1:]
sys.path.insert(0, '.')
runpy.run_path(sys.argv[0], run_name='__main__')
"""


def launch(program, *args):
  """Runs `program` with its required flags and `args`; returns the result
  and whether TensorFlow was imported."""
  result = run_program(["-c", RUN_AND_REPORT_TENSORFLOW, program] +
                       PROGRAMS[program] + list(args), timeout=120)
  last = result.stdout.splitlines()[-1]
  assert last.startswith("tensorflow imported: "), result.stdout
  return result, last == "tensorflow imported: True"


def fresh_flags():
  """A FlagValues with a float flag, one without default, a string and a
  boolean flag, as programs define them."""
  flag_values = flags.FlagValues()
  flags.DEFINE_float("learning_rate", 1e-4, "", flag_values=flag_values)
  flags.DEFINE_float("clip_norm", None, "", lower_bound=0.0,
                     flag_values=flag_values)
  flags.DEFINE_string("output_dir", None, "", flag_values=flag_values)
  flags.DEFINE_bool("do_train", False, "", flag_values=flag_values)
  return flag_values


def refusal(*args, flag_values=None):
  """What flag_parsing.parse says of `prog ARGS`, asserting it refuses."""
  with pytest.raises(flag_parsing.CommandLineError) as raised:
    flag_parsing.parse(["prog"] + list(args), flag_values or fresh_flags())
  return str(raised.value)


# ------------------------------------------------------ non-finite floats


@pytest.mark.parametrize("text,shown", [
    ("nan", "nan"), ("NaN", "nan"), ("-nan", "nan"), ("inf", "inf"),
    ("INF", "inf"), ("+inf", "inf"), ("-inf", "-inf"), ("Infinity", "inf"),
    ("-infinity", "-inf"), ("1e999", "inf")])
def test_a_float_flag_that_is_not_finite_is_refused(text, shown):
  assert refusal("--learning_rate=" + text) == (
      "--learning_rate=%s is not a finite number" % shown)


@pytest.mark.parametrize("args,shown", [(["--clip_norm=nan"], "nan"),
                                        (["--clip_norm", "inf"], "inf")])
def test_a_float_flag_without_default_is_checked_too(args, shown):
  assert refusal(*args) == "--clip_norm=%s is not a finite number" % shown


def test_finite_floats_and_a_non_finite_default_pass():
  flag_values = fresh_flags()
  flags.DEFINE_float("budget", float("inf"), "", flag_values=flag_values)
  assert flag_parsing.parse(
      ["prog", "--learning_rate=-1e-3", "--clip_norm=0", "--do_train"],
      flag_values) == ["prog"]
  assert (flag_values.learning_rate, flag_values.clip_norm) == (-1e-3, 0.0)


# ---------------------------------------------------- stray arguments


@pytest.mark.parametrize("args,stray", [
    (["stray"], "stray"),
    (["--do_train", "stray", "--output_dir=out"], "stray"),
    # A boolean flag takes no separate value: this would train.
    (["--do_train", "false"], "false"),
    (["--do_train", "--", "stray"], "stray"),
    (["-"], "-")])
def test_an_argument_that_is_no_flag_is_refused(args, stray):
  assert refusal(*args) == (
      "unexpected argument %r: flags take the form --name=value" % stray)


def test_flags_after_a_lone_dash_dash_are_returned_for_the_program():
  flag_values = fresh_flags()
  assert flag_parsing.parse(
      ["prog", "--output_dir", "out", "--", "--num_train_epochs=2"],
      flag_values) == ["prog", "--num_train_epochs=2"]
  assert flag_values.output_dir == "out"


# --------------------------------------------------------------- flagfiles


def test_absl_alone_drops_a_flagfile_line_without_dashes(tmp_path):
  flagfile = tmp_path / "run.flags"
  flagfile.write_text("learning_rate=1e-2\n")
  flag_values = fresh_flags()
  assert flag_values(["prog", "--flagfile=%s" % flagfile]) == [
      "prog", "learning_rate=1e-2"]
  assert flag_values.learning_rate == 1e-4


def test_a_flagfile_line_without_dashes_is_refused_with_file_and_line(
    tmp_path):
  flagfile = tmp_path / "run.flags"
  flagfile.write_text("# a recipe\n\n--do_train\nlearning_rate=1e-2\n")
  assert refusal("--flagfile=%s" % flagfile) == (
      "--flagfile=%s line 4: 'learning_rate=1e-2' is not a flag; flags take "
      "the form --name=value" % flagfile)


def test_an_indented_comment_is_no_comment_to_absl(tmp_path):
  flagfile = tmp_path / "run.flags"
  flagfile.write_text("--do_train\n  # indented\n")
  assert refusal("--flagfile", str(flagfile)) == (
      "--flagfile=%s line 2: '# indented' is not a flag; flags take the "
      "form --name=value" % flagfile)


def test_comments_blank_lines_and_values_on_their_own_line_are_read(
    tmp_path):
  flagfile = tmp_path / "run.flags"
  flagfile.write_text("# lr from the paper\n// absl's other comment\n\n"
                      "   \n--learning_rate=2e-5\n--output_dir\n/tmp/out\n"
                      "  --do_train\n")
  flag_values = fresh_flags()
  assert flag_parsing.parse(["prog", "--flagfile=%s" % flagfile],
                            flag_values) == ["prog"]
  assert (flag_values.learning_rate, flag_values.output_dir,
          flag_values.do_train) == (2e-5, "/tmp/out", True)


def test_a_nested_flagfile_is_checked_and_named(tmp_path):
  inner = tmp_path / "inner.flags"
  inner.write_text("--do_train\n\nclip_norm=1\n")
  outer = tmp_path / "outer.flags"
  outer.write_text("--learning_rate=1e-3\n--flagfile=%s\n" % inner)
  assert refusal("--flagfile=%s" % outer) == (
      "--flagfile=%s line 3: 'clip_norm=1' is not a flag; flags take the "
      "form --name=value" % inner)


def test_a_flagfile_including_itself_is_read_once_as_absl_does(tmp_path):
  flagfile = tmp_path / "run.flags"
  flagfile.write_text("--flagfile=%s\n--do_train\n" % flagfile)
  flag_values = fresh_flags()
  assert flag_parsing.parse(["prog", "--flagfile=%s" % flagfile],
                            flag_values) == ["prog"]
  assert flag_values.do_train


@pytest.mark.parametrize("form", ["--flagfile=%s", "-flagfile=%s",
                                  "--flagfile %s"])
def test_a_missing_flagfile_is_one_clean_line(tmp_path, form):
  path = tmp_path / "none.flags"
  assert refusal(*(form % path).split(" ")) == (
      "--flagfile=%s: no such file" % path)


def test_a_missing_nested_flagfile_names_where_it_is_named(tmp_path):
  outer = tmp_path / "outer.flags"
  outer.write_text("--do_train\n--flagfile=%s/base.flags\n" % tmp_path)
  assert refusal("--flagfile=%s" % outer) == (
      "--flagfile=%s/base.flags (%s line 2): no such file" % (tmp_path, outer))


def test_a_directory_as_flagfile_cannot_be_read(tmp_path):
  assert refusal("--flagfile=%s" % tmp_path) == (
      "--flagfile=%s cannot be read: Is a directory" % tmp_path)


def test_a_flagfile_that_is_not_utf8_names_its_line(tmp_path):
  inner = tmp_path / "base.flags"
  inner.write_bytes(b"--do_train\n--learning_rate=1e-4\n--output_dir=caf\xe9\n")
  outer = tmp_path / "run.flags"
  outer.write_text("--do_train\n--flagfile=%s\n" % inner)
  expected = ("line 3: not valid UTF-8 (byte 0xe9 at column 17, byte offset "
              "48); save the file as UTF-8")
  assert refusal("--flagfile=%s" % inner) == "--flagfile=%s %s" % (
      inner, expected)
  assert refusal("--flagfile=%s" % outer) == (
      "--flagfile=%s (%s line 2) %s" % (inner, outer, expected))


def test_a_flagfile_keeps_its_byte_order_mark_as_absl_reads_it(tmp_path):
  flagfile = tmp_path / "run.flags"
  flagfile.write_bytes(b"\xef\xbb\xbf--do_train\n")
  assert refusal("--flagfile=%s" % flagfile) == (
      "--flagfile=%s line 1: '\\ufeff--do_train' is not a flag; flags take "
      "the form --name=value" % flagfile)


def test_a_flagfile_after_a_lone_dash_dash_is_for_the_program(tmp_path):
  assert flag_parsing.parse(
      ["prog", "--", "--flagfile=%s/none.flags" % tmp_path],
      fresh_flags()) == ["prog", "--flagfile=%s/none.flags" % tmp_path]


# ------------------------------------------------------ absl's own refusals


def test_several_missing_required_flags_are_one_line():
  flag_values = fresh_flags()
  flags.mark_flags_as_required(["output_dir", "clip_norm"],
                               flag_values=flag_values)
  assert refusal(flag_values=flag_values) == (
      "flag --output_dir=None: Flag --output_dir must have a value other "
      "than None.; flag --clip_norm=None: Flag --clip_norm must have a value "
      "other than None.")


def test_a_negated_boolean_with_a_value_is_refused():
  assert refusal("--nodo_train=1") == "--nodo_train=1 does not take an argument"


# ----------------------------------------------- every program, as launched


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_program_refuses_a_stray_argument(program):
  result, imported_tensorflow = launch(program, "stray")
  assert expect_user_error(result) == (
      "error: unexpected argument 'stray': flags take the form --name=value")
  assert imported_tensorflow == (program in IMPORTS_TENSORFLOW_FIRST)


# run_glue.py, create_vocab.py and export_checkpoint.py take no float flag
# (test_every_float_flag_of_every_program_refuses_nan checks that).
@pytest.mark.parametrize("program,flag", [
    ("run_pretraining.py", "train_time_budget_hours"),
    ("run_pretraining.py", "adam_epsilon"),
    ("run_pretraining.py", "clip_norm"),
    ("run_classifier.py", "num_train_epochs"),
    ("run_squad.py", "null_score_diff_threshold"),
    ("create_pretraining_data.py", "masked_lm_prob"),
    ("two_phase.py", "learning_rate"),
    ("benchmark.py", "peak_tflops")])
def test_every_program_refuses_a_float_flag_given_nan(program, flag):
  result, imported_tensorflow = launch(program, "--%s=NaN" % flag)
  assert expect_user_error(result) == (
      "error: --%s=nan is not a finite number" % flag)
  assert imported_tensorflow == (program in IMPORTS_TENSORFLOW_FIRST)


def test_a_program_names_a_bad_flagfile_line_and_a_missing_flagfile(
    tmp_path):
  flagfile = tmp_path / "run.flags"
  flagfile.write_text("--do_train\nlearning_rate=1e-4\n")
  result, imported_tensorflow = launch("run_pretraining.py",
                                       "--flagfile=%s" % flagfile)
  assert expect_user_error(result) == (
      "error: --flagfile=%s line 2: 'learning_rate=1e-4' is not a flag; "
      "flags take the form --name=value" % flagfile)
  assert not imported_tensorflow
  result, imported_tensorflow = launch("run_classifier.py",
                                       "--flagfile=%s/none.flags" % tmp_path)
  assert expect_user_error(result) == (
      "error: --flagfile=%s/none.flags: no such file" % tmp_path)
  assert not imported_tensorflow


# Float flags each program is known to take (the enumeration finds them),
# and the programs that take none.
FLOAT_FLAGS_AMONG = {
    "run_pretraining.py": {"train_time_budget_hours", "adam_epsilon",
                           "clip_norm", "learning_rate"},
    "run_classifier.py": {"num_train_epochs", "learning_rate"},
    "run_squad.py": {"num_train_epochs", "null_score_diff_threshold"},
    "run_ner.py": {"num_train_epochs", "warmup_proportion"},
    "run_swag.py": {"num_train_epochs", "warmup_proportion"},
    "run_rerank.py": {"num_train_epochs", "warmup_proportion"},
    "run_bm25.py": {"k1", "b"},
    "run_glue.py": set(),
    "create_pretraining_data.py": {"masked_lm_prob", "short_seq_prob"},
    "create_vocab.py": set(),
    "export_checkpoint.py": set(),
    "extract_features.py": set(),
    "two_phase.py": {"learning_rate", "warmup_ratio"},
    "benchmark.py": {"peak_tflops", "report_target"}}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_every_float_flag_of_every_program_refuses_nan(program):
  result = run_program(["-c", _FLOAT_FLAGS_REFUSING_NAN, program],
                       timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  said = json.loads(result.stdout.splitlines()[-1])
  assert said == {name: "--%s=nan is not a finite number" % name
                  for name in said}
  if FLOAT_FLAGS_AMONG[program]:
    assert FLOAT_FLAGS_AMONG[program] <= set(said)
  else:
    assert not said


def test_run_glue_refuses_an_argument_after_dash_dash():
  result, imported_tensorflow = launch("run_glue.py", "--",
                                       "--num_train_epochs", "2")
  assert expect_user_error(result) == (
      "error: unexpected argument '2': flags take the form --name=value")
  assert not imported_tensorflow
