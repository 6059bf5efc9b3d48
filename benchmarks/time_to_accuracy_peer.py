"""time_to_accuracy.py's PyTorch peer: BERT as a careful engineer trains it.

The model, loss and optimizer of benchmarks/pytorch_peer.py (Hugging Face
`BertModel` and the pretraining heads built from one of our bert_config.json
files, PyTorch's fused scaled-dot-product attention, the masked positions
gathered before the decoder, `torch.optim.AdamW` with no decay for LayerNorm
and biases, gradient clipping to a global norm; --compile: torch.compile,
its compile time counted), with a recipe's values as flags, and
`DataCollatorForLanguageModeling`'s dynamic masking (each token masked with
probability --masked_lm_prob, 80/10/10, new masks every time a sequence is
seen; each batch padded to its longest sequence). The masked-LM loss is the
mean cross-entropy over the batch's masked tokens (plus the next-sentence
loss when the sequences carry next-sentence labels).

--dense_decoder trains instead as transformers' run_mlm.py does: the model's
own loss (`BertForMaskedLM(labels=...)`), whose decoder computes the
vocab-wide logits at every position of every sequence. It is a labelled
second figure ("as run_mlm.py trains it"), never the headline peer.

It trains on given token sequences (the benchmark reads them from the
training records of run_pretraining.py's contestant, so both see the same
text in the same order: file order, epoch after epoch) and evaluates the
training weights every --eval_every_n_steps steps and at the end on the
held-out set by run_pretraining.py's rule (`evaluate`): the records' own
masks, masked-LM accuracy = the share of masked positions (weight 1) whose
argmax is the label, loss = the mean cross-entropy over them.

Its clock is run_pretraining.py's (bertkit/engine/loop/training_clock.py):
training seconds run from when the frameworks are imported (before the model
is built and the data loaded) and leave evaluation out; wall seconds include
it. The learning-rate schedule is the recipe's, in steps or, with
--train_time_budget_hours, in training seconds from the first step to the
budget's end, and training stops when the budget is spent (or at
--num_train_steps, or at the first evaluation reaching
--target_masked_lm_accuracy).

Writes to --output_dir the files run_pretraining.py writes, with the same
fields: eval_history.jsonl, throughput_summary.json and, with a target,
time_to_target.json; prints the summary as one JSON line.

For comparisons with common random numbers (benchmarks/seeded_comparison.py)
it can train on the masks of masked training records instead of drawing its
own (--train_records: the same masks as run_pretraining.py reading them),
and start from given weights (--initial_weights, a Hugging Face directory)
or write its own initial weights there first (--save_initial_weights), so
that both trainers start from the same point.

Inputs (NumPy .npz, written by benchmarks/time_to_accuracy.py):
  --train_sequences: input_ids and token_type_ids of all sequences
    concatenated (real tokens only), offsets (N + 1), optionally
    next_sentence_labels (N); or --train_records: masked records
    (create_pretraining_data.py --masking=static), their masks kept;
  --heldout: input_ids, input_mask, segment_ids [N, S]; masked_lm_positions,
    masked_lm_ids, masked_lm_weights [N, P].

Example:
  python benchmarks/time_to_accuracy_peer.py --bert_config_file=mini.json \
    --vocab_file=vocab.txt --train_sequences=train.npz --heldout=heldout.npz \
    --output_dir=/tmp/peer --train_batch_size=32 --learning_rate=1e-3 \
    --lr_schedule=warmup_stable_decay --train_time_budget_hours=0.33 \
    --eval_every_n_steps=50
"""

import argparse
import json
import math
import os
import sys
import time

# transformers imports TensorFlow too when it is installed: a PyTorch user's
# process would not hold it.
os.environ.setdefault("USE_TF", "0")
# pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np
import torch
import transformers

import pytorch_peer
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
from bertkit.engine.loop import training_clock
from bertkit.engine.update import lr_schedules
from bertkit.perf import benchmark_args

