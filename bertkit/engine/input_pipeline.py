"""Reading pretraining TFRecords for an Estimator, under any strategy.

Batch semantics: `--train_batch_size` is the GLOBAL batch. Under a
tf.distribute strategy Estimator calls the input_fn once per worker and hands
successive batches of the dataset to successive replicas, so the dataset is
batched with the per-replica batch. One step therefore consumes the same
examples as one batch of the global size on a single device.

The pretraining input_fn (`pretraining_input_fn_builder`) is a sequence of
steps, each callable on its own: the files of this process
(`process_share`), where a resumed run starts (`resume_point`), the records
in file order or shuffled (`read_records`), decoding (`decode_example`) and
the masks drawn on whole batches (`mask_examples`).
"""

import dataclasses
import os
import re
import struct
from typing import Optional, Tuple

import tensorflow.compat.v1 as tf
from tensorflow.python.data.ops import multi_device_iterator_ops  # pylint: disable=g-direct-tensorflow-import

from bertkit.common.errors import UserError
from bertkit.data import pretraining_records
from bertkit.engine import dynamic_masking



def record_feature_spec(kind, max_seq_length, max_predictions_per_seq,
                        max_sequences_per_pack=None):
  """The tf.io parsing spec of records of `kind` (pretraining_records);
  packed rows have `max_sequences_per_pack` sequence slots."""
  return {
      f.name: tf.io.FixedLenFeature(
          [pretraining_records.feature_length(f, max_seq_length,
                                              max_predictions_per_seq,
                                              max_sequences_per_pack)],
          tf.as_dtype(f.dtype))
      for f in kind.features}


def decode_record(record, feature_spec):
  """Parses one serialized example; int64 features become int32."""
  example = tf.parse_single_example(record, feature_spec)
  return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t
          for name, t in example.items()}


def first_example(path):
  """The first tf.train.Example of a TFRecord file.

  Raises:
    UserError: the file is empty or not a TFRecord file.
  """
  try:
    for raw in tf.io.tf_record_iterator(path):
      return tf.train.Example.FromString(raw)
  except (tf.errors.DataLossError, tf.errors.OpError) as e:
    if "corrupted record at 0" in e.message:
      # The first header fails its checksum: text, or some other format.
      raise UserError("%s is not a TFRecord file (its first bytes are no "
                      "record header); training reads the records that "
                      "create_pretraining_data.py writes, not text" % path)
    raise UserError("%s is not a readable TFRecord file (%s)" %
                    (path, e.message.splitlines()[0]))
  raise UserError("%s holds no records" % path)


def check_tfrecord_framing(path):
  """Walks a TFRecord file's record headers to catch truncated files early.

  Each record is [length u64][crc u32][data][crc u32]; only headers are read
  and the data is skipped, so this costs one seek per record.

  Raises:
    UserError: the last record runs past the end of the file.
  """
  size = tf.io.gfile.stat(path).length
  offset, index = 0, 0
  with tf.io.gfile.GFile(path, "rb") as f:
    while offset < size:
      header = f.read(12)
      if len(header) < 12:
        break
      length = struct.unpack("<Q", header[:8])[0]
      offset += 12 + length + 4
      if offset > size:
        break
      f.seek(offset)
      index += 1
  if offset != size:
    if index == 0:
      first_example(path)  # Says so if the file is no TFRecord file at all.
    raise UserError(
        "%s is truncated or corrupt: record %d ends at byte %d but the file "
        "has %d bytes; recreate it (an interrupted copy or write?)" %
        (path, index, offset, size))
  return index


def record_frames(path):
  """(start, end) byte offsets of each record of a TFRecord file.

  Raises:
    UserError: the framing does not end exactly at the end of the file.
  """
  size = tf.io.gfile.stat(path).length
  frames, offset = [], 0
  with tf.io.gfile.GFile(path, "rb") as f:
    while offset + 12 <= size:
      f.seek(offset)
      length = struct.unpack("<Q", f.read(8))[0]
      frames.append((offset, offset + 12 + length + 4))
      offset = frames[-1][1]
  if offset != size:
    raise UserError(
        "%s is truncated or corrupt: record %d ends at byte %d but the file "
        "has %d bytes; recreate it" % (path, len(frames), offset, size))
  return frames


