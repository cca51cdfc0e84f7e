#!/bin/sh
# End-to-end check of `stoker doctor` on the CPU: static checks, the ablations on the bundled
# model (real vs synthetic data, sweep, 1 vs 2 ranks over TCP), the overhead measurement, the
# JSON file, and the user-program mode (stoker's own doctor worker stands in for a user's
# Trainer program); before those, bad options refused before any work and --on-corrupt on a
# database with a damaged record. Usage: doctor_cli_test.sh STOKER_BINARY SCRATCH_DIR
set -eu
stoker="$1"
dir="$2"
rm -rf "$dir"
mkdir -p "$dir"

# Bad input is refused before any work (no static checks, no synthetic set packed; `timeout`:
# a hang fails).
refused() {  # refused STATUS PATTERN ARGS...: doctor ARGS exits STATUS, its stderr matches
  want="$1" pattern="$2"
  shift 2
  status=0
  timeout 60 "$stoker" doctor "$@" > "$dir/bad_out.txt" 2> "$dir/bad_err.txt" || status=$?
  [ "$status" = "$want" ] ||
    { echo "doctor $*: status $status, not $want"; cat "$dir/bad_err.txt"; exit 1; }
  grep -q -- "$pattern" "$dir/bad_err.txt" ||
    { echo "doctor $*: no '$pattern' in:"; cat "$dir/bad_err.txt"; exit 1; }
  if grep -q "packing\|== static checks" "$dir/bad_out.txt"; then
    echo "doctor $*: worked before refusing"; exit 1
  fi
}
printf 'x' > "$dir/plain"
refused 105 "^--model: foo not in" --device cpu --model foo
refused 105 "^--threads: Value 5000 not in range" --device cpu --threads 5000
refused 105 "^--on-corrupt: maybe not in" --device cpu --on-corrupt maybe
refused 1 "^stoker: error: --json $dir/plain/d.json: $dir/plain is not a folder" \
  --device cpu --json "$dir/plain/d.json"
refused 1 "^stoker: error: --trace $dir: is a folder" --device cpu --trace "$dir"
refused 1 "^stoker: error: --device tpu: unknown device" --device tpu
# CUDA_VISIBLE_DEVICES="" hides every GPU, so this holds on GPU machines too.
(export CUDA_VISIBLE_DEVICES= &&
  refused 1 "^stoker: error: --device cuda: no CUDA device is visible" --device cuda)

# Outputs never land on an input (the database keeps its bytes), inputs that are not regular
# files are refused without being opened (`timeout`: a hang fails), an empty path is not "off".
"$stoker" pack synth --out "$dir/db" --samples 16 --classes 4 --size 32 --no-progress > /dev/null
cp "$dir/db/data.mdb" "$dir/db.orig"
for flag in --json --trace --save-baseline --html; do
  refused 1 "^stoker: error: $flag $dir/db/data.mdb is inside the input folder --data $dir/db" \
    --device cpu --data "$dir/db" "$flag" "$dir/db/data.mdb"
  refused 105 "^$flag: an empty path does not turn it off" --device cpu "$flag" ""
done
cmp -s "$dir/db/data.mdb" "$dir/db.orig" || { echo "doctor: the --data database was changed"; exit 1; }
printf '{}' > "$dir/card.orig.json"
refused 1 "^stoker: error: --save-baseline $dir/card.orig.json is the input --compare" \
  --device cpu --compare "$dir/card.orig.json" --save-baseline "$dir/card.orig.json"
[ "$(cat "$dir/card.orig.json")" = "{}" ] || { echo "doctor: --compare was changed"; exit 1; }
refused 105 "^--data: an empty path does not turn it off" --device cpu --data ""
mkfifo "$dir/fifo"
mkdir -p "$dir/fifo-db"
mkfifo "$dir/fifo-db/data.mdb"
refused 1 "^stoker: error: --data $dir/fifo: is a FIFO (named pipe), not a folder" \
  --device cpu --data "$dir/fifo"
refused 1 "^stoker: error: --data $dir/fifo-db: $dir/fifo-db/data.mdb is a FIFO" \
  --device cpu --data "$dir/fifo-db"

# A program whose every run fails: the doctor measured nothing and says so in its status.
status=0
"$stoker" doctor --device cpu --no-static --steps 1 --warmup 0 --sweep 4 -- false \
  > "$dir/fail_out.txt" 2> "$dir/fail_err.txt" || status=$?
