#!/bin/sh
# `stoker launch` end to end: the environment every rank gets, and a failing rank stopping the
# job with its exit status and stderr in the report. Usage: launch_cli_test.sh STOKER SCRATCH
set -eu
stoker="$1"
scratch="$2"
rm -rf "$scratch"
mkdir -p "$scratch"

# Every rank sees torchrun's variables; the program's own flags pass through untouched.
"$stoker" launch --nproc-per-node 3 --master-port 0 sh -c \
  'echo "$RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$MASTER_ADDR $1" > "$0/rank_$RANK"' \
  "$scratch" --flag-for-the-program
for r in 0 1 2; do
  grep -q "^$r/3/$r/3/127.0.0.1 --flag-for-the-program\$" "$scratch/rank_$r" ||
    { echo "rank $r: unexpected environment: $(cat "$scratch/rank_$r")"; exit 1; }
done

# Rank 1 fails: the others (sleeping 30 s) are stopped, the status is rank 1's, and the report
# names the rank and quotes its stderr.
start=$(date +%s)
status=0
"$stoker" launch -n 3 --master-port 0 --kill-grace 1 sh -c \
  'if [ "$RANK" = 1 ]; then echo "CUDA error: out of memory on rank 1" >&2; exit 7; fi; sleep 30' \
  2> "$scratch/stderr" || status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" = 7 ] || { echo "expected exit status 7, got $status"; cat "$scratch/stderr"; exit 1; }
[ "$elapsed" -lt 15 ] || { echo "the launcher took ${elapsed}s to stop the job"; exit 1; }
grep -q "FAILED: rank 1 (local 1, pid [0-9]*) exited with status 7" "$scratch/stderr" ||
  { echo "no failure report:"; cat "$scratch/stderr"; exit 1; }
grep -q "^  CUDA error: out of memory on rank 1" "$scratch/stderr" ||
  { echo "the report lacks rank 1's stderr:"; cat "$scratch/stderr"; exit 1; }
grep -q "^\[rank 1\] CUDA error: out of memory on rank 1" "$scratch/stderr" ||
  { echo "rank 1's stderr was not forwarded:"; cat "$scratch/stderr"; exit 1; }

# A SIGTERM to the launcher reaches every rank (each says so), and the launcher exits 128 + 15.
"$stoker" launch -n 2 --master-port 0 sh -c \
  'trap "echo got-term > $0/term_$RANK; exit 0" TERM; touch "$0/up_$RANK"; sleep 30 & wait' \
  "$scratch" 2> "$scratch/stderr_term" &
launcher=$!
tries=0
while [ ! -f "$scratch/up_0" ] || [ ! -f "$scratch/up_1" ]; do
  tries=$((tries + 1))
  [ "$tries" -lt 200 ] || { echo "the ranks did not start"; kill "$launcher"; exit 1; }
  sleep 0.05
done
kill -TERM "$launcher"
status=0
wait "$launcher" || status=$?
[ "$status" = 143 ] || { echo "expected 143 after SIGTERM, got $status"; cat "$scratch/stderr_term"; exit 1; }
for r in 0 1; do
  [ -f "$scratch/term_$r" ] || { echo "rank $r did not get the forwarded SIGTERM"; exit 1; }
done
grep -q "received signal 15, forwarding it to every rank" "$scratch/stderr_term" ||
  { echo "no forwarding message:"; cat "$scratch/stderr_term"; exit 1; }

# No program: a usage error.
status=0
"$stoker" launch -n 2 2> /dev/null || status=$?
[ "$status" = 2 ] || { echo "expected status 2 without a program, got $status"; exit 1; }

# -n 0 and out-of-range values are refused (CLI11's status 105, naming the flag); nothing runs.
for bad in "-n 0" "--nproc-per-node -1" "--master-port 70000" "--nnodes 0" "--tail -1"; do
  flag=${bad%% *}
  [ "$flag" = "-n" ] && flag=--nproc-per-node
  status=0
  # shellcheck disable=SC2086 # the flag and its value are two words
  "$stoker" launch $bad sh -c 'touch "$0/ran"' "$scratch" 2> "$scratch/stderr_bad" || status=$?
  [ "$status" = 105 ] || { echo "launch $bad: expected status 105, got $status"; exit 1; }
  grep -q -- "^$flag: " "$scratch/stderr_bad" ||
    { echo "launch $bad: the error does not name $flag:"; cat "$scratch/stderr_bad"; exit 1; }
  [ ! -e "$scratch/ran" ] || { echo "launch $bad: the program ran"; exit 1; }
done
echo "launch CLI test passed"
