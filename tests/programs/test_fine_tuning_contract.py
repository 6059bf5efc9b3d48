"""Every fine-tuning program through the same cases: they share one driver
(bertkit/tasks/fine_tuning/driver.py), so they keep its rules alike.

  * evaluating or predicting without --do_train from a checkpoint that has
    pretraining's weights only is one line naming the checkpoint and the
    head's missing variables, exit 2, nothing trained or predicted;
  * from the program's own fine-tuned output directory it works;
  * a missing data directory (SQuAD: file), a bad dev file, training
    examples that make no whole step and an --output_dir holding a
    checkpoint without the head (the pretraining run's) are refused before
    anything is written;
  * evaluating and predicting with --use_bf16 (oneDNN's bfloat16 rewrite)
    gives float32's outputs within a stated tolerance, and not float32's
    exactly (the rewrite ran).

The pretrained checkpoint is trained here on records create_pretraining_data
made from sample_data/corpus.txt, with a vocab create_vocab made from it.
"""

import json
import os
import shutil

import pytest

from bertkit.common import heads
from bertkit.common.errors import UserError
from conftest import (REPO_ROOT, TINY_CONFIG, expect_user_error,
                      program_in_process, read_eval_results, run_program,
                      write_real_text_records)

SEQ, PREDS, VOCAB_SIZE = 32, 5, 500
SAMPLE = os.path.join(REPO_ROOT, "sample_data")
SQUAD_FILE = os.path.join(REPO_ROOT, "tests", "fixtures", "squad",
                          "squad_v1.json")


def tsv_floats(out, *names):
  """{(file, line, column): number} of the tab-separated files `names` in
  `out`."""
  return {(name, row, column): float(value) for name in names
          for row, line in enumerate(open(os.path.join(out, name),
                                          encoding="utf-8"))
          for column, value in enumerate(line.split("\t"))}


def nbest_logits(out):
  """{(question, answer, start or end): logit} of a SQuAD run's
  nbest_predictions.json (which answers make the n best may change with a
  logit's rounding; those in both are compared)."""
  with open(os.path.join(out, "nbest_predictions.json"),
            encoding="utf-8") as f:
    nbest = json.load(f)
  return {(qid, entry["text"], end): entry[end + "_logit"]
          for qid, entries in nbest.items() for entry in entries
          for end in ("start", "end")}


def trec_scores(out):
  """{(query, passage): score} of a re-ranking run's TREC run file."""
  with open(os.path.join(out, "rerank_run.trec"), encoding="utf-8") as f:
    return {(qid, pid): float(score)
            for qid, _, pid, _, score, _ in (line.split() for line in f)}


# Each program: its head, its data arguments, the flag that evaluates (or
# predicts) without training, the epochs that make 2 steps of batch 8 on the
# sample, how to break its dev (or predicted) file, what its training steps
# count (None: it trains --num_train_steps, not epochs), and the floats its
# evaluation and prediction write (class or choice probabilities; NER's dev
# and test losses, computed from the token logits; SQuAD's span logits; the
# re-ranker's pair scores) with the largest difference bfloat16 may make to
# them. A missing data file is named by `missing` % `missing_file`, else
# the missing --data_dir.
PROGRAMS = {
    "run_classifier.py": dict(
        head=heads.CLASSIFIER, evaluate="--do_eval", epochs="0.04",
        data=lambda d: ["--task_name=tsv", "--data_dir=%s" % d],
        source=os.path.join(SAMPLE, "classify"), dev="dev.tsv",
        broken="label\ttext\nsports\tthe label is not one of train's\n",
        results="eval_results.txt", counted="examples",
        floats=lambda out: tsv_floats(out, "test_results.tsv"),
        bf16_tolerance=1e-3),
    "run_ner.py": dict(
        head=heads.TOKEN_CLASSIFICATION, evaluate="--do_eval",
        epochs="0.06", data=lambda d: ["--data_dir=%s" % d],
        source=os.path.join(SAMPLE, "ner"), dev="dev.txt",
        broken="London X-LOC\n", results="dev_predictions.txt",
        counted="windows",
        floats=lambda out: {name: read_eval_results(out)[name] for name
                            in ("eval_loss", "test_loss")},
        bf16_tolerance=1e-3),
    "run_swag.py": dict(
        head=heads.MULTIPLE_CHOICE, evaluate="--do_eval", epochs="0.034",
        data=lambda d: ["--data_dir=%s" % d],
        source=os.path.join(SAMPLE, "swag"), dev="val.csv",
        broken="not,a,swag,header\n", results="dev_results.tsv",
        counted="examples",
        floats=lambda out: tsv_floats(out, "dev_results.tsv",
                                      "test_results.tsv"),
        bf16_tolerance=1e-3),
    "run_rerank.py": dict(
        head=heads.RERANKER, evaluate="--do_eval", epochs="1",
        data=lambda d: ["--%s=%s" % (flag, os.path.join(d, name)) for
                        flag, name in (
                            ("train_triples", "triples.train.small.tsv"),
                            ("candidates", "run.dev.tsv"),
                            ("queries", "queries.dev.small.tsv"),
                            ("collection", "collection.tsv"),
                            ("qrels", "qrels.dev.small.tsv"))] + [
                                "--num_train_steps=2",
                                "--max_query_length=8"],
        source=os.path.join(SAMPLE, "msmarco"), dev="run.dev.tsv",
        broken="1\t7\n", results="rerank_run.tsv",
        missing="--train_triples %s: no such file",
        missing_file="triples.train.small.tsv", counted=None,
        floats=trec_scores, bf16_tolerance=1e-3),
    "run_squad.py": dict(
        head=heads.SQUAD, evaluate="--do_predict", epochs="0.7",
        data=lambda d: ["--train_file=%s" % os.path.join(d, "train.json"),
                        "--predict_file=%s" % os.path.join(d, "dev.json"),
                        "--max_query_length=16", "--doc_stride=8"],
        source=None, dev="dev.json", broken='{"data": [\n',
        results="predictions.json", counted="questions", floats=nbest_logits,
        bf16_tolerance=1e-2, missing="--train_file %s: no such file",
        missing_file="train.json"),
}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  """A pretraining output directory: 2 steps of a tiny BERT on real text;
  it describes itself (config, vocab, casing)."""
  work = tmp_path_factory.mktemp("contract")
  records = write_real_text_records(
      work, SEQ, PREDS, VOCAB_SIZE, dict(TINY_CONFIG, vocab_size=VOCAB_SIZE))
  out = work / "pretrain"
  program_in_process([
      "run_pretraining.py", "--bert_config_file=%s" % (work / "config.json"),
      "--vocab_file=%s" % (work / "vocab.txt"), "--do_lower_case",
      "--input_file=%s" % records, "--output_dir=%s" % out, "--do_train",
      "--max_seq_length=%d" % SEQ, "--max_predictions_per_seq=%d" % PREDS,
      "--train_batch_size=8", "--num_train_steps=2", "--num_warmup_steps=1",
      "--tf_random_seed=1"])
  return out


