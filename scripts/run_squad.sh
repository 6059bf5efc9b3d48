#!/usr/bin/env bash
# Fine-tuning on SQuAD 1.1 or 2.0 with run_squad.py (--do_train
# --do_predict), by default on the repository's small hand-made SQuAD file
# and starting from the checkpoint of scripts/run_pre.sh.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$(basename "$0")"
VARIABLES=(PYTHON WORK_DIR TRAIN_FILE PREDICT_FILE VERSION_2_WITH_NEGATIVE
           VOCAB_FILE BERT_CONFIG_FILE INIT_CHECKPOINT OUTPUT_DIR
           DO_LOWER_CASE MAX_SEQ_LENGTH DOC_STRIDE MAX_QUERY_LENGTH
           TRAIN_BATCH_SIZE PREDICT_BATCH_SIZE LEARNING_RATE NUM_TRAIN_EPOCHS
           WARMUP_PROPORTION SAVE_CHECKPOINTS_STEPS EXPORT_FORMAT)

usage() {
  cat <<USAGE
Usage: scripts/$NAME [NAME=VALUE ...] [--flag=value ...]

Fine-tunes on a SQuAD training file, predicts a SQuAD file
(predictions.json, nbest_predictions.json, null_odds.json for 2.0) and, when
it has answers, evaluates it (exact match and F1 in eval_results.txt), then
exports the model to \$OUTPUT_DIR/export. Settings come from environment
variables, or from NAME=VALUE arguments, which take precedence. Arguments
starting with -- are passed on to run_squad.py, e.g. --cpu_replicas=2,
--null_score_diff_threshold=-2 or --nodo_train.

  PYTHON                  Python interpreter (default: python3)
  WORK_DIR                base of the default paths (default: /tmp/bert_sample)
  TRAIN_FILE              SQuAD json to train on, e.g. train-v1.1.json
                          (default: tests/fixtures/squad/squad_v1.json of the
                          repo, 23 hand-made questions: a smoke run)
  PREDICT_FILE            SQuAD json to predict, e.g. dev-v1.1.json
                          (default: TRAIN_FILE)
  VERSION_2_WITH_NEGATIVE true for SQuAD 2.0 files (default: false)
  VOCAB_FILE              the pretrained model's vocab
                          (default: \$WORK_DIR/data/vocab.txt)
  BERT_CONFIG_FILE        the pretrained model's config
                          (default: configs/bert_tiny.json)
  INIT_CHECKPOINT         starting weights: a checkpoint prefix or directory
                          (also Google's layout or a Hugging Face directory);
                          set it empty to train from scratch
                          (default: \$WORK_DIR/pretrain, run_pre.sh's output)
  OUTPUT_DIR              checkpoints and results (default: \$WORK_DIR/squad)
  DO_LOWER_CASE           true for an uncased model (default: true)
  MAX_SEQ_LENGTH          tokens per window (default: 128; upstream: 384)
  DOC_STRIDE              tokens between window starts (default: 64;
                          upstream: 128)
  MAX_QUERY_LENGTH        question tokens kept (default: 32; upstream: 64)
  TRAIN_BATCH_SIZE        global batch over all replicas (default: 32)
  PREDICT_BATCH_SIZE      predict batch (default: 8)
  LEARNING_RATE           peak learning rate (default: 5e-5)
  NUM_TRAIN_EPOCHS        passes over the training questions (default: 3)
  WARMUP_PROPORTION       fraction of steps with warm-up (default: 0.1)
  SAVE_CHECKPOINTS_STEPS  steps between checkpoints (default: 1000)
  EXPORT_FORMAT           export_checkpoint.py --format; empty skips the
                          export (default: google,huggingface,saved_model)

Example (SQuAD 2.0 with a Google model):
  scripts/$NAME TRAIN_FILE=\$SQUAD_DIR/train-v2.0.json \\
    PREDICT_FILE=\$SQUAD_DIR/dev-v2.0.json VERSION_2_WITH_NEGATIVE=true \\
    VOCAB_FILE=\$BERT/vocab.txt BERT_CONFIG_FILE=\$BERT/bert_config.json \\
    INIT_CHECKPOINT=\$BERT/bert_model.ckpt MAX_SEQ_LENGTH=384 \\
    DOC_STRIDE=128 MAX_QUERY_LENGTH=64 TRAIN_BATCH_SIZE=24 \\
    LEARNING_RATE=3e-5 NUM_TRAIN_EPOCHS=2 --multi_gpu
USAGE
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"

PYTHON="${PYTHON:-python3}"
WORK_DIR="${WORK_DIR:-/tmp/bert_sample}"
TRAIN_FILE="${TRAIN_FILE:-$REPO_ROOT/tests/fixtures/squad/squad_v1.json}"
PREDICT_FILE="${PREDICT_FILE:-$TRAIN_FILE}"
VERSION_2_WITH_NEGATIVE="${VERSION_2_WITH_NEGATIVE:-false}"
VOCAB_FILE="${VOCAB_FILE:-$WORK_DIR/data/vocab.txt}"
BERT_CONFIG_FILE="${BERT_CONFIG_FILE:-$REPO_ROOT/configs/bert_tiny.json}"
# Unset means "the pretraining output"; set but empty means "from scratch".
INIT_CHECKPOINT="${INIT_CHECKPOINT-$WORK_DIR/pretrain}"
OUTPUT_DIR="${OUTPUT_DIR:-$WORK_DIR/squad}"
DO_LOWER_CASE="${DO_LOWER_CASE:-true}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"
DOC_STRIDE="${DOC_STRIDE:-64}"
MAX_QUERY_LENGTH="${MAX_QUERY_LENGTH:-32}"
TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-32}"
PREDICT_BATCH_SIZE="${PREDICT_BATCH_SIZE:-8}"
LEARNING_RATE="${LEARNING_RATE:-5e-5}"
NUM_TRAIN_EPOCHS="${NUM_TRAIN_EPOCHS:-3}"
WARMUP_PROPORTION="${WARMUP_PROPORTION:-0.1}"
SAVE_CHECKPOINTS_STEPS="${SAVE_CHECKPOINTS_STEPS:-1000}"
EXPORT_FORMAT="${EXPORT_FORMAT-google,huggingface,saved_model}"

[[ -f "$TRAIN_FILE" ]] || die "TRAIN_FILE=$TRAIN_FILE does not exist"
[[ -f "$PREDICT_FILE" ]] || die "PREDICT_FILE=$PREDICT_FILE does not exist"
check_finetuning_inputs

echo "[$NAME] fine-tuning on $TRAIN_FILE from ${INIT_CHECKPOINT:-scratch}" \
  "into $OUTPUT_DIR"
"$PYTHON" "$REPO_ROOT/run_squad.py" --do_train --do_predict \
  --train_file="$TRAIN_FILE" --predict_file="$PREDICT_FILE" \
  --version_2_with_negative="$VERSION_2_WITH_NEGATIVE" \
  --vocab_file="$VOCAB_FILE" --bert_config_file="$BERT_CONFIG_FILE" \
  --output_dir="$OUTPUT_DIR" --do_lower_case="$DO_LOWER_CASE" \
  --max_seq_length="$MAX_SEQ_LENGTH" --doc_stride="$DOC_STRIDE" \
  --max_query_length="$MAX_QUERY_LENGTH" \
  --train_batch_size="$TRAIN_BATCH_SIZE" \
  --predict_batch_size="$PREDICT_BATCH_SIZE" \
  --learning_rate="$LEARNING_RATE" --num_train_epochs="$NUM_TRAIN_EPOCHS" \
  --warmup_proportion="$WARMUP_PROPORTION" \
  --save_checkpoints_steps="$SAVE_CHECKPOINTS_STEPS" \
  ${INIT_FLAGS[@]+"${INIT_FLAGS[@]}"} ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"}
echo "[$NAME] done: predictions.json (and eval_results.txt when" \
  "$PREDICT_FILE has answers) in $OUTPUT_DIR"
export_model
