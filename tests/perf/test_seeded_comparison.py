"""benchmarks/seeded_comparison.py: seed-by-seed verdicts, and with common
random numbers ours and the PyTorch peer computing the same training."""

import json
import os
import sys

import pytest

from conftest import REPO_ROOT, expect_user_error, run_ok, run_program

sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import seeded_comparison


def args_of(compare, seeds):
  return seeded_comparison.parse_args([
      "--output_dir=/unused", "--compare=%s" % compare,
      "--seeds=%s" % ",".join(map(str, seeds))])


def test_an_arm_beats_another_only_in_every_seed():
  args = args_of("mask_rules", [1, 2, 3])
  per_seed = {
      1: {"upstream": {60: 0.10, 120: 0.12}, "per_token": {60: 0.11,
                                                          120: 0.13}},
      2: {"upstream": {60: 0.10, 120: 0.12}, "per_token": {60: 0.09,
                                                          120: 0.14}},
      3: {"upstream": {60: 0.10, 120: 0.12}, "per_token": {60: 0.12,
                                                          120: 0.125}}}
  summary = seeded_comparison.summarize(args, per_seed)
  assert summary["steps"] == [60, 120]
  upstream = summary["arms"]["upstream"][60]
  assert (upstream["mean"], upstream["min"], upstream["max"]) == (
      pytest.approx(0.10), 0.10, 0.10)
  verdicts = {(p["arm"], p["step"]): p["verdict"] for p in summary["pairs"]}
  # One seed of three below at step 60: no claim.
  assert verdicts[("per_token", 60)] == "within the spread"
  assert verdicts[("per_token", 120)] == (
      "per_token above upstream in every seed")
  pair = [p for p in summary["pairs"] if p["step"] == 120][0]
  assert (pair["min"], pair["max"]) == (pytest.approx(0.005),
                                        pytest.approx(0.02))


def test_trainers_are_alike_when_their_losses_agree_in_every_seed():
  """One near-tied position flipping puts ours below the peer in accuracy;
  the losses agreeing to 1e-5 make the pair alike. Losses 1e-3 apart do
  not, and the accuracies' signs decide."""
  args = args_of("trainers", [1, 2])
  per_seed = {s: {"peer": {60: 0.0833}, "ours": {60: 0.0831}} for s in (1, 2)}
  def losses(ours):
    return {s: {"peer": {60: 6.0951}, "ours": {60: ours}} for s in (1, 2)}
  alike = seeded_comparison.summarize(args, per_seed, losses(6.09515))
  assert alike["pairs"][0]["verdict"] == (
      "alike: held-out loss within 0.0001 in every seed")
  apart = seeded_comparison.summarize(args, per_seed, losses(6.1012))
  assert apart["pairs"][0]["verdict"] == "ours below peer in every seed"


def test_too_few_seeds_or_an_unknown_rule_is_refused():
  with pytest.raises(seeded_comparison.UserError, match="two seeds"):
    args_of("trainers", [1])
  with pytest.raises(seeded_comparison.UserError, match="median"):
    seeded_comparison.parse_args(["--output_dir=/x", "--compare=mask_rules",
                                  "--mask_rules=upstream,median"])


@pytest.mark.parametrize("flag, line", [
    ("--seeds=1,two", "error: argument --seeds: expected comma-separated "
     "integers, got '1,two'"),
    ("--compare=bogus", "error: argument --compare: invalid choice: 'bogus' "
     "(choose from 'trainers', 'mask_rules', 'precisions')")])
def test_a_bad_flag_is_one_line_and_makes_nothing(tmp_path, flag, line):
  """As launched: argparse's refusal as the toolkit's one `error:` line,
  without its usage."""
  out = tmp_path / "out"
  result = run_program(["benchmarks/seeded_comparison.py",
                        "--output_dir=%s" % out, "--compare=trainers", flag])
  assert expect_user_error(result) == line
  assert "usage:" not in result.stderr
  assert not out.exists()


@pytest.mark.slow
def test_ours_and_the_peer_train_alike_from_the_same_weights_and_masks(
    tmp_path):
  """Common random numbers: the same initial weights, masks and order, no
  dropout; the held-out loss after every evaluated step is the same in both
  frameworks, seed by seed."""
  run_ok(["benchmarks/seeded_comparison.py", "--output_dir=%s" % tmp_path,
          "--compare=trainers", "--seeds=1,2", "--smoke"], timeout=900)
  for seed in (1, 2):
    histories = {}
    for arm in ("ours", "peer"):
      with open(tmp_path / "runs" / ("%s_seed%d" % (arm, seed)) /
                "eval_history.jsonl") as f:
        histories[arm] = {e["step"]: e["masked_lm_loss"]
                          for e in map(json.loads, f)}
    assert sorted(histories["ours"]) == [3, 6]
    for step, loss in histories["peer"].items():
      assert histories["ours"][step] == pytest.approx(loss, rel=1e-5)
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert {p["verdict"] for p in summary["pairs"]} == {
      "alike: held-out loss within 0.0001 in every seed"}
