#!/usr/bin/env bash
# Builds a relocatable GPU bundle on a build machine (no GPU needed) and runs the GPU tests and
# benchmarks from it on a GPU host (docs/development.md describes the workflow).
#
#   bash scripts/gpu-check.sh build [--bundle DIR]
#        On the build machine: configure and build preset `gpu` into build-gpu/ and stage the
#        bundle: the stripped binaries plus the shared libraries a bare GPU host lacks.
#   bash scripts/gpu-check.sh run [--bundle DIR] [--out DIR]
#        On the GPU host, from the repository root: run every test and benchmark binary of the
#        bundle, write their logs into the output folder, print a summary table last.
#   bash scripts/gpu-check.sh exec [--bundle DIR] PROGRAM [ARGS...]
#        On the GPU host: run one program with the bundle's libraries (e.g.
#        build-gpu/bundle/examples/stoker_demo).
#   bash scripts/gpu-check.sh --help
#
# The bundle (default build-gpu/bundle, or $STOKER_BUNDLE):
#   tests/        stripped GoogleTest binaries (stoker_*_tests, stoker_parity)
#   benchmarks/   stripped Google Benchmark and benchmark programs
#   examples/     stripped example programs and the stoker CLI (not run by `run`; use `exec`)
#   lib/          the shared libraries the binaries need that a GPU host with the NVIDIA driver
#                 and the CUDA toolkit (cuBLAS, cuDNN, NCCL) does not provide: everything `ldd`
#                 resolves except glibc, libstdc++/libgcc and the CUDA, cuDNN, NCCL and driver
#                 libraries
#   BUILD_INFO    where, when and from which commit it was built
# Copy it to the GPU host together with the repository's files, at the same place in the tree
# (the scripts, the peers in benchmarks/peers/ and the test data are read from the tree);
# docs/development.md shows the rsync and scp commands.
#
# Output folder of `run` (--out DIR, else $STOKER_GPU_CHECK_OUT, else build/gpu-check):
# run.log (everything), summary.txt, and logs/ (replaced on each run): every binary's console
# log, GoogleTest XML and benchmark JSON.
#
# Knobs. build: STOKER_GPU_TARGETS="a b" (build only these targets; the rest of the bundle may
# be stale), STOKER_BUNDLE_SKIP_CPU_TESTS=1 (stage no CPU test suite), STOKER_JOBS (parallel
# build jobs). run: STOKER_GTEST_FILTER (--gtest_filter), STOKER_BENCH_FILTER
# (--benchmark_filter), STOKER_SKIP_BENCH=1, STOKER_SKIP_CPU_TESTS=1, STOKER_TIMEOUT (seconds
# per binary, default 300).
set -euo pipefail
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$SELF")/.."
ROOT=$PWD
BUILD=build-gpu
BUNDLE=${STOKER_BUNDLE:-$BUILD/bundle}
OUT_DIR=${STOKER_GPU_CHECK_OUT:-build/gpu-check}

# Libraries a GPU host has (the C/C++ runtime, the NVIDIA driver, the CUDA toolkit with cuDNN
# and NCCL): never copied into the bundle.
SYSTEM_LIB_RE='^(linux-vdso|linux-gate|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcurand|libcufft|libcusparse|libcusolver|libnvrtc|libnvJitLink|libnvidia-[a-z-]+|libcudnn[a-z_]*|libnccl)\.so'

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$SELF"; }
die() { echo "gpu-check: $*" >&2; exit 2; }

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

