# coding=utf-8
"""The classifier's data: examples, and what the tasks' processors are made of.

A processor reads a task's files (classification/registry.py names them and the
labels) into InputExamples; the file layouts of each task are listed in
run_classifier.py's docstring. classification/features.py turns the examples
into the model's features and records. The names are upstream's
run_classifier ones where upstream has them.
"""

import csv
import dataclasses
import os
from typing import Optional, Sequence, Tuple

import tensorflow.compat.v1 as tf

from bertkit.common import text_files
from bertkit.common.errors import UserError
from bertkit.tasks.classification import registry as task_registry


class InputExample(object):
  """A single training/test example for simple sequence classification."""

  def __init__(self, guid, text_a, text_b=None, label=None, index=None,
               line=None):
    """Constructs an InputExample.

    Args:
      guid: unique id of the example.
      text_a: the untokenized first sequence.
      text_b: the untokenized second sequence of a pair task, or None.
      label: the label string (a task with one output: the score, a
        number); test examples carry a placeholder; None: unlabelled (a
        transfer set's row).
      index: a GLUE test example's id in its file (the leaderboard's
        submission names it), else None.
      line: the 1-based line of its file it was read from (the id a
        teacher's outputs give it), else None.
    """
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label
    self.index = index
    self.line = line


class RankingExample(InputExample):
  """A query/passage example that also knows its ids for the ranking file."""

  def __init__(self, guid, query_id, passage_id, query, passage, label):
    super().__init__(guid, query, passage, label)
    self.query_id = query_id
    self.passage_id = passage_id


class TsvLine(list):
  """The fields of one TSV line, plus where it came from (for errors)."""

  def __init__(self, fields, path, line_number):
    super().__init__(fields)
    self.path = path
    self.line_number = line_number

  def column(self, index):
    """Field `index` (negative counts from the end).

    Raises:
      UserError: the line has too few columns.
    """
    if -len(self) <= index < len(self):
      return self[index]
    needed = index + 1 if index >= 0 else -index
    raise UserError("%s line %d: expected at least %d tab-separated columns, "
                    "got %d" % (self.path, self.line_number, needed,
                                len(self)))


class DataProcessor(object):
  """Base class for data converters for sequence classification data sets.

  The processor of a task of task_registry names it in TASK; its labels
  are the task's.
  """

  TASK = None
  # Read a row with an empty label as unlabelled (label None) instead of
  # refusing it: files read as transfer sets (read_file).
  unlabelled_allowed = False

  def get_train_examples(self, data_dir):
    """Gets a collection of `InputExample`s for the train set."""
    raise NotImplementedError()

  def get_dev_examples(self, data_dir):
    """Gets a collection of `InputExample`s for the dev set."""
    raise NotImplementedError()

  def get_test_examples(self, data_dir):
    """Gets a collection of `InputExample`s for prediction."""
    raise NotImplementedError()

  def get_labels(self):
    """Gets the list of labels for this data set."""
    if self.TASK is None:
      raise NotImplementedError()
    return list(task_registry.get(self.TASK).labels)

  @classmethod
  def _read_tsv(cls, input_file, quotechar=None):
    """Reads a tab-separated file; blank lines are skipped.

    Returns:
      A list of TsvLine, one per non-blank line.

    Raises:
      UserError: the file is missing, unreadable or not UTF-8.
    """
    try:
      with tf.io.gfile.GFile(input_file, "rb") as f:
        data = f.read()
    except tf.errors.NotFoundError:
      raise UserError("--data_dir file %s does not exist" % input_file)
    except tf.errors.OpError as e:
      raise UserError("cannot read %s: %s" % (input_file, e.message))
    text = text_files.decode(data, input_file)
    # Lines end at "\n" only, as upstream reads them (a stray "\r" before it
    # is dropped by csv); other Unicode line breaks stay inside a field.
    reader = csv.reader(text.split("\n"), delimiter="\t",
                        quotechar=quotechar)
    return [TsvLine(fields, input_file, reader.line_num)
            for fields in reader if fields]

  def _examples_from_tsv(self, path, has_header, line_to_example,
                         header=None):
    """Reads `path` and turns each data line into an example.

    Args:
      path: the TSV file.
      has_header: skip the first line.
      line_to_example: function(TsvLine) -> InputExample, or None to skip
        the line.
      header: the Header the first line must match, or None.

    Returns:
      A non-empty list of InputExample.

    Raises:
      UserError: the file holds no data lines, its header is not `header`,
        or a line is malformed.
    """
    lines = self._read_tsv(path)
    if header is not None and lines:
      header.check(lines[0])
    if has_header and lines:
      lines = lines[1:]
      if not lines:
        raise UserError("%s has only a header line and no examples" % path)
    examples = []
    for line in lines:
      example = line_to_example(line)
      if example is not None:
        example.line = line.line_number
        examples.append(example)
    if not examples:
      raise UserError("%s holds no examples" % path)
    return examples

  def _checked_label(self, line, label):
    """`label` if it is one of get_labels(), else a UserError at `line`;
    None for an empty one where unlabelled rows are allowed."""
    if label == "" and self.unlabelled_allowed:
      return None
    if label not in self.get_labels():
      raise UserError("%s line %d: label %r is not one of the task's labels "
                      "%s" % (line.path, line.line_number, label,
                              ",".join(self.get_labels())))
    return label


