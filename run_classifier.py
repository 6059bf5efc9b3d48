# coding=utf-8
"""BERT fine-tuning for sentence (pair) classification with tf.estimator.

Upstream's flags, processors and files (TPU flags dropped), run by the task
runner (runner.py) as run_pretraining.py is: one device, MirroredStrategy,
MultiWorkerMirroredStrategy, CentralStorageStrategy or horovod ranks, fp16,
gradient accumulation, preemption, throughput logs, a run summary.
`--train_batch_size` is the global batch over all replicas.

Tasks (`--task_name`) and the files they read from `--data_dir`:
  cola   train.tsv, dev.tsv (no header): label in column 1, sentence in 3;
         test.tsv (header): sentence in column 1. Labels 0, 1.
  mnli   train.tsv, dev_matched.tsv, test_matched.tsv (header): sentences
         in columns 8 and 9, label in the last column.
         Labels contradiction, entailment, neutral.
  mrpc   train.tsv, dev.tsv, test.tsv (header): label in column 0,
         sentences in 3 and 4. Labels 0, 1.
  xnli   multinli/multinli.train.zh.tsv (header: premise, hypo, label;
         "contradictory" means contradiction) and xnli.dev.tsv (header;
         rows whose column 0 is "zh": label in 1, sentences in 6 and 7).
         No test set.
  tsv    train.tsv, dev.tsv, test.tsv of any layout: --text_a_column,
         --text_b_column (optional) and --label_column name a column by its
         0-based number or, with --tsv_has_header, by its header name.
         Labels from --labels, else the sorted distinct labels of
         train.tsv. The label column of test.tsv is not read.
  rerank query/passage re-ranking; train.tsv, dev.tsv, test.tsv with a
         header line and the columns
           query_id  passage_id  query  passage  label
         label is 1 (the passage answers the query) or 0; test.tsv may omit
         it. Predict also writes ranked_results.tsv (below).
Columns are tab-separated and never quoted; blank lines are skipped.

Outputs in --output_dir (besides checkpoints and throughput logs):
  train.tf_record, eval.tf_record, predict.tf_record  the features.
  eval_results.txt  `name = value` lines: eval_accuracy, eval_loss,
                    global_step, loss.
  test_results.tsv  one line per test example, in file order: the class
                    probabilities, tab-separated, in label-list order.
  ranked_results.tsv (rerank only) a header line, then one line per test
                    example with the columns
                      query_id  passage_id  score  rank
                    score = P(label 1); the queries in order of first
                    appearance in test.tsv, each query's passages by
                    descending score (ties in file order), rank 1, 2, ...
"""

import collections
import csv
import functools
import os
import sys

from bertkit.common import console
from bertkit.common import cpu_kernels

# Before TensorFlow is imported: its C++ runtime reads its log level and its
# choice of CPU kernels then.
console.quiet_native_logs(sys.argv)
cpu_kernels.prefer_onednn()
# pylint: disable=g-import-not-at-top,wrong-import-position

from absl import app
from absl import flags
from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.engine import checkpoint_formats
from bertkit.engine import checkpoints
from bertkit.tasks import classifier_packing
from bertkit.engine import distribution
from bertkit.engine import input_pipeline
import modeling
from bertkit.data import pretraining_records
from bertkit.engine import runner
import tokenization
from bertkit.common.errors import UserError, main_with_user_errors

FLAGS = flags.FLAGS


def define_flags():
  """Upstream's fine-tuning flags beyond the runner's, and the tsv task's.

  Called by the program only: importing this module (e.g. in tests next to
  run_pretraining) defines no flags.
  """
  runner.define_flags()
  flags.DEFINE_string(
      "data_dir", None,
      "Directory with the task's .tsv files (see --task_name).")
  flags.DEFINE_string("task_name", None,
                      "cola, mnli, mrpc, xnli, tsv or rerank.")
  flags.DEFINE_bool("do_lower_case", True,
                    "Lower-case the input text: True for uncased models.")
  flags.DEFINE_integer("max_seq_length", 128,
                       "Sequence length after WordPiece tokenization (S); "
                       "longer inputs are truncated, shorter padded.")
  flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
  flags.DEFINE_bool("do_predict", False,
                    "Whether to predict the test set (test_results.tsv).")
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
  flags.DEFINE_integer("predict_batch_size", 8,
                       "Total batch size for predict.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Epochs of training.")
  flags.DEFINE_float("warmup_proportion", 0.1,
                     "Fraction of the training steps with linear warm-up.")
  flags.DEFINE_string("text_a_column", "0",
                      "tsv task: column of the first text (number or name).")
  flags.DEFINE_string("text_b_column", None,
                      "tsv task: column of the second text of a pair task.")
  flags.DEFINE_string("label_column", "1",
                      "tsv task: column of the label (number or name).")
  flags.DEFINE_bool("tsv_has_header", True,
                    "tsv task: the first line of each file is a header.")
  flags.DEFINE_list("labels", None,
                    "tsv task: the labels, comma-separated; default: the "
                    "sorted distinct labels of train.tsv.")
  flags.DEFINE_bool(
      "pack_sequences", False,
      "Pack up to --max_sequences_per_pack examples into each row of "
      "--max_seq_length tokens (classifier_packing.py): no compute spent on "
      "padding, the same logits per example. --*_batch_size then count "
      "rows.")
  flags.DEFINE_integer(
      "max_sequences_per_pack", 3,
      "With --pack_sequences: the most examples in one row.")


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


