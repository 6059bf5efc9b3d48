"""Which CPU kernels TensorFlow runs: a choice made before it is imported.

TensorFlow 2.15 reads TF_ENABLE_ONEDNN_OPTS once, the first time it asks
whether oneDNN is on, and when it is unset turns its oneDNN kernels on only
on CPUs with AVX512. On CPUs without AVX512 (AVX2 machines, many AMD EPYC
hosts) it then runs Eigen's kernels, with which BERT-mini pretraining ran
10-15 % slower than with oneDNN's
(docs/benchmarks.md#cpu-kernels-onednn-by-default), and the bfloat16 graph
rewrite of --use_bf16 has nothing to rewrite. The programs therefore ask for
oneDNN unless the user set the variable; TF_ENABLE_ONEDNN_OPTS=0 keeps
Eigen. GPU kernels are not affected.
"""

import os

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def prefer_onednn():
  """Asks for TensorFlow's oneDNN CPU kernels unless the user chose.

  Must run before TensorFlow is imported; a value already in the environment
  is kept.
  """
  os.environ.setdefault(ONEDNN_VARIABLE, "1")
