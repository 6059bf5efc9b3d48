"""What run_classifier.py is told besides the fine-tuning options."""

import dataclasses
from typing import Optional, Tuple

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.option_fields import AT_LEAST_ONE, REQUIRED, option
from bertkit.tasks.fine_tuning.options import (DistillationOptions,
                                               FineTuningOptions)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClassifierOptions(FineTuningOptions, options.EvaluationOptions,
                        DistillationOptions):
  """What run_classifier.py is told: the task and its files, the tsv task's
  columns and labels, packing."""
  data_dir: str = option(REQUIRED, "Directory with the task's .tsv files "
                         "(see --task_name).", path=option_fields.DIRECTORY)
  task_name: str = option(REQUIRED, "A GLUE task (cola, sst-2, mrpc, sts-b, "
                          "qqp, mnli, qnli, rte, wnli, ax), xnli, tsv or "
                          "rerank.")
  text_a_column: str = option("0", "tsv task: column of the first text "
                              "(number or name).")
  text_b_column: Optional[str] = option(
      None, "tsv task: column of the second text of a pair task.",
      unset="none: single texts")
  label_column: str = option("1", "tsv task: column of the label (number or "
                             "name).")
  tsv_has_header: bool = option(True, "tsv task: the first line of each "
                                "file is a header.")
  labels: Optional[Tuple[str, ...]] = option(
      None, "tsv task: the labels, comma-separated.",
      unset="the sorted distinct labels of train.tsv")
  pack_sequences: bool = option(
      False, "Pack up to --max_sequences_per_pack examples into each row of "
      "--max_seq_length tokens (bertkit/tasks/classification/packing.py): no "
      "compute spent on padding, the same logits per example. "
      "--*_batch_size then count rows.")
  max_sequences_per_pack: int = option(
      3, "With --pack_sequences: the most examples in one row.",
      **AT_LEAST_ONE)
