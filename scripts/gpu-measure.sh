#!/usr/bin/env bash
# Measurements on the GPU machine, side by side with the PyTorch peer in one run (run after
# `bash scripts/gpu-check.sh build` here; the peer scripts travel inside the carry folder).
#
#   HERE:  bash scripts/gpu-check.sh build && bash scripts/gpu-measure.sh stage
#   THERE: bash scripts/gpu-measure.sh run [what...]     (device tool: carry ["build-gpu/carry"])
#
# what (default: train checkpoint parity gemm): train (MLP step vs torch_train.py mlp), checkpoint
# (activation checkpointing stack), parity (stoker_parity vs tests/parity/torch_parity.py), gemm
# (GEMM bench), ops (memory-bound kernels and attention in bytes/s and FLOP/s), state (the MLP
# step with f32 / bf16 / 8-bit AdamW state), diag (stoker_diag_overhead), gpt (GPT-2 124M
# stoker_gpt --synthetic vs torch_train.py gpt), resnet (ResNet-18/50 stoker_classifier synthetic
# and fed by the loader from LMDB, vs torch_e2e.py on the same JPEGs; needs the carried
# build/imagenet-kit), gptc (torch.compile peer, slow to compile), multi (2+ GPUs: multi-rank
# dist gpu tests under stoker launch and torchrun, all-reduce vs torch.distributed, GPT-2 and
# ResNet-50 scaling vs PyTorch DDP, killing a rank under both launchers; the carry must hold the
# stoker CLI as build-gpu/carry/examples/stoker), gptparity (issue #9: the loss curve of
# stoker_gpt against the PyTorch peer GPT on the same init and batches: a 4-layer width-256
# byte-level model on the bundled text, batch 8 x 256, 100 steps, fp32 without TF32, constant
# lr; stoker_gpt --parity-dir /tmp/gptp, then scripts/torch_gpt_parity.py prints the per-step
# table and PASS/FAIL; about 30 s), memory (issue #11: GPT-2 124M with AdamW state f32 / bf16 /
# int8, on the GPU and offloaded, and stoker_offload_bench).
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
  for m in mlp cnn resnet18; do
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

run_ops() {
  section "memory-bound kernels (stoker_ops_bench)"
  "$C/benchmarks/stoker_ops_bench" --benchmark_min_time=0.2
  section "causal attention core (stoker_attention_bench)"
  "$C/benchmarks/stoker_attention_bench" --benchmark_min_time=0.2
}

run_state() {
  section "MLP 8x4096 B=8192 bf16: optimizer state f32 / bf16 / int8 (block 2048, then 256)"
  "$C/benchmarks/stoker_train_bench" --precision bf16 --optimizer-state f32,bf16,int8
  "$C/benchmarks/stoker_train_bench" --precision bf16 --optimizer-state int8 --state-block 256
}

run_memory() {
  local g=$C/examples/stoker_gpt s a="--preset gpt2-124m --synthetic --batch 16 --steps 20 --bench-warmup 8 --clip 0 --precision bf16"
  section "GPT-2 124M B=16 bf16: AdamW state f32 / bf16 / int8 on the GPU"
  for s in f32 bf16 int8; do "$g" $a --optimizer-state "$s"; done
  if "$g" --help | grep -q -- --optimizer-offload; then
    section "GPT-2 124M B=16 bf16: AdamW state offloaded to the CPU (f32, bf16, int8)"
    for s in f32 bf16 int8; do "$g" $a --optimizer-state "$s" --optimizer-offload; done
  fi
  if "$g" --help | grep -q -- --optimizer-offload-delayed; then
    section "GPT-2 124M B=16 bf16: offloaded, delayed parameter update (weights one step stale; f32, bf16)"
    for s in f32 bf16; do "$g" $a --optimizer-state "$s" --optimizer-offload delayed; done
  fi
  if [[ -x $C/benchmarks/stoker_offload_bench ]]; then
    section "CPU memory bandwidth, the CPU AdamW update, offloaded vs on-GPU step (stoker_offload_bench)"
    "$C/benchmarks/stoker_offload_bench"
  fi
}

run_diag() {
  section "diagnostics: verdicts, monitor, overhead (stoker_diag_overhead)"
  "$C/benchmarks/stoker_diag_overhead" --json "${OUT:-/tmp}/diag_overhead.json"
}

run_gpt() {
  local g=$C/examples/stoker_gpt a="--preset gpt2-124m --synthetic --batch 16 --steps 20 --bench-warmup 8 --clip 0"
  section "GPT-2 124M B=16 T=1024: stoker bf16 / bf16 + per-block checkpointing / fp32 (TF32)"
  "$g" $a --precision bf16
  "$g" $a --precision bf16 --checkpoint-every 1
  "$g" $a --precision fp32
  section "GPT-2 124M: PyTorch (torch_train.py gpt: fp32, bf16, bf16+ckpt, B=32)"
  python3 "$C/peers/torch_train.py" gpt
  section "GPT-2 124M B=32 bf16: stoker"
  "$g" --preset gpt2-124m --synthetic --batch 32 --steps 20 --bench-warmup 8 --clip 0 --precision bf16
}

