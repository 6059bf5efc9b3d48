#!/usr/bin/env bash
# Step 2 of 3: pretraining with run_pretraining.py (--do_train --do_eval) on
# the records of scripts/run_create.sh. Next: scripts/run_classify.sh.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$(basename "$0")"
VARIABLES=(PYTHON WORK_DIR DATA_DIR INPUT_FILE VOCAB_FILE BERT_CONFIG_FILE
           OUTPUT_DIR INIT_CHECKPOINT MAX_SEQ_LENGTH MAX_PREDICTIONS_PER_SEQ
           TRAIN_BATCH_SIZE EVAL_BATCH_SIZE NUM_TRAIN_STEPS NUM_WARMUP_STEPS
           LEARNING_RATE SAVE_CHECKPOINTS_STEPS MAX_EVAL_STEPS DO_LOWER_CASE
           EXPORT_FORMAT)

usage() {
  cat <<EOF
Usage: scripts/$NAME [NAME=VALUE ...] [-v 1] [--flag=value ...]

-v 1 shows TensorFlow's INFO detail (absl's --verbosity) in every step.

Pretrains BERT (masked LM + next sentence), evaluates it and exports it to
\$OUTPUT_DIR/export (Google layout, Hugging Face, SavedModel). Settings come
from environment variables, or from NAME=VALUE arguments, which take
precedence. Arguments starting with -- are passed on to run_pretraining.py,
e.g. --cpu_replicas=2, --multi_gpu, --use_fp16.

  PYTHON                   Python interpreter (default: python3)
  WORK_DIR                 base of the default paths (default: /tmp/bert_sample)
  DATA_DIR                 output of run_create.sh (default: \$WORK_DIR/data)
  INPUT_FILE               pretraining TFRecords, comma-separated globs
                           (default: \$DATA_DIR/pretrain.tfrecord)
  VOCAB_FILE               vocab of the records, checked against the config
                           (default: \$DATA_DIR/vocab.txt)
  BERT_CONFIG_FILE         model size (default: configs/bert_tiny.json)
  OUTPUT_DIR               checkpoints and eval_results.txt; a rerun resumes
                           (default: \$WORK_DIR/pretrain)
  INIT_CHECKPOINT          optional starting weights (default: empty)
  MAX_SEQ_LENGTH           as given to run_create.sh (default: 128)
  MAX_PREDICTIONS_PER_SEQ  as given to run_create.sh (default: 20)
  TRAIN_BATCH_SIZE         global batch over all replicas (default: 32)
  EVAL_BATCH_SIZE          eval batch (default: 8)
  NUM_TRAIN_STEPS          training steps (default: 200)
  NUM_WARMUP_STEPS         learning-rate warm-up steps (default: 20)
  LEARNING_RATE            peak learning rate (default: 1e-4)
  SAVE_CHECKPOINTS_STEPS   steps between checkpoints (default: 100)
  MAX_EVAL_STEPS           eval batches (default: 20)
  DO_LOWER_CASE            true for an uncased vocab, as given to run_create.sh;
                           recorded in OUTPUT_DIR's tokenizer_config.json and
                           the exported tokenizer (default: true)
  EXPORT_FORMAT            export_checkpoint.py --format; empty skips the
                           export (default: google,huggingface,saved_model)

Example:
  scripts/$NAME WORK_DIR=/tmp/run1 NUM_TRAIN_STEPS=1000 --cpu_replicas=2
EOF
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"
settings_from_flags INPUT_FILE:input_file VOCAB_FILE:vocab_file \
  BERT_CONFIG_FILE:bert_config_file OUTPUT_DIR:output_dir \
  INIT_CHECKPOINT:init_checkpoint MAX_SEQ_LENGTH:max_seq_length \
  MAX_PREDICTIONS_PER_SEQ:max_predictions_per_seq \
  TRAIN_BATCH_SIZE:train_batch_size EVAL_BATCH_SIZE:eval_batch_size \
  NUM_TRAIN_STEPS:num_train_steps NUM_WARMUP_STEPS:num_warmup_steps \
  LEARNING_RATE:learning_rate SAVE_CHECKPOINTS_STEPS:save_checkpoints_steps \
  MAX_EVAL_STEPS:max_eval_steps DO_LOWER_CASE:do_lower_case

