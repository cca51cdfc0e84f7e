#!/usr/bin/env bash
# Kills one rank of a running multi-GPU job and checks that the job ends, with a clear error on
# every surviving rank, promptly (docs/distributed.md). On a GPU host, from the repository root:
#
#   bash scripts/kill-rank-check.sh stoker   PROGRAM [ARGS...]   # under `stoker launch`
#   bash scripts/kill-rank-check.sh torchrun PROGRAM [ARGS...]   # under torchrun --no-python
#   bash scripts/kill-rank-check.sh --help
#
# Starts PROGRAM on STOKER_NPROC ranks (default 2) in a session of its own, waits
# STOKER_KILL_AFTER seconds (default 10), sends SIGKILL to the process of rank STOKER_KILL_RANK
# (default 1; the job's PROGRAM process whose environment has RANK=that), then waits up to
# STOKER_END_TIMEOUT seconds (default 120) for the launcher to end. Prints the seconds from the
# kill to the end of the job, the launcher's exit code and every line the job printed after the
# kill. Exit code 0 when the job ended in time with a non-zero code, 1 otherwise (a job still
# running then is killed, the whole session), 2 for bad arguments.
# The stoker CLI: $STOKER_CLI, else the GPU bundle's ($STOKER_BUNDLE, else build-gpu/bundle:
# examples/stoker, with the bundle's libraries).
set -uo pipefail
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$SELF")/.." || exit 1
usage() { sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$SELF"; }
die() { echo "kill-rank-check: $*" >&2; exit 2; }

case ${1:-} in
  -h|--help|help) usage; exit 0 ;;
  stoker|torchrun) launcher=$1; shift ;;
  "") usage >&2; exit 2 ;;
  *) die "launcher '$1' is not stoker or torchrun (see --help)" ;;
esac
(($#)) || die "no program given: $launcher PROGRAM [ARGS...]"
program=$1
command -v "$program" >/dev/null 2>&1 || die "program '$program' not found or not executable"

count() {  # count NAME VALUE MIN: VALUE is a whole number >= MIN
  [[ $2 =~ ^[0-9]+$ ]] && (($2 >= $3)) || die "$1='$2' is not a whole number >= $3"
}
NPROC=${STOKER_NPROC:-2}
KILL_AFTER=${STOKER_KILL_AFTER:-10}
KILL_RANK=${STOKER_KILL_RANK:-1}
END_TIMEOUT=${STOKER_END_TIMEOUT:-120}
count STOKER_NPROC "$NPROC" 2
count STOKER_KILL_AFTER "$KILL_AFTER" 0
count STOKER_KILL_RANK "$KILL_RANK" 0
count STOKER_END_TIMEOUT "$END_TIMEOUT" 1
((KILL_RANK < NPROC)) || die "STOKER_KILL_RANK=$KILL_RANK: the job has ranks 0..$((NPROC - 1))"

BUNDLE=${STOKER_BUNDLE:-build-gpu/bundle}
if [[ -d $BUNDLE/lib ]]; then
  lib=$PWD/$BUNDLE/lib
  [[ $BUNDLE == /* ]] && lib=$BUNDLE/lib
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
case $launcher in
  stoker)
    STOKER_CLI=${STOKER_CLI:-$BUNDLE/examples/stoker}
    [[ -x $STOKER_CLI ]] || die "no stoker CLI at '$STOKER_CLI' (set STOKER_CLI)"
    cmd=("$STOKER_CLI" launch --nproc-per-node "$NPROC" "$@") ;;
  torchrun)
    command -v torchrun >/dev/null 2>&1 || die "torchrun not found (PyTorch's launcher)"
    cmd=(torchrun --no-python --nproc-per-node "$NPROC" "$@") ;;
esac

log=$(mktemp)
echo "== $launcher: ${cmd[*]}"
# A session of its own: the job's processes are found, and if need be killed, by its id.
setsid "${cmd[@]}" >"$log" 2>&1 &
job=$!
sleep "$KILL_AFTER"
victim=""
for pid in $(pgrep -s "$job" -f -- "$(basename "$program")" 2>/dev/null); do
  [[ $pid == "$job" || ! -r /proc/$pid/environ ]] && continue
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=$KILL_RANK"; then
    victim=$pid
    break
  fi
done
if [[ -z $victim ]]; then
  echo "kill-rank-check: no process of rank $KILL_RANK found after ${KILL_AFTER}s; job output:"
  cat "$log"
  kill -KILL -- "-$job" 2>/dev/null
  wait "$job" 2>/dev/null
  rm -f "$log"
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
  kill -KILL -- "-$job" 2>/dev/null
  wait "$job" 2>/dev/null
fi
echo "job ended: $( ((ended)) && echo yes || echo NO) after $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s; launcher exit code $rc"
echo "-- what the surviving ranks said:"
tail -n +"$((lines_before + 1))" "$log" | grep -E 'stoker: rank|FAILED|exited' | head -10
echo "-- output after the kill (first 40 lines):"
tail -n +"$((lines_before + 1))" "$log" | head -40
rm -f "$log"
[[ $ended == 1 && $rc != 0 ]]