def write_dev_run(directory):
  """run_rerank's candidates: an MS MARCO run of each dev query's relevant
  passage and the two passages after it in the collection."""
  with open(os.path.join(directory, "collection.tsv")) as f:
    pids = [line.split("\t")[0] for line in f]
  lines = []
  with open(os.path.join(directory, "qrels.dev.small.tsv")) as f:
    for line in f:
      qid, _, pid, _ = line.split()
      at = pids.index(pid)
      lines += ["%s\t%s\t%d\n" % (qid, pids[(at + i) % len(pids)], i + 1)
                for i in range(3)]
  with open(os.path.join(directory, "run.dev.tsv"), "w") as f:
    f.writelines(lines)


def data_dir(program, directory):
  """A copy of the program's sample data in `directory`."""
  spec = PROGRAMS[program]
  if spec["source"]:
    shutil.copytree(spec["source"], directory)
    if program == "run_rerank.py":
      write_dev_run(directory)
  else:
    os.makedirs(directory)
    shutil.copy(SQUAD_FILE, os.path.join(directory, "train.json"))
    shutil.copy(SQUAD_FILE, os.path.join(directory, "dev.json"))
  return str(directory)


def arguments(program, data, output_dir, *stages, init_checkpoint=None):
  spec = PROGRAMS[program]
  args = [program] + spec["data"](data) + [
      "--output_dir=%s" % output_dir, "--max_seq_length=%d" % SEQ,
      "--train_batch_size=8", "--predict_batch_size=8",
      "--num_train_epochs=%s" % spec["epochs"], "--tf_random_seed=1"]
  if init_checkpoint:
    args.append("--init_checkpoint=%s" % init_checkpoint)
  return args + list(stages)


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_evaluating_a_pretrained_only_checkpoint_is_one_line(
    program, pretrained, tmp_path):
  spec = PROGRAMS[program]
  out = tmp_path / "out"
  result = run_program(arguments(
      program, data_dir(program, tmp_path / "data"), out, spec["evaluate"],
      init_checkpoint=pretrained))
  line = expect_user_error(
      result, "--init_checkpoint %s" % pretrained,
      "has no %s head" % spec["head"].name, *spec["head"].variables)
  assert line.endswith("fine-tune it with %s --do_train first" % program)
  assert not (out / spec["results"]).exists()


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_evaluating_its_own_fine_tuned_run_works(program, pretrained,
                                                 tmp_path):
  spec = PROGRAMS[program]
  data, out = data_dir(program, tmp_path / "data"), tmp_path / "out"
  program_in_process(arguments(program, data, out, "--do_train",
                               init_checkpoint=pretrained))
  assert not (out / spec["results"]).exists()
  # No --init_checkpoint: the run directory is the model, and its head.
  program_in_process(arguments(program, data, out, spec["evaluate"]))
  assert (out / spec["results"]).exists()
  if program != "run_squad.py":
    assert read_eval_results(out)["global_step"] == 2


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_a_missing_data_directory_is_refused(program, pretrained, tmp_path):
  missing = tmp_path / "no_such_data"
  with pytest.raises(UserError) as raised:
    program_in_process(arguments(program, str(missing), tmp_path / "out",
                                 "--do_train", init_checkpoint=pretrained))
  if "missing" in PROGRAMS[program]:
    expected = PROGRAMS[program]["missing"] % (
        missing / PROGRAMS[program]["missing_file"])
  else:
    expected = "--data_dir %s is not a directory" % missing
  assert str(raised.value) == expected
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_a_bad_dev_file_is_refused_before_anything_is_written(
    program, pretrained, tmp_path):
  spec = PROGRAMS[program]
  data = data_dir(program, tmp_path / "data")
  with open(os.path.join(data, spec["dev"]), "w", encoding="utf-8") as f:
    f.write(spec["broken"])
  out = tmp_path / "out"
  with pytest.raises(UserError) as raised:
    program_in_process(arguments(program, data, out, "--do_train",
                                 spec["evaluate"],
                                 init_checkpoint=pretrained))
  assert spec["dev"] in str(raised.value)
  assert "\n" not in str(raised.value)
  assert not out.exists() or not os.listdir(out)


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_training_into_the_pretrained_directory_is_refused(
    program, pretrained, tmp_path):
  """--output_dir and --init_checkpoint both the pretraining run: its
  checkpoint has no head to resume from; refused before anything is
  written, the pretraining run's files as they were."""
  spec = PROGRAMS[program]
  run = tmp_path / "pretrain"
  shutil.copytree(pretrained, run)
  before = sorted(os.listdir(run))
  with pytest.raises(UserError) as raised:
    program_in_process(arguments(program, data_dir(program, tmp_path / "data"),
                                 run, "--do_train", init_checkpoint=run))
  assert str(raised.value) == (
      "--output_dir %s holds model.ckpt-2, which this run would resume from, "
      "but it lacks 2 of the model's variables (%s): another program's run; "
      "give another --output_dir" % (run, ", ".join(sorted(
          spec["head"].variables))))
  assert sorted(os.listdir(run)) == before


