"""Upstream's `optimization` module: `create_optimizer` and the optimizers.

`import optimization` works as with google-research/bert. The optimizers are
part of the training engine (they all-reduce across replicas, accumulate
micro-batches and take the run's precision), so their code is in
bertkit/engine/optimizers.py; this module gives its public names to
upstream's users and nothing else, and the package never imports it.
"""

# pylint: disable=unused-import
from bertkit.engine.optimizers import (OPTIMIZERS, AdamWeightDecayOptimizer,
                                       DataParallelOptimizer, LambOptimizer,
                                       accumulate_gradients, build_optimizer,
                                       create_accumulating_optimizer,
                                       create_optimizer,
                                       learning_rate_schedule,
                                       wrap_for_mixed_precision)
# pylint: enable=unused-import
