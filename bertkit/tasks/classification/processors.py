# coding=utf-8
"""Every task's processor, by its --task_name: upstream's (CoLA, MNLI, MRPC,
XNLI), the rest of GLUE's (SST-2, STS-B, QQP, QNLI, RTE, WNLI, AX), the tsv
task of any layout and query/passage re-ranking (data.py holds what they are
made of). The layouts of their files are listed in run_classifier.py's
docstring.
"""

import math
import os

from absl import logging

from bertkit.common.errors import UserError
from bertkit.tasks.classification import registry as task_registry
from bertkit.tasks.classification.data import (DataProcessor, Header,
                                               InputExample, RerankProcessor,
                                               SplitFilesProcessor,
                                               TsvProcessor, guid)


class XnliProcessor(DataProcessor):
  """Processor for the XNLI data set (one language, MultiNLI for training)."""

  TASK = "xnli"

  def __init__(self, language="zh"):
    self.language = language

  def get_train_examples(self, data_dir):
    path = os.path.join(data_dir, "multinli",
                        "multinli.train.%s.tsv" % self.language)

    def to_example(line):
      label = line.column(2)
      if label == "contradictory":
        label = "contradiction"
      return InputExample(guid("train", line), line.column(0),
                          line.column(1), self._checked_label(line, label))

    return self._examples_from_tsv(path, True, to_example)

  def get_dev_examples(self, data_dir):
    path = os.path.join(data_dir, "xnli.dev.tsv")

    def to_example(line):
      if line.column(0) != self.language:
        return None
      return InputExample(guid("dev", line), line.column(6), line.column(7),
                          self._checked_label(line, line.column(1)))

    return self._examples_from_tsv(path, True, to_example)

  def get_test_examples(self, data_dir):
    raise UserError("task xnli has no test set (as upstream); use "
                    "--do_predict with another task")


_MNLI_COLUMNS = ("index", "promptID", "pairID", "genre",
                 "sentence1_binary_parse", "sentence2_binary_parse",
                 "sentence1_parse", "sentence2_parse", "sentence1",
                 "sentence2")
# The columns that tell MNLI's files apart from the other tasks': the two
# sentences and, in labelled files, gold_label last.
MNLI_HEADER = Header("mnli", _MNLI_COLUMNS + ("label1", "gold_label"),
                     (8, 9, -1))
MNLI_DEV_HEADER = Header("mnli", _MNLI_COLUMNS + (
    "label1", "label2", "label3", "label4", "label5", "gold_label"),
                         (8, 9, -1))
MNLI_TEST_HEADER = Header("mnli", _MNLI_COLUMNS, (0, 8, 9))


class MnliProcessor(SplitFilesProcessor):
  """Processor for the MultiNLI data set (GLUE version).

  dev and test are the matched sets, as upstream; dev_mismatched and
  test_mismatched read the mismatched ones.
  """

  TASK = "mnli"

  def _create_examples(self, path, set_type):
    is_test = set_type.startswith("test")

    def to_example(line):
      if is_test:
        label = "contradiction"
      else:
        label = self._checked_label(line, line.column(-1))
      return InputExample("%s-%s" % (set_type, line.column(0)),
                          line.column(8), line.column(9), label,
                          index=line.column(0) if is_test else None)

    header = MNLI_HEADER if set_type == "train" else MNLI_DEV_HEADER
    return self._examples_from_tsv(
        path, True, to_example, MNLI_TEST_HEADER if is_test else header)


MRPC_HEADER = Header("mrpc", ("Quality", "#1 ID", "#2 ID", "#1 String",
                              "#2 String"), (0,))
MRPC_TEST_HEADER = Header("mrpc", ("index", "#1 ID", "#2 ID", "#1 String",
                                   "#2 String"), (0,))


