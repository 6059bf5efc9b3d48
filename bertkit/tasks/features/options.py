"""What extract_features.py is told."""

import dataclasses
from typing import Optional

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.common.option_fields import AT_LEAST_ONE, REQUIRED, option
from bertkit.data import shared_options

# --pooling: sentence-transformers' rules, or "model", the rule a
# sentence-transformers --init_checkpoint names (features/pooling.py).
POOLING_RULES = ("cls", "mean", "max")
POOLING_FROM_MODEL = "model"
POOLINGS = POOLING_RULES + (POOLING_FROM_MODEL,)
# Upstream's --layers: the last four encoder layers.
UPSTREAM_LAYERS = "-1,-2,-3,-4"
# The suffixes --output_file may have with --pooling, and what each writes.
EMBEDDING_SUFFIXES = (".npy", ".jsonl")


def parse_layers(text):
  """--layers' comma-separated layer indexes, as a tuple of ints.

  Raises:
    UserError: an item is not an integer.
  """
  indexes = []
  for item in text.split(","):
    try:
      indexes.append(int(item))
    except ValueError:
      raise UserError(
          "--layers=%s: %r is not an integer; expected comma-separated "
          "encoder layer indexes such as %s (negative: from the last)" % (
              text, item, UPSTREAM_LAYERS)) from None
  return tuple(indexes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FeatureExtractionOptions(options.ModelFiles,
                               shared_options.CorpusFormat):
  """What extract_features.py is told: upstream's flags (TPU ones dropped),
  sentence pooling, and the replicas of one process that predict."""
  input_file: str = option(
      REQUIRED, "One example per line, 'text_a ||| text_b' for a pair; also "
      "JSON lines or Parquet (--input_format), several files or globs, "
      "comma-separated.")
  output_file: str = option(
      REQUIRED, "JSON lines of token features; with --pooling, .npy or "
      ".jsonl sentence vectors.")
  init_checkpoint: str = option(
      REQUIRED, "The model: a checkpoint prefix, a training output "
      "directory, Google's model directory or a Hugging Face (or "
      "sentence-transformers) directory.")
  layers: Optional[str] = option(
      None, "Encoder layers to output, comma-separated; negative count from "
      "the last. With --pooling: the one layer pooled.",
      unset="%s (upstream's); with --pooling, -1" % UPSTREAM_LAYERS)
  max_seq_length: Optional[int] = options.max_seq_length_option(
      None, low=3, help_text="Sequence length S after WordPiece "
      "tokenization: longer lines are truncated.",
      unset="a sentence-transformers directory's max_seq_length, else 128")
  batch_size: int = option(32, "Batch size for predictions, over all "
                           "replicas.", **AT_LEAST_ONE)
  pooling: Optional[str] = option(
      None, "Write one sentence vector per line: the [CLS] vector, the mean "
      "or the maximum over the real tokens, or 'model': a "
      "sentence-transformers directory's rule.", choices=POOLINGS,
      unset="none: token features")
  normalize: Optional[bool] = option(
      None, "With --pooling: divide each vector by its L2 norm.",
      unset="as a sentence-transformers directory does (a Normalize "
      "module), else not")
  distribution: options.DistributionOptions = options.DistributionOptions()
  precision: options.Bfloat16Options = options.Bfloat16Options()

  def __post_init__(self):
    option_fields.check_fields(self)
    if self.layers is not None:
      parse_layers(self.layers)
    if self.pooling is None:
      if self.normalize is not None:
        raise UserError("--normalize applies to sentence vectors; give "
                        "--pooling=%s with it" % "|".join(POOLINGS))
      return
    if not self.output_file.endswith(EMBEDDING_SUFFIXES):
      raise UserError(
          "--output_file %s: with --pooling the sentence vectors are written "
          "as .npy (float32 [lines, hidden size]) or .jsonl (one JSON line "
          "per input line); expected a name ending in .npy or .jsonl" %
          self.output_file)
    if self.layers is not None and len(parse_layers(self.layers)) != 1:
      raise UserError(
          "--layers=%s names %d layers, but --pooling pools one; name one "
          "layer (default: the last, -1)" % (
              self.layers, len(parse_layers(self.layers))))

  @property
  def layer_indexes(self):
    """The encoder layers to output, as given or by default."""
    if self.layers is not None:
      return parse_layers(self.layers)
    return (-1,) if self.pooling else parse_layers(UPSTREAM_LAYERS)
