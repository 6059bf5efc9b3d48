"""Masked LM and next-sentence pretraining of BERT with tf.estimator.

Upstream's flags (TPU ones dropped) plus the distribution flags of
bertkit/engine/distributed/distribution.py: the Estimator gets a
MirroredStrategy, MultiWorkerMirroredStrategy or CentralStorageStrategy through
its RunConfig, runs on one device, or runs as one horovod rank of several
(--distribution_strategy=horovod, launched by horovodrun). `--train_batch_size`
is the global batch over all replicas, per update: with
`--num_accumulation_steps K` each replica runs K micro-batches of
train_batch_size / (replicas * K) examples, then the summed gradient makes one
all-reduce and one update (one global step).

Its options (flags): bertkit/tasks/pretraining/options.py and the runner's
in bertkit/common/options.py. What the records hold and how they are masked:
bertkit/tasks/pretraining/trainer.py; the model, its heads and losses:
bertkit/tasks/pretraining/task.py.
"""

from bertkit.common import programs
from bertkit.tasks.pretraining.options import PretrainingOptions

# Upstream's API of this module: google-research/bert's run_pretraining.py
# defines these names, and code written for it imports them from here
# (from bertkit/tasks/pretraining/task.py, on first use: it imports
# TensorFlow, which the flags' checks come before).
UPSTREAM_API = ("gather_indexes", "get_masked_lm_output",
                "get_next_sentence_output", "model_fn_builder")


def __getattr__(name):
  if name not in UPSTREAM_API:
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
  # pylint: disable-next=g-import-not-at-top
  from bertkit.tasks.pretraining import task
  return getattr(task, name)


def run(opts):
  """Pretrains (and evaluates) as `opts`, a PretrainingOptions, say."""
  # pylint: disable-next=g-import-not-at-top
  from bertkit.tasks.pretraining import trainer
  trainer.run(opts)


if __name__ == "__main__":
  programs.main(PretrainingOptions, run)
