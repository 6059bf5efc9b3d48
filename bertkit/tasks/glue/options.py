"""What run_glue.py is told."""

import dataclasses
import os
from typing import Tuple

from bertkit.common import option_fields
from bertkit.common import options
from bertkit.common.option_fields import AT_LEAST_ONE, REQUIRED, option
from bertkit.tasks.glue import suite as glue_suite

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GlueSuiteOptions(options.ModelFiles):
  """What run_glue.py is told: the pretrained model, the GLUE download, the
  runs to make. Arguments after `--` go to every run_classifier.py."""
  init_checkpoint: str = option(
      REQUIRED, "The pretrained model: a checkpoint prefix or directory "
      "(ours or Google's layout) or a Hugging Face BERT directory; passed to "
      "every run_classifier.py run.")
  glue_dir: str = option(
      REQUIRED, "The GLUE download's root: CoLA/, SST-2/, MRPC/, STS-B/, "
      "QQP/, MNLI/, QNLI/, RTE/, WNLI/ and, for --do_predict, diagnostic/.",
      path=option_fields.DIRECTORY)
  output_dir: str = option(REQUIRED, "Runs, logs and glue_results.* go "
                           "here; a rerun skips the finished runs.")
  tasks: Tuple[str, ...] = option(
      glue_suite.SCORED_TASKS, "The GLUE tasks to run; ax follows mnli with "
      "--do_predict.")
  seeds: int = option(
      1, "Runs per task (--tf_random_seed=1..N); the table reports their "
      "medians. The GLUE score of a paper: 5. Raising it later reuses the "
      "runs already made.", **AT_LEAST_ONE)
  do_predict: bool = option(
      False, "Also predict the test sets and gather the leaderboard's files "
      "in OUTPUT_DIR/submission.")
  task_flags_dir: str = option(
      os.path.join(REPO_ROOT, "configs", "glue"), "Directory of "
      "<task>.flags, each task's run_classifier flags.")

  def __post_init__(self):
    option_fields.check_fields(self)
