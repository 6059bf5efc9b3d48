# coding=utf-8
"""The classifier task: its head, the model_spec.ModelSpec, its records, and its
description for the fine-tuning driver (ClassificationFineTuning).

The head is upstream's: dropout, then one dense layer `output_weights`
[C, H], `output_bias` [C] (top-level names, as upstream's checkpoints) over
BERT's pooled [CLS] output, softmax cross-entropy. With one output
(num_labels 1, STS-B) the head regresses: the output is the score, the loss
the squared error (Hugging Face's num_labels=1). Packed rows
(classification/packing.py) give one pooled output per example. The data it
reads is made by classification/features.py.
"""

import dataclasses
import functools
from typing import Optional

from absl import logging
import tensorflow.compat.v1 as tf

from bertkit.common import heads
from bertkit.common.errors import UserError
from bertkit.engine.checkpointing import checkpoint_formats
from bertkit.engine.distributed import distribution
from bertkit.engine.input import input_pipeline
from bertkit.engine.loop import model_spec
from bertkit.engine.loop import runner
from bertkit.tasks.classification import data as classifier_data
from bertkit.tasks.classification import features as classifier_features
from bertkit.tasks.classification import glue_outputs
from bertkit.tasks.classification import outputs as classifier_outputs
from bertkit.tasks.classification import packing as classifier_packing
from bertkit.tasks.classification import processors as classifier_processors
from bertkit.tasks.classification import registry as task_registry
from bertkit.tasks.fine_tuning import distillation
from bertkit.tasks.fine_tuning import driver
import modeling


# Size: upstream's eight parameters first, so that its callers keep working;
# the four optional ones are the packed-row inputs, passed by keyword as
# classifier_packing.model_inputs names them.
def create_model(bert_config, is_training, input_ids, input_mask, segment_ids,
                 labels, num_labels, use_one_hot_embeddings=False,
                 sequence_ids=None, position_ids=None, cls_positions=None,
                 example_weights=None):
  """A classification head on BERT's pooled [CLS] output.

  Args:
    bert_config: BertConfig.
    is_training: enables dropout.
    input_ids, input_mask, segment_ids: int32 [B, S].
    labels: int32 [B] label ids ([B*N] for packed rows); float32 [B]
      scores for regression.
    num_labels: number of classes C; 1: regression (mean squared error).
    use_one_hot_embeddings: see modeling.BertModel.
    sequence_ids, position_ids, cls_positions: packed rows of up to N
      examples (classifier_packing.model_inputs); X = B*N examples then.
    example_weights: float32 [X]: the loss is the weighted mean (0.0 for
      an empty slot); None: the plain mean.

  Returns:
    (mean loss, per_example_loss [X], logits [X, C], probabilities [X, C]),
    X = B unpacked; for regression the last is the predicted score [X].
  """
  # An explicit scope: a second micro-batch's model reuses bert/..., not
  # bert_1/...
  model = modeling.BertModel(
      config=bert_config, is_training=is_training, input_ids=input_ids,
      input_mask=input_mask, token_type_ids=segment_ids,
      use_one_hot_embeddings=use_one_hot_embeddings, scope="bert",
      sequence_ids=sequence_ids, position_ids=position_ids,
      cls_positions=cls_positions)
  output_layer = model.get_pooled_output()
  hidden_size = output_layer.shape[-1]
  if cls_positions is not None:
    output_layer = tf.reshape(output_layer, [-1, hidden_size])
  # Top-level names, as upstream: classifier checkpoints stay interchangeable.
  weights_name, bias_name = heads.CLASSIFIER.variables
  output_weights = tf.get_variable(
      weights_name, [num_labels, hidden_size],
      initializer=modeling.create_initializer(bert_config.initializer_range))
  output_bias = tf.get_variable(bias_name, [num_labels],
                                initializer=tf.zeros_initializer())
  with tf.variable_scope("loss"):
    if is_training:
      output_layer = tf.nn.dropout(output_layer, rate=0.1)
    logits = tf.matmul(output_layer, output_weights, transpose_b=True)
    logits = tf.nn.bias_add(logits, output_bias)
    if num_labels == 1:
      probabilities = logits[:, 0]
      per_example_loss = tf.square(probabilities -
                                   tf.cast(labels, tf.float32))
    else:
      probabilities = tf.nn.softmax(logits, axis=-1)
      per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
          labels=labels, logits=logits)
    if example_weights is None:
      loss = tf.reduce_mean(per_example_loss)
    else:
      loss = tf.reduce_sum(example_weights * per_example_loss) / tf.maximum(
          tf.reduce_sum(example_weights), 1.0)
  return loss, per_example_loss, logits, probabilities



