#!/usr/bin/env bash
# Builds horovod (TensorFlow + Gloo, no MPI) into the current Python
# environment, keeping the compiled wheel in a cache so that the next install
# (another venv, a CI run) takes seconds instead of a full compile.
#
# Usage: scripts/install_horovod.sh
# Environment:
#   PYTHON               interpreter of the target environment (default: python3
#                        on PATH, i.e. the activated venv).
#   HOROVOD_WHEEL_CACHE  wheel cache directory
#                        (default: $HOME/.cache/bert-horovod-wheels).
#   HOROVOD_GPU_OPERATIONS=NCCL  on GPU machines: all-reduce on the GPUs
#                        (needs CUDA and NCCL; cached as a separate wheel).
# Exits 0 at once if horovod.tensorflow is already importable.
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CACHE_ROOT="${HOROVOD_WHEEL_CACHE:-$HOME/.cache/bert-horovod-wheels}"

log() { echo "[install_horovod] $*"; }

if "$PYTHON" -c "import horovod.tensorflow" 2>/dev/null; then
  log "horovod is already importable by $PYTHON: nothing to do"
  exit 0
fi

# The pin lives in requirements-horovod.txt only.
REQUIREMENT="$(grep -E '^horovod==' "$REPO_ROOT/requirements-horovod.txt")"
# The wheel links against TensorFlow's C++ ABI: key the cache on the Python
# and TensorFlow versions as well as horovod's.
KEY="$("$PYTHON" - "$REQUIREMENT" <<'PY'
import sys
import tensorflow as tf
print("%s-py%d%d-tf%s" % (sys.argv[1].replace("==", "-"),
                          sys.version_info[0], sys.version_info[1],
                          tf.__version__))
PY
)"
# A GPU build (HOROVOD_GPU_OPERATIONS=NCCL, passed through to the build) is a
# different wheel from the CPU one.
KEY="$KEY${HOROVOD_GPU_OPERATIONS:+-gpu-$HOROVOD_GPU_OPERATIONS}"
CACHE_DIR="$CACHE_ROOT/$KEY"
log "python: $("$PYTHON" -c 'import sys; print(sys.executable)')"
log "requirement: $REQUIREMENT; wheel cache: $CACHE_DIR"

wheel_in_cache() { ls "$CACHE_DIR"/horovod-*.whl 2>/dev/null | head -n 1; }

if [[ -z "$(wheel_in_cache)" ]]; then
  for tool in cmake g++; do
    command -v "$tool" >/dev/null || {
      echo "[install_horovod] error: $tool is needed to build horovod" >&2
      exit 1
    }
  done
  export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
  export HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
  mkdir -p "$CACHE_ROOT"
  BUILD_DIR="$(mktemp -d "$CACHE_ROOT/.build-XXXXXX")"
  trap 'rm -rf "$BUILD_DIR"' EXIT
  log "no cached wheel: compiling $REQUIREMENT (several minutes)"
  # No build isolation: horovod's setup.py must import the installed
  # TensorFlow to find its headers and compile flags.
  "$PYTHON" -m pip wheel --no-deps --no-build-isolation --no-cache-dir \
      -w "$BUILD_DIR" "$REQUIREMENT"
  mkdir -p "$CACHE_DIR"
  # Moved into place only when complete, so a killed build caches nothing.
  for wheel in "$BUILD_DIR"/horovod-*.whl; do
    mv "$wheel" "$CACHE_DIR/.$(basename "$wheel").partial"
    mv "$CACHE_DIR/.$(basename "$wheel").partial" "$CACHE_DIR/$(basename "$wheel")"
  done
  log "cached $(wheel_in_cache)"
else
  log "reusing cached wheel $(wheel_in_cache)"
fi

"$PYTHON" -m pip install "$(wheel_in_cache)"
"$PYTHON" -c "import horovod, horovod.tensorflow; print('[install_horovod] horovod %s imports' % horovod.__version__)"
HOROVODRUN="$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")/horovodrun"
"$HOROVODRUN" --check-build
