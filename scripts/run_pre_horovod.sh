#!/usr/bin/env bash
# Pretraining with horovod: horovodrun starts one run_pretraining.py process
# per rank (Gloo, no MPI). See docs/horovod.md.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<USAGE
Usage: scripts/run_pre_horovod.sh [options] [-- extra run_pretraining.py flags]

Launches run_pretraining.py --distribution_strategy=horovod under
horovodrun --gloo. Every option also has an environment variable (in
brackets); an option given on the command line wins.

  -n, --np N            number of ranks, one per GPU (or per CPU process)
                        [NP, default 2]
  -H, --hosts LIST      horovodrun host list, host:slots,... whose slots sum
                        to N [HOSTS, default localhost:N]
  -c, --config FILE     bert_config.json [BERT_CONFIG, default
                        configs/bert_base.json]
  -i, --input GLOBS     pretraining TFRecords, comma-separated globs; at
                        least N files, each rank reads its own [INPUT_FILE]
  -o, --output DIR      checkpoints and logs, written by rank 0 only
                        [OUTPUT_DIR]
  -b, --batch N         GLOBAL batch over all ranks (each rank gets
                        batch/N) [TRAIN_BATCH_SIZE, default 32]
  -s, --seq N           --max_seq_length [MAX_SEQ_LENGTH, default 128]
  -p, --preds N         --max_predictions_per_seq [MAX_PREDICTIONS, default 20]
  -t, --steps N         --num_train_steps [NUM_TRAIN_STEPS, default 100000]
  -w, --warmup N        --num_warmup_steps [NUM_WARMUP_STEPS, default 10000]
  -l, --lr RATE         --learning_rate, used as is for the global batch
                        (not multiplied by N) [LEARNING_RATE, default 1e-4]
  -h, --help            this text

Environment only: PYTHON (interpreter, the same path on every host; default
python3), HOROVODRUN (default: horovodrun next to PYTHON, else on PATH).

Examples:
  scripts/run_pre_horovod.sh -n 4 -i 'data/part-*.tfrecord' -o /tmp/pre
  scripts/run_pre_horovod.sh -n 8 -H server1:4,server2:4 -i ... -o ... \\
      -- --use_fp16 --save_checkpoints_steps 5000
USAGE
}

NP="${NP:-2}"
HOSTS="${HOSTS:-}"
BERT_CONFIG="${BERT_CONFIG:-$REPO_ROOT/configs/bert_base.json}"
INPUT_FILE="${INPUT_FILE:-}"
OUTPUT_DIR="${OUTPUT_DIR:-}"
TRAIN_BATCH_SIZE="${TRAIN_BATCH_SIZE:-32}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-128}"
MAX_PREDICTIONS="${MAX_PREDICTIONS:-20}"
NUM_TRAIN_STEPS="${NUM_TRAIN_STEPS:-100000}"
NUM_WARMUP_STEPS="${NUM_WARMUP_STEPS:-10000}"
LEARNING_RATE="${LEARNING_RATE:-1e-4}"
PYTHON="${PYTHON:-python3}"
EXTRA=()

die() { echo "error: $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 ]] || die "$1 needs a value (see --help)"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|--np) need_value "$@"; NP="$2"; shift 2 ;;
    -H|--hosts) need_value "$@"; HOSTS="$2"; shift 2 ;;
    -c|--config) need_value "$@"; BERT_CONFIG="$2"; shift 2 ;;
    -i|--input) need_value "$@"; INPUT_FILE="$2"; shift 2 ;;
    -o|--output) need_value "$@"; OUTPUT_DIR="$2"; shift 2 ;;
    -b|--batch) need_value "$@"; TRAIN_BATCH_SIZE="$2"; shift 2 ;;
    -s|--seq) need_value "$@"; MAX_SEQ_LENGTH="$2"; shift 2 ;;
    -p|--preds) need_value "$@"; MAX_PREDICTIONS="$2"; shift 2 ;;
    -t|--steps) need_value "$@"; NUM_TRAIN_STEPS="$2"; shift 2 ;;
    -w|--warmup) need_value "$@"; NUM_WARMUP_STEPS="$2"; shift 2 ;;
    -l|--lr) need_value "$@"; LEARNING_RATE="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown option $1 (see --help; run_pretraining.py flags go after --)" ;;
  esac
done

[[ "$NP" =~ ^[1-9][0-9]*$ ]] || die "--np must be a positive integer, got '$NP'"
[[ -n "$INPUT_FILE" ]] || die "--input (or INPUT_FILE) is required"
[[ -n "$OUTPUT_DIR" ]] || die "--output (or OUTPUT_DIR) is required"
HOSTS="${HOSTS:-localhost:$NP}"

PYTHON_PATH="$(command -v "$PYTHON")" || die "PYTHON=$PYTHON not found"
PYTHON_PATH="$("$PYTHON_PATH" -c 'import sys; print(sys.executable)')"
if [[ -z "${HOROVODRUN:-}" ]]; then
  HOROVODRUN="$(dirname "$PYTHON_PATH")/horovodrun"
  [[ -x "$HOROVODRUN" ]] || HOROVODRUN="$(command -v horovodrun || true)"
fi
[[ -n "$HOROVODRUN" && -x "$HOROVODRUN" ]] || die "horovodrun not found: \
install horovod with scripts/install_horovod.sh (see docs/horovod.md)"

CMD=("$HOROVODRUN" -np "$NP" -H "$HOSTS" --gloo
     "$PYTHON_PATH" "$REPO_ROOT/run_pretraining.py"
     --bert_config_file "$BERT_CONFIG"
     --input_file "$INPUT_FILE"
     --output_dir "$OUTPUT_DIR"
     --do_train
     --distribution_strategy horovod
     --train_batch_size "$TRAIN_BATCH_SIZE"
     --max_seq_length "$MAX_SEQ_LENGTH"
     --max_predictions_per_seq "$MAX_PREDICTIONS"
     --num_train_steps "$NUM_TRAIN_STEPS"
     --num_warmup_steps "$NUM_WARMUP_STEPS"
     --learning_rate "$LEARNING_RATE"
     "${EXTRA[@]}")
echo "[run_pre_horovod] ${CMD[*]}"
exec "${CMD[@]}"
