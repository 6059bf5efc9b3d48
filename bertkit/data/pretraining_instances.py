# coding=utf-8
"""Upstream's pretraining instances, made fast; the pipeline both modes share.

create_pretraining_data.py's faithful mode (the whole corpus, one seed) and
sharded_mode.py (each shard on its own, its own seed) run the same
steps on a list of tokenized documents:

  documents (token codes) -> `InstanceMaker.make_records` (upstream's
  algorithm, one serialized Example per instance, spilled to a scratch file)
  -> `InstanceMaker.shuffled_order` (upstream's final shuffle) -> TFRecord
  file(s), round-robin, each under a temporary name until complete.

Nothing here imports TensorFlow.
"""

import contextlib
import dataclasses
import os
import tempfile
import uuid

from absl import logging

from bertkit.common import atomic_io
from bertkit.common import errors
from bertkit.data import fast_tokenization
from bertkit.data import packing
from bertkit.data import pretraining_records
from bertkit.data import tfrecord_files
import tokenization

# [CLS] + at least one token of A + [SEP] + at least one of B + [SEP].
MIN_SEQ_LENGTH = 5
# Far above any BERT position table; a larger value is almost surely a typo.
MAX_SEQ_LENGTH = 8192

# Tokens the records are built from: every instance uses [CLS] and [SEP],
# masking uses [MASK], and WordPiece emits [UNK] for uncoverable words.
REQUIRED_VOCAB_TOKENS = (tokenization.CLS_TOKEN, tokenization.SEP_TOKEN,
                         tokenization.MASK_TOKEN, tokenization.UNK_TOKEN)

# create_pretraining_data.py --masking: masks frozen into the records
# (upstream), or none written and drawn in run_pretraining.py's input
# pipeline, every epoch.
STATIC = "static"
DYNAMIC = "dynamic"
# run_pretraining.py --mask_rule, how drawn masks choose and replace tokens:
# upstream's fixed count per sequence, 80 % [MASK] / 10 % kept / 10 % a
# random token (BERT's, and create_pretraining_data's static masks);
# Hugging Face's collator's independent draw per token, 80/10/10; or
# upstream's count with every chosen token [MASK] (no kept or random ones).
UPSTREAM_MASKS = "upstream"
PER_TOKEN_MASKS = "per_token"
MASK_TOKEN_ONLY = "mask_only"
MASK_RULES = (UPSTREAM_MASKS, PER_TOKEN_MASKS, MASK_TOKEN_ONLY)
MASKING_CHOICES = (STATIC, DYNAMIC)

# Records logged in full at the start of the output, as upstream does.
NUM_EXAMPLES_TO_LOG = 20


@dataclasses.dataclass(frozen=True)
class InstanceParams:
  """How instances are cut and masked (flag values).

  Attributes:
    max_seq_length: tokens per instance, [CLS] and [SEP]s included.
    short_seq_prob: chance a document aims for a random shorter length.
    masked_lm_prob: fraction of an instance's tokens to mask.
    max_predictions_per_seq: cap on masked tokens per instance.
    do_whole_word_mask: mask all wordpieces of a word together.
    masking: STATIC writes `pretraining_records.MASKED` records; DYNAMIC
      writes `pretraining_records.UNMASKED` ones, of the same token pairs
      (the masks are still drawn, so that every later choice sees the same
      random numbers, and then left out).
    next_sentence_prediction: True: upstream's segment pairs with their
      next-sentence labels. False: RoBERTa's FULL-SENTENCES, single segments
      filled with consecutive sentences (`InstanceMaker`), written as the
      `pretraining_records` kinds without next-sentence labels;
      short_seq_prob is then unused.
  """
  max_seq_length: int
  short_seq_prob: float
  masked_lm_prob: float
  max_predictions_per_seq: int
  do_whole_word_mask: bool
  masking: str = STATIC
  next_sentence_prediction: bool = True


def masked_lm_prob_out_of_range(masked_lm_prob):
  """The error message for a --masked_lm_prob outside (0, 1], or None.

  The one rule for the records' masks and for masks drawn in training; 1.0,
  every candidate up to --max_predictions_per_seq, is upstream's too.
  """
  if 0.0 < masked_lm_prob <= 1.0:
    return None
  return ("--masked_lm_prob=%r is out of range; expected 0 < masked_lm_prob "
          "<= 1" % masked_lm_prob)


