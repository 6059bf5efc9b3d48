"""Masked-LM masks drawn in the tf.data pipeline (--masking, --mask_rule).

create_pretraining_data.py freezes one set of masks into each record and
repeats the corpus --dupe_factor times to vary them. Here the masks are
drawn as the records are read, by upstream's rule (--mask_rule=upstream):

  - candidates: every real token except [CLS] and [SEP] (never padding);
    with whole-word masking, a "##" piece joins the candidate before it;
  - num_to_predict = min(P, max(1, round(length * masked_lm_prob))), with
    length the sequence's real tokens and round() Python's (half to even);
  - the candidates (words) in a random order, taken while they fit;
  - each chosen position: 80 % [MASK], 10 % kept, 10 % a random id
    uniform over the vocabulary;
  - masked_lm_positions ascending, padded to P with weight 0.

--mask_rule=per_token chooses as Hugging Face's collator does: each
candidate on its own with probability masked_lm_prob (a row drawing more
than P keeps P of them); --mask_rule=mask_only replaces every chosen token
by [MASK].

The random numbers are stateless, keyed on (seed, stream, epoch, example),
the example being a fingerprint of its serialized record: an example's masks
do not depend on which replica, worker, rank or micro-batch reads it, nor on
the batch it lands in, and change from epoch to epoch. (Two byte-identical
records therefore get the same masks in the same epoch.)
"""

import dataclasses
import hashlib
import math
from typing import Tuple

import tensorflow.compat.v1 as tf

from bertkit.data import packing
from bertkit.data import pretraining_instances
import tokenization

# Streams of random numbers: eval masks never equal any training epoch's.
TRAIN_STREAM = 0
EVAL_STREAM = 1
# Eval masks use this seed whatever --tf_random_seed is, so that eval
# figures are comparable from run to run.
EVAL_SEED = 12345
# Training masks without --tf_random_seed (upstream's create_pretraining_data
# default --random_seed): fixed, so that a resumed run draws what the
# uninterrupted one would have.
DEFAULT_SEED = 12345


@dataclasses.dataclass(frozen=True)
class MaskingParams:
  """What the masks are drawn with.

  Attributes:
    max_seq_length: S.
    max_predictions_per_seq: P.
    masked_lm_prob: fraction of a sequence's tokens to mask.
    do_whole_word_mask: mask every wordpiece of a word together.
    vocab_size: random replacement ids are drawn from [0, vocab_size).
    cls_id: the id of [CLS].
    sep_id: the id of [SEP].
    mask_id: the id of [MASK].
    continuation_ids: ids of the "##" pieces (whole-word masking).
    mask_rule: one of pretraining_instances.MASK_RULES.
  """
  max_seq_length: int
  max_predictions_per_seq: int
  masked_lm_prob: float
  do_whole_word_mask: bool
  vocab_size: int
  cls_id: int
  sep_id: int
  mask_id: int
  continuation_ids: Tuple[int, ...]
  mask_rule: str = pretraining_instances.UPSTREAM_MASKS


def num_to_predict(length, max_predictions_per_seq, masked_lm_prob):
  """Upstream's number of masked positions for a sequence of `length` tokens.

  Python's round() rounds half to even, as tf.round does.
  """
  return min(max_predictions_per_seq,
             max(1, int(round(length * masked_lm_prob))))


def masking_params_from_vocab(vocab, max_seq_length, max_predictions_per_seq,
                              masked_lm_prob, do_whole_word_mask,
                              mask_rule=pretraining_instances.UPSTREAM_MASKS):
  """MaskingParams for a token -> id vocab (tokenization.load_vocab).

  Random replacements are drawn over the vocab file's entries, as upstream
  draws them from `list(vocab.keys())`.
  """
  return MaskingParams(
      max_seq_length=max_seq_length,
      max_predictions_per_seq=max_predictions_per_seq,
      masked_lm_prob=masked_lm_prob, do_whole_word_mask=do_whole_word_mask,
      vocab_size=len(vocab), cls_id=vocab[tokenization.CLS_TOKEN],
      sep_id=vocab[tokenization.SEP_TOKEN],
      mask_id=vocab[tokenization.MASK_TOKEN],
      continuation_ids=tuple(sorted(
          i for token, i in vocab.items() if token.startswith("##"))),
      mask_rule=mask_rule)


