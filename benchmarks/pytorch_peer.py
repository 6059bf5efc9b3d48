"""The PyTorch peer of run_pretraining.py: same model, shapes and update.

Trains Hugging Face `BertForPreTraining` (eager attention) built from one of
our bert_config.json files, with what run_pretraining.py computes per step:

  * the masked-LM head on the P masked positions only (gathered before the
    transform, as run_pretraining.get_masked_lm_output does), loss weighted
    by masked_lm_weights; the next-sentence loss on the pooled output;
  * dropout as configured (training mode);
  * gradient clipping to global norm 1.0, then AdamW (weight decay 0.01,
    none for LayerNorm and bias, betas 0.9/0.999, epsilon 1e-6).

The activation is PyTorch's fused tanh GELU (`gelu_pytorch_tanh`), the
function BERT was trained with, in the peer's fastest form. Inputs are random
batches of the right shape prepared before timing (our trainer reads
TFRecords through tf.data, which runs ahead of the step).

--bf16 runs the forward pass and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) (float32 weights and optimizer,
as run_pretraining.py --use_bf16).

Prints one JSON line: examples_per_sec over the timed steps (wall clock of
each step, after --warmup_steps untimed ones).

Example:
  python benchmarks/pytorch_peer.py --bert_config_file=configs/bert_mini.json \
    --max_seq_length=128 --max_predictions_per_seq=20 --train_batch_size=32
"""

import argparse
import json
import os
import time

import numpy as np
import torch
import transformers


def build_model(bert_config_path):
  """BertForPreTraining from our config file; returns (model, its config)."""
  with open(bert_config_path) as f:
    ours = json.load(f)
  config = transformers.BertConfig(
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
  model = transformers.BertForPreTraining._from_config(
      config, attn_implementation="eager")
  return model, config


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


def pretraining_loss(model, batch):
  """Masked-LM (masked positions only) + next-sentence loss, as ours."""
  sequence_output, pooled_output = model.bert(
      input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
      token_type_ids=batch["token_type_ids"], return_dict=False)[:2]
  width = sequence_output.shape[-1]
  index = batch["positions"].unsqueeze(-1).expand(-1, -1, width)
  masked = torch.gather(sequence_output, 1, index).reshape(-1, width)
  logits = model.cls.predictions(masked)
  per_position = torch.nn.functional.cross_entropy(
      logits, batch["labels"].reshape(-1), reduction="none")
  weights = batch["weights"].reshape(-1)
  mlm_loss = (weights * per_position).sum() / (weights.sum() + 1e-5)
  nsp_logits = model.cls.seq_relationship(pooled_output)
  nsp_loss = torch.nn.functional.cross_entropy(
      nsp_logits, batch["next_sentence_labels"])
  return mlm_loss + nsp_loss


def adamw(model, learning_rate):
  """Upstream's AdamW groups: no decay for LayerNorm weights and biases."""
  decay, no_decay = [], []
  for name, param in model.named_parameters():
    (no_decay if "LayerNorm" in name or name.endswith("bias")
     else decay).append(param)
  return torch.optim.AdamW(
      [{"params": decay, "weight_decay": 0.01},
       {"params": no_decay, "weight_decay": 0.0}],
      lr=learning_rate, betas=(0.9, 0.999), eps=1e-6)


def train(args):
  """Runs the steps; returns the result dict."""
  torch.manual_seed(0)
  torch.set_num_threads(args.threads)
  model, config = build_model(args.bert_config_file)
  model.train()
  optimizer = adamw(model, args.learning_rate)
  batches = random_batches(np.random.RandomState(0), 4, args.train_batch_size,
                           args.max_seq_length, args.max_predictions_per_seq,
                           config.vocab_size)
  step_seconds = []
  for step in range(args.warmup_steps + args.num_steps):
    batch = batches[step % len(batches)]
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
      loss = pretraining_loss(model, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    seconds = time.perf_counter() - start
    if not torch.isfinite(loss):
      raise RuntimeError("non-finite loss at step %d" % step)
    if step >= args.warmup_steps:
      step_seconds.append(seconds)
  return {
      "framework": "pytorch %s, transformers %s" % (torch.__version__,
                                                     transformers.__version__),
      "threads": args.threads,
      "precision": "mixed_bfloat16" if args.bf16 else "float32",
      "steps_counted": len(step_seconds),
      "examples_per_sec": args.train_batch_size * len(step_seconds) /
                          sum(step_seconds),
      "last_loss": loss.float().item(),
  }


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--bert_config_file", required=True)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--max_predictions_per_seq", type=int, default=20)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--num_steps", type=int, default=20,
                      help="timed steps")
  parser.add_argument("--warmup_steps", type=int, default=10,
                      help="untimed steps first (run_pretraining's "
                           "--throughput_warmup_steps)")
  parser.add_argument("--bf16", action="store_true",
                      help='forward pass and loss under torch.autocast("cpu", '
                           'dtype=torch.bfloat16)')
  parser.add_argument("--threads", type=int,
                      default=len(os.sched_getaffinity(0)),
                      help="intra-op threads (default: the usable cores)")
  return parser.parse_args(argv)


if __name__ == "__main__":
  print(json.dumps(train(parse_args())))
