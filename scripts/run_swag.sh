#!/usr/bin/env bash
# Multiple choice with run_swag.py (--do_train --do_eval --do_predict), then
# the export (Hugging Face: BertForMultipleChoice).
# Its settings and defaults: configs/fine_tuning/swag.sh (--help lists
# them); the steps every fine-tuning script shares: scripts/fine_tune.sh.
TASK_SETTINGS=swag
# shellcheck source=scripts/fine_tune.sh
source "$(dirname "${BASH_SOURCE[0]}")/fine_tune.sh"
