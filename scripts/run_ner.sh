#!/usr/bin/env bash
# Named entities with run_ner.py (--do_train --do_eval --do_predict), by
# default on the bundled sample (sample_data/ner) and starting from the
# checkpoint of scripts/run_pre.sh; then the export (Hugging Face:
# BertForTokenClassification).
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

Fine-tunes a named-entity tagger on train.txt, scores dev.txt and test.txt
(eval_results.txt: seqeval's entity precision, recall and F1; the tags in
dev_predictions.txt and test_predictions.txt), then exports it to
\$OUTPUT_DIR/export. Settings come from environment variables, or from
NAME=VALUE arguments, which take precedence. Arguments starting with -- are
passed on to run_ner.py, e.g. --cpu_replicas=2, --labels=O,B-PER,I-PER or
the paper's CoNLL-2003 settings --flagfile=configs/ner/conll2003.flags.

  PYTHON                  Python interpreter (default: python3)
  WORK_DIR                base of the default paths (default: /tmp/bert_sample)
  DATA_DIR                train.txt, dev.txt, test.txt (or CoNLL-2003's
                          eng.train, eng.testa, eng.testb)
                          (default: sample_data/ner of the repo)
  VOCAB_FILE              the pretrained model's vocab
                          (default: \$WORK_DIR/data/vocab.txt)
  BERT_CONFIG_FILE        the pretrained model's config
                          (default: configs/bert_tiny.json)
  INIT_CHECKPOINT         starting weights: a checkpoint prefix or directory;
                          set it empty to train from scratch
                          (default: \$WORK_DIR/pretrain, run_pre.sh's output)
  OUTPUT_DIR              checkpoints and results (default: \$WORK_DIR/ner)
  DO_LOWER_CASE           true for an uncased model (default: true)
  MAX_SEQ_LENGTH          WordPieces per window (default: 64)
  TRAIN_BATCH_SIZE        global batch over all replicas (default: 32)
  PREDICT_BATCH_SIZE      dev and test batch (default: 32)
  LEARNING_RATE           peak learning rate (default: 2e-4)
  NUM_TRAIN_EPOCHS        passes over train.txt (default: 5)
  WARMUP_PROPORTION       fraction of steps with warm-up (default: 0.1)
  SAVE_CHECKPOINTS_STEPS  steps between checkpoints (default: 100)
  EXPORT_FORMAT           export_checkpoint.py --format; empty skips the
                          export (default: google,huggingface,saved_model)

Example:
  scripts/$NAME WORK_DIR=/tmp/run1 DATA_DIR=/data/conll2003 \\
    --flagfile=configs/ner/conll2003.flags
EOF2
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"

PYTHON="${PYTHON:-python3}"
WORK_DIR="${WORK_DIR:-/tmp/bert_sample}"
DATA_DIR="${DATA_DIR:-$REPO_ROOT/sample_data/ner}"
VOCAB_FILE="${VOCAB_FILE:-$WORK_DIR/data/vocab.txt}"
BERT_CONFIG_FILE="${BERT_CONFIG_FILE:-$REPO_ROOT/configs/bert_tiny.json}"
# Unset means "the pretraining output"; set but empty means "from scratch".
INIT_CHECKPOINT="${INIT_CHECKPOINT-$WORK_DIR/pretrain}"
OUTPUT_DIR="${OUTPUT_DIR:-$WORK_DIR/ner}"
DO_LOWER_CASE="${DO_LOWER_CASE:-true}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-64}"
TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-32}"
PREDICT_BATCH_SIZE="${PREDICT_BATCH_SIZE:-32}"
LEARNING_RATE="${LEARNING_RATE:-2e-4}"
NUM_TRAIN_EPOCHS="${NUM_TRAIN_EPOCHS:-5}"
WARMUP_PROPORTION="${WARMUP_PROPORTION:-0.1}"
SAVE_CHECKPOINTS_STEPS="${SAVE_CHECKPOINTS_STEPS:-100}"
EXPORT_FORMAT="${EXPORT_FORMAT-google,huggingface,saved_model}"

[[ -d "$DATA_DIR" ]] || die "DATA_DIR=$DATA_DIR is not a directory"
check_finetuning_inputs

echo "[$NAME] fine-tuning named entities on $DATA_DIR from" \
  "${INIT_CHECKPOINT:-scratch} into $OUTPUT_DIR"
"$PYTHON" "$REPO_ROOT/run_ner.py" --do_train --do_eval --do_predict \
  --data_dir="$DATA_DIR" --vocab_file="$VOCAB_FILE" \
  --bert_config_file="$BERT_CONFIG_FILE" --output_dir="$OUTPUT_DIR" \
  --do_lower_case="$DO_LOWER_CASE" --max_seq_length="$MAX_SEQ_LENGTH" \
  --train_batch_size="$TRAIN_BATCH_SIZE" \
  --predict_batch_size="$PREDICT_BATCH_SIZE" \
  --learning_rate="$LEARNING_RATE" --num_train_epochs="$NUM_TRAIN_EPOCHS" \
  --warmup_proportion="$WARMUP_PROPORTION" \
  --save_checkpoints_steps="$SAVE_CHECKPOINTS_STEPS" \
  ${INIT_FLAGS[@]+"${INIT_FLAGS[@]}"} ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"}
echo "[$NAME] done: eval_results.txt, dev_predictions.txt and" \
  "test_predictions.txt in $OUTPUT_DIR"
# The labels come from the labels.txt run_ner.py wrote.
export_model
