#!/usr/bin/env bash
# Kill one rank of a running multi-GPU job and check that the job ends, with a clear error on
# every surviving rank, promptly (issue #10). Runs on the GPU machine from the repository root:
#
#   bash scripts/kill-rank-check.sh stoker   PROGRAM ARGS...   # under `stoker launch`
#   bash scripts/kill-rank-check.sh torchrun PROGRAM ARGS...   # under torchrun --no-python
#
# Starts PROGRAM on STOKER_NPROC ranks (default 2), waits STOKER_KILL_AFTER seconds (default 10),
# sends SIGKILL to the process of rank STOKER_KILL_RANK (default 1; found by the RANK variable in
# its environment), then waits up to STOKER_END_TIMEOUT seconds (default 120) for the launcher to
# end. Prints the seconds from the kill to the end of the job, the launcher's exit code and every
# line the job printed after the kill. Exit code 0 when the job ended in time with a non-zero
# code, 1 otherwise. The carried stoker CLI and device libraries are used when present.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
launcher=${1:?usage: kill-rank-check.sh stoker|torchrun PROGRAM ARGS...}
shift
program=${1:?no program given}
NPROC=${STOKER_NPROC:-2}
KILL_AFTER=${STOKER_KILL_AFTER:-10}
KILL_RANK=${STOKER_KILL_RANK:-1}
END_TIMEOUT=${STOKER_END_TIMEOUT:-120}
if [[ -d build-gpu/carry/device-libs ]]; then
  export LD_LIBRARY_PATH=$PWD/build-gpu/carry/device-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
STOKER_CLI=${STOKER_CLI:-build-gpu/carry/examples/stoker}
case $launcher in
  stoker) cmd=("$STOKER_CLI" launch --nproc-per-node "$NPROC" "$@") ;;
  torchrun) cmd=(torchrun --no-python --nproc-per-node "$NPROC" "$@") ;;
  *) echo "kill-rank-check: launcher '$launcher' is not stoker or torchrun" >&2; exit 2 ;;
esac
log=$(mktemp)
echo "== $launcher: ${cmd[*]}"
"${cmd[@]}" >"$log" 2>&1 &
job=$!
sleep "$KILL_AFTER"
victim=""
for pid in $(pgrep -f -- "$(basename "$program")"); do
  [[ $pid == "$job" || ! -r /proc/$pid/environ ]] && continue
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$KILL_RANK"; then
    victim=$pid
    break
  fi
done
if [[ -z $victim ]]; then
  echo "kill-rank-check: no process of rank $KILL_RANK found after ${KILL_AFTER}s; job output:"
  cat "$log"
  kill -- "$job" 2>/dev/null
  exit 1
fi
lines_before=$(wc -l <"$log")
t0=$(date +%s.%N)
kill -KILL "$victim"
echo "killed rank $KILL_RANK (pid $victim) after ${KILL_AFTER}s"
ended=0
for ((i = 0; i < END_TIMEOUT * 10; ++i)); do
  if ! kill -0 "$job" 2>/dev/null; then
    ended=1
    break
  fi
  sleep 0.1
done
t1=$(date +%s.%N)
if ((ended)); then
  wait "$job"
  rc=$?
else
  rc=timeout
  pkill -KILL -f -- "$(basename "$program")"
  kill -KILL "$job" 2>/dev/null
fi
echo "job ended: $( ((ended)) && echo yes || echo NO) after $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s; launcher exit code $rc"
echo "-- what the surviving ranks said:"
tail -n +"$((lines_before + 1))" "$log" | grep -E 'stoker: rank|FAILED|exited' | head -10
echo "-- output after the kill (first 40 lines):"
tail -n +"$((lines_before + 1))" "$log" | head -40
rm -f "$log"
[[ $ended == 1 && $rc != 0 ]]