[ "$status" = 1 ] || { echo "doctor with every run failed: status $status, not 1"; exit 1; }
grep -q "^2 of 2 runs failed: nothing was measured" "$dir/fail_out.txt" ||
  { echo "doctor with every run failed: no summary:"; cat "$dir/fail_out.txt"; exit 1; }
grep -q "^stoker: error: stoker doctor: every run failed (2 of 2)" "$dir/fail_err.txt" ||
  { echo "doctor with every run failed: no error:"; cat "$dir/fail_err.txt"; exit 1; }

# A damaged record in --data (tests/cli/damage_record.sh): --on-corrupt fail (the default)
# names its key; skip replaces it and says how many were skipped. 9 steps of 8 cover the epoch.
"$stoker" pack synth --out "$dir/bad" --samples 64 --classes 4 --size 32 --no-progress > /dev/null
sh "$(dirname "$0")/damage_record.sh" "$dir/bad" > /dev/null
bad_doctor() {
  "$stoker" doctor --device cpu --no-static --data "$dir/bad" --steps 8 --warmup 1 --batch 8 \
    --size 16 --width 16 --threads 1 --prefetch 2 --sweep 8 "$@"
}
status=0
bad_doctor > "$dir/bad_out.txt" 2> "$dir/bad_err.txt" || status=$?
[ "$status" = 1 ] || { echo "doctor on a damaged database: status $status, not 1"; exit 1; }
grep -q "^stoker: error: .*key 00000000[0-9][0-9]: bad magic" "$dir/bad_err.txt" ||
  { echo "doctor on a damaged database: no key named:"; cat "$dir/bad_err.txt"; exit 1; }
bad_doctor --on-corrupt skip > "$dir/bad_out.txt" 2> "$dir/bad_err.txt"
grep -q "^  --on-corrupt skip: [1-9][0-9]* bad samples of $dir/bad skipped" "$dir/bad_out.txt" ||
  { echo "doctor --on-corrupt skip: no skip count:"; cat "$dir/bad_out.txt"; exit 1; }
grep -q "== conclusions ==" "$dir/bad_out.txt"

"$stoker" doctor --device cpu --steps 3 --warmup 1 --batch 8 --size 16 --synth-images 32 \
  --synth-image-size 64 --width 16 --threads 1 --prefetch 2 --sweep 4,8 --gpus 2 --overhead \
  --repeats 1 --json "$dir/doctor.json" --trace "$dir/trace.json" \
  --save-baseline "$dir/card.json" --html "$dir/doctor.html" > "$dir/out.txt"
grep -q "== static checks ==" "$dir/out.txt"
grep -q "CPU: .* hardware threads" "$dir/out.txt"
grep -q "diag  verdict: " "$dir/out.txt"
grep -q "^  real data " "$dir/out.txt"
grep -q "^  synthetic data " "$dir/out.txt"
grep -q "^  batch 4 " "$dir/out.txt"
grep -q "^  2 ranks " "$dir/out.txt"
grep -q "^  (CUDA graph: needs a GPU, skipped)" "$dir/out.txt"
grep -q "== conclusions ==" "$dir/out.txt"
grep -q "the model itself (no input pipeline)" "$dir/out.txt"
grep -q "overhead [+-]" "$dir/out.txt"
grep -q '"conclusions"' "$dir/doctor.json"
grep -q '"overhead"' "$dir/doctor.json"
grep -q '"traceEvents"' "$dir/trace.json"
grep -q '"stoker_baseline_card"' "$dir/card.json"
# The page: the static checks, the real-data run's verdict and curves, the ablations.
grep -q "^html report: $dir/doctor.html" "$dir/out.txt"
for part in '<h2>Static checks</h2>' '<h2>Verdict</h2>' 'data-chart="step_time"' \
  '<h2>Ablations</h2>' '<td>synthetic data</td>' 'the model itself (no input pipeline)'; do
  grep -qF "$part" "$dir/doctor.html" || { echo "doctor --html: no '$part' in the page"; exit 1; }
done
# The user's program: {batch} is replaced by each size of the sweep.
"$stoker" doctor --device cpu --no-static --steps 2 --warmup 1 --sweep 4,8 -- \
  "$stoker" doctor --worker-json "$dir/worker.json" --device cpu --batch '{batch}' --size 16 \
  --width 16 --steps 2 --warmup 1 > "$dir/out2.txt"
grep -q "^  real data .* samples/s" "$dir/out2.txt"
grep -q "^  synthetic data .* samples/s" "$dir/out2.txt"
grep -q "^  batch 8 .* samples/s" "$dir/out2.txt"
grep -q "== conclusions ==" "$dir/out2.txt"
rm -rf "$dir"
echo "stoker doctor: ok"