def validate_params(params, dupe_factor):
  """Checks flag values before any work is done.

  Args:
    params: an `InstanceParams`.
    dupe_factor: the --dupe_factor value.

  Raises:
    errors.UserError: a value is outside the range the algorithm supports.
  """
  if not MIN_SEQ_LENGTH <= params.max_seq_length <= MAX_SEQ_LENGTH:
    raise errors.UserError(
        "--max_seq_length=%d is out of range; expected %d <= max_seq_length "
        "<= %d" % (params.max_seq_length, MIN_SEQ_LENGTH, MAX_SEQ_LENGTH))
  problem = masked_lm_prob_out_of_range(params.masked_lm_prob)
  if problem:
    raise errors.UserError(problem)
  if not 0.0 <= params.short_seq_prob <= 1.0:
    raise errors.UserError(
        "--short_seq_prob=%r is out of range; expected 0 <= short_seq_prob "
        "<= 1" % params.short_seq_prob)
  if params.max_predictions_per_seq < 1:
    raise errors.UserError(
        "--max_predictions_per_seq=%d must be at least 1"
        % params.max_predictions_per_seq)
  if dupe_factor < 1:
    raise errors.UserError("--dupe_factor=%d must be at least 1" % dupe_factor)
  if params.masking not in MASKING_CHOICES:
    raise errors.UserError("--masking=%s is not one of %s" %
                           (params.masking, ", ".join(MASKING_CHOICES)))


def load_checked_vocab(vocab_file):
  """Reads a vocab file and checks it has the special tokens.

  Returns:
    The token -> id mapping (`tokenization.load_vocab`).

  Raises:
    errors.UserError: the file is missing, empty, not UTF-8, or lacks one
      of REQUIRED_VOCAB_TOKENS.
  """
  vocab = tokenization.load_vocab(vocab_file)
  missing = [t for t in REQUIRED_VOCAB_TOKENS if t not in vocab]
  if missing:
    raise errors.UserError(
        "vocab file %s lacks the special token(s) %s; a BERT vocab needs %s"
        % (vocab_file, " ".join(missing), " ".join(REQUIRED_VOCAB_TOKENS)))
  return vocab


class _PythonIdTokenizer(object):
  """tokenization.FullTokenizer's steps (upstream's code), returning ids."""

  def __init__(self, vocab, do_lower_case):
    self._vocab = vocab
    self._basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    self._wordpiece = tokenization.WordpieceTokenizer(vocab=vocab)

  def tokenize_to_ids(self, text):
    vocab = self._vocab
    return [vocab[piece] for word in self._basic.tokenize(text)
            for piece in self._wordpiece.tokenize(word)]


def make_tokenizer(vocab, do_lower_case, backend):
  """A tokenizer with `tokenize_to_ids(text) -> list of ids`.

  Args:
    vocab: token -> id mapping.
    do_lower_case: the --do_lower_case value.
    backend: "fast" (fast_tokenization.FastTokenizer) or "python"
      (tokenization.py's BasicTokenizer + WordpieceTokenizer: upstream's
      code); both give the same ids.
  """
  if backend == "fast":
    return fast_tokenization.FastTokenizer(vocab, do_lower_case=do_lower_case)
  return _PythonIdTokenizer(vocab, do_lower_case)


def make_encoder(vocab, params):
  """The `pretraining_records.ExampleEncoder` for a vocab and `params`."""
  return pretraining_records.ExampleEncoder(
      max(vocab.values()) + 1, params.max_seq_length,
      params.max_predictions_per_seq, params.next_sentence_prediction)


def _concatenate(segments):
  """The tokens of `segments` in one new list."""
  tokens = []
  for segment in segments:
    tokens += segment
  return tokens