def first_corrupt_record(path):
  """Index of the first record of `path` failing its CRC check, or None."""
  index = 0
  try:
    for _ in tf.io.tf_record_iterator(path):
      index += 1
  except tf.errors.DataLossError:
    return index
  return None


def _corrupt_record_offset(reason):
  match = re.search(r"corrupted record at (\d+)", reason or "")
  return int(match.group(1)) if match else None


def locate_corrupt_record(input_files, reason=None):
  """Finds the file and record that made reading fail with DataLossError.

  TensorFlow's message gives a byte offset but no file; files that have a
  record at that offset are checked first.

  Args:
    input_files: the TFRecord files being read.
    reason: the error's message, "corrupted record at N".

  Returns:
    (path, record index, byte offset of the record), or None.
  """
  hint = _corrupt_record_offset(reason)
  likely, others = [], []
  for path in input_files:
    try:
      starts = [start for start, _ in record_frames(path)]
    except UserError:
      likely.append(path)
      continue
    if hint is not None and (hint in starts or hint - 12 in starts):
      likely.append(path)
    else:
      others.append(path)
  for path in likely + others:
    index = first_corrupt_record(path)
    if index is not None:
      return path, index, record_frames(path)[index][0]
  return None


def corrupt_input_message(input_files, reason):
  """One line naming the corrupt record behind a DataLossError."""
  found = locate_corrupt_record(input_files, reason)
  if found is None:
    return ("the input data is corrupt (%s); recreate the affected file(s)"
            % reason)
  return ("the input data is corrupt: %s, record %d (byte %d) fails its CRC "
          "check (%s); recreate that file, or pass --skip_corrupt_records to "
          "train without such records" % (found + (reason,)))


def _copy_records(path, frames, skip, destination):
  with tf.io.gfile.GFile(path, "rb") as source, \
      tf.io.gfile.GFile(destination, "wb") as out:
    for index, (start, end) in enumerate(frames):
      if index not in skip:
        source.seek(start)
        out.write(source.read(end - start))


def without_corrupt_records(input_files, scratch_dir):
  """The input files with every record that fails its CRC check left out.

  Files without such records are returned as they are; for the others a copy
  without them is written to `scratch_dir`. Every file is read once.

  Args:
    input_files: TFRecord paths.
    scratch_dir: an existing directory for the cleaned copies.

  Returns:
    (files to read, list of skipped (path, record index, byte offset)).
  """
  files, skipped = [], []
  for number, path in enumerate(input_files):
    first = first_corrupt_record(path)
    if first is None:
      files.append(path)
      continue
    frames = record_frames(path)
    bad = [first]
    clean = os.path.join(scratch_dir, "%d-%s" % (number,
                                                 os.path.basename(path)))
    while True:
      _copy_records(path, frames, set(bad), clean)
      found = first_corrupt_record(clean)
      if found is None:
        break
      kept = [i for i in range(len(frames)) if i not in set(bad)]
      bad.append(kept[found])
    files.append(clean)
    skipped.extend((path, i, frames[i][0]) for i in sorted(bad))
  return files, skipped


def _kind_of_file(path, features):
  """The RecordKind of a file whose first record has `features`.

  Raises:
    UserError: the features are those of no kind.
  """
  kind = pretraining_records.record_kind_of(features.keys())
  if kind is None:
    raise UserError(
        "%s holds records with the features %s, which are neither %s; is "
        "this a create_pretraining_data.py output?" % (
            path, ", ".join(sorted(features.keys())), " nor ".join(
                "%s (%s)" % (k.name, ", ".join(f.name for f in k.features))
                for k in pretraining_records.RECORD_KINDS)))
  return kind


