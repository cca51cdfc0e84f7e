#!/usr/bin/env bash
# GPU check: build here (no GPU needed), run on the GPU machine. Recipe: ../shared/GPU.md.
#
#   bash scripts/gpu-check.sh build          # HERE: build preset `gpu` into build-gpu/ and stage
#                                            # build-gpu/carry/ (stripped binaries + device-libs)
#   bash scripts/gpu-check.sh run            # THERE, from the repo root, $OUT set: run every
#                                            # test and benchmark binary, logs into $OUT, summary
#   bash scripts/gpu-check.sh exec CMD ARGS  # THERE: run one command with the carried libraries
#                                            # (e.g. build-gpu/carry/examples/stoker_demo)
#
# Why a separate carry folder: the device tool sends the working tree plus the ignored paths
# named in `carry`, 64 MiB in all. build-gpu/ itself holds object files, the static library and
# unstripped binaries (far over the limit), so `build` stages only what runs there:
#   build-gpu/carry/tests/        stripped GoogleTest binaries (stoker_*_tests)
#   build-gpu/carry/benchmarks/   stripped Google Benchmark binaries
#   build-gpu/carry/examples/     stripped example programs (not run by `run`; use `exec`)
#   build-gpu/carry/device-libs/  shared libraries the binaries need that the GPU machine lacks
#                                 (everything `ldd` resolves except glibc, libstdc++/libgcc and
#                                 the CUDA/cuDNN/NCCL/NVML libraries, which are there)
#   build-gpu/carry/BUILD_INFO    where and from what it was built
# Device-tool call:  carry = ["build-gpu/carry"],
#                    command = "bash scripts/gpu-check.sh run"
#
# `build` knobs: STOKER_GPU_TARGETS (build only these targets), STOKER_CARRY_SKIP_CPU_TESTS=1
# (stage no CPU test suites: they are not run there with STOKER_SKIP_CPU_TESTS=1, and the carry
# stays small enough to travel with other folders).
# `run` environment knobs: STOKER_GTEST_FILTER (passed as --gtest_filter), STOKER_BENCH_FILTER
# (--benchmark_filter), STOKER_SKIP_BENCH=1, STOKER_SKIP_CPU_TESTS=1, STOKER_TIMEOUT (seconds
# per binary, default 300).
# Files written to $OUT (the tool brings back at most 8): run.log (everything), summary.txt,
# gpu_tests.xml, gemm_bench.json (when those binaries exist) and results.tar.gz (every binary's
# log and GoogleTest XML / benchmark JSON).
set -euo pipefail
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$SELF")/.."
ROOT=$PWD
BUILD=build-gpu
CARRY=$BUILD/carry
LIMIT_MIB=64      # the device tool's limit for the whole travelling tree
WARN_MIB=48       # leave head-room for the sources

# Libraries present on the GPU machine (or part of the C/C++ runtime): never copied.
SYSTEM_LIB_RE='^(linux-vdso|linux-gate|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcurand|libcufft|libcusparse|libcusolver|libnvrtc|libnvJitLink|libnvidia-[a-z-]+|libcudnn[a-z_]*|libnccl)\.so'

usage() { sed -n '2,30p' "$SELF"; }

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

