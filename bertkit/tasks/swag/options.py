"""What run_swag.py is told besides the fine-tuning options."""

import dataclasses

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.option_fields import REQUIRED, option
from bertkit.tasks.fine_tuning.options import (DistillationOptions,
                                               FineTuningOptions)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultipleChoiceOptions(FineTuningOptions, options.EvaluationOptions,
                            DistillationOptions):
  """What run_swag.py is told. Dev and test are predicted together at
  --predict_batch_size; --eval_batch_size is accepted as in every
  fine-tuning program."""
  data_dir: str = option(
      REQUIRED, "Directory with train.csv, val.csv, test.csv (SWAG) or "
      "train.jsonl, dev.jsonl, test.jsonl.", path=option_fields.DIRECTORY)
