# coding=utf-8
"""Corpora where they live (fsspec URLs) and as they come (JSONL, Parquet).

The documents of sample_data/corpus.txt, each written as one paragraph into
JSONL, .jsonl.gz, .jsonl.zst and Parquet files, must read as the same
documents as the text file that holds the segmenter's sentences of each
paragraph, one per line: whole, split into shards, from memory:// and
file:// URLs, and through create_pretraining_data.py, whose records then
equal the text file's byte for byte. Bad input is one error line.
"""

import os

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import create_pretraining_data as cpd
from bertkit.common import errors
from bertkit.data import compressed_files
from bertkit.data import corpus_input
from bertkit.data import creation_options
from bertkit.data import shard_plan
from conftest import run_program
from helpers.corpora import (CPD_VOCAB, SAMPLE_CORPUS, assert_one_error_line,
                             directory_bytes, read_all, read_bytes,
                             sample_paragraphs, write_jsonl, write_parquet,
                             write_segmented_text)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
  root = tmp_path_factory.mktemp("formats")
  paragraphs = sample_paragraphs()
  assert len(paragraphs) > 50
  return {
      "text": write_segmented_text(root / "corpus.txt", paragraphs),
      "jsonl": write_jsonl(root / "corpus.jsonl", paragraphs),
      "jsonl.gz": write_jsonl(root / "corpus.jsonl.gz", paragraphs),
      "jsonl.zst": write_jsonl(root / "corpus.jsonl.zst", paragraphs),
      "parquet": write_parquet(root / "corpus.parquet", paragraphs),
  }


def test_formats_are_chosen_by_name_and_overridable():
  assert corpus_input.format_of("a/b.txt") == "text"
  assert corpus_input.format_of("s3://b/x.JSONL") == "jsonl"
  assert corpus_input.format_of("x.jsonl.gz") == "jsonl"
  assert corpus_input.format_of("x.ndjson.zst") == "jsonl"
  assert corpus_input.format_of("x.parquet") == "parquet"
  assert corpus_input.format_of("x.txt.gz") == "text"
  assert corpus_input.format_of("x.txt", "jsonl") == "jsonl"
  assert not compressed_files.is_splittable("x.jsonl.gz")
  assert compressed_files.is_splittable("x.jsonl")


def test_every_format_reads_as_the_segmented_text(corpora):
  expected = read_all(corpora["text"])
  assert len(expected) == len(sample_paragraphs())
  # The segmenter did split paragraphs into several sentences.
  assert sum(len(d) for d in expected) > 2 * len(expected)
  for name in ("jsonl", "jsonl.gz", "jsonl.zst", "parquet"):
    assert read_all(corpora[name]) == expected, name


@pytest.mark.parametrize("shard_bytes", [300, 3000, 20000])
def test_split_jsonl_and_parquet_read_each_document_once(corpora,
                                                         shard_bytes):
  expected = read_all(corpora["text"])
  for name in ("jsonl", "parquet", "jsonl.gz"):
    assert read_all(corpora[name], shard_bytes) == expected, (name,
                                                              shard_bytes)
  # The plan did cut the splittable files.
  files = corpus_input.expand_inputs(corpora["parquet"])
  if shard_bytes < files[0].size:
    assert len(shard_plan.plan_shards(files, shard_bytes)) > 1


