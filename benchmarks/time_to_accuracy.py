"""Time to quality: held-out masked-LM accuracy against the training budget.

On a real corpus, the King James Bible as Debian's bible-kjv packages it
(`apt-get install bible-kjv`: the text and the `bible` program that decodes
it), one document per chapter, whole books held out; or Python's
documentation (--python_docs, `apt-get install python3.11-doc`), one
document per page, every --heldout_every-th page held out; or the
fortune cookies of Debian's fortunes package (--fortunes, `apt-get install
fortunes`): quotations, jokes, verse and aphorisms, FORTUNES_PER_DOCUMENT
consecutive fortunes of one file a document, every --heldout_every-th held
out; or any text (--corpus). BERT-mini (configs/bert_mini.json, its vocab_size set to the
vocab's), sequence length 128, three contestants:

  bert_2018  run_pretraining.py with configs/recipes/bert_2018 (upstream's
             recipe), on records made by create_pretraining_data.py with
             that recipe's flags;
  fast       the same with configs/recipes/fast;
  peer       the PyTorch peer a careful engineer writes
             (benchmarks/time_to_accuracy_peer.py on benchmarks/pytorch_
             peer.py: Hugging Face BertModel and the pretraining heads,
             masked positions gathered before the decoder, PyTorch's fused
             attention, torch.optim.AdamW, DataCollatorForLanguageModeling's
             dynamic masking) on the token sequences of fast's training
             records, in the same order, with fast's recipe values
             (learning rate, schedule, betas, epsilon, weight decay,
             clipping, batch, masking rate, warm-up, dropout).

--protocol=budget (the default), as Cramming, Izsak et al. and MosaicBERT
compare recipes: bert_2018 trains for the budget B (--max_train_minutes,
default 15: `--train_time_budget_hours`, its schedule over B); its final
held-out accuracy is the target. Every other contestant trains for B/k
(k from --divisors) with its schedule completed over B/k, and is judged by
its final accuracy: fast from B/2 (--start_divisor) down to smaller budgets
while it reaches the target (up to larger ones while it misses), the peer
from fast's smallest budget reaching it. A contestant's figure is B over its
smallest budget reaching the target (and, interpolated between that rung
and the next one missing, the budget at which the accuracy-vs-budget line
crosses it); ours against the peer is the ratio of the two budgets.

--protocol=target: every contestant trains for the same budget and is timed
to a --target accuracy (the first evaluation reaching it), as MLPerf's BERT
benchmark times runs; --target=auto is the accuracy bert_2018 reaches
within the budget in every repeat (its worst repeat's best evaluation,
rounded down to 0.01).

The questions are the same for all: the held-out documents' records,
written once by create_pretraining_data.py (--masking=static
--masked_lm_prob=0.15 --max_predictions_per_seq=20, a fixed --random_seed,
single segments: --next_sentence_prediction=false), the first whole eval
batches of them (--max_eval_steps). run_pretraining.py evaluates them with
any model, bert_2018's next-sentence one included (masked-LM metrics only).
Masked-LM accuracy is the share of masked positions (weight 1) whose argmax
is the label, in both frameworks.

Every run is a whole process; its wall clock is taken from outside, and so
is the moment each evaluation line appears in its eval_history.jsonl.
Training seconds are the program's clock (from the frameworks' import,
evaluation excluded), which the time budgets count.

Writes to --output_dir:
  summary.md, summary.json  budget: each contestant's rungs (budget, final
                            accuracy, steps, examples/sec, wall) and figure,
                            the speed-ups; target: time to target (train /
                            wall, medians), final accuracy, examples/sec,
                            eval overhead, the speed-ups;
  results.md/.csv/.json     the results table, one row per run
                            (bertkit/perf/accuracy_reports.py);
  eval_points.csv/.json     every evaluation of every run;
  curves.png                accuracy against training minutes, every run;
  budget_curves.png         budget: final accuracy against the budget;
  runs/<contestant>[_B<k>]_r<i>/   each run's output directory;
  data/                     corpus, vocab, model config, records.

A later run with the same --output_dir reuses the data and every run whose
command is the same (run_info.json): a longer --divisors ladder runs only
its new rungs.

Examples:
  python benchmarks/time_to_accuracy.py --output_dir=/tmp/tta_kjv
  python benchmarks/time_to_accuracy.py --output_dir=/tmp/tta_pydocs \
    --python_docs=/usr/share/doc/python3.11/html --max_eval_steps=20
  python benchmarks/time_to_accuracy.py --output_dir=/tmp/tta_fortunes \
    --fortunes=/usr/share/games/fortunes
  python benchmarks/time_to_accuracy.py --output_dir=/tmp/tta_target \
    --protocol=target --target=0.13 --stop_at_target
  python benchmarks/time_to_accuracy.py --output_dir=/tmp/tta_smoke --smoke
"""

import hashlib
import html.parser
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.common import atomic_io
from bertkit.common import text_files
from bertkit.common.errors import UserError
from bertkit.data import corpus_input
from bertkit.data import pretraining_instances
from bertkit.engine.loop import evaluation
from bertkit.perf import accuracy_reports
from bertkit.perf import benchmark_args
from bertkit.perf import child_runs

CONTESTANTS = ("bert_2018", "fast", "peer")
PROTOCOLS = ("budget", "target")
# The budget protocol's judge: its accuracy after the budget B is the
# target the others reach in B/k.
BUDGET_JUDGE = "bert_2018"
# The recipe whose records and values the peer takes.
PEER_RECIPE = "fast"
PEER = os.path.join(REPO_ROOT, "benchmarks", "time_to_accuracy_peer.py")
RECIPES_DIR = os.path.join(REPO_ROOT, "configs", "recipes")
# Whole books held out: narrative, wisdom, prophecy and letters, 3.7 % of
# the text, none a parallel account of a training book.
HELDOUT_BOOKS = ("Ruth", "Esther", "Ecclesiastes", "Joel", "Jonah",
                 "Hebrews", "James", "1 Peter")
HELDOUT_SEED = 12345
# --python_docs: pages that are lists rather than prose, and paragraphs too
# short to be prose (headings of lists, "Added in version 3.2.").
PYTHON_DOCS_SKIPPED_DIRS = ("whatsnew", "_sources", "_static", "_images",
                            "_downloads")
PYTHON_DOCS_SKIPPED_PAGES = ("genindex", "py-modindex", "search", "changelog")
PYTHON_DOCS_MIN_WORDS = 4
PYTHON_DOCS_MIN_PAGES = 100
# --fortunes: a fortune is a few lines; ten of one file make a document
# about a KJV chapter's length in sentences.
FORTUNES_PER_DOCUMENT = 10
FORTUNES_MIN_DOCUMENTS = 100
# The held-out questions: BERT's masking rate, whatever a recipe trains at.
HELDOUT_MASKED_LM_PROB = 0.15
# A recipe's run_pretraining.py values the peer takes (same flag names).
PEER_FLAGS = ("train_batch_size", "learning_rate", "lr_schedule",
              "lr_decay_proportion", "num_warmup_steps", "warmup_proportion",
              "adam_beta_1", "adam_beta_2", "adam_epsilon",
              "weight_decay_rate", "clip_norm", "masked_lm_prob",
              "hidden_dropout_prob", "attention_probs_dropout_prob")
