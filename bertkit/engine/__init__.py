"""The training engine: the runner, its set-up (strategy; the precision record,
precision.py), distribution and horovod, hooks, throughput, checkpoints and
their formats, the input pipeline, dynamic masking, the train step and
preemption."""
