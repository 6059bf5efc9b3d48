"""Pretraining records read back through the input pipeline (with the dynamic-
masking tests' lengths), and a record file with a bit flipped."""

import tensorflow.compat.v1 as tf

from bertkit.engine.input import input_pipeline


SEQ, PREDS, VOCAB = 64, 10, 1000


def read_examples(path, kind, masking, num_examples, batch=8, seed=1,
                  is_training=True, input_context=None, num_replicas=1,
                  max_sequences_per_pack=None):
  """The first num_examples features the input_fn yields, one dict each."""
  with tf.Graph().as_default():
    spec = input_pipeline.PretrainingInput(
        masking.max_seq_length if masking else SEQ,
        masking.max_predictions_per_seq if masking else PREDS,
        kind, max_sequences_per_pack, masking, seed)
    input_fn = input_pipeline.pretraining_input_fn_builder(
        [path], spec, is_training=is_training,
        global_batch_size=batch, num_replicas=num_replicas,
        deterministic=True)
    batches = tf.data.make_one_shot_iterator(
        input_fn(input_context=input_context)).get_next()
    examples = []
    with tf.Session() as sess:
      try:
        while len(examples) < num_examples:
          values = sess.run(batches)
          for i in range(len(values["input_ids"])):
            examples.append({k: v[i] for k, v in values.items()})
      except tf.errors.OutOfRangeError:
        pass
  return examples[:num_examples]


def flip_a_bit_in_records(source, destination, indices):
  """Copies a TFRecord file with one data bit flipped in each given record."""
  data = bytearray(open(source, "rb").read())
  starts, offset = [], 0
  while offset < len(data):
    starts.append(offset)
    offset += 16 + int.from_bytes(data[offset:offset + 8], "little")
  for index in indices:
    data[starts[index] + 12 + 20] ^= 0x04
  with open(destination, "wb") as f:
    f.write(data)
  return [starts[i] for i in indices]
