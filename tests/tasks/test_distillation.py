"""Distillation (bertkit/tasks/fine_tuning/distillation.py, teacher_outputs.py,
the driver's rules): the losses against PyTorch and NumPy references, the
teacher-outputs file, a teacher's logits read by a student, the bad inputs
refused, and runs of every task that distills (run_classifier, run_ner,
run_swag) on tiny models in this process."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
import torch

from bertkit.common import errors
from bertkit.tasks.fine_tuning import distillation
from bertkit.tasks.fine_tuning import teacher_outputs
from bertkit.tasks.ner import data as ner_data
from bertkit.tasks.swag import data as swag_data
from conftest import (REPO_ROOT, load_checkpoint, program_in_process,
                      read_eval_results, run_program)

SAMPLE = os.path.join(REPO_ROOT, "sample_data", "classify")
RNG_SEED = 62


def run_graph(fetches, graph):
  with tf.Session(graph=graph) as sess:
    return sess.run(fetches)


# ------------------------------------------------------------------ losses


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.5])
def test_soft_loss_is_torch_kl_div_batchmean_times_t_squared(graph,
                                                             temperature):
  rng = np.random.default_rng(RNG_SEED)
  student = rng.normal(0, 3, [16, 5]).astype(np.float32)
  teacher = rng.normal(0, 3, [16, 5]).astype(np.float32)
  ours = run_graph(tf.reduce_mean(distillation.soft_losses(
      tf.constant(student), tf.constant(teacher), temperature)), graph)
  theirs = torch.nn.functional.kl_div(
      torch.log_softmax(torch.tensor(student, dtype=torch.float64) /
                        temperature, -1),
      torch.softmax(torch.tensor(teacher, dtype=torch.float64) /
                    temperature, -1),
      reduction="batchmean") * temperature ** 2
  assert abs(float(ours) - float(theirs)) <= 1e-6 * max(1.0, abs(theirs))


def log_softmax(x):
  x = np.asarray(x, np.float64)
  top = x.max(-1, keepdims=True)
  return x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))


def numpy_soft_cross_entropy(student, teacher, temperature):
  """Hinton's soft cross-entropy x T^2, less the teacher's entropy (a
  constant of the student): the KL divergence, per example."""
  p_log = log_softmax(np.asarray(teacher) / temperature)
  q_log = log_softmax(np.asarray(student) / temperature)
  cross_entropy = -(np.exp(p_log) * q_log).sum(-1)
  entropy = -(np.exp(p_log) * p_log).sum(-1)
  return temperature ** 2 * (cross_entropy - entropy)


def numpy_mixed_losses(hard, student, teacher, labelled, weight,
                       temperature, regression=False):
  if regression:
    soft = (student[..., 0] - teacher[..., 0]) ** 2
  else:
    soft = numpy_soft_cross_entropy(student, teacher, temperature)
  labelled = labelled.reshape([-1] + [1] * (hard.ndim - 1)).astype(
      np.float64)
  return labelled * ((1 - weight) * hard + weight * soft) + (
      1 - labelled) * soft


@pytest.mark.parametrize("shape, regression", [
    ((12, 3), False),       # classifier: [X, C]
    ((12, 1), True),        # STS-B: [X, 1], the score
    ((4, 7, 5), False),     # named entities: [X, S, C]
], ids=["classifier", "regression", "tokens"])
def test_per_example_losses_equal_the_numpy_reference(graph, shape,
                                                      regression):
  rng = np.random.default_rng(RNG_SEED)
  student = rng.normal(0, 2, shape).astype(np.float32)
  teacher = rng.normal(0, 2, shape).astype(np.float32)
  hard = rng.uniform(0, 3, shape[:-1]).astype(np.float32)
  labelled = np.arange(shape[0]) % 3 != 0  # every third unlabelled
  settings = distillation.Distillation(temperature=2.0, weight=0.3)
  ours = run_graph(distillation.per_example_losses(
      tf.constant(hard), tf.constant(student),
      {distillation.TEACHER_LOGITS: tf.constant(teacher.reshape(
          shape[0], -1)), distillation.HAS_LABEL: tf.constant(
              labelled.astype(np.int32))},
      settings, regression), graph)
  expected = numpy_mixed_losses(hard, student, teacher, labelled, 0.3, 2.0,
                                regression)
  np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-6)


def test_weight_zero_leaves_a_labelled_example_its_hard_loss_exactly(graph):
  rng = np.random.default_rng(RNG_SEED)
  student = tf.constant(rng.normal(0, 2, [8, 3]).astype(np.float32))
  hard = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.constant(rng.integers(0, 3, [8]).astype(np.int32)),
      logits=student)
  mixed = distillation.per_example_losses(
      hard, student,
      {distillation.TEACHER_LOGITS: tf.constant(
          rng.normal(0, 2, [8, 3]).astype(np.float32)),
       distillation.HAS_LABEL: tf.ones([8], tf.int32)},
      distillation.Distillation(temperature=3.0, weight=0.0))
  values = run_graph([hard, mixed, tf.gradients(tf.reduce_mean(hard),
                                                student)[0],
                      tf.gradients(tf.reduce_mean(mixed), student)[0]],
                     graph)
  assert np.array_equal(values[0], values[1])
  assert np.array_equal(values[2], values[3])


def test_margin_mse_equals_torch_mse_of_the_margins(graph):
  rng = np.random.default_rng(RNG_SEED)
  s_pos, s_neg, t_pos, t_neg = rng.normal(0, 4, [4, 32]).astype(np.float32)
  ours = run_graph(distillation.margin_mse(
      *(tf.constant(v) for v in (s_pos, s_neg, t_pos, t_neg))), graph)
  theirs = torch.nn.functional.mse_loss(
      torch.tensor(s_pos, dtype=torch.float64) -
      torch.tensor(s_neg, dtype=torch.float64),
      torch.tensor(t_pos, dtype=torch.float64) -
      torch.tensor(t_neg, dtype=torch.float64))
  assert abs(float(ours) - float(theirs)) <= 1e-6 * max(1.0, float(theirs))


# ---------------------------------------------------- teacher outputs file


def test_logits_round_trip_exactly_as_float32(tmp_path):
  rng = np.random.default_rng(RNG_SEED)
  logits = [rng.normal(0, 1, [3]).astype(np.float32) * 10.0 ** e
            for e in range(-30, 30, 3)]
  path = str(tmp_path / "logits.jsonl")
  teacher_outputs.write(path, [{"id": i + 2, "logits": row}
                               for i, row in enumerate(logits)])
  back = teacher_outputs.read(path, [(i + 2, (3,))
                                     for i in range(len(logits))])
  for row, read in zip(logits, back):
    assert read.dtype == np.float32 and np.array_equal(row, read)
  first = json.loads(open(path).readline())
  assert first["index"] == 0 and first["id"] == 2


def write_rows(path, rows):
  with open(path, "w") as f:
    f.write("".join(line + "\n" for line in rows))


GOOD = ['{"index": 0, "id": 2, "logits": [1.0, -1.0]}',
        '{"index": 1, "id": 3, "logits": [0.5, 0.25]}']
EXAMPLES = [(2, (2,)), (3, (2,))]


@pytest.mark.parametrize("rows, message", [
    (GOOD[:1], r"has 1 rows; the training file has 2 examples"),
    (GOOD + ['{"index": 2, "id": 4, "logits": [0, 0]}'],
     r"line 3: more rows than the 2 examples"),
    ([GOOD[0], '{"index": 1, "id": 9, "logits": [0.5, 0.25]}'],
     r"line 2: row of example index 1, id 9; the training file's example 1 "
     r"has id 3"),
    ([GOOD[0], '{"index": 1, "id": 3, "logits": [0.5, 0.25, 1.0]}'],
     r"line 2: logits of shape \(3,\); expected shape \(2,\) \(2 classes\)"),
    ([GOOD[0], '{"index": 1, "id": 3, "logits": [NaN, 0.25]}'],
     r"line 2: logits hold a NaN or infinite value"),
    ([GOOD[0], '{"index": 1, "id": 3, "logits": [Infinity, 0.25]}'],
     r"line 2: logits hold a NaN or infinite value"),
    ([GOOD[0], '{"index": 1, "id": 3, "logits": ["a", 0.25]}'],
     r'line 2: logits of \["a", 0.25\]; expected shape'),
    ([GOOD[0], 'not json'], r"line 2: not JSON"),
], ids=["fewer", "more", "id", "classes", "nan", "infinity", "strings",
        "json"])
def test_outputs_that_do_not_match_the_examples_are_refused(tmp_path, rows,
                                                            message):
  path = str(tmp_path / "logits.jsonl")
  write_rows(path, rows)
  with pytest.raises(errors.UserError) as error:
    teacher_outputs.read(path, EXAMPLES)
  assert str(error.value).startswith("--teacher_outputs %s" % path)
  assert re.search(message, str(error.value)), str(error.value)


# ------------------------------------------------- a teacher and a student

# The classifier's, named-entity and multiple-choice tests' tiny runs.
from helpers import classifier  # noqa: E402
from helpers import ner  # noqa: E402
from helpers import swag  # noqa: E402

TRANSFER = os.path.join(SAMPLE, "transfer.tsv")
# The named-entity and multiple-choice runs: a few steps show the path.
SHORT = "--num_train_epochs=0.2"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
  """The classifier tests' word vocab and tiny config (dropout 0.1), and a
  tiny teacher fine-tuned on the sample's labels."""
  d = tmp_path_factory.mktemp("distill")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + \
      classifier.words_of([os.path.join(SAMPLE, name) for name in
                           ("train.tsv", "dev.tsv", "test.tsv",
                            "transfer.tsv")])
  (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  (d / "tiny.json").write_text(json.dumps(
      classifier.tiny_config(len(vocab))))
  program_in_process(classify(d, d / "teacher", "--do_train", "--do_eval",
                              "--num_train_epochs=2", "--tf_random_seed=7"))
  return d


def classify(work_dir, output_dir, *extra):
  return classifier.classifier_args(work_dir, output_dir,
                                    *extra)


def predict(work_dir, teacher_dir, path):
  """The teacher's predict_logits.jsonl over `path`, kept as
  logits_of_<name> (and its test_results.tsv as results_of_<name>)."""
  program_in_process(classify(work_dir, teacher_dir, "--do_predict",
                              "--predict_file=%s" % path))
  name = os.path.basename(path)
  os.replace(str(teacher_dir / "test_results.tsv"),
             str(teacher_dir / ("results_of_" + name)))
  kept = str(teacher_dir / ("logits_of_" + name))
  os.replace(str(teacher_dir / teacher_outputs.FILE_NAME), kept)
  return kept


@pytest.fixture(scope="module")
def transfer_teacher(work):
  """The tiny teacher's predict_logits.jsonl over the sample's transfer set."""
  return predict(work, work / "teacher", TRANSFER)


def student(work_dir, output_dir, teacher, *extra):
  """run_classifier.py training on the transfer set against `teacher`."""
  return classify(work_dir, output_dir, "--do_train",
                  "--train_file=%s" % TRANSFER,
                  "--teacher_outputs=%s" % teacher, *extra)


def read_jsonl(path):
  with open(path) as f:
    return [json.loads(line) for line in f]


def test_a_teacher_writes_the_raw_logits_of_every_predicted_row(
    work, transfer_teacher):
  rows = read_jsonl(transfer_teacher)
  assert [(r["index"], r["id"]) for r in rows] == [
      (i, i + 2) for i in range(800)]  # line 1 is the header
  logits = np.array([r["logits"] for r in rows], np.float32)
  # test_results.tsv keeps its rounded probabilities: softmax of the logits.
  probabilities = classifier.read_probabilities(
      work / "teacher" / "results_of_transfer.tsv")
  assert probabilities.shape == (800, 2)
  np.testing.assert_allclose(
      np.exp(log_softmax(logits)), probabilities, atol=1e-6)
  # The teacher learnt the sample: its transfer labels are mostly right.
  topics = ["kitchen" if any(w in r[0] for w in ("oven", "bread", "soup",
                                                  "cake", "dough", "loaf",
                                                  "stew", "biscuit", "flour",
                                                  "recipe", "baking"))
            else "weather"
            for r in classifier.read_tsv(TRANSFER)[1:]]
  agree = np.mean(np.array(["kitchen", "weather"])[logits.argmax(-1)] ==
                  np.array(topics))
  assert agree >= 0.9


def test_weight_zero_trains_exactly_as_fine_tuning(work, tmp_path):
  teacher = predict(work, work / "teacher", os.path.join(SAMPLE,
                                                         "train.tsv"))
  common = ("--do_train", "--num_train_epochs=0.5", "--tf_random_seed=3")
  program_in_process(classify(work, tmp_path / "plain", *common))
  program_in_process(classify(work, tmp_path / "student", *common,
                              "--teacher_outputs=%s" % teacher,
                              "--distillation_weight=0",
                              "--temperature=2"))
  plain = load_checkpoint(str(tmp_path / "plain"))
  student = load_checkpoint(str(tmp_path / "student"))
  assert plain["global_step"] == 6 and sorted(plain) == sorted(student)
  for name, value in plain.items():
    assert np.array_equal(value, student[name]), name


@pytest.mark.slow
def test_a_student_learns_from_unlabelled_rows_alone(work, transfer_teacher,
                                                     tmp_path):
  teacher = transfer_teacher
  out = tmp_path / "student"
  result = program_in_process(student(
      work, out, teacher, "--do_eval", "--temperature=2",
      "--num_train_epochs=2", "--tf_random_seed=5"))
  assert "Distilling from %s: 800 examples' logits" % teacher in \
      result.stderr
  assert "Training: 800 examples" in result.stderr
  assert read_eval_results(out)["eval_accuracy"] >= 0.9
  # The teacher's logits travel in the student's records.
  record = next(tf.io.tf_record_iterator(str(out / "train.tf_record")))
  example = tf.train.Example.FromString(record)
  assert len(example.features.feature["teacher_logits"].float_list.value) \
      == 2
  assert example.features.feature["has_label"].int64_list.value == [0]


def test_a_mismatched_teacher_file_is_refused_before_any_output(
    work, transfer_teacher, tmp_path):
  teacher = transfer_teacher
  with pytest.raises(errors.UserError) as error:
    program_in_process(classify(work, tmp_path / "out", "--do_train",
                                "--teacher_outputs=%s" % teacher))
  # train.tsv has 400 examples, the transfer set's outputs 800 rows.
  assert str(error.value) == (
      "--teacher_outputs %s line 401: more rows than the 400 examples of "
      "the training file" % teacher)
  assert not (tmp_path / "out").exists()


def test_unlabelled_rows_need_a_teacher(work, tmp_path):
  with pytest.raises(errors.UserError, match=r"transfer.tsv line 2: label "
                     r"'' is not one of the task's labels"):
    program_in_process(classify(work, tmp_path / "out", "--do_train",
                                "--train_file=%s" % TRANSFER))
  with pytest.raises(errors.UserError, match=r"--teacher_outputs=\S+ is "
                     r"what --do_train learns from"):
    program_in_process(classify(work, tmp_path / "out", "--do_eval",
                                "--teacher_outputs=%s" % TRANSFER))
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag, message", [
    ("--temperature=0", "error: --temperature must be > 0, got 0.0"),
    ("--distillation_weight=1.5", "error: --distillation_weight=1.5 is out "
     "of range; expected 0 <= distillation_weight <= 1"),
])
def test_a_bad_temperature_or_weight_is_one_error_line(tmp_path, flag,
                                                       message):
  result = run_program(["run_classifier.py", "--task_name=tsv",
                        "--data_dir=%s" % SAMPLE, "--do_train",
                        "--output_dir=%s" % (tmp_path / "out"), flag])
  assert result.returncode == 2
  assert [l for l in result.stderr.splitlines()
          if l.startswith("error:")] == [message]
  assert not (tmp_path / "out").exists()


