#!/usr/bin/env bash
# The demo command: installs missing packages, configures the `release` preset, builds only the
# classifier example (target stoker_classifier, with the library it needs) and runs it with its
# defaults: a small residual CNN trained on the synthetic shapes (8 classes, 32x32 JPEGs, packed
# into $XDG_CACHE_HOME/stoker on first run) through the LMDB Loader, on the GPU if there is one,
# else the CPU; validation accuracy each epoch, the loader's rate, and at the end the step
# breakdown and verdict of the diagnostics. It fails (status 3) below 80 % validation accuracy.
# Arguments are passed to stoker_classifier (e.g. --epochs 5, --device cpu; --help lists them).
# Works from any directory. Environment: STOKER_JOBS (parallel jobs, default: nproc).
# (stoker_demo, the device/library/GEMM check, is still built by the examples.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
JOBS=${STOKER_JOBS:-$(nproc)}

bash scripts/setup.sh
cmake --preset release
cmake --build --preset release --parallel "$JOBS" --target stoker_classifier
echo
echo "==== build/release/examples/classifier/stoker_classifier --diagnostics --min-accuracy 0.8 $*"
exec build/release/examples/classifier/stoker_classifier --diagnostics --min-accuracy 0.8 "$@"
