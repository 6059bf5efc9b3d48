# coding=utf-8
"""google-research/bert's instance code, as the tests' reference (oracle).

A transcription of upstream create_pretraining_data.py's algorithm on
wordpiece strings and `TrainingInstance` objects (the golden tests pin it to
upstream's own output). The programs use pretraining_instances.InstanceMaker,
which must give byte-identical records; the tests compare the two.
"""

import collections

import tensorflow.compat.v1 as tf

import tokenization


MaskedLmInstance = collections.namedtuple("MaskedLmInstance",
                                          ["index", "label"])


class TrainingInstance(object):
  """A single training instance (sentence pair)."""

  def __init__(self, tokens, segment_ids, masked_lm_positions, masked_lm_labels,
               is_random_next):
    self.tokens = tokens
    self.segment_ids = segment_ids
    self.is_random_next = is_random_next
    self.masked_lm_positions = masked_lm_positions
    self.masked_lm_labels = masked_lm_labels

  def __str__(self):
    return ("tokens: %s\nsegment_ids: %s\nis_random_next: %s\n"
            "masked_lm_positions: %s\nmasked_lm_labels: %s\n\n" % (
                " ".join(tokenization.printable_text(x) for x in self.tokens),
                " ".join(str(x) for x in self.segment_ids),
                self.is_random_next,
                " ".join(str(x) for x in self.masked_lm_positions),
                " ".join(tokenization.printable_text(x)
                         for x in self.masked_lm_labels)))

  def __repr__(self):
    return self.__str__()


def create_training_instances(documents, rng, vocab_words, params,
                              dupe_factor):
  """Makes all instances of a corpus: shuffle, `dupe_factor` passes, shuffle.

  Args:
    documents: list of documents (lists of segments); not modified.
    rng: the `random.Random` that drives all choices.
    vocab_words: vocab tokens in id order, for random replacement tokens.
    params: an `InstanceParams`.
    dupe_factor: how many passes over the documents (each masks anew).

  Returns:
    The list of `TrainingInstance`s, in shuffled order.
  """
  documents = list(documents)
  rng.shuffle(documents)
  instances = []
  for _ in range(dupe_factor):
    for document_index in range(len(documents)):
      instances.extend(create_instances_from_document(
          documents, document_index, rng, vocab_words, params))
  rng.shuffle(instances)
  return instances


def _pick_random_next(documents, document_index, target_b_length, rng):
  """Segment B for a random-next instance: a run of another document.

  Returns:
    The tokens of B: segments of a random other document from a random
    start, until B holds at least `target_b_length` tokens or it ends.
  """
  # With few documents the draw may keep hitting this one; after 10 tries
  # upstream accepts it.
  for _ in range(10):
    random_document_index = rng.randint(0, len(documents) - 1)
    if random_document_index != document_index:
      break
  random_document = documents[random_document_index]
  tokens_b = []
  for segment in random_document[rng.randint(0, len(random_document) - 1):]:
    tokens_b.extend(segment)
    if len(tokens_b) >= target_b_length:
      break
  return tokens_b


def _make_instance(tokens_a, tokens_b, is_random_next, rng, vocab_words,
                   params):
  """Truncates a pair, adds [CLS]/[SEP], masks it: one TrainingInstance."""
  truncate_seq_pair(tokens_a, tokens_b, params.max_seq_length - 3, rng)
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + tokens_b + ["[SEP]"]
  segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
  tokens, masked_lm_positions, masked_lm_labels = create_masked_lm_predictions(
      tokens, params.masked_lm_prob, params.max_predictions_per_seq,
      vocab_words, rng, do_whole_word_mask=params.do_whole_word_mask)
  return TrainingInstance(
      tokens=tokens,
      segment_ids=segment_ids,
      is_random_next=is_random_next,
      masked_lm_positions=masked_lm_positions,
      masked_lm_labels=masked_lm_labels)


def create_instances_from_document(documents, document_index, rng,
                                   vocab_words, params):
  """Cuts one document into sentence-pair instances.

  Segments are gathered into a chunk until it reaches the target length;
  the chunk is split at a random segment boundary into A and B, or (half the
  time, and always for a one-segment chunk) B comes from another document
  and the chunk's unused segments are put back for the next instance.

  Args:
    documents: all documents (for random-next segments).
    document_index: index of the document to cut.
    rng: the `random.Random` that drives all choices.
    vocab_words: vocab tokens in id order.
    params: an `InstanceParams`.

  Returns:
    A list of `TrainingInstance`s.
  """
  document = documents[document_index]
  max_num_tokens = params.max_seq_length - 3  # [CLS], [SEP], [SEP].
  # Mostly fill the whole sequence (padding is wasted compute), but sometimes
  # aim shorter so pretraining also sees the short inputs of fine-tuning.
  target_seq_length = max_num_tokens
  if rng.random() < params.short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)

  instances = []
  chunk = []
  chunk_length = 0
  i = 0
  while i < len(document):
    chunk.append(document[i])
    chunk_length += len(document[i])
    if i == len(document) - 1 or chunk_length >= target_seq_length:
      a_end = 1 if len(chunk) == 1 else rng.randint(1, len(chunk) - 1)
      tokens_a = [t for segment in chunk[:a_end] for t in segment]
      is_random_next = len(chunk) == 1 or rng.random() < 0.5
      if is_random_next:
        tokens_b = _pick_random_next(documents, document_index,
                                     target_seq_length - len(tokens_a), rng)
        i -= len(chunk) - a_end
      else:
        tokens_b = [t for segment in chunk[a_end:] for t in segment]
      instances.append(_make_instance(tokens_a, tokens_b, is_random_next, rng,
                                      vocab_words, params))
      chunk = []
      chunk_length = 0
    i += 1
  return instances