def untagged_copy(path, target):
  """A CoNLL file's tokens alone, one a line (a transfer set)."""
  with open(path, encoding="utf-8") as f:
    lines = [line.split()[0] if line.strip() else "" for line in f]
  target.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(target)


def ner_teacher(tmp_path):
  """A tiny NER teacher fine-tuned on the sample, and its logits of the
  sample's training sentences untagged: (its directory, the untagged
  file)."""
  teacher = tmp_path / "teacher"
  program_in_process(ner.tiny_args(tmp_path, ner.SAMPLE, teacher,
                                   "--do_train", SHORT))
  untagged = untagged_copy(os.path.join(ner.SAMPLE, "train.txt"),
                           tmp_path / "untagged.txt")
  program_in_process(ner.tiny_args(tmp_path, ner.SAMPLE, teacher,
                                   "--do_predict",
                                   "--predict_file=" + untagged))
  return teacher, untagged


@pytest.mark.slow
def test_ner_student_learns_each_word_from_its_teacher(tmp_path):
  sample = ner.SAMPLE
  teacher, untagged = ner_teacher(tmp_path)
  rows = read_jsonl(str(teacher / teacher_outputs.FILE_NAME))
  sentences = ner_data.read_sentences(os.path.join(sample,
                                                   "train.txt"))
  assert [(r["id"], np.shape(r["logits"])) for r in rows] == [
      (s.lines[0], (len(s.words), len(ner.LABELS))) for s in sentences]
  # The predictions file of an untagged file is a tagged file again.
  assert len(ner_data.read_sentences(
      str(teacher / "test_predictions.txt"))) == len(sentences)
  student = tmp_path / "student"
  program_in_process(ner.tiny_args(
      tmp_path, sample, student, "--do_train", "--train_file=" + untagged,
      "--teacher_outputs=%s" % (teacher / teacher_outputs.FILE_NAME),
      "--labels=" + ",".join(ner.LABELS), SHORT))
  record = tf.train.Example.FromString(next(tf.io.tf_record_iterator(
      str(student / "train.tf_record"))))
  placed = np.array(record.features.feature["teacher_logits"].float_list
                    .value).reshape(32, len(ner.LABELS))
  weights = np.array(record.features.feature["label_weights"].int64_list
                     .value)
  # Teacher logits at each word's first piece, zeros elsewhere.
  assert np.all(placed[weights == 0] == 0)
  assert np.all(np.abs(placed[weights == 1]).sum(-1) > 0)
  assert load_checkpoint(str(student))["global_step"] > 0