def serving_outputs(bert_config, input_ids, input_mask, segment_ids,
                    num_labels):
  """export_checkpoint's SavedModel outputs (heads.CLASSIFIER.serving):
  probabilities [B, C], or predictions [B] of a regression head (one output,
  STS-B): its score."""
  _, _, _, probabilities = create_model(
      bert_config, False, input_ids, input_mask, segment_ids,
      tf.zeros_like(input_ids[:, 0]), num_labels)
  return ({"predictions": probabilities} if num_labels == 1 else
          {"probabilities": probabilities})


def build_classifier_variables(bert_config, num_labels):
  """Creates every trainable variable of the classifier (B=1, S=2)."""
  ids = tf.zeros([1, 2], tf.int32)
  create_model(bert_config, False, ids, ids, ids,
               tf.zeros([1], tf.float32 if num_labels == 1 else tf.int32),
               num_labels)


def classifier_metrics(per_example_loss, label_ids, logits, is_real_example):
  """Accuracy and mean loss over the real (not padding) examples; the mean
  loss alone for regression (logits [X, 1])."""
  weights = tf.cast(is_real_example, tf.float32)
  metrics = {"eval_loss": tf.metrics.mean(values=per_example_loss,
                                          weights=weights)}
  if logits.shape[-1] != 1:
    metrics["eval_accuracy"] = tf.metrics.accuracy(
        labels=label_ids,
        predictions=tf.argmax(logits, axis=-1, output_type=tf.int32),
        weights=weights)
  return metrics


def classifier_model_spec(bert_config, num_labels, distill=None):
  """Classification as a model_spec.ModelSpec: the head's mean cross-entropy
  over the real examples (of packed rows too: classification/packing.py);
  eval accuracy and loss over them; class probabilities and logits. With
  num_labels 1, regression: the mean squared error, eval loss, the
  predicted scores ("predictions", unpacked rows only). With a
  distillation.Distillation (unpacked rows), the training loss is the mean
  of its per-example losses."""

  def model(features, is_training):
    """create_model's outputs, the labels [X] and the example weights [X]."""
    if classifier_packing.is_packed(features):
      packed = classifier_packing.model_inputs(features)
      return (create_model(bert_config, is_training, features["input_ids"],
                           features["input_mask"], features["segment_ids"],
                           num_labels=num_labels, **packed),
              packed["labels"], packed["example_weights"])
    return (create_model(bert_config, is_training, features["input_ids"],
                         features["input_mask"], features["segment_ids"],
                         features["label_ids"], num_labels),
            features["label_ids"], features["is_real_example"])

  def mean_train_loss(features):
    (loss, per_example_loss, logits, _), _, _ = model(features, True)
    if distill is None:
      return loss
    return tf.reduce_mean(distillation.per_example_losses(
        per_example_loss, logits, features, distill, num_labels == 1))

  unpacked_loss_fns = model_spec.mean_loss_shares(mean_train_loss)

  def train_loss_fns(features, num_micro_batches):
    if not classifier_packing.is_packed(features):
      return unpacked_loss_fns(features, num_micro_batches)
    # Packed rows hold varying numbers of examples: each micro-batch divides
    # its weighted sum by the global batch's number of examples.
    count = tf.maximum(distribution.global_sum(tf.stop_gradient(
        tf.reduce_sum(features["label_weights"]))), 1.0)

    def loss_fn(index, micro_batch):
      with model_spec.reusing_variables(index):
        (_, per_example_loss, _, _), _, weights = model(micro_batch, True)
      return tf.reduce_sum(weights * per_example_loss) / count

    return [functools.partial(loss_fn, i, micro_batch) for i, micro_batch
            in enumerate(model_spec.split_micro_batches(features,
                                                    num_micro_batches))]

  def eval_outputs(features):
    (loss, per_example_loss, logits, _), labels, weights = model(features,
                                                                 False)
    return loss, classifier_metrics(per_example_loss, labels, logits,
                                    weights)

  def predictions(features):
    (_, _, logits, probabilities), _, _ = model(features, False)
    if num_labels == 1:
      return {"predictions": probabilities, "logits": logits}
    if not classifier_packing.is_packed(features):
      return {"probabilities": probabilities, "logits": logits}
    per_row = [-1, features["cls_positions"].shape[-1], num_labels]
    return {"probabilities": tf.reshape(probabilities, per_row),
            "logits": tf.reshape(logits, per_row),
            "example_index": features["example_index"]}

  return model_spec.ModelSpec(
      variable_shapes=lambda: checkpoint_formats.variable_shapes(
          bert_config, heads.CLASSIFIER, num_labels),
      train_loss_fns=train_loss_fns, eval_outputs=eval_outputs,
      predictions=predictions)


