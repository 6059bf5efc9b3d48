#!/usr/bin/env bash
# Step 3 of 3: fine-tuning a classifier with run_classifier.py (--do_train
# --do_eval --do_predict), then its export.
# Its settings and defaults: configs/fine_tuning/classify.sh (--help lists
# them); the steps every fine-tuning script shares: scripts/fine_tune.sh.
TASK_SETTINGS=classify
# shellcheck source=scripts/fine_tune.sh
source "$(dirname "${BASH_SOURCE[0]}")/fine_tune.sh"