@pytest.mark.slow
def test_swag_student_learns_each_choice_from_its_teacher(tmp_path):
  sample = swag.SAMPLE
  teacher = tmp_path / "teacher"
  program_in_process(swag.tiny_args(tmp_path, sample, teacher,
                                    "--do_train", SHORT))
  # A transfer set: training rows without their labels.
  rows = swag.sample_rows("train.csv")[:49]
  transfer = str(tmp_path / "transfer.csv")
  swag.write_rows(transfer, [rows[0]] + [row[:-1] + [""]
                                         for row in rows[1:]])
  program_in_process(swag.tiny_args(tmp_path, sample, teacher,
                                    "--do_predict",
                                    "--predict_file=" + transfer))
  logits = read_jsonl(str(teacher / teacher_outputs.FILE_NAME))
  examples = swag_data.read_examples(transfer)
  assert [(r["id"], len(r["logits"])) for r in logits] == [
      (e.example_id, 4) for e in examples]
  student = tmp_path / "student"
  program_in_process(swag.tiny_args(
      tmp_path, sample, student, "--do_train", "--train_file=" + transfer,
      "--teacher_outputs=%s" % (teacher / teacher_outputs.FILE_NAME),
      "--temperature=2"))
  record = tf.train.Example.FromString(next(tf.io.tf_record_iterator(
      str(student / "train.tf_record"))))
  assert len(record.features.feature["teacher_logits"].float_list.value) \
      == 4
  assert record.features.feature["has_label"].int64_list.value == [0]
  assert load_checkpoint(str(student))["global_step"] == 3  # 48 / 16


