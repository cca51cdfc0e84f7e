#!/usr/bin/env bash
# The demo command: installs missing packages, configures the `release` preset, builds only the
# demo (target stoker_demo, with the library it needs) and runs it. Arguments are passed to the
# demo. Works from any directory. Environment: STOKER_JOBS (parallel jobs, default: nproc).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
JOBS=${STOKER_JOBS:-$(nproc)}

bash scripts/setup.sh
cmake --preset release
cmake --build --preset release --parallel "$JOBS" --target stoker_demo
echo
echo "==== build/release/examples/stoker_demo $*"
exec build/release/examples/stoker_demo "$@"
