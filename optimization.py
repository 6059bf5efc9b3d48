"""Upstream's `optimization` module: `create_optimizer` and the optimizers.

`import optimization` works as with google-research/bert. The optimizers are
part of the training engine (they all-reduce across replicas, accumulate
micro-batches and take the run's precision), so their code is in
bertkit/engine/update/optimizers.py (the optimizers) and
bertkit/engine/update/gradient_update.py (the train op: `create_optimizer`);
this module gives their public names to upstream's users and nothing else, and
the package never imports it.
"""

# pylint: disable=unused-import
from bertkit.engine.update.gradient_update import (
    accumulate_gradients, create_accumulating_optimizer, create_optimizer,
    wrap_for_mixed_precision)
from bertkit.engine.update.optimizers import (
    OPTIMIZERS, AdamWeightDecayOptimizer, DataParallelOptimizer,
    LambOptimizer, build_optimizer)
# pylint: enable=unused-import
