#!/usr/bin/env bash
# Runs the pretraining throughput sweep of docs/benchmarks.md (benchmark.py).
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/benchmark.sh OUTPUT_DIR [benchmark.py flags...]

Sweeps short pretraining runs and writes OUTPUT_DIR/results.csv, results.md
(the layout of the published multi-GPU BERT tables) and results.png. Without flags it runs the sweep of
docs/benchmarks.md: BERT-mini, sequence 128, 32 examples per replica, 1 and 2
replicas, fp32 and fp16, MirroredStrategy, MultiWorkerMirroredStrategy,
horovod and BytePS (each left out, with a note, where it is not installed;
named in --strategies without its engine, benchmark.py refuses it). Flags given
after OUTPUT_DIR are passed to benchmark.py and override those defaults, e.g.

  scripts/benchmark.sh /tmp/bench --replicas=1,2,4 --per_replica_batches=4 \
      --bert_config_files=configs/bert_base.json --seq_lengths=512 \
      --peak_tflops=125

On a machine without GPUs the replicas are logical CPU devices; the CPU's
float32 matmul peak is measured for the MFU column unless --peak_tflops is
given.

Environment:
  PYTHON   interpreter (default python3)
USAGE
}

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then usage; exit 0; fi
if [[ $# -lt 1 || "$1" == --* ]]; then
  echo "error: the first argument must be the output directory" >&2
  usage >&2
  exit 2
fi

PYTHON="${PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
output_dir="$1"
shift

strategies=mirrored,multi_worker
given_strategies=0
for arg in "$@"; do
  if [[ "$arg" == --strategies=* || "$arg" == --strategies ]]; then
    given_strategies=1
  fi
done
# The default sweep runs on any machine: horovod and BytePS join it where
# $PYTHON has them. A user's --strategies is taken as given.
if (( ! given_strategies )); then
  for engine in horovod byteps; do
    if "$PYTHON" -c "import importlib.util as u, sys
sys.exit(u.find_spec('$engine') is None)"; then
      strategies+=",$engine"
    else
      echo "note: $engine is not installed for $PYTHON: the default sweep" \
        "leaves its cells out (scripts/install_$engine.sh installs it)" >&2
    fi
  done
fi

exec "$PYTHON" "$HERE/benchmark.py" \
  --output_dir="$output_dir" \
  --bert_config_files=configs/bert_mini.json \
  --seq_lengths=128 \
  --per_replica_batches=32 \
  --replicas=1,2 \
  --precisions=fp32,fp16 \
  --strategies="$strategies" \
  --num_train_steps=30 \
  --throughput_warmup_steps=10 \
  "$@"
