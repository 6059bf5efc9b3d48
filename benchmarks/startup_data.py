"""The inputs of benchmarks/startup.py, made once per output directory.

Under OUTPUT_DIR/data (time_to_accuracy.Data's names, and more):

  train.txt, vocab.txt   the corpus, and create_vocab.py's vocab of it;
  model.json             BERT-mini (--smoke: time_to_accuracy's 2-layer
                         model), its vocab_size the vocab's;
  model_no_dropout.json  the same without dropout, for the PyTorch peer, as
                         the fast recipe trains;
  fast_train_*.tfrecord  create_pretraining_data.py with the fast recipe's
                         flags (time_to_accuracy.prepare_records);
  fast_static_seed1.tfrecord  the same masked once at the fast recipe's
                         rate, the peer's (seeded_comparison.static_records);
  pretrained/            run_pretraining.py with the fast recipe for
                         --pretrain_steps steps: the model the fine-tuning
                         programs and extract_features start from (its
                         directory holds the config and vocab);
  squad_v1.json          a SQuAD 1.1 file made of the corpus's sentences
                         (squad_json), squad_questions.txt its count;
  glue/SST-2/            GLUE's SST-2 layout of sample_data/classify;
  extract_input.txt      the sentences of sample_data/classify/dev.tsv;
  prepared.json          what the data were made with (preparation_key):
                         a later run with the same flags and corpus reuses
                         them, any other makes them anew.
"""

import hashlib
import json
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import seeded_comparison
import time_to_accuracy as tta

from bertkit.common import atomic_io
from bertkit.common.errors import UserError

RECIPE = "fast"
CLASSIFY_DIR = os.path.join(tta.REPO_ROOT, "sample_data", "classify")
GLUE_TASK, GLUE_FOLDER = "sst-2", "SST-2"
# The SQuAD file: contexts of this many consecutive sentences of a document,
# a question per sentence, the first this many questions (400 at batch 32:
# 12 steps an epoch, so --steps=10 takes most of one).
SQUAD_CONTEXT_SENTENCES = 3
SQUAD_QUESTIONS = 400
# The answer of a question: the longest word of its sentence, at least this
# long (a word a reader could be asked for).
SQUAD_MIN_ANSWER = 4
# The flags the prepared data depend on (prepared.json, with the corpus's
# SHA-1); the pretrained model trains at --train_batch_size.
PREP_FLAGS = ("smoke", "corpus", "bert_config_file", "max_seq_length",
              "vocab_size", "pretrain_steps", "train_batch_size",
              "recipes_dir")


def squad_json(documents, limit=SQUAD_QUESTIONS):
  """A SQuAD 1.1 dict from documents (lists of sentences): contexts of
  SQUAD_CONTEXT_SENTENCES consecutive sentences; for each sentence with a
  word of SQUAD_MIN_ANSWER letters or more, a question asking for its
  longest such word (the sentence, that word replaced by "what"), whose
  answer is the word's span in the context. Deterministic; at most `limit`
  questions."""
  data, count = [], 0
  for d, sentences in enumerate(documents):
    paragraphs = []
    for i in range(0, len(sentences), SQUAD_CONTEXT_SENTENCES):
      chunk = sentences[i:i + SQUAD_CONTEXT_SENTENCES]
      context, qas = " ".join(chunk), []
      offset = 0
      for sentence in chunk:
        words = list(re.finditer(r"\b[A-Za-z]+\b", sentence))
        best = max(words, key=lambda m: len(m.group()), default=None)
        if (best is not None and len(best.group()) >= SQUAD_MIN_ANSWER
            and count < limit):
          question = (sentence[:best.start()] + "what" +
                      sentence[best.end():]).rstrip(".!?") + "?"
          qas.append({"id": "q%d" % count, "question": question,
                      "answers": [{"text": best.group(),
                                   "answer_start": offset + best.start()}]})
          count += 1
        offset += len(sentence) + 1
      if qas:
        paragraphs.append({"context": context, "qas": qas})
    if paragraphs:
      data.append({"title": "document_%d" % d, "paragraphs": paragraphs})
  return {"version": "1.1", "data": data}, count


def tsv_rows(path):
  """The rows of a tsv file with a header line."""
  with open(path, encoding="utf-8") as f:
    return [l.rstrip("\n").split("\t") for l in f][1:]


def write_glue_dir(root, classify_dir=CLASSIFY_DIR):
  """GLUE's SST-2 folder (train.tsv, dev.tsv: `sentence<TAB>label`, labels
  0/1) of the sample classification task, its labels sorted."""
  folder = os.path.join(root, GLUE_FOLDER)
  os.makedirs(folder, exist_ok=True)
  labels = sorted({r[1] for r in tsv_rows(os.path.join(classify_dir,
                                                       "train.tsv"))})
  for name in ("train.tsv", "dev.tsv"):
    rows = tsv_rows(os.path.join(classify_dir, name))
    with atomic_io.atomic_open(os.path.join(folder, name)) as f:
      f.write("sentence\tlabel\n" + "".join(
          "%s\t%d\n" % (s, labels.index(l)) for s, l in rows))


