"""The training engine, one subpackage per question a reader asks, lowest
first (each imports only those above it in this list):

  distributed    where the replicas run: the strategy, the cluster this
                 process is a task of, horovod and BytePS
  checkpointing  checkpoints (--init_checkpoint, resuming, saving), their
                 Hugging Face names and heads, the run directory's
                 description of its model
  input          the TFRecord input functions, the checks of their records,
                 dynamic masking
  update         one training step's update: the gradients of its
                 micro-batches, the optimizers, the learning-rate schedules,
                 the step contract the hooks read
  report         what a run reports: examples/sec, eval_results.txt and the
                 run summary
  loop           the run loop (runner.py) and what it is made of: the model
                 spec a task hands it, the engine's set-up and precision, the
                 hooks, the training clock, held-out evaluation, preemption
"""