def predictions_per_record(path):
  """P, the masked-LM predictions the first record of `path` holds, or None
  for records without masks."""
  features = first_example(path).features.feature
  if "masked_lm_positions" not in features:
    return None
  return len(features["masked_lm_positions"].int64_list.value)


def check_pretraining_records(input_files, max_seq_length,
                              max_predictions_per_seq, vocab_size=None,
                              flag_name="--input_file"):
  """Checks each file's first record against the flags, before training.

  Args:
    input_files: TFRecord paths.
    max_seq_length: expected length of input_ids / input_mask / segment_ids.
    max_predictions_per_seq: expected length of the masked_lm features.
    vocab_size: if given, token ids must be below it.
    flag_name: the flag that named the files, for the messages.

  Returns:
    (kind, N): the `pretraining_records.RecordKind` of the records, and the
    sequence slots of packed rows (create_pretraining_data
    --pack_sequences), None for unpacked records.

  Raises:
    UserError: naming the file, the feature, its length and the flag; or
      a file of each kind when the files hold different kinds (packed rows
      of different N count as different kinds).
  """
  flags_of = {pretraining_records.SEQ: "--max_seq_length",
              pretraining_records.PRED: "--max_predictions_per_seq"}
  kinds = {}
  first_records = []
  for path in input_files:
    check_tfrecord_framing(path)
    features = first_example(path).features.feature
    kind = _kind_of_file(path, features)
    slots = sequence_slots(features)
    if slots is None:
      name = "%s records" % kind.name
    else:
      name = "%s rows of up to %d sequences" % (kind.name, slots)
    kinds.setdefault(name, (kind, slots, path))
    first_records.append((path, features))
  # Every file's kind before any length: a mix is named as such whatever
  # the flags say (one kind's lengths never fit the other's).
  if len(kinds) > 1:
    raise UserError(
        "%s mixes record kinds: %s; train on one kind at a time" % (
            flag_name, "; ".join("%s holds %s" % (p, n)
                                 for n, (_, _, p) in kinds.items())))
  (kind, slots, _), = kinds.values()
  for path, features in first_records:
    for feature in kind.features:
      length = pretraining_records.feature_length(
          feature, max_seq_length, max_predictions_per_seq, slots)
      value_kind = features[feature.name].WhichOneof("kind")
      values = getattr(features[feature.name], value_kind).value
      if len(values) != length:
        flag = flags_of.get(feature.length)
        raise UserError(
            "%s: feature %s has length %d but %s=%d; recreate the data or "
            "pass %s=%d" % (path, feature.name, len(values), flag, length,
                            flag, len(values)))
    _check_token_ids(path, features, vocab_size)
  return kind, slots


def checkpoint_step(model_dir):
  """The global step of `model_dir`'s latest checkpoint (0 without one)."""
  latest = tf.train.latest_checkpoint(model_dir)
  if not latest:
    return 0
  return int(tf.train.load_variable(latest, "global_step"))


def sequence_slots(features):
  """N, the sequence slots of a packed row, from a record's features (a
  tf.train.Features map: the length of cls_positions); None for an unpacked
  record."""
  if "cls_positions" not in features:
    return None
  return len(features["cls_positions"].int64_list.value)


def _check_token_ids(path, features, vocab_size):
  """Raises UserError if a record's input_ids reach vocab_size (if given)."""
  if vocab_size is None:
    return
  top = max(features["input_ids"].int64_list.value)
  if top >= vocab_size:
    raise UserError(
        "%s: token id %d is outside the model's vocab_size %d; the data was "
        "made with a larger vocab than bert_config.json declares" %
        (path, top, vocab_size))


def _fixed_tuning_options():
  options = tf.data.Options()
  options.autotune.enabled = False
  return options


