"""The PyTorch peer of run_pretraining.py: BERT as a careful engineer trains it.

The one PyTorch trainer every comparison in benchmarks/ runs against
(throughput: compare_pytorch.py; packing: packing_speed.py; time to quality:
time_to_accuracy_peer.py, which imports this module). It is written the way
upstream, NVIDIA's PyTorch BERT, Cramming and MosaicBERT write it:

  * Hugging Face `BertModel` and the pretraining heads
    (`BertForPreTraining`'s `bert` and `cls`), attention through PyTorch's
    fused scaled-dot-product attention (`attn_implementation="sdpa"`);
  * sparse prediction: the masked positions are gathered before the
    masked-LM transform and decoder, so the 30,522-wide (vocab-wide) logits
    are computed for the P masked positions only, as
    run_pretraining.get_masked_lm_output does; the loss weighted by the
    masks' weights; the next-sentence loss on the pooled output;
  * dropout as configured (training mode);
  * gradient clipping to a global norm, then `torch.optim.AdamW` with no
    decay for LayerNorm weights and biases;
  * optionally `torch.compile` (--compile), whose compile time counts: it
    happens in the first steps.

The activation is PyTorch's fused tanh GELU (`gelu_pytorch_tanh`), the
function BERT was trained with, in the peer's fastest form. Inputs are random
batches of the right shape prepared before timing (our trainer reads
TFRecords through tf.data, which runs ahead of the step).

With --input_file (unpacked masked records of create_pretraining_data.py)
the peer trains on those records' sequences instead, in file order (the
order run_pretraining.py reads them in with --tf_random_seed), --train_batch
_size sequences per step, each batch padded to its longest sequence (dynamic
padding: what Hugging Face's DataCollatorWithPadding does, the peer a user
would pick over padding every row to --max_seq_length). The masked-LM
positions and weights are the records' own.

--bf16 runs the forward pass and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) (float32 weights and optimizer,
as run_pretraining.py --use_bf16).

Prints one JSON line: examples_per_sec over the timed steps (wall clock of
each step, after --warmup_steps untimed ones); with --input_file also the
real (non-padding) tokens and the padded tokens of all steps; with
--profile_steps N, N more steps under torch.profiler (its table to stderr,
the costliest ops in the line), the peer's side of the profiles in
docs/benchmarks.md.

Examples:
  python benchmarks/pytorch_peer.py --bert_config_file=configs/bert_mini.json \
    --max_seq_length=128 --max_predictions_per_seq=20 --train_batch_size=32
  python benchmarks/pytorch_peer.py --bert_config_file=configs/bert_mini.json \
    --max_seq_length=512 --max_predictions_per_seq=80 --train_batch_size=4 \
    --input_file=unpacked.tfrecord
  python benchmarks/pytorch_peer.py --bert_config_file=mini_no_dropout.json \
    --max_predictions_per_seq=40 --masked_lm_only --num_steps=10 \
    --warmup_steps=5 --profile_steps=5
"""

import json
import os
import sys
import time

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
# pylint: disable=g-import-not-at-top,wrong-import-position
# The standard library's argparse, refusing a flag in one `error:` line: no
# more of the toolkit is imported into the peer.
from bertkit.perf import benchmark_args


def hf_config(bert_config_path, **overrides):
  """transformers.BertConfig of our config file (tanh GELU, LayerNorm
  epsilon 1e-12), with `overrides` (e.g. hidden_dropout_prob=0.0) applied."""
  with open(bert_config_path) as f:
    ours = json.load(f)
  values = dict(
      vocab_size=ours["vocab_size"], hidden_size=ours["hidden_size"],
      num_hidden_layers=ours["num_hidden_layers"],
      num_attention_heads=ours["num_attention_heads"],
      intermediate_size=ours["intermediate_size"],
      hidden_act="gelu_pytorch_tanh",
      hidden_dropout_prob=ours["hidden_dropout_prob"],
      attention_probs_dropout_prob=ours["attention_probs_dropout_prob"],
      max_position_embeddings=ours["max_position_embeddings"],
      type_vocab_size=ours["type_vocab_size"],
      initializer_range=ours["initializer_range"],
      layer_norm_eps=1e-12)
  values.update(overrides)
  return transformers.BertConfig(**values)


