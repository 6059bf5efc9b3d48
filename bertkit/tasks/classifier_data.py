# coding=utf-8
"""The classifier's data: examples, the tasks' processors, features, records.

A processor reads a task's train/dev/test files into InputExamples (the file
layouts of each task are listed in run_classifier.py's docstring); an example
becomes InputFeatures, `[CLS] A [SEP] B [SEP]` padded to max_seq_length, and
the features are written as upstream's TFRecords (or as packed rows of
several examples, classifier_packing.py). The names are upstream's
run_classifier ones where upstream has them.
"""

import collections
import csv
import os

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common.errors import UserError
from bertkit.data import pretraining_records
from bertkit.tasks import classifier_packing


class InputExample(object):
  """A single training/test example for simple sequence classification."""

  def __init__(self, guid, text_a, text_b=None, label=None):
    """Constructs an InputExample.

    Args:
      guid: unique id of the example.
      text_a: the untokenized first sequence.
      text_b: the untokenized second sequence of a pair task, or None.
      label: the label string; test examples carry a placeholder.
    """
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label


class RankingExample(InputExample):
  """A query/passage example that also knows its ids for the ranking file."""

  def __init__(self, guid, query_id, passage_id, query, passage, label):
    super().__init__(guid, query, passage, label)
    self.query_id = query_id
    self.passage_id = passage_id


class PaddingInputExample(object):
  """Fills the last eval/predict batch; its features have is_real_example 0.

  Every batch then has the full size (one batch shape for every step), and
  no real example is dropped or counted twice. A class rather than None, so
  that padding can never pass for a real example by accident.
  """


