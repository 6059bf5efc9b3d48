# coding=utf-8
"""Token features or sentence vectors of a BERT model, one per input line.

Upstream's flags and output: each line of --input_file (`text_a ||| text_b`
for a pair) becomes one JSON line of --output_file,

  {"linex_index": 0, "features": [{"token": "[CLS]", "layers": [
      {"index": -1, "values": [0.123456, ...]}, ...]}, ...]}

holding, for each token the model saw ([CLS] and [SEP] included), the
outputs of the encoder layers --layers (default -1,-2,-3,-4), each value
rounded to 6 decimals. TPU flags are dropped.

Beyond upstream:
  * --init_checkpoint is any checkpoint the toolkit reads: a checkpoint
    prefix, a training output directory, Google's model directory or a
    Hugging Face directory (then --bert_config_file, --vocab_file and
    --do_lower_case may be left out: what the directory holds stands for
    them, and a flag given must agree with it);
  * --pooling=cls|mean|max writes one sentence vector per line instead
    (.npy float32 [lines, H] or .jsonl, by --output_file's suffix), masked
    as sentence-transformers masks padding; --normalize divides each by its
    L2 norm. --pooling=model takes the rule of a sentence-transformers
    directory (its modules.json and 1_Pooling/config.json), whose
    normalisation and max_seq_length are also the defaults;
  * --cpu_replicas / --num_gpus / --multi_gpu and --distribution_strategy
    (mirrored, central_storage, one_device): the replicas predict each batch
    together, the output in input order;
  * --use_bf16: bfloat16 compute through oneDNN's graph rewrite (fast on
    CPUs with avx512_bf16 or AMX; the log's `precision:` line says which);
  * input as text, JSON lines or Parquet (--input_format, --text_field), as
    create_pretraining_data.py reads them: one record (line, JSON line, row)
    per example;
  * progress lines (lines done, lines/sec, ETA) every 10 seconds;
  * bad input is one `error:` line and exit code 2, and --output_file
    appears only once complete.

Its options (flags): bertkit/tasks/features/options.py; what it does:
bertkit/tasks/features/extraction.py and pooling.py. docs/extract_features.md
has the details.
"""

from bertkit.common import programs
from bertkit.data import extraction_input
from bertkit.tasks.features.options import FeatureExtractionOptions


def run(opts):
  """Writes the token features or sentence vectors `opts`
  (FeatureExtractionOptions) ask for."""
  examples = extraction_input.read_checked(opts)  # before TensorFlow
  from bertkit.tasks.features import extraction  # pylint: disable=g-import-not-at-top
  extraction.run(opts, examples)


if __name__ == "__main__":
  programs.main(FeatureExtractionOptions, run)
