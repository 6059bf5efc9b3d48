"""Options several programs share below the engine: how a corpus is read
(create_vocab, create_pretraining_data, extract_features) and how masks are
drawn (create_pretraining_data, run_pretraining). Each is declared once,
with its flag (common/option_fields.py)."""

import dataclasses

from bertkit.common import options
from bertkit.common.option_fields import AT_LEAST_ONE, option
from bertkit.data import corpus_input


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusFormat:
  """How the input files hold their text (corpus_input.Corpus)."""
  input_format: str = option(
      "auto", "auto: by file name (.jsonl/.ndjson[.gz|.zst]: jsonl, "
      ".parquet: parquet, else text). text: lines of text (a corpus: one "
      "sentence per line, a blank line between documents). jsonl: one JSON "
      "object per line, its text in --text_field. parquet: one row each, "
      "its text in the column --text_field. A corpus' JSONL/Parquet "
      "documents are split into sentences by blingfire.",
      choices=("auto",) + corpus_input.FORMATS)
  text_field: str = option(
      corpus_input.DEFAULT_TEXT_FIELD, "The JSON field (jsonl) or column "
      "(parquet) holding the text.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MaskingRate:
  """How many of a sequence's tokens are masked, and which together."""
  masked_lm_prob: float = option(options.MASKED_LM_PROB,
                                 "Fraction of a sequence's tokens masked.")
  max_predictions_per_seq: int = option(
      options.MAX_PREDICTIONS_PER_SEQ, "Masked positions per sequence (P): "
      "the records' slots, at most this many masked.", **AT_LEAST_ONE)
  do_whole_word_mask: bool = option(
      False, "Mask all WordPieces of a word together rather than each "
      "WordPiece on its own.")
