"""The numeric precision of a training run, as one value decided once.

engine_setup.resolve_precision turns --use_fp16 / --use_bf16 and the
machine's facts (GPUs, oneDNN, CPU flags) into a `Precision`. The runner
hands that one value down: to the optimizer (dynamic loss scaling and the
float16 graph rewrite), to the training hooks (whether a non-finite loss
stops the run, and what its warning says), to the horovod engine (float16
gradients on the wire), to the session config (the bfloat16 rewrite) and to
the run summary. None of them reads the precision flags themselves.
"""

import dataclasses
from typing import Optional

from bertkit.common import options

FLOAT32 = "float32"
MIXED_FLOAT16 = "mixed_float16"
MIXED_BFLOAT16 = "mixed_bfloat16"


@dataclasses.dataclass(frozen=True)
class LossScale:
  """Dynamic loss scaling (--use_fp16).

  Attributes:
    initial_scale: the scale a fresh run starts from.
    growth_steps: the finite steps after which it doubles.
  """
  initial_scale: int = options.PrecisionOptions.init_loss_scale
  growth_steps: int = options.PrecisionOptions.loss_scale_growth_steps


@dataclasses.dataclass(frozen=True)
class Precision:
  """How a run computes, and what follows from it.

  Attributes:
    requested: what the flags asked for: "fp32", "fp16" (--use_fp16) or
      "bf16" (--use_bf16).
    compute: what the kernels compute in: FLOAT32, MIXED_FLOAT16 (float16
      GPU kernels) or MIXED_BFLOAT16 (oneDNN's bfloat16 CPU kernels);
      variables are float32 in every case.
    loss_scale: the LossScale of --use_fp16's optimizer wrapper
      (enable_mixed_precision_graph_rewrite: scaled loss, unscaled
      gradients, overflowing steps skipped), or None without it. It runs
      even where no GPU kernel gets rewritten.
    compress_gradients: horovod sends the gradients as float16.
    stop_on_nonfinite_loss: a NaN or inf training loss ends the run; never
      with loss scaling, whose overflowing steps are expected and skipped.
    reason: one line saying why `compute` is what it is, for the log.
  """
  requested: str
  compute: str
  loss_scale: Optional[LossScale]
  compress_gradients: bool
  stop_on_nonfinite_loss: bool
  reason: str

  @property
  def fell_back(self):
    """Whether mixed precision was asked for and the run computes float32."""
    return self.requested != "fp32" and self.compute == FLOAT32

  def summary(self):
    """The precision entries of throughput_summary.json."""
    return {"precision": self.compute,
            "use_fp16": self.requested == "fp16",
            "use_bf16": self.requested == "bf16"}
