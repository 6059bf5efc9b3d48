#!/usr/bin/env bash
# Pretraining with BytePS: a scheduler, servers that sum the gradients and
# one run_pretraining.py worker per device, wired by ps-lite's DMLC_*
# variables. See docs/byteps.md.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<USAGE
Usage: scripts/run_pre_byteps.sh [options] [-- extra run_pretraining.py flags]

Starts the BytePS scheduler, the servers and the workers of
run_pretraining.py --distribution_strategy=byteps, waits for the workers,
then stops the scheduler and the servers. Every option also has an
environment variable (in brackets); an option given on the command line wins.

  -n, --np N            workers on each machine, one per GPU (or per CPU
                        process) [NP, default 2]
  -S, --servers N       BytePS servers on each machine [NUM_SERVERS,
                        default 1]
  -H, --hosts LIST      machines, comma-separated; the scheduler runs on
                        the first, every one runs N workers and the servers,
                        started through ssh [HOSTS, default: this machine
                        only, no ssh]
  -P, --port N          the scheduler's port [DMLC_PS_ROOT_PORT, default: a
                        free one]
  -c, --config FILE     bert_config.json [BERT_CONFIG, default
                        configs/bert_base.json]
  -i, --input GLOBS     pretraining TFRecords, comma-separated globs; each
                        worker reads its own files (its own records of fewer
                        files than workers) [INPUT_FILE]
  -o, --output DIR      checkpoints and logs, written by worker 0 only
                        [OUTPUT_DIR]
  -b, --batch N         GLOBAL batch over all workers (each worker gets
                        batch/workers) [TRAIN_BATCH_SIZE, default 32]
  -s, --seq N           --max_seq_length [MAX_SEQ_LENGTH, default 128]
  -p, --preds N         --max_predictions_per_seq [MAX_PREDICTIONS, default 20]
  -t, --steps N         --num_train_steps [NUM_TRAIN_STEPS, default 100000]
  -w, --warmup N        --num_warmup_steps [NUM_WARMUP_STEPS, default 10000]
  -l, --lr RATE         --learning_rate, used as is for the global batch
                        (not multiplied by the workers) [LEARNING_RATE,
                        default 1e-4]
  -v, --verbosity N     1 shows TensorFlow's INFO detail (absl's --verbosity)
  -h, --help            this text

Each worker's lines come prefixed with [rank]. When workers fail, the
launcher ends with their error line (once) and exits with their code.
SIGTERM or SIGINT to the launcher goes to every worker: they stop after the
same step, with a checkpoint (docs/preemption.md).

On GPU machines the N workers of a machine are one BytePS worker of N local
ranks (BYTEPS_LOCAL_SIZE=N, one GPU each); without GPUs each worker process
is a BytePS worker of its own (BytePS's CPU-only mode).

Environment only: PYTHON (interpreter, the same path on every host; default
python3), SSH (default ssh), BYTEPS_LOG_DIR (the scheduler's and servers'
logs; default a temporary directory, kept only when one of them fails).

Examples:
  scripts/run_pre_byteps.sh -n 4 -i 'data/part-*.tfrecord' -o /tmp/pre
  scripts/run_pre_byteps.sh -n 8 -H server1,server2 -i ... -o ... \\
      -- --use_fp16 --save_checkpoints_steps 5000
USAGE
}

NP="${NP:-2}"
NUM_SERVERS="${NUM_SERVERS:-1}"
HOSTS="${HOSTS:-}"
PORT="${DMLC_PS_ROOT_PORT:-}"
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
SSH="${SSH:-ssh}"
EXTRA=()
VERBOSITY=0

die() { echo "error: $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 ]] || die "$1 needs a value (see --help)"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|--np) need_value "$@"; NP="$2"; shift 2 ;;
    -S|--servers) need_value "$@"; NUM_SERVERS="$2"; shift 2 ;;
    -H|--hosts) need_value "$@"; HOSTS="$2"; shift 2 ;;
    -P|--port) need_value "$@"; PORT="$2"; shift 2 ;;
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
[[ "$NUM_SERVERS" =~ ^[1-9][0-9]*$ ]] || \
  die "--servers must be a positive integer, got '$NUM_SERVERS'"
[[ -z "$PORT" || "$PORT" =~ ^[1-9][0-9]*$ && "$PORT" -lt 65536 ]] || \
  die "--port must be a port number (1-65535), got '$PORT'"
[[ -n "$INPUT_FILE" ]] || die "--input (or INPUT_FILE) is required"
[[ -n "$OUTPUT_DIR" ]] || die "--output (or OUTPUT_DIR) is required"

if [[ -n "$HOSTS" ]]; then
  IFS=, read -r -a HOST_LIST <<< "$HOSTS"
  for host in "${HOST_LIST[@]}"; do
    [[ "$host" =~ ^[A-Za-z0-9._-]+$ ]] || \
      die "--hosts takes host names separated by commas, got '$HOSTS'"
  done
else
  HOST_LIST=(127.0.0.1)