is_elf() { [[ -f "$1" && -x "$1" ]] && [[ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" == '177ELF' ]]; }

# ---------------------------------------------------------------------------------------------
cmd_build() {
  if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  local jobs=${STOKER_JOBS:-$(nproc)}
  bash scripts/setup.sh
  cmake --preset gpu
  # STOKER_GPU_TARGETS="a b": build only those targets (the rest of the carry may be stale).
  # shellcheck disable=SC2086
  cmake --build --preset gpu --parallel "$jobs" ${STOKER_GPU_TARGETS:+--target $STOKER_GPU_TARGETS}

  echo
  echo "==== staging $CARRY"
  rm -rf "$CARRY"
  mkdir -p "$CARRY/tests" "$CARRY/benchmarks" "$CARRY/examples" "$CARRY/device-libs"

  local kind f n=0
  local -a staged=()
  for kind in tests benchmarks examples; do
    [[ -d $BUILD/$kind ]] || continue
    while IFS= read -r -d '' f; do
      is_elf "$f" || continue
      if [[ -n ${STOKER_CARRY_SKIP_CPU_TESTS:-} && $kind == tests && $(basename "$f") =~ ^stoker_[a-z]+_tests$ &&
            $(basename "$f") != stoker_gpu_tests ]]; then
        continue
      fi
      strip --strip-unneeded -o "$CARRY/$kind/$(basename "$f")" "$f"
      staged+=("$CARRY/$kind/$(basename "$f")")
      n=$((n + 1))
    done < <(find "$BUILD/$kind" -path '*/CMakeFiles' -prune -o -type f -name 'stoker_*' -print0)
  done
  if ((n == 0)); then
    echo "gpu-check: no test, benchmark or example binaries were built in $BUILD" >&2
    exit 1
  fi

  # Shared libraries the binaries need, minus what the GPU machine has.
  local line name path missing=0
  declare -A libs=()
  for f in "${staged[@]}"; do
    while IFS= read -r line; do
      if [[ $line =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]+=\>[[:space:]]+not\ found ]]; then
        echo "gpu-check: $f: ${BASH_REMATCH[1]} not found here (ldd)" >&2
        missing=1
      elif [[ $line =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]+=\>[[:space:]]+(/[^[:space:]]+) ]]; then
        name=${BASH_REMATCH[1]}
        path=${BASH_REMATCH[2]}
        [[ $name =~ $SYSTEM_LIB_RE ]] && continue
        libs[$name]=$path
      fi
    done < <(ldd "$f")
  done
  ((missing == 0)) || exit 1
  for name in "${!libs[@]}"; do
    cp -L "${libs[$name]}" "$CARRY/device-libs/$name"
  done

  {
    echo "source_dir=$ROOT"
    echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host=$(hostname)"
    echo "git=$(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "nvcc=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "cxx=$(grep -m1 '^CMAKE_CXX_COMPILER:' $BUILD/CMakeCache.txt | cut -d= -f2) $(c++ -dumpfullversion 2>/dev/null)"
    echo "cuda_architectures=$(grep -m1 '^CMAKE_CUDA_ARCHITECTURES:' $BUILD/CMakeCache.txt | cut -d= -f2)"
    echo "blas=$(grep -m1 '^STOKER_BLAS_LIBRARIES:' $BUILD/CMakeCache.txt | cut -d= -f2)"
  } >"$CARRY/BUILD_INFO"

  echo
  echo "==== what travels"
  (cd "$CARRY" && find . -type f -printf '%s %p\n' | sort -k2 |
     awk '{ printf "  %8.2f MiB  %s\n", $1 / 1048576, $2 }')
  local carry_b tree_b total_b
  carry_b=$(du -sb "$CARRY" | cut -f1)
  # The working tree travels too: tracked and untracked-but-not-ignored files.
  tree_b=$( (git ls-files -z --cached --others --exclude-standard 2>/dev/null || true) |
            (cd "$ROOT" && xargs -0 -r stat -c %s -- 2>/dev/null || true) |
            awk '{ s += $1 } END { print s + 0 }')
  total_b=$((carry_b + tree_b))
  echo "  carry ($CARRY): $(mib "$carry_b"); working tree: $(mib "$tree_b");" \
       "total: $(mib "$total_b") of the ${LIMIT_MIB} MiB limit"
  if ((total_b > LIMIT_MIB * 1048576)); then
    echo "gpu-check: over the ${LIMIT_MIB} MiB limit: the device tool would refuse it" >&2
    exit 1
  elif ((total_b > WARN_MIB * 1048576)); then
    echo "gpu-check: WARNING: above ${WARN_MIB} MiB, little head-room left" >&2
  fi
  echo
  echo "Run it on the GPU machine with the device tool:"
  echo "  carry:   [\"$CARRY\"]"
  echo "  command: bash scripts/gpu-check.sh run"
}

# ---------------------------------------------------------------------------------------------
device_env() {
  if [[ ! -d $CARRY/device-libs ]]; then
    echo "gpu-check: $CARRY is missing: run 'bash scripts/gpu-check.sh build' here first and" \
         "name $CARRY in the device tool's carry" >&2
    exit 1
  fi
  export LD_LIBRARY_PATH="$ROOT/$CARRY/device-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The CUDA, cuDNN and NCCL libraries come from the machine (binaries' RUNPATH or the loader's
  # default path). Only if some are not found add the usual CUDA folders, last.
  if missing_libs | grep -q .; then
    local d
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
      [[ -d $d ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
    done
  fi
  export NCCL_NVLS_ENABLE=0  # never NVLink multicast on shared machines
  # Paths compiled into the binaries (test data, ...) point at this machine's checkout: recreate
  # it as a link to the tree here when it does not exist.
  local src
  src=$(sed -n 's/^source_dir=//p' "$CARRY/BUILD_INFO" 2>/dev/null || true)
  if [[ -n $src && $src != "$ROOT" && ! -e $src ]]; then
    mkdir -p "$(dirname "$src")" 2>/dev/null && ln -s "$ROOT" "$src" 2>/dev/null &&
      echo "gpu-check: linked $src -> $ROOT (paths compiled into the binaries)" || true
  fi
}

# "binary: library" for every library a carried binary needs that the loader cannot find.
missing_libs() {
  local f
  for f in "$CARRY"/tests/stoker_* "$CARRY"/benchmarks/stoker_* "$CARRY"/examples/stoker_*; do
    [[ -x $f ]] || continue
    ldd "$f" 2>/dev/null | awk -v b="$(basename "$f")" '/not found/ { print b ": " $1 }'
  done
}

cmd_exec() {
  device_env
  exec "$@"
}

# Summarizes a GoogleTest console log: "passed failed skipped" (from its final counters).
gtest_counts() {
  local log=$1 p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  echo "${p:-?} ${f:-0} ${s:-0}"
}

cmd_run() {
  : "${OUT:=$ROOT/$BUILD/gpu-check-out}"
  mkdir -p "$OUT"
  export OUT
  if [[ -z ${_STOKER_GPU_CHECK_TEED:-} ]]; then
    export _STOKER_GPU_CHECK_TEED=1
    set +e
    bash "$SELF" run "$@" 2>&1 | tee "$OUT/run.log"
    exit "${PIPESTATUS[0]}"
  fi
  device_env
  local timeout_s=${STOKER_TIMEOUT:-300}
  local res
  res=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
  local t_start=$SECONDS

  echo "==== gpu-check run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "---- build"
  sed 's/^/  /' "$CARRY/BUILD_INFO"
  echo "---- machine"
  nvidia-smi -L || echo "  (nvidia-smi failed)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit \
             --format=csv 2>/dev/null || true
  echo "  $(uname -sr); $(nproc) CPUs; $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  echo "  LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  local unresolved
  unresolved=$(missing_libs)
  if [[ -n $unresolved ]]; then
    echo "gpu-check: WARNING: libraries not found (these binaries will fail to start):"
    echo "$unresolved" | sed 's/^/  /'
  fi
  local probe=$CARRY/tests/stoker_gpu_tests
  [[ -x $probe ]] || probe=$(ls "$CARRY"/tests/stoker_* 2>/dev/null | head -1)
  if [[ -n $probe ]]; then
    echo "---- libraries of $(basename "$probe")"
    ldd "$probe" 2>/dev/null | sed 's/^\t*/  /' || true
  fi

  local f name log rc t0 dt
  local -a rows=()
  local failed=0

  # Tests: the gpu suite first, then the cpu suites.
  local -a tests=()
  [[ -x $CARRY/tests/stoker_gpu_tests ]] && tests+=("$CARRY/tests/stoker_gpu_tests")
  if [[ -z ${STOKER_SKIP_CPU_TESTS:-} ]]; then
    for f in "$CARRY"/tests/stoker_*; do
      [[ -x $f && $(basename "$f") != stoker_gpu_tests ]] && tests+=("$f")
    done
  fi
  for f in "${tests[@]}"; do
    name=$(basename "$f")
    log=$res/$name.log
    echo
    echo "==== $name"
    t0=$SECONDS
    set +e
    timeout "$timeout_s" "$f" --gtest_output="xml:$res/$name.xml" \
      ${STOKER_GTEST_FILTER:+--gtest_filter="$STOKER_GTEST_FILTER"} 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    dt=$((SECONDS - t0))
    read -r p fl s < <(gtest_counts "$log")
    local verdict=ok
    if ((rc == 124)); then verdict="TIMEOUT(${timeout_s}s)"
    elif ((rc != 0)) && [[ $fl == 0 ]]; then verdict="CRASH(rc=$rc)"
    elif ((rc != 0)); then verdict=FAIL
    fi
    [[ $verdict == ok ]] || failed=1
    rows+=("$(printf '%-28s %6s %6s %7s %6ss  %s' "$name" "$p" "$fl" "$s" "$dt" "$verdict")")
  done

  # Benchmarks.
  local -a brows=()
  if [[ -z ${STOKER_SKIP_BENCH:-} ]]; then
    for f in "$CARRY"/benchmarks/stoker_*; do
      [[ -x $f ]] || continue
      name=$(basename "$f")
      echo
      echo "==== $name"
      t0=$SECONDS
      set +e
      timeout "$timeout_s" "$f" --benchmark_format=console \
        --benchmark_out="$res/${name#stoker_}.json" --benchmark_out_format=json \
        ${STOKER_BENCH_FILTER:+--benchmark_filter="$STOKER_BENCH_FILTER"} 2>&1 |
        tee "$res/$name.log"
      rc=${PIPESTATUS[0]}
      set -e
      dt=$((SECONDS - t0))
      # A benchmark that calls SkipWithError (e.g. a failed correctness check) still exits 0.
      local errs
      errs=$(grep -c 'ERROR OCCURRED' "$res/$name.log" || true)
      if ((rc == 124)); then verdict="TIMEOUT(${timeout_s}s)"
      elif ((rc != 0)); then verdict="FAIL(rc=$rc)"
      elif ((errs > 0)); then verdict="ERRORS($errs)"
      else verdict=ok
      fi
      [[ $verdict == ok ]] || failed=1
      brows+=("$(printf '%-28s %6ss  %-14s %s' "$name" "$dt" "$verdict" "${name#stoker_}.json")")
    done
  fi

  # At most 8 files come back: the important ones directly, everything in one archive.
  [[ -f $res/stoker_gpu_tests.xml ]] && cp "$res/stoker_gpu_tests.xml" "$OUT/gpu_tests.xml"
  [[ -f $res/gemm_bench.json ]] && cp "$res/gemm_bench.json" "$OUT/gemm_bench.json"
  tar -czf "$OUT/results.tar.gz" -C "$res" . 2>/dev/null || true
  rm -rf "$res"

  {
    echo
    echo "==== summary ($((SECONDS - t_start)) s; full logs in run.log and results.tar.gz)"
    printf '%-28s %6s %6s %7s %7s  %s\n' "test binary" passed failed skipped time result
    if ((${#rows[@]})); then printf '%s\n' "${rows[@]}"; else echo "(no test binaries)"; fi
    if ((${#brows[@]})); then
      printf '%-28s %7s  %-14s %s\n' "benchmark binary" time result json
      printf '%s\n' "${brows[@]}"
    fi
    if ((failed)); then echo "GPU CHECK: FAILED"; else echo "GPU CHECK: PASSED"; fi
  } | tee "$OUT/summary.txt"
  return "$failed"
}

# ---------------------------------------------------------------------------------------------
case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  run) shift; cmd_run "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
