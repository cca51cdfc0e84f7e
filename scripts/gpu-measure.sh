#!/usr/bin/env bash
# Measurements on a GPU host, each stoker program side by side with its PyTorch peer from
# benchmarks/peers/ in the same run, so that every ratio in docs/benchmarks.md comes from one
# machine at one time. Needs the GPU bundle (bash scripts/gpu-check.sh build, then copied to
# the host with the repository: docs/development.md) and, for the peers, python3 with PyTorch
# and torchvision.
#
#   bash scripts/gpu-measure.sh run [--out DIR] [WHAT...]   # on the GPU host, from the repo root
#   bash scripts/gpu-measure.sh list                        # what each WHAT runs
#   bash scripts/gpu-measure.sh peers [WHAT...]             # check the peers are in the tree
#   bash scripts/gpu-measure.sh --help
#
# WHAT (default: train checkpoint parity gemm); `list` prints the stoker program and the peer
# of each:
#   train       MLP 8x4096 training step (stoker_train_bench) vs torch_train.py mlp
#   checkpoint  activation checkpointing modes (stoker_checkpoint_bench)
#   parity      stoker_parity vs tests/parity/torch_parity.py (MLP, CNN, ResNet-18; SGD, AdamW)
#   gemm        stoker_gemm_bench (CUDA) vs torch_gemm_probe.py
#   ops         memory-bound kernels and attention (stoker_ops_bench, stoker_attention_bench)
#   llamaops    Llama-3.2-1B's RMSNorm, add + RMSNorm, RoPE and SwiGLU, forward and backward
#               (stoker_ops_bench) vs torch_llama_ops.py (transformers' eager and torch.compile)
#   state       the MLP step with f32 / bf16 / 8-bit AdamW state (stoker_train_bench)
#   memory      GPT-2 124M with AdamW state f32 / bf16 / 8-bit, on the GPU and offloaded
#               (stoker_gpt, stoker_offload_bench)
#   diag        diagnostics verdicts and overhead (stoker_diag_overhead)
#   health      the health check on real models: GPT-2 124M and ResNet-50 op tables with their
#               HTML pages and curves, a ResNet-50 fit with evaluation, the small CNN at batch 32
#               (stoker doctor --html) and the overhead of op-timed steps (small CNN, MLP 8192)
#   gpt         GPT-2 124M (stoker_gpt --synthetic) vs torch_train.py gpt, eager
#   gptc        the PyTorch GPT-2 124M step under torch.compile (slow to compile)
#   gptparity   the loss curve of stoker_gpt --parity-dir vs torch_gpt_parity.py (~30 s)
#   llamaparity 200 bf16 steps of stoker_llm llama3-debug --parity-dir vs transformers
#               (torch_llama_parity.py: LlamaForCausalLM from the same folder, same batches)
#   fp8         GPT-2 124M B=16 bf16 vs --precision fp8 (each eager and with the CUDA graph)
#   fp8curves   2,000 steps of GPT-2 124M B=8 on the bundled text, bf16 and fp8, each with the
#               seeds of STOKER_FP8_SEEDS (default "1 2"): final train and validation losses and
#               the curves (fp8_curves.txt: step, loss per run) against bf16's own spread
#               (~1 min a run)
#   gptlarge    GPT-2 774M and 1.5B B=8 (STOKER_GPT_LARGE="gpt2-774m gpt2-1.5b" picks which):
#               stoker bf16 / bf16 + int8 AdamW state + per-block checkpointing / fp8, the
#               largest batch of the memory-saving setting, PyTorch eager, eager + checkpointing
#               and torch.compile (torch_train.py gpt --preset) (~5 min a model)
#   resnet      ResNet-18/50 synthetic and fed by the loader (stoker_classifier) vs torch_e2e.py
#               on the same 20,000 ImageNet-like JPEGs (needs scripts/make-imagenet-like.sh kit);
#               with STOKER_RESNET_REALISTIC=1 also 20,000 realistic ones (make --realistic:
#               ImageNet-sized files, about twice the decode cost per core): the loader's
#               throughput on them at 16 threads and auto, and ResNet-50 fed from them
#   resnetfast  ResNet-50 bf16 NHWC B=256 synthetic: stoker unfused (--no-fuse-bn-relu) and
#               fused BN + ReLU and block tails, both eager (--no-cuda-graph), the default (the
#               CUDA graph), with --conv-autotune eager and with the graph (SGD, then LARS), op tables
#               (unfused and as is, one step in 10 op-timed), and PyTorch eager and torch.compile
#               (torch_train.py resnet)
#   multi       2+ GPUs: the multi-rank tests under stoker launch and torchrun, all-reduce vs
#               torch_allreduce.py, GPT-2 / ResNet-50 scaling vs torch_ddp.py, a killed rank
#               under both launchers (scripts/kill-rank-check.sh)
#
# Output folder (--out DIR, else $STOKER_MEASURE_OUT, else build/gpu-measure): measure.log
# (everything printed), gpt_parity.json, diag_overhead.json, health_*.html/csv/json. The bundle: $STOKER_BUNDLE, else
# build-gpu/bundle. Scratch data goes to ${TMPDIR:-/tmp}; the JPEG sets of resnet and their
# LMDBs stay there for the next run (stoker-imagenet-like*, stoker-imagenet-realistic*: remove
# them to make them again).
set -uo pipefail
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$SELF")/.." || exit 1
ROOT=$(pwd -P)
B=${STOKER_BUNDLE:-build-gpu/bundle}
P=benchmarks/peers
OUT_DIR=${STOKER_MEASURE_OUT:-build/gpu-measure}
TMP=${TMPDIR:-/tmp}
ALL=(train checkpoint parity gemm ops llamaops state memory diag health gpt gptc gptparity llamaparity fp8 fp8curves gptlarge resnet resnetfast multi)
DEFAULT=(train checkpoint parity gemm)

