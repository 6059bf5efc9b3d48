# coding=utf-8
"""What a data-creation run is told: create_pretraining_data's flags, typed.

The program builds one `CreationOptions` from its flags; everything below
it (faithful mode, sharded_mode and its engines) takes that value or plain
values from it, never a flag object. Every range rule of those values is
here, checked when the options are built, before anything is read or
written.
"""

import dataclasses
from typing import Optional

from bertkit.common import errors
from bertkit.common import options as common_options
from bertkit.data import corpus_input
from bertkit.data import pretraining_instances

@dataclasses.dataclass(frozen=True)
class CreationOptions:
  """One run of create_pretraining_data, as its flags ask (checked).

  Defaults are the flags' defaults. Building one checks every value
  (`check`): an instance is always usable.

  Attributes:
    input_file: comma-separated files, globs, directories (sharded mode) or
      URLs.
    vocab_file: the WordPiece vocab.
    output_file: faithful mode: comma-separated output files; sharded mode:
      the shards' prefix (without `output_dir`).
    input_format: "auto" (by file name), "text", "jsonl" or "parquet".
    text_field: the JSON field / Parquet column holding a document.
    do_lower_case: lower-case the text (uncased models).
    tokenizer_backend: "fast" or "python" (same tokens).
    max_seq_length: tokens per instance, [CLS] and [SEP]s included.
    masked_lm_prob: fraction of an instance's tokens to mask.
    max_predictions_per_seq: cap on masked tokens per instance.
    do_whole_word_mask: mask all wordpieces of a word together.
    random_seed: faithful mode: the seed of the one `random.Random` behind
      every choice; sharded mode: the base of every shard's seed.
    dupe_factor: passes over the documents, each masked differently; None:
      `num_passes` picks by `masking`.
    masking: pretraining_instances.STATIC or DYNAMIC.
    next_sentence_prediction: segment pairs with next-sentence labels, or
      RoBERTa's FULL-SENTENCES.
    short_seq_prob: chance a document aims for a random shorter length.
    pack_sequences: pack the instances into rows of max_seq_length.
    max_sequences_per_pack: with pack_sequences, the most sequences a row.
    num_workers: sharded mode's local worker processes (None: one per core).
    dask_scheduler: tcp://HOST:PORT of a Dask scheduler, or None.
    output_dir: sharded mode's directory for part-SSSSS-of-NNNNN.tfrecord.
    shard_size_mb: the largest input size of a shard, in MB (1e6 bytes).
    resume: sharded mode: skip shards whose output file exists.
  """
  input_file: str
  vocab_file: str
  output_file: Optional[str] = None
  input_format: str = "auto"
  text_field: str = corpus_input.DEFAULT_TEXT_FIELD
  do_lower_case: bool = True
  tokenizer_backend: str = "fast"
  max_seq_length: int = 128
  masked_lm_prob: float = common_options.MASKED_LM_PROB
  max_predictions_per_seq: int = common_options.MAX_PREDICTIONS_PER_SEQ
  do_whole_word_mask: bool = False
  random_seed: int = 12345
  dupe_factor: Optional[int] = None
  masking: str = pretraining_instances.STATIC
  next_sentence_prediction: bool = True
  short_seq_prob: float = 0.1
  pack_sequences: bool = False
  max_sequences_per_pack: int = common_options.ranged(
      3, **common_options.AT_LEAST_ONE)
  num_workers: Optional[int] = common_options.ranged(
      None, **common_options.AT_LEAST_ONE)
  dask_scheduler: Optional[str] = None
  output_dir: Optional[str] = None
  shard_size_mb: float = common_options.ranged(16.0,
                                               **common_options.POSITIVE)
  resume: bool = True

  def __post_init__(self):
    check(self)

  @property
  def sharded(self):
    """Whether the run is sharded mode (any of its flags given)."""
    return (self.num_workers is not None or self.output_dir is not None or
            self.dask_scheduler is not None)

  @property
  def corpus(self):
    """The `corpus_input.Corpus` to read."""
    return corpus_input.Corpus(self.input_file, self.input_format,
                               self.text_field)

  @property
  def params(self):
    """The `pretraining_instances.InstanceParams` of the instances."""
    return pretraining_instances.InstanceParams(
        max_seq_length=self.max_seq_length,
        short_seq_prob=self.short_seq_prob,
        masked_lm_prob=self.masked_lm_prob,
        max_predictions_per_seq=self.max_predictions_per_seq,
        do_whole_word_mask=self.do_whole_word_mask, masking=self.masking,
        next_sentence_prediction=self.next_sentence_prediction)

  @property
  def num_passes(self):
    """--dupe_factor, or its default: upstream's 10 with static masks, 1
    with dynamic ones (training draws new masks every epoch)."""
    if self.dupe_factor is not None:
      return self.dupe_factor
    return 1 if self.masking == pretraining_instances.DYNAMIC else 10

  @property
  def pack_limit(self):
    """The most sequences a packed row holds, or None: unpacked records."""
    return self.max_sequences_per_pack if self.pack_sequences else None


def check(options):
  """Every range rule of the options, before any work is done.

  Raises:
    errors.UserError: one line naming the first bad flag (`--name=value`)
      and what it expects.
  """
  # Every float finite (NaN fails every comparison, inf passes "> 0"), and
  # the ranges written beside the fields.
  common_options.check_fields(options)
  pretraining_instances.validate_params(options.params, options.num_passes)
  if options.pack_sequences and not options.next_sentence_prediction:
    raise errors.UserError(
        "--pack_sequences with --next_sentence_prediction=false: its "
        "sequences already fill --max_seq_length, there is nothing to pack; "
        "drop --pack_sequences")
  if options.dask_scheduler is not None:
    check_dask_address(options.dask_scheduler)


def check_dask_address(address):
  """Refuses a --dask_scheduler that is not a TCP address with a port.

  Checked before connecting: distributed's Client, given such an address,
  fails only after starting, and then spends 20 s and a traceback closing
  at exit.

  Args:
    address: the flag's value: tcp://HOST:PORT (or HOST:PORT).

  Raises:
    errors.UserError: another protocol, no host, or no port number.
  """
  expected = "expected the address `dask scheduler` prints, tcp://HOST:PORT"
  scheme, has_scheme, location = address.partition("://")
  if has_scheme and scheme != "tcp":
    raise errors.UserError(
        "--dask_scheduler=%s: a Dask scheduler does not speak %s://; %s" % (
            address, scheme, expected))
  host, has_port, port = (location if has_scheme else address).rpartition(":")
  if not has_port or not host:
    raise errors.UserError("--dask_scheduler=%r has no %s; %s" % (
        address, "port" if host or not has_port else "host", expected))
  if not port.isdigit() or not 0 < int(port) < 65536:
    raise errors.UserError(
        "--dask_scheduler=%s: the port %r is not a number from 1 to 65535; "
        "%s" % (address, port, expected))