class InputFeatures(object):
  """The model inputs of one example."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id,
               is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


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
  """Base class for data converters for sequence classification data sets."""

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
    raise NotImplementedError()

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
    try:
      text = data.decode("utf-8")
    except UnicodeDecodeError as e:
      line_number = data[:e.start].count(b"\n") + 1
      raise UserError("%s line %d: not valid UTF-8 (byte 0x%02x)" %
                      (input_file, line_number, data[e.start]))
    # Lines end at "\n" only, as upstream reads them (a stray "\r" before it
    # is dropped by csv); other Unicode line breaks stay inside a field.
    reader = csv.reader(text.split("\n"), delimiter="\t",
                        quotechar=quotechar)
    return [TsvLine(fields, input_file, reader.line_num)
            for fields in reader if fields]

  def _examples_from_tsv(self, path, has_header, line_to_example):
    """Reads `path` and turns each data line into an example.

    Args:
      path: the TSV file.
      has_header: skip the first line.
      line_to_example: function(TsvLine) -> InputExample, or None to skip
        the line.

    Returns:
      A non-empty list of InputExample.

    Raises:
      UserError: the file holds no data lines, or a line is malformed.
    """
    lines = self._read_tsv(path)
    if has_header and lines:
      lines = lines[1:]
      if not lines:
        raise UserError("%s has only a header line and no examples" % path)
    examples = [e for e in (line_to_example(line) for line in lines)
                if e is not None]
    if not examples:
      raise UserError("%s holds no examples" % path)
    return examples

  def _checked_label(self, line, label):
    """`label` if it is one of get_labels(), else a UserError at `line`."""
    if label not in self.get_labels():
      raise UserError("%s line %d: label %r is not one of the task's labels "
                      "%s" % (line.path, line.line_number, label,
                              ",".join(self.get_labels())))
    return label


class SplitFilesProcessor(DataProcessor):
  """A data set whose splits are files of data_dir read by `_create_examples`.

  SPLITS maps train/dev/test to (file name, set type of the example guids).
  """

  SPLITS = {"train": ("train.tsv", "train"), "dev": ("dev.tsv", "dev"),
            "test": ("test.tsv", "test")}

  def get_train_examples(self, data_dir):
    return self._split_examples(data_dir, "train")

  def get_dev_examples(self, data_dir):
    return self._split_examples(data_dir, "dev")

  def get_test_examples(self, data_dir):
    return self._split_examples(data_dir, "test")

  def _split_examples(self, data_dir, split):
    file_name, set_type = self.SPLITS[split]
    return self._create_examples(os.path.join(data_dir, file_name), set_type)

  def _create_examples(self, path, set_type):
    raise NotImplementedError()


def _guid(set_type, line):
  # Upstream numbers examples by their 0-based line in the file.
  return "%s-%d" % (set_type, line.line_number - 1)


class XnliProcessor(DataProcessor):
  """Processor for the XNLI data set (one language, MultiNLI for training)."""

  def __init__(self, language="zh"):
    self.language = language

  def get_train_examples(self, data_dir):
    path = os.path.join(data_dir, "multinli",
                        "multinli.train.%s.tsv" % self.language)

    def to_example(line):
      label = line.column(2)
      if label == "contradictory":
        label = "contradiction"
      return InputExample(_guid("train", line), line.column(0),
                          line.column(1), self._checked_label(line, label))

    return self._examples_from_tsv(path, True, to_example)

  def get_dev_examples(self, data_dir):
    path = os.path.join(data_dir, "xnli.dev.tsv")

    def to_example(line):
      if line.column(0) != self.language:
        return None
      return InputExample(_guid("dev", line), line.column(6), line.column(7),
                          self._checked_label(line, line.column(1)))

    return self._examples_from_tsv(path, True, to_example)

  def get_test_examples(self, data_dir):
    raise UserError("task xnli has no test set (as upstream); use "
                    "--do_predict with another task")

  def get_labels(self):
    return ["contradiction", "entailment", "neutral"]


class MnliProcessor(SplitFilesProcessor):
  """Processor for the MultiNLI data set (GLUE version)."""

  SPLITS = {"train": ("train.tsv", "train"),
            "dev": ("dev_matched.tsv", "dev_matched"),
            "test": ("test_matched.tsv", "test")}

  def get_labels(self):
    return ["contradiction", "entailment", "neutral"]

  def _create_examples(self, path, set_type):

    def to_example(line):
      if set_type == "test":
        label = "contradiction"
      else:
        label = self._checked_label(line, line.column(-1))
      return InputExample("%s-%s" % (set_type, line.column(0)),
                          line.column(8), line.column(9), label)

    return self._examples_from_tsv(path, True, to_example)


class MrpcProcessor(SplitFilesProcessor):
  """Processor for the MRPC data set (GLUE version)."""

  def get_labels(self):
    return ["0", "1"]

  def _create_examples(self, path, set_type):

    def to_example(line):
      if set_type == "test":
        label = "0"
      else:
        label = self._checked_label(line, line.column(0))
      return InputExample(_guid(set_type, line), line.column(3),
                          line.column(4), label)

    return self._examples_from_tsv(path, True, to_example)


class ColaProcessor(SplitFilesProcessor):
  """Processor for the CoLA data set (GLUE version)."""

  def get_labels(self):
    return ["0", "1"]

  def _create_examples(self, path, set_type):

    def to_example(line):
      if set_type == "test":
        return InputExample(_guid(set_type, line), line.column(1), None, "0")
      return InputExample(_guid(set_type, line), line.column(3), None,
                          self._checked_label(line, line.column(1)))

    # Only the test set has a header.
    return self._examples_from_tsv(path, set_type == "test", to_example)


class TsvProcessor(SplitFilesProcessor):
  """Any train/dev/test.tsv whose columns are named by flags."""

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
    if set_type != "test":
      label_index = self._index(self.label_column, "label_column", lines,
                                path)
    examples = []
    for line in lines[1:]:
      text_b = line.column(b_index) if b_index is not None else None
      if label_index is None:
        label = self.get_labels()[0]
      else:
        label = self._checked_label(line, line.column(label_index))
      examples.append(InputExample(_guid(set_type, line), line.column(a_index),
                                   text_b, label))
    return examples


class RerankProcessor(SplitFilesProcessor):
  """Query/passage pairs labelled 1 (relevant) or 0, for re-ranking."""

  COLUMNS = ("query_id", "passage_id", "query", "passage", "label")

  def get_labels(self):
    return ["0", "1"]

  def _create_examples(self, path, set_type):

    def to_example(line):
      if set_type == "test":
        label = "0"
      else:
        label = self._checked_label(line, line.column(4))
      return RankingExample(_guid(set_type, line), line.column(0),
                            line.column(1), line.column(2), line.column(3),
                            label)

    return self._examples_from_tsv(path, True, to_example)


PROCESSORS = {
    "cola": ColaProcessor,
    "mnli": MnliProcessor,
    "mrpc": MrpcProcessor,
    "xnli": XnliProcessor,
    "tsv": TsvProcessor,
    "rerank": RerankProcessor,
}


def make_processor(task_name, data_dir, values):
  """The processor of `task_name`, with the tsv task's columns and labels.

  Args:
    task_name: --task_name.
    data_dir: --data_dir (the tsv task may infer its labels from it).
    values: parsed FLAGS (the tsv flags).

  Raises:
    UserError: an unknown task, or tsv labels that cannot be determined.
  """
  name = task_name.lower()
  if name not in PROCESSORS:
    raise UserError("--task_name=%s is not one of %s" %
                    (task_name, ", ".join(sorted(PROCESSORS))))
  if name != "tsv":
    return PROCESSORS[name]()
  processor = TsvProcessor(values.text_a_column, values.label_column,
                           values.text_b_column, values.tsv_has_header)
  labels = [label.strip() for label in values.labels or []]
  if values.labels is not None and (len(labels) < 2 or not all(labels)):
    raise UserError("--labels must list at least two non-empty labels, got "
                    "%r" % ",".join(values.labels))
  if len(set(labels)) != len(labels):
    raise UserError("--labels lists a label twice: %r" % ",".join(labels))
  processor.labels = labels or processor.infer_labels(data_dir)
  return processor


def _truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Truncates a pair in place to `max_length` tokens in total.

  One token at a time from the end of the longer sequence: a short sequence
  keeps proportionally more of its tokens than a long one would.
  """
  while len(tokens_a) + len(tokens_b) > max_length:
    longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    longer.pop()