def create_masked_lm_predictions(tokens, masked_lm_prob,
                                 max_predictions_per_seq, vocab_words, rng,
                                 do_whole_word_mask=False):
  """Chooses the masked LM targets of one instance and masks them.

  n = min(max_predictions_per_seq, max(1, round(len(tokens) *
  masked_lm_prob))) positions other than [CLS]/[SEP] are chosen at random;
  each becomes [MASK] 80% of the time, stays 10%, becomes a random vocab
  token 10%.

  Args:
    tokens: the instance's tokens, [CLS]/[SEP] included; not modified.
    masked_lm_prob: fraction of tokens to mask.
    max_predictions_per_seq: cap on the number of masked tokens.
    vocab_words: vocab tokens in id order, for random replacements.
    rng: the `random.Random` that drives all choices.
    do_whole_word_mask: mask a word's "##" pieces together with it; a word
      that would overshoot n is skipped.

  Returns:
    (output_tokens, masked_lm_positions, masked_lm_labels): the masked
    tokens, and the masked positions (ascending) with their original tokens.
  """
  cand_indexes = []
  for i, token in enumerate(tokens):
    if token in ("[CLS]", "[SEP]"):
      continue
    # Upstream joins a "##" piece to the previous group even across [SEP].
    if do_whole_word_mask and cand_indexes and token.startswith("##"):
      cand_indexes[-1].append(i)
    else:
      cand_indexes.append([i])
  rng.shuffle(cand_indexes)

  output_tokens = list(tokens)
  num_to_predict = min(max_predictions_per_seq,
                       max(1, int(round(len(tokens) * masked_lm_prob))))
  masked_lms = []
  covered_indexes = set()
  for index_set in cand_indexes:
    if len(masked_lms) >= num_to_predict:
      break
    if len(masked_lms) + len(index_set) > num_to_predict:
      continue
    if any(index in covered_indexes for index in index_set):
      continue
    for index in index_set:
      covered_indexes.add(index)
      output_tokens[index] = _masked_token(tokens[index], vocab_words, rng)
      masked_lms.append(MaskedLmInstance(index=index, label=tokens[index]))

  masked_lms.sort(key=lambda x: x.index)
  return (output_tokens, [p.index for p in masked_lms],
          [p.label for p in masked_lms])


def _masked_token(token, vocab_words, rng):
  """What a chosen token becomes: [MASK] 80%, itself 10%, random 10%."""
  if rng.random() < 0.8:
    return "[MASK]"
  if rng.random() < 0.5:
    return token
  return vocab_words[rng.randint(0, len(vocab_words) - 1)]


def truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng):
  """Truncates a pair in place until len(a) + len(b) <= max_num_tokens.

  The longer side (B on a tie) loses one token at a time, from the front or
  the back at random, so that truncation does not bias towards either end.
  """
  while len(tokens_a) + len(tokens_b) > max_num_tokens:
    trunc_tokens = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
    if rng.random() < 0.5:
      del trunc_tokens[0]
    else:
      trunc_tokens.pop()


def _int_feature(values):
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def _float_feature(values):
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def instance_to_tf_example(instance, vocab, max_seq_length,
                           max_predictions_per_seq):
  """Converts a `TrainingInstance` to a padded `tf.train.Example`.

  Args:
    instance: a `TrainingInstance` with at most `max_seq_length` tokens.
    vocab: token -> id mapping.
    max_seq_length: S, the padded length of the per-token features.
    max_predictions_per_seq: P, the padded length of the masked LM features.

  Returns:
    A `tf.train.Example`: int64 input_ids, input_mask, segment_ids [S];
    int64 masked_lm_positions, masked_lm_ids [P]; float masked_lm_weights
    [P] (1.0 per real prediction, 0.0 padding); int64 next_sentence_labels
    [1] (1 = B is a random sentence).
  """
  input_ids = tokenization.convert_tokens_to_ids(vocab, instance.tokens)
  seq_padding = [0] * (max_seq_length - len(input_ids))
  masked_lm_ids = tokenization.convert_tokens_to_ids(
      vocab, instance.masked_lm_labels)
  pred_padding = [0] * (max_predictions_per_seq - len(masked_lm_ids))

  features = collections.OrderedDict()
  features["input_ids"] = _int_feature(input_ids + seq_padding)
  features["input_mask"] = _int_feature([1] * len(input_ids) + seq_padding)
  features["segment_ids"] = _int_feature(
      list(instance.segment_ids) + seq_padding)
  features["masked_lm_positions"] = _int_feature(
      list(instance.masked_lm_positions) + pred_padding)
  features["masked_lm_ids"] = _int_feature(masked_lm_ids + pred_padding)
  features["masked_lm_weights"] = _float_feature(
      [1.0] * len(masked_lm_ids) + [0.0] * len(pred_padding))
  features["next_sentence_labels"] = _int_feature(
      [1 if instance.is_random_next else 0])
  return tf.train.Example(features=tf.train.Features(feature=features))