class Prepared(tta.Data):
  """The prepared inputs (under OUTPUT_DIR/data), tta.Data's and ours."""

  def __init__(self, data_dir):
    super().__init__(data_dir)
    self.peer_config = os.path.join(data_dir, "model_no_dropout.json")
    self.pretrained = os.path.join(data_dir, "pretrained")
    self.squad = os.path.join(data_dir, "squad_v1.json")
    self.squad_questions = os.path.join(data_dir, "squad_questions.txt")
    self.glue = os.path.join(data_dir, "glue")
    self.extract_input = os.path.join(data_dir, "extract_input.txt")
    self.marker = os.path.join(data_dir, "prepared.json")
    self.fast_records = self.static_records = None


def preparation_key(args):
  """What the prepared data depend on: PREP_FLAGS and the corpus's bytes."""
  with open(args.corpus, "rb") as f:
    digest = hashlib.sha1(f.read()).hexdigest()
  return dict({name: getattr(args, name) for name in PREP_FLAGS},
              corpus_sha1=digest)


def write_model_configs(args, data):
  """The model (BERT-mini or the smoke model, vocab_size the vocab's) and
  the peer's copy without dropout, as the fast recipe trains."""
  if args.smoke:
    config = dict(tta.SMOKE_CONFIG)
  else:
    with open(args.bert_config_file) as f:
      config = json.load(f)
  with open(data.vocab, encoding="utf-8") as f:
    config["vocab_size"] = sum(1 for _ in f)
  for path, values in ((data.model_config, config), (data.peer_config, dict(
      config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))):
    with atomic_io.atomic_open(path) as f:
      json.dump(values, f, indent=2)


def pretrain(args, data):
  """The model the fine-tuning programs start from: the fast recipe for
  --pretrain_steps steps (once; a run that did not finish is redone)."""
  if os.path.exists(os.path.join(data.pretrained, "checkpoint")):
    return
  shutil.rmtree(data.pretrained, ignore_errors=True)
  tta.run_checked(pretraining_command(args, data, data.pretrained,
                                      args.pretrain_steps),
                  "run_pretraining.py (the pretrained model)")


def corpus_squad(corpus):
  """(SQuAD file, its questions) of the corpus, read before anything is
  made.

  Raises:
    UserError: it makes fewer than SQUAD_QUESTIONS questions.
  """
  squad, count = squad_json(tta.text_documents(corpus))
  if count < SQUAD_QUESTIONS:
    raise UserError("the corpus makes %d SQuAD questions; run_squad's "
                    "start-up is timed on %d" % (count, SQUAD_QUESTIONS))
  return squad, count


def write_task_inputs(data, squad):
  """The SQuAD file (corpus_squad), the GLUE folder and extract_features'
  input."""
  if not os.path.exists(data.squad):
    squad, count = squad
    with atomic_io.atomic_open(data.squad_questions) as f:
      f.write("%d\n" % count)
    with atomic_io.atomic_open(data.squad) as f:
      json.dump(squad, f, indent=1)
  if not os.path.exists(os.path.join(data.glue, GLUE_FOLDER, "dev.tsv")):
    write_glue_dir(data.glue)
  if not os.path.exists(data.extract_input):
    with atomic_io.atomic_open(data.extract_input) as f:
      f.write("".join(r[0] + "\n" for r in tsv_rows(
          os.path.join(CLASSIFY_DIR, "dev.tsv"))))


def prepare(args):
  """The inputs of the runs, made once per preparation_key (a data
  directory made with other flags or corpus is made anew).

  Returns:
    Prepared, its records' paths set.
  """
  started = time.perf_counter()
  data = Prepared(os.path.join(args.output_dir, "data"))
  key = preparation_key(args)
  squad = corpus_squad(args.corpus)
  made_by = None
  if os.path.exists(data.marker):
    with open(data.marker) as f:
      made_by = json.load(f)
  # Made with other flags or corpus, or not finished: made anew (only a
  # preparation's directory is deleted: tta.Data.remove). Parts another
  # --programs needs are added to a finished one (each is made only if
  # missing).
  if made_by != key:
    data.remove()
  data.make()
  if not os.path.exists(data.train_text):
    shutil.copyfile(args.corpus, data.train_text)
  if not os.path.exists(data.vocab):
    tta.run_checked([sys.executable, "create_vocab.py",
                     "--input_file=%s" % data.train_text,
                     "--output_file=%s" % data.vocab,
                     "--vocab_size=%d" % args.vocab_size], "create_vocab.py")
  write_model_configs(args, data)
  data.fast_records = tta.prepare_records(args, data, RECIPE)
  if "peer" in args.programs:
    data.static_records = seeded_comparison.static_records(args, data, 1)
  if set(args.programs) - {"pretraining", "peer"}:
    pretrain(args, data)
  write_task_inputs(data, squad)
  with atomic_io.atomic_open(data.marker) as f:
    json.dump(key, f, indent=2)
  print("data in %s, ready after %.1f s" % (
      data.dir, time.perf_counter() - started), flush=True)
  return data


def pretraining_command(args, data, output_dir, steps):
  """run_pretraining.py with the fast recipe for `steps` steps."""
  return [sys.executable, "run_pretraining.py",
          "--flagfile=%s" % tta.recipe_file(args, RECIPE, "run_pretraining"),
          "--bert_config_file=%s" % data.model_config,
          "--input_file=%s" % data.fast_records,
          "--vocab_file=%s" % data.vocab, "--output_dir=%s" % output_dir,
          "--do_train", "--max_seq_length=%d" % args.max_seq_length,
          "--train_batch_size=%d" % args.train_batch_size,
          "--num_train_steps=%d" % steps, "--log_every_n_steps=1"]
