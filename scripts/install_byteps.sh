#!/usr/bin/env bash
# Builds BytePS (TensorFlow plugin + server) into the current Python
# environment and keeps the wheel in a cache, as install_horovod.sh does.
#
# BytePS 0.2.5's source from PyPI does not build as it is here: its ps-lite
# downloads zeromq 4.1.4 at build time, its TensorFlow plugin predates
# TensorFlow 2.15's headers, and its worker needs a GPU. The patches in
# patches/byteps/ (applied to the unpacked source, never vendored) make it
# link Debian's libzmq, compile against TensorFlow 2.15, and run without a
# GPU when BYTEPS_CPU_ONLY=1. The CUDA runtime and NCCL it links come from
# NVIDIA's PyPI wheels (requirements-byteps.txt), so no system CUDA is needed.
#
# Usage: scripts/install_byteps.sh
# Environment:
#   PYTHON              interpreter of the target environment (default: python3
#                       on PATH, i.e. the activated venv).
#   BYTEPS_WHEEL_CACHE  wheel cache directory
#                       (default: $HOME/.cache/bert-byteps-wheels).
# Needs: g++, make, and Debian's libzmq3-dev and libnuma-dev (apt-get install
# -y libzmq3-dev libnuma-dev); tensorflow (requirements.txt) installed.
# Exits 0 at once if byteps.tensorflow is already importable.
set -euo pipefail
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CACHE_ROOT="${BYTEPS_WHEEL_CACHE:-$HOME/.cache/bert-byteps-wheels}"
REQUIREMENTS="$REPO_ROOT/requirements-byteps.txt"

log() { echo "[install_byteps] $*"; }
die() { echo "[install_byteps] error: $*" >&2; exit 1; }

if "$PYTHON" -c "import byteps.tensorflow" 2>/dev/null; then
  log "byteps is already importable by $PYTHON: nothing to do"
  exit 0
fi

pin() { grep -E "^$1==" "$REQUIREMENTS" || die "no $1 pin in $REQUIREMENTS"; }
BYTEPS="$(pin byteps)"
CUDA_RUNTIME="$(pin nvidia-cuda-runtime-cu12)"
NCCL="$(pin nvidia-nccl-cu12)"
BUILD_HEADERS=("$(pin nvidia-cuda-nvcc-cu12)" "$(pin nvidia-cuda-cccl-cu12)")

# The runtime libraries first: the build compiles against their headers and
# the plugin finds them next to itself through its rpath.
"$PYTHON" -m pip install --no-deps "$CUDA_RUNTIME" "$NCCL"
SITE="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
CUDA_HOME="$SITE/nvidia/cuda_runtime"
NCCL_HOME="$SITE/nvidia/nccl"
# The wheels carry only versioned libraries; the linker looks for lib*.so.
ln -sf libcudart.so.12 "$CUDA_HOME/lib/libcudart.so"
ln -sf libnccl.so.2 "$NCCL_HOME/lib/libnccl.so"

KEY="$("$PYTHON" - "$BYTEPS" <<'PY'
import sys
import tensorflow as tf
print("%s-py%d%d-tf%s" % (sys.argv[1].replace("==", "-"),
                          sys.version_info[0], sys.version_info[1],
                          tf.__version__))
PY
)"
# Patched source: the patches are part of what the wheel is.
KEY="$KEY-$(cat "$REPO_ROOT"/patches/byteps/*.patch | sha1sum | cut -c1-10)"
CACHE_DIR="$CACHE_ROOT/$KEY"
log "python: $("$PYTHON" -c 'import sys; print(sys.executable)')"
log "requirement: $BYTEPS; wheel cache: $CACHE_DIR"

wheel_in_cache() { ls "$CACHE_DIR"/byteps-*.whl 2>/dev/null | head -n 1; }

if [[ -z "$(wheel_in_cache)" ]]; then
  command -v g++ >/dev/null || die "g++ is needed to build byteps"
  command -v make >/dev/null || die "make is needed to build byteps"
  for header in /usr/include/zmq.h /usr/include/numa.h; do
    [[ -f "$header" ]] || die "$header is missing: apt-get install -y libzmq3-dev libnuma-dev"
  done
  mkdir -p "$CACHE_ROOT"
  BUILD_DIR="$(mktemp -d "$CACHE_ROOT/.build-XXXXXX")"
  trap 'rm -rf "$BUILD_DIR"' EXIT
  log "no cached wheel: compiling $BYTEPS (several minutes)"
  "$PYTHON" -m pip download --no-deps --no-binary :all: --no-cache-dir \
      -d "$BUILD_DIR" "$BYTEPS"
  tar -xzf "$BUILD_DIR"/byteps-*.tar.gz -C "$BUILD_DIR"
  "$PYTHON" -m pip download --no-deps --no-cache-dir -d "$BUILD_DIR/headers" \
      "${BUILD_HEADERS[@]}"
  for wheel in "$BUILD_DIR"/headers/*.whl; do
    "$PYTHON" -m zipfile -e "$wheel" "$BUILD_DIR/headers"
  done
  SOURCE="$(ls -d "$BUILD_DIR"/byteps-*/)"
  for patch in "$REPO_ROOT"/patches/byteps/*.patch; do
    patch -d "$SOURCE" -p1 --forward --quiet < "$patch"
  done
  # setup.py tunes for the building CPU; a cached wheel must run on others.
  # x86-64-v3 (AVX2, FMA, F16C: any x86 CPU since 2013) keeps the F16C
  # half-precision code of its compressors compiling.
  sed -i "s/'-march=native'/'-march=x86-64-v3'/" "$SOURCE/setup.py"
  (
    cd "$SOURCE"
    # CI=true: ps-lite's make without an unbounded -j. The rpath lets the
    # plugin and the server load libcudart and libnccl from the wheels.
    env CI=true \
        CPATH="$BUILD_DIR/headers/nvidia/cuda_nvcc/include:$BUILD_DIR/headers/nvidia/cuda_cccl/include" \
        LDFLAGS="-Wl,-rpath,\$ORIGIN/../../nvidia/nccl/lib:\$ORIGIN/../../nvidia/cuda_runtime/lib" \
        BYTEPS_SYSTEM_ZMQ=/usr/include/zmq.h \
        BYTEPS_WITH_TENSORFLOW=1 BYTEPS_WITHOUT_PYTORCH=1 BYTEPS_WITHOUT_MXNET=1 \
        BYTEPS_CUDA_HOME="$CUDA_HOME" BYTEPS_NCCL_HOME="$NCCL_HOME" \
        BYTEPS_NCCL_LINK=SHARED \
        "$PYTHON" setup.py -q bdist_wheel -d "$BUILD_DIR/dist"
  )
  mkdir -p "$CACHE_DIR"
  # Moved into place only when complete, so a killed build caches nothing.
  for wheel in "$BUILD_DIR"/dist/byteps-*.whl; do
    mv "$wheel" "$CACHE_DIR/.$(basename "$wheel").partial"
    mv "$CACHE_DIR/.$(basename "$wheel").partial" "$CACHE_DIR/$(basename "$wheel")"
  done
  log "cached $(wheel_in_cache)"
else
  log "reusing cached wheel $(wheel_in_cache)"
fi

"$PYTHON" -m pip install --no-deps "$(wheel_in_cache)"
"$PYTHON" -c "import byteps.tensorflow; print('[install_byteps] byteps.tensorflow imports')"