usage() { sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$SELF"; }
die() { echo "gpu-measure: $*" >&2; exit 2; }

# The files a measurement needs besides the bundle: its peers (relative to the repository).
peers_of() {
  case $1 in
    train|gpt|gptc|gptlarge|resnetfast) echo "$P/torch_train.py $P/gpt_model.py" ;;
    parity) echo "tests/parity/torch_parity.py" ;;
    gemm) echo "$P/torch_gemm_probe.py" ;;
    llamaops) echo "$P/torch_llama_ops.py" ;;
    gptparity) echo "$P/torch_gpt_parity.py $P/gpt_model.py examples/gpt/data/kjv-genesis-exodus.txt" ;;
    llamaparity) echo "$P/torch_llama_parity.py examples/gpt/data/kjv-genesis-exodus.txt" ;;
    resnet) echo "$P/torch_e2e.py $P/torch_loader.py $P/make_imagenet_like.py scripts/make-imagenet-like.sh" ;;
    multi) echo "$P/torch_allreduce.py $P/torch_ddp.py $P/gpt_model.py scripts/kill-rank-check.sh" ;;
    checkpoint|ops|state|memory|diag|health|fp8|fp8curves) echo "" ;;
    *) return 1 ;;
  esac
}

known() { peers_of "$1" >/dev/null; }

check_what() {
  local w
  for w in "$@"; do
    known "$w" || die "unknown measurement '$w': one of ${ALL[*]} (see --help)"
  done
}