def test_memory_and_file_urls(corpora):
  expected = read_all(corpora["text"])
  with open(corpora["jsonl"], "rb") as f:
    data = f.read()
  fs = fsspec.filesystem("memory")
  try:
    cut = data.index(b"\n", len(data) // 2) + 1
    fs.pipe("/corpus/part-0.jsonl", data[:cut])
    fs.pipe("/corpus/part-1.jsonl", data[cut:])
    fs.pipe("/corpus/.hidden.jsonl", b"not json\n")
    assert read_all("memory://corpus/part-*.jsonl") == read_all(
        "memory://corpus/")
    assert read_all("memory://corpus/") == expected
  finally:
    fs.rm("/corpus", recursive=True)
  assert read_all("file://" + corpora["parquet"], 2000) == expected


def cpd_flags(input_file, **flags):
  args = {"input_file": input_file, "vocab_file": CPD_VOCAB,
          "max_seq_length": 32, "max_predictions_per_seq": 5,
          "dupe_factor": 2}
  args.update(flags)
  return args


def cpd_args(input_file, **flags):
  """The program's command line for `cpd_flags`."""
  return ["create_pretraining_data.py"] + [
      "--%s=%s" % item for item in sorted(cpd_flags(input_file,
                                                    **flags).items())]


def run_cpd(input_file, **flags):
  """The program's run for `cpd_flags`, in this process."""
  cpd.run(creation_options.CreationOptions(
      **{name: str(value) if name in ("output_file", "output_dir") else value
         for name, value in cpd_flags(input_file, **flags).items()}))


def assert_refused(input_file, *expected, **flags):
  """In process: a one-line UserError holding each of `expected`."""
  with pytest.raises(errors.UserError) as raised:
    run_cpd(input_file, **flags)
  assert "\n" not in str(raised.value)
  for text in expected:
    assert text in str(raised.value)


def test_jsonl_records_equal_the_segmented_text_records(corpora, tmp_path):
  """Faithful mode: same documents, so the same records, byte for byte."""
  outputs = {}
  for name in ("text", "jsonl.zst", "parquet"):
    out = str(tmp_path / (name + ".tfrecord"))
    run_cpd(corpora[name], output_file=out)
    outputs[name] = read_bytes(out)
  assert len(outputs["text"]) > 10000
  assert outputs["jsonl.zst"] == outputs["text"]
  assert outputs["parquet"] == outputs["text"]


def test_sharded_mode_reads_a_file_url_as_the_local_path(corpora, tmp_path):
  for name, input_file in (("local", corpora["jsonl"]),
                           ("url", "file://" + corpora["jsonl"])):
    run_cpd(input_file, num_workers=2, shard_size_mb=0.02,
            output_dir=tmp_path / name)
  local, url = (directory_bytes(tmp_path / "local"),
                directory_bytes(tmp_path / "url"))
  assert len(local) > 3
  assert {n: v for n, v in local.items() if n.endswith(".tfrecord")} == {
      n: v for n, v in url.items() if n.endswith(".tfrecord")}


# ---------------------------------------------------------- bad input ----


@pytest.mark.parametrize("sharded", [False, True])
def test_bad_input_jsonl_line_not_json(tmp_path, sharded):
  path = tmp_path / "bad.jsonl"
  path.write_text('{"text": "fine."}\n{"text": "also fine."}\n{"text": \n',
                  encoding="utf-8")
  out = ({"output_dir": tmp_path / "out"} if sharded else
         {"output_file": tmp_path / "out.tfrecord"})
  assert_refused(str(path), str(path), "line 3", "not JSON", **out)
  # No shard was complete: not even the output directory is left.
  assert sorted(os.listdir(str(tmp_path))) == ["bad.jsonl"]


def test_bad_input_missing_text_field_names_the_fields(tmp_path):
  path = write_jsonl(tmp_path / "c.jsonl", ["One. Two."], text_field="body")
  assert_refused(path, path, "line 1", "'text'", "body, id", "--text_field",
                 output_file=tmp_path / "o.tfrecord")
  table = tmp_path / "c.parquet"
  pq.write_table(pa.table({"body": ["One. Two."]}), str(table))
  assert_refused(str(table), str(table), "no column 'text'", "body",
                 "--text_field", output_dir=tmp_path / "out")
  # --text_field names the right one.
  run_cpd(path, text_field="body", output_file=tmp_path / "o.tfrecord")
  assert os.path.getsize(str(tmp_path / "o.tfrecord")) > 0


@pytest.mark.slow
def test_program_prints_a_bad_text_field_as_one_error_line(tmp_path):
  path = write_jsonl(tmp_path / "c.jsonl", ["One. Two."], text_field="body")
  assert_one_error_line(
      run_program(cpd_args(path, output_file=tmp_path / "o.tfrecord")),
      path, "line 1", "'text'", "body, id", "--text_field")


def test_bad_input_unknown_format_and_missing_fsspec_package(tmp_path):
  assert_refused(SAMPLE_CORPUS, "--input_format=xml",
                 "auto, text, jsonl, parquet", input_format="xml",
                 output_dir=tmp_path / "out")
  assert_refused("s3://some-bucket/corpus/*.jsonl",
                 "s3://some-bucket/corpus/*.jsonl", "s3fs",
                 output_dir=tmp_path / "out")