def no_whole_step(program, pretrained, tmp_path):
  """The program's arguments with epochs too few for one step of 8."""
  args = arguments(program, data_dir(program, tmp_path / "data"),
                   tmp_path / "out", "--do_train",
                   init_checkpoint=pretrained)
  return [a for a in args if not a.startswith("--num_train_epochs=")] + [
      "--num_train_epochs=0.001"]


def no_whole_step_message(program):
  return ("training %s at --train_batch_size=8 for --num_train_epochs=0.001 "
          "make no whole step; raise --num_train_epochs or lower "
          "--train_batch_size" % PROGRAMS[program]["counted"])


@pytest.mark.parametrize("program", sorted(
    program for program, spec in PROGRAMS.items() if spec["counted"]))
def test_examples_that_make_no_whole_step_are_refused_before_writing(
    program, pretrained, tmp_path):
  with pytest.raises(UserError) as raised:
    program_in_process(no_whole_step(program, pretrained, tmp_path))
  assert no_whole_step_message(program) in str(raised.value)
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("program", ["run_classifier.py", "run_ner.py"])
def test_no_whole_step_leaves_an_earlier_runs_directory_as_it_was(
    program, pretrained, tmp_path):
  """As launched: one `error:` line, exit 2; the output directory of an
  earlier run keeps its files, labels.txt unchanged, and gets none."""
  out = tmp_path / "out"
  out.mkdir()
  (out / "labels.txt").write_text("an earlier run's\n")
  expect_user_error(run_program(no_whole_step(program, pretrained, tmp_path)),
                    no_whole_step_message(program))
  assert os.listdir(out) == ["labels.txt"]
  assert (out / "labels.txt").read_text() == "an earlier run's\n"


@pytest.mark.slow
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_bf16_predicts_float32s_outputs_within_tolerance(program, pretrained,
                                                        tmp_path):
  spec = PROGRAMS[program]
  data, trained = data_dir(program, tmp_path / "data"), tmp_path / "trained"
  program_in_process(arguments(program, data, trained, "--do_train",
                               init_checkpoint=pretrained))
  outputs = {}
  for precision in ("fp32", "bf16"):
    out = tmp_path / precision
    shutil.copytree(trained, out)
    run = program_in_process(
        arguments(program, data, out, spec["evaluate"], "--do_predict") +
        (["--use_bf16"] if precision == "bf16" else []))
    if precision == "bf16":
      assert "precision: mixed_bfloat16" in run.stderr
    outputs[precision] = spec["floats"](str(out))
  common = set(outputs["fp32"]) & set(outputs["bf16"])
  assert len(common) >= 0.9 * len(outputs["fp32"])
  difference = max(abs(outputs["bf16"][key] - outputs["fp32"][key])
                   for key in common)
  assert 0 < difference <= spec["bf16_tolerance"], difference


def test_the_contract_covers_every_fine_tuning_program():
  """A new fine-tuning program (one whose run goes through the driver) is
  added here."""
  driven = set()
  for name in os.listdir(REPO_ROOT):
    if name.endswith(".py"):
      with open(os.path.join(REPO_ROOT, name), encoding="utf-8") as f:
        if "driver.run(" in f.read():
          driven.add(name)
  assert driven == set(PROGRAMS)
