# coding=utf-8
"""Distillation, for every fine-tuning task: a student trained on a
teacher's outputs (docs/distillation.md).

A task says only what its logits are and its hard per-example losses; the
rules are here, once:

  * soft targets: the teacher's distribution at temperature T, and the
    student's KL divergence from it at T, times T^2 (Hinton et al., 2015:
    the gradients keep their size as T changes). It is the soft
    cross-entropy less the teacher's entropy, which the student cannot
    change: the same gradients, and 0 when the student matches;
  * a regression head (STS-B; one output) learns the teacher's score by
    the squared error;
  * where an example has a label, the loss is (1 - w) x hard + w x soft
    with w = --distillation_weight; an unlabelled example (a transfer set's
    row) has the soft loss alone. With w = 0 a labelled example's loss is
    its hard loss exactly (hard x 1 + soft x 0), so the run equals
    ordinary fine-tuning;
  * the teacher's outputs travel in the student's records, as the features
    `teacher_logits` (float32, the example's logits flattened) and
    `has_label` (int64, 1 for a labelled example).

Margin-MSE (Hofstätter et al., 2020) is the re-ranker's soft loss: the
squared error between the student's and the teacher's margins, positive
passage score minus negative, of each (query, positive, negative) triple
(both scores logits).

Shape notation: X = examples, C = classes; [...] any leading shape.
"""

import dataclasses
from typing import List, Optional

import numpy as np
import tensorflow.compat.v1 as tf

from bertkit.data import pretraining_records
from bertkit.tasks.fine_tuning.teacher_outputs import HAS_LABEL
from bertkit.tasks.fine_tuning.teacher_outputs import TEACHER_LOGITS


@dataclasses.dataclass(frozen=True)
class Distillation:
  """A student run's distillation (--teacher_outputs).

  Attributes:
    temperature: T of the soft targets.
    weight: w, the soft loss's share on labelled examples.
    teacher: the teacher's logits of each training example, in file order
      (teacher_outputs.read).
  """
  temperature: float
  weight: float
  teacher: Optional[List[np.ndarray]] = None


def soft_losses(student_logits, teacher_logits, temperature):
  """Hinton's soft loss of each example: T^2 KL(teacher_T || student_T).

  Args:
    student_logits, teacher_logits: float [..., C].
    temperature: T > 0.

  Returns:
    float32 [...]: sum_c p_c (log p_c - log q_c) x T^2, p the teacher's
    softmax of logits / T, q the student's.
  """
  teacher_log_p = tf.nn.log_softmax(
      tf.cast(teacher_logits, tf.float32) / temperature, axis=-1)
  student_log_q = tf.nn.log_softmax(
      tf.cast(student_logits, tf.float32) / temperature, axis=-1)
  return (temperature ** 2) * tf.reduce_sum(
      tf.exp(teacher_log_p) * (teacher_log_p - student_log_q), axis=-1)


def score_losses(student_scores, teacher_scores):
  """A regression head's soft loss: the squared error to the teacher's
  score, [...] of [...]."""
  return tf.square(tf.cast(student_scores, tf.float32) -
                   tf.cast(teacher_scores, tf.float32))


def margin_mse(student_positive, student_negative, teacher_positive,
               teacher_negative):
  """Margin-MSE (Hofstätter et al., 2020) of (query, positive, negative)
  triples: the mean over the X triples of ((s+ - s-) - (t+ - t-))^2.

  Args:
    student_positive, student_negative: the student's scores [X] of each
      query's positive and negative passage.
    teacher_positive, teacher_negative: the teacher's scores [X] of the
      same pairs (teacher_outputs' per-pair `score`).

  Returns:
    The float32 scalar loss.
  """
  return tf.reduce_mean(margin_losses(
      tf.stack([student_positive, student_negative], -1),
      tf.stack([teacher_positive, teacher_negative], -1)))


def margin_losses(student_scores, teacher_scores):
  """Margin-MSE of each triple: float32 [X] of scores [X, 2] (positive,
  negative) of the student and the teacher."""
  student_margin = tf.cast(student_scores[..., 0] - student_scores[..., 1],
                           tf.float32)
  teacher_margin = tf.cast(teacher_scores[..., 0] - teacher_scores[..., 1],
                           tf.float32)
  return tf.square(student_margin - teacher_margin)


def per_example_losses(hard_losses, logits, features, distill,
                       regression=False, margin=False):
  """The training loss of each example (or token) of a student.

  Args:
    hard_losses: float32 [X, ...]: the task's loss against its labels
      (computed for unlabelled examples too, from a placeholder label; they
      are weighted 0 here).
    logits: float [X, ..., C]: the student's logits of the same examples
      (regression: [X, 1], the score).
    features: the batch's features, holding TEACHER_LOGITS [X, ...] (the
      teacher's logits flattened per example) and HAS_LABEL [X].
    distill: the run's Distillation, or None: `hard_losses` as they are.
    regression: the head regresses its one output.
    margin: the examples are triples whose logits [X, 2] are the scores of
      the positive and the negative pair: the soft loss is Margin-MSE.

  Returns:
    float32 [X, ...].
  """
  if distill is None:
    return hard_losses
  teacher = tf.reshape(features[TEACHER_LOGITS], tf.shape(logits))
  if margin:
    soft = margin_losses(logits, teacher)
  elif regression:
    soft = score_losses(logits[..., 0], teacher[..., 0])
  else:
    soft = soft_losses(logits, teacher, distill.temperature)
  # [X] -> [X, 1, ...]: one flag per example, over its tokens.
  labelled = tf.reshape(tf.cast(features[HAS_LABEL], tf.float32),
                        [-1] + [1] * (hard_losses.shape.ndims - 1))
  return (labelled * ((1.0 - distill.weight) * hard_losses +
                      distill.weight * soft) + (1.0 - labelled) * soft)


def feature_spec(shape):
  """The records' features of the teacher, [X, *shape] logits per batch."""
  return {TEACHER_LOGITS: tf.FixedLenFeature(list(shape), tf.float32),
          HAS_LABEL: tf.FixedLenFeature([], tf.int64)}


def record_features(teacher_logits, labelled):
  """The teacher's features of one example's tf.train.Example.

  Args:
    teacher_logits: its logits, any shape (flattened).
    labelled: whether the example has a label.

  Returns:
    {name: tf.train.Feature}.
  """
  return {TEACHER_LOGITS: pretraining_records.float_feature(
      np.asarray(teacher_logits, np.float32).ravel().tolist()),
          HAS_LABEL: pretraining_records.int_feature([int(bool(labelled))])}