# transformers imports a class's module on first use: done here, so that
# the clock below counts no imports.
MODEL_CLASSES = (transformers.BertForMaskedLM,
                 transformers.BertForPreTraining)
COLLATOR = transformers.DataCollatorForLanguageModeling
TOKENIZER = transformers.BertTokenizerFast

# The clock starts here, as run_pretraining.py's starts once TensorFlow and
# the engine are imported (training_clock's _PROCESS_START).
_CLOCK_START = time.time()

HISTORY_FILE = "eval_history.jsonl"
TARGET_FILE = "time_to_target.json"
SUMMARY_FILE = "throughput_summary.json"
METRIC = "masked_lm_accuracy"
# run_pretraining.py's defaults: --num_warmup_steps, and the warm-up share
# of a time budget when --warmup_proportion is not given.
DEFAULT_WARMUP_STEPS = 10000
BUDGET_WARMUP_PROPORTION = 0.01


def load_train_sequences(path):
  """The training sequences of a --train_sequences file.

  Returns:
    list of dicts: input_ids, token_type_ids, special_tokens_mask (int64
    arrays of the real tokens) and next_sentence_label when the file has
    them; special tokens are left unmasked by the collator.
  """
  data = np.load(path)
  offsets = data["offsets"]
  ids = data["input_ids"].astype(np.int64)
  types = data["token_type_ids"].astype(np.int64)
  special = np.isin(ids, data["special_ids"]).astype(np.int64)
  labels = data["next_sentence_labels"] if (
      "next_sentence_labels" in data.files) else None
  sequences = []
  for i in range(len(offsets) - 1):
    span = slice(offsets[i], offsets[i + 1])
    sequence = {"input_ids": ids[span], "token_type_ids": types[span],
                "special_tokens_mask": special[span]}
    if labels is not None:
      sequence["next_sentence_label"] = int(labels[i])
    sequences.append(sequence)
  return sequences


def load_heldout(path):
  """The --heldout arrays as a dict of NumPy arrays."""
  data = np.load(path)
  return {name: data[name] for name in data.files}


