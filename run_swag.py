# coding=utf-8
"""BERT fine-tuning for multiple choice (SWAG) with tf.estimator.

Run by the task runner (bertkit/engine/loop/runner.py) as run_classifier.py is:
one device, MirroredStrategy, MultiWorkerMirroredStrategy,
CentralStorageStrategy, horovod or BytePS, --use_fp16, --use_bf16, gradient
accumulation, preemption, throughput logs, a run summary.
`--train_batch_size` is the global batch of examples (each C sequences)
over all replicas.

Its options (flags): bertkit/tasks/swag/options.py, the fine-tuning ones and
the runner's; the task: bertkit/tasks/swag/data.py (reading, encoding each
choice with its context) and task.py (head, loss, records, outputs), run by
the fine-tuning driver (bertkit/tasks/fine_tuning/driver.py).

Files read from --data_dir (each split: the first name present):
  train  train.csv or train.jsonl                     (--do_train)
  dev    val.csv, dev.csv, val.jsonl or dev.jsonl     (--do_eval)
  test   test.csv or test.jsonl                       (--do_predict;
                                                       labels optional)
SWAG's CSV (sent1, sent2, ending0..3, label; SWAG's header) or JSONL lines
{"question", "choices", "label"}. Each choice is encoded as
[CLS] sent1 [SEP] sent2 + ending [SEP] (JSONL: [CLS] question [SEP] choice
[SEP]); every example of a run has the same number of choices C.

Outputs in --output_dir (besides checkpoints and throughput logs):
  train.tf_record, eval.tf_record, predict.tf_record  the examples.
  dev_results.tsv, test_results.tsv  one line per example, in file order:
                    the C choice probabilities, tab-separated.
  eval_results.txt  `name = value` lines: eval_accuracy, eval_loss (dev),
                    test_accuracy, test_loss (a labelled test set),
                    global_step.
Dev and test are predicted at --predict_batch_size.
"""

from bertkit.common import programs
from bertkit.tasks.swag.options import MultipleChoiceOptions


def run(opts):
  """Fine-tunes, evaluates and predicts multiple choice as `opts`
  (MultipleChoiceOptions) say."""
  # pylint: disable=g-import-not-at-top
  from bertkit.tasks.fine_tuning import driver
  driver.check_inputs(opts)  # before TensorFlow is imported
  from bertkit.tasks.swag import task
  driver.run(task.TASK, opts)


if __name__ == "__main__":
  programs.main(MultipleChoiceOptions, run)
