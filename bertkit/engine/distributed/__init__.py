"""Where the replicas run: the strategy (distribution.py), the cluster this
process is a task of (cluster_environment.py), and the engines of one
process per replica, horovod and BytePS, with what they share
(rank_zero.py)."""