def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings=False,
                 sequence_ids=None, position_ids=None, cls_positions=None,
                 example_weights=None):
  """A classification head on BERT's pooled [CLS] output.

  Args:
    bert_config: BertConfig.
    is_training: enables dropout.
    input_ids, input_mask, segment_ids: int32 [B, S].
    labels: int32 [B] label ids ([B*N] for packed rows).
    num_labels: number of classes C.
    use_one_hot_embeddings: see modeling.BertModel.
    sequence_ids, position_ids, cls_positions: packed rows of up to N
      examples (classifier_packing.model_inputs); X = B*N examples then.
    example_weights: float32 [X]: the loss is the weighted mean (0.0 for
      an empty slot); None: the plain mean.

  Returns:
    (mean loss, per_example_loss [X], logits [X, C], probabilities [X, C]),
    X = B unpacked.
  """
  # An explicit scope: a second micro-batch's model reuses bert/..., not
  # bert_1/...
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids,
      input_mask=input_mask, token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings, scope="bert",
      sequence_ids=sequence_ids, position_ids=position_ids,
      cls_positions=cls_positions)
  output_layer = model.get_pooled_output()
  hidden_size = output_layer.shape[-1]
  if cls_positions is not None:
    output_layer = tf.reshape(output_layer, [-1, hidden_size])
  # Top-level names, as upstream: classifier checkpoints stay interchangeable.
  output_weights = tf.get_variable(
      "output_weights", [num_labels, hidden_size],
      initializer=modeling.create_initializer(bert_config.initializer_range))
  output_bias = tf.get_variable("output_bias", [num_labels],
                                initializer=tf.zeros_initializer())
  with tf.variable_scope("loss"):
    if is_training:
      output_layer = tf.nn.dropout(output_layer, rate=0.1)
    logits = tf.matmul(output_layer, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    probabilities = tf.nn.softmax(logits, axis=-1)
    per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=logits)
    if example_weights is None:
      loss = tf.reduce_mean(per_example_loss)
    else:
      loss = tf.reduce_sum(example_weights * per_example_loss) / tf.maximum(
          tf.reduce_sum(example_weights), 1.0)
  return loss, per_example_loss, logits, probabilities


def build_classifier_variables(bert_config, num_labels):
  """Creates every trainable variable of the classifier (B=1, S=2)."""
  ids = tf.zeros([1, 2], tf.int32)
  create_model(bert_config, False, ids, ids, ids, tf.zeros([1], tf.int32),
               num_labels)


def classifier_metrics(per_example_loss, label_ids, logits, is_real_example):
  """Accuracy and mean loss over the real (not padding) examples."""
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  weights = tf.cast(is_real_example, tf.float32)
  return {
      "eval_accuracy": tf.metrics.accuracy(labels=label_ids,
                                           predictions=predictions,
                                           weights=weights),
      "eval_loss": tf.metrics.mean(values=per_example_loss, weights=weights),
  }


