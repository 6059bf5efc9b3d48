#!/usr/bin/env bash
# SQuAD 1.1 or 2.0 with run_squad.py (--do_train --do_predict), then the
# export (Hugging Face: BertForQuestionAnswering).
# Its settings and defaults: configs/fine_tuning/squad.sh (--help lists
# them); the steps every fine-tuning script shares: scripts/fine_tune.sh.
TASK_SETTINGS=squad
# shellcheck source=scripts/fine_tune.sh
source "$(dirname "${BASH_SOURCE[0]}")/fine_tune.sh"
