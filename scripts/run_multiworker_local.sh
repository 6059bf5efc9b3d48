#!/usr/bin/env bash
# Starts N MultiWorkerMirroredStrategy workers of run_pretraining.py on this
# machine (127.0.0.1), each with its own TF_CONFIG, and waits for all of them.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/run_multiworker_local.sh [run_pretraining.py flags...]

Runs NUM_WORKERS copies of run_pretraining.py as one MultiWorkerMirroredStrategy
cluster on 127.0.0.1. Every flag is passed to each worker unchanged
(--output_dir is shared: worker 0 is the chief and writes checkpoints).

Environment:
  NUM_WORKERS   workers to start (default 2)
  BASE_PORT     first port; worker i listens on BASE_PORT+i (default: a free
                port range picked automatically)
  LOG_DIR       where worker-<i>.log files go (default: the --output_dir)
  PYTHON        interpreter (default python3)

If one worker fails, the others are stopped and the script exits with that
worker's exit code. For several machines, set TF_CONFIG on each machine
yourself (see docs/distributed.md, "Several machines").
USAGE
}

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then usage; exit 0; fi

NUM_WORKERS="${NUM_WORKERS:-2}"
PYTHON="${PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

output_dir=""
for arg in "$@"; do
  case "$arg" in --output_dir=*) output_dir="${arg#--output_dir=}" ;; esac
done
prev=""
for arg in "$@"; do
  if [[ "$prev" == "--output_dir" ]]; then output_dir="$arg"; fi
  prev="$arg"
done
if [[ -z "$output_dir" ]]; then
  echo "error: --output_dir is required" >&2; exit 2
fi
if ! [[ "$NUM_WORKERS" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: NUM_WORKERS must be a positive integer, got '$NUM_WORKERS'" >&2
  exit 2
fi
LOG_DIR="${LOG_DIR:-$output_dir}"
mkdir -p "$LOG_DIR"

if [[ -z "${BASE_PORT:-}" ]]; then
  BASE_PORT="$("$PYTHON" - "$NUM_WORKERS" <<'PY'
import socket, sys
n = int(sys.argv[1])
for base in range(20000, 60000, 97):
  socks = []
  try:
    for i in range(n):
      s = socket.socket(); s.bind(("127.0.0.1", base + i)); socks.append(s)
    print(base); break
  except OSError:
    pass
  finally:
    for s in socks: s.close()
PY
)"
fi

workers=""
for ((i = 0; i < NUM_WORKERS; i++)); do
  workers+="${workers:+,}\"127.0.0.1:$((BASE_PORT + i))\""
done

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup INT TERM

for ((i = 0; i < NUM_WORKERS; i++)); do
  tf_config="{\"cluster\":{\"worker\":[${workers}]},\"task\":{\"type\":\"worker\",\"index\":${i}}}"
  echo "starting worker $i: 127.0.0.1:$((BASE_PORT + i)), log $LOG_DIR/worker-$i.log"
  TF_CONFIG="$tf_config" "$PYTHON" "$HERE/run_pretraining.py" "$@" \
    >"$LOG_DIR/worker-$i.log" 2>&1 &
  pids+=("$!")
done

status=0
remaining=${#pids[@]}
while ((remaining > 0)); do
  if wait -n; then
    remaining=$((remaining - 1))
  else
    status=$?
    echo "error: a worker exited with status $status; stopping the others" \
      "(logs in $LOG_DIR)" >&2
    cleanup
    wait || true
    exit "$status"
  fi
done
echo "all $NUM_WORKERS workers finished"