# Evaluation every N steps costs about eval rows / (3 x N x batch) of the
# training time (a forward pass against forward and backward); N is chosen
# for this share, the most the goals allow: the time to target is only
# known to the nearest evaluation, so they come as often as that allows.
EVAL_SHARE = 0.1
# The budget protocol judges the final evaluation; the ones on the way only
# draw the curves.
BUDGET_EVAL_SHARE = 0.05
# The flags the prepared data depends on (data/data.json).
DATA_FLAGS = ("smoke", "corpus", "python_docs", "fortunes", "heldout_every",
              "bert_config_file", "max_seq_length", "heldout_predictions",
              "vocab_size", "eval_batch_size", "max_eval_steps")
# What --smoke fills in of the flags left at their defaults.
SMOKE_FLAGS = dict(
    corpus=os.path.join(REPO_ROOT, "sample_data", "corpus.txt"),
    heldout_every=8, max_seq_length=64, heldout_predictions=10,
    vocab_size=1000, num_train_steps=30, eval_every_n_steps=10,
    train_batch_size=8, eval_batch_size=8, max_eval_steps=2, dupe_factor=1,
    throughput_warmup_steps=2, peer_threads=1, divisors="1,2,3")
# --smoke: a 2-layer model small enough for a test.
SMOKE_CONFIG = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "hidden_size": 32, "initializer_range": 0.02,
    "intermediate_size": 64, "max_position_embeddings": 128,
    "num_attention_heads": 2, "num_hidden_layers": 2, "type_vocab_size": 2,
    "vocab_size": 0}


def run_checked(argv, what, timeout=3600):
  """Runs a preparation step (a program of the repository) to completion.

  Raises:
    UserError: it failed; its last error line is in the message.
  """
  result = subprocess.run(argv, cwd=REPO_ROOT, env=child_runs.child_env(),
                          capture_output=True, text=True, timeout=timeout,
                          check=False)
  if result.returncode != 0:
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("error:")]
    raise UserError("%s failed: %s" % (what, (errors or lines or ["?"])[-1]))


# ---------------------------------------------------------------- the corpus


def kjv_chapters(bible_program):
  """The KJV's chapters as Debian's `bible` program prints them.

  Returns:
    list of (book name, [verse text, ...]), one entry per chapter.

  Raises:
    UserError: the program is missing or fails.
  """
  try:
    text = subprocess.run([bible_program, "-l100000", "gen1:1-rev22:21"],
                          capture_output=True, text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError) as e:
    raise UserError("--bible=%s cannot print the King James Bible (%s); "
                    "install it with `apt-get install bible-kjv` (it brings "
                    "bible-kjv-text) or pass --corpus" % (bible_program, e))
  chapters = []
  for line in text.splitlines():
    verse = re.match(r"^\s+\d+ (.*)$", line)
    if verse and chapters:
      chapters[-1][1].append(verse.group(1).strip())
      continue
    heading = re.match(r"^(\S.*) \d+$", line)  # "1 Samuel 3"
    if heading:
      chapters.append((heading.group(1), []))
  if len(chapters) < 100:
    raise UserError("--bible=%s printed %d chapters; expected the 1,189 of "
                    "the King James Bible" % (bible_program, len(chapters)))
  return chapters


def text_documents(path):
  """The documents of a text corpus: lists of lines between blank lines."""
  documents, current = [], []
  with text_files.open_text(path) as f:
    for line in f:
      if line.strip():
        current.append(line.strip())
      elif current:
        documents.append(current)
        current = []
  if current:
    documents.append(current)
  return documents


class _Paragraphs(html.parser.HTMLParser):
  """The text of each <p> element of an HTML page, whitespace collapsed."""

  def __init__(self):
    super().__init__()
    self.paragraphs = []
    self._open = None

  def handle_starttag(self, tag, attrs):
    if tag == "p":
      self._open = []

  def handle_endtag(self, tag):
    if tag == "p" and self._open is not None:
      text = " ".join("".join(self._open).split())
      if len(text.split()) >= PYTHON_DOCS_MIN_WORDS:
        self.paragraphs.append(text)
      self._open = None

  def handle_data(self, data):
    if self._open is not None:
      self._open.append(data)


def python_docs_documents(html_dir):
  """Python's documentation as documents: one a page (sorted by path), its
  <p> paragraphs split into sentences by blingfire (the segmenter
  create_pretraining_data.py uses for JSONL text); index, search and
  "what's new" pages left out.

  Raises:
    UserError: the folder holds no such pages.
  """
  split = corpus_input.segmenter()
  documents = []
  for root, dirs, files in os.walk(html_dir):
    dirs[:] = sorted(d for d in dirs if d not in PYTHON_DOCS_SKIPPED_DIRS)
    for name in sorted(files):
      if not name.endswith(".html") or name.startswith(
          PYTHON_DOCS_SKIPPED_PAGES):
        continue
      parser = _Paragraphs()
      with open(os.path.join(root, name), encoding="utf-8") as f:
        parser.feed(f.read())
      lines = corpus_input.document_lines("\n".join(parser.paragraphs),
                                          split)
      if lines:
        documents.append(lines)
  if len(documents) < PYTHON_DOCS_MIN_PAGES:
    raise UserError("--python_docs=%s holds %d pages with paragraphs; "
                    "expected Python's HTML documentation (`apt-get install "
                    "python3.11-doc`: /usr/share/doc/python3.11/html)" % (
                        html_dir, len(documents)))
  return documents


def fortune_files(fortune_dir):
  """The names of the fortune files in `fortune_dir`, sorted (the .dat
  indexes and .u8 links left out)."""
  return sorted(n for n in os.listdir(fortune_dir) if "." not in n and
                os.path.isfile(os.path.join(fortune_dir, n)))


def read_fortunes(path):
  """The fortunes of one file, in order: the text between lines of a single
  `%`, whitespace collapsed to single spaces."""
  with open(path, encoding="utf-8", errors="replace") as f:
    fortunes = [" ".join(text.split()) for text in
                re.split(r"^%$", f.read(), flags=re.MULTILINE)]
  return [t for t in fortunes if t]


def fortunes_documents(fortune_dir):
  """Debian's fortunes as documents: each file's fortunes (the text
  between lines of a single `%`) in order, FORTUNES_PER_DOCUMENT to a
  document, each fortune's lines joined and split into sentences by the
  segmenter create_pretraining_data.py uses for JSONL text. Every file the
  package ships is read (files sorted by name; the .dat indexes and .u8
  links left out).

  Raises:
    UserError: the folder holds too few fortunes.
  """
  split = corpus_input.segmenter()
  documents = []
  for name in fortune_files(fortune_dir):
    fortunes = read_fortunes(os.path.join(fortune_dir, name))
    for start in range(0, len(fortunes), FORTUNES_PER_DOCUMENT):
      lines = corpus_input.document_lines(
          "\n".join(fortunes[start:start + FORTUNES_PER_DOCUMENT]), split)
      if lines:
        documents.append(lines)
  if len(documents) < FORTUNES_MIN_DOCUMENTS:
    raise UserError("--fortunes=%s holds %d documents of fortunes; expected "
                    "Debian's fortune files (`apt-get install fortunes`: "
                    "/usr/share/games/fortunes)" % (fortune_dir,
                                                    len(documents)))
  return documents