def _stream_constant(seed, stream):
  """A 64-bit signed int standing for (seed, stream) in an example's key."""
  digest = hashlib.sha256(b"%d/%d" % (seed, stream)).digest()
  return int.from_bytes(digest[:8], "little", signed=True)


def example_draws(seed, stream, epoch, record, max_seq_length):
  """The random numbers of one example's masks (stateless).

  The key is (fingerprint of the record XOR a constant of (seed, stream),
  epoch): nothing of the reader's sharding or batching enters it.

  Args:
    seed: int, the run's masking seed.
    stream: TRAIN_STREAM or EVAL_STREAM.
    epoch: int64 scalar tensor.
    record: the serialized record (string scalar tensor).
    max_seq_length: S.

  Returns:
    (uniforms float32 [3, S], random ids int32 [S] in [0, 2**31 - 1)): per
    position an ordering key, the [MASK] draw, the random-id draw, and a
    random id (reduced modulo the vocab size in `mask_batch`).
  """
  fingerprint = tf.bitcast(tf.fingerprint(tf.reshape(record, [1]))[0],
                           tf.int64)
  key = tf.stack([tf.bitwise.bitwise_xor(
      fingerprint, tf.constant(_stream_constant(seed, stream), tf.int64)),
                  tf.cast(epoch, tf.int64)])
  uniforms = tf.random.stateless_uniform([3, max_seq_length], key)
  random_ids = tf.random.stateless_uniform(
      [max_seq_length], tf.reverse(key, [0]), minval=0, maxval=2**31 - 1,
      dtype=tf.int32)
  return uniforms, random_ids


def restore_original_ids(features):
  """input_ids of masked records with their masked_lm_ids put back: [B, S].

  Padding predictions (weight 0) leave the token at their position alone.
  """
  seq_length = features["input_ids"].shape[-1]
  # [B, P, S]: which position each real prediction names.
  hits = tf.one_hot(features["masked_lm_positions"], seq_length,
                    dtype=tf.int32) * tf.expand_dims(
                        tf.cast(features["masked_lm_weights"] > 0, tf.int32),
                        2)
  is_masked = tf.reduce_max(hits, axis=1) > 0
  originals = tf.reduce_sum(
      hits * tf.expand_dims(features["masked_lm_ids"], 2), axis=1)
  return tf.where_v2(is_masked, originals, features["input_ids"])


def _whole_word_selection(is_candidate, input_ids, order_keys, budget,
                          params):
  """Upstream's whole-word choice: words in random order, taken if they fit.

  Args:
    is_candidate: bool [B, S].
    input_ids: int32 [B, S].
    order_keys: float32 [B, S], one random key per word (by word index).
    budget: int32 [B], num_to_predict.
    params: MaskingParams.

  Returns:
    bool [B, S], the chosen positions.
  """
  seq_length = params.max_seq_length
  continuation = tf.reduce_any(
      tf.equal(tf.expand_dims(input_ids, 2),
               tf.constant(params.continuation_ids or (-1,), tf.int32)),
      axis=2)
  candidates_before = tf.cumsum(tf.cast(is_candidate, tf.int32), axis=1,
                                exclusive=True)
  # As upstream, a "##" piece joins the previous candidate's word (even
  # across [SEP]); the first candidate always starts a word.
  starts = is_candidate & ~(continuation & (candidates_before > 0))
  word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
  num_words = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1, keepdims=True)
  # [B, S(word), S(token)]: the tokens of each word.
  membership = (tf.one_hot(tf.where_v2(is_candidate, word, -tf.ones_like(word)),
                           seq_length, axis=1, dtype=tf.int32))
  sizes = tf.reduce_sum(membership, axis=2)
  exists = tf.range(seq_length) < num_words
  order = tf.argsort(tf.where_v2(exists, order_keys, tf.fill(tf.shape(
      order_keys), 2.0)), axis=1, stable=True)
  ordered_sizes = tf.gather(sizes, order, batch_dims=1)

  def take(count, size):
    return tf.where_v2(count + size <= budget, count + size, count)

  # Over the words in their random order, all rows at once: [S, B].
  counts = tf.scan(take, tf.transpose(ordered_sizes),
                   initializer=tf.zeros_like(budget))
  previous = tf.concat([tf.zeros_like(counts[:1]), counts[:-1]], 0)
  taken_in_order = tf.cast(tf.transpose(counts > previous), tf.int32)
  inverse = tf.argsort(order, axis=1)
  taken = tf.gather(taken_in_order, inverse, batch_dims=1)
  return tf.reduce_sum(membership * tf.expand_dims(taken, 2), axis=1) > 0