def classifier_task(bert_config, num_labels):
  """Classification as a runner.Task: the head's mean cross-entropy over the
  real examples (of packed rows too: classifier_packing.py); eval accuracy
  and loss over them; class probabilities."""

  def model(features, is_training):
    """create_model's outputs, the labels [X] and the example weights [X]."""
    if classifier_packing.is_packed(features):
      packed = classifier_packing.model_inputs(features)
      return (create_model(bert_config, is_training, features["input_ids"],
                           features["input_mask"], features["segment_ids"],
                           num_labels=num_labels, **packed),
              packed["labels"], packed["example_weights"])
    return (create_model(bert_config, is_training, features["input_ids"],
                         features["input_mask"], features["segment_ids"],
                         features["label_ids"], num_labels),
            features["label_ids"], features["is_real_example"])

  unpacked_loss_fns = runner.mean_loss_shares(
      lambda features: model(features, True)[0][0])

  def train_loss_fns(features, num_micro_batches):
    if not classifier_packing.is_packed(features):
      return unpacked_loss_fns(features, num_micro_batches)
    # Packed rows hold varying numbers of examples: each micro-batch divides
    # its weighted sum by the global batch's number of examples.
    count = tf.maximum(distribution.global_sum(tf.stop_gradient(
        tf.reduce_sum(features["label_weights"]))), 1.0)

    def loss_fn(index, micro_batch):
      with runner.reusing_variables(index):
        (_, per_example_loss, _, _), _, weights = model(micro_batch, True)
      return tf.reduce_sum(weights * per_example_loss) / count

    return [functools.partial(loss_fn, i, micro_batch) for i, micro_batch
            in enumerate(runner.split_micro_batches(features,
                                                    num_micro_batches))]

  def eval_outputs(features):
    (loss, per_example_loss, logits, _), labels, weights = model(features,
                                                                 False)
    return loss, classifier_metrics(per_example_loss, labels, logits,
                                    weights)

  def predictions(features):
    (_, _, _, probabilities), _, _ = model(features, False)
    if not classifier_packing.is_packed(features):
      return {"probabilities": probabilities}
    return {"probabilities": tf.reshape(
        probabilities, [-1, features["cls_positions"].shape[-1], num_labels]),
            "example_index": features["example_index"]}

  return runner.Task(
      build_variables=lambda: build_classifier_variables(bert_config,
                                                         num_labels),
      train_loss_fns=train_loss_fns, eval_outputs=eval_outputs,
      predictions=predictions)


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, optimizer_options,
                     num_accumulation_steps=1):
  """Returns the Estimator model_fn for classification.

  Args:
    bert_config: BertConfig.
    num_labels: number of classes.
    init_checkpoint: checkpoint (prefix or directory) to start from, or None.
    learning_rate: peak learning rate.
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    optimizer_options: extra create_accumulating_optimizer keyword arguments
      (runner.optimizer_options).
    num_accumulation_steps: micro-batches per update.
  """
  return runner.model_fn_builder(
      classifier_task(bert_config, num_labels), init_checkpoint,
      learning_rate, num_train_steps, num_warmup_steps, optimizer_options,
      num_accumulation_steps)


LABELS_FILE = "labels.txt"


def write_labels(output_dir, label_list):
  """labels.txt: the class names in output order, one a line.

  export_checkpoint.py reads it to name the exported classifier's classes.
  """
  with atomic_io.atomic_open(os.path.join(output_dir, LABELS_FILE)) as f:
    f.write("".join(label + "\n" for label in label_list))


