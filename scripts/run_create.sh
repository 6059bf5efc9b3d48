#!/usr/bin/env bash
# Step 1 of 3: pretraining data. Trains a WordPiece vocab on the text with
# create_vocab.py (unless VOCAB_FILE names one), then writes the masked-LM /
# next-sentence TFRecords with create_pretraining_data.py.
# Next: scripts/run_pre.sh, then scripts/run_classify.sh.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$(basename "$0")"
VARIABLES=(PYTHON WORK_DIR INPUT_FILE OUTPUT_DIR VOCAB_FILE VOCAB_SIZE
           DO_LOWER_CASE MAX_SEQ_LENGTH MAX_PREDICTIONS_PER_SEQ DUPE_FACTOR
           MASKED_LM_PROB RANDOM_SEED)

usage() {
  cat <<EOF
Usage: scripts/$NAME [NAME=VALUE ...] [-v 1] [--flag=value ...]

-v 1 shows TensorFlow's INFO detail (absl's --verbosity) in every step.

Builds pretraining TFRecords (and a vocab) from one-sentence-per-line text.
Settings come from environment variables, or from NAME=VALUE arguments,
which take precedence. Arguments starting with -- are passed on to
create_pretraining_data.py.

  PYTHON                   Python interpreter (default: python3)
  WORK_DIR                 base of the default output paths of all three
                           scripts (default: /tmp/bert_sample)
  INPUT_FILE               input text, comma-separated files or globs
                           (default: sample_data/corpus.txt of the repo)
  OUTPUT_DIR               where vocab.txt and pretrain.tfrecord are written
                           (default: \$WORK_DIR/data)
  VOCAB_FILE               an existing vocab to use (copied to
                           \$OUTPUT_DIR/vocab.txt); empty: train one
                           (default: empty)
  VOCAB_SIZE               size of the trained vocab (default: 2000)
  DO_LOWER_CASE            true for an uncased model (default: true)
  MAX_SEQ_LENGTH           tokens per sequence (default: 128)
  MAX_PREDICTIONS_PER_SEQ  masked positions per sequence (default: 20)
  DUPE_FACTOR              passes over the text, each with new masks
                           (default: 5)
  MASKED_LM_PROB           fraction of tokens masked (default: 0.15)
  RANDOM_SEED              seed of the instance generation (default: 12345)

Writes \$OUTPUT_DIR/vocab.txt and \$OUTPUT_DIR/pretrain.tfrecord.
Example:
  scripts/$NAME WORK_DIR=/tmp/run1 MAX_SEQ_LENGTH=64
EOF
}

# shellcheck source=scripts/settings.sh
source "$REPO_ROOT/scripts/settings.sh"
parse_settings "$@"
settings_from_flags INPUT_FILE:input_file DO_LOWER_CASE:do_lower_case \
  MAX_SEQ_LENGTH:max_seq_length \
  MAX_PREDICTIONS_PER_SEQ:max_predictions_per_seq DUPE_FACTOR:dupe_factor \
  MASKED_LM_PROB:masked_lm_prob RANDOM_SEED:random_seed

PYTHON="${PYTHON:-python3}"
WORK_DIR="${WORK_DIR:-/tmp/bert_sample}"
INPUT_FILE="${INPUT_FILE:-$REPO_ROOT/sample_data/corpus.txt}"
OUTPUT_DIR="${OUTPUT_DIR:-$WORK_DIR/data}"
VOCAB_FILE="${VOCAB_FILE:-}"
VOCAB_SIZE="${VOCAB_SIZE:-2000}"
DO_LOWER_CASE="${DO_LOWER_CASE:-true}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"
MAX_PREDICTIONS_PER_SEQ="${MAX_PREDICTIONS_PER_SEQ:-20}"
DUPE_FACTOR="${DUPE_FACTOR:-5}"
MASKED_LM_PROB="${MASKED_LM_PROB:-0.15}"
RANDOM_SEED="${RANDOM_SEED:-12345}"

check_inputs INPUT_FILE "$INPUT_FILE"
if [[ -n "$VOCAB_FILE" && ! -f "$VOCAB_FILE" ]]; then
  die "VOCAB_FILE=$VOCAB_FILE does not exist (leave it empty to train one)"
fi
command -v "$PYTHON" > /dev/null || die "PYTHON=$PYTHON is not a command"
# The records are made with the vocab the next scripts read.
flag_made_from_setting output_file "$OUTPUT_DIR/pretrain.tfrecord" OUTPUT_DIR
flag_made_from_setting vocab_file "$OUTPUT_DIR/vocab.txt" VOCAB_FILE

CREATE_DATA_FLAGS=(--input_file="$INPUT_FILE"
  --output_file="$OUTPUT_DIR/pretrain.tfrecord"
  --vocab_file="$OUTPUT_DIR/vocab.txt" --do_lower_case="$DO_LOWER_CASE"
  --max_seq_length="$MAX_SEQ_LENGTH"
  --max_predictions_per_seq="$MAX_PREDICTIONS_PER_SEQ"
  --masked_lm_prob="$MASKED_LM_PROB" --random_seed="$RANDOM_SEED"
  --dupe_factor="$DUPE_FACTOR" ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"})
# Training the vocab can take long: the records' settings first.
check_program_flags create_pretraining_data.py \
  bertkit.data.creation_options:CreationOptions "${CREATE_DATA_FLAGS[@]}"

mkdir -p "$OUTPUT_DIR"
if [[ -z "$VOCAB_FILE" ]]; then
  echo "[$NAME] training a $VOCAB_SIZE-token vocab on $INPUT_FILE"
  "$PYTHON" "$REPO_ROOT/create_vocab.py" --input_file="$INPUT_FILE" \
    --output_file="$OUTPUT_DIR/vocab.txt" --vocab_size="$VOCAB_SIZE" \
    --do_lower_case="$DO_LOWER_CASE" \
    ${VERBOSITY_FLAGS[@]+"${VERBOSITY_FLAGS[@]}"}
elif [[ "$(realpath "$VOCAB_FILE")" != \
        "$(realpath -m "$OUTPUT_DIR/vocab.txt")" ]]; then
  # The data directory keeps the vocab its records were made with, so the
  # next scripts find it there.
  cp "$VOCAB_FILE" "$OUTPUT_DIR/vocab.txt"
fi

echo "[$NAME] writing $OUTPUT_DIR/pretrain.tfrecord"
"$PYTHON" "$REPO_ROOT/create_pretraining_data.py" "${CREATE_DATA_FLAGS[@]}"
echo "[$NAME] done: $OUTPUT_DIR/vocab.txt, $OUTPUT_DIR/pretrain.tfrecord"