def mask_batch(input_ids, input_mask, uniforms, random_ids, params):
  """Draws a batch's masks, row by row independent of the other rows.

  Args:
    input_ids: int32 [B, S], the original tokens.
    input_mask: int32 [B, S], 1 for real tokens.
    uniforms: float32 [B, 3, S] and
    random_ids: int32 [B, S], from `example_draws`.
    params: MaskingParams.

  Returns:
    dict: input_ids int32 [B, S] (masked), masked_lm_positions int32
    [B, P] (ascending, then 0), masked_lm_ids int32 [B, P] (originals, then
    0), masked_lm_weights float32 [B, P] (1.0, then 0.0).
  """
  seq_length = params.max_seq_length
  max_predictions = params.max_predictions_per_seq
  is_candidate = ((input_mask > 0) & tf.not_equal(input_ids, params.cls_id) &
                  tf.not_equal(input_ids, params.sep_id))
  length = tf.reduce_sum(tf.cast(input_mask > 0, tf.float64), axis=1)
  # In float64, as Python computes length * masked_lm_prob.
  budget = tf.cast(tf.minimum(
      tf.constant(max_predictions, tf.float64),
      tf.maximum(tf.constant(1.0, tf.float64),
                 tf.round(length * params.masked_lm_prob))), tf.int32)
  order_keys = uniforms[:, 0]
  if params.mask_rule == pretraining_instances.PER_TOKEN_MASKS:
    chosen = _per_token_selection(is_candidate, order_keys, params,
                                  max_predictions)
  elif params.do_whole_word_mask:
    chosen = _whole_word_selection(is_candidate, input_ids, order_keys,
                                   budget, params)
  else:
    # A uniformly random order of the candidates; the first `budget` win.
    top = tf.math.top_k(tf.where_v2(is_candidate, order_keys,
                                 -tf.ones_like(order_keys)),
                        k=max_predictions).indices
    wins = tf.range(max_predictions) < tf.expand_dims(budget, 1)
    chosen = is_candidate & tf.reduce_any(
        tf.equal(tf.expand_dims(top, 2), tf.range(seq_length)) &
        tf.expand_dims(wins, 2), axis=1)
  return _masked_features(input_ids, chosen, uniforms, random_ids, params,
                          max_predictions)


def _per_token_selection(is_candidate, order_keys, params, width):
  """Hugging Face's choice: each candidate on its own with probability
  masked_lm_prob (its key below it); of a row drawing more than `width`,
  the `width` with the largest keys among them.

  Returns:
    bool [B, S], the chosen positions.
  """
  drawn = is_candidate & (order_keys < params.masked_lm_prob)
  top = tf.math.top_k(tf.where_v2(drawn, order_keys,
                                  -tf.ones_like(order_keys)), k=width).indices
  return drawn & tf.reduce_any(
      tf.equal(tf.expand_dims(top, 2), tf.range(params.max_seq_length)),
      axis=1)


def _masked_features(input_ids, chosen, uniforms, random_ids, params, width):
  """The masked-LM features of rows whose chosen positions are `chosen`
  (bool [B, S]), `width` predictions wide; see `mask_batch`."""
  seq_length = params.max_seq_length
  mask_only = params.mask_rule == pretraining_instances.MASK_TOKEN_ONLY
  mask_share = 1.0 if mask_only else 0.8
  use_mask_token = uniforms[:, 1] < mask_share
  use_random_id = uniforms[:, 2] >= 0.5
  masked_ids = tf.where_v2(
      chosen & use_mask_token, tf.fill(tf.shape(input_ids), params.mask_id),
      tf.where_v2(chosen & use_random_id, random_ids % params.vocab_size,
               input_ids))
  # The chosen positions in ascending order: the largest S - position first.
  score = tf.where_v2(chosen, seq_length - tf.range(seq_length), 0)
  top = tf.math.top_k(score, k=width).values
  weights = top > 0
  positions = tf.where_v2(weights, seq_length - top, 0)
  return {
      "input_ids": masked_ids,
      "masked_lm_positions": positions,
      "masked_lm_ids": tf.where_v2(weights, tf.gather(input_ids, positions,
                                                   batch_dims=1), 0),
      "masked_lm_weights": tf.cast(weights, tf.float32),
  }


