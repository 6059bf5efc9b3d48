# coding=utf-8
"""Bad inputs of data creation and training, each as a user meets it.

Every case is one `error:` line naming the file or flag, exit code 2, and no
output left behind: a truncated or mislabelled compressed corpus, a damaged
Parquet file, a URL output directory, a corpus without a usable document,
a malformed Dask address, training input at a URL TensorFlow cannot read.
And the programs agree: create_vocab reads what create_pretraining_data
reads, and --masked_lm_prob has one range for the records and for training.
"""

import bz2
import gzip
import json
import lzma
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow.compat.v1 as tf
import zstandard

from bertkit.common import errors
from bertkit.common import file_patterns
from bertkit.data import corpus_input
from bertkit.data import pretraining_instances
from bertkit.data import pretraining_records
from bertkit.data import creation_options
from bertkit.engine import dynamic_masking
from bertkit.engine import record_checks
from conftest import REPO_ROOT, expect_user_error, pretrain_args
from conftest import run_program
from test_corpus_input import read_all
from test_corpus_input import sample_paragraphs
from test_corpus_input import write_jsonl
from test_corpus_input import write_parquet
from test_corpus_input import write_segmented_text
from test_create_pretraining_data_sharded import CPD_VOCAB
from test_create_pretraining_data_sharded import SAMPLE_CORPUS
from test_dynamic_masking import read_examples
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