class MrpcProcessor(SplitFilesProcessor):
  """Processor for the MRPC data set (GLUE version)."""

  TASK = "mrpc"

  def _create_examples(self, path, set_type):

    def to_example(line):
      if set_type == "test":
        return InputExample(guid(set_type, line), line.column(3),
                            line.column(4), "0", index=line.column(0))
      return InputExample(guid(set_type, line), line.column(3),
                          line.column(4),
                          self._checked_label(line, line.column(0)))

    return self._examples_from_tsv(
        path, True, to_example,
        MRPC_TEST_HEADER if set_type == "test" else MRPC_HEADER)


COLA_TEST_HEADER = Header("cola", ("index", "sentence"), None)


class ColaProcessor(SplitFilesProcessor):
  """Processor for the CoLA data set (GLUE version)."""

  TASK = "cola"

  def _create_examples(self, path, set_type):

    def to_example(line):
      if set_type == "test":
        return InputExample(guid(set_type, line), line.column(1), None, "0",
                            index=line.column(0))
      return InputExample(guid(set_type, line), line.column(3), None,
                          self._checked_label(line, line.column(1)))

    # Only the test set has a header.
    is_test = set_type == "test"
    return self._examples_from_tsv(path, is_test, to_example,
                                   COLA_TEST_HEADER if is_test else None)


class GlueProcessor(SplitFilesProcessor):
  """A GLUE task whose files name their columns in a header line.

  Subclasses set TASK (its name), HEADER (the columns of train.tsv and
  dev.tsv), TEST_HEADER (test.tsv's) and the columns read by name: TEXT_A,
  TEXT_B (None for one sentence), LABEL and INDEX (the test id). A file
  must start with its header exactly. With SKIP_MALFORMED, data lines with
  another number of columns are skipped and counted (logged once per
  file), else one is an error.
  """

  HEADER = TEST_HEADER = ()
  TEXT_A, TEXT_B, LABEL, INDEX = "sentence", None, "label", "index"
  # The placeholder label of test examples (None: the task's first label).
  TEST_LABEL = None
  SKIP_MALFORMED = False

  def _label(self, line, value):
    """The example's label from its label field (a checked class name)."""
    return self._checked_label(line, value)

  def _create_examples(self, path, set_type):
    is_test = set_type.startswith("test")
    names = self.TEST_HEADER if is_test else self.HEADER
    column = {name: i for i, name in enumerate(names)}
    skipped = []

    def to_example(line):
      if len(line) != len(names):
        if self.SKIP_MALFORMED:
          skipped.append(line.line_number)
          return None
        raise UserError("%s line %d: expected %d tab-separated columns "
                        "(%s), got %d" % (path, line.line_number, len(names),
                                          ", ".join(names), len(line)))
      text_b = line[column[self.TEXT_B]] if self.TEXT_B else None
      if is_test:
        return InputExample("%s-%s" % (set_type, line[column[self.INDEX]]),
                            line[column[self.TEXT_A]], text_b,
                            self.TEST_LABEL or self.get_labels()[0],
                            index=line[column[self.INDEX]])
      value = line[column[self.LABEL]]
      return InputExample(guid(set_type, line), line[column[self.TEXT_A]],
                          text_b, None if value == "" and
                          self.unlabelled_allowed else self._label(line,
                                                                   value))

    examples = self._examples_from_tsv(path, True, to_example,
                                       Header(self.TASK, names, None))
    if skipped:
      logging.warning("%s: skipped %d malformed line(s) (not %d columns), "
                      "the first at line %d", path, len(skipped), len(names),
                      skipped[0])
    return examples


class Sst2Processor(GlueProcessor):
  """SST-2: one sentence, sentiment 0 (negative) or 1 (positive)."""

  TASK = "sst-2"
  HEADER = ("sentence", "label")
  TEST_HEADER = ("index", "sentence")