def _packed_whole_word_selection(is_candidate, input_ids, sequence_ids,
                                 order_keys, budgets, params):
  """`_whole_word_selection` for packed rows: words stay within their
  sequence, and each sequence takes words while they fit its own budget.

  Args:
    is_candidate: bool [B, S].
    input_ids: int32 [B, S].
    sequence_ids: int32 [B, S], 1..N, 0 for padding.
    order_keys: float32 [B, S], one random key per word (by word index).
    budgets: int32 [B, N], each sequence's num_to_predict.
    params: MaskingParams.

  Returns:
    bool [B, S], the chosen positions.
  """
  seq_length = params.max_seq_length
  num_slots = budgets.shape[-1]
  continuation = tf.reduce_any(
      tf.equal(tf.expand_dims(input_ids, 2),
               tf.constant(params.continuation_ids or (-1,), tf.int32)),
      axis=2)
  # [B, S, N]: the candidates of each sequence.
  in_slot = tf.one_hot(sequence_ids - 1, num_slots, dtype=tf.int32)
  candidates_before = tf.reduce_sum(
      tf.cumsum(in_slot * tf.expand_dims(tf.cast(is_candidate, tf.int32), 2),
                axis=1, exclusive=True) * in_slot, axis=2)
  # A "##" piece joins the previous candidate of its own sequence.
  starts = is_candidate & ~(continuation & (candidates_before > 0))
  word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
  num_words = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1, keepdims=True)
  membership = tf.one_hot(tf.where_v2(is_candidate, word, -tf.ones_like(word)),
                          seq_length, axis=1, dtype=tf.int32)
  sizes = tf.reduce_sum(membership, axis=2)
  # The sequence of each word (its tokens' sequence), one-hot [B, S, N].
  word_slot = tf.cast(tf.matmul(tf.cast(membership, tf.float32),
                                tf.cast(in_slot, tf.float32)) > 0, tf.int32)
  exists = tf.range(seq_length) < num_words
  order = tf.argsort(tf.where_v2(exists, order_keys, tf.fill(tf.shape(
      order_keys), 2.0)), axis=1, stable=True)
  ordered_sizes = tf.gather(sizes, order, batch_dims=1)
  ordered_slots = tf.gather(word_slot, order, batch_dims=1)

  def take(counts, word):
    size, slot = word
    used = tf.reduce_sum(counts * slot, axis=1)
    fits = used + size <= tf.reduce_sum(budgets * slot, axis=1)
    return counts + slot * tf.expand_dims(tf.where_v2(fits, size, 0), 1)

  # Over the words in their random order, all rows at once: [S, B, N].
  counts = tf.scan(take, (tf.transpose(ordered_sizes),
                          tf.transpose(ordered_slots, [1, 0, 2])),
                   initializer=tf.zeros_like(budgets))
  previous = tf.concat([tf.zeros_like(counts[:1]), counts[:-1]], 0)
  taken_in_order = tf.cast(tf.transpose(
      tf.reduce_sum(counts - previous, axis=2) > 0), tf.int32)
  inverse = tf.argsort(order, axis=1)
  taken = tf.gather(taken_in_order, inverse, batch_dims=1)
  return tf.reduce_sum(membership * tf.expand_dims(taken, 2), axis=1) > 0


