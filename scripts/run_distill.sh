#!/usr/bin/env bash
# Turc et al.'s recipe ("Well-Read Students Learn Better", 2019) in one
# script: fine-tune (or take) a teacher -> predict the transfer set ->
# distill a compact student (one of configs/'s 24 sizes, by name) -> fine-
# tune it on the labels (optional) -> evaluate -> export. Each step is
# scripts/run_classify.sh (scripts/fine_tune.sh) with the step's settings;
# docs/distillation.md says what each flag does.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$(basename "$0")"
VARIABLES=(PYTHON WORK_DIR TASK_NAME DATA_DIR TRANSFER_FILE OUTPUT_DIR
           VOCAB_FILE VOCAB_SIZE DO_LOWER_CASE MAX_SEQ_LENGTH TRAIN_BATCH_SIZE
           TEACHER_DIR TEACHER_INIT_CHECKPOINT TEACHER_CONFIG
           TEACHER_VOCAB_FILE TEACHER_LEARNING_RATE TEACHER_EPOCHS
           STUDENT_CONFIG STUDENT_INIT_CHECKPOINT STUDENT_LEARNING_RATE
           DISTILL_EPOCHS FINE_TUNE_EPOCHS TEMPERATURE DISTILLATION_WEIGHT
           EXPORT_FORMAT)

usage() {
  cat <<EOF
Usage: scripts/$NAME [NAME=VALUE ...] [-v 1] [--flag=value ...]

-v 1 shows TensorFlow's INFO detail (absl's --verbosity) in every step.

Distills a classifier (run_classifier.py) as Turc et al. do: a teacher
fine-tuned on the labels (or TEACHER_DIR, one already fine-tuned) predicts
the transfer set; a compact student learns its logits there
(--teacher_outputs), then, unless FINE_TUNE_EPOCHS=0, the labels; both are
evaluated on the dev set, the student exported to its directory's export/.
Ends with the teacher's and the student's dev metric, one line each.
Settings come from environment variables, or from NAME=VALUE arguments,
which take precedence. Arguments starting with -- are passed on to every
run_classifier.py run, e.g. --cpu_replicas=2.

  PYTHON                   Python interpreter (default: python3)
  WORK_DIR                 base of the default paths (default: /tmp/bert_sample)
  TASK_NAME                run_classifier.py --task_name (default: tsv)
  DATA_DIR                 the task's train/dev/test.tsv
                           (default: sample_data/classify)
  TRANSFER_FILE            the transfer set: a file of the task's training
                           layout, labels optional (default:
                           \$DATA_DIR/transfer.tsv)
  OUTPUT_DIR               teacher/, student/, student_labels/
                           (default: \$WORK_DIR/distill)
  VOCAB_FILE               the models' vocab; trained on
                           sample_data/corpus.txt if it is missing
                           (default: \$WORK_DIR/data/vocab.txt)
  VOCAB_SIZE               the size of a vocab trained here (default: 2000)
  DO_LOWER_CASE            true for an uncased vocab (default: true)
  MAX_SEQ_LENGTH           WordPieces per sequence (default: 64)
  TRAIN_BATCH_SIZE         global batch over all replicas (default: 32)
  TEACHER_DIR              an already fine-tuned teacher (its --output_dir,
                           or a Google or Hugging Face directory with its
                           classifier head); empty: fine-tune one
                           (default: empty)
  TEACHER_INIT_CHECKPOINT  the teacher's starting weights; empty: from
                           scratch (default: empty)
  TEACHER_CONFIG           the teacher's size: a name in configs/ or a file
                           (default: bert_mini)
  TEACHER_VOCAB_FILE       the teacher's vocab (default: \$VOCAB_FILE)
  TEACHER_LEARNING_RATE    (default: 2e-4)
  TEACHER_EPOCHS           the teacher's epochs on the labels (default: 5)
  STUDENT_CONFIG           the student's size: one of configs/'s 24
                           (L2_H128 ... L12_H768, bert_tiny, bert_mini, ...)
                           or a file (default: bert_tiny)
  STUDENT_INIT_CHECKPOINT  the student's pretrained weights; empty: from
                           scratch (default: empty)
  STUDENT_LEARNING_RATE    (default: 5e-4)
  DISTILL_EPOCHS           the student's epochs on the transfer set
                           (default: 3)
  FINE_TUNE_EPOCHS         the student's epochs on the labels afterwards;
                           0 skips the step (default: 2)
  TEMPERATURE              --temperature (default: 1)
  DISTILLATION_WEIGHT      --distillation_weight (default: 1)
  EXPORT_FORMAT            export_checkpoint.py --format of the student;
                           empty skips the export
                           (default: google,huggingface,saved_model)

