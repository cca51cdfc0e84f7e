#!/usr/bin/env bash
# Measurements on the GPU machine, side by side with the PyTorch peer in one run (run after
# `bash scripts/gpu-check.sh build` here; the peer scripts travel inside the carry folder).
#
#   HERE:  bash scripts/gpu-check.sh build && bash scripts/gpu-measure.sh stage
#   THERE: bash scripts/gpu-measure.sh run [what...]     (device tool: carry ["build-gpu/carry"])
#
# what (default: all of them): train (MLP step vs torch_train.py mlp), checkpoint (activation
# checkpointing stack), parity (stoker_parity vs tests/parity/torch_parity.py), gemm (GEMM bench).
# Everything goes to stdout and to $OUT/measure.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
C=build-gpu/carry
PEERS_SRC=../shared/peers

stage() {
  [[ -d $C ]] || { echo "gpu-measure: $C missing: run scripts/gpu-check.sh build first" >&2; exit 1; }
  mkdir -p "$C/peers"
  cp "$PEERS_SRC"/*.py "$C/peers/"
  echo "staged the peer scripts into $C/peers"
}

section() { echo; echo "==== $* ($(date -u +%H:%M:%S))"; }

run_train() {
  section "MLP 8x4096 B=8192 AdamW: stoker"
  "$C/benchmarks/stoker_train_bench" --precision bf16,fp16
  "$C/benchmarks/stoker_train_bench" --precision fp32 --tf32
  section "MLP 8x4096 B=8192 AdamW: PyTorch (shared/peers/torch_train.py mlp)"
  python3 "$C/peers/torch_train.py" mlp
  section "MLP again: stoker bf16 (run-to-run spread)"
  "$C/benchmarks/stoker_train_bench" --precision bf16
  section "MLP bf16 with GEMM autotuning off (the heuristic's first pick)"
  STOKER_GEMM_AUTOTUNE=0 "$C/benchmarks/stoker_train_bench" --precision bf16
}

run_checkpoint() {
  section "activation checkpointing: 12 transformer-MLP blocks, 16x1024 tokens, bf16"
  "$C/benchmarks/stoker_checkpoint_bench"
}

run_parity() {
  local d m o
  d=$(mktemp -d)
  for m in mlp cnn; do
    for o in sgd adamw; do
      section "parity $m $o"
      "$C/tests/stoker_parity" --model "$m" --optim "$o" --device cuda --out "$d" &&
        python3 tests/parity/torch_parity.py "$d" "$m" "$o"
    done
  done
}

run_gemm() {
  section "GEMM bench (CUDA)"
  "$C/benchmarks/stoker_gemm_bench" --benchmark_filter=Cuda --benchmark_min_time=0.2
  section "PyTorch GEMMs of the MLP's shapes (scripts/torch_gemm_probe.py)"
  python3 scripts/torch_gemm_probe.py
}

cmd_run() {
  export LD_LIBRARY_PATH="$PWD/$C/device-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export NCCL_NVLS_ENABLE=0
  local out=${OUT:-/tmp}
  local what=("$@")
  ((${#what[@]})) || what=(train checkpoint parity gemm)
  {
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
    for w in "${what[@]}"; do "run_$w"; done
    section "done"
  } 2>&1 | tee "$out/measure.log"
}

case ${1:-} in
  stage) stage ;;
  run) shift; cmd_run "$@" ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
