#!/usr/bin/env bash
# Named entities with run_ner.py (--do_train --do_eval --do_predict), then
# the export (Hugging Face: BertForTokenClassification).
# Its settings and defaults: configs/fine_tuning/ner.sh (--help lists
# them); the steps every fine-tuning script shares: scripts/fine_tune.sh.
TASK_SETTINGS=ner
# shellcheck source=scripts/fine_tune.sh
source "$(dirname "${BASH_SOURCE[0]}")/fine_tune.sh"