def with_fixed_tuning(dataset):
  """`dataset` without tf.data's autotuning model thread.

  With autotuning on (TensorFlow's default), every iterator runs a model
  thread that re-tunes the pipeline at doubling intervals of up to 60 s.
  Destroying the iterator, which the Estimator does inside Session.close()
  at the end of training, evaluation and prediction, waits for that thread;
  in TF 2.15 its wake-up can be lost, and close() then blocks for the rest of
  the thread's interval: 10-50 s after a run of a minute or more, in about
  one run of three (docs/benchmarks.md). The parallelism left at AUTOTUNE
  resolves to fixed defaults (interleave: cycle_length; prefetch: the
  buffer-growing prefetch autotuner, which needs no thread).

  The datasets a distribution strategy feeds its replicas from are covered
  too (see `_fix_tuning_of_device_datasets`).
  """
  _fix_tuning_of_device_datasets()
  return dataset.with_options(_fixed_tuning_options())


def _fix_tuning_of_device_datasets():
  """Turns autotuning off in the per-device datasets of tf.distribute.

  Under every strategy (one_device included) the Estimator reads the input
  through a MultiDeviceIterator, which serves each device from a dataset of
  its own, built from a generator op over the input's iterator. Those
  datasets do not inherit the input's options (TF 2.15), so each ran its own
  autotuning thread, and the stall above happened there: in 4 of 10 runs of
  60 steps, 44-53 s, with `RootDataset::Iterator::~Iterator` waiting under
  the device iterator's `IteratorHandleOp`. TensorFlow offers no option for
  them, so their builder is wrapped; idempotent.
  """
  build = multi_device_iterator_ops._create_device_dataset  # pylint: disable=protected-access
  if getattr(build, "fixed_tuning", False):
    return

  def build_with_fixed_tuning(*args, **kwargs):
    return build(*args, **kwargs).with_options(_fixed_tuning_options())

  build_with_fixed_tuning.fixed_tuning = True
  multi_device_iterator_ops._create_device_dataset = build_with_fixed_tuning  # pylint: disable=protected-access



def shards_by_record(num_files, num_pipelines):
  """How `num_pipelines` input pipelines (workers, horovod ranks) share out
  `num_files` files: True, every pipeline reads every num_pipelines-th
  record of the whole stream (fewer files than pipelines); False, each reads
  whole files of its own (every num_pipelines-th file)."""
  return num_pipelines > 1 and num_files < num_pipelines


@dataclasses.dataclass(frozen=True)
class PretrainingInput:
  """What the pretraining records hold, and the masks training sees.

  Attributes:
    max_seq_length: S.
    max_predictions_per_seq: P, masked positions per sequence.
    record_kind: the `pretraining_records.RecordKind` of the files.
    max_sequences_per_pack: N, for packed rows (check_pretraining_records
      tells); None for upstream's records.
    masking: a `dynamic_masking.MaskingParams` to draw masks with (the
      masks of MASKED and MASKED_NO_NSP records are then replaced;
      PACKED_UNMASKED rows get each sequence's masks,
      dynamic_masking.mask_packed_batch), or None to use the records' own
      masks (the kinds that hold masks only).
    masking_seed: int, the seed of the training masks (None:
      dynamic_masking.DEFAULT_SEED; eval masks use EVAL_SEED whatever it is).

  Raises:
    ValueError: on construction, for masks the records cannot have: none
      for records without masks, or drawn for PACKED rows.
  """
  max_seq_length: int
  max_predictions_per_seq: int
  record_kind: pretraining_records.RecordKind = pretraining_records.MASKED
  max_sequences_per_pack: Optional[int] = None
  masking: Optional[dynamic_masking.MaskingParams] = None
  masking_seed: Optional[int] = None

  def __post_init__(self):
    if (self.masking is None and
        not pretraining_records.holds_masks(self.record_kind)):
      raise ValueError("%s records hold no masks: pass `masking`" %
                       self.record_kind.name)
    if (self.masking is not None and
        self.record_kind is pretraining_records.PACKED):
      raise ValueError("masks are drawn for packed rows without masks only")

  def feature_spec(self):
    """The tf.io parsing spec of the records (`record_feature_spec`)."""
    return record_feature_spec(self.record_kind, self.max_seq_length,
                               self.max_predictions_per_seq,
                               self.max_sequences_per_pack)