def model_fn_builder(bert_config, num_labels, init_checkpoint, learning_rate,
                     num_train_steps, num_warmup_steps, optimizer=None,
                     num_accumulation_steps=1):
  """Returns the Estimator model_fn for classification.

  Args:
    bert_config: BertConfig.
    num_labels: number of classes.
    init_checkpoint: checkpoint (prefix or directory) to start from, or None.
    learning_rate: peak learning rate.
    num_train_steps: optimizer updates of the whole run.
    num_warmup_steps: warm-up updates.
    optimizer: the rest of the update, an options.OptimizerOptions (None:
      upstream's).
    num_accumulation_steps: micro-batches per update.
  """
  return model_spec.upstream_model_fn(
      classifier_model_spec(bert_config, num_labels), init_checkpoint,
      learning_rate, num_train_steps, num_warmup_steps, optimizer,
      num_accumulation_steps)


# Size: upstream's records, and a student's teacher outputs (`distill`).
def write_inputs(is_chief, output_dir, examples, label_list, tokenizer,
                 max_seq_length, eval_batch_size, predict_batch_size,
                 max_sequences_per_pack=None, packed_train=None, distill=None):
  """Writes labels.txt (chief) and the records of each requested split.

  Args:
    is_chief: this process writes labels.txt.
    output_dir: where the files go.
    examples: {split: InputExamples}: "train", "dev" and "test" (written
      to train, eval and predict.tf_record), and further dev or test sets
      named "dev_X" or "test_X" (eval_dev_X, predict_test_X.tf_record).
    label_list: the task's labels.
    tokenizer: the FullTokenizer.
    max_seq_length: S.
    eval_batch_size, predict_batch_size: dev and test sets are padded to
      whole batches of these.
    max_sequences_per_pack: pack rows of up to this many examples, or None.
    packed_train: the training split's packed rows, when they were packed
      before (features.pack_examples), or None.
    distill: a distillation.Distillation: the training records hold each
      example's teacher logits.

  Returns:
    ({split: [record file]}, {split: number of records}) of the splits in
    `examples`.
  """
  if is_chief:
    driver.write_labels(output_dir, label_list)
  files, counts = {}, {}
  for split in sorted(examples, key=lambda s: s != "dev"):
    batch_size = None if split == "train" else (
        eval_batch_size if split.startswith("dev") else predict_batch_size)
    extra = None
    if split == "train" and distill is not None:
      extra = [distillation.record_features(teacher, example.label is not None)
               for example, teacher in zip(examples[split], distill.teacher)]
    path, counts[split] = classifier_features.write_features(
        driver.record_file(output_dir, split), examples[split],
        label_list, max_seq_length, tokenizer, batch_size,
        max_sequences_per_pack, packed_train if split == "train" else None,
        extra)
    files[split] = [path]
  return files, counts