fi
PYTHON_PATH="$(command -v "$PYTHON")" || die "PYTHON=$PYTHON not found"
PYTHON_PATH="$("$PYTHON_PATH" -c 'import sys; print(sys.executable)')"
NUM_HOSTS="${#HOST_LIST[@]}"
# ps-lite binds to these addresses, so names become IPv4 addresses (as the
# launching machine resolves them; ZeroMQ does not resolve names).
ADDRESSES=()
for host in "${HOST_LIST[@]}"; do
  address="$("$PYTHON_PATH" -c 'import socket, sys
print(socket.gethostbyname(sys.argv[1]))' "$host" 2>/dev/null)" \
    || die "--hosts: cannot resolve '$host'"
  ADDRESSES+=("$address")
done
loopback=0
for address in "${ADDRESSES[@]}"; do
  [[ "$address" == 127.* ]] && loopback=$((loopback + 1))
done
if [[ "$loopback" -gt 0 && "$loopback" -lt "$NUM_HOSTS" ]]; then
  die "--hosts: $HOSTS resolve to ${ADDRESSES[*]} here, loopback beside \
other machines' addresses; give every machine's network address"
fi
ROOT_URI="${ADDRESSES[0]}"
# (Importing byteps.server would start a server.)
"$PYTHON_PATH" -c "import importlib.util as u, sys
sys.exit(u.find_spec('byteps') is None or u.find_spec('byteps.server') is None)" \
  || die "$PYTHON_PATH cannot import byteps: build it with \
scripts/install_byteps.sh (see docs/byteps.md)"

if [[ -z "$PORT" ]]; then
  PORT="$("$PYTHON_PATH" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')"
fi

# GPU machines: one BytePS worker per machine, of NP local ranks (BytePS
# sums within the machine over NCCL). Without GPUs: every process is a
# BytePS worker of its own (CPU-only mode takes one local rank).
NUM_GPUS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
if [[ "$NUM_GPUS" -gt 0 ]]; then
  LOCAL_SIZE="$NP"
  NUM_WORKER="$NUM_HOSTS"
else
  LOCAL_SIZE=1
  NUM_WORKER=$((NUM_HOSTS * NP))
  # ps-lite's receiving threads poll without pause, a core each: on CPUs
  # that is the training's (patches/byteps/03-cpu-only.patch).
  export PS_ZMQ_IDLE_SLEEP_US="${PS_ZMQ_IDLE_SLEEP_US:-100}"
fi

COMMON_ENV=(${PS_ZMQ_IDLE_SLEEP_US:+PS_ZMQ_IDLE_SLEEP_US=$PS_ZMQ_IDLE_SLEEP_US}
            DMLC_PS_ROOT_URI="$ROOT_URI" DMLC_PS_ROOT_PORT="$PORT"
            DMLC_NUM_WORKER="$NUM_WORKER"
            DMLC_NUM_SERVER=$((NUM_HOSTS * NUM_SERVERS)))
TRAIN=("$PYTHON_PATH" "$REPO_ROOT/run_pretraining.py"
       --bert_config_file "$BERT_CONFIG"
       --input_file "$INPUT_FILE"
       --output_dir "$OUTPUT_DIR"
       --do_train
       --distribution_strategy byteps
       --train_batch_size "$TRAIN_BATCH_SIZE"
       --max_seq_length "$MAX_SEQ_LENGTH"
       --max_predictions_per_seq "$MAX_PREDICTIONS"
       --num_train_steps "$NUM_TRAIN_STEPS"
       --num_warmup_steps "$NUM_WARMUP_STEPS"
       --learning_rate "$LEARNING_RATE"
       --verbosity "$VERBOSITY"
       ${EXTRA[@]+"${EXTRA[@]}"})
if [[ ! "$VERBOSITY" =~ ^[1-9] ]]; then
  export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
fi

LOG_DIR="${BYTEPS_LOG_DIR:-}"
KEEP_LOGS=0
[[ -n "$LOG_DIR" ]] && KEEP_LOGS=1
LOG_DIR="${LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/bert-byteps-XXXXXX")}"
mkdir -p "$LOG_DIR"
REPORT="$LOG_DIR/worker-errors"
: > "$REPORT"

# Runs "$@" (an env ... command) on host $1: directly for this machine (in
# a session of its own, so that a terminal's Ctrl-C reaches the launcher
# alone, which passes it on once), through ssh for the others (the command
# quoted for the remote shell).
on_host() {
  local host="$1"; shift
  if [[ -z "$HOSTS" ]]; then
    setsid "$@"
  else
    "$SSH" "$host" "cd $(printf %q "$REPO_ROOT") && $(printf '%q ' "$@")"
  fi
}

