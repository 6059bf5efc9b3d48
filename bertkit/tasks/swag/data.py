# coding=utf-8
"""Multiple-choice data: SWAG's CSV and a generic JSONL, read as examples,
and each choice encoded with its context.

Files (one table, SPLIT_FILES): each split of --data_dir is the first of its
names present.

  SWAG CSV  the header of SWAG's regular files (video-id, fold-ind,
            startphrase, sent1, sent2, gold-source, ending0, ..., ending3,
            label); read are sent1, sent2, ending0..3 and label (0..3;
            absent from SWAG's test.csv). Read with the csv module (quoted
            fields may hold commas and line breaks).
  JSONL     one object a line: {"question": ..., "choices": [...],
            "label": index} ("label" optional, "id" kept when given); every
            example of a run has as many choices as the first.

Each choice is encoded as BERT's paper (section 4.4) and Hugging Face's
run_swag do: [CLS] context [SEP] start + ending [SEP], the context (SWAG's
sent1, the question) in segment 0, the start (SWAG's sent2; none for JSONL)
and the ending (the choice) in segment 1; a pair too long loses tokens from
the end of its longer part first. No TensorFlow here.
"""

import csv
import dataclasses
import json
from typing import Optional, Tuple

from bertkit.common import file_patterns
from bertkit.common import text_files
from bertkit.common.errors import UserError
from bertkit.data import pair_encoding
# Upstream's pair truncation (data/pair_encoding.py), under the name this
# module has always given it.
truncate_pair = pair_encoding.truncate_pair

SPLIT_FILES = {"train": ("train.csv", "train.jsonl"),
               "dev": ("val.csv", "dev.csv", "val.jsonl", "dev.jsonl"),
               "test": ("test.csv", "test.jsonl")}
SWAG_CHOICES = 4
SWAG_ENDINGS = tuple("ending%d" % i for i in range(SWAG_CHOICES))
SWAG_COLUMNS = ("sent1", "sent2") + SWAG_ENDINGS


@dataclasses.dataclass(frozen=True)
class MultipleChoiceExample:
  """One question and its choices.

  Attributes:
    example_id: SWAG's video-id and fold-ind, the JSONL id, or the line.
    context: the first segment (SWAG's sent1; the question).
    start: the start of every ending (SWAG's sent2), or "".
    endings: the choices, C of them.
    label: the index of the right choice, or None (unlabelled).
  """
  example_id: str
  context: str
  start: str
  endings: Tuple[str, ...]
  label: Optional[int]


def split_path(data_dir, split):
  """The file of `split` in data_dir (SPLIT_FILES; file_patterns.split_file)."""
  return file_patterns.split_file(data_dir, split, SPLIT_FILES[split])


def parse_label(text, num_choices, where):
  """A label's choice index; None for an empty or absent one.

  Raises:
    UserError: it is not an integer in 0..num_choices-1.
  """
  if text is None or str(text).strip() == "":
    return None
  try:
    label = int(str(text).strip())
  except ValueError:
    label = -1
  if not 0 <= label < num_choices:
    raise UserError("%s: label %r is not a choice (0..%d)" %
                    (where, text, num_choices - 1))
  return label


def read_swag_csv(path):
  """The MultipleChoiceExamples of a SWAG CSV file.

  Raises:
    UserError: a byte is not UTF-8, a column is missing from the header,
      or a row has an empty sentence or ending or a label outside 0..3
      (file and line named).
  """
  examples = []
  with text_files.open_text(path, newline="") as f:
    reader = csv.DictReader(f)
    if reader.fieldnames is None:
      raise UserError("%s has no example (it is empty)" % path)
    missing = [c for c in SWAG_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
      raise UserError("%s: the header has no %s column (SWAG's header: "
                      "video-id, fold-ind, startphrase, sent1, sent2, "
                      "gold-source, ending0..3, label)" %
                      (path, ", ".join(missing)))
    for row in reader:
      where = "%s:%d" % (path, reader.line_num)
      empty = [c for c in ("sent1",) + SWAG_ENDINGS
               if not (row.get(c) or "").strip()]
      if empty:
        raise UserError("%s: %s is empty or missing" % (where, empty[0]))
      examples.append(MultipleChoiceExample(
          "%s-%s" % (row.get("video-id", ""), row.get("fold-ind", ""))
          if row.get("video-id") else str(reader.line_num),
          row["sent1"].strip(), (row["sent2"] or "").strip(),
          tuple(row[c].strip() for c in SWAG_ENDINGS),
          parse_label(row.get("label"), SWAG_CHOICES, where)))
  return examples


def read_jsonl(path):
  """The MultipleChoiceExamples of a question/choices JSONL file.

  Raises:
    UserError: a byte is not UTF-8, or a line is not a JSON object with a
      question and at least two non-empty choices, has another number of
      choices than the first line, or a label that is not one of its
      choices.
  """
  examples = []
  with text_files.open_text(path) as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      where = "%s:%d" % (path, number)
      try:
        row = json.loads(line)
      except ValueError as e:
        raise UserError("%s: not JSON (%s)" % (where, e))
      choices = row.get("choices") if isinstance(row, dict) else None
      if (not isinstance(choices, list) or len(choices) < 2 or
          not all(isinstance(c, str) and c.strip() for c in choices) or
          not str(row.get("question") or "").strip()):
        raise UserError("%s: expected {\"question\": text, \"choices\": [at "
                        "least two texts], \"label\": index}" % where)
      if examples and len(choices) != len(examples[0].endings):
        raise UserError("%s: %d choices, but the first example has %d" %
                        (where, len(choices), len(examples[0].endings)))
      examples.append(MultipleChoiceExample(
          str(row.get("id", number)), row["question"].strip(), "",
          tuple(c.strip() for c in choices),
          parse_label(row.get("label"), len(choices), where)))
  return examples


def read_examples(path):
  """The MultipleChoiceExamples of a SWAG .csv or a .jsonl file.

  Raises:
    UserError: see read_swag_csv and read_jsonl; or the file has none.
  """
  examples = (read_jsonl(path) if path.endswith(".jsonl")
              else read_swag_csv(path))
  if not examples:
    raise UserError("%s has no example" % path)
  return examples


def check_labelled(examples, path):
  """Refuses unlabelled examples where the labels are needed (training,
  evaluation)."""
  for number, example in enumerate(examples, 1):
    if example.label is None:
      raise UserError("%s: example %d (%s) has no label" %
                      (path, number, example.example_id))


def encode_choices(example, tokenizer, max_seq_length):
  """Each choice of an example as (ids, mask, segment ids), each [S].

  Returns:
    Three lists of C lists of S ints.
  """
  context = tokenizer.tokenize(example.context)
  ids, masks, segments = [], [], []
  for ending in example.endings:
    tokens, segment_ids = pair_encoding.encode(
        context, tokenizer.tokenize((example.start + " " + ending).strip()),
        max_seq_length)
    pad = [0] * (max_seq_length - len(tokens))
    ids.append(tokenizer.convert_tokens_to_ids(tokens) + pad)
    masks.append([1] * len(tokens) + pad)
    segments.append(segment_ids + pad)
  return ids, masks, segments