# ------------------------------------------------------------------ slow


@pytest.mark.slow
def test_two_replicas_and_micro_batches_distill_as_one_device(tmp_path):
  """Named entities (the classifier's head has upstream's fixed dropout,
  drawn apart on each replica; TINY_CONFIG has none): a student of untagged
  sentences, whose words are shared out unevenly between replicas."""
  sample = ner.SAMPLE
  teacher, untagged = ner_teacher(tmp_path)
  runs = {}
  for name, extra in (("one", []), ("two", ["--cpu_replicas=2"]),
                      ("accumulated", ["--num_accumulation_steps=2"])):
    runs[name] = tmp_path / name
    program_in_process(ner.tiny_args(
        tmp_path, sample, runs[name], "--do_train",
        "--train_file=" + untagged, "--labels=" + ",".join(ner.LABELS),
        "--teacher_outputs=%s" % (teacher / teacher_outputs.FILE_NAME),
        "--temperature=2", "--train_batch_size=32", "--learning_rate=1e-4",
        *extra))
  ner.assert_weights_equal_one_device(runs)


@pytest.mark.slow
def test_fp16_distillation_with_two_replicas_runs(work, transfer_teacher,
                                                  tmp_path):
  # A launch: --use_fp16's graph rewrite is process-global state.
  teacher = transfer_teacher
  out = tmp_path / "out"
  result = run_program(student(
      work, out, teacher, "--do_eval", "--num_train_epochs=0.5",
      "--cpu_replicas=2", "--use_fp16"))
  assert result.returncode == 0, result.stderr[-3000:]
  assert "strategy=mirrored replicas=2" in result.stderr
  assert load_checkpoint(str(out))["global_step"] == 12
  assert 0.0 <= read_eval_results(out)["eval_accuracy"] <= 1.0


