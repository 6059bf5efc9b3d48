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
from bertkit.common import option_fields
from bertkit.common.option_fields import (AT_LEAST_ONE, POSITIVE, REQUIRED,
                                          option)
from bertkit.data import corpus_input
from bertkit.data import pretraining_instances
from bertkit.data import shared_options


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreationOptions(shared_options.CorpusFormat, shared_options.MaskingRate):
  """One run of create_pretraining_data, as its flags ask (checked).

  Building one checks every value (`check`): an instance is always usable.
  """
  input_file: str = option(
      REQUIRED, "Input raw text file (or comma-separated list of files). "
      "Each item may be a glob, a directory (sharded mode) or a URL fsspec "
      "serves (s3://, gs://, hdfs://, ... with the matching fsspec package "
      "installed).")
  vocab_file: str = option(REQUIRED, "The WordPiece vocab.txt of the model "
                           "the records are for.")
  output_file: Optional[str] = option(
      None, "Output TF example file (or comma-separated list of files); "
      "sharded mode: the shards' prefix.", unset="none: sharded mode's "
      "part-SSSSS-of-NNNNN.tfrecord in --output_dir")
  do_lower_case: bool = option(
      True, "Lower-case and strip accents: True for uncased models, False "
      "for cased ones. The vocab, the records and the model must agree.")
  tokenizer_backend: str = option(
      "fast", "fast: bertkit/data/fast_tokenization.py. python: "
      "tokenization.py (upstream's code). Same tokens, so the same records.",
      choices=("fast", "python"))
  max_seq_length: int = option(128, "Sequence length S: tokens per instance, "
                               "[CLS] and [SEP]s included.")
  random_seed: int = option(12345, "Random seed for data generation: "
                            "faithful mode's one random.Random; sharded "
                            "mode's base of every shard's seed.")
  dupe_factor: Optional[int] = option(
      None, "Number of times to duplicate the input data (with different "
      "masks).", unset="10 (upstream's) with --masking=static, 1 with "
      "--masking=dynamic")
  masking: str = option(
      pretraining_instances.STATIC, "static: upstream's records, masks "
      "drawn here once per record. dynamic: records without masks "
      "(input_ids, input_mask, segment_ids, next_sentence_labels), of the "
      "same token pairs; run_pretraining.py draws new masks every epoch.",
      choices=pretraining_instances.MASKING_CHOICES)
  next_sentence_prediction: bool = option(
      True, "true: upstream's segment pairs with next-sentence labels. "
      "false: RoBERTa's FULL-SENTENCES: each record is one segment of "
      "consecutive sentences filling --max_seq_length, across documents (an "
      "extra [SEP] between two), without the next_sentence_labels feature; "
      "run_pretraining.py then trains the masked LM alone. --short_seq_prob "
      "does not apply to it.")
  short_seq_prob: float = option(
      0.1, "Probability of creating sequences which are shorter than the "
      "maximum length.")
  pack_sequences: bool = option(
      False, "Pack the instances into rows of --max_seq_length, at most "
      "--max_sequences_per_pack to a row (bertkit/data/packing.py: "
      "shortest-pack-first histogram packing), so that training computes "
      "little padding. The records then also say which sequence each token "
      "belongs to, its position in it, and each sequence's [CLS] index and "
      "next-sentence label; run_pretraining.py recognises them. With "
      "--masking=dynamic the rows hold no masks and run_pretraining.py "
      "draws each sequence's masks.")
  max_sequences_per_pack: int = option(
      3, "With --pack_sequences: the most sequences in one row.",
      **AT_LEAST_ONE)
  num_workers: Optional[int] = option(
      None, "Sharded mode (see bertkit/data/sharded_mode.py): number of local "
      "worker processes.", unset="one per core when --output_dir is given",
      **AT_LEAST_ONE)
  dask_scheduler: Optional[str] = option(
      None, "Sharded mode on a Dask cluster: the scheduler's address, "
      "tcp://HOST:PORT (as `dask scheduler` prints it). Its workers must "
      "import this repository, read --input_file and write the output "
      "directory at the same paths.", unset="no Dask cluster")
  output_dir: Optional[str] = option(
      None, "Sharded mode: directory for the shard files "
      "part-SSSSS-of-NNNNN.tfrecord (created if missing). Without it, "
      "--output_file is the shards' prefix.", unset="faithful mode, unless "
      "--num_workers or --dask_scheduler")
  shard_size_mb: float = option(
      16.0, "Sharded mode: the largest input MB of a shard. Shards are "
      "planned from the corpus size (about 32 of them, none under 0.25 MB); "
      "small files are packed together, larger ones split at document "
      "boundaries. Worker memory grows with the shard size; next-sentence "
      "negatives come from the same shard.", **POSITIVE)
  resume: bool = option(
      True, "Sharded mode: skip shards whose output file already exists "
      "(files get their final name only once complete). --noresume rewrites "
      "every shard.")

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
  option_fields.check_fields(options)
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