def read_labels(checkpoint_dir):
  """The labels.txt a run_classifier output_dir holds, or None."""
  path = os.path.join(checkpoint_dir, LABELS_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return f.read().splitlines()


def write_test_results(path, probabilities):
  """test_results.tsv: one line of tab-separated class probabilities each."""
  with atomic_io.atomic_open(path, "w") as writer:
    for row in probabilities:
      writer.write("\t".join(str(p) for p in row) + "\n")


def rank_passages(examples, scores):
  """Orders scored query/passage examples for ranked_results.tsv.

  Args:
    examples: RankingExamples in file order.
    scores: P(relevant) of each example.

  Returns:
    [(query_id, passage_id, score, rank)]: queries in order of first
    appearance; within one, passages by descending score (stable), rank 1..n.
  """
  by_query = collections.OrderedDict()
  for example, score in zip(examples, scores):
    by_query.setdefault(example.query_id, []).append(
        (example.passage_id, score))
  rows = []
  for query_id, passages in by_query.items():
    ordered = sorted(passages, key=lambda p: -p[1])
    rows.extend((query_id, passage_id, score, rank)
                for rank, (passage_id, score) in enumerate(ordered, 1))
  return rows


def write_ranked_results(path, examples, scores):
  """ranked_results.tsv: header, then query_id, passage_id, score, rank."""
  with atomic_io.atomic_open(path, "w") as writer:
    writer.write("query_id\tpassage_id\tscore\trank\n")
    for query_id, passage_id, score, rank in rank_passages(examples, scores):
      writer.write("%s\t%s\t%s\t%d\n" % (query_id, passage_id, score, rank))


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


def check_case(do_lower_case, init_checkpoint):
  """tokenization.validate_case_matches_checkpoint, as a UserError.

  A Hugging Face directory states its casing in tokenizer_config.json.
  """
  if not init_checkpoint:
    return
  hf_case = checkpoint_formats.hf_do_lower_case(init_checkpoint)
  if hf_case is not None and hf_case != do_lower_case:
    raise UserError(
        "--do_lower_case=%s but the Hugging Face model %s was trained with "
        "do_lower_case=%s (its tokenizer_config.json); pass "
        "--do_lower_case=%s" % (do_lower_case, init_checkpoint, hf_case,
                                hf_case))
  try:
    tokenization.validate_case_matches_checkpoint(
        do_lower_case, checkpoints.resolve_init_checkpoint(init_checkpoint))
  except ValueError as e:
    raise UserError(str(e))


def validate_flags():
  """Checks flags and reads the data before any long work.

  Returns:
    (bert_config, processor, label_list, examples): examples maps "train",
    "dev", "test" to the InputExamples of the requested steps.
  """
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
    raise UserError("At least one of --do_train, --do_eval or --do_predict "
                    "must be True")
  for name in ("data_dir", "bert_config_file", "task_name", "vocab_file",
               "output_dir"):
    if not getattr(FLAGS, name):
      raise UserError("--%s is required" % name)
  for name in ("eval_batch_size", "predict_batch_size"):
    if getattr(FLAGS, name) < 1:
      raise UserError("--%s must be >= 1, got %d" %
                      (name, getattr(FLAGS, name)))
  if FLAGS.num_train_epochs <= 0:
    raise UserError("--num_train_epochs must be > 0")
  if not 0.0 <= FLAGS.warmup_proportion <= 1.0:
    raise UserError("--warmup_proportion must be in [0, 1]")
  if FLAGS.max_seq_length < 3:
    raise UserError("--max_seq_length must be >= 3 ([CLS] and two [SEP])")
  if FLAGS.pack_sequences and FLAGS.max_sequences_per_pack < 1:
    raise UserError("--max_sequences_per_pack=%d must be at least 1" %
                    FLAGS.max_sequences_per_pack)
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  modeling.check_seq_length_fits(bert_config, FLAGS.max_seq_length)
  tokenization.check_vocab_fits_config(FLAGS.vocab_file,
                                       bert_config.vocab_size)
  check_case(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  if not tf.io.gfile.isdir(FLAGS.data_dir):
    raise UserError("--data_dir %s is not a directory" % FLAGS.data_dir)
  processor = make_processor(FLAGS.task_name, FLAGS.data_dir, FLAGS)
  examples = {}
  for split, wanted, read in (
      ("train", FLAGS.do_train, processor.get_train_examples),
      ("dev", FLAGS.do_eval, processor.get_dev_examples),
      ("test", FLAGS.do_predict, processor.get_test_examples)):
    if wanted:
      examples[split] = read(FLAGS.data_dir)
  if ((FLAGS.do_eval or FLAGS.do_predict) and not FLAGS.do_train and
      not tf.train.latest_checkpoint(FLAGS.output_dir)):
    raise UserError("--do_eval/--do_predict without --do_train need a "
                    "fine-tuned checkpoint in --output_dir %s; there is none"
                    % FLAGS.output_dir)
  return bert_config, processor, processor.get_labels(), examples


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


def train_steps(num_examples, train_batch_size, num_train_epochs,
                warmup_proportion):
  """(num_train_steps, num_warmup_steps), as upstream computes them.

  Raises:
    UserError: the examples make no whole step.
  """
  num_train_steps = int(num_examples / train_batch_size * num_train_epochs)
  if num_train_steps < 1:
    raise UserError("%d training examples at --train_batch_size=%d for "
                    "--num_train_epochs=%s make no whole step" %
                    (num_examples, train_batch_size, num_train_epochs))
  return num_train_steps, int(num_train_steps * warmup_proportion)


def packed_feature_spec(max_seq_length, max_sequences_per_pack):
  """The records' parsing spec for packed rows; None (the classifier's own)
  without packing."""
  if not max_sequences_per_pack:
    return None
  return classifier_packing.feature_spec(max_seq_length,
                                         max_sequences_per_pack)


def write_inputs(is_chief, output_dir, examples, label_list, tokenizer,
                 max_seq_length, eval_batch_size, predict_batch_size,
                 max_sequences_per_pack=None):
  """Writes labels.txt (chief) and the records of each requested split.

  Returns:
    ({"train", "dev", "test": [record file]} of the splits in `examples`,
    dev and test padded to whole batches; the number of training records).
  """
  if is_chief:
    write_labels(output_dir, label_list)
  files, num_train_records = {}, 0
  for split, name, batch_size in (("dev", "eval", eval_batch_size),
                                  ("train", "train", None),
                                  ("test", "predict", predict_batch_size)):
    if split in examples:
      path, count = write_features(
          os.path.join(output_dir, "%s.tf_record" % name), examples[split],
          label_list, max_seq_length, tokenizer, batch_size,
          max_sequences_per_pack)
      files[split] = [path]
      if split == "train":
        num_train_records = count
  return files, num_train_records


def input_fn_maker(max_seq_length, max_sequences_per_pack=None):
  """The runner's make_input_fn over classifier records (packed rows of up
  to max_sequences_per_pack examples when given)."""
  spec = packed_feature_spec(max_seq_length, max_sequences_per_pack)

  def make_input_fn(files, mode, global_batch_size, num_replicas):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    return input_pipeline.classifier_input_fn_builder(
        files, max_seq_length, is_training=is_training,
        drop_remainder=is_training, global_batch_size=global_batch_size,
        num_replicas=num_replicas, feature_spec=spec)
  return make_input_fn


def write_predictions(output_dir, examples, label_list, is_ranking, packed,
                      predictions):
  """test_results.tsv (and ranked_results.tsv) from the predict outputs.

  Args:
    output_dir: where the results go.
    examples: the test InputExamples.
    label_list: the task's labels.
    is_ranking: also write ranked_results.tsv (the rerank task).
    packed: the predictions are of packed rows (probabilities [N, C] and
      example_index [N] each).
    predictions: the prediction dicts, in file order; those past the
      examples are padding.
  """
  if packed:
    probabilities = classifier_packing.predictions_in_input_order(
        predictions, len(examples))
  else:
    probabilities = [p["probabilities"]
                     for p in predictions[:len(examples)]]
  write_test_results(os.path.join(output_dir, "test_results.tsv"),
                     probabilities)
  if is_ranking:
    write_ranked_results(
        os.path.join(output_dir, "ranked_results.tsv"), examples,
        [float(p[label_list.index("1")]) for p in probabilities])


def main(argv):
  del argv
  bert_config, processor, label_list, examples = validate_flags()
  logging.info("Task %s, labels %s", FLAGS.task_name, label_list)
  run = runner.prepare(FLAGS, classifier_task(bert_config, len(label_list)))
  per_pack = FLAGS.max_sequences_per_pack if FLAGS.pack_sequences else None
  files, num_train_records = write_inputs(
      run.setup.is_chief, FLAGS.output_dir, examples, label_list,
      tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case),
      FLAGS.max_seq_length, FLAGS.eval_batch_size, FLAGS.predict_batch_size,
      per_pack)
  num_train_steps, num_warmup_steps = 0, 0
  if FLAGS.do_train:
    num_train_steps, num_warmup_steps = train_steps(
        num_train_records, FLAGS.train_batch_size, FLAGS.num_train_epochs,
        FLAGS.warmup_proportion)
    logging.info("***** Training: %d examples%s, global batch %d, %d steps "
                 "*****", len(examples["train"]),
                 " in %d packed rows" % num_train_records if per_pack else "",
                 FLAGS.train_batch_size, num_train_steps)
  runner.run(
      run, input_fn_maker(FLAGS.max_seq_length, per_pack),
      num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
      train_files=files.get("train"), eval_files=files.get("dev"),
      eval_batch_size=FLAGS.eval_batch_size,
      eval_message="***** Eval: %d examples, batch %d *****" % (
          len(examples.get("dev", ())), FLAGS.eval_batch_size),
      predict_files=files.get("test"),
      predict_batch_size=FLAGS.predict_batch_size,
      predict_message="***** Predict: %d examples, batch %d *****" % (
          len(examples.get("test", ())), FLAGS.predict_batch_size),
      use_predictions=functools.partial(
          write_predictions, FLAGS.output_dir, examples.get("test"),
          label_list, isinstance(processor, RerankProcessor),
          per_pack is not None))


if __name__ == "__main__":
  define_flags()
  app.run(main_with_user_errors(main))
