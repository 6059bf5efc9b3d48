"""The training engine: the runner, its set-up (strategy; the precision record,
precision.py), distribution, horovod and BytePS, hooks, throughput, checkpoints
and their formats, the input pipeline and the checks of its records, dynamic
masking, the train step and preemption."""