@dataclasses.dataclass(frozen=True)
class Header:
  """The header line a GLUE file starts with.

  Upstream's readers (CoLA, MRPC, MNLI) only compare the columns that tell
  the task apart, as upstream reads any header.

  Attributes:
    task: the task's name, for the error.
    names: the official column names.
    checked: the 0-based columns compared (negative from the end), or None
      for the whole line.
  """
  task: str
  names: Tuple[str, ...]
  checked: Optional[Tuple[int, ...]]

  def check(self, line):
    """Raises a UserError naming the file and the header expected unless
    TsvLine `line` is this header."""
    got = list(line)
    if self.checked is None:
      matches = got == list(self.names)
    else:
      matches = all(-len(got) <= i < len(got) and got[i] == self.names[i]
                    for i in self.checked)
    if not matches:
      raise UserError(
          "%s line 1: not the header of a GLUE %s file; expected %r, got %r"
          % (line.path, self.task, "\t".join(self.names), "\t".join(got)))


class SplitFilesProcessor(DataProcessor):
  """A data set whose splits are files of data_dir read by `_create_examples`.

  The files are those of the task's record in task_registry.
  """

  def get_train_examples(self, data_dir):
    return self._split_examples(data_dir, "train")

  def get_dev_examples(self, data_dir):
    return self._split_examples(data_dir, "dev")

  def get_test_examples(self, data_dir):
    return self._split_examples(data_dir, "test")

  def get_split_examples(self, data_dir, split):
    """The InputExamples of the task's file of `split` (e.g. MNLI's
    dev_mismatched)."""
    return self._split_examples(data_dir, split)

  def _split_examples(self, data_dir, split):
    data_file = task_registry.get(self.TASK).data_file(split)
    return self._create_examples(
        os.path.join(data_dir, data_file.file_name), data_file.set_type)

  def _create_examples(self, path, set_type):
    raise NotImplementedError()


def guid(set_type, line):
  # Upstream numbers examples by their 0-based line in the file.
  return "%s-%d" % (set_type, line.line_number - 1)


