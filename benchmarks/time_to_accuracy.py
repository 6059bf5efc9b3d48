"""Time to accuracy: held-out masked-LM accuracy against training seconds.

On a real corpus, the King James Bible as Debian's bible-kjv packages it
(`apt-get install bible-kjv`: the text and the `bible` program that decodes
it), one document per chapter, a held-out set of whole books the training
never sees, and BERT-mini (configs/bert_mini.json, its vocab_size set to the
vocab's) at sequence length 128, three contestants train for the same
training-time budget:

  bert_2018  run_pretraining.py with configs/recipes/bert_2018 (upstream's
             recipe), on records made by create_pretraining_data.py with
             that recipe's flags;
  fast       the same with configs/recipes/fast;
  peer       the PyTorch peer a user would pick
             (benchmarks/time_to_accuracy_peer.py: Hugging Face
             BertForMaskedLM, torch.optim.AdamW, DataCollatorForLanguage
             Modeling's dynamic masking) on the token sequences of fast's
             training records, in the same order, with fast's recipe values
             (learning rate, schedule, betas, epsilon, weight decay,
             clipping, batch, masking rate, warm-up, dropout).

Each is evaluated every N steps and at the end on the same questions: the
held-out books' records, written once by create_pretraining_data.py
(--masking=static --masked_lm_prob=0.15 --max_predictions_per_seq=20, a
fixed --random_seed, single segments: --next_sentence_prediction=false),
the first whole eval batches of them; contestants trained with next-sentence
prediction read the same records with a next_sentence_labels feature added
(run_pretraining.py evaluates records of the kind it trains on; their
masked-LM questions are the same bytes). Masked-LM accuracy is the share of
masked positions (weight 1) whose argmax is the label, in both frameworks.

Every contestant runs as a whole process, --repeats times in rotating order;
each run's wall clock is taken from outside, and so is the moment each
evaluation line appears in its eval_history.jsonl. The time to --target is
the first evaluation reaching it: its training seconds (the program's
clock, evaluation excluded) and the whole-process wall seconds from the
launch until that evaluation was written; figures are medians over the
repeats. The default target (--target=auto) is the accuracy bert_2018
reaches within the budget in every repeat (its worst repeat's best
evaluation, rounded down to 0.01): with the default 20-minute budget, "the
accuracy bert_2018 reaches within about 20 minutes on this machine".

Writes to --output_dir:
  summary.md, summary.json  per contestant: time to target (train / wall,
                            medians), final accuracy, examples/sec, eval
                            overhead; speed-ups fast over bert_2018 and ours
                            (fast) over the peer;
  results.md/.csv/.json     the results table, one row per run
                            (bertkit/perf/accuracy_reports.py);
  eval_points.csv/.json     every evaluation of every run;
  curves.png                accuracy against training minutes;
  runs/<contestant>_r<i>/   each run's output directory;
  data/                     corpus, vocab, model config, records (reused by
                            a later run with the same --output_dir).

Examples:
  python benchmarks/time_to_accuracy.py --output_dir=/tmp/tta  # 20 min x 3 x 2
  python benchmarks/time_to_accuracy.py --output_dir=/tmp/tta_short \
    --max_train_minutes=2 --repeats=1
  python benchmarks/time_to_accuracy.py --output_dir=/tmp/tta_smoke --smoke
"""

import argparse
import hashlib
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
from bertkit.common.errors import UserError
from bertkit.data import pretraining_instances
from bertkit.engine import evaluation
from bertkit.perf import accuracy_reports
from bertkit.perf import child_runs

CONTESTANTS = ("bert_2018", "fast", "peer")
# The recipe whose records and values the peer takes.
PEER_RECIPE = "fast"
PEER = os.path.join(REPO_ROOT, "benchmarks", "time_to_accuracy_peer.py")
RECIPES_DIR = os.path.join(REPO_ROOT, "configs", "recipes")
# Whole books held out: narrative, wisdom, prophecy and letters, 3.7 % of
# the text, none a parallel account of a training book.
HELDOUT_BOOKS = ("Ruth", "Esther", "Ecclesiastes", "Joel", "Jonah",
                 "Hebrews", "James", "1 Peter")
HELDOUT_SEED = 12345
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
# The flags the prepared data depends on (data/data.json).
DATA_FLAGS = ("smoke", "corpus", "heldout_every", "bert_config_file",
              "max_seq_length", "heldout_predictions", "vocab_size",
              "eval_batch_size", "max_eval_steps")
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
  with open(path, encoding="utf-8") as f:
    for line in f:
      if line.strip():
        current.append(line.strip())
      elif current:
        documents.append(current)
        current = []
  if current:
    documents.append(current)
  return documents


