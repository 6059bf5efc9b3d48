#!/usr/bin/env bash
# The GLUE benchmark over a pretrained checkpoint with run_glue.py: every
# task fine-tuned and evaluated (glue_results.md/.csv/.json, the GLUE score),
# by default from the checkpoint of scripts/run_pre.sh.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$(basename "$0")"
VARIABLES=(PYTHON WORK_DIR GLUE_DIR VOCAB_FILE BERT_CONFIG_FILE
           INIT_CHECKPOINT OUTPUT_DIR DO_LOWER_CASE TASKS SEEDS DO_PREDICT)

usage() {
  cat <<USAGE
Usage: scripts/$NAME [NAME=VALUE ...] [-v 1] [--flag=value ...]
                     [-- --classifier_flag=value ...]

Fine-tunes every GLUE task from a pretrained checkpoint (one run_classifier.py
run per task and seed, the per-task flags of configs/glue/<task>.flags),
evaluates the dev sets and writes \$OUTPUT_DIR/glue_results.md, .csv and
.json: each task's metrics per seed, their medians, the task scores and the
GLUE score. A rerun skips the finished runs. Settings come from environment
variables, or from NAME=VALUE arguments, which take precedence. Arguments
starting with -- are passed on to run_glue.py (e.g. --task_flags_dir=DIR);
after a lone --, to every run_classifier.py run (e.g. -- --use_fp16).
docs/glue.md has the details.

  PYTHON            Python interpreter (default: python3)
  WORK_DIR          base of the default paths (default: /tmp/bert_sample)
  GLUE_DIR          the GLUE download: CoLA/, SST-2/, ..., diagnostic/
                    (default: \$WORK_DIR/glue_data)
  VOCAB_FILE        the pretrained model's vocab
                    (default: \$WORK_DIR/data/vocab.txt)
  BERT_CONFIG_FILE  the pretrained model's config; set it empty for a
                    Hugging Face INIT_CHECKPOINT
                    (default: configs/bert_tiny.json)
  INIT_CHECKPOINT   the pretrained model: a checkpoint prefix or directory,
                    Google's or a Hugging Face directory
                    (default: \$WORK_DIR/pretrain, run_pre.sh's output)
  OUTPUT_DIR        runs, logs and results (default: \$WORK_DIR/glue)
  DO_LOWER_CASE     true for an uncased model (default: true)
  TASKS             comma-separated tasks (default: all nine:
                    cola,sst-2,mrpc,sts-b,qqp,mnli,qnli,rte,wnli)
  SEEDS             runs per task; the table gives their medians
                    (default: 1; 5 for numbers to publish)
  DO_PREDICT        true also writes the leaderboard's submission files,
                    AX included, to \$OUTPUT_DIR/submission (default: false)

Example:
  scripts/$NAME GLUE_DIR=/data/glue_data INIT_CHECKPOINT=/tmp/run1/pretrain \\
    BERT_CONFIG_FILE=configs/bert_base.json SEEDS=5 DO_PREDICT=true
USAGE
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"
settings_from_flags GLUE_DIR:glue_dir VOCAB_FILE:vocab_file \
  INIT_CHECKPOINT:init_checkpoint OUTPUT_DIR:output_dir \
  DO_LOWER_CASE:do_lower_case TASKS:tasks SEEDS:seeds DO_PREDICT:do_predict
# Set but empty means "the Hugging Face directory's config.json" (below).
setting_from_flag BERT_CONFIG_FILE bert_config_file \
  "$([[ -v BERT_CONFIG_FILE ]] && echo given || true)"

PYTHON="${PYTHON:-python3}"
WORK_DIR="${WORK_DIR:-/tmp/bert_sample}"
GLUE_DIR="${GLUE_DIR:-$WORK_DIR/glue_data}"
VOCAB_FILE="${VOCAB_FILE:-$WORK_DIR/data/vocab.txt}"
# Unset means the tiny config; set but empty means "the Hugging Face
# directory's config.json".
BERT_CONFIG_FILE="${BERT_CONFIG_FILE-$REPO_ROOT/configs/bert_tiny.json}"
INIT_CHECKPOINT="${INIT_CHECKPOINT:-$WORK_DIR/pretrain}"
OUTPUT_DIR="${OUTPUT_DIR:-$WORK_DIR/glue}"
DO_LOWER_CASE="${DO_LOWER_CASE:-true}"
TASKS="${TASKS:-cola,sst-2,mrpc,sts-b,qqp,mnli,qnli,rte,wnli}"
SEEDS="${SEEDS:-1}"
DO_PREDICT="${DO_PREDICT:-false}"

command -v "$PYTHON" > /dev/null || die "PYTHON=$PYTHON is not a command"
CONFIG_FLAGS=()
if [[ -n "$BERT_CONFIG_FILE" ]]; then
  CONFIG_FLAGS=(--bert_config_file="$BERT_CONFIG_FILE")
fi

echo "[$NAME] GLUE tasks $TASKS, $SEEDS seed(s) each, from $INIT_CHECKPOINT" \
  "into $OUTPUT_DIR"
# run_glue.py checks every path and setting before it starts a run.
"$PYTHON" "$REPO_ROOT/run_glue.py" \
  ${VERBOSITY_FLAGS[@]+"${VERBOSITY_FLAGS[@]}"} \
  --init_checkpoint="$INIT_CHECKPOINT" --vocab_file="$VOCAB_FILE" \
  --glue_dir="$GLUE_DIR" --output_dir="$OUTPUT_DIR" \
  --do_lower_case="$DO_LOWER_CASE" --tasks="$TASKS" --seeds="$SEEDS" \
  --do_predict="$DO_PREDICT" ${CONFIG_FLAGS[@]+"${CONFIG_FLAGS[@]}"} \
  ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"}
echo "[$NAME] done: $OUTPUT_DIR/glue_results.md"
