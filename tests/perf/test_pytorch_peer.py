"""The PyTorch peer (benchmarks/pytorch_peer.py): its sparse prediction
gives the loss of the model computing every position, its SDPA attention
the eager attention's outputs, and the AdamW groups leave LayerNorm and
biases undecayed. No timing is asserted: the figures belong to
docs/benchmarks.md."""

import json
import os
import sys

import pytest

from conftest import REPO_ROOT, TINY_CONFIG

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import pytorch_peer
import time_to_accuracy_peer
import torch
import transformers

VOCAB = os.path.join(REPO_ROOT, "tests", "fixtures",
                     "create_pretraining_data", "vocab.txt")
SENTENCES = ("the quick brown fox jumps over the lazy dog",
             "a journey of a thousand miles begins with one step",
             "all that glitters is not gold")


@pytest.fixture
def config_file(tmp_path):
  path = tmp_path / "tiny.json"
  with open(VOCAB, encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  path.write_text(json.dumps(dict(TINY_CONFIG, vocab_size=vocab_size,
                                  hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)))
  return str(path)


def collated(next_sentence):
  """A batch of real sentences as DataCollatorForLanguageModeling masks
  them (labels -100 where not masked), rows of different lengths."""
  tokenizer = transformers.BertTokenizerFast(vocab_file=VOCAB)
  features = [dict(tokenizer(text), special_tokens_mask=tokenizer(
      text, return_special_tokens_mask=True)["special_tokens_mask"])
              for text in SENTENCES]
  if next_sentence:
    for i, feature in enumerate(features):
      feature["next_sentence_label"] = i % 2
  collator = transformers.DataCollatorForLanguageModeling(
      tokenizer, mlm_probability=0.4, seed=3)
  batch = collator(features)
  assert (batch["labels"] != -100).sum() >= 3
  assert (batch["attention_mask"] == 0).any()  # padded to the longest
  return batch


@pytest.mark.parametrize("next_sentence", [False, True])
def test_sparse_prediction_gives_the_model_s_own_loss(config_file,
                                                      next_sentence):
  """Logits at the masked tokens only, against transformers computing them
  at every position (`model(labels=...)`: run_mlm.py's loss)."""
  torch.manual_seed(0)
  model, _ = pytorch_peer.build_model(config_file, next_sentence)
  model.eval()
  batch = collated(next_sentence)
  with torch.no_grad():
    dense = time_to_accuracy_peer.step_loss(model, batch, dense_decoder=True)
    sparse = time_to_accuracy_peer.step_loss(model, batch,
                                             dense_decoder=False)
  assert float(sparse) == pytest.approx(float(dense), rel=1e-5)


def test_record_positions_and_weights_give_the_weighted_mean(config_file):
  """Records' masked_lm_positions / weights: weight-0 positions (padding of
  the predictions) count for nothing."""
  torch.manual_seed(0)
  model, _ = pytorch_peer.build_model(config_file, next_sentence=False)
  model.eval()
  batch = collated(next_sentence=False)
  positions = torch.tensor([[1, 2, 3], [2, 4, 0], [1, 1, 1]])
  weights = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0],
                          [1.0, 0.0, 0.0]])
  labels = torch.randint(5, 50, positions.shape)
  with torch.no_grad():
    loss = pytorch_peer.pretraining_loss(model, dict(
        batch, positions=positions, labels=labels, weights=weights))
    logits = model(input_ids=batch["input_ids"],
                   attention_mask=batch["attention_mask"],
                   token_type_ids=batch["token_type_ids"]).logits
  terms = []
  for row in range(3):
    for column in range(3):
      if weights[row, column]:
        terms.append(torch.nn.functional.cross_entropy(
            logits[row, positions[row, column]][None],
            labels[row, column][None]))
  expected = float(sum(terms) / len(terms))
  assert float(loss) == pytest.approx(expected, rel=1e-4)


def test_sdpa_attention_gives_the_eager_outputs(config_file):
  torch.manual_seed(0)
  model, config = pytorch_peer.build_model(config_file, next_sentence=True)
  assert model.config._attn_implementation == "sdpa"  # pylint: disable=protected-access
  eager = transformers.BertForPreTraining._from_config(  # pylint: disable=protected-access
      config, attn_implementation="eager")
  eager.load_state_dict(model.state_dict())
  batch = collated(next_sentence=True)
  inputs = {k: batch[k] for k in ("input_ids", "attention_mask",
                                  "token_type_ids")}
  model.eval()
  eager.eval()
  with torch.no_grad():
    ours = model(**inputs).prediction_logits
    theirs = eager(**inputs).prediction_logits
  real = batch["attention_mask"].bool()
  assert torch.allclose(ours[real], theirs[real], atol=1e-5)


def test_adamw_leaves_layer_norm_and_biases_undecayed(config_file):
  model, _ = pytorch_peer.build_model(config_file, next_sentence=False)
  optimizer = pytorch_peer.adamw(model, 1e-3, weight_decay=0.01)
  decayed, undecayed = optimizer.param_groups
  assert decayed["weight_decay"] == 0.01 and undecayed["weight_decay"] == 0.0
  names = {id(p): n for n, p in model.named_parameters()}
  assert all("LayerNorm" in names[id(p)] or names[id(p)].endswith("bias")
             for p in undecayed["params"])
  assert not any("LayerNorm" in names[id(p)] or names[id(p)].endswith("bias")
                 for p in decayed["params"])
  assert (len(decayed["params"]) + len(undecayed["params"]) ==
          len(list(model.parameters())))


def test_profile_steps_report_the_peers_costliest_ops(config_file, capsys):
  """--profile_steps: the steps run under torch.profiler; the matrix
  products are among the ops reported, the shares are of all ops' time."""
  result = pytorch_peer.train(pytorch_peer.parse_args([
      "--bert_config_file=%s" % config_file, "--max_seq_length=16",
      "--max_predictions_per_seq=3", "--train_batch_size=2",
      "--num_steps=1", "--warmup_steps=0", "--profile_steps=2",
      "--masked_lm_only", "--threads=1"]))
  ops = {row["op"]: row for row in result["profile"]}
  assert {"aten::mm", "aten::addmm"} & set(ops)
  shares = [row["share"] for row in result["profile"]]
  assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1.0
  assert "Self CPU" in capsys.readouterr().err