@dataclasses.dataclass(frozen=True)
class ProcessShare:
  """The part of the input one input pipeline (worker, horovod rank) reads.

  Attributes:
    files: the files it reads, in input order: its own every
      num_pipelines-th file, or all of them when `by_record`.
    num_pipelines: the pipelines sharing the input.
    pipeline_id: this pipeline's index among them, from 0.
    replicas_fed: the replicas this pipeline feeds.
    by_record: the pipelines share out the records rather than the files
      (`shards_by_record`): this one reads every num_pipelines-th record of
      the stream of all `files`, from record `pipeline_id` on.
  """
  files: Tuple[str, ...]
  num_pipelines: int = 1
  pipeline_id: int = 0
  replicas_fed: int = 1
  by_record: bool = False


def process_share(files, input_context=None):
  """The `ProcessShare` of the pipeline `input_context` describes.

  Args:
    files: every input file, in order.
    input_context: the tf.distribute.InputContext the Estimator (one per
      worker) or the runner (horovod) hands the input_fn; None: one pipeline
      reads everything.

  Returns:
    A `ProcessShare`.
  """
  if input_context is None:
    return ProcessShare(tuple(files))
  num_pipelines = input_context.num_input_pipelines
  pipeline_id = input_context.input_pipeline_id
  by_record = shards_by_record(len(files), num_pipelines)
  return ProcessShare(
      files=tuple(files if by_record else files[pipeline_id::num_pipelines]),
      num_pipelines=num_pipelines, pipeline_id=pipeline_id,
      replicas_fed=input_context.num_replicas_in_sync // num_pipelines,
      by_record=by_record)


def resume_point(step, per_replica_batch, share, records_per_epoch):
  """Where the input of a run resuming at global step `step` starts.

  Each step took `per_replica_batch` records for each replica the pipeline
  feeds (--num_accumulation_steps does not change that: the model splits
  the batch into micro-batches). Records shared out by record are skipped
  before they are shared out, so the skip counts every pipeline's.

  Args:
    step: the global step of the checkpoint training resumes from.
    per_replica_batch: records per replica per step.
    share: the pipeline's `ProcessShare`.
    records_per_epoch: the records of `share.files`.

  Returns:
    (first epoch, records of it to skip): the first `step` steps read whole
    epochs up to the first, then that many of its records.
  """
  consumed = step * per_replica_batch * share.replicas_fed * (
      share.num_pipelines if share.by_record else 1)
  return divmod(consumed, records_per_epoch)


def masking_key(is_training, masking_seed=None):
  """(seed, stream) of the random numbers of the masks drawn.

  Training masks follow `masking_seed` (dynamic_masking.DEFAULT_SEED if
  None); eval masks are the same whatever it is, so that eval figures
  compare from run to run.
  """
  if is_training:
    return (dynamic_masking.DEFAULT_SEED if masking_seed is None
            else masking_seed), dynamic_masking.TRAIN_STREAM
  return dynamic_masking.EVAL_SEED, dynamic_masking.EVAL_STREAM