Example:
  scripts/$NAME WORK_DIR=/tmp/run1 STUDENT_CONFIG=L2_H128 --cpu_replicas=2
EOF
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"

PYTHON="${PYTHON:-python3}"
WORK_DIR="${WORK_DIR:-/tmp/bert_sample}"
TASK_NAME="${TASK_NAME:-tsv}"
DATA_DIR="${DATA_DIR:-$REPO_ROOT/sample_data/classify}"
TRANSFER_FILE="${TRANSFER_FILE:-$DATA_DIR/transfer.tsv}"
OUTPUT_DIR="${OUTPUT_DIR:-$WORK_DIR/distill}"
VOCAB_FILE="${VOCAB_FILE:-$WORK_DIR/data/vocab.txt}"
VOCAB_SIZE="${VOCAB_SIZE:-2000}"
DO_LOWER_CASE="${DO_LOWER_CASE:-true}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-64}"
TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-32}"
TEACHER_DIR="${TEACHER_DIR:-}"
TEACHER_INIT_CHECKPOINT="${TEACHER_INIT_CHECKPOINT:-}"
TEACHER_CONFIG="${TEACHER_CONFIG:-bert_mini}"
TEACHER_VOCAB_FILE="${TEACHER_VOCAB_FILE:-$VOCAB_FILE}"
TEACHER_LEARNING_RATE="${TEACHER_LEARNING_RATE:-2e-4}"
TEACHER_EPOCHS="${TEACHER_EPOCHS:-5}"
STUDENT_CONFIG="${STUDENT_CONFIG:-bert_tiny}"
STUDENT_INIT_CHECKPOINT="${STUDENT_INIT_CHECKPOINT:-}"
STUDENT_LEARNING_RATE="${STUDENT_LEARNING_RATE:-5e-4}"
DISTILL_EPOCHS="${DISTILL_EPOCHS:-3}"
FINE_TUNE_EPOCHS="${FINE_TUNE_EPOCHS:-2}"
TEMPERATURE="${TEMPERATURE:-1}"
DISTILLATION_WEIGHT="${DISTILLATION_WEIGHT:-1}"
EXPORT_FORMAT="${EXPORT_FORMAT-google,huggingface,saved_model}"

# A model size: a file, or the name of one of configs/*.json.
config_file() {
  local setting="$1" value="$2"
  if [[ -f "$value" ]]; then
    echo "$value"
  elif [[ -f "$REPO_ROOT/configs/$value.json" ]]; then
    echo "$REPO_ROOT/configs/$value.json"
  else
    die "$setting=$value is neither a file nor one of configs/: $(cd \
"$REPO_ROOT/configs" && ls ./*.json | sed 's|^\./||; s|\.json$||' |
      tr '\n' ' ')"
  fi
}

[[ -d "$DATA_DIR" ]] || die "DATA_DIR=$DATA_DIR is not a directory"
[[ -f "$TRANSFER_FILE" ]] || die "TRANSFER_FILE=$TRANSFER_FILE does not exist"
[[ "$FINE_TUNE_EPOCHS" =~ ^[0-9.]+$ ]] ||
  die "FINE_TUNE_EPOCHS=$FINE_TUNE_EPOCHS is not a number of epochs"
STUDENT_CONFIG_FILE="$(config_file STUDENT_CONFIG "$STUDENT_CONFIG")"
TEACHER_CONFIG_FILE="$(config_file TEACHER_CONFIG "$TEACHER_CONFIG")"
command -v "$PYTHON" > /dev/null || die "PYTHON=$PYTHON is not a command"

if [[ ! -f "$VOCAB_FILE" ]]; then
  echo "[$NAME] training a $VOCAB_SIZE-token vocab on sample_data/corpus.txt"
  mkdir -p "$(dirname "$VOCAB_FILE")"
  "$PYTHON" "$REPO_ROOT/create_vocab.py" \
    --input_file="$REPO_ROOT/sample_data/corpus.txt" \
    --output_file="$VOCAB_FILE" --vocab_size="$VOCAB_SIZE" \
    ${VERBOSITY_FLAGS[@]+"${VERBOSITY_FLAGS[@]}"}