class InstanceMaker(object):
  """Upstream's instance algorithm on token codes, straight to record bytes.

  Draws from `rng` in exactly the order of upstream's
  `create_training_instances` and the functions it calls (the tests check
  that the records are identical to upstream's golden output and to a
  transcription of upstream's code), but inlines `random.Random.shuffle` /
  `randint` (same draws: both reduce to `getrandbits` with rejection),
  handles tokens as their varint encodings (`encoder.token_codes[id]`) and
  serializes Examples directly, instead of building `TrainingInstance` and
  `tf.train.Example` objects: several times faster, and an instance is
  ~0.5 KB of bytes instead of ~10 KB of Python objects.

  Without next-sentence prediction (`params.next_sentence_prediction`
  False) the instances are RoBERTa's FULL-SENTENCES instead (Liu et al.
  2019): the documents, shuffled as upstream shuffles them, are read as one
  stream of sentences, and each instance is [CLS], as many consecutive
  sentences as fit, [SEP]; it crosses document boundaries, with an extra
  [SEP] between two documents. A sentence longer than an instance is cut
  into instance-sized pieces; nothing of the text is left out. Masks follow
  upstream's rule, never on a [SEP].

  Args:
    rng: the `random.Random` that drives every choice.
    params: an `InstanceParams`.
    vocab: token -> id mapping (the special tokens' ids; random
      replacements are drawn over its entries in order, as upstream draws
      from `list(vocab.keys())`).
    encoder: a `pretraining_records.ExampleEncoder` for `params`.
  """

  def __init__(self, rng, params, vocab, encoder):
    self._random = rng.random
    self._getrandbits = rng.getrandbits
    self._params = params
    self._unmasked = params.masking == DYNAMIC
    self._max_num_tokens = params.max_seq_length - 3
    # FULL-SENTENCES: the tokens between [CLS] and the final [SEP].
    self._capacity = params.max_seq_length - 2
    self._encoder = encoder
    codes = encoder.token_codes
    self._cls = codes[vocab[tokenization.CLS_TOKEN]]
    self._sep = codes[vocab[tokenization.SEP_TOKEN]]
    self._mask = codes[vocab[tokenization.MASK_TOKEN]]
    self._replacements = [codes[i] for i in vocab.values()]
    self._continuations = frozenset(
        codes[i] for token, i in vocab.items() if token.startswith("##"))
    # Bits of a draw in [0, i], for the inlined shuffle of candidates.
    self._draw_bits = [(i + 1).bit_length()
                       for i in range(params.max_seq_length)]

  def _below(self, n):
    """As `random.Random._randbelow(n)`: a draw in [0, n)."""
    getrandbits = self._getrandbits
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
      r = getrandbits(k)
    return r

  def _shuffle(self, items):
    """As `random.Random.shuffle(items)`: same draws, same result."""
    getrandbits = self._getrandbits
    for i in range(len(items) - 1, 0, -1):
      n = i + 1
      k = n.bit_length()
      j = getrandbits(k)
      while j >= n:
        j = getrandbits(k)
      items[i], items[j] = items[j], items[i]

  def make_records(self, documents, dupe_factor, sink, report, pass_work=0):
    """All records, before `create_training_instances`' final shuffle.

    Call `shuffled_order` next for the order in which to write them.

    Args:
      documents: lists of segments, lists of token codes.
      dupe_factor: passes over the documents.
      sink: called with each serialized tf.train.Example.
      report: called as report(work, num_instances) after each document.
      pass_work: the work units (see creation_progress.Progress) one pass
        stands for, spread over its documents.

    Returns:
      The number of records.
    """
    documents = list(documents)
    self._shuffle(documents)
    num_records = 0
    records = []
    num_documents = len(documents)
    for _ in range(dupe_factor):
      pending = []
      for document_index in range(num_documents):
        if self._params.next_sentence_prediction:
          self._document_records(documents, document_index, records)
        else:
          self._full_sentences(documents[document_index], pending, records)
          if document_index == num_documents - 1 and pending:
            records.append(self._single_segment_record(pending))
        for record in records:
          sink(record)
        num_records += len(records)
        # The documents' shares of pass_work add up to it exactly.
        report(pass_work * (document_index + 1) // num_documents -
               pass_work * document_index // num_documents, len(records))
        records.clear()
    return num_records

  def shuffled_order(self, num_records):
    """The final shuffle of `create_training_instances` as a permutation.

    Returns:
      Indices into the records in `make_records` order: upstream's i-th
      record is the one at index order[i].
    """
    order = list(range(num_records))
    self._shuffle(order)
    return order

  def _document_records(self, documents, document_index, records):
    """As `create_instances_from_document`, appending serialized records."""
    random = self._random
    document = documents[document_index]
    max_num_tokens = self._max_num_tokens
    target_seq_length = max_num_tokens
    if random() < self._params.short_seq_prob:
      target_seq_length = 2 + self._below(max_num_tokens - 1)
    chunk = []
    chunk_length = 0
    i = 0
    while i < len(document):
      chunk.append(document[i])
      chunk_length += len(document[i])
      if i == len(document) - 1 or chunk_length >= target_seq_length:
        a_end = 1 if len(chunk) == 1 else 1 + self._below(len(chunk) - 1)
        tokens_a = _concatenate(chunk[:a_end])
        is_random_next = len(chunk) == 1 or random() < 0.5
        if is_random_next:
          tokens_b = self._random_next(documents, document_index,
                                       target_seq_length - len(tokens_a))
          i -= len(chunk) - a_end
        else:
          tokens_b = _concatenate(chunk[a_end:])
        records.append(self._record(tokens_a, tokens_b, is_random_next))
        chunk = []
        chunk_length = 0
      i += 1

  def _random_next(self, documents, document_index, target_b_length):
    """As `_pick_random_next`."""
    for _ in range(10):
      random_document_index = self._below(len(documents))
      if random_document_index != document_index:
        break
    random_document = documents[random_document_index]
    tokens_b = []
    for segment in random_document[self._below(len(random_document)):]:
      tokens_b.extend(segment)
      if len(tokens_b) >= target_b_length:
        break
    return tokens_b

  def _record(self, tokens_a, tokens_b, is_random_next):
    """As `_make_instance` then `instance_to_tf_example`, serialized."""
    random = self._random
    # truncate_seq_pair, on index ranges.
    a_start, a_end, b_start, b_end = 0, len(tokens_a), 0, len(tokens_b)
    while (a_end - a_start) + (b_end - b_start) > self._max_num_tokens:
      if a_end - a_start > b_end - b_start:
        if random() < 0.5:
          a_start += 1
        else:
          a_end -= 1
      elif random() < 0.5:
        b_start += 1
      else:
        b_end -= 1
    num_a = a_end - a_start
    tokens = [self._cls]
    tokens += tokens_a[a_start:a_end]
    tokens.append(self._sep)
    tokens += tokens_b[b_start:b_end]
    tokens.append(self._sep)
    candidates = list(range(1, num_a + 1))
    candidates.extend(range(num_a + 2, len(tokens) - 1))
    return self._masked_record(tokens, num_a, candidates, is_random_next)

  def _full_sentences(self, document, pending, records):
    """FULL-SENTENCES: appends the instances `document` completes.

    Args:
      document: a list of sentences (lists of token codes).
      pending: the tokens of the instance being filled, carried from one
        document to the next (and extended here).
      records: where the serialized records of complete instances go.
    """
    capacity = self._capacity
    separate = bool(pending)
    for sentence in document:
      for start in range(0, len(sentence), capacity):
        piece = sentence[start:start + capacity]
        if len(pending) + separate + len(piece) > capacity:
          records.append(self._single_segment_record(pending))
          pending.clear()
          separate = False
        if separate:
          pending.append(self._sep)
          separate = False
        pending.extend(piece)

  def _single_segment_record(self, body):
    """The record of [CLS] `body` [SEP], masked anywhere but on a [SEP]."""
    sep = self._sep
    tokens = [self._cls] + body + [sep]
    candidates = [i for i in range(1, len(tokens) - 1) if tokens[i] != sep]
    return self._masked_record(tokens, len(body), candidates, False)

  def _masked_record(self, tokens, num_a, candidates, is_random_next):
    """As the end of `_make_instance` then `instance_to_tf_example`.

    Args:
      tokens: the instance's token codes, [CLS] and [SEP]s included.
      num_a: tokens of its first segment (len(tokens) - 2: a single one).
      candidates: the positions masks may take, ascending.
      is_random_next: its next-sentence label.
    """
    random = self._random
    positions = self._masked_positions(tokens, candidates)
    if self._unmasked:
      self._draw_replacements(positions)
      return self._encoder.encode_unmasked(tokens, num_a, is_random_next)
    output = list(tokens)
    for position in positions:
      if random() < 0.8:
        output[position] = self._mask
      elif random() >= 0.5:
        output[position] = self._replacements[
            self._below(len(self._replacements))]
    positions.sort()
    return self._encoder.encode(output, num_a, positions,
                                [tokens[p] for p in positions],
                                is_random_next)

  def _draw_replacements(self, positions):
    """The draws of `_record`'s replacement loop, without using them."""
    random = self._random
    for _ in positions:
      if random() >= 0.8 and random() >= 0.5:
        self._below(len(self._replacements))

  def _masked_positions(self, tokens, candidates):
    """As `create_masked_lm_predictions`' choice: positions in draw order.

    Args:
      tokens: the instance's token codes.
      candidates: a new list of the positions masks may take, ascending
        (shuffled here).
    """
    params = self._params
    num_to_predict = min(params.max_predictions_per_seq,
                         max(1, int(round(len(tokens) *
                                          params.masked_lm_prob))))
    if params.do_whole_word_mask:
      return self._whole_word_positions(tokens, candidates, num_to_predict)
    # The hot loop: `self._shuffle(candidates)` inlined, with bit lengths
    # looked up. Each group is one position, so the first num_to_predict
    # positions after the shuffle are the chosen ones.
    getrandbits = self._getrandbits
    draw_bits = self._draw_bits
    for i in range(len(candidates) - 1, 0, -1):
      k = draw_bits[i]
      j = getrandbits(k)
      while j > i:
        j = getrandbits(k)
      candidates[i], candidates[j] = candidates[j], candidates[i]
    return candidates[:num_to_predict]

  def _whole_word_positions(self, tokens, candidates, num_to_predict):
    groups = []
    continuations = self._continuations
    for position in candidates:
      # As upstream, a "##" piece joins the previous word even across [SEP].
      if groups and tokens[position] in continuations:
        groups[-1].append(position)
      else:
        groups.append([position])
    self._shuffle(groups)
    positions = []
    for group in groups:
      if len(positions) >= num_to_predict:
        break
      if len(positions) + len(group) <= num_to_predict:
        positions.extend(group)
    return positions


def _scratch_path(output_path):
  """Where the unshuffled records wait: next to a local output."""
  if atomic_io.is_url(output_path):
    return os.path.join(tempfile.gettempdir(),
                        "pretraining-%s.unshuffled" % uuid.uuid4().hex[:8])
  return atomic_io.partial_name(output_path) + ".unshuffled"


def write_instances(documents, rng, vocab, params, dupe_factor, output_paths,
                    report, pass_work=0, log_example=None,
                    max_sequences_per_pack=None):
  """Upstream's instances of `documents`, written round-robin to files.

  Each output file is written under a temporary name and renamed once all
  are complete; on any exception (KeyboardInterrupt and SystemExit
  included) nothing appears under the final names. The unshuffled records
  wait in a scratch file next to the first output (removed at the end).

  Args:
    documents: a list of documents (lists of segments, lists of token codes
      of `make_encoder(vocab, params)`); emptied once the records are made,
      which lowers the peak memory while they are written.
    rng: the `random.Random` behind every choice.
    vocab: token -> id mapping.
    params: an `InstanceParams`.
    dupe_factor: passes over the documents.
    output_paths: final paths (local or URL); the i-th record goes to file
      i % len(output_paths).
    report: called as report(work, num_instances) (see
      creation_progress.Progress).
    pass_work: work units of one pass over the documents.
    log_example: if given, called with each of the first
      NUM_EXAMPLES_TO_LOG records in write order.
    max_sequences_per_pack: if given, the shuffled instances are packed
      (packing.py), at most this many to a row, and the rows are written.

  Returns:
    The number of records (rows) written.
  """
  maker = InstanceMaker(rng, params, vocab, make_encoder(vocab, params))
  with contextlib.ExitStack() as stack:
    # Entered first, so every file is complete before the first rename.
    tmp_paths = [stack.enter_context(atomic_io.atomic_path(path))
                 for path in output_paths]
    scratch = tfrecord_files.ScratchRecords(
        _scratch_path(output_paths[0]))
    stack.callback(scratch.close)
    maker.make_records(documents, dupe_factor, scratch.append, report,
                       pass_work=pass_work)
    documents.clear()
    order = maker.shuffled_order(len(scratch))
    if log_example is not None:
      for record in scratch.read_in_order(order[:NUM_EXAMPLES_TO_LOG]):
        log_example(record)
    if max_sequences_per_pack is None:
      for k, tmp in enumerate(tmp_paths):
        tfrecord_files.write_tfrecord_file(
            tmp, scratch.read_in_order(order[k::len(tmp_paths)]))
      return len(order)
    unmasked = params.masking == DYNAMIC
    mask_width = packing.masked_positions_per_row(
        params.max_seq_length, params.max_predictions_per_seq,
        params.masked_lm_prob, max_sequences_per_pack)
    rows, packing_report = packing.pack_records(
        scratch.read_in_order(order), params.max_seq_length,
        max_sequences_per_pack, None if unmasked else mask_width, rng)
    if unmasked:
      logging.info("%s; masks are drawn in training, up to %d per row "
                   "(train with --max_predictions_per_seq=%d, per "
                   "sequence)", packing.describe(packing_report), mask_width,
                   params.max_predictions_per_seq)
    else:
      logging.info("%s; rows hold up to %d masked positions (train with "
                   "--max_predictions_per_seq=%d)",
                   packing.describe(packing_report), mask_width, mask_width)
    for k, tmp in enumerate(tmp_paths):
      tfrecord_files.write_tfrecord_file(tmp, rows[k::len(tmp_paths)])
  return len(rows)
