# coding=utf-8
"""extract_features' input: one example per record, `text_a ||| text_b` a pair.

Upstream's rule, in our words: every line is one example, its unique_id
(`linex_index` in the output) the line's number from 0; a line
`text_a ||| text_b` (the separator with one space either side) is a pair.
A line holding more than one `|||` is refused here (upstream splits it at
the last one). Records come from corpus_input.iter_record_texts
(lines of text, JSON lines, Parquet rows), so the input is read, and its
mistakes refused, before TensorFlow is imported.
"""

import dataclasses
import os
import re
from typing import Optional

from bertkit.common import atomic_io
from bertkit.common import file_patterns
from bertkit.common.errors import UserError
from bertkit.data import corpus_input

PAIR_SEPARATOR = "|||"
# Upstream's pattern: the last " ||| " splits (greedy), one space each side.
_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")


@dataclasses.dataclass(frozen=True)
class Example:
  """One input line: its unique_id (0, 1, ...) and its one or two texts."""
  unique_id: int
  text_a: str
  text_b: Optional[str] = None


def parse_line(unique_id, line, where):
  """An Example of one stripped input line.

  Args:
    unique_id: the line's unique_id.
    line: the text, stripped.
    where: the line's place for messages, e.g. "input file x.txt line 3".

  Raises:
    UserError: the line holds more than one `|||`.
  """
  if line.count(PAIR_SEPARATOR) > 1:
    raise UserError(
        "%s holds %d '|||' separators; expected one text, or two as "
        "'text_a ||| text_b'" % (where, line.count(PAIR_SEPARATOR)))
  match = _PAIR.match(line)
  if match is None:
    return Example(unique_id, line)
  return Example(unique_id, match.group(1), match.group(2))


def read_examples(files, text_field):
  """The Examples of every record of `files`, in order.

  Args:
    files: corpus_input.InputFiles (text, JSONL or Parquet).
    text_field: the JSON field / Parquet column of the text.

  Raises:
    UserError: a record is malformed, or there is none.
  """
  examples = []
  for input_file in files:
    for where, text in corpus_input.iter_record_texts(input_file,
                                                      text_field):
      examples.append(parse_line(
          len(examples), text,
          "input file %s %s" % (input_file.path, where)))
  if not examples:
    raise UserError(
        "--input_file %s holds no lines; expected one text (or 'text_a ||| "
        "text_b') per line" % ",".join(f.path for f in files))
  return examples


def check_output_file(output_file):
  """Refuses an --output_file whose directory does not exist, or that is a
  directory, before anything is computed (URLs are checked when written)."""
  if atomic_io.is_url(output_file):
    return
  directory = os.path.dirname(os.path.abspath(output_file))
  if not os.path.isdir(directory):
    raise UserError("--output_file %s: the directory %s does not exist" % (
        output_file, directory))
  if os.path.isdir(output_file):
    raise UserError("--output_file %s is a directory; expected a file name"
                    % output_file)


def read_checked(opts):
  """What extract_features checks and reads before TensorFlow is imported:
  the files its options name, the output's directory, then every example.

  Args:
    opts: the FeatureExtractionOptions.

  Returns:
    The Examples of --input_file, in order.
  """
  file_patterns.check_paths(opts)
  check_output_file(opts.output_file)
  files = corpus_input.expand_corpus(corpus_input.Corpus(
      opts.input_file, opts.input_format, opts.text_field))
  file_patterns.check_output_reads_nothing(
      "output_file", [opts.output_file], [("input_file", f.path)
                                          for f in files] +
      [("vocab_file", opts.vocab_file),
       ("bert_config_file", opts.bert_config_file)])
  return read_examples(files, opts.text_field)
