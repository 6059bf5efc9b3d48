#!/usr/bin/env bash
# Multiple choice with run_swag.py (--do_train --do_eval --do_predict), by
# default on the bundled sample (sample_data/swag) and starting from the
# checkpoint of scripts/run_pre.sh; then the export (Hugging Face:
# BertForMultipleChoice).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$(basename "$0")"
VARIABLES=(PYTHON WORK_DIR DATA_DIR VOCAB_FILE BERT_CONFIG_FILE
           INIT_CHECKPOINT OUTPUT_DIR DO_LOWER_CASE MAX_SEQ_LENGTH
           TRAIN_BATCH_SIZE PREDICT_BATCH_SIZE LEARNING_RATE
           NUM_TRAIN_EPOCHS WARMUP_PROPORTION SAVE_CHECKPOINTS_STEPS
           EXPORT_FORMAT)

usage() {
  cat <<EOF2
Usage: scripts/$NAME [NAME=VALUE ...] [-v 1] [--flag=value ...]

-v 1 shows TensorFlow's INFO detail (absl's --verbosity) in every step.

Fine-tunes a multiple-choice model on train.csv, scores val.csv and
test.csv (eval_results.txt: accuracy and loss; the choice probabilities in
dev_results.tsv and test_results.tsv), then exports it to
\$OUTPUT_DIR/export. Settings come from environment variables, or from
NAME=VALUE arguments, which take precedence. Arguments starting with -- are
passed on to run_swag.py, e.g. --cpu_replicas=2 or the paper's SWAG
settings --flagfile=configs/swag/swag.flags.

  PYTHON                  Python interpreter (default: python3)
  WORK_DIR                base of the default paths (default: /tmp/bert_sample)
  DATA_DIR                SWAG's train.csv, val.csv, test.csv (or
                          train.jsonl, dev.jsonl, test.jsonl)
                          (default: sample_data/swag of the repo)
  VOCAB_FILE              the pretrained model's vocab
                          (default: \$WORK_DIR/data/vocab.txt)
  BERT_CONFIG_FILE        the pretrained model's config
                          (default: configs/bert_tiny.json)
  INIT_CHECKPOINT         starting weights: a checkpoint prefix or directory;
                          set it empty to train from scratch
                          (default: \$WORK_DIR/pretrain, run_pre.sh's output)
  OUTPUT_DIR              checkpoints and results (default: \$WORK_DIR/swag)
  DO_LOWER_CASE           true for an uncased model (default: true)
  MAX_SEQ_LENGTH          WordPieces per choice (default: 64)
  TRAIN_BATCH_SIZE        global batch of examples over all replicas
                          (default: 16)
  PREDICT_BATCH_SIZE      dev and test batch (default: 32)
  LEARNING_RATE           peak learning rate (default: 2e-4)
  NUM_TRAIN_EPOCHS        passes over train.csv (default: 5)
  WARMUP_PROPORTION       fraction of steps with warm-up (default: 0.1)
  SAVE_CHECKPOINTS_STEPS  steps between checkpoints (default: 100)
  EXPORT_FORMAT           export_checkpoint.py --format; empty skips the
                          export (default: google,huggingface,saved_model)

Example:
  scripts/$NAME WORK_DIR=/tmp/run1 DATA_DIR=/data/swag \\
    --flagfile=configs/swag/swag.flags
EOF2
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"

PYTHON="${PYTHON:-python3}"
WORK_DIR="${WORK_DIR:-/tmp/bert_sample}"
DATA_DIR="${DATA_DIR:-$REPO_ROOT/sample_data/swag}"
VOCAB_FILE="${VOCAB_FILE:-$WORK_DIR/data/vocab.txt}"
BERT_CONFIG_FILE="${BERT_CONFIG_FILE:-$REPO_ROOT/configs/bert_tiny.json}"
# Unset means "the pretraining output"; set but empty means "from scratch".
INIT_CHECKPOINT="${INIT_CHECKPOINT-$WORK_DIR/pretrain}"
OUTPUT_DIR="${OUTPUT_DIR:-$WORK_DIR/swag}"
DO_LOWER_CASE="${DO_LOWER_CASE:-true}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-64}"
TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-16}"
PREDICT_BATCH_SIZE="${PREDICT_BATCH_SIZE:-32}"
LEARNING_RATE="${LEARNING_RATE:-2e-4}"
NUM_TRAIN_EPOCHS="${NUM_TRAIN_EPOCHS:-5}"
WARMUP_PROPORTION="${WARMUP_PROPORTION:-0.1}"
SAVE_CHECKPOINTS_STEPS="${SAVE_CHECKPOINTS_STEPS:-100}"
EXPORT_FORMAT="${EXPORT_FORMAT-google,huggingface,saved_model}"

[[ -d "$DATA_DIR" ]] || die "DATA_DIR=$DATA_DIR is not a directory"
check_finetuning_inputs

echo "[$NAME] fine-tuning multiple choice on $DATA_DIR from" \
  "${INIT_CHECKPOINT:-scratch} into $OUTPUT_DIR"
"$PYTHON" "$REPO_ROOT/run_swag.py" --do_train --do_eval --do_predict \
  --data_dir="$DATA_DIR" --vocab_file="$VOCAB_FILE" \
  --bert_config_file="$BERT_CONFIG_FILE" --output_dir="$OUTPUT_DIR" \
  --do_lower_case="$DO_LOWER_CASE" --max_seq_length="$MAX_SEQ_LENGTH" \
  --train_batch_size="$TRAIN_BATCH_SIZE" \
  --predict_batch_size="$PREDICT_BATCH_SIZE" \
  --learning_rate="$LEARNING_RATE" --num_train_epochs="$NUM_TRAIN_EPOCHS" \
  --warmup_proportion="$WARMUP_PROPORTION" \
  --save_checkpoints_steps="$SAVE_CHECKPOINTS_STEPS" \
  ${INIT_FLAGS[@]+"${INIT_FLAGS[@]}"} ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"}
echo "[$NAME] done: eval_results.txt, dev_results.tsv and" \
  "test_results.tsv in $OUTPUT_DIR"
export_model