PYTHON="${PYTHON:-python3}"
WORK_DIR="${WORK_DIR:-/tmp/bert_sample}"
DATA_DIR="${DATA_DIR:-$WORK_DIR/data}"
INPUT_FILE="${INPUT_FILE:-$DATA_DIR/pretrain.tfrecord}"
VOCAB_FILE="${VOCAB_FILE:-$DATA_DIR/vocab.txt}"
BERT_CONFIG_FILE="${BERT_CONFIG_FILE:-$REPO_ROOT/configs/bert_tiny.json}"
OUTPUT_DIR="${OUTPUT_DIR:-$WORK_DIR/pretrain}"
INIT_CHECKPOINT="${INIT_CHECKPOINT:-}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"
MAX_PREDICTIONS_PER_SEQ="${MAX_PREDICTIONS_PER_SEQ:-20}"
TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-32}"
EVAL_BATCH_SIZE="${EVAL_BATCH_SIZE:-8}"
NUM_TRAIN_STEPS="${NUM_TRAIN_STEPS:-200}"
NUM_WARMUP_STEPS="${NUM_WARMUP_STEPS:-20}"
LEARNING_RATE="${LEARNING_RATE:-1e-4}"
SAVE_CHECKPOINTS_STEPS="${SAVE_CHECKPOINTS_STEPS:-100}"
MAX_EVAL_STEPS="${MAX_EVAL_STEPS:-20}"
DO_LOWER_CASE="${DO_LOWER_CASE:-true}"
EXPORT_FORMAT="${EXPORT_FORMAT-google,huggingface,saved_model}"

check_inputs INPUT_FILE "$INPUT_FILE" \
  "run scripts/run_create.sh first or set INPUT_FILE"
[[ -f "$VOCAB_FILE" ]] ||
  die "VOCAB_FILE=$VOCAB_FILE does not exist;" \
      "run scripts/run_create.sh first or set VOCAB_FILE"
[[ -f "$BERT_CONFIG_FILE" ]] ||
  die "BERT_CONFIG_FILE=$BERT_CONFIG_FILE does not exist"
command -v "$PYTHON" > /dev/null || die "PYTHON=$PYTHON is not a command"
check_export_format
check_seq_lengths_fit MAX_SEQ_LENGTH

INIT_FLAGS=()
if [[ -n "$INIT_CHECKPOINT" ]]; then
  INIT_FLAGS=(--init_checkpoint="$INIT_CHECKPOINT")
fi

echo "[$NAME] pretraining $BERT_CONFIG_FILE for $NUM_TRAIN_STEPS steps" \
  "into $OUTPUT_DIR"
"$PYTHON" "$REPO_ROOT/run_pretraining.py" --do_train --do_eval \
  --input_file="$INPUT_FILE" --vocab_file="$VOCAB_FILE" \
  --bert_config_file="$BERT_CONFIG_FILE" --output_dir="$OUTPUT_DIR" \
  --do_lower_case="$DO_LOWER_CASE" --max_seq_length="$MAX_SEQ_LENGTH" \
  --max_predictions_per_seq="$MAX_PREDICTIONS_PER_SEQ" \
  --train_batch_size="$TRAIN_BATCH_SIZE" --eval_batch_size="$EVAL_BATCH_SIZE" \
  --num_train_steps="$NUM_TRAIN_STEPS" --num_warmup_steps="$NUM_WARMUP_STEPS" \
  --learning_rate="$LEARNING_RATE" \
  --save_checkpoints_steps="$SAVE_CHECKPOINTS_STEPS" \
  --max_eval_steps="$MAX_EVAL_STEPS" \
  ${INIT_FLAGS[@]+"${INIT_FLAGS[@]}"} ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"}
echo "[$NAME] done: checkpoints and eval_results.txt in $OUTPUT_DIR"
export_model