SERVICE_PIDS=()
WORKER_PIDS=()
# The scheduler or a server, started so that $! is its own pid (python on
# this machine, ssh for another), for stop_services.
start_service() {  # role host_index index
  local command=(env "${COMMON_ENV[@]}" DMLC_ROLE="$1"
                 DMLC_NODE_HOST="${ADDRESSES[$2]}"
                 "$PYTHON_PATH" -c "import byteps.server")
  if [[ -z "$HOSTS" ]]; then
    setsid "${command[@]}" > "$LOG_DIR/$1-$3.log" 2>&1 < /dev/null &
  else
    "$SSH" "${HOST_LIST[$2]}" "cd $(printf %q "$REPO_ROOT") && $(printf '%q ' "${command[@]}")" \
        > "$LOG_DIR/$1-$3.log" 2>&1 < /dev/null &
  fi
  SERVICE_PIDS+=($!)
}

# Every worker line goes on prefixed with its rank, on its own stream,
# except its `error:` lines, kept for the end (every worker prints the same
# one). The filters ignore INT and TERM, which the launcher passes on to
# the workers; the worker's exit code goes to worker-<rank>.code.
start_worker() {  # host_index worker_id local_rank rank
  (
    trap '' INT TERM
    { { set +e
        on_host "${HOST_LIST[$1]}" env "${COMMON_ENV[@]}" DMLC_ROLE=worker \
            DMLC_NODE_HOST="${ADDRESSES[$1]}" DMLC_WORKER_ID="$2" \
            BYTEPS_LOCAL_RANK="$3" \
            BYTEPS_LOCAL_SIZE="$LOCAL_SIZE" BERT_BYTEPS_LAUNCH="$PORT" \
            "${TRAIN[@]}" < /dev/null 2>&1 1>&3 3>&-
        echo $? > "$LOG_DIR/worker-$4.code"
      } | awk -v rank="$4" -v report="$REPORT" '
          /^error: / { print >> report; fflush(report); next }
          { print "[" rank "] " $0; fflush() }' >&2 3>&-
    } 3>&1 | awk -v rank="$4" '{ print "[" rank "] " $0; fflush() }'
  ) &
  WORKER_PIDS+=($!)
}

stop_services() {
  local pid
  for pid in ${SERVICE_PIDS[@]+"${SERVICE_PIDS[@]}"}; do
    kill "$pid" 2>/dev/null || true
  done
}
# The workers of this launch on this machine carry BERT_BYTEPS_LAUNCH.
forward_signal() {
  echo "[run_pre_byteps] SIG$1: passing it to the workers" >&2
  local environ pid
  for environ in /proc/[0-9]*/environ; do
    pid="${environ#/proc/}"; pid="${pid%/environ}"
    if tr '\0' '\n' < "$environ" 2>/dev/null \
        | grep -qx "BERT_BYTEPS_LAUNCH=$PORT"; then
      kill "-$1" "$pid" 2>/dev/null || true
    fi
  done
}
trap 'forward_signal TERM' TERM
trap 'forward_signal INT' INT
trap 'stop_services' EXIT

echo "[run_pre_byteps] scheduler ${ROOT_URI}:${PORT}, $((NUM_HOSTS * NUM_SERVERS)) server(s), $((NUM_HOSTS * NP)) worker(s) on ${NUM_HOSTS} machine(s); ${TRAIN[*]}"
start_service scheduler 0 0
for ((h = 0; h < NUM_HOSTS; h++)); do
  for ((s = 0; s < NUM_SERVERS; s++)); do
    start_service server "$h" $((h * NUM_SERVERS + s))
  done
done
for ((h = 0; h < NUM_HOSTS; h++)); do
  for ((l = 0; l < NP; l++)); do
    rank=$((h * NP + l))
    if [[ "$LOCAL_SIZE" -eq 1 ]]; then
      start_worker "$h" "$rank" 0 "$rank"
    else
      start_worker "$h" "$h" "$l" "$rank"
    fi
  done
done

for pid in "${WORKER_PIDS[@]}"; do
  # A trapped signal interrupts wait; the worker runs on.
  while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
done
status=0
for ((rank = 0; rank < NUM_HOSTS * NP; rank++)); do
  code="$(cat "$LOG_DIR/worker-$rank.code" 2>/dev/null || echo 1)"
  if [[ "$code" -ne 0 && "$status" -eq 0 ]]; then status="$code"; fi
done

# The servers and the scheduler end by themselves once every worker has shut
# BytePS down; after a failure they would wait forever.
for pid in "${SERVICE_PIDS[@]}"; do
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
done
stop_services
failed_services=0
for pid in "${SERVICE_PIDS[@]}"; do
  set +e; wait "$pid" 2>/dev/null; code=$?; set -e
  # 143: stopped above, after a worker failed.
  [[ "$code" -eq 0 || "$code" -eq 143 ]] || failed_services=1
done
if [[ "$failed_services" -eq 1 && "$status" -eq 0 ]]; then
  echo "error: a BytePS scheduler or server failed; see its log in $LOG_DIR" >&2
  KEEP_LOGS=1
  status=1
fi
sort -u "$REPORT" >&2
rm -f "$REPORT"
[[ "$KEEP_LOGS" -eq 1 ]] || rm -rf "$LOG_DIR"
exit "$status"