@pytest.mark.slow
def test_a_distillation_run_stops_on_sigterm_and_resumes(
    work, transfer_teacher, tmp_path):
  import signal
  from helpers import processes
  teacher = transfer_teacher
  out = tmp_path / "out"
  out.mkdir()
  args = student(work, out, teacher, "--train_batch_size=4",
                 "--num_train_epochs=1", "--log_every_n_steps=1",
                 "--tf_random_seed=1", processes.FAR_AWAY)
  log = out / "run.log"
  proc = processes.start(args, log=open(log, "w"))
  signalled_at = processes.signal_after_step([proc], proc.pid, out,
                                             signal.SIGTERM)
  assert processes.wait_all([proc]) == [errors.EXIT_STOPPED]
  stopped_at = processes.check_stopped_run(out, log, signalled_at,
                                           "by SIGTERM")
  result = run_program(args)
  assert result.returncode == 0, result.stderr[-3000:]
  processes.check_resumed(out, stopped_at, 200)  # 800 rows / batch 4


def test_run_distill_sh_help_documents_every_setting():
  from helpers import scripts
  result = scripts.run_script("run_distill.sh", "--help")
  assert result.returncode == 0, result.stderr
  for name in scripts.settings_of("run_distill.sh"):
    assert re.search(r"^  %s " % name, result.stdout, re.M), name