def evaluate(model, heldout, batch_size):
  """Masked-LM accuracy and loss on held-out rows, as run_pretraining's
  metric: over the masked positions with weight 1, argmax == label.

  Args:
    model: BertForMaskedLM or BertForPreTraining.
    heldout: dict of arrays (see load_heldout): [N, S] and [N, P].
    batch_size: rows per forward pass (each padded to its longest row).

  Returns:
    {"masked_lm_accuracy": float, "masked_lm_loss": float}.
  """
  was_training = model.training
  model.eval()
  correct = loss = weight = 0.0
  with torch.no_grad():
    for start in range(0, len(heldout["input_ids"]), batch_size):
      rows = slice(start, start + batch_size)
      length = int(heldout["input_mask"][rows].sum(axis=1).max())
      hidden = model.bert(
          input_ids=torch.from_numpy(
              heldout["input_ids"][rows, :length].astype(np.int64)),
          attention_mask=torch.from_numpy(
              heldout["input_mask"][rows, :length].astype(np.int64)),
          token_type_ids=torch.from_numpy(
              heldout["segment_ids"][rows, :length].astype(np.int64)),
      ).last_hidden_state  # [B, L, H]
      positions = torch.from_numpy(
          heldout["masked_lm_positions"][rows].astype(np.int64))  # [B, P]
      gathered = torch.gather(
          hidden, 1, positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
      logits = model.cls.predictions(gathered)  # [B, P, V]
      labels = torch.from_numpy(
          heldout["masked_lm_ids"][rows].astype(np.int64))
      weights = torch.from_numpy(
          heldout["masked_lm_weights"][rows].astype(np.float32))
      log_probs = torch.log_softmax(logits.float(), dim=-1)
      per_position = -log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
      correct += float((weights * (logits.argmax(-1) == labels)).sum())
      loss += float((weights * per_position).sum())
      weight += float(weights.sum())
  model.train(was_training)
  return {METRIC: correct / weight, "masked_lm_loss": loss / weight}


def save_initial_weights(model, bert_config_file, directory):
  """The model's weights as a Hugging Face directory run_pretraining.py
  --init_checkpoint reads: model.safetensors and the config of
  `bert_config_file` (its own dropout: a run's overrides are the run's)."""
  model.save_pretrained(directory, safe_serialization=True)
  pytorch_peer.hf_config(bert_config_file).save_pretrained(directory)


def build_peer(args, next_sentence):
  """(model, optimizer, collator) of the recipe's flags."""
  overrides = {}
  for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
    if getattr(args, name) is not None:
      overrides[name] = getattr(args, name)
  model, _ = pytorch_peer.build_model(args.bert_config_file, next_sentence,
                                      **overrides)
  if args.save_initial_weights:
    save_initial_weights(model, args.bert_config_file,
                         args.save_initial_weights)
  if args.initial_weights:
    initial = type(model).from_pretrained(
        args.initial_weights, attn_implementation=pytorch_peer.ATTENTION,
        **overrides)
    model.load_state_dict(initial.state_dict())
  model = pytorch_peer.compiled(model, args.compile)
  model.train()
  optimizer = pytorch_peer.adamw(
      model, args.learning_rate, betas=(args.adam_beta_1, args.adam_beta_2),
      eps=args.adam_epsilon, weight_decay=args.weight_decay_rate)
  tokenizer = TOKENIZER(vocab_file=args.vocab_file,
                        do_lower_case=args.do_lower_case)
  collator = COLLATOR(tokenizer, mlm_probability=args.masked_lm_prob,
                      seed=args.seed)
  return model, optimizer, collator


def step_loss(model, batch, dense_decoder):
  """The training loss of a collated batch: sparse prediction
  (pytorch_peer.pretraining_loss), or with `dense_decoder` the model's own
  loss over every position."""
  if dense_decoder:
    return model(**batch).loss
  batch = dict(batch)
  if "next_sentence_label" in batch:
    batch["next_sentence_labels"] = batch.pop("next_sentence_label")
  return pytorch_peer.pretraining_loss(model, batch)


def schedule_of(args):
  """(total, warmup, in_seconds) of the learning-rate schedule, as
  run_pretraining.py sizes it: with a time budget, the warm-up is
  --warmup_proportion of it (0.01 if not given); in steps,
  --num_warmup_steps when given, else --warmup_proportion of the steps,
  else run_pretraining.py's default of 10,000 steps."""
  if args.train_time_budget_hours:
    total = args.train_time_budget_hours * 3600.0
    proportion = (BUDGET_WARMUP_PROPORTION if args.warmup_proportion is None
                  else args.warmup_proportion)
    return total, proportion * total, True
  if args.num_warmup_steps is not None:
    warmup = args.num_warmup_steps
  elif args.warmup_proportion is not None:
    warmup = int(round(args.warmup_proportion * args.num_train_steps))
  else:
    warmup = DEFAULT_WARMUP_STEPS
  return args.num_train_steps, warmup, False


def target_result(history, target, final_step):
  """time_to_target.json's content (bertkit/engine/loop/evaluation.py's
  fields)."""
  for entry in history:
    if entry[METRIC] >= target:
      return {"target": target, "metric": METRIC, "reached": True,
              "step": entry["step"], "train_seconds": entry["train_seconds"],
              "wall_seconds": entry["wall_seconds"],
              "examples": entry["examples"], "value": entry[METRIC]}
  return {"target": target, "metric": METRIC, "reached": False,
          "step": final_step,
          "best": max([e[METRIC] for e in history] or [0.0])}


class Recorder:
  """Evaluates, appends to eval_history.jsonl, and keeps the step times."""

  def __init__(self, args, model, heldout, clock):
    self._args = args
    self._model = model
    self._heldout = heldout
    self._clock = clock
    self.history = []
    self.step_records = []
    self.last_evaluated = None
    os.makedirs(args.output_dir, exist_ok=True)
    self._path = os.path.join(args.output_dir, HISTORY_FILE)
    open(self._path, "w").close()

  def evaluate(self, step):
    """Evaluates the weights after `step` steps; returns the entry."""
    started = time.time()
    metrics = evaluate(self._model, self._heldout, self._args.eval_batch_size)
    seconds = time.time() - started
    self._clock.exclude(seconds)
    entry = dict(metrics, step=step,
                 train_seconds=round(self._clock.train_seconds(), 3),
                 wall_seconds=round(self._clock.wall_seconds(), 3),
                 examples=step * self._args.train_batch_size,
                 eval_batches=math.ceil(len(self._heldout["input_ids"]) /
                                        self._args.eval_batch_size),
                 eval_seconds=round(seconds, 3))
    self.history.append(entry)
    self.last_evaluated = step
    with open(self._path, "a") as f:
      f.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry

  def summary(self, final_step):
    """throughput_summary.json's figures of the steps past the warm-up."""
    counted = self.step_records[self._args.throughput_warmup_steps:]
    seconds = sum(r["seconds"] for r in counted)
    rate = (lambda key: sum(r[key] for r in counted) / seconds
            if counted and seconds > 0 else None)
    return {"examples_per_sec": rate("examples"),
            "sequences_per_sec": rate("examples"),
            "real_tokens_per_sec": rate("real_tokens"),
            "steps_counted": len(counted),
            "global_batch_size": self._args.train_batch_size,
            "num_replicas": 1, "precision": "float32",
            "strategy": "pytorch", "final_step": final_step,
            "wall_seconds": round(self._clock.wall_seconds(), 3)}


def train(args):
  """Trains and evaluates; returns the summary dict."""
  torch.manual_seed(args.seed)
  torch.set_num_threads(args.threads)
  clock = training_clock.TrainingClock(start=_CLOCK_START)
  if args.train_records:
    sequences = pytorch_peer.read_sequences(args.train_records)
    next_sentence = "next_sentence_labels" in sequences[0]
  else:
    sequences = load_train_sequences(args.train_sequences)
    next_sentence = "next_sentence_label" in sequences[0]
  heldout = load_heldout(args.heldout)
  model, optimizer, collator = build_peer(args, next_sentence)
  total, warmup, in_seconds = schedule_of(args)
  budget = total if in_seconds else None
  recorder = Recorder(args, model, heldout, clock)
  step, reached = 0, None
  batch_size = args.train_batch_size
  while step < args.num_train_steps and not reached:
    if budget is not None and clock.train_seconds() >= budget:
      break
    # A budget's schedule begins at the first step, as run_pretraining.py's.
    x, start = step, 0.0
    if in_seconds:
      start, x = clock.first_step_seconds(), clock.train_seconds()
    rate = lr_schedules.rate_at(lr_schedules.Schedule(
        args.lr_schedule, args.learning_rate, total, warmup,
        args.lr_decay_proportion), x, start)
    for group in optimizer.param_groups:
      group["lr"] = rate
    started = time.time()
    rows = [sequences[(step * batch_size + i) % len(sequences)]
            for i in range(batch_size)]
    batch = (pytorch_peer.padded_to_longest(rows) if args.train_records
             else collator(rows))
    optimizer.zero_grad(set_to_none=True)
    loss = step_loss(model, batch, args.dense_decoder)
    loss.backward()
    if args.clip_norm:
      torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
    optimizer.step()
    if not torch.isfinite(loss):
      raise RuntimeError("non-finite loss at step %d" % step)
    step += 1
    recorder.step_records.append({
        "examples": batch_size, "seconds": time.time() - started,
        "real_tokens": int(batch["attention_mask"].sum())})
    if args.eval_every_n_steps and step % args.eval_every_n_steps == 0:
      entry = recorder.evaluate(step)
      if args.target_masked_lm_accuracy and (
          entry[METRIC] >= args.target_masked_lm_accuracy):
        reached = entry
  if recorder.last_evaluated != step:
    recorder.evaluate(step)
  return write_outputs(args, recorder, step)


def write_outputs(args, recorder, final_step):
  """Writes throughput_summary.json (and time_to_target.json); returns the
  summary with the last evaluation's figures."""
  summary = recorder.summary(final_step)
  with open(os.path.join(args.output_dir, SUMMARY_FILE), "w") as f:
    f.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
  if args.target_masked_lm_accuracy:
    result = target_result(recorder.history, args.target_masked_lm_accuracy,
                           final_step)
    with open(os.path.join(args.output_dir, TARGET_FILE), "w") as f:
      f.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
  last = recorder.history[-1]
  return dict(summary, masked_lm_accuracy=last[METRIC],
              masked_lm_loss=last["masked_lm_loss"],
              train_seconds=last["train_seconds"],
              framework="pytorch %s, transformers %s" % (
                  torch.__version__, transformers.__version__),
              attention=pytorch_peer.ATTENTION, compiled=args.compile,
              decoder="dense" if args.dense_decoder else "sparse")


def parse_args(argv=None):
  """The peer's flags: run_pretraining.py's names for the same values."""
  parser = benchmark_args.ArgumentParser(
      description=__doc__.splitlines()[0])
  for name in ("bert_config_file", "vocab_file", "heldout"):
    parser.add_argument("--" + name, required=True,
                        type=benchmark_args.existing_file)
  parser.add_argument("--output_dir", required=True)
  training = parser.add_mutually_exclusive_group(required=True)
  training.add_argument("--train_sequences",
                        type=benchmark_args.existing_file,
                        help="token sequences; the collator draws masks")
  training.add_argument("--train_records", type=benchmark_args.existing_file,
                        help="masked records; their own masks are used")
  parser.add_argument("--initial_weights", type=benchmark_args.existing_dir,
                      help="a Hugging Face directory to start from")
  parser.add_argument("--save_initial_weights",
                      help="write the initial weights here, as a Hugging "
                      "Face directory, before training")
  parser.add_argument("--do_lower_case", type=_bool, default=True)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--lr_schedule", choices=lr_schedules.SCHEDULES,
                      default=lr_schedules.LINEAR)
  parser.add_argument("--lr_decay_proportion", type=float, default=0.1)
  parser.add_argument("--num_train_steps", type=int, default=10**9)
  parser.add_argument("--num_warmup_steps", type=int)
  parser.add_argument("--warmup_proportion", type=float)
  parser.add_argument("--train_time_budget_hours", type=float)
  parser.add_argument("--adam_beta_1", type=float, default=0.9)
  parser.add_argument("--adam_beta_2", type=float, default=0.999)
  parser.add_argument("--adam_epsilon", type=float, default=1e-6)
  parser.add_argument("--weight_decay_rate", type=float, default=0.01)
  parser.add_argument("--clip_norm", type=float, default=1.0,
                      help="global gradient norm (0: no clipping)")
  parser.add_argument("--masked_lm_prob", type=float, default=0.15)
  parser.add_argument("--hidden_dropout_prob", type=float)
  parser.add_argument("--attention_probs_dropout_prob", type=float)
  parser.add_argument("--eval_every_n_steps", type=int)
  parser.add_argument("--eval_batch_size", type=int, default=32)
  parser.add_argument("--target_masked_lm_accuracy", type=float)
  parser.add_argument("--throughput_warmup_steps", type=int, default=10)
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--compile", type=_bool, default=False,
                      help="the encoder through torch.compile")
  parser.add_argument("--dense_decoder", type=_bool, default=False,
                      help="the model's own loss, logits at every position "
                      "(as run_mlm.py trains it)")
  parser.add_argument("--threads", type=int,
                      default=len(os.sched_getaffinity(0)),
                      help="intra-op threads (default: the usable cores)")
  return parser.parse_args(argv)


def _bool(text):
  if text.lower() in ("1", "true", "yes"):
    return True
  if text.lower() in ("0", "false", "no"):
    return False
  raise argparse.ArgumentTypeError("expected true or false, got %r" % text)


if __name__ == "__main__":
  print(json.dumps(train(parse_args())))
  sys.stdout.flush()
