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
  -i, --input GLOBS     pretraining TFRecords, comma-separated globs; each
                        rank reads its own files (its own records of fewer
                        files than ranks) [INPUT_FILE]
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
  -v, --verbosity N     1 shows TensorFlow's INFO detail (absl's --verbosity)
  -h, --help            this text

Each rank's lines come prefixed with [rank]<stream>:. When the ranks fail,
the launcher ends with their error line (once) and exits with their code.

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
VERBOSITY=0

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
    -v|--verbosity) need_value "$@"; VERBOSITY="$2"; shift 2 ;;
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
     --verbosity "$VERBOSITY"
     ${EXTRA[@]+"${EXTRA[@]}"})
if [[ ! "$VERBOSITY" =~ ^[1-9] ]]; then
  # horovodrun imports TensorFlow too: its C++ start-up lines, as the ranks'.
  export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
fi
echo "[run_pre_horovod] ${CMD[*]}"

# horovodrun passes each rank's lines on with a [rank]<stream>: prefix and,
# when a rank exits non-zero, ends with a Python traceback of its own under
# the ranks' clear `error:` line (which every rank prints). So the ranks'
# lines go through as they come, on their own stream, except their error
# lines, kept for the end;
# horovodrun's own lines after a rank's non-zero exit code (its report of the
# failure) are dropped; the script ends with the error line, once, and exits
# with the ranks' code.
report="$(mktemp)"
trap 'rm -f "$report"' EXIT
set +e
"${CMD[@]}" 2>&1 | awk -v report="$report" '
  /^\[[0-9]+\]<std(out|err)>:error: / {
    sub(/^\[[0-9]+\]<std(out|err)>:/, "")
    if (!($0 in seen)) { seen[$0] = 1; errors[++num_errors] = $0 }
    next
  }
  /^\[[0-9]+\]<stderr>:/ { print > "/dev/stderr"; fflush("/dev/stderr"); next }
  /^\[[0-9]+\]<stdout>:/ { print; fflush(); next }
  /^Process [0-9]+ exit with status code [0-9]+\.$/ {
    code = $NF; sub(/\.$/, "", code)
    if (code != 0 && rank_code == "") rank_code = code
    next
  }
  /^Terminating remaining workers after failure/ { next }
  rank_code == "" { print; fflush() }
  END {
    for (i = 1; i <= num_errors; i++) print "error " errors[i] > report
    if (rank_code != "") print "code " rank_code > report
  }'
status="${PIPESTATUS[0]}"
set -e
while read -r kind text; do
  case "$kind" in
    error) echo "$text" >&2 ;;
    code) status="$text" ;;
  esac
done < "$report"
exit "$status"