def test_run_distill_sh_refuses_an_unknown_size_before_any_step(tmp_path):
  from helpers import scripts
  result = scripts.run_script("run_distill.sh", "WORK_DIR=%s" % tmp_path,
                              "STUDENT_CONFIG=L3_H100")
  assert result.returncode == 2
  lines = result.stderr.splitlines()
  assert len(lines) == 1 and lines[0].startswith(
      "run_distill.sh: error: STUDENT_CONFIG=L3_H100 is neither a file nor "
      "one of configs/: L10_H128 "), lines
  assert "bert_tiny" in lines[0] and not os.listdir(str(tmp_path))


def hf_logits(hf_dir, sentences, seq_length):
  import transformers
  model = transformers.BertForSequenceClassification.from_pretrained(hf_dir)
  tokenizer = transformers.BertTokenizer.from_pretrained(hf_dir)
  model.eval()
  batch = tokenizer(sentences, max_length=seq_length, truncation=True,
                    padding="max_length", return_tensors="pt")
  with torch.no_grad():
    return model(**batch).logits.numpy()


@pytest.mark.slow
def test_run_distill_sh_and_its_student_in_hugging_face(tmp_path):
  """The script on the bundled sample from a fresh WORK_DIR (its vocab made
  there), shortened; the exported student's Hugging Face logits are ours."""
  import subprocess
  import sys
  # Six processes in a row: helpers.scripts.run_script's 900 s are not
  # enough on a loaded machine.
  result = subprocess.run(
      ["bash", os.path.join(REPO_ROOT, "scripts", "run_distill.sh"),
       "WORK_DIR=%s" % tmp_path, "TEACHER_CONFIG=bert_tiny",
       "TEACHER_EPOCHS=2", "DISTILL_EPOCHS=1", "FINE_TUNE_EPOCHS=1",
       "STUDENT_CONFIG=L2_H128", "EXPORT_FORMAT=huggingface"],
      env=dict(os.environ, PYTHON=sys.executable, TF_CPP_MIN_LOG_LEVEL="2"),
      capture_output=True, text=True, timeout=3600, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  last = result.stdout.rstrip().splitlines()[-2:]
  assert re.fullmatch(r"\[run_distill.sh\] teacher dev eval_accuracy = "
                      r"[01]\.\d+ \(\S+/distill/teacher\)", last[0]), last
  assert re.fullmatch(r"\[run_distill.sh\] student dev eval_accuracy = "
                      r"[01]\.\d+ \(L2_H128, \S+/distill/student_labels\)",
                      last[1]), last
  student = tmp_path / "distill" / "student_labels"
  rows = read_jsonl(str(tmp_path / "distill" / "teacher" /
                        teacher_outputs.FILE_NAME))
  assert len(rows) == 800
  dev = os.path.join(SAMPLE, "dev.tsv")
  predicted = tmp_path / "predicted"
  program_in_process(["run_classifier.py", "--task_name=tsv",
                      "--data_dir=%s" % SAMPLE,
                      "--init_checkpoint=%s" % student,
                      "--output_dir=%s" % predicted, "--max_seq_length=64",
                      "--do_predict", "--predict_file=%s" % dev])
  ours = np.array([r["logits"] for r in read_jsonl(
      str(predicted / teacher_outputs.FILE_NAME))])
  sentences = [row[0] for row in classifier.read_tsv(dev)[1:]]
  theirs = hf_logits(str(student / "export" / "huggingface"), sentences, 64)
  assert ours.shape == theirs.shape == (100, 2)
  np.testing.assert_allclose(theirs, ours, atol=1e-4, rtol=0)