# Every peer file of the given measurements exists inside this repository and, for Python,
# parses. Prints one line per file; exit 1 when one is missing.
cmd_peers() {
  local -a what=("$@")
  ((${#what[@]})) || what=("${ALL[@]}")
  check_what "${what[@]}"
  local w f real bad=0
  declare -A seen=()
  for w in "${what[@]}"; do
    for f in $(peers_of "$w"); do
      [[ -n ${seen[$f]:-} ]] && continue
      seen[$f]=1
      if [[ ! -f $f ]]; then
        echo "MISSING  $f (needed by '$w'): it belongs in this repository"
        bad=1
        continue
      fi
      real=$(realpath "$f")
      if [[ $real != "$ROOT"/* ]]; then
        echo "OUTSIDE  $f -> $real (needed by '$w'): peers must live inside the repository"
        bad=1
      elif [[ $f == *.py ]] && ! python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" 2>/dev/null; then
        echo "SYNTAX   $f (needed by '$w'): python3 cannot parse it"
        bad=1
      else
        echo "ok       $f"
      fi
    done
  done
  ((bad == 0)) || { echo "gpu-measure: peers missing or broken (above)" >&2; return 1; }
}

cmd_list() {
  local w
  echo "what each measurement runs:"
  sed -n '/^# WHAT/,/^#$/{/^#   /s/^# //p}' "$SELF"
  echo
  echo "the files each needs in this repository besides the bundle (checked by 'peers'):"
  for w in "${ALL[@]}"; do
    printf '  %-11s %s\n' "$w" "$(peers_of "$w" | sed 's/^$/(none: stoker only)/')"
  done
}

section() { echo; echo "==== $* ($(date -u +%H:%M:%S))"; }

run_train() {
  section "MLP 8x4096 B=8192 AdamW: stoker"
  "$B/benchmarks/stoker_train_bench" --precision bf16,fp16
  "$B/benchmarks/stoker_train_bench" --precision fp32 --tf32
  section "MLP 8x4096 B=8192 AdamW: PyTorch ($P/torch_train.py mlp)"
  python3 "$P/torch_train.py" mlp
  section "MLP again: stoker bf16 (run-to-run spread)"
  "$B/benchmarks/stoker_train_bench" --precision bf16
  section "MLP bf16 with GEMM autotuning off (the heuristic's first pick)"
  STOKER_GEMM_AUTOTUNE=0 "$B/benchmarks/stoker_train_bench" --precision bf16
}

run_checkpoint() {
  section "activation checkpointing: 12 transformer-MLP blocks, 16x1024 tokens, bf16"
  "$B/benchmarks/stoker_checkpoint_bench"
}

run_parity() {
  local d m o
  d=$(mktemp -d "$TMP/stoker-parity.XXXXXX")
  for m in mlp cnn resnet18; do
    for o in sgd adamw; do
      section "parity $m $o"
      "$B/tests/stoker_parity" --model "$m" --optim "$o" --device cuda --out "$d" &&
        python3 tests/parity/torch_parity.py "$d" "$m" "$o"
    done
  done
  rm -rf "$d"
}

run_gemm() {
  section "GEMM bench (CUDA)"
  "$B/benchmarks/stoker_gemm_bench" --benchmark_filter=Cuda --benchmark_min_time=0.2
  section "PyTorch GEMMs of the MLP's shapes ($P/torch_gemm_probe.py)"
  python3 "$P/torch_gemm_probe.py"
}

run_ops() {
  section "memory-bound kernels (stoker_ops_bench)"
  "$B/benchmarks/stoker_ops_bench" --benchmark_min_time=0.2
  section "causal attention core (stoker_attention_bench)"
  "$B/benchmarks/stoker_attention_bench" --benchmark_min_time=0.2
}

run_llamaops() {
  section "Llama-3.2-1B kernels, bf16 (stoker_ops_bench)"
  "$B/benchmarks/stoker_ops_bench" --benchmark_filter='RmsNorm|AddRmsNorm|Rope|SwiGlu' \
    --benchmark_min_time=0.2
  section "PyTorch's same ops, eager and torch.compile ($P/torch_llama_ops.py)"
  python3 "$P/torch_llama_ops.py"
}

run_state() {
  section "MLP 8x4096 B=8192 bf16: optimizer state f32 / bf16 / int8 (block 2048, then 256)"
  "$B/benchmarks/stoker_train_bench" --precision bf16 --optimizer-state f32,bf16,int8
  "$B/benchmarks/stoker_train_bench" --precision bf16 --optimizer-state int8 --state-block 256
}

GPT_ARGS=(--preset gpt2-124m --synthetic --steps 20 --bench-warmup 8 --clip 0)

run_memory() {
  local g=$B/examples/stoker_gpt s
  local -a a=("${GPT_ARGS[@]}" --batch 16 --precision bf16)
  section "GPT-2 124M B=16 bf16: AdamW state f32 / bf16 / int8 on the GPU"
  for s in f32 bf16 int8; do "$g" "${a[@]}" --optimizer-state "$s"; done
  section "GPT-2 124M B=16 bf16: AdamW state offloaded to the CPU (f32, bf16, int8)"
  for s in f32 bf16 int8; do "$g" "${a[@]}" --optimizer-state "$s" --optimizer-offload; done
  section "GPT-2 124M B=16 bf16: offloaded, delayed parameter update (weights one step stale; f32, bf16)"
  for s in f32 bf16; do "$g" "${a[@]}" --optimizer-state "$s" --optimizer-offload delayed; done
  section "CPU memory bandwidth, the CPU AdamW update, offloaded vs on-GPU step (stoker_offload_bench)"
  "$B/benchmarks/stoker_offload_bench"
}

run_diag() {
  section "diagnostics: verdicts, monitor, overhead (stoker_diag_overhead)"
  "$B/benchmarks/stoker_diag_overhead" --json "$OUT_DIR/diag_overhead.json"
}

run_health() {
  local g=$B/examples/stoker_gpt cls=$B/examples/stoker_classifier o=$OUT_DIR/health
  local -a d=(STOKER_DIAG=1 STOKER_DIAG_WARMUP=5)
  section "health: GPT-2 124M B=16 T=1024 bf16 on the bundled text, one step in 10 op-timed"
  env "${d[@]}" STOKER_DIAG_OPS=10 STOKER_DIAG_HTML="${o}_gpt2.html" \
    STOKER_DIAG_TIMELINE_CSV="${o}_gpt2_timeline.csv" STOKER_DIAG_GPU_CSV="${o}_gpt2_gpu.csv" \
    "$g" --preset gpt2-124m --vocab 50257 --batch 16 --precision bf16 --steps 80 --diagnostics
  section "health: ResNet-50 bf16 NHWC B=256, the first batch replayed, one step in 10 op-timed"
  env "${d[@]}" STOKER_DIAG_OPS=10 STOKER_DIAG_SYNTHETIC=1 STOKER_DIAG_MAX_STEPS=45 \
    STOKER_DIAG_HTML="${o}_resnet50.html" \
    "$cls" --arch resnet50 --precision bf16 --layout nhwc --batch 256 --diagnostics
  section "health: ResNet-50 bf16 NHWC B=256 trained 4 epochs on the synthetic set (16 threads)"
  env "${d[@]}" STOKER_DIAG_HTML="${o}_resnet50_fit.html" \
    STOKER_DIAG_TIMELINE_CSV="${o}_resnet50_fit_timeline.csv" \
    STOKER_DIAG_GPU_CSV="${o}_resnet50_fit_gpu.csv" \
    "$cls" --arch resnet50 --precision bf16 --layout nhwc --batch 256 --epochs 4 --threads 16 \
    --diagnostics
  section "health: small CNN B=32 (stoker doctor --model cnn), overhead of diagnostics and op timing"
  "$B/examples/stoker" doctor --model cnn --batch 32 --overhead --overhead-steps 200 \
    --repeats 9 --html "${o}_doctor_cnn.html" --json "${o}_doctor_cnn.json"
  section "health: overhead on a compute-heavy step (MLP 8192 bf16 B=512)"
  "$B/examples/stoker" doctor --no-static --no-ablations --overhead --model mlp --width 8192 \
    --batch 512 --overhead-steps 200 --repeats 7 --json "${o}_overhead_mlp.json"
}

run_gpt() {
  local g=$B/examples/stoker_gpt
  section "GPT-2 124M B=16 T=1024: stoker bf16 / bf16 + per-block checkpointing / fp32 (TF32)"
  "$g" "${GPT_ARGS[@]}" --batch 16 --precision bf16
  "$g" "${GPT_ARGS[@]}" --batch 16 --precision bf16 --activation-checkpoint-every 1
  "$g" "${GPT_ARGS[@]}" --batch 16 --precision fp32
  section "GPT-2 124M B=32 bf16: stoker"
  "$g" "${GPT_ARGS[@]}" --batch 32 --precision bf16
  section "GPT-2 124M: PyTorch eager ($P/torch_train.py gpt: fp32, bf16, bf16 + checkpointing, B=32)"
  python3 "$P/torch_train.py" gpt --precision fp32,bf16
  python3 "$P/torch_train.py" gpt --precision bf16 --checkpoint
  python3 "$P/torch_train.py" gpt --precision bf16 --batch 32
}

run_gptc() {
  section "GPT-2 124M B=16 bf16: PyTorch torch.compile ($P/torch_train.py gpt --compile)"
  python3 "$P/torch_train.py" gpt --precision bf16 --compile
}

run_gptparity() {
  local d=$TMP/stoker-gptparity rc
  rm -rf "$d"
  section "GPT loss-curve parity: stoker_gpt --parity-dir, then $P/torch_gpt_parity.py"
  "$B/examples/stoker_gpt" --preset tiny --layers 4 --heads 4 --width 256 --context 256 \
    --batch 8 --steps 100 --precision fp32 --device cuda --sample 0 \
    --text examples/gpt/data/kjv-genesis-exodus.txt --cache "$TMP/stoker-gptparity-data" \
    --parity-dir "$d" &&
    python3 "$P/torch_gpt_parity.py" "$d"
  rc=$?
  [[ -f $d/parity.json ]] && cp "$d/parity.json" "$OUT_DIR/gpt_parity.json"
  return $rc
}

run_llamaparity() {
  local d=$TMP/stoker-llamaparity rc
  rm -rf "$d"
  section "Llama loss-curve parity: stoker_llm --parity-dir (bf16), then $P/torch_llama_parity.py"
  "$B/examples/stoker_llm" --preset llama3-debug --batch 8 --context 256 --steps 200 --lr 1e-3 \
    --precision bf16 --device cuda --sample 0 --text examples/gpt/data/kjv-genesis-exodus.txt \
    --data-cache "$TMP/stoker-llamaparity-data" --parity-dir "$d" &&
    python3 "$P/torch_llama_parity.py" "$d" --attn sdpa
  rc=$?
  [[ -f $d/parity.json ]] && cp "$d/parity.json" "$OUT_DIR/llama_parity.json"
  return $rc
}

run_fp8() {
  local g=$B/examples/stoker_gpt p
  section "GPT-2 124M B=16 T=1024: stoker bf16 / fp8, each eager and with the CUDA graph (default)"
  for p in bf16 fp8; do
    "$g" "${GPT_ARGS[@]}" --batch 16 --precision "$p" --no-cuda-graph
    "$g" "${GPT_ARGS[@]}" --batch 16 --precision "$p"
  done
}

run_fp8curves() {
  local g=$B/examples/stoker_gpt p s r log seeds=${STOKER_FP8_SEEDS:-1 2}
  local -a runs=() cols=()
  section "GPT-2 124M B=8 T=1024, 2,000 steps on the bundled text: bf16 and fp8, seeds $seeds"
  for p in bf16 fp8; do
    for s in $seeds; do
      log=$OUT_DIR/fp8_curve_${p}_seed$s.log
      "$g" --preset gpt2-124m --batch 8 --steps 2000 --precision "$p" --seed "$s" \
        --log-interval 100 --sample 0 --cache "$TMP/stoker-fp8-data" >"$log" 2>&1
      grep -E "final train loss|validation loss after" "$log"
      runs+=("${p}_seed$s")
    done
  done
  # One table: the loss at every logged step of the runs (the Trainer's "step N | ... | loss L |"
  # lines).
  awk -F'|' '/^step /{sub(/^step */, "", $1); print $1 + 0}' "$OUT_DIR/fp8_curve_${runs[0]}.log" \
    >"$TMP/fp8_steps"
  for r in "${runs[@]}"; do
    awk -F'|' '/^step /{sub(/^ *loss */, "", $3); print $3 + 0}' "$OUT_DIR/fp8_curve_$r.log" \
      >"$TMP/fp8_$r"
    cols+=("$TMP/fp8_$r")
  done
  { echo "step ${runs[*]}"; paste -d' ' "$TMP/fp8_steps" "${cols[@]}"; } |
    tee "$OUT_DIR/fp8_curves.txt"
}

run_gptlarge() {
  local g=$B/examples/stoker_gpt m b
  local -a a=(--synthetic --steps 10 --bench-warmup 4 --clip 0)
  for m in ${STOKER_GPT_LARGE:-gpt2-774m gpt2-1.5b}; do
    section "$m B=8 T=1024: stoker bf16 / bf16 + int8 AdamW state + checkpointing / fp8"
    "$g" --preset "$m" "${a[@]}" --batch 8 --precision bf16
    "$g" --preset "$m" "${a[@]}" --batch 8 --precision bf16 --optimizer-state int8 \
      --activation-checkpoint-every 1
    "$g" --preset "$m" "${a[@]}" --batch 8 --precision fp8
    section "$m: the largest batch of stoker bf16 + int8 state + checkpointing (16, 32, 64)"
    for b in 16 32 64; do
      "$g" --preset "$m" "${a[@]}" --batch "$b" --precision bf16 --optimizer-state int8 \
        --activation-checkpoint-every 1 2>&1 | tail -3 || break
    done
    section "$m B=8: PyTorch eager bf16, eager + checkpointing, torch.compile"
    python3 "$P/torch_train.py" gpt --preset "$m" --batch 8 --precision bf16 --warmup 3 --steps 10
    python3 "$P/torch_train.py" gpt --preset "$m" --batch 8 --precision bf16 --warmup 3 \
      --steps 10 --checkpoint
    python3 "$P/torch_train.py" gpt --preset "$m" --batch 8 --precision bf16 --warmup 3 \
      --steps 10 --compile
  done
}

run_resnet() {
  local cls=$B/examples/stoker_classifier jpegs=$TMP/stoker-imagenet-like db=$TMP/stoker-imagenet-like.lmdb arch
  section "ResNet synthetic, bf16 NHWC B=256: stoker"
  for arch in resnet18 resnet50; do
    "$cls" --arch "$arch" --synthetic --batch 256 --precision bf16 --layout nhwc
  done
  section "ImageNet-like JPEGs (20,000) and their LMDB"
  [[ -d $jpegs ]] || bash scripts/make-imagenet-like.sh make "$jpegs" 20000 | tail -2
  [[ -d $db ]] || "$B/examples/stoker" pack "$jpegs" --out "$db" --threads "$(nproc)" | tail -4
  section "ResNet fed by the stoker loader from LMDB (16 threads), bf16 NHWC B=256"
  for arch in resnet18 resnet50; do
    "$cls" --arch "$arch" --synthetic --data "$db" --threads 16 --batch 256 --precision bf16 \
      --layout nhwc
  done
  section "ResNet: PyTorch ($P/torch_e2e.py: synthetic and DataLoader, 16 workers)"
  python3 "$P/torch_e2e.py" "$jpegs" --workers 16
  local rc=$?
  [[ ${STOKER_RESNET_REALISTIC:-0} == 1 ]] || return $rc
  # The realistic set: the smooth one above is cheaper to decode than ImageNet's files.
  local rjpegs=$TMP/stoker-imagenet-realistic rdb=$TMP/stoker-imagenet-realistic.lmdb
  section "Realistic JPEGs (20,000, make-imagenet-like.sh make --realistic) and their LMDB"
  [[ -d $rjpegs ]] || bash scripts/make-imagenet-like.sh make --realistic "$rjpegs" 20000 | tail -2
  [[ -d $rdb ]] || "$B/examples/stoker" pack "$rjpegs" --out "$rdb" --threads "$(nproc)" | tail -4
  section "loader throughput on the realistic LMDB (stoker_loader_throughput, 16 threads and auto)"
  "$B/benchmarks/stoker_loader_throughput" --db "$rdb" --threads 16,auto --epochs 2 --warmup 1 ||
    rc=1
  section "ResNet-50 fed by the stoker loader from the realistic LMDB (16 threads), bf16 NHWC B=256"
  "$cls" --arch resnet50 --synthetic --data "$rdb" --threads 16 --batch 256 --precision bf16 \
    --layout nhwc || rc=1
  return $rc
}

run_resnetfast() {
  local cls=$B/examples/stoker_classifier f rc=0
  local -a r50=(--arch resnet50 --synthetic --batch 256 --precision bf16 --layout nhwc --steps 40)
  local all="--conv-autotune"
  section "ResNet-50 synthetic, bf16 NHWC B=256: stoker unfused / fused BN (eager) / default (graph) / timed convs"
  for f in "--no-fuse-bn-relu --no-cuda-graph" --no-cuda-graph "" "--no-cuda-graph --conv-autotune" "$all"; do
    # shellcheck disable=SC2086 # $f: zero to three flags
    "$cls" "${r50[@]}" $f || rc=1
  done
  # shellcheck disable=SC2086
  "$cls" "${r50[@]}" --optimizer lars $all || rc=1
  section "ResNet-50 op tables (bf16 NHWC B=256, the first batch replayed, one step in 10 op-timed)"
  for f in --no-fuse-bn-relu ""; do
    # shellcheck disable=SC2086
    env STOKER_DIAG=1 STOKER_DIAG_WARMUP=5 STOKER_DIAG_OPS=10 STOKER_DIAG_SYNTHETIC=1 \
      STOKER_DIAG_MAX_STEPS=45 "$cls" --arch resnet50 --precision bf16 --layout nhwc \
      --batch 256 --diagnostics $f || rc=1
  done
  section "ResNet-50: PyTorch eager and torch.compile ($P/torch_train.py resnet, bf16)"
  python3 "$P/torch_train.py" resnet --arch resnet50 --precision bf16 --steps 40 || rc=1
  python3 "$P/torch_train.py" resnet --arch resnet50 --precision bf16 --steps 40 --compile || rc=1
  return $rc
}

run_multi() {
  local n S=$B/examples/stoker g=$B/examples/stoker_gpt cls=$B/examples/stoker_classifier
  n=$(nvidia-smi -L | wc -l)
  if ((n < 2)); then
    echo "gpu-measure: multi needs 2 or more GPUs; this host has $n" >&2
    return 1
  fi
  local -a ga=("${GPT_ARGS[@]}" --batch 16 --precision bf16)
  section "multi-rank dist gpu tests, $n ranks: stoker launch, then torchrun"
  "$S" launch --nproc-per-node "$n" "$B/tests/stoker_gpu_tests" --gtest_filter='DistMultiRank*'
  torchrun --no-python --nproc-per-node "$n" "$B/tests/stoker_gpu_tests" \
    --gtest_filter='DistMultiRank*' 2>&1 | grep -E 'PASSED|FAILED|OK|Failure|error' | head -20
  section "all-reduce on $n GPUs: stoker_allreduce_throughput, then $P/torch_allreduce.py"
  "$S" launch --nproc-per-node "$n" "$B/benchmarks/stoker_allreduce_throughput" -b 64M -e 1G
  torchrun --nproc-per-node "$n" "$P/torch_allreduce.py" --min-mib 64 --max-mib 1024
  section "GPT-2 124M bf16 B=16/GPU: stoker on 1 GPU, then $n"
  "$g" "${ga[@]}"
  "$S" launch --nproc-per-node "$n" "$g" "${ga[@]}"
  section "ResNet-50 bf16 NHWC B=256/GPU synthetic: stoker on 1 GPU, then $n"
  "$cls" --arch resnet50 --synthetic --batch 256 --precision bf16 --layout nhwc
  "$S" launch --nproc-per-node "$n" "$cls" --arch resnet50 --synthetic --batch 256 \
    --precision bf16 --layout nhwc
  section "PyTorch DDP on $n GPUs ($P/torch_ddp.py)"
  torchrun --nproc-per-node "$n" "$P/torch_ddp.py" gpt resnet
  section "kill rank 1 of a running job: under stoker launch, then torchrun"
  local -a ar=("$B/benchmarks/stoker_allreduce_throughput" -b 256M -e 256M -n 1000000 -c 0)
  STOKER_CLI=$S STOKER_KILL_AFTER=12 bash scripts/kill-rank-check.sh stoker "${ar[@]}"
  STOKER_KILL_AFTER=15 bash scripts/kill-rank-check.sh torchrun "${ar[@]}"
}

cmd_run() {
  local -a what=()
  while (($#)); do
    case $1 in
      --out) (($# >= 2)) || die "--out needs a folder"; OUT_DIR=$2; shift 2 ;;
      --out=*) OUT_DIR=${1#--out=}; shift ;;
      -h|--help) usage; exit 0 ;;
      -*) die "run: unknown option '$1' (see --help)" ;;
      *) what+=("$1"); shift ;;
    esac
  done
  [[ -n $OUT_DIR ]] || die "--out: empty folder name"
  ((${#what[@]})) || what=("${DEFAULT[@]}")
  check_what "${what[@]}"
  if [[ ! -d $B/lib || ! -f $B/BUILD_INFO ]]; then
    echo "gpu-measure: no GPU bundle at $B: run 'bash scripts/gpu-check.sh build' on the build" \
         "machine and copy it here with the repository (docs/development.md), or set STOKER_BUNDLE" >&2
    exit 1
  fi
  cmd_peers "${what[@]}" >/dev/null || { cmd_peers "${what[@]}"; exit 1; }
  mkdir -p "$OUT_DIR"
  local lib=$ROOT/$B/lib
  [[ $B == /* ]] && lib=$B/lib
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}  # see scripts/gpu-check.sh
  export STOKER_BUNDLE=$B
  local w failed=()
  {
    echo "==== gpu-measure ${what[*]}: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); output in $OUT_DIR"
    sed 's/^/  /' "$B/BUILD_INFO"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
    for w in "${what[@]}"; do
      "run_$w" || failed+=("$w")
    done
    section "done${failed[*]:+; with a failure in: ${failed[*]}}"
    ((${#failed[@]} == 0))
  } 2>&1 | tee "$OUT_DIR/measure.log"
  return "${PIPESTATUS[0]}"
}

case ${1:-} in
  run) shift; cmd_run "$@" ;;
  list) shift; (($# == 0)) || die "list takes no arguments"; cmd_list ;;
  peers) shift; cmd_peers "$@" ;;
  -h|--help|help) usage ;;
  "") usage >&2; exit 2 ;;
  *) die "unknown command '$1': run, list or peers (see --help)" ;;
esac