run_gptparity() {
  local d=/tmp/gptp rc
  rm -rf "$d"
  section "GPT loss-curve parity: stoker_gpt --parity-dir, then scripts/torch_gpt_parity.py"
  "$C/examples/stoker_gpt" --preset tiny --layers 4 --heads 4 --width 256 --context 256 \
    --batch 8 --steps 100 --precision fp32 --device cuda --sample 0 \
    --text examples/gpt/data/kjv-genesis-exodus.txt --cache /tmp/gptp-data --parity-dir "$d" &&
    python3 scripts/torch_gpt_parity.py "$d" "$C/peers"
  rc=$?
  if [[ -n ${OUT:-} && -f $d/parity.json ]]; then cp "$d/parity.json" "$OUT/gpt_parity.json"; fi
  return $rc
}

run_gptc() {
  section "GPT-2 124M: PyTorch torch.compile (torch_train.py gptc)"
  python3 "$C/peers/torch_train.py" gptc
}

run_resnet() {
  local cls=$C/examples/stoker_classifier jpegs=/tmp/stoker-inet db=/tmp/stoker-inet.lmdb arch
  section "ResNet synthetic, bf16 NHWC B=256: stoker"
  for arch in resnet18 resnet50; do
    "$cls" --arch "$arch" --synthetic --batch 256 --precision bf16 --layout nhwc
  done
  section "ImageNet-like JPEGs (20,000) and their LMDB"
  [[ -d $jpegs ]] || bash scripts/make-imagenet-like.sh make "$jpegs" 20000 | tail -2
  [[ -d $db ]] || "$C/examples/stoker" pack "$jpegs" --out "$db" --threads 16 | tail -4
  section "ResNet fed by the stoker loader from LMDB (16 threads), bf16 NHWC B=256"
  for arch in resnet18 resnet50; do
    "$cls" --arch "$arch" --synthetic --data "$db" --threads 16 --batch 256 --precision bf16 \
      --layout nhwc
  done
  section "ResNet: PyTorch torch_e2e.py (synthetic and DataLoader, 16 workers)"
  python3 "$C/peers/torch_e2e.py" "$jpegs"
}

run_multi() {
  local n S=$C/examples/stoker g=$C/examples/stoker_gpt cls=$C/examples/stoker_classifier
  n=$(nvidia-smi -L | wc -l)
  local ga="--preset gpt2-124m --synthetic --batch 16 --steps 20 --bench-warmup 8 --clip 0 --precision bf16"
  section "multi-rank dist gpu tests, $n ranks: stoker launch, then torchrun"
  "$S" launch --nproc-per-node "$n" "$C/tests/stoker_gpu_tests" --gtest_filter='DistMultiRank*'
  torchrun --no-python --nproc-per-node "$n" "$C/tests/stoker_gpu_tests" \
    --gtest_filter='DistMultiRank*' 2>&1 | grep -E 'PASSED|FAILED|OK|Failure|error' | head -20
  section "all-reduce on $n GPUs: stoker_allreduce_throughput, then torch.distributed"
  "$S" launch --nproc-per-node "$n" "$C/benchmarks/stoker_allreduce_throughput" -b 64M -e 1G
  torchrun --nproc-per-node "$n" scripts/torch_allreduce.py 1024
  section "GPT-2 124M bf16 B=16/GPU: stoker on 1 GPU, then $n"
  "$g" $ga
  "$S" launch --nproc-per-node "$n" "$g" $ga
  section "ResNet-50 bf16 NHWC B=256/GPU synthetic: stoker on 1 GPU, then $n"
  "$cls" --arch resnet50 --synthetic --batch 256 --precision bf16 --layout nhwc
  "$S" launch --nproc-per-node "$n" "$cls" --arch resnet50 --synthetic --batch 256 \
    --precision bf16 --layout nhwc
  section "PyTorch DDP on $n GPUs (scripts/torch_ddp.py)"
  torchrun --nproc-per-node "$n" scripts/torch_ddp.py "$C/peers" gpt resnet
  section "kill rank 1 of a running job: under stoker launch, then torchrun"
  local ar=("$C/benchmarks/stoker_allreduce_throughput" -b 256M -e 256M -n 1000000 -c 0)
  STOKER_CLI=$S STOKER_KILL_AFTER=12 bash scripts/kill-rank-check.sh stoker "${ar[@]}"
  STOKER_KILL_AFTER=15 bash scripts/kill-rank-check.sh torchrun "${ar[@]}"
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
