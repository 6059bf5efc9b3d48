"""What run_squad.py is told besides the fine-tuning options."""

import dataclasses
from typing import Optional

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.errors import UserError
from bertkit.common.option_fields import AT_LEAST_ONE, option
from bertkit.tasks.fine_tuning.options import FineTuningOptions


@dataclasses.dataclass(frozen=True, kw_only=True)
class SquadOptions(FineTuningOptions):
  """What run_squad.py is told: the SQuAD files, the windows over long
  contexts, the answers kept."""
  # Query and context window together.
  max_seq_length: int = options.max_seq_length_option(384, low=3)
  train_file: Optional[str] = option(
      None, "SQuAD json for training, e.g. train-v1.1.json.",
      unset="none; --do_train needs it", path=option_fields.FILE)
  predict_file: Optional[str] = option(
      None, "SQuAD json to predict, e.g. dev-v1.1.json; with gold answers it "
      "is also evaluated.", unset="none; --do_predict needs it",
      path=option_fields.FILE)
  doc_stride: int = option(128, "Sub-tokens between the starts of "
                           "consecutive windows over a long context.")
  max_query_length: int = option(64, "Questions are cut to this many "
                                 "sub-tokens.", **AT_LEAST_ONE)
  n_best_size: int = option(
      20, "Answers kept per question in nbest_predictions.json (and "
      "start/end positions tried per window).", **AT_LEAST_ONE)
  max_answer_length: int = option(
      30, "Longest answer, in sub-tokens (start and end are predicted "
      "independently).", **AT_LEAST_ONE)
  verbose_logging: bool = option(
      False, "Log every answer whose text could not be aligned back to the "
      "original words.")
  version_2_with_negative: bool = option(
      False, "SQuAD 2.0: questions may have no answer.")
  null_score_diff_threshold: float = option(
      0.0, "SQuAD 2.0: answer \"\" when null score - best non-null score "
      "exceeds this.")

  def __post_init__(self):
    super().__post_init__()
    if self.do_train and not self.train_file:
      raise UserError("--do_train needs --train_file")
    if self.do_predict and not self.predict_file:
      raise UserError("--do_predict needs --predict_file")
    room = self.max_seq_length - self.max_query_length - 3
    if room < 1:
      raise UserError(
          "--max_seq_length=%d must be greater than --max_query_length=%d + "
          "3 ([CLS] and two [SEP]): no room is left for the context" %
          (self.max_seq_length, self.max_query_length))
    if not 1 <= self.doc_stride < room:
      raise UserError(
          "--doc_stride=%d must be between 1 and the room left for the "
          "context (--max_seq_length - --max_query_length - 3 = %d), "
          "exclusive: windows moving by that much or more would not "
          "overlap, and a longer one would skip context tokens" % (
              self.doc_stride, room))
