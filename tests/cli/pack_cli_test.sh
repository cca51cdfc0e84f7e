#!/bin/sh
# End-to-end check of the `stoker` tool: pack synth, pack a folder (with a bad file), info, and
# the error of a missing database. Usage: pack_cli_test.sh STOKER_BINARY SCRATCH_DIR
set -eu
stoker="$1"
dir="$2"
rm -rf "$dir"
mkdir -p "$dir"
"$stoker" pack synth --out "$dir/db" --samples 30 --classes 3 --size 16 --seed 2 --no-progress
"$stoker" info "$dir/db" | grep -q "30 samples, 3 classes"
"$stoker" pack synth --out "$dir/images" --samples 9 --classes 3 --size 24 --as-folder
printf 'junk' > "$dir/images/ring.txt"        # not in a class folder: ignored
printf 'junk' > "$dir/images/circle/bad.jpg"  # skipped and counted
"$stoker" pack "$dir/images" --out "$dir/db2" --resize 12 --shuffle -j 2 \
  > "$dir/out.txt" 2> "$dir/err.txt"
grep -q "packed 9 samples of 3 classes" "$dir/out.txt"
grep -q "1 skipped" "$dir/out.txt"
grep -q "skipped .*bad.jpg" "$dir/err.txt"
if "$stoker" info "$dir/missing" 2> "$dir/err2.txt"; then exit 1; fi
grep -q "stoker pack" "$dir/err2.txt"
if "$stoker" pack synth --out "$dir/db" --samples 3 2> /dev/null; then exit 1; fi  # exists
rm -rf "$dir"
echo "stoker CLI: ok"
