#!/usr/bin/env bash
# Runs every libFuzzer target of a build (stoker_fuzz_* in <build>/tests/fuzz; preset asan builds
# them) for SECONDS seconds each, seeded with a copy of tests/fuzz/corpus/<target>/ and
# tests/fuzz/regressions/<target>/ (the checked-in folders are not modified), with the dictionary
# tests/fuzz/<target>.dict when there is one, JOBS targets at a time. Exit status 1 when any target reports a finding (libFuzzer's non-zero exit: a crash, a
# sanitizer report, a leak, a timeout of one input over 10 s, over 2 GiB of memory); its log and
# the input that triggered it are kept under <build>/fuzz-findings/<target>/.
#
#   bash tests/fuzz/run.sh build/asan 30        # what scripts/test.sh runs
#   JOBS=1 bash tests/fuzz/run.sh build/fuzz 600 record jpeg   # some targets only
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
if (($# < 2)); then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
SECONDS_EACH=$2
shift 2
JOBS=${JOBS:-$(nproc)}

targets=("$@")
if ((${#targets[@]} == 0)); then
  for bin in "$BUILD"/tests/fuzz/stoker_fuzz_*; do
    [[ -x $bin && $bin != *make_corpus ]] && targets+=("$(basename "$bin" | sed 's/^stoker_fuzz_//')")
  done
fi
if ((${#targets[@]} == 0)); then
  echo "run.sh: no fuzz targets in $BUILD/tests/fuzz (configure with -DSTOKER_BUILD_FUZZERS=ON, e.g. preset asan)" >&2
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/stoker-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
FINDINGS=$BUILD/fuzz-findings
rm -rf "$FINDINGS"

# run_one <target>: exit status 0 = no finding.
run_one() {
  local t=$1 bin=$BUILD/tests/fuzz/stoker_fuzz_$1 dir=$WORK/$1
  mkdir -p "$dir/corpus" "$dir/artifacts"
  [[ -x $bin ]] || { echo "run.sh: $bin does not exist" >"$dir/log"; return 1; }
  cp -R "$ROOT/tests/fuzz/corpus/$t/." "$dir/corpus/"
  if [[ -d $ROOT/tests/fuzz/regressions/$t ]]; then
    cp -R "$ROOT/tests/fuzz/regressions/$t/." "$dir/corpus/"
  fi
  local dict=()
  [[ -f $ROOT/tests/fuzz/$t.dict ]] && dict=(-dict="$ROOT/tests/fuzz/$t.dict")
  local rc=0
  "$bin" "$dir/corpus" "${dict[@]}" -max_total_time="$SECONDS_EACH" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$dir/artifacts/" -print_final_stats=1 >"$dir/log" 2>&1 ||
    rc=$?
  return $rc
}

pids=()
names=()
status=0
wait_one() {  # waits for the oldest running target
  local rc=0
  wait "${pids[0]}" || rc=$?
  local t=${names[0]}
  pids=("${pids[@]:1}")
  names=("${names[@]:1}")
  local log=$WORK/$t/log
  local stats
  stats=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 |
          sed -E 's/^#([0-9]+)[[:space:]]+[A-Z]+[[:space:]]+/\1 runs, /; s/ corp:.*exec\/s:/, exec\/s:/; s/ rss:.*//' || true)
  if ((rc == 0)); then
    printf '  %-12s ok       %s\n' "$t" "$stats"
  else
    status=1
    mkdir -p "$FINDINGS/$t"
    cp "$log" "$FINDINGS/$t/log"
    cp -R "$WORK/$t/artifacts/." "$FINDINGS/$t/" 2>/dev/null || true
    printf '  %-12s FINDING  (exit %d) %s\n' "$t" "$rc" "$stats"
    echo "---- $t: the end of libFuzzer's log (all of it: $FINDINGS/$t/log)"
    grep -v '^#[0-9]' "$log" | tail -40
    echo "---- $t: input(s) kept in $FINDINGS/$t/; replay one with $BUILD/tests/fuzz/stoker_fuzz_$t <file>"
  fi
}

echo "fuzzing ${#targets[@]} targets for ${SECONDS_EACH} s each, $JOBS at a time"
for t in "${targets[@]}"; do
  while ((${#pids[@]} >= JOBS)); do wait_one; done
  run_one "$t" &
  pids+=($!)
  names+=("$t")
done
while ((${#pids[@]} > 0)); do wait_one; done
exit $status