def split_corpus(args):
  """(training documents, held-out documents), each a list of line lists.

  KJV: chapters, the HELDOUT_BOOKS held out; --corpus, --python_docs and
  --fortunes: every --heldout_every-th document held out.
  """
  if args.corpus or args.python_docs or args.fortunes:
    if args.corpus:
      documents = text_documents(args.corpus)
    elif args.python_docs:
      documents = python_docs_documents(args.python_docs)
    else:
      documents = fortunes_documents(args.fortunes)
    every = args.heldout_every
    train = [d for i, d in enumerate(documents) if i % every != every - 1]
    heldout = [d for i, d in enumerate(documents) if i % every == every - 1]
  else:
    chapters = kjv_chapters(args.bible)
    train = [verses for book, verses in chapters
             if book not in HELDOUT_BOOKS]
    heldout = [verses for book, verses in chapters if book in HELDOUT_BOOKS]
  if not train or not heldout:
    raise UserError("the corpus splits into %d training and %d held-out "
                    "documents; both need some" % (len(train), len(heldout)))
  return train, heldout


def write_documents(path, documents):
  with atomic_io.atomic_open(path) as f:
    f.write("\n".join("\n".join(d) + "\n" for d in documents))


# ------------------------------------------------------------------ the data


class Data:
  """The paths of the prepared data (under OUTPUT_DIR/data)."""

  # Made with the directory: a preparation's own, which it may empty.
  STARTED = ".preparation"

  def __init__(self, data_dir):
    self.dir = data_dir
    self.train_text = os.path.join(data_dir, "train.txt")
    self.heldout_text = os.path.join(data_dir, "heldout.txt")
    self.vocab = os.path.join(data_dir, "vocab.txt")
    self.model_config = os.path.join(data_dir, "model.json")
    self.heldout_all = os.path.join(data_dir, "heldout_all.tfrecord")
    self.heldout = os.path.join(data_dir, "heldout.tfrecord")
    self.heldout_arrays = os.path.join(data_dir, "heldout.npz")

  def records(self, recipe, key):
    """A recipe's training records; `key` names the flags that made them."""
    return os.path.join(self.dir, "%s_train_%s.tfrecord" % (recipe, key))

  def make(self):
    """Creates the directory, marked as a preparation's (before the first
    file of one is written)."""
    os.makedirs(self.dir, exist_ok=True)
    open(os.path.join(self.dir, self.STARTED), "a").close()

  def remove(self):
    """Deletes the directory of a preparation that did not finish.

    Raises:
      UserError: it holds files no preparation made (a folder of the
        user's that --output_dir/data happens to name); nothing is deleted.
    """
    if not os.path.isdir(self.dir):
      return
    if os.listdir(self.dir) and not os.path.exists(
        os.path.join(self.dir, self.STARTED)):
      raise UserError("%s holds files no preparation of the benchmarks "
                      "made; pass another --output_dir (nothing was "
                      "deleted)" % self.dir)
    shutil.rmtree(self.dir)

  def check_made_by(self, args):
    """Refuses a data directory made with other corpus or model flags, and
    empties one whose preparation never finished (`remove`).

    Raises:
      UserError: data.json records other values, or the directory is not
        a preparation's.
    """
    made_by = {name: getattr(args, name) for name in DATA_FLAGS}
    path = os.path.join(self.dir, "data.json")
    if not os.path.exists(path):
      self.remove()
      return
    with open(path) as f:
      before = json.load(f)
    # A flag added since the directory was made reads as unset there.
    changed = sorted(k for k in set(made_by) | set(before)
                     if before.get(k) != made_by.get(k))
    if changed:
      raise UserError(
          "%s was made with other %s; pass another --output_dir or "
          "delete it" % (self.dir, ", ".join("--" + k for k in changed)))

  def mark_made_by(self, args):
    """Records the flags of a finished preparation (data.json)."""
    with atomic_io.atomic_open(os.path.join(self.dir, "data.json")) as f:
      json.dump({name: getattr(args, name) for name in DATA_FLAGS}, f)


def prepare_text_and_model(args, data):
  """The corpus split, the vocab (create_vocab.py on the training text) and
  the model config with the vocab's size."""
  data.check_made_by(args)
  if not os.path.exists(data.train_text):
    # Read (and refused) before anything is made.
    train, heldout = split_corpus(args)
    data.make()
    write_documents(data.heldout_text, heldout)
    write_documents(data.train_text, train)
  if not os.path.exists(data.vocab):
    run_checked([sys.executable, "create_vocab.py",
                 "--input_file=%s" % data.train_text,
                 "--output_file=%s" % data.vocab,
                 "--vocab_size=%d" % args.vocab_size], "create_vocab.py")
  if not os.path.exists(data.model_config):
    if args.smoke:
      config = dict(SMOKE_CONFIG)
    else:
      with open(args.bert_config_file) as f:
        config = json.load(f)
    with open(data.vocab, encoding="utf-8") as f:
      config["vocab_size"] = sum(1 for _ in f)
    with atomic_io.atomic_open(data.model_config) as f:
      json.dump(config, f, indent=2)


def read_examples(path):
  """{feature name: NumPy array} of each record of a TFRecord file."""
  examples = []
  for raw in tf.io.tf_record_iterator(path):
    feature = tf.train.Example.FromString(raw).features.feature
    examples.append({name: np.array(getattr(f, f.WhichOneof("kind")).value)
                     for name, f in feature.items()})
  return examples


def _example_bytes(values):
  """A serialized tf.train.Example of int64 features (float for weights)."""
  feature = {}
  for name, array in values.items():
    if array.dtype.kind == "f":
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(
          value=array.tolist()))
    else:
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(
          value=array.tolist()))
  return tf.train.Example(features=tf.train.Features(
      feature=feature)).SerializeToString()


def write_examples(path, examples):
  with atomic_io.atomic_path(path) as tmp:
    with tf.io.TFRecordWriter(tmp) as writer:
      for values in examples:
        writer.write(_example_bytes(values))