def split_corpus(args):
  """(training documents, held-out documents), each a list of line lists.

  KJV: chapters, the HELDOUT_BOOKS held out; --corpus: every
  --heldout_every-th document held out.
  """
  if args.corpus:
    documents = text_documents(args.corpus)
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

  def __init__(self, data_dir):
    self.dir = data_dir
    self.train_text = os.path.join(data_dir, "train.txt")
    self.heldout_text = os.path.join(data_dir, "heldout.txt")
    self.vocab = os.path.join(data_dir, "vocab.txt")
    self.model_config = os.path.join(data_dir, "model.json")
    self.heldout_all = os.path.join(data_dir, "heldout_all.tfrecord")
    self.heldout = os.path.join(data_dir, "heldout.tfrecord")
    self.heldout_nsp = os.path.join(data_dir, "heldout_nsp.tfrecord")
    self.heldout_arrays = os.path.join(data_dir, "heldout.npz")

  def records(self, recipe, key):
    """A recipe's training records; `key` names the flags that made them."""
    return os.path.join(self.dir, "%s_train_%s.tfrecord" % (recipe, key))

  def check_made_by(self, args):
    """Refuses a data directory made with other corpus or model flags, and
    empties one whose preparation never finished.

    Raises:
      UserError: data.json records other values.
    """
    made_by = {name: getattr(args, name) for name in DATA_FLAGS}
    path = os.path.join(self.dir, "data.json")
    if not os.path.exists(path):
      shutil.rmtree(self.dir, ignore_errors=True)
      os.makedirs(self.dir)
      return
    with open(path) as f:
      before = json.load(f)
    if before != made_by:
      changed = sorted(k for k in set(made_by) | set(before)
                       if before.get(k) != made_by.get(k))
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
    train, heldout = split_corpus(args)
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
  count. Writes the no-NSP records, the same with next_sentence_labels, and
  their arrays for the peer."""
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
  write_examples(data.heldout_nsp, [
      dict(e, next_sentence_labels=np.zeros(1, np.int64)) for e in examples])
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


def common_run_flags(args, plan):
  """The flags both trainers take alike: the training budget (a time
  budget the schedule runs over or, with --num_train_steps, steps), the
  throughput warm-up and, with --stop_at_target, the target."""
  if args.num_train_steps:
    argv = ["--num_train_steps=%d" % args.num_train_steps]
  else:
    argv = ["--train_time_budget_hours=%r" % (args.max_train_minutes / 60.0),
            "--num_train_steps=%d" % 10**9]
  if args.throughput_warmup_steps is not None:
    argv.append("--throughput_warmup_steps=%d" %
                args.throughput_warmup_steps)
  if args.stop_at_target:
    argv.append("--target_masked_lm_accuracy=%g" % plan["target"])
  return argv


def eval_every_n_steps(args, heldout_rows, batch_size):
  """--eval_every_n_steps, or N such that evaluation costs about
  EVAL_SHARE of the training time."""
  if args.eval_every_n_steps:
    return args.eval_every_n_steps
  # Rounded first: 288 / (3 x 0.1 x 32) is 29.999999999999996.
  return max(1, int(math.ceil(round(
      heldout_rows / (3.0 * EVAL_SHARE * batch_size), 6))))


def ours_command(args, data, recipe, run_dir, plan):
  """run_pretraining.py with the recipe's flags file and the benchmark's."""
  values = read_flagfile(recipe_file(args, recipe, "run_pretraining"))
  records = plan["records"][recipe]
  heldout = (data.heldout_nsp if has_next_sentence(records)
             else data.heldout)
  batch = args.train_batch_size or int(values.get("train_batch_size", 32))
  argv = [sys.executable, child_runs.RUN_PRETRAINING,
          "--flagfile=%s" % recipe_file(args, recipe, "run_pretraining"),
          "--bert_config_file=%s" % data.model_config,
          "--input_file=%s" % records, "--vocab_file=%s" % data.vocab,
          "--output_dir=%s" % run_dir, "--do_train",
          "--max_seq_length=%d" % args.max_seq_length,
          "--eval_input_file=%s" % heldout,
          "--eval_every_n_steps=%d" % eval_every_n_steps(
              args, plan["heldout_rows"], batch),
          "--eval_batch_size=%d" % args.eval_batch_size,
          "--max_eval_steps=%d" % (plan["heldout_rows"] //
                                   args.eval_batch_size),
          "--tf_random_seed=%d" % args.seed, "--log_every_n_steps=50"]
  argv += common_run_flags(args, plan)
  if args.train_batch_size:
    argv.append("--train_batch_size=%d" % args.train_batch_size)
  return argv


def peer_command(args, data, run_dir, plan):
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
  argv += common_run_flags(args, plan)
  if args.peer_threads:
    argv.append("--threads=%d" % args.peer_threads)
  return argv


def has_next_sentence(records_path):
  """Whether the first record of a file has next_sentence_labels."""
  for raw in tf.io.tf_record_iterator(records_path):
    return "next_sentence_labels" in tf.train.Example.FromString(
        raw).features.feature
  return False


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


def run_contestant(args, data, contestant, repeat, plan):
  """Runs one repeat of a contestant; returns its run directory."""
  run_dir = os.path.join(args.output_dir, "runs",
                         "%s_r%d" % (contestant, repeat))
  shutil.rmtree(run_dir, ignore_errors=True)
  os.makedirs(run_dir)
  if contestant == "peer":
    argv = peer_command(args, data, run_dir, plan)
    recipe, framework = PEER_RECIPE, "PyTorch peer"
  else:
    argv = ours_command(args, data, contestant, run_dir, plan)
    recipe, framework = contestant, None
  seconds, seen = run_watched(argv, run_dir, args.timeout_minutes * 60)
  info = {"name": "%s r%d" % (contestant, repeat), "contestant": contestant,
          "model": plan["model"], "recipe": recipe, "framework": framework,
          "process_wall_seconds": round(seconds, 2),
          "eval_seen_seconds": seen, "command": " ".join(argv[1:])}
  with atomic_io.atomic_open(os.path.join(
      run_dir, accuracy_reports.RUN_INFO_FILE)) as f:
    json.dump(info, f, indent=2)
  print("%-9s r%d: %.1f s whole process, %d evaluations" % (
      contestant, repeat, seconds, len(seen)), flush=True)
  return run_dir


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


def write_results(args, runs, target, how):
  """Writes the summary, the results table, the eval points and the plot."""
  summary = summarize(runs, target, how)
  command = " ".join(["python", "benchmarks/time_to_accuracy.py"] +
                     sys.argv[1:])
  out = args.output_dir
  with atomic_io.atomic_open(os.path.join(out, "summary.json")) as f:
    json.dump(summary, f, indent=2)
  markdown = summary_markdown(summary, command)
  with atomic_io.atomic_open(os.path.join(out, "summary.md")) as f:
    f.write(markdown)
  accuracy_reports.write_table(
      out, [accuracy_reports.run_row(d, target) for _, d in runs])
  accuracy_reports.write_eval_points(os.path.join(out, "eval_points"), runs)
  accuracy_reports.write_curves_plot(
      os.path.join(out, "curves.png"), runs, target,
      "%s, seq %d: held-out masked-LM accuracy" % (
          "tiny model" if args.smoke else "BERT-mini", args.max_seq_length))
  print(markdown)
  return summary


def parse_args(argv=None):
  """The benchmark's flags (--smoke fills in a seconds-long run)."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  add = parser.add_argument
  add("--output_dir", required=True)
  add("--contestants", default=",".join(CONTESTANTS))
  add("--repeats", type=int, default=2)
  add("--target", default="auto",
      help="masked_lm_accuracy to time, or auto (see the docstring)")
  add("--max_train_minutes", type=float, default=20.0,
      help="training-time budget of every run (the schedules run over it)")
  add("--num_train_steps", type=int,
      help="train this many steps instead of a time budget")
  add("--train_batch_size", type=int, help="default: each recipe's")
  add("--eval_every_n_steps", type=int,
      help="default: evaluation about %d %% of training" % (100 * EVAL_SHARE))
  add("--eval_batch_size", type=int, default=32)
  add("--max_eval_steps", type=int, help="default: every held-out batch")
  add("--stop_at_target", action="store_true",
      help="pass the target to each run (it stops there)")
  add("--corpus", help="a text corpus (blank lines between documents) "
      "instead of the KJV")
  add("--heldout_every", type=int, default=20,
      help="with --corpus: hold out every N-th document")
  add("--bible", default="bible", help="Debian's bible program")
  add("--bert_config_file",
      default=os.path.join(REPO_ROOT, "configs", "bert_mini.json"))
  add("--max_seq_length", type=int, default=128)
  add("--heldout_predictions", type=int, default=20)
  add("--vocab_size", type=int, default=30522)
  add("--dupe_factor", type=int, help="overrides the recipes' value")
  add("--peer_threads", type=int,
      help="the peer's intra-op threads (default: the usable cores, as "
      "TensorFlow uses)")
  add("--throughput_warmup_steps", type=int,
      help="steps left out of examples/sec (default: the programs' 10)")
  add("--recipes_dir", default=RECIPES_DIR)
  add("--seed", type=int, default=1)
  add("--timeout_minutes", type=float, default=120.0)
  add("--smoke", action="store_true",
      help="seconds-long check of the whole benchmark: a 2-layer model, "
      "sample_data/corpus.txt, a few steps")
  args = parser.parse_args(argv)
  if args.smoke:
    defaults = dict(corpus=os.path.join(REPO_ROOT, "sample_data",
                                        "corpus.txt"),
                    heldout_every=8, max_seq_length=64, heldout_predictions=10,
                    vocab_size=1000, num_train_steps=30,
                    eval_every_n_steps=10, train_batch_size=8,
                    eval_batch_size=8, max_eval_steps=2, repeats=1,
                    dupe_factor=1, throughput_warmup_steps=2,
                    peer_threads=1)
    for name, value in defaults.items():
      if getattr(args, name) == parser.get_default(name):
        setattr(args, name, value)
  args.contestants = [c for c in args.contestants.split(",") if c]
  unknown = sorted(set(args.contestants) - set(CONTESTANTS))
  if unknown or not args.contestants:
    raise UserError("--contestants: expected any of %s, got %s" % (
        ",".join(CONTESTANTS), ",".join(unknown) or "none"))
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
  try:
    main(parse_args())
  except UserError as e:
    print("error: %s" % e, file=sys.stderr)
    sys.exit(2)
  except RuntimeError as e:
    print("error: %s" % e, file=sys.stderr)
    sys.exit(3)