class TsvProcessor(SplitFilesProcessor):
  """Any train/dev/test.tsv whose columns are named by flags."""

  TASK = "tsv"

  def __init__(self, text_a_column, label_column, text_b_column=None,
               has_header=True, labels=None):
    """Args:
      text_a_column: column of the first text: a 0-based number, or a header
        name when has_header.
      label_column: column of the label, likewise.
      text_b_column: column of the second text, or None.
      has_header: the first line of each file is a header.
      labels: the label list; None until set (see infer_labels).
    """
    self.text_a_column = text_a_column
    self.text_b_column = text_b_column
    self.label_column = label_column
    self.has_header = has_header
    self.labels = labels

  def get_labels(self):
    if not self.labels:
      raise ValueError("TsvProcessor: labels are not set; call infer_labels")
    return self.labels

  def infer_labels(self, data_dir):
    """The sorted distinct labels of train.tsv.

    Raises:
      UserError: train.tsv is missing or malformed, or has a single label.
    """
    path = os.path.join(data_dir, "train.tsv")
    lines = self._data_lines(path)
    index = self._index(self.label_column, "label_column", lines, path)
    labels = sorted(set(line.column(index) for line in lines[1:]))
    if len(labels) < 2:
      raise UserError("%s: a classifier needs at least two labels, found %s "
                      "in column %s; pass --labels" %
                      (path, labels, self.label_column))
    return labels

  def _data_lines(self, path):
    """The lines of `path` as [header or None] + data lines."""
    lines = self._read_tsv(path)
    if not lines:
      raise UserError("%s holds no examples" % path)
    if not self.has_header:
      return [None] + lines
    if len(lines) == 1:
      raise UserError("%s has only a header line and no examples" % path)
    self._check_first_line_is_a_header(lines, path)
    return lines

  def _check_first_line_is_a_header(self, lines, path):
    """Refuses a header-less file read with --tsv_has_header (the default).

    With columns given by number nothing else would notice, and the first
    example would be dropped silently as a "header".

    Raises:
      UserError: the first line's label column holds a label of the data.
    """
    if not self.label_column.isdigit():
      return
    index = int(self.label_column)
    if index >= len(lines[0]):
      return
    known = set(self.labels or ()) | set(
        line[index] for line in lines[1:] if index < len(line))
    first = lines[0][index]
    if first in known:
      raise UserError(
          "%s line 1 looks like an example, not a header: its column %d "
          "holds %r, a label of the data; --tsv_has_header (the default) "
          "would drop it. Pass --notsv_has_header for a file without a "
          "header" % (path, index, first))

  def _index(self, column, flag, lines, path):
    """The 0-based column number of flag value `column` in this file."""
    if column.isdigit():
      return int(column)
    header = lines[0]
    if header is None:
      raise UserError("--%s=%s names a column but --notsv_has_header; use a "
                      "0-based column number" % (flag, column))
    if column not in header:
      raise UserError("--%s=%s: %s has no such column; its header is %s" %
                      (flag, column, path, "\t".join(header)))
    return header.index(column)

  def _create_examples(self, path, set_type):
    lines = self._data_lines(path)
    a_index = self._index(self.text_a_column, "text_a_column", lines, path)
    b_index = None
    if self.text_b_column is not None:
      b_index = self._index(self.text_b_column, "text_b_column", lines, path)
    label_index = None
    # A transfer set may leave the label column out altogether.
    unlabelled_file = self.unlabelled_allowed and not (
        self.label_column.isdigit() or lines[0] is None or
        self.label_column in lines[0])
    if set_type != "test" and not unlabelled_file:
      label_index = self._index(self.label_column, "label_column", lines,
                                path)
    examples = []
    for line in lines[1:]:
      text_b = line.column(b_index) if b_index is not None else None
      if unlabelled_file or (self.unlabelled_allowed and
                             label_index is not None and
                             label_index >= len(line)):
        label = None
      elif label_index is None:
        label = self.get_labels()[0]
      else:
        label = self._checked_label(line, line.column(label_index))
      examples.append(InputExample(guid(set_type, line), line.column(a_index),
                                   text_b, label, line=line.line_number))
    return examples


class RerankProcessor(SplitFilesProcessor):
  """Query/passage pairs labelled 1 (relevant) or 0, for re-ranking."""

  TASK = "rerank"
  COLUMNS = ("query_id", "passage_id", "query", "passage", "label")

  def _create_examples(self, path, set_type):

    def to_example(line):
      if set_type == "test":
        label = "0"
      else:
        label = self._checked_label(line, line.column(4))
      return RankingExample(guid(set_type, line), line.column(0),
                            line.column(1), line.column(2), line.column(3),
                            label)

    return self._examples_from_tsv(path, True, to_example)


@dataclasses.dataclass(frozen=True)
class TsvOptions:
  """How the tsv task reads its files (run_classifier's tsv flags).

  Attributes:
    text_a_column: column of the first text: a 0-based number, or a header
      name when has_header.
    label_column: column of the label, likewise.
    text_b_column: column of the second text, or None.
    has_header: the first line of each file is a header.
    labels: the labels as given (--labels), or None to take the sorted
      distinct labels of train.tsv.
  """
  text_a_column: str
  label_column: str
  text_b_column: Optional[str] = None
  has_header: bool = True
  labels: Optional[Sequence[str]] = None


def read_file(processor, path, unlabelled_allowed):
  """The InputExamples of `path`, a file in the layout of the task's
  training file (--train_file, --predict_file); rows with an empty label
  are unlabelled (label None) if `unlabelled_allowed`.

  Raises:
    UserError: the task does not read its splits from files of one layout
      (XNLI), or the file is bad.
  """
  if not isinstance(processor, SplitFilesProcessor):
    raise UserError("task %s reads its own files by language; "
                    "--train_file and --predict_file are for the other "
                    "tasks" % processor.TASK)
  processor.unlabelled_allowed = unlabelled_allowed
  try:
    return processor._create_examples(path, "train")  # pylint: disable=protected-access
  finally:
    processor.unlabelled_allowed = False


def is_regression(label_list):
  """Whether a task of `label_list` regresses: it has one output, its score
  (STS-B), as Hugging Face's num_labels=1."""
  return len(label_list) == 1
