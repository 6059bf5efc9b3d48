"""The training engine: the runner, its set-up (strategy; the precision record,
precision.py), distribution and the cluster environment, horovod and BytePS,
hooks, throughput, checkpoints and their formats, the input pipeline and the
checks of its records, dynamic masking, the optimizers and the training
update, the train step and preemption."""
