#!/bin/sh
# End-to-end check of `stoker doctor` on the CPU: static checks, the ablations on the bundled
# model (real vs synthetic data, sweep, 1 vs 2 ranks over TCP), the overhead measurement, the
# JSON file, and the user-program mode (stoker's own doctor worker stands in for a user's
# Trainer program). Usage: doctor_cli_test.sh STOKER_BINARY SCRATCH_DIR
set -eu
stoker="$1"
dir="$2"
rm -rf "$dir"
mkdir -p "$dir"
"$stoker" doctor --device cpu --steps 3 --warmup 1 --batch 8 --size 16 --synth-images 32 \
  --synth-image-size 64 --width 16 --threads 1 --prefetch 2 --sweep 4,8 --gpus 2 --overhead \
  --repeats 1 --json "$dir/doctor.json" --trace "$dir/trace.json" \
  --save-baseline "$dir/card.json" > "$dir/out.txt"
grep -q "== static checks ==" "$dir/out.txt"
grep -q "CPU: .* hardware threads" "$dir/out.txt"
grep -q "diag  verdict: " "$dir/out.txt"
grep -q "^  real data " "$dir/out.txt"
grep -q "^  synthetic data " "$dir/out.txt"
grep -q "^  batch 4 " "$dir/out.txt"
grep -q "^  2 ranks " "$dir/out.txt"
grep -q "== conclusions ==" "$dir/out.txt"
grep -q "the model itself (no input pipeline)" "$dir/out.txt"
grep -q "overhead [+-]" "$dir/out.txt"
grep -q '"conclusions"' "$dir/doctor.json"
grep -q '"overhead"' "$dir/doctor.json"
grep -q '"traceEvents"' "$dir/trace.json"
grep -q '"stoker_baseline_card"' "$dir/card.json"
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