def feature_spec(max_seq_length, max_sequences_per_pack=None,
                 regression=False):
  """The records' parsing spec: packed rows of up to max_sequences_per_pack
  examples when given; float scores as labels with `regression`."""
  if max_sequences_per_pack:
    return classifier_packing.feature_spec(max_seq_length,
                                           max_sequences_per_pack)
  spec = input_pipeline.classifier_feature_spec(max_seq_length)
  if regression:
    spec["label_ids"] = tf.FixedLenFeature([], tf.float32)
  return spec


def input_fn_maker(max_seq_length, max_sequences_per_pack=None,
                   regression=False, num_teacher_outputs=None):
  """The runner's make_input_fn over classifier records (feature_spec; a
  student's training records also hold their teacher logits
  [num_teacher_outputs] when given)."""
  return input_pipeline.records_input_fn_maker(
      feature_spec(max_seq_length, max_sequences_per_pack, regression),
      num_teacher_outputs and distillation.feature_spec(
          [num_teacher_outputs]))


@dataclasses.dataclass(frozen=True)
class ClassifierInputs:
  """What a run reads.

  Attributes:
    label_list: the task's labels.
    examples: {split: InputExamples} of the splits its stages need
      ("train", "dev", "test", and a GLUE task's further sets).
    glue_task: the registry name of a GLUE task, else None.
  """
  label_list: list
  examples: dict
  glue_task: Optional[str]


def glue_task(task_name):
  """The registry name of --task_name when it is a GLUE task, else None."""
  task = task_registry.get(task_name)
  return task.name if task.is_glue else None


def wanted_splits(opts):
  """The processor splits the --do_* options read: train, dev and test, and
  the further dev and test sets of a GLUE task (MNLI's mismatched)."""
  glue = (task_registry.get(opts.task_name) if glue_task(opts.task_name)
          else None)
  splits = ["train"] if opts.do_train else []
  if opts.do_eval:
    # ax has no dev set: reading "dev" refuses --do_eval with one line.
    dev_sets = [split for _, split in glue.dev_sets] if glue else []
    splits += dev_sets or ["dev"]
  if opts.do_predict:
    splits += [split for _, split in glue.test_sets] if glue else ["test"]
  return splits


def read_split(processor, split, opts):
  """The InputExamples of one split: --data_dir's, or the --train_file or
  --predict_file given for it (a transfer set's rows may be unlabelled:
  always in a predicted file, with --teacher_outputs in a training file)."""
  data_dir = opts.data_dir
  given = {"train": opts.train_file, "test": opts.predict_file}.get(split)
  if given:
    return classifier_data.read_file(
        processor, given, split == "test" or bool(opts.teacher_outputs))
  read = {"train": processor.get_train_examples,
          "dev": processor.get_dev_examples,
          "test": processor.get_test_examples}.get(split)
  if read is None:
    return processor.get_split_examples(data_dir, split)
  return read(data_dir)