def prepare_heldout(args, data):
  """The held-out records (once), cut to whole eval batches; returns their
  count. Writes the records (single segments, no next-sentence labels:
  run_pretraining.py evaluates records of either kind with either model)
  and their arrays for the peer."""
  if not os.path.exists(data.heldout_all):
    run_checked([sys.executable, "create_pretraining_data.py",
                 "--input_file=%s" % data.heldout_text,
                 "--output_file=%s" % data.heldout_all,
                 "--vocab_file=%s" % data.vocab,
                 "--max_seq_length=%d" % args.max_seq_length,
                 "--max_predictions_per_seq=%d" % args.heldout_predictions,
                 "--masked_lm_prob=%g" % HELDOUT_MASKED_LM_PROB,
                 "--masking=static", "--dupe_factor=1",
                 "--next_sentence_prediction=false",
                 "--random_seed=%d" % HELDOUT_SEED],
                "create_pretraining_data.py (held-out records)")
  examples = read_examples(data.heldout_all)
  batches = len(examples) // args.eval_batch_size
  if args.max_eval_steps:
    batches = min(batches, args.max_eval_steps)
  if batches == 0:
    raise UserError("the held-out text gives %d records, fewer than one "
                    "--eval_batch_size=%d batch" % (len(examples),
                                                    args.eval_batch_size))
  examples = examples[:batches * args.eval_batch_size]
  write_examples(data.heldout, examples)
  save_arrays(data.heldout_arrays, heldout_arrays(examples))
  return len(examples)


def heldout_arrays(examples):
  """The peer's --heldout arrays of masked records (read_examples):
  [N, S] input_ids, input_mask, segment_ids; [N, P] masked_lm_positions,
  masked_lm_ids, masked_lm_weights."""
  return {name: np.stack([e[name] for e in examples]) for name in (
      "input_ids", "input_mask", "segment_ids", "masked_lm_positions",
      "masked_lm_ids", "masked_lm_weights")}


def save_arrays(path, arrays):
  with atomic_io.atomic_path(path) as tmp:
    with open(tmp, "wb") as f:
      np.savez(f, **arrays)


def prepare_records(args, data, recipe):
  """The training records of a recipe (create_pretraining_data.py with its
  flags file), once per content of that file; returns their path."""
  flagfile = recipe_file(args, recipe, "create_pretraining_data")
  argv = ["--flagfile=%s" % flagfile, "--input_file=%s" % data.train_text,
          "--vocab_file=%s" % data.vocab,
          "--max_seq_length=%d" % args.max_seq_length]
  if args.dupe_factor:
    argv.append("--dupe_factor=%d" % args.dupe_factor)
  with open(flagfile, "rb") as f:
    key = hashlib.sha1(f.read() + " ".join(argv).encode()).hexdigest()[:10]
  path = data.records(recipe, key)
  if not os.path.exists(path):
    run_checked([sys.executable, "create_pretraining_data.py"] + argv +
                ["--output_file=%s" % path],
                "create_pretraining_data.py (recipe %s)" % recipe)
  return path


def training_sequences(records_path, sequences_path, vocab_file):
  """The token sequences of training records for the peer, once: the real
  tokens of each record, masked positions given back their tokens, in file
  order (what run_pretraining.py reads with --tf_random_seed); returns
  sequences_path."""
  if os.path.exists(sequences_path):
    return sequences_path
  ids, types, offsets, labels = [], [], [0], []
  for e in read_examples(records_path):
    length = int(e["input_mask"].sum())
    tokens = e["input_ids"][:length].copy()
    if "masked_lm_positions" in e:
      real = e["masked_lm_weights"] > 0
      tokens[e["masked_lm_positions"][real]] = e["masked_lm_ids"][real]
    ids.append(tokens)
    types.append(e["segment_ids"][:length])
    offsets.append(offsets[-1] + length)
    if "next_sentence_labels" in e:
      labels.append(int(e["next_sentence_labels"][0]))
  vocab = pretraining_instances.load_checked_vocab(vocab_file)
  arrays = {"input_ids": np.concatenate(ids).astype(np.int32),
            "token_type_ids": np.concatenate(types).astype(np.int8),
            "offsets": np.array(offsets, np.int64),
            "special_ids": np.array([vocab["[CLS]"], vocab["[SEP]"]])}
  if labels:
    arrays["next_sentence_labels"] = np.array(labels, np.int8)
  save_arrays(sequences_path, arrays)
  return sequences_path


# --------------------------------------------------------------- the recipes


def recipe_file(args, recipe, program):
  """configs/recipes/RECIPE/PROGRAM.flags; UserError if missing."""
  path = os.path.join(args.recipes_dir, recipe, program + ".flags")
  if not os.path.exists(path):
    raise UserError("recipe %s has no %s (--recipes_dir=%s)" % (
        recipe, path, args.recipes_dir))
  return path


