"""Reading TFRecords for an Estimator, under any strategy: pretraining's
(masked, unmasked, packed) and every fine-tuning task's (records_input_fn).

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

The checks of the files themselves (framing, record kinds and lengths,
corrupt records) are record_checks'.
"""

import dataclasses
from typing import Optional, Tuple

import tensorflow.compat.v1 as tf
from tensorflow.python.data.ops import multi_device_iterator_ops  # pylint: disable=g-direct-tensorflow-import

from bertkit.data import pretraining_records
from bertkit.engine.input import dynamic_masking
from bertkit.engine.input import record_checks


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


def checkpoint_step(model_dir):
  """The global step of `model_dir`'s latest checkpoint (0 without one)."""
  latest = tf.train.latest_checkpoint(model_dir)
  if not latest:
    return 0
  return int(tf.train.load_variable(latest, "global_step"))


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
    max_sequences_per_pack: N, for packed rows
      (record_checks.check_pretraining_records tells); None for upstream's
      records.
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


def graph_function(function):
  """`function` for tf.data to trace as it is written.

  tf.data runs what it is given through autograph, which rewrites Python
  control flow on tensors; the input functions here have none (they are
  graph code), and the rewriting cost the start-up of every run most of a
  second.
  """
  return tf.autograph.experimental.do_not_convert(function)


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
    return names.map(graph_function(lambda name: (epoch, name)))

  dataset = epochs.flat_map(graph_function(epoch_files))
  if shuffle:
    return dataset.interleave(
        graph_function(_tagged_records),
        cycle_length=min(cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
  return dataset.flat_map(graph_function(_tagged_records))


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
          sum(record_checks.check_tfrecord_framing(path)
              for path in share.files))
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
    dataset = dataset.map(graph_function(lambda epoch, record: decode_example(
        epoch, record, spec, key)), num_parallel_calls=num_cpu_threads)
    # Whole batches only: every replica must see the same batch shape.
    dataset = dataset.batch(per_replica_batch, drop_remainder=True)
    if spec.masking is not None:
      dataset = dataset.map(
          graph_function(lambda features: mask_examples(features, spec)),
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
    dataset = dataset.map(graph_function(
        lambda r: decode_record(r, feature_spec)))
    dataset = dataset.batch(per_replica_batch, drop_remainder=drop_remainder)
    return with_fixed_tuning(dataset.prefetch(tf.data.AUTOTUNE))

  return input_fn


def records_input_fn_maker(feature_spec, training_features=None):
  """The runner's make_input_fn over fine-tuning records of `feature_spec`:
  shuffled and repeated for training, one ordered pass otherwise
  (records_input_fn). `training_features`: the spec of features only the
  training records hold (a student's teacher outputs)."""

  def make_input_fn(files, mode, global_batch_size, num_replicas):
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    spec = dict(feature_spec, **(training_features or {})) if is_training \
        else feature_spec
    return records_input_fn(
        files, spec, is_training=is_training,
        drop_remainder=is_training, global_batch_size=global_batch_size,
        num_replicas=num_replicas)
  return make_input_fn
