#!/usr/bin/env bash
# The test command: installs missing packages, configures and builds the `ci` preset (library,
# tests, benchmarks, examples; CUDA when the toolkit is found), runs every CTest test (gpu tests
# skip without a GPU), installs stoker into a temporary prefix and builds and runs the consumer
# project tests/consumer against that install. Prints the wall time of each step at the end.
# Works from any directory. Environment: STOKER_JOBS (parallel jobs, default: nproc),
# STOKER_CONFIGURE_ARGS (extra arguments for the configure step, e.g. -DSTOKER_WITH_CUDA=OFF).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

# nvcc is usually not on PATH on a fresh machine; CMake finds it there.
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
JOBS=${STOKER_JOBS:-$(nproc)}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/stoker-test.XXXXXX")
JUNIT=$ROOT/build/ci/ctest-junit.xml
rm -f "$JUNIT"

T_START=$SECONDS
STEP_NAMES=()
STEP_TIMES=()
CURRENT=""
finish() {
  local rc=$?
  rm -rf "$TMP"
  echo
  echo "==== test.sh summary"
  local i
  for i in "${!STEP_NAMES[@]}"; do
    printf '  %-34s %5ss\n' "${STEP_NAMES[$i]}" "${STEP_TIMES[$i]}"
  done
  if ((rc != 0)); then
    echo "  FAILED in step: ${CURRENT:-?} (exit code $rc)"
  fi
  local total=$((SECONDS - T_START))
  printf '  total wall time: %dm%02ds (%ss)%s\n' $((total / 60)) $((total % 60)) "$total" \
    "$( ((rc == 0)) && echo ', all steps passed' || true)"
  # Last line: the test counts from CTest's JUnit file, as "ctest: N passed, N failed, N skipped".
  if [[ -f $JUNIT ]]; then
    local t f s d
    t=$(sed -n 's/^[[:space:]]*tests="\([0-9]*\)".*/\1/p' "$JUNIT" | head -1)
    f=$(sed -n 's/^[[:space:]]*failures="\([0-9]*\)".*/\1/p' "$JUNIT" | head -1)
    s=$(sed -n 's/^[[:space:]]*skipped="\([0-9]*\)".*/\1/p' "$JUNIT" | head -1)
    d=$(sed -n 's/^[[:space:]]*disabled="\([0-9]*\)".*/\1/p' "$JUNIT" | head -1)
    if [[ -n $t && -n $f ]]; then
      echo "ctest: $((t - f - ${s:-0} - ${d:-0})) passed, $f failed, $((${s:-0} + ${d:-0})) skipped"
    fi
  fi
}
trap finish EXIT

step() {  # step <name> <command...>
  CURRENT=$1
  shift
  echo
  echo "==== [$CURRENT] $*"
  local t0=$SECONDS
  "$@"
  STEP_NAMES+=("$CURRENT")
  STEP_TIMES+=($((SECONDS - t0)))
}

step "setup (packages)" bash scripts/setup.sh --tests
# CI has the browser (Debian's chromium, installed just now): its HTML report test must run
# there, not skip.
if [[ -n ${CI:-} ]]; then export STOKER_REQUIRE_BROWSER=1; fi
# shellcheck disable=SC2086  # word splitting of STOKER_CONFIGURE_ARGS is intended
step "configure (preset ci)" cmake --preset ci ${STOKER_CONFIGURE_ARGS:-}
step "build (preset ci)" cmake --build --preset ci --parallel "$JOBS"
step "ctest (preset ci)" ctest --preset ci --parallel "$JOBS" --output-junit "$JUNIT"
# The data layer's threads and parsers also run under AddressSanitizer + UndefinedBehaviorSanitizer
# (leaks included; built with clang, whose build also links the libFuzzer targets of tests/fuzz
# from the same objects: one sanitizer build for both), and under ThreadSanitizer built with
# clang (gcc 12's works as well since src/data/resize.cpp leaves out its target_clones under
# TSan, whose ifunc resolver crashed every gcc TSan binary at startup). Under TSan oneTBB runs
# serially (its prebuilt library is not instrumented: tests/data/thread_sanitizer_test.cpp), so
# TSan checks the Loader's own threads; any report fails the step (exit code 66).
step "asan: configure" cmake --preset asan
step "asan: build data tests + fuzzers" cmake --build --preset asan --parallel "$JOBS"
step "asan: run data tests" build/asan/tests/stoker_data_tests --gtest_brief=1
# Each fuzz target for 30 s from its seed corpus and regressions (tests/fuzz/README.md); any
# finding fails the step, its input kept in build/asan/fuzz-findings/<target>/.
step "fuzz: each target 30 s" bash tests/fuzz/run.sh build/asan 30
step "tsan: configure" cmake --preset tsan
step "tsan: build data tests" cmake --build --preset tsan --parallel "$JOBS"
step "tsan: run data tests" build/tsan-clang/tests/stoker_data_tests --gtest_brief=1
step "install (temporary prefix)" cmake --install build/ci --prefix "$TMP/prefix"
step "consumer: configure" cmake -S tests/consumer -B "$TMP/consumer" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TMP/prefix"
step "consumer: build" cmake --build "$TMP/consumer" --parallel "$JOBS"
step "consumer: run" "$TMP/consumer/stoker_consumer"
step "consumer: run ops-only" "$TMP/consumer/stoker_ops_only"
CURRENT=""