is_elf() { [[ -f "$1" && -x "$1" ]] && [[ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" == '177ELF' ]]; }

# ---------------------------------------------------------------------------------------------
cmd_build() {
  (($# == 0)) || die "build: unexpected argument '$1' (see --help)"
  if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
  local jobs=${STOKER_JOBS:-$(nproc)}
  [[ $jobs =~ ^[1-9][0-9]*$ ]] || die "STOKER_JOBS='$jobs' is not a positive number"
  bash scripts/setup.sh
  cmake --preset gpu
  # shellcheck disable=SC2086
  cmake --build --preset gpu --parallel "$jobs" ${STOKER_GPU_TARGETS:+--target $STOKER_GPU_TARGETS}

  echo
  echo "==== staging the bundle in $BUNDLE"
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/tests" "$BUNDLE/benchmarks" "$BUNDLE/examples" "$BUNDLE/lib"

  local kind f base n=0
  local -a staged=()
  for kind in tests benchmarks examples src; do
    [[ -d $BUILD/$kind ]] || continue
    while IFS= read -r -d '' f; do
      is_elf "$f" || continue
      base=$(basename "$f")
      if [[ -n ${STOKER_BUNDLE_SKIP_CPU_TESTS:-} && $kind == tests && $base =~ ^stoker_[a-z]+_tests$ &&
            $base != stoker_gpu_tests ]]; then
        continue
      fi
      # the stoker CLI (built under src/cli) goes with the examples
      local to=$kind
      [[ $kind == src ]] && to=examples
      strip --strip-unneeded -o "$BUNDLE/$to/$base" "$f"
      staged+=("$BUNDLE/$to/$base")
      n=$((n + 1))
    done < <(if [[ $kind == src ]]; then
               find "$BUILD/src" -path '*/CMakeFiles' -prune -o -type f -name stoker -print0
             else
               find "$BUILD/$kind" -path '*/CMakeFiles' -prune -o -type f -name 'stoker*' -print0
             fi)
  done
  if ((n == 0)); then
    echo "gpu-check: no test, benchmark or example binaries were built in $BUILD" >&2
    exit 1
  fi

  # The shared libraries the binaries need, minus what a GPU host has.
  local line name path missing=0
  declare -A libs=()
  for f in "${staged[@]}"; do
    while IFS= read -r line; do
      if [[ $line =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]+=\>[[:space:]]+not\ found ]]; then
        echo "gpu-check: $f: ${BASH_REMATCH[1]} not found on this machine (ldd)" >&2
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
    cp -L "${libs[$name]}" "$BUNDLE/lib/$name"
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
  } >"$BUNDLE/BUILD_INFO"

  echo
  echo "==== the bundle"
  (cd "$BUNDLE" && find . -type f -printf '%s %p\n' | sort -k2 |
     awk '{ printf "  %8.2f MiB  %s\n", $1 / 1048576, $2 }')
  echo "  total: $(mib "$(du -sb "$BUNDLE" | cut -f1)")"
  echo
  echo "Copy the repository with $BUNDLE to the GPU host and run there, from its root:"
  echo "  bash scripts/gpu-check.sh run"
}

# ---------------------------------------------------------------------------------------------
bundle_env() {
  if [[ ! -d $BUNDLE/lib || ! -f $BUNDLE/BUILD_INFO ]]; then
    echo "gpu-check: no bundle at $BUNDLE: run 'bash scripts/gpu-check.sh build' on the build" \
         "machine and copy $BUNDLE here with the repository (or set STOKER_BUNDLE / --bundle)" >&2
    exit 1
  fi
  local lib=$ROOT/$BUNDLE/lib
  [[ $BUNDLE == /* ]] && lib=$BUNDLE/lib
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The CUDA, cuDNN and NCCL libraries come from the host (the binaries' RUNPATH or the
  # loader's default path). Only if some are not found add the usual CUDA folders, last.
  if [[ -n $(missing_libs) ]]; then
    local d
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
      [[ -d $d ]] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
    done
  fi
  # NVLink multicast (NVLS) needs fabric-manager setup many hosts lack: off unless asked for.
  export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
  # Paths compiled into the binaries (test data, ...) name the build machine's checkout:
  # recreate that path as a link to this tree when it does not exist here.
  local src
  src=$(sed -n 's/^source_dir=//p' "$BUNDLE/BUILD_INFO" 2>/dev/null || true)
  if [[ -n $src && $src != "$ROOT" && ! -e $src ]]; then
    mkdir -p "$(dirname "$src")" 2>/dev/null && ln -s "$ROOT" "$src" 2>/dev/null &&
      echo "gpu-check: linked $src -> $ROOT (paths compiled into the binaries)" || true
  fi
}

# "binary: library" for every library a bundled binary needs that the loader cannot find.
missing_libs() {
  local f
  for f in "$BUNDLE"/tests/stoker* "$BUNDLE"/benchmarks/stoker* "$BUNDLE"/examples/stoker*; do
    [[ -x $f ]] || continue
    ldd "$f" 2>/dev/null | awk -v b="$(basename "$f")" '/not found/ { print b ": " $1 }'
  done
}

cmd_exec() {
  (($#)) || die "exec: no program given (exec PROGRAM [ARGS...])"
  bundle_env
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
  (($# == 0)) || die "run: unexpected argument '$1' (see --help)"
  [[ -n ${STOKER_TIMEOUT:-} && ! ${STOKER_TIMEOUT} =~ ^[1-9][0-9]*$ ]] &&
    die "STOKER_TIMEOUT='$STOKER_TIMEOUT' is not a positive number of seconds"
  mkdir -p "$OUT_DIR"
  if [[ -z ${_STOKER_GPU_CHECK_TEED:-} ]]; then
    export _STOKER_GPU_CHECK_TEED=1 STOKER_BUNDLE=$BUNDLE STOKER_GPU_CHECK_OUT=$OUT_DIR
    set +e
    bash "$SELF" run 2>&1 | tee "$OUT_DIR/run.log"
    exit "${PIPESTATUS[0]}"
  fi
  bundle_env
  local timeout_s=${STOKER_TIMEOUT:-300}
  local res=$OUT_DIR/logs
  rm -rf "$res"
  mkdir -p "$res"
  local t_start=$SECONDS

  echo "==== gpu-check run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname); output in $OUT_DIR"
  echo "---- build"
  sed 's/^/  /' "$BUNDLE/BUILD_INFO"
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
  local probe=$BUNDLE/tests/stoker_gpu_tests
  [[ -x $probe ]] || probe=$(ls "$BUNDLE"/tests/stoker_* 2>/dev/null | head -1)
  if [[ -n $probe ]]; then
    echo "---- libraries of $(basename "$probe")"
    ldd "$probe" 2>/dev/null | sed 's/^\t*/  /' || true
  fi

  local f name log rc t0 dt p fl s verdict
  local -a rows=()
  local failed=0

  # Tests: the gpu suite first, then the cpu suites.
  local -a tests=()
  [[ -x $BUNDLE/tests/stoker_gpu_tests ]] && tests+=("$BUNDLE/tests/stoker_gpu_tests")
  if [[ -z ${STOKER_SKIP_CPU_TESTS:-} ]]; then
    for f in "$BUNDLE"/tests/stoker_*_tests; do
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
    verdict=ok
    if ((rc == 124)); then verdict="TIMEOUT(${timeout_s}s)"
    elif ((rc != 0)) && [[ $fl == 0 ]]; then verdict="CRASH(rc=$rc)"
    elif ((rc != 0)); then verdict=FAIL
    fi
    [[ $verdict == ok ]] || failed=1
    rows+=("$(printf '%-28s %6s %6s %7s %6ss  %s' "$name" "$p" "$fl" "$s" "$dt" "$verdict")")
  done

  # Benchmarks.
  local -a brows=()
  local errs
  if [[ -z ${STOKER_SKIP_BENCH:-} ]]; then
    for f in "$BUNDLE"/benchmarks/stoker_*; do
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
      errs=$(grep -c 'ERROR OCCURRED' "$res/$name.log" || true)
      if ((rc == 124)); then verdict="TIMEOUT(${timeout_s}s)"
      elif ((rc != 0)); then verdict="FAIL(rc=$rc)"
      elif ((errs > 0)); then verdict="ERRORS($errs)"
      else verdict=ok
      fi
      [[ $verdict == ok ]] || failed=1
      brows+=("$(printf '%-28s %6ss  %-14s %s' "$name" "$dt" "$verdict" "logs/${name#stoker_}.json")")
    done
  fi

  {
    echo
    echo "==== summary ($((SECONDS - t_start)) s; logs in $OUT_DIR: run.log, logs/)"
    printf '%-28s %6s %6s %7s %7s  %s\n' "test binary" passed failed skipped time result
    if ((${#rows[@]})); then printf '%s\n' "${rows[@]}"; else echo "(no test binaries)"; fi
    if ((${#brows[@]})); then
      printf '%-28s %7s  %-14s %s\n' "benchmark binary" time result json
      printf '%s\n' "${brows[@]}"
    fi
    if ((failed)); then echo "GPU CHECK: FAILED"; else echo "GPU CHECK: PASSED"; fi
  } | tee "$OUT_DIR/summary.txt"
  return "$failed"
}

# ---------------------------------------------------------------------------------------------
# Options common to the subcommands: --bundle DIR, --out DIR (run only). exec stops at the
# first argument that is not one of them (the program).
parse_options() {
  local sub=$1
  shift
  ARGS=()
  while (($#)); do
    case $1 in
      --bundle) (($# >= 2)) || die "--bundle needs a folder"; BUNDLE=$2; shift 2 ;;
      --bundle=*) BUNDLE=${1#--bundle=}; shift ;;
      --out) [[ $sub == run ]] || die "$sub: --out is an option of run"
             (($# >= 2)) || die "--out needs a folder"; OUT_DIR=$2; shift 2 ;;
      --out=*) [[ $sub == run ]] || die "$sub: --out is an option of run"; OUT_DIR=${1#--out=}; shift ;;
      -h|--help) usage; exit 0 ;;
      -*) [[ $sub == exec && ${#ARGS[@]} -gt 0 ]] && { ARGS+=("$@"); return; }
          die "$sub: unknown option '$1' (see --help)" ;;
      *) ARGS+=("$@"); return ;;
    esac
  done
  [[ -n $BUNDLE ]] || die "--bundle: empty folder name"
}

case "${1:-}" in
  build|run|exec)
    sub=$1
    shift
    parse_options "$sub" "$@"
    "cmd_$sub" ${ARGS[@]+"${ARGS[@]}"} ;;
  -h|--help|help) usage ;;
  "") usage >&2; exit 2 ;;
  *) echo "gpu-check: unknown command '$1': build, run or exec (see --help)" >&2; exit 2 ;;
esac