class ClassificationFineTuning(driver.FineTuningTask):
  """Sentence (pair) classification and regression: GLUE, XNLI, any tsv,
  query/passage re-ranking (run_classifier.py's docstring). A GLUE task adds
  its metrics, results and submission files (glue_outputs.py)."""
  head = heads.CLASSIFIER

  def read(self, opts):
    processor = classifier_processors.make_processor(
        opts.task_name, opts.data_dir, classifier_data.TsvOptions(
            opts.text_a_column, opts.label_column, opts.text_b_column,
            opts.tsv_has_header, opts.labels))
    examples = {split: read_split(processor, split, opts)
                for split in wanted_splits(opts)}
    label_list = processor.get_labels()
    if opts.pack_sequences and classifier_data.is_regression(label_list):
      raise UserError("--pack_sequences is for classification; task %s "
                      "regresses" % opts.task_name)
    if opts.pack_sequences and opts.teacher_outputs:
      raise UserError("--teacher_outputs trains on unpacked rows; leave out "
                      "--pack_sequences")
    logging.info("Task %s, labels %s", opts.task_name, label_list)
    # A file given to predict is not the GLUE task's own test set.
    return ClassifierInputs(label_list, examples, None if opts.predict_file
                            else glue_task(opts.task_name))

  def model_spec(self, bert_config, inputs, distill):
    return classifier_model_spec(bert_config, len(inputs.label_list), distill)

  def training_set(self, opts, inputs, tokenizer):
    """The training examples, or with --pack_sequences their packed rows
    (packed here, written by write_records)."""
    train = inputs.examples["train"]
    if not opts.pack_sequences:
      return driver.TrainingSet(len(train))
    rows, report = classifier_features.pack_examples(
        train, inputs.label_list, opts.max_seq_length, tokenizer,
        opts.max_sequences_per_pack)
    return driver.TrainingSet(len(rows), "packed rows", (rows, report))

  def write_records(self, opts, inputs, tokenizer, is_chief, training,
                    distill):
    per_pack = opts.max_sequences_per_pack if opts.pack_sequences else None
    files, counts = write_inputs(
        is_chief, opts.run.output_dir, inputs.examples, inputs.label_list,
        tokenizer, opts.max_seq_length, opts.eval_batch_size,
        opts.predict_batch_size, per_pack, training and training.computed,
        distill)
    glue_run = inputs.glue_task and glue_outputs.GlueRun(
        inputs.glue_task, inputs.label_list, inputs.examples, files, counts,
        per_pack is not None)
    if glue_run and is_chief:
      glue_run.remove_stale_results(opts.run.output_dir)
    train = len(inputs.examples.get("train", ()))
    return driver.Records(
        files, "%d examples%s" % (
            train, " in %d packed rows" % counts["train"] if per_pack and
            train else ""), glue_run)

  def input_fn_maker(self, opts, inputs, distill):
    return input_fn_maker(
        opts.max_seq_length,
        opts.max_sequences_per_pack if opts.pack_sequences else None,
        classifier_data.is_regression(inputs.label_list),
        len(inputs.label_list) if distill else None)

  def example_rows(self, inputs, split):
    return [(example.line, (len(inputs.label_list),))
            for example in inputs.examples[split]]

  def predicted_rows(self, inputs, records, predictions):
    if records.details is not None:  # a GLUE run's dev and test sets
      return None
    examples = inputs.examples["test"]
    return classifier_outputs.teacher_rows(
        examples, classifier_outputs.outputs_in_input_order(
            predictions, len(examples), "example_index" in predictions[0],
            "logits"),
        isinstance(examples[0], classifier_data.RankingExample))

  def evaluation(self, opts, inputs, records):
    return runner.EvalStage(
        files=records.files.get("dev"), batch_size=opts.eval_batch_size,
        message="***** Eval: %d examples, batch %d *****" % (
            len(inputs.examples.get("dev", ())), opts.eval_batch_size))

  def prediction(self, opts, inputs, records, model):
    """The test set; a GLUE task's dev and test sets (glue_outputs)."""
    glue_run = records.details
    if glue_run is None:
      return runner.PredictStage(
          files=records.files.get("test"),
          batch_size=opts.predict_batch_size,
          message="***** Predict: %d examples, batch %d *****" % (
              len(inputs.examples.get("test", ())), opts.predict_batch_size),
          use_predictions=functools.partial(
              classifier_outputs.write_predictions, opts.run.output_dir,
              inputs.examples.get("test"), inputs.label_list,
              opts.task_name.lower() == "rerank", opts.pack_sequences))
    return runner.PredictStage(
        files=glue_run.prediction_files() or None,
        batch_size=opts.predict_batch_size,
        message="***** Predict: %d dev and %d test examples, batch %d *****"
        % (sum(len(s.examples) for s in glue_run.dev_sets),
           sum(len(s.examples) for s in glue_run.test_sets),
           opts.predict_batch_size),
        use_predictions=functools.partial(glue_run.use_predictions,
                                          opts.run.output_dir))

  def finish(self, opts, inputs, records, is_chief):
    if records.details is not None and is_chief:
      records.details.write_results(opts.run.output_dir)


TASK = ClassificationFineTuning()
