"""The re-ranker's input: triple and pair records decoded, padded per batch
and, for training, streamed in windows shuffled by the seed so that a
resumed run reads on from where the uninterrupted one would.

Shape notation: B = batch, P = pairs per record (2 for a triple, 1 for a
scored pair), L = the batch's longest pair (at most S).
"""

import tensorflow.compat.v1 as tf

from bertkit.engine.input import input_pipeline
from bertkit.tasks.reranking import records as rerank_records

SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
# The records' features read as they are (per pair [P], or one value).
_LAYOUT_FEATURES = ("input_ids", "pair_lengths", "first_lengths")
# Triples shuffled within consecutive windows of this many (Nogueira and
# Cho's shuffle buffer); the order is a function of the seed alone.
SHUFFLE_WINDOW = 1000
DEFAULT_SHUFFLE_SEED = 12345


def decode(record, kind):
  """One record's features: input_ids, input_mask, segment_ids int32 [P, L]
  (L its longest pair), and the kind's other features ([P] or scalars).
  """
  spec = {f.name: tf.io.VarLenFeature(
      tf.float32 if f.dtype == "float32" else tf.int64)
          for f in kind.features}
  dense = {name: tf.sparse.to_dense(value)
           for name, value in tf.io.parse_single_example(record,
                                                         spec).items()}
  lengths = tf.cast(dense["pair_lengths"], tf.int32)
  ids = tf.RaggedTensor.from_row_lengths(
      tf.cast(dense["input_ids"], tf.int32), lengths).to_tensor()
  positions = tf.range(tf.shape(ids)[1])[None, :]
  mask = positions < lengths[:, None]
  first = tf.cast(dense["first_lengths"], tf.int32)[:, None]
  features = {"input_ids": ids, "input_mask": tf.cast(mask, tf.int32),
              "segment_ids": tf.cast((positions >= first) & mask, tf.int32)}
  for f in kind.features:
    if f.name in _LAYOUT_FEATURES:
      continue
    value = dense[f.name]
    if value.dtype == tf.int64:
      value = tf.cast(value, tf.int32)
    features[f.name] = value[0] if f.length == 1 else value
  return features


def padded_batches(dataset, batch_size, drop_remainder, pad_to=None):
  """Batches of `dataset` padded to their longest pair, or to `pad_to`
  tokens (--pad_to_max_seq_length: every batch of one shape)."""
  shapes = {name: (tf.TensorShape([None, pad_to])
                   if name in SEQUENCE_FEATURES else spec.shape)
            for name, spec in dataset.element_spec.items()}
  return dataset.padded_batch(batch_size, padded_shapes=shapes,
                              drop_remainder=drop_remainder)


def window_shuffled(dataset, start, seed):
  """`dataset` (a stream whose first element is at position `start`, a
  multiple of SHUFFLE_WINDOW) with each window of SHUFFLE_WINDOW positions
  shuffled by (seed, window number): the same stream whatever position a
  run starts reading it at."""
  first_window = start // SHUFFLE_WINDOW

  def shuffle(window, records):
    keys = tf.random.stateless_uniform(
        tf.shape(records), seed=tf.stack([tf.constant(seed, tf.int64),
                                          window + first_window]))
    return tf.data.Dataset.from_tensor_slices(tf.gather(records,
                                                        tf.argsort(keys)))

  return dataset.batch(SHUFFLE_WINDOW).enumerate().flat_map(
      input_pipeline.graph_function(shuffle))


def train_input_fn(files, counts, global_batch_size, num_replicas,
                   start_step_fn, seed=DEFAULT_SHUFFLE_SEED, pad_to=None,
                   kind=rerank_records.TRIPLE):
  """The input_fn of the triples: the records in order, again and again,
  shuffled within windows, padded per batch; a run resuming at global step n
  starts at the triple the uninterrupted run would read next.

  Args:
    files: the TRIPLE record files, in order.
    counts: {file: records}.
    global_batch_size: triples per step over all replicas.
    num_replicas: replicas in sync.
    start_step_fn: function() -> the global step training resumes from.
    seed: the shuffle's seed.
    pad_to: pad every pair to this length (None: to the batch's longest).
    kind: the records' kind (TRIPLE, or a student's TEACHER_TRIPLE).

  Returns:
    input_fn(params, input_context=None) -> [B, 2, L] features.
  """
  per_replica = global_batch_size // num_replicas

  def input_fn(params=None, input_context=None):
    del params
    share = input_pipeline.process_share(files, input_context)
    per_epoch = sum(counts[path] for path in share.files)
    epoch, skip = input_pipeline.resume_point(start_step_fn(), per_replica,
                                              share, per_epoch)
    position = epoch * per_epoch + skip
    window_start = position - position % SHUFFLE_WINDOW
    epoch, skip = divmod(window_start, per_epoch)
    stream = input_pipeline.read_records(
        share.files, tf.data.Dataset.range(epoch, 2**62), False, 1).map(
            input_pipeline.graph_function(lambda _, record: record)).skip(skip)
    dataset = window_shuffled(stream, window_start, seed).skip(
        position - window_start)
    if share.by_record:
      dataset = dataset.shard(share.num_pipelines, share.pipeline_id)
    dataset = dataset.map(input_pipeline.graph_function(
        lambda record: decode(record, kind)),
                          num_parallel_calls=tf.data.AUTOTUNE)
    return input_pipeline.with_fixed_tuning(padded_batches(
        dataset, per_replica, True, pad_to).prefetch(tf.data.AUTOTUNE))

  return input_fn


def ordered_input_fn(files, kind, batch_size, pad_to=None):
  """The input_fn of one ordered pass over records, each batch padded to its
  longest pair or to `pad_to` (the last batch may be smaller)."""

  def input_fn(params=None, input_context=None):
    del params, input_context
    dataset = tf.data.TFRecordDataset(list(files)).map(
        input_pipeline.graph_function(lambda record: decode(record, kind)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return input_pipeline.with_fixed_tuning(padded_batches(
        dataset, batch_size, False, pad_to).prefetch(tf.data.AUTOTUNE))

  return input_fn


def chunk_counts(files, total):
  """{file: records} of chunks of records.CHUNK_ITEMS holding `total`."""
  return {path: min(rerank_records.CHUNK_ITEMS,
                    total - i * rerank_records.CHUNK_ITEMS)
          for i, path in enumerate(files)}
