"""A teacher's outputs as data: the raw logits of every example of a file a
fine-tuning program predicted, which a student reads back
(docs/distillation.md).

`--do_predict` writes `predict_logits.jsonl` into --output_dir beside the
task's own, rounded prediction files: JSON lines, one per example of the
predicted file, in file order:

  {"index": 0, "id": 2, "logits": [1.2345678, -0.5]}

  index   the example's position among the file's examples, from 0;
  id      the task's id of the example: the line it starts at (the
          classifier's rows, a named-entity sentence's first word), or the
          multiple-choice example's own id;
  logits  float32 values written as the shortest decimal that reads back to
          the same float32 (JSON's float repr), so a student reads exactly
          what the teacher computed: [C] of a classifier (C = 1: the
          regression score), [W, C] of a sentence's W words (named
          entities), [C] choices (multiple choice).

A pair task adds what ranks it: `query_id`, `passage_id` and `score` (the
log-odds of relevance, logits[1] - logits[0]), the per-pair scores a
Margin-MSE student (distillation.margin_mse) takes.

`read` checks a file against the examples it must describe before
anything is written: the count, each row's index and id, each row's shape
(the number of classes, a sentence's words), finite numbers; each mismatch
is one UserError naming the file and line. No TensorFlow here.
"""

import json
import math

import numpy as np

from bertkit.common import atomic_io
from bertkit.common import text_files
from bertkit.common.errors import UserError

FILE_NAME = "predict_logits.jsonl"
# The features a student's training records carry its teacher's outputs in
# (distillation.py): the example's logits flattened, and 1 for a labelled
# example. Here, without TensorFlow, for the record writers of every core.
TEACHER_LOGITS = "teacher_logits"
HAS_LABEL = "has_label"


def row_json(index, row):
  """One line of the file: `row` ({"id", "logits", ...}) at `index`."""
  # tolist() makes each float32 a Python float of the same value, whose
  # repr reads back to it; a NaN is written as NaN, for the student's check
  # to name.
  fields = {"index": index, "id": row["id"],
            "logits": np.asarray(row["logits"], np.float32).tolist()}
  fields.update((k, v) for k, v in row.items() if k not in fields)
  return json.dumps(fields)


def write(path, rows):
  """Writes `rows` ([{"id", "logits" array, ...}] in file order) to
  `path`, atomically."""
  with atomic_io.atomic_open(path) as f:
    for index, row in enumerate(rows):
      f.write(row_json(index, row) + "\n")


def _finite(logits):
  return all(math.isfinite(v) for v in np.asarray(logits, np.float64).ravel())


def _nested_floats(value):
  """`value` as a float32 array if it is a (nested) list of numbers."""
  try:
    array = np.asarray(value, np.float64)
  except (TypeError, ValueError):
    return None
  if array.dtype != np.float64 or array.ndim == 0:
    return None
  return array


def check_row(row, where, index, expected_id, shape):
  """The logits of one parsed row, once it describes example `index`.

  Args:
    row: the row's JSON value.
    where: "path:line" for the messages.
    index: the example's position.
    expected_id: its id.
    shape: the shape its logits must have.

  Raises:
    UserError: the row is not an object with index, id and logits, names
      another example, has another shape, or a value that is not finite.
  """
  if not isinstance(row, dict) or "logits" not in row:
    raise UserError("%s: expected {\"index\", \"id\", \"logits\"}, got %.60s"
                    % (where, json.dumps(row)))
  if row.get("index") != index or row.get("id") != expected_id:
    raise UserError(
        "%s: row of example index %r, id %r; the training file's example "
        "%d has id %r: the teacher's outputs are not of this file (or not "
        "in its order)" % (where, row.get("index"), row.get("id"), index,
                           expected_id))
  logits = _nested_floats(row["logits"])
  if logits is None or logits.shape != tuple(shape):
    got = "shape %s" % (logits.shape,) if logits is not None else "%.40s" % (
        json.dumps(row["logits"]))
    raise UserError("%s: logits of %s; expected shape %s (%s)" % (
        where, got, tuple(shape), describe_shape(shape)))
  if not _finite(logits):
    raise UserError("%s: logits hold a NaN or infinite value" % where)
  return logits.astype(np.float32)


def describe_shape(shape):
  """What a shape of logits means, for messages."""
  if len(shape) == 2:
    return "%d words x %d labels" % tuple(shape)
  return "%d class%s" % (shape[0], "" if shape[0] == 1 else "es")


def read(path, examples, flag="--teacher_outputs"):
  """The logits of a teacher's outputs file, checked against the examples
  they must describe.

  Args:
    path: the file (`FILE_NAME` of a teacher's --do_predict run).
    examples: [(id, shape)] of every example of the training file, in file
      order.
    flag: the option that named the file, for messages.

  Returns:
    [float32 array of `shape`] of each example.

  Raises:
    UserError: the file is unreadable, not JSON lines, or does not match
      `examples` (count, index, id, shape) or holds non-finite logits; the
      message names the file and line.
  """
  logits = []
  with text_files.open_text(path, "%s %s" % (flag, path)) as f:
    number = 0
    for number, line in enumerate(f, 1):
      where = "%s %s line %d" % (flag, path, number)
      if not line.strip():
        raise UserError("%s: an empty line" % where)
      if len(logits) == len(examples):
        raise UserError(
            "%s: more rows than the %d examples of the training file" %
            (where, len(examples)))
      try:
        row = json.loads(line)
      except ValueError as e:
        raise UserError("%s: not JSON (%s)" % (where, e))
      expected_id, shape = examples[len(logits)]
      logits.append(check_row(row, where, len(logits), expected_id, shape))
  if len(logits) != len(examples):
    raise UserError("%s %s has %d rows; the training file has %d examples" %
                    (flag, path, len(logits), len(examples)))
  return logits