def read_flagfile(path):
  """{flag name: value text} of an absl flagfile (`--name=value` lines,
  `--name` / `--noname` for booleans; `#` comments)."""
  values = {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      line = line.strip()
      if not line.startswith("--"):  # blank, `#` or `//` comment
        continue
      name, has_value, value = line[2:].partition("=")
      if has_value:
        values[name] = value.strip()
      elif name.startswith("no"):
        values[name[2:]] = "false"
      else:
        values[name] = "true"
  return values


def peer_recipe_values(args):
  """The run_pretraining.py values of PEER_RECIPE the peer takes, with the
  benchmark's overrides; the masking rate from the records' recipe when
  the training flags do not set it."""
  values = read_flagfile(recipe_file(args, PEER_RECIPE, "run_pretraining"))
  create = read_flagfile(recipe_file(args, PEER_RECIPE,
                                     "create_pretraining_data"))
  if "masked_lm_prob" not in values and "masked_lm_prob" in create:
    values["masked_lm_prob"] = create["masked_lm_prob"]
  if values.get("optimizer", "adamw") != "adamw":
    raise UserError("recipe %s trains with --optimizer=%s; the PyTorch peer "
                    "has torch.optim.AdamW only" % (PEER_RECIPE,
                                                    values["optimizer"]))
  if values.get("adam_bias_correction") != "true":
    raise UserError("recipe %s trains without --adam_bias_correction; the "
                    "PyTorch peer's torch.optim.AdamW always corrects the "
                    "moments" % PEER_RECIPE)
  if args.train_batch_size:
    values["train_batch_size"] = str(args.train_batch_size)
  return {name: values[name] for name in PEER_FLAGS if name in values}


# ------------------------------------------------------------------ the runs


def common_run_flags(args, plan, minutes):
  """The flags both trainers take alike: the training budget (`minutes`, a
  time budget the schedule runs over, or with --num_train_steps steps),
  the throughput warm-up and, with --stop_at_target, the target."""
  if args.num_train_steps:
    steps = max(1, int(round(args.num_train_steps * minutes /
                             args.max_train_minutes)))
    argv = ["--num_train_steps=%d" % steps]
  else:
    argv = ["--train_time_budget_hours=%r" % (minutes / 60.0),
            "--num_train_steps=%d" % 10**9]
  if args.throughput_warmup_steps is not None:
    argv.append("--throughput_warmup_steps=%d" %
                args.throughput_warmup_steps)
  if args.stop_at_target:
    argv.append("--target_masked_lm_accuracy=%g" % plan["target"])
  return argv


def eval_every_n_steps(args, heldout_rows, batch_size):
  """--eval_every_n_steps, or N such that evaluation costs about
  EVAL_SHARE (the budget protocol: BUDGET_EVAL_SHARE) of the training
  time."""
  if args.eval_every_n_steps:
    return args.eval_every_n_steps
  share = BUDGET_EVAL_SHARE if args.protocol == "budget" else EVAL_SHARE
  # Rounded first: 288 / (3 x 0.1 x 32) is 29.999999999999996.
  return max(1, int(math.ceil(round(
      heldout_rows / (3.0 * share * batch_size), 6))))


def ours_command(args, data, recipe, run_dir, plan, minutes):
  """run_pretraining.py with the recipe's flags file and the benchmark's."""
  values = read_flagfile(recipe_file(args, recipe, "run_pretraining"))
  records = plan["records"][recipe]
  batch = args.train_batch_size or int(values.get("train_batch_size", 32))
  argv = [sys.executable, child_runs.RUN_PRETRAINING,
          "--flagfile=%s" % recipe_file(args, recipe, "run_pretraining"),
          "--bert_config_file=%s" % data.model_config,
          "--input_file=%s" % records, "--vocab_file=%s" % data.vocab,
          "--output_dir=%s" % run_dir, "--do_train",
          "--max_seq_length=%d" % args.max_seq_length,
          "--eval_input_file=%s" % data.heldout,
          "--eval_every_n_steps=%d" % eval_every_n_steps(
              args, plan["heldout_rows"], batch),
          "--eval_batch_size=%d" % args.eval_batch_size,
          "--max_eval_steps=%d" % (plan["heldout_rows"] //
                                   args.eval_batch_size),
          "--tf_random_seed=%d" % args.seed, "--log_every_n_steps=50"]
  argv += common_run_flags(args, plan, minutes)
  if args.train_batch_size:
    argv.append("--train_batch_size=%d" % args.train_batch_size)
  return argv


def peer_command(args, data, run_dir, plan, minutes):
  """The peer with PEER_RECIPE's values, on its records' sequences."""
  values = peer_recipe_values(args)
  batch = int(values.get("train_batch_size", 32))
  argv = [sys.executable, PEER,
          "--bert_config_file=%s" % data.model_config,
          "--vocab_file=%s" % data.vocab,
          "--train_sequences=%s" % plan["sequences"],
          "--heldout=%s" % data.heldout_arrays, "--output_dir=%s" % run_dir,
          "--eval_every_n_steps=%d" % eval_every_n_steps(
              args, plan["heldout_rows"], batch),
          "--eval_batch_size=%d" % args.eval_batch_size,
          "--seed=%d" % args.seed]
  argv += ["--%s=%s" % item for item in sorted(values.items())]
  argv += common_run_flags(args, plan, minutes)
  argv += ["--compile=%s" % str(args.peer_compile).lower(),
           "--dense_decoder=%s" % str(args.peer_dense_decoder).lower()]
  if args.peer_threads:
    argv.append("--threads=%d" % args.peer_threads)
  return argv


def _complete_lines(path):
  try:
    with open(path, "rb") as f:
      return f.read().count(b"\n")
  except OSError:
    return 0


def run_watched(argv, run_dir, timeout):
  """Runs one contestant as a whole process, watching its history.

  Returns:
    (whole-process wall seconds, [seconds from the launch at which each
    line of eval_history.jsonl had appeared, at 0.25 s resolution]).

  Raises:
    RuntimeError: the process failed or ran past `timeout` seconds.
  """
  history = os.path.join(run_dir, evaluation.HISTORY_FILE)
  log_path = os.path.join(run_dir, "output.log")
  seen = []
  start = time.perf_counter()
  with open(log_path, "w") as log:
    process = subprocess.Popen(argv, cwd=REPO_ROOT,
                               env=child_runs.child_env(), stdout=log,
                               stderr=subprocess.STDOUT)
    while True:
      finished = process.poll() is not None
      now = time.perf_counter() - start
      seen += [round(now, 2)] * (_complete_lines(history) - len(seen))
      if finished:
        break
      if now > timeout:
        process.kill()
        process.wait()
        raise RuntimeError("%s ran past %d s; see %s" % (
            os.path.basename(argv[1]), timeout, log_path))
      time.sleep(0.25)
  seconds = time.perf_counter() - start
  if process.returncode != 0:
    with open(log_path) as f:
      tail = f.read()[-3000:]
    raise RuntimeError("%s exited with %d:\n%s" % (
        os.path.basename(argv[1]), process.returncode, tail))
  return seconds, seen


def finished_run(run_dir, argv):
  """Whether `run_dir` holds a finished run of the command `argv`: a rerun
  with the same --output_dir (another --divisors, say) reuses it."""
  path = os.path.join(run_dir, accuracy_reports.RUN_INFO_FILE)
  if not os.path.exists(path):
    return False
  with open(path) as f:
    return json.load(f).get("command") == " ".join(argv[1:])


def rung_label(divisor):
  """"B/3" for the budget B/3, "B" for the judge's whole budget, "" outside
  the budget protocol (divisor None)."""
  if divisor is None:
    return ""
  return "B" if divisor == 1 else "B/%d" % divisor


def run_contestant(args, data, contestant, repeat, plan, divisor=None):
  """Runs one repeat of a contestant, for the budget B / `divisor` (None:
  the whole --max_train_minutes); returns its run directory."""
  minutes = args.max_train_minutes / (divisor or 1)
  rung = rung_label(divisor)
  name = contestant if divisor is None else "%s_B%d" % (contestant, divisor)
  run_dir = os.path.join(args.output_dir, "runs", "%s_r%d" % (name, repeat))
  if contestant == "peer":
    argv = peer_command(args, data, run_dir, plan, minutes)
    recipe, framework = PEER_RECIPE, "PyTorch peer"
  else:
    argv = ours_command(args, data, contestant, run_dir, plan, minutes)
    recipe, framework = contestant, None
  if finished_run(run_dir, argv):
    print("%-9s %s r%d: reused %s (the same command finished)" % (
        contestant, rung, repeat, run_dir), flush=True)
    return run_dir
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  seconds, seen = run_watched(argv, run_dir, args.timeout_minutes * 60)
  info = {"name": " ".join(filter(None, (contestant, rung, "r%d" % repeat))),
          "contestant": contestant, "divisor": divisor,
          "budget_minutes": minutes, "model": plan["model"],
          "recipe": recipe, "framework": framework,
          "process_wall_seconds": round(seconds, 2),
          "eval_seen_seconds": seen, "command": " ".join(argv[1:])}
  with atomic_io.atomic_open(os.path.join(
      run_dir, accuracy_reports.RUN_INFO_FILE)) as f:
    json.dump(info, f, indent=2)
  last = (evaluation.read_history(run_dir) or [{}])[-1]
  print("%-9s %s r%d: %.1f s whole process, %d evaluations, final "
        "accuracy %s at step %s" % (
            contestant, rung, repeat, seconds, len(seen),
            "%.4f" % last[accuracy_reports.METRIC] if last else "n/a",
            last.get("step")), flush=True)
  return run_dir


# ------------------------------------------------------- the budget protocol


def next_divisor(divisors, start, reached):
  """The next rung of a contestant's budget ladder, or None when done.

  A contestant trains for B / k minutes, k from `divisors`, starting at
  `start`: while it reaches the target it tries the next smaller budget,
  while it misses the next larger one. Accuracy at the end of a completed
  schedule grows with the budget, so the first miss below a reach (or the
  first reach above a miss) ends the search.

  Args:
    divisors: the ladder's k, ascending (1 = the whole budget B).
    start: the first k tried (one of `divisors`).
    reached: {k: whether the run for B / k reached the target} so far.

  Returns:
    The next k to run, or None.
  """
  if not reached:
    return start
  hits = [k for k, hit in reached.items() if hit]
  if hits:
    i = divisors.index(max(hits)) + 1
    if i == len(divisors) or divisors[i] in reached:
      return None
    return divisors[i]
  i = divisors.index(min(reached)) - 1
  return divisors[i] if i >= 0 else None


def crossing_budget(points, target):
  """The budget at which accuracy reaches `target`, interpolated linearly
  between the smallest budget reaching it and the largest below that
  missing it.

  Args:
    points: [(budget minutes, final accuracy)] of one contestant.
    target: the accuracy.

  Returns:
    minutes, or None when no budget reached it or the smallest one tried
    did (the crossing lies below the ladder).
  """
  hits = [(b, a) for b, a in points if a >= target]
  if not hits:
    return None
  b_hit, a_hit = min(hits)
  misses = [(b, a) for b, a in points if a < target and b < b_hit]
  if not misses:
    return None
  b_miss, a_miss = max(misses)
  return b_miss + (target - a_miss) * (b_hit - b_miss) / (a_hit - a_miss)


def median_accuracy(rows):
  """The median final held-out accuracy of run_row dicts (one rung's, or
  the judge's repeats)."""
  return accuracy_reports.median_or_none([r["masked_lm_accuracy"]
                                          for r in rows])


def budget_summary(budget_minutes, target, results, judge_runs):
  """The budget protocol's figures.

  Args:
    budget_minutes: B.
    target: the judge's final accuracy after B (median over its repeats).
    results: {contestant: {divisor: [run_row dicts]}}.
    judge_runs: the judge's run_row dicts.

  Returns:
    dict: budget_minutes, target, per contestant its rungs (divisor,
    minutes, median final accuracy, reached) and its figure (B over the
    smallest budget reaching the target, on the ladder and interpolated),
    and the ratios fast against bert_2018 and ours against the peer.
  """
  out = {"budget_minutes": budget_minutes, "target": target,
         "judge": {"contestant": BUDGET_JUDGE, "repeats": len(judge_runs),
                   "final_accuracies": [r["masked_lm_accuracy"]
                                        for r in judge_runs]},
         "contestants": {}, "speedups": {}}
  for contestant, rungs in results.items():
    table = []
    for divisor in sorted(rungs):
      rows = rungs[divisor]
      accuracy = median_accuracy(rows)
      table.append({
          "divisor": divisor, "minutes": budget_minutes / divisor,
          "masked_lm_accuracy": accuracy, "reached": accuracy >= target,
          "final_step": accuracy_reports.median_or_none(
              [r["final_step"] for r in rows]),
          "examples_per_sec": accuracy_reports.median_or_none(
              [r["examples_per_sec"] for r in rows]),
          "wall_seconds": accuracy_reports.median_or_none(
              [r["wall_seconds"] for r in rows]),
          "repeats": len(rows)})
    hits = [r["divisor"] for r in table if r["reached"]]
    crossing = crossing_budget([(r["minutes"], r["masked_lm_accuracy"])
                                for r in table], target)
    out["contestants"][contestant] = {
        "rungs": table,
        "smallest_divisor_reaching": max(hits) if hits else None,
        "speedup_ladder": float(max(hits)) if hits else None,
        "below_ladder": bool(hits) and max(hits) == max(rungs) and (
            crossing is None),
        "crossing_minutes": crossing,
        "speedup_interpolated": (budget_minutes / crossing
                                 if crossing else None)}
  per = out["contestants"]
  for name, slow, fast in (("fast against bert_2018", None, "fast"),
                           ("ours (fast) against the peer", "peer", "fast")):
    if fast not in per or (slow is not None and slow not in per):
      continue
    ratio = {}
    for key in ("speedup_ladder", "speedup_interpolated"):
      mine = per[fast][key]
      theirs = 1.0 if slow is None else per[slow][key]
      ratio[key] = mine / theirs if mine and theirs else None
    out["speedups"][name] = ratio
  return out


def budget_markdown(summary, command):
  """summary.md of the budget protocol."""
  budget = summary["budget_minutes"]
  out = ["# Time to quality by budget: %s's held-out accuracy after %g "
         "minutes\n" % (BUDGET_JUDGE, budget),
         "Target: %.4f, the final held-out masked-LM accuracy of %s trained "
         "for B = %g minutes (its schedule over B; finals %s). Each other "
         "contestant trains for B/k with its schedule completed; its figure "
         "is B over the smallest budget reaching the target. Command: "
         "`%s`\n" % (summary["target"], BUDGET_JUDGE, budget, ", ".join(
             "%.4f" % a for a in summary["judge"]["final_accuracies"]),
                      command),
         "| contestant | budget | minutes | final accuracy | reached | "
         "steps | examples/sec | whole process, wall s |",
         "|---|---|---|---|---|---|---|---|"]
  for name, c in summary["contestants"].items():
    for r in c["rungs"]:
      out.append("| %s | B/%d | %.2f | %.4f | %s | %s | %s | %s |" % (
          name, r["divisor"], r["minutes"], r["masked_lm_accuracy"],
          "yes" if r["reached"] else "no",
          "" if r["final_step"] is None else "%d" % r["final_step"],
          "" if r["examples_per_sec"] is None
          else "%.2f" % r["examples_per_sec"],
          _seconds(r["wall_seconds"])))
  out.append("")
  for name, c in summary["contestants"].items():
    if c["speedup_ladder"] is None:
      out.append("- %s: the target not reached within the ladder" % name)
      continue
    out.append("- %s: reaches it in B/%d: **%s%.2fx**%s" % (
        name, c["smallest_divisor_reaching"],
        ">= " if c["below_ladder"] else "", c["speedup_ladder"],
        "" if c["speedup_interpolated"] is None else
        " (interpolated: %.2fx, at %.2f minutes)" % (
            c["speedup_interpolated"], c["crossing_minutes"])))
  for name, ratio in summary["speedups"].items():
    out.append("- %s: %s on the ladder, %s interpolated" % (
        name, *["n/a" if ratio[k] is None else "%.2fx" % ratio[k]
                for k in ("speedup_ladder", "speedup_interpolated")]))
  return "\n".join(out) + "\n"


def run_budget_protocol(args, data, plan):
  """The judge for B, then each other contestant down (or up) its ladder.

  Returns:
    (runs: [(contestant, run_dir)], the budget_summary).
  """
  runs, judge_rows = [], []
  for repeat in range(args.repeats):
    run_dir = run_contestant(args, data, BUDGET_JUDGE, repeat, plan, 1)
    runs.append((BUDGET_JUDGE, run_dir))
    judge_rows.append(accuracy_reports.run_row(run_dir))
  target = median_accuracy(judge_rows)
  print("target: %.4f, %s's final held-out accuracy after %s" % (
      target, BUDGET_JUDGE, "%d steps" % args.num_train_steps
      if args.num_train_steps else "%g minutes" % args.max_train_minutes),
        flush=True)
  results = {}
  start = args.start_divisor
  for contestant in [c for c in args.contestants if c != BUDGET_JUDGE]:
    rungs, reached = {}, {}
    divisor = next_divisor(args.divisors, start, reached)
    while divisor is not None:
      rows = []
      for repeat in range(args.repeats):
        run_dir = run_contestant(args, data, contestant, repeat, plan,
                                 divisor)
        runs.append((contestant, run_dir))
        rows.append(accuracy_reports.run_row(run_dir))
      rungs[divisor] = rows
      reached[divisor] = median_accuracy(rows) >= target
      divisor = next_divisor(args.divisors, start, reached)
    results[contestant] = rungs
    hits = [k for k, hit in reached.items() if hit]
    # The next contestant starts where this one's smallest budget was: the
    # ratio between them is decided by the fewest runs.
    if contestant == PEER_RECIPE and hits:
      start = max(hits)
  return runs, budget_summary(args.max_train_minutes, target, results,
                              judge_rows)


# --------------------------------------------------------------- the results


def auto_target(runs):
  """The accuracy every bert_2018 run reached: its worst run's best
  evaluation, rounded down to 0.01 (None below 0.01: no target)."""
  best = [max(e[accuracy_reports.METRIC]
              for e in evaluation.read_history(d))
          for c, d in runs if c == "bert_2018"]
  if not best:
    raise UserError("--target=auto needs bert_2018 among --contestants")
  return math.floor(min(best) * 100) / 100.0 or None


def summarize(runs, target, how):
  """The summary dict: per contestant medians and the speed-ups."""
  rows = {c: [] for c, _ in runs}
  for contestant, run_dir in runs:
    rows[contestant].append(accuracy_reports.run_row(run_dir, target))
  per = {c: dict(accuracy_reports.contestant_summary(r),
                 recipe=r[0]["recipe"]) for c, r in rows.items()}
  ratios = {}
  for name, slow, fast in (("fast against bert_2018", "bert_2018", "fast"),
                           ("ours (fast) against the peer", "peer", "fast")):
    if slow in per and fast in per:
      ratios[name] = {
          key: accuracy_reports.speedup(per[slow], per[fast], key)
          for key in ("target_train_seconds", "target_wall_seconds")}
  return {"target": target, "target_chosen": how, "contestants": per,
          "speedups": ratios}


def _seconds(value):
  return "" if value is None else "%.0f" % value


def summary_markdown(summary, command):
  """summary.md: the contestants' medians and the speed-ups."""
  out = ["# Time to masked-LM accuracy %s\n" % (
      "(no target)" if summary["target"] is None else "%g" % summary["target"]),
         "Target: %s. Command: `%s`\n" % (summary["target_chosen"], command),
         "| contestant | recipe | reached | time to target, train s | "
         "whole process, wall s | final accuracy | examples/sec | "
         "eval overhead |", "|---|---|---|---|---|---|---|---|"]
  for name, c in summary["contestants"].items():
    out.append("| %s | %s | %d of %d | %s | %s | %s | %s | %s |" % (
        name, c["recipe"], c["reached"], c["repeats"],
        _seconds(c["target_train_seconds"]),
        _seconds(c["target_wall_seconds"]),
        "" if c["masked_lm_accuracy"] is None
        else "%.4f" % c["masked_lm_accuracy"],
        "" if c["examples_per_sec"] is None
        else "%.2f" % c["examples_per_sec"],
        "" if c["eval_overhead"] is None
        else "%.1f %%" % (100 * c["eval_overhead"])))
  out.append("")
  for name, ratio in summary["speedups"].items():
    out.append("- %s: %s (train seconds), %s (whole-process wall)" % (
        name, *[
            "n/a" if ratio[k] is None else "%.2fx sooner" % ratio[k]
            for k in ("target_train_seconds", "target_wall_seconds")]))
  return "\n".join(out) + "\n"


def write_outputs(args, summary, markdown_of, runs, target):
  """Writes summary.json and summary.md (`markdown_of(summary, command)`),
  the results table, the eval points and the curves of `runs` (label,
  run_dir); prints the summary."""
  command = " ".join(["python", "benchmarks/time_to_accuracy.py"] +
                     sys.argv[1:])
  out = args.output_dir
  with atomic_io.atomic_open(os.path.join(out, "summary.json")) as f:
    json.dump(summary, f, indent=2)
  markdown = markdown_of(summary, command)
  with atomic_io.atomic_open(os.path.join(out, "summary.md")) as f:
    f.write(markdown)
  accuracy_reports.write_table(
      out, [accuracy_reports.run_row(d, target) for _, d in runs])
  accuracy_reports.write_eval_points(os.path.join(out, "eval_points"), runs)
  accuracy_reports.write_curves_plot(
      os.path.join(out, "curves.png"), runs, target,
      "%s: held-out masked-LM accuracy" % plot_title(args))
  print(markdown)
  return summary


def plot_title(args):
  return "%s, seq %d" % ("tiny model" if args.smoke else "BERT-mini",
                         args.max_seq_length)


def budget_curves(summary):
  """{contestant: [(budget minutes, final accuracy)]}, the judge's point
  at B included."""
  curves = {BUDGET_JUDGE: [(summary["budget_minutes"], summary["target"])]}
  curves.update({name: [(r["minutes"], r["masked_lm_accuracy"])
                        for r in c["rungs"]]
                 for name, c in summary["contestants"].items()})
  return curves


def write_budget_results(args, runs, summary):
  """The budget protocol's outputs, and final accuracy against the budget
  (budget_curves.png)."""
  labelled = []
  for _, run_dir in runs:
    with open(os.path.join(run_dir, accuracy_reports.RUN_INFO_FILE)) as f:
      info = json.load(f)
    # From the run's contestant and divisor, not its stored name: a reused
    # run keeps the name it was written with.
    labelled.append(("%s %s" % (info["contestant"],
                                rung_label(info["divisor"])), run_dir))
  accuracy_reports.write_budget_plot(
      os.path.join(args.output_dir, "budget_curves.png"),
      budget_curves(summary), summary["budget_minutes"], summary["target"],
      "%s: final held-out accuracy against the training budget" %
      plot_title(args))
  return write_outputs(args, summary, budget_markdown, labelled,
                       summary["target"])


def write_results(args, runs, target, how):
  """The target protocol's outputs."""
  return write_outputs(args, summarize(runs, target, how), summary_markdown,
                       runs, target)


def parse_args(argv=None):
  """The benchmark's flags (--smoke fills in a seconds-long run)."""
  parser = benchmark_args.ArgumentParser(description=__doc__.splitlines()[0])
  add = parser.add_argument
  add("--output_dir", required=True)
  add("--protocol", choices=PROTOCOLS, default="budget",
      help="budget: time to quality by budget; target: every contestant "
      "for the same budget, timed to --target")
  add("--contestants", default=",".join(CONTESTANTS))
  add("--repeats", type=int,
      help="runs of each contestant (budget: of each rung); default 1 "
      "(budget), 2 (target)")
  add("--target", default="auto",
      help="--protocol=target: masked_lm_accuracy to time, or auto (see "
      "the docstring)")
  add("--max_train_minutes", type=float, default=15.0,
      help="B: the training-time budget (the schedules run over it); "
      "budget: bert_2018's, the others' are B/k")
  add("--divisors", default="1,2,3,4,6",
      help="budget: the ladder's k (each contestant but bert_2018 trains "
      "for B/k)")
  add("--start_divisor", type=int, default=2,
      help="budget: the first rung of fast's ladder (the goal: B/2)")
  add("--num_train_steps", type=int,
      help="train this many steps instead of a time budget")
  add("--train_batch_size", type=int, help="default: each recipe's")
  # argparse formats help with %: a per cent sign is %%.
  add("--eval_every_n_steps", type=int,
      help="default: evaluation about %d %%%% of training (budget: %d %%%%)"
      % (100 * EVAL_SHARE, 100 * BUDGET_EVAL_SHARE))
  add("--eval_batch_size", type=int, default=32)
  add("--max_eval_steps", type=int, help="default: every held-out batch")
  add("--stop_at_target", action="store_true",
      help="pass the target to each run (it stops there)")
  add("--corpus", type=benchmark_args.existing_file,
      help="a text corpus (blank lines between documents) instead of the "
      "KJV")
  add("--heldout_every", type=int, default=20,
      help="with --corpus: hold out every N-th document")
  add("--bible", default="bible", help="Debian's bible program")
  add("--bert_config_file", type=benchmark_args.existing_file,
      default=os.path.join(REPO_ROOT, "configs", "bert_mini.json"))
  add("--max_seq_length", type=int, default=128)
  add("--heldout_predictions", type=int, default=20)
  add("--vocab_size", type=int, default=30522)
  add("--dupe_factor", type=int, help="overrides the recipes' value")
  add("--peer_compile", action="store_true",
      help="the peer's encoder through torch.compile (compile time counted)")
  add("--peer_dense_decoder", action="store_true",
      help="the peer computes logits at every position, as run_mlm.py "
      "trains (a labelled second figure, not the headline peer)")
  add("--python_docs", type=benchmark_args.existing_dir,
      help="the second corpus: the <p> paragraphs of the HTML pages of "
      "Python's documentation in this folder (Debian's python3.11-doc: "
      "/usr/share/doc/python3.11/html), a page a document")
  add("--fortunes", type=benchmark_args.existing_dir,
      help="the third corpus: Debian's fortune files in "
      "this folder (/usr/share/games/fortunes)")
  add("--peer_threads", type=int,
      help="the peer's intra-op threads (default: the usable cores, as "
      "TensorFlow uses)")
  add("--throughput_warmup_steps", type=int,
      help="steps left out of examples/sec (default: the programs' 10)")
  add("--recipes_dir", type=benchmark_args.existing_dir, default=RECIPES_DIR)
  add("--seed", type=int, default=1)
  add("--timeout_minutes", type=float, default=120.0)
  add("--smoke", action="store_true",
      help="seconds-long check of the whole benchmark: a 2-layer model, "
      "sample_data/corpus.txt, a few steps")
  args = parser.parse_args(argv)
  if args.smoke:
    benchmark_args.fill_defaults(parser, args, SMOKE_FLAGS)
  return checked(args)


def checked(args):
  """The parsed flags, checked and completed.

  Raises:
    UserError: a flag out of range or flags that do not go together.
  """
  args.contestants = [c for c in args.contestants.split(",") if c]
  unknown = sorted(set(args.contestants) - set(CONTESTANTS))
  if unknown or not args.contestants:
    raise UserError("--contestants: expected any of %s, got %s" % (
        ",".join(CONTESTANTS), ",".join(unknown) or "none"))
  if args.repeats is None:
    args.repeats = 1 if args.protocol == "budget" or args.smoke else 2
  try:
    args.divisors = sorted({int(k) for k in args.divisors.split(",") if k})
  except ValueError:
    args.divisors = []
  if not args.divisors or args.divisors[0] < 1:
    raise UserError("--divisors: expected integers >= 1, comma-separated")
  if args.start_divisor not in args.divisors:
    raise UserError("--start_divisor=%d is not one of --divisors=%s" % (
        args.start_divisor, ",".join(map(str, args.divisors))))
  if args.protocol == "budget" and BUDGET_JUDGE not in args.contestants:
    raise UserError("--protocol=budget needs %s among --contestants: its "
                    "accuracy after the budget is the target" % BUDGET_JUDGE)
  if sum(bool(c) for c in (args.corpus, args.python_docs,
                             args.fortunes)) > 1:
    raise UserError("--corpus, --python_docs and --fortunes: give one "
                    "corpus")
  if args.target != "auto":
    try:
      args.target = float(args.target)
    except ValueError:
      args.target = -1.0
    if not 0.0 < args.target <= 1.0:
      raise UserError("--target: expected auto or a number 0 < A <= 1")
  elif args.stop_at_target:
    raise UserError("--stop_at_target needs a number --target")
  for name in ("repeats", "max_train_minutes", "num_train_steps",
               "eval_every_n_steps", "eval_batch_size", "max_eval_steps"):
    value = getattr(args, name)
    if value is not None and value <= 0:
      raise UserError("--%s must be > 0, got %s" % (name, value))
  return args


def main(args):
  started = time.perf_counter()
  data = Data(os.path.join(args.output_dir, "data"))
  prepare_text_and_model(args, data)
  heldout_rows = prepare_heldout(args, data)
  recipes = sorted({PEER_RECIPE if c == "peer" else c
                    for c in args.contestants})
  plan = {"heldout_rows": heldout_rows, "target": args.target,
          "model": "tiny (2x32)" if args.smoke else os.path.splitext(
              os.path.basename(args.bert_config_file))[0],
          "records": {r: prepare_records(args, data, r) for r in recipes}}
  if "peer" in args.contestants:
    records = plan["records"][PEER_RECIPE]
    plan["sequences"] = training_sequences(
        records, os.path.splitext(records)[0] + ".npz", data.vocab)
  data.mark_made_by(args)
  print("held-out: %d records; data in %s, ready after %.1f s" % (
      heldout_rows, data.dir, time.perf_counter() - started), flush=True)
  if args.protocol == "budget":
    runs, summary = run_budget_protocol(args, data, plan)
    return write_budget_results(args, runs, summary)
  runs = []
  for repeat in range(args.repeats):
    shift = repeat % len(args.contestants)
    for contestant in args.contestants[shift:] + args.contestants[:shift]:
      runs.append((contestant, run_contestant(args, data, contestant, repeat,
                                              plan)))
  runs.sort(key=lambda run: args.contestants.index(run[0]))
  if args.target == "auto":
    target = auto_target(runs)
    how = ("auto: the best held-out accuracy of bert_2018's worst repeat "
           "within the budget, rounded down to 0.01")
  else:
    target, how = args.target, "given (--target)"
  return write_results(args, runs, target, how)


if __name__ == "__main__":
  child_runs.run_benchmark(main, parse_args)