fi

# One step: scripts/run_classify.sh with the recipe's shared settings.
classify() {
  "$REPO_ROOT/scripts/run_classify.sh" PYTHON="$PYTHON" WORK_DIR="$WORK_DIR" \
    TASK_NAME="$TASK_NAME" DATA_DIR="$DATA_DIR" \
    DO_LOWER_CASE="$DO_LOWER_CASE" MAX_SEQ_LENGTH="$MAX_SEQ_LENGTH" \
    TRAIN_BATCH_SIZE="$TRAIN_BATCH_SIZE" "$@" \
    ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"}
}

# 1. The teacher: fine-tuned here on the labels, or TEACHER_DIR; either
# way evaluated on the dev set and predicting the transfer set (the raw
# logits of each row: teacher/predict_logits.jsonl).
TEACHER="$OUTPUT_DIR/teacher"
if [[ -n "$TEACHER_DIR" ]]; then
  [[ -d "$TEACHER_DIR" ]] || die "TEACHER_DIR=$TEACHER_DIR is not a directory"
  echo "[$NAME] teacher: $TEACHER_DIR, fine-tuned already"
  classify OUTPUT_DIR="$TEACHER" INIT_CHECKPOINT="$TEACHER_DIR" \
    VOCAB_FILE="$TEACHER_VOCAB_FILE" BERT_CONFIG_FILE="$TEACHER_CONFIG_FILE" \
    EXPORT_FORMAT= --nodo_train --predict_file="$TRANSFER_FILE"
else
  classify OUTPUT_DIR="$TEACHER" INIT_CHECKPOINT="$TEACHER_INIT_CHECKPOINT" \
    VOCAB_FILE="$TEACHER_VOCAB_FILE" BERT_CONFIG_FILE="$TEACHER_CONFIG_FILE" \
    LEARNING_RATE="$TEACHER_LEARNING_RATE" \
    NUM_TRAIN_EPOCHS="$TEACHER_EPOCHS" EXPORT_FORMAT= \
    --predict_file="$TRANSFER_FILE"
fi

# 2. The student on the transfer set, against the teacher's logits; 3. on
# the labels, from there (FINE_TUNE_EPOCHS > 0). The last one is exported.
STUDENT="$OUTPUT_DIR/student"
LAST_EXPORT="$EXPORT_FORMAT"
[[ "$FINE_TUNE_EPOCHS" =~ ^0*\.?0*$ ]] || LAST_EXPORT=
classify OUTPUT_DIR="$STUDENT" INIT_CHECKPOINT="$STUDENT_INIT_CHECKPOINT" \
  VOCAB_FILE="$VOCAB_FILE" BERT_CONFIG_FILE="$STUDENT_CONFIG_FILE" \
  LEARNING_RATE="$STUDENT_LEARNING_RATE" NUM_TRAIN_EPOCHS="$DISTILL_EPOCHS" \
  EXPORT_FORMAT="$LAST_EXPORT" --train_file="$TRANSFER_FILE" \
  --teacher_outputs="$TEACHER/predict_logits.jsonl" \
  --temperature="$TEMPERATURE" --distillation_weight="$DISTILLATION_WEIGHT" \
  --nodo_predict
if [[ -z "$LAST_EXPORT" ]]; then
  STUDENT="$OUTPUT_DIR/student_labels"
  classify OUTPUT_DIR="$STUDENT" INIT_CHECKPOINT="$OUTPUT_DIR/student" \
    VOCAB_FILE="$VOCAB_FILE" BERT_CONFIG_FILE="$STUDENT_CONFIG_FILE" \
    LEARNING_RATE="$STUDENT_LEARNING_RATE" NUM_TRAIN_EPOCHS="$FINE_TUNE_EPOCHS" \
    EXPORT_FORMAT="$EXPORT_FORMAT"
fi

# The dev metric of each: accuracy, or for a regression task the loss.
dev_metric() {
  local results="$1/eval_results.txt"
  grep -m1 '^eval_accuracy = ' "$results" ||
    grep -m1 '^eval_loss = ' "$results" ||
    die "$results holds no eval_accuracy or eval_loss"
}
echo "[$NAME] teacher dev $(dev_metric "$TEACHER") ($TEACHER)"
echo "[$NAME] student dev $(dev_metric "$STUDENT") ($STUDENT_CONFIG," \
  "$STUDENT)"
