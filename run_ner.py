# coding=utf-8
"""BERT fine-tuning for named-entity recognition (token classification).

Run by the task runner (bertkit/engine/loop/runner.py) as run_classifier.py is:
one device, MirroredStrategy, MultiWorkerMirroredStrategy,
CentralStorageStrategy, horovod or BytePS, --use_fp16, --use_bf16, gradient
accumulation, preemption, throughput logs, a run summary.
`--train_batch_size` is the global batch (of windows) over all replicas.

Its options (flags): bertkit/tasks/ner/options.py, the fine-tuning ones and
the runner's; the task: bertkit/tasks/ner/data.py (files, IOB, windows, the
CoNLL output, seqeval's metrics) and task.py (head, loss, records, outputs),
run by the fine-tuning driver (bertkit/tasks/fine_tuning/driver.py).

Files read from --data_dir (each split: the first name present):
  train  train.txt or eng.train            (--do_train)
  dev    dev.txt, valid.txt or eng.testa   (--do_eval)
  test   test.txt or eng.testb             (--do_predict; its gold tags
                                            are scored too)
CoNLL-2003's files as distributed (`token POS chunk NER` columns,
`-DOCSTART-` lines, a blank line after each sentence) or `token<TAB>tag`
lines; IOB1 or IOB2 tags, read as IOB2. Labels: --labels, else O and the
B-/I- tags of train's entity types (types sorted), else (no --do_train) the
labels.txt of --output_dir.

Each word's first WordPiece carries its label, the other pieces none; a
sentence longer than --max_seq_length - 2 pieces is cut between words into
several windows, so every word is predicted once.

Outputs in --output_dir (besides checkpoints and throughput logs):
  labels.txt        the labels in output order (export_checkpoint reads it).
  train.tf_record, eval.tf_record, predict.tf_record  the windows.
  dev_predictions.txt, test_predictions.txt  `token gold predicted` lines,
                    a blank line after each sentence (conlleval's input).
  eval_results.txt  `name = value` lines: eval_* of dev, test_* of test:
                    precision, recall, f1, support (entity level, seqeval's
                    default mode = conlleval's rules; overall the micro
                    average), the same per type (eval_PER_f1, ...), loss and
                    accuracy (token level, first pieces); global_step.
  eval_results.json the same figures as {"dev": {..., "types": {"PER":
                    {...}}}, "test": {...}}.
Dev and test are predicted at --predict_batch_size.
"""

from bertkit.common import programs
from bertkit.tasks.ner.options import NerOptions


def run(opts):
  """Fine-tunes, evaluates and predicts named entities as `opts` (NerOptions)
  say."""
  # pylint: disable=g-import-not-at-top
  from bertkit.tasks.fine_tuning import driver
  driver.check_inputs(opts)  # before TensorFlow is imported
  from bertkit.tasks.ner import task
  driver.run(task.TASK, opts)


if __name__ == "__main__":
  programs.main(NerOptions, run)