def convert_single_example(ex_index, example, label_list, max_seq_length,
                           tokenizer):
  """Converts one InputExample (or PaddingInputExample) into InputFeatures.

  Tokens are `[CLS] A [SEP]` (segment 0), then `B [SEP]` (segment 1) for a
  pair, padded with 0 to max_seq_length.
  """
  if isinstance(example, PaddingInputExample):
    zeros = [0] * max_seq_length
    return InputFeatures(input_ids=zeros, input_mask=list(zeros),
                         segment_ids=list(zeros), label_id=0,
                         is_real_example=False)
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  if tokens_b:
    _truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  else:
    tokens_a = tokens_a[:max_seq_length - 2]

  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  padding = [0] * (max_seq_length - len(input_ids))
  label_id = label_list.index(example.label)
  if ex_index < 2:
    logging.info("*** Example %s: %s -> label %s (id %d)", example.guid,
                 " ".join(tokens), example.label, label_id)
  return InputFeatures(input_ids=input_ids + padding,
                       input_mask=[1] * len(input_ids) + padding,
                       segment_ids=segment_ids + padding, label_id=label_id)


def serialize_features(feature):
  """One `InputFeatures` as the serialized tf.train.Example of the records."""
  int_feature = pretraining_records.int_feature
  features = collections.OrderedDict([
      ("input_ids", int_feature(feature.input_ids)),
      ("input_mask", int_feature(feature.input_mask)),
      ("segment_ids", int_feature(feature.segment_ids)),
      ("label_ids", int_feature([feature.label_id])),
      ("is_real_example", int_feature([int(feature.is_real_example)])),
  ])
  return tf.train.Example(features=tf.train.Features(
      feature=features)).SerializeToString()


def file_based_convert_examples_to_features(examples, label_list,
                                            max_seq_length, tokenizer,
                                            output_file):
  """Writes the features of `examples` to a TFRecord file, atomically."""
  with atomic_io.atomic_path(output_file) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for ex_index, example in enumerate(examples):
        writer.write(serialize_features(convert_single_example(
            ex_index, example, label_list, max_seq_length, tokenizer)))


def pad_to_batches(examples, batch_size):
  """`examples` followed by PaddingInputExamples up to a whole batch."""
  num_padding = -len(examples) % batch_size
  return list(examples) + [PaddingInputExample()] * num_padding


def write_features(path, examples, label_list, max_seq_length, tokenizer,
                   batch_size=None, max_sequences_per_pack=None):
  """Writes the records of `examples` to `path`, padded to whole batches if
  batch_size is given.

  With max_sequences_per_pack, the records are packed rows of up to that
  many examples (classifier_packing.py), shuffled if no batch_size is given
  (training).

  Returns:
    (path, the number of records).
  """
  if max_sequences_per_pack:
    features = [convert_single_example(i, example, label_list,
                                       max_seq_length, tokenizer)
                for i, example in enumerate(examples)]
    return path, classifier_packing.write_packed_features(
        path, features, max_seq_length, max_sequences_per_pack, batch_size,
        shuffle=not batch_size)
  if batch_size:
    examples = pad_to_batches(examples, batch_size)
  file_based_convert_examples_to_features(examples, label_list,
                                          max_seq_length, tokenizer, path)
  return path, len(examples)