def mask_packed_batch(input_ids, input_mask, sequence_ids, uniforms,
                      random_ids, params, max_sequences_per_pack):
  """Draws the masks of a batch of packed rows (create_pretraining_data.py
  --pack_sequences --masking=dynamic), each sequence by upstream's rule.

  Each sequence of a row gets min(P, max(1, round(length * p))) masks among
  its own tokens other than [CLS] and [SEP] (whole words within the
  sequence with whole-word masking), as it would unpacked; the row's
  predictions are W = packing.masked_positions_per_row wide, as the masks
  of PACKED rows.

  Args:
    input_ids: int32 [B, S], the original tokens.
    input_mask: int32 [B, S], 1 for real tokens.
    sequence_ids: int32 [B, S], the sequence of each token, 1..N (0:
      padding).
    uniforms: float32 [B, 3, S] and
    random_ids: int32 [B, S], from `example_draws`.
    params: MaskingParams (max_predictions_per_seq: P, per sequence).
    max_sequences_per_pack: N.

  Returns:
    dict as `mask_batch`'s, the masked-LM features [B, W].
  """
  width = packing.masked_positions_per_row(
      params.max_seq_length, params.max_predictions_per_seq,
      params.masked_lm_prob, max_sequences_per_pack)
  is_candidate = ((input_mask > 0) & (sequence_ids > 0) &
                  tf.not_equal(input_ids, params.cls_id) &
                  tf.not_equal(input_ids, params.sep_id))
  # [B, S, N] membership, [B, N] lengths: in float64, as Python computes
  # length * masked_lm_prob.
  in_slot = tf.one_hot(sequence_ids - 1, max_sequences_per_pack,
                       dtype=tf.int32)
  lengths = tf.cast(tf.reduce_sum(in_slot, axis=1), tf.float64)
  budgets = tf.where_v2(lengths > 0, tf.cast(tf.minimum(
      tf.constant(params.max_predictions_per_seq, tf.float64),
      tf.maximum(tf.constant(1.0, tf.float64),
                 tf.round(lengths * params.masked_lm_prob))), tf.int32), 0)
  order_keys = uniforms[:, 0]
  if params.mask_rule == pretraining_instances.PER_TOKEN_MASKS:
    chosen = _per_token_selection(is_candidate, order_keys, params, width)
  elif params.do_whole_word_mask:
    chosen = _packed_whole_word_selection(
        is_candidate, input_ids, sequence_ids, order_keys, budgets, params)
  else:
    # Each sequence's candidates in a uniformly random order: a token wins
    # if fewer than its sequence's budget of its candidates rank above it
    # (a larger key, or an equal key at an earlier position, as top_k).
    same_sequence = tf.equal(tf.expand_dims(sequence_ids, 2),
                             tf.expand_dims(sequence_ids, 1))
    keys = tf.where_v2(is_candidate, order_keys, -tf.ones_like(order_keys))
    other, this = tf.expand_dims(keys, 1), tf.expand_dims(keys, 2)
    earlier = tf.range(params.max_seq_length) < tf.expand_dims(
        tf.range(params.max_seq_length), 1)
    above = tf.reduce_sum(tf.cast(
        same_sequence & ((other > this) | (tf.equal(other, this) & earlier)),
        tf.int32), axis=2)
    token_budget = tf.reduce_sum(in_slot * tf.expand_dims(budgets, 1),
                                 axis=2)
    chosen = is_candidate & (above < token_budget)
  return _masked_features(input_ids, chosen, uniforms, random_ids, params,
                          width)


def check_masked_lm_prob(masked_lm_prob, max_seq_length,
                         max_predictions_per_seq):
  """The error message for a --masked_lm_prob masks cannot follow, or None.

  Upstream silently caps a long sequence's masks at
  --max_predictions_per_seq, masking less than masked_lm_prob of it. The
  range is create_pretraining_data's.
  """
  out_of_range = pretraining_instances.masked_lm_prob_out_of_range(
      masked_lm_prob)
  if out_of_range:
    return out_of_range
  wanted = int(round(max_seq_length * masked_lm_prob))
  if wanted > max_predictions_per_seq:
    return ("--masked_lm_prob=%r masks %d tokens of a %d-token sequence "
            "(--max_seq_length) but --max_predictions_per_seq=%d; raise "
            "--max_predictions_per_seq to %d or lower --masked_lm_prob to "
            "%s" % (masked_lm_prob, wanted, max_seq_length,
                    max_predictions_per_seq, wanted,
                    math.floor(1e4 * max_predictions_per_seq /
                               max_seq_length) / 1e4))
  return None