def read_records(files, epochs, shuffle, cycle_length):
  """The records of `files` epoch after epoch, each as (epoch, record).

  Args:
    files: TFRecord paths.
    epochs: tf.data.Dataset of the int64 epoch numbers to read.
    shuffle: False: each epoch reads the files in order, one after the
      other. True: each epoch reads them in a new order, `cycle_length` at a
      time with their records interleaved as they come (upstream's sloppy
      reading; epochs may overlap where one ends).
    cycle_length: files read at a time when shuffling.

  Returns:
    tf.data.Dataset of (int64 epoch, string record).
  """
  def epoch_files(epoch):
    names = tf.data.Dataset.from_tensor_slices(tf.constant(list(files)))
    if shuffle:
      names = names.shuffle(buffer_size=len(files))
    return names.map(lambda name: (epoch, name))

  dataset = epochs.flat_map(epoch_files)
  if shuffle:
    return dataset.interleave(
        _tagged_records, cycle_length=min(cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
  return dataset.flat_map(_tagged_records)


def _tagged_records(epoch, path):
  """The records of the file `path`, each as (epoch, record)."""
  return tf.data.Dataset.zip((tf.data.Dataset.from_tensors(epoch).repeat(),
                              tf.data.TFRecordDataset(path)))


def decode_example(epoch, record, spec, key):
  """One record's features, and the random draws of its masks.

  Args:
    epoch: int64 scalar tensor, the epoch the record is read in.
    record: string scalar tensor, the serialized record.
    spec: the `PretrainingInput`.
    key: (seed, stream) of the masks (`masking_key`).

  Returns:
    The features of `decode_record`; with `spec.masking`, also
    "random_draws": (uniforms float32 [3, S], random ids int32 [S]).
  """
  features = decode_record(record, spec.feature_spec())
  if spec.masking is not None:
    features["random_draws"] = dynamic_masking.example_draws(
        key[0], key[1], epoch, record, spec.max_seq_length)
  return features


def mask_examples(features, spec):
  """The masking step: a batch with the masks drawn from its draws.

  On whole batches: far fewer op runs than example by example, and every
  row's masks depend on that row's draws only.

  Args:
    features: a batch of `decode_example` features, "random_draws"
      included: [B, ...] tensors.
    spec: the `PretrainingInput` (its `masking` is set).

  Returns:
    The features without "random_draws", input_ids [B, S] masked and the
    masked_lm features ([B, P]) drawn.
  """
  features = dict(features)
  uniforms, random_ids = features.pop("random_draws")
  original_ids = features["input_ids"]
  if spec.record_kind is pretraining_records.PACKED_UNMASKED:
    features.update(dynamic_masking.mask_packed_batch(
        original_ids, features["input_mask"], features["sequence_ids"],
        uniforms, random_ids, spec.masking, spec.max_sequences_per_pack))
    return features
  if pretraining_records.holds_masks(spec.record_kind):
    original_ids = dynamic_masking.restore_original_ids(features)
  features.update(dynamic_masking.mask_batch(
      original_ids, features["input_mask"], uniforms, random_ids,
      spec.masking))
  return features


def pretraining_input_fn_builder(input_files, spec, is_training,
                                 global_batch_size, num_replicas,
                                 deterministic=False, num_cpu_threads=4,
                                 start_step_fn=None):
  """Returns an Estimator input_fn over pretraining TFRecords.

  Records are read epoch after epoch, each tagged with its epoch (from 0),
  which keys the masks drawn here (dynamic_masking) so that every epoch
  masks an example anew. A run resuming at global step n skips what the
  first n steps consumed (`resume_point`), so that it reads, and masks,
  what the uninterrupted run would have; exactly so when `deterministic`.

  Args:
    input_files: list of TFRecord paths.
    spec: the `PretrainingInput`: what the records hold, which masks.
    is_training: shuffle and repeat forever if True; one ordered pass if not.
    global_batch_size: examples per step over all replicas.
    num_replicas: replicas in sync; the dataset yields per-replica batches.
    deterministic: keep file and record order fixed (for reproducible runs
      and tests) instead of upstream's sloppy parallel interleave.
    num_cpu_threads: parallel readers / parsers.
    start_step_fn: returns the global step training resumes from (called
      when the input_fn is); None: always from the start.

  Returns:
    input_fn(params, input_context=None) -> tf.data.Dataset of feature dicts
    with int32 [B, S] / [B, P] (and, packed, [B, N]) tensors, B = per-replica
    batch of rows.
  """
  per_replica_batch = global_batch_size // num_replicas
  shuffle = is_training and not deterministic
  key = masking_key(is_training, spec.masking_seed)

  def input_fn(params=None, input_context=None):
    del params
    # One pipeline per worker (or horovod rank): each reads its own files,
    # or its own records of fewer files than workers.
    share = process_share(input_files, input_context)
    first_epoch, records_to_skip = 0, 0
    step = (start_step_fn() if is_training and start_step_fn is not None
            else 0)
    if step:
      first_epoch, records_to_skip = resume_point(
          step, per_replica_batch, share,
          sum(check_tfrecord_framing(path) for path in share.files))
    dataset = read_records(
        share.files, tf.data.Dataset.range(first_epoch, 2**62)
        if is_training else tf.data.Dataset.range(1), shuffle,
        num_cpu_threads)
    if records_to_skip:
      dataset = dataset.skip(records_to_skip)
    if share.by_record:
      dataset = dataset.shard(share.num_pipelines, share.pipeline_id)
    if shuffle:
      dataset = dataset.shuffle(buffer_size=100)
    dataset = dataset.map(lambda epoch, record: decode_example(
        epoch, record, spec, key), num_parallel_calls=num_cpu_threads)
    # Whole batches only: every replica must see the same batch shape.
    dataset = dataset.batch(per_replica_batch, drop_remainder=True)
    if spec.masking is not None:
      dataset = dataset.map(lambda features: mask_examples(features, spec),
                            num_parallel_calls=num_cpu_threads)
    return with_fixed_tuning(dataset.prefetch(tf.data.AUTOTUNE))

  return input_fn


def classifier_feature_spec(seq_length):
  """The tf.io parsing spec of run_classifier's train/eval/predict records."""
  return {
      "input_ids": tf.FixedLenFeature([seq_length], tf.int64),
      "input_mask": tf.FixedLenFeature([seq_length], tf.int64),
      "segment_ids": tf.FixedLenFeature([seq_length], tf.int64),
      "label_ids": tf.FixedLenFeature([], tf.int64),
      "is_real_example": tf.FixedLenFeature([], tf.int64),
  }


def records_input_fn(input_file, feature_spec, is_training, drop_remainder,
                     global_batch_size, num_replicas=1, shuffle_seed=None):
  """Returns an Estimator input_fn over the records of a fine-tuning task.

  Args:
    input_file: the TFRecord file(s) the task wrote.
    feature_spec: the records' parsing spec (classifier_feature_spec, or
      the task's own).
    is_training: repeat forever and shuffle (buffer of 100, as upstream) if
      True; one ordered pass if False, so predictions line up with the file.
    drop_remainder: drop a last partial batch. Eval and predict files are
      padded to whole batches, so nothing real is ever dropped.
    global_batch_size: examples per step over all replicas.
    num_replicas: replicas in sync; the dataset yields per-replica batches.
    shuffle_seed: op seed of the training shuffle; None leaves it to the
      graph-level seed (--tf_random_seed), deterministic when that is set.

  Returns:
    input_fn(params, input_context=None) -> tf.data.Dataset of the
    feature dicts feature_spec names, int64 features as int32; [B, ...],
    B = per-replica batch.
  """
  per_replica_batch = global_batch_size // num_replicas

  def input_fn(params=None, input_context=None):
    del params
    dataset = tf.data.TFRecordDataset(input_file)
    if input_context is not None and shards_by_record(
        1, input_context.num_input_pipelines):
      # One file, several workers (or horovod ranks): each reads its own
      # share of the records.
      dataset = dataset.shard(input_context.num_input_pipelines,
                              input_context.input_pipeline_id)
    if is_training:
      dataset = dataset.repeat().shuffle(buffer_size=100, seed=shuffle_seed)
    dataset = dataset.map(lambda r: decode_record(r, feature_spec))
    dataset = dataset.batch(per_replica_batch, drop_remainder=drop_remainder)
    return with_fixed_tuning(dataset.prefetch(tf.data.AUTOTUNE))

  return input_fn


def records_input_fn_maker(feature_spec):
  """The runner's make_input_fn over fine-tuning records of `feature_spec`:
  shuffled and repeated for training, one ordered pass otherwise
  (records_input_fn)."""

  def make_input_fn(files, mode, global_batch_size, num_replicas):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    return records_input_fn(
        files, feature_spec, is_training=is_training,
        drop_remainder=is_training, global_batch_size=global_batch_size,
        num_replicas=num_replicas)
  return make_input_fn