# Attention through torch.nn.functional.scaled_dot_product_attention.
ATTENTION = "sdpa"


def build_model(bert_config_path, next_sentence=True, attention=ATTENTION,
                **overrides):
  """BERT with its pretraining heads from our config file.

  Args:
    bert_config_path: one of our bert_config.json files.
    next_sentence: False: `BertForMaskedLM` (no pooler, no next-sentence
      head), for records without next-sentence labels.
    attention: transformers' attn_implementation ("sdpa" or "eager").
    **overrides: BertConfig values (e.g. hidden_dropout_prob=0.0).

  Returns:
    (model, its transformers.BertConfig); the model's `bert` is a BertModel
    and `cls.predictions` the masked-LM head.
  """
  config = hf_config(bert_config_path, **overrides)
  model_class = (transformers.BertForPreTraining if next_sentence
                 else transformers.BertForMaskedLM)
  return model_class._from_config(config,
                                  attn_implementation=attention), config


def compiled(model, enabled):
  """The model's encoder through torch.compile (dynamic shapes: batches are
  padded to their longest sequence), or the model as it is."""
  if enabled:
    model.bert = torch.compile(model.bert, dynamic=True)
  return model


def random_batches(rng, count, batch_size, seq_length, max_predictions,
                   vocab_size):
  """`count` batches shaped like the pretraining records (all rows full)."""
  batches = []
  for _ in range(count):
    positions = np.stack([
        np.sort(rng.choice(np.arange(1, seq_length), max_predictions,
                           replace=False)) for _ in range(batch_size)])
    batches.append({
        "input_ids": torch.from_numpy(
            rng.randint(5, vocab_size, (batch_size, seq_length))),
        "attention_mask": torch.ones(batch_size, seq_length,
                                     dtype=torch.long),
        "token_type_ids": torch.from_numpy(
            (np.arange(seq_length) >= seq_length // 2).astype(np.int64)
        ).expand(batch_size, seq_length).contiguous(),
        "positions": torch.from_numpy(positions),
        "labels": torch.from_numpy(
            rng.randint(5, vocab_size, (batch_size, max_predictions))),
        "weights": torch.ones(batch_size, max_predictions),
        "next_sentence_labels": torch.from_numpy(
            rng.randint(0, 2, batch_size)),
    })
  return batches


def read_sequences(input_file):
  """The sequences of unpacked masked records, in file order.

  Returns:
    list of dicts of int64 numpy arrays: input_ids and token_type_ids of the
    real tokens only, positions, labels (masked_lm_ids), weights, and the
    next-sentence label.
  """
  # TensorFlow only reads the file here, before torch builds anything.
  import tensorflow.compat.v1 as tf  # pylint: disable=g-import-not-at-top
  sequences = []
  for raw in tf.io.tf_record_iterator(input_file):
    feature = tf.train.Example.FromString(raw).features.feature
    values = {name: np.array(getattr(f, f.WhichOneof("kind")).value)
              for name, f in feature.items()}
    if "masked_lm_ids" not in values or "sequence_ids" in values:
      print("error: %s holds %s records; the peer reads unpacked masked "
            "records (create_pretraining_data.py --masking=static, without "
            "--pack_sequences)" % (input_file, "packed" if "sequence_ids" in
                                   values else "unmasked"), file=sys.stderr)
      sys.exit(2)
    length = int(values["input_mask"].sum())
    sequence = {
        "input_ids": values["input_ids"][:length],
        "token_type_ids": values["segment_ids"][:length],
        "positions": values["masked_lm_positions"],
        "labels": values["masked_lm_ids"],
        "weights": values["masked_lm_weights"].astype(np.float32)}
    # Records without next-sentence prediction have no label.
    if "next_sentence_labels" in values:
      sequence["next_sentence_labels"] = values["next_sentence_labels"][0]
    sequences.append(sequence)
  return sequences


def padded_to_longest(sequences):
  """One batch of `sequences`, padded to the longest of them (with 0)."""
  pad = torch.nn.utils.rnn.pad_sequence
  lengths = [len(s["input_ids"]) for s in sequences]
  batch = {
      "input_ids": pad([torch.from_numpy(s["input_ids"]) for s in sequences],
                       batch_first=True),
      "token_type_ids": pad([torch.from_numpy(s["token_type_ids"])
                             for s in sequences], batch_first=True),
      "attention_mask": pad([torch.ones(n, dtype=torch.long)
                             for n in lengths], batch_first=True),
      "positions": torch.from_numpy(np.stack([s["positions"]
                                              for s in sequences])),
      "labels": torch.from_numpy(np.stack([s["labels"] for s in sequences])),
      "weights": torch.from_numpy(np.stack([s["weights"]
                                            for s in sequences])),
  }
  if "next_sentence_labels" in sequences[0]:
    batch["next_sentence_labels"] = torch.from_numpy(np.array(
        [s["next_sentence_labels"] for s in sequences]))
  return batch


def record_batches(sequences, batch_size, num_steps):
  """The batches of `num_steps` steps over `sequences` read in order,
  epoch after epoch (as run_pretraining.py's deterministic input_fn reads
  them: a batch may span two epochs)."""
  return [padded_to_longest([sequences[(step * batch_size + i) %
                                       len(sequences)]
                             for i in range(batch_size)])
          for step in range(num_steps)]


def masked_lm_logits(model, sequence_output, positions):
  """The decoder's logits at the masked positions only (sparse prediction).

  Args:
    model: BertForPreTraining or BertForMaskedLM.
    sequence_output: [B, L, H] float.
    positions: [B, P] int64 positions (records) or a [B, L] bool mask of the
      masked tokens (dynamic masking: a varying count per row).

  Returns:
    [M, V] logits, M = B x P or the number of masked tokens, in row order.
  """
  width = sequence_output.shape[-1]
  if positions.dtype == torch.bool:
    masked = sequence_output[positions]  # [M, H]
  else:
    index = positions.unsqueeze(-1).expand(-1, -1, width)
    masked = torch.gather(sequence_output, 1, index).reshape(-1, width)
  return model.cls.predictions(masked)


def pretraining_loss(model, batch):
  """Masked-LM (masked positions only) + next-sentence loss, as ours.

  `batch` holds input_ids, attention_mask, token_type_ids and either the
  records' positions, labels and weights [B, P] or, from
  DataCollatorForLanguageModeling, labels [B, L] (-100 where not masked);
  next_sentence_labels [B] when the model has the next-sentence head.
  """
  outputs = model.bert(
      input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
      token_type_ids=batch["token_type_ids"], return_dict=False)
  sequence_output = outputs[0]
  if "positions" in batch:
    logits = masked_lm_logits(model, sequence_output, batch["positions"])
    per_position = torch.nn.functional.cross_entropy(
        logits, batch["labels"].reshape(-1), reduction="none")
    weights = batch["weights"].reshape(-1)
    loss = (weights * per_position).sum() / (weights.sum() + 1e-5)
  else:
    selected = batch["labels"] != -100
    logits = masked_lm_logits(model, sequence_output, selected)
    loss = torch.nn.functional.cross_entropy(logits,
                                             batch["labels"][selected])
  if "next_sentence_labels" in batch and hasattr(model.cls,
                                                 "seq_relationship"):
    loss = loss + torch.nn.functional.cross_entropy(
        model.cls.seq_relationship(outputs[1]),
        batch["next_sentence_labels"])
  return loss


def adamw(model, learning_rate, betas=(0.9, 0.999), eps=1e-6,
          weight_decay=0.01):
  """Upstream's AdamW groups: no decay for LayerNorm weights and biases.

  The defaults are upstream's hyperparameters."""
  decay, no_decay = [], []
  for name, param in model.named_parameters():
    (no_decay if "LayerNorm" in name or name.endswith("bias")
     else decay).append(param)
  return torch.optim.AdamW(
      [{"params": decay, "weight_decay": weight_decay},
       {"params": no_decay, "weight_decay": 0.0}],
      lr=learning_rate, betas=betas, eps=eps)


def profiled_ops(train_step, first_step, steps, rows=12):
  """Runs `steps` more steps under torch.profiler; prints its table of ops
  by self CPU time to stderr.

  Returns:
    list of {"op", "self_cpu_ms_per_step", "share"}: the `rows` costliest
    ops, each with its share of all ops' self CPU time.
  """
  with torch.profiler.profile(
      activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
    for step in range(first_step, first_step + steps):
      train_step(step)
  averages = profile.key_averages()
  print(averages.table(sort_by="self_cpu_time_total", row_limit=rows),
        file=sys.stderr)
  total = sum(e.self_cpu_time_total for e in averages) or 1.0
  ranked = sorted(averages, key=lambda e: -e.self_cpu_time_total)[:rows]
  return [{"op": e.key,
           "self_cpu_ms_per_step": e.self_cpu_time_total / 1e3 / steps,
           "share": e.self_cpu_time_total / total} for e in ranked]


def train(args):
  """Runs the steps; returns the result dict."""
  torch.manual_seed(0)
  torch.set_num_threads(args.threads)
  model, config = build_model(args.bert_config_file,
                              next_sentence=not args.masked_lm_only,
                              attention=args.attention)
  model = compiled(model, args.compile)
  model.train()
  optimizer = adamw(model, args.learning_rate)
  total_steps = args.warmup_steps + args.num_steps
  if args.input_file:
    batches = record_batches(read_sequences(args.input_file),
                             args.train_batch_size, total_steps)
  else:
    batches = random_batches(np.random.RandomState(0), 4,
                             args.train_batch_size, args.max_seq_length,
                             args.max_predictions_per_seq, config.vocab_size)

  def train_step(step):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
      loss = pretraining_loss(model, batches[step % len(batches)])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if not torch.isfinite(loss):
      raise RuntimeError("non-finite loss at step %d" % step)
    return loss

  step_seconds = []
  for step in range(total_steps):
    start = time.perf_counter()
    loss = train_step(step)
    seconds = time.perf_counter() - start
    if step >= args.warmup_steps:
      step_seconds.append(seconds)
  result = {
      "framework": "pytorch %s, transformers %s" % (torch.__version__,
                                                     transformers.__version__),
      "threads": args.threads,
      "precision": "mixed_bfloat16" if args.bf16 else "float32",
      "attention": args.attention, "compiled": args.compile,
      "steps_counted": len(step_seconds),
      "examples_per_sec": args.train_batch_size * len(step_seconds) /
                          sum(step_seconds),
      "last_loss": loss.float().item(),
  }
  if args.profile_steps:
    result["profile"] = profiled_ops(train_step, total_steps,
                                     args.profile_steps)
  if args.input_file:
    result["real_tokens"] = sum(int(b["attention_mask"].sum())
                                for b in batches)
    result["padded_tokens"] = sum(b["attention_mask"].numel()
                                  for b in batches)
  return result


def parse_args(argv=None):
  parser = benchmark_args.ArgumentParser(
      description=__doc__.splitlines()[0])
  parser.add_argument("--bert_config_file", required=True,
                      type=benchmark_args.existing_file)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--input_file", type=benchmark_args.existing_file,
                      help="unpacked masked records to train on, each batch "
                           "padded to its longest sequence (default: random "
                           "full-length batches)")
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--num_steps", type=int, default=20,
                      help="timed steps")
  parser.add_argument("--warmup_steps", type=int, default=10,
                      help="untimed steps first (run_pretraining's "
                           "--throughput_warmup_steps)")
  parser.add_argument("--bf16", action="store_true",
                      help='forward pass and loss under torch.autocast("cpu", '
                           'dtype=torch.bfloat16)')
  parser.add_argument("--compile", action="store_true",
                      help="the encoder through torch.compile")
  parser.add_argument("--attention", choices=("sdpa", "eager"),
                      default=ATTENTION,
                      help="transformers' attention implementation")
  parser.add_argument("--masked_lm_only", action="store_true",
                      help="BertForMaskedLM: no next-sentence head (the "
                           "fast recipe's model)")
  parser.add_argument("--profile_steps", type=int, default=0,
                      help="after the timed steps, this many more under "
                           "torch.profiler: its table to stderr, the top "
                           "ops in the JSON line")
  parser.add_argument("--threads", type=int,
                      default=len(os.sched_getaffinity(0)),
                      help="intra-op threads (default: the usable cores)")
  return parser.parse_args(argv)


if __name__ == "__main__":
  print(json.dumps(train(parse_args())))