class QqpProcessor(GlueProcessor):
  """QQP: two questions, 1 if they ask the same thing.

  GLUE's QQP files hold some lines that are cut short; those are skipped.
  """

  TASK = "qqp"
  HEADER = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")
  TEST_HEADER = ("id", "question1", "question2")
  TEXT_A, TEXT_B, LABEL, INDEX = "question1", "question2", "is_duplicate", "id"
  SKIP_MALFORMED = True


class QnliProcessor(GlueProcessor):
  """QNLI: a question and a sentence that answers it or not."""

  TASK = "qnli"
  HEADER = ("index", "question", "sentence", "label")
  TEST_HEADER = ("index", "question", "sentence")
  TEXT_A, TEXT_B = "question", "sentence"


class RteProcessor(GlueProcessor):
  """RTE: does sentence1 entail sentence2."""

  TASK = "rte"
  HEADER = ("index", "sentence1", "sentence2", "label")
  TEST_HEADER = ("index", "sentence1", "sentence2")
  TEXT_A, TEXT_B = "sentence1", "sentence2"


class WnliProcessor(RteProcessor):
  """WNLI: RTE's layout, labels 0 and 1 (1: entailment)."""

  TASK = "wnli"


class StsbProcessor(GlueProcessor):
  """STS-B: the similarity of two sentences, a score from 0 to 5.

  A regression task: its one "label" is the score, so the classifier has
  one output (num_labels 1 means regression throughout the classifier).
  """

  TASK = "sts-b"
  HEADER = ("index", "genre", "filename", "year", "old_index", "source1",
            "source2", "sentence1", "sentence2", "score")
  TEST_HEADER = HEADER[:-1]
  TEXT_A, TEXT_B, LABEL = "sentence1", "sentence2", "score"

  def _label(self, line, value):
    try:
      score = float(value)
    except ValueError:
      score = float("nan")
    if not math.isfinite(score):
      raise UserError("%s line %d: the score %r is not a number" %
                      (line.path, line.line_number, value))
    return value

  TEST_LABEL = "0"


class AxProcessor(GlueProcessor):
  """AX, GLUE's diagnostic set: MNLI pairs to predict with an MNLI model."""

  TASK = "ax"
  TEST_HEADER = ("index", "sentence1", "sentence2")
  TEXT_A, TEXT_B = "sentence1", "sentence2"

  def get_train_examples(self, data_dir):
    raise UserError("task ax is predict only (diagnostic.tsv has no labels): "
                    "use --do_predict alone, with an MNLI fine-tuned "
                    "--init_checkpoint")

  get_dev_examples = get_train_examples


# The processor of each task, by the task's name.
PROCESSORS = {p.TASK: p for p in (
    ColaProcessor, Sst2Processor, MrpcProcessor, StsbProcessor, QqpProcessor,
    MnliProcessor, QnliProcessor, RteProcessor, WnliProcessor, AxProcessor,
    XnliProcessor, TsvProcessor, RerankProcessor)}



def make_processor(task_name, data_dir, tsv_options=None):
  """The processor of `task_name`, with the tsv task's columns and labels.

  Args:
    task_name: --task_name (any case, or an alias).
    data_dir: --data_dir (the tsv task may infer its labels from it).
    tsv_options: TsvOptions; needed by the tsv task only.

  Raises:
    UserError: an unknown task, or tsv labels that cannot be determined.
  """
  name = task_registry.get(task_name).name
  if name != "tsv":
    return PROCESSORS[name]()
  processor = TsvProcessor(tsv_options.text_a_column,
                           tsv_options.label_column,
                           tsv_options.text_b_column, tsv_options.has_header)
  labels = [label.strip() for label in tsv_options.labels or []]
  if tsv_options.labels is not None and (len(labels) < 2 or not all(labels)):
    raise UserError("--labels must list at least two non-empty labels, got "
                    "%r" % ",".join(tsv_options.labels))
  if len(set(labels)) != len(labels):
    raise UserError("--labels lists a label twice: %r" % ",".join(labels))
  processor.labels = labels or processor.infer_labels(data_dir)
  return processor


