"""What run_ner.py is told besides the fine-tuning options."""

import dataclasses
from typing import Optional, Tuple

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.option_fields import REQUIRED, option
from bertkit.tasks.fine_tuning.options import (DistillationOptions,
                                               FineTuningOptions)


@dataclasses.dataclass(frozen=True, kw_only=True)
class NerOptions(FineTuningOptions, options.EvaluationOptions,
                 DistillationOptions):
  """What run_ner.py is told. Dev and test are predicted together at
  --predict_batch_size; --eval_batch_size is accepted as in every
  fine-tuning program."""
  data_dir: str = option(
      REQUIRED, "Directory with the tagged files: train.txt, dev.txt, "
      "test.txt (or CoNLL-2003's names).", path=option_fields.DIRECTORY)
  labels: Optional[Tuple[str, ...]] = option(
      None, "The labels, comma-separated (O, B-TYPE, I-TYPE).",
      unset="O and the B-/I- tags of train.txt's entity types; without "
      "--do_train, the labels.txt of --output_dir")
