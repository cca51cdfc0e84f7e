#!/bin/sh
# End-to-end check of the `stoker` tool: pack synth, pack a folder (with a bad file), info, and
# the error of a missing database; then the packer's edges: header bombs under a memory limit,
# FIFOs, directories and link loops as inputs, bad first bytes, label checks (--classes),
# Exif orientation, leftovers of killed packs, SIGTERM mid-pack, --out onto an input and
# --overwrite onto what is not a database, 3 GiB files judged unread, and out-of-range flag
# values.
# Usage: pack_cli_test.sh STOKER_BINARY SCRATCH_DIR
set -eu
stoker="$1"
dir="$2"
rm -rf "$dir"
mkdir -p "$dir"
fail() {
  echo "pack_cli_test: FAILED: $*" >&2
  exit 1
}
# A hang is a failure, not a stuck CI job.
limited() {
  if command -v timeout > /dev/null 2>&1; then timeout 120 "$@"; else "$@"; fi
}
no_leftovers() {
  if ls -d "$dir"/*.tmp-* > /dev/null 2>&1; then fail "temporary folder left: $(ls -d "$dir"/*.tmp-*)"; fi
}

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
rm -f "$dir/images/circle/bad.jpg" "$dir/images/ring.txt"
good="$dir/images/circle/00000000.jpg"

# Header bomb: a small JPEG whose SOF0 claims 60000 x 60000 (3.6e9 pixels, 10.8 GB of RGB).
mkdir -p "$dir/bomb/c"
cp "$good" "$dir/bomb/c/good.jpg"
cp "$good" "$dir/bomb/c/bomb.jpg"
sof=$(od -An -tx1 -v "$good" | tr -s ' \n' '  ' | awk '{
  for (i = 1; i < NF; i++) if ($i == "ff" && $(i + 1) == "c0") { print i - 1; exit } }')
[ -n "$sof" ] || fail "no SOF0 in $good"
printf '\352\140\352\140' | dd of="$dir/bomb/c/bomb.jpg" bs=1 seek=$((sof + 5)) conv=notrunc 2> /dev/null
# Under a 2 GiB address-space limit where the shell allows one and the binary runs under it (a
# sanitizer build reserves terabytes of shadow memory: no limit there).
memlimit=""
if (ulimit -v 2097152 && "$stoker" --help > /dev/null 2>&1) 2> /dev/null; then memlimit=2097152; fi
run_limited() {
  if [ -n "$memlimit" ]; then (ulimit -v "$memlimit" && limited "$@"); else limited "$@"; fi
}
run_limited "$stoker" pack "$dir/bomb" --out "$dir/db_bomb" --no-progress > "$dir/out.txt" 2> "$dir/err.txt" ||
  fail "header bomb: $(cat "$dir/err.txt")"
grep -q "packed 1 samples" "$dir/out.txt"
grep -q "skipped .*bomb.jpg: header claims 60000x60000 = 3.6e9 pixels, over the budget of 268435456" "$dir/err.txt" ||
  fail "header bomb message: $(cat "$dir/err.txt")"
grep -q "raise --max-pixels" "$dir/err.txt"
# With the budget raised past it, the allocation fails under the limit: a skip naming the file.
if [ -n "$memlimit" ]; then
  run_limited "$stoker" pack "$dir/bomb" --out "$dir/db_bomb2" --no-progress --max-pixels 4294836225 \
    > "$dir/out.txt" 2> "$dir/err.txt" || fail "out of memory on one input ended the pack: $(cat "$dir/err.txt")"
  grep -q "skipped .*bomb.jpg: out of memory while packing it" "$dir/err.txt" ||
    fail "out of memory message: $(cat "$dir/err.txt")"
else
  echo "pack_cli_test: no address-space limit here: the out-of-memory skip is not tested" >&2
fi

# Not regular files: a FIFO (opening it would block forever), a directory entry of a list, a
# dangling link, a link loop, a link to the parent folder.
mkdir -p "$dir/odd/c"
cp "$good" "$dir/odd/c/good.jpg"
mkfifo "$dir/odd/c/pipe.jpg"
ln -s nowhere.jpg "$dir/odd/c/dangling.jpg"
ln -s loop_b "$dir/odd/c/loop_a"
ln -s loop_a "$dir/odd/c/loop_b"
ln -s .. "$dir/odd/c/up"
limited "$stoker" pack "$dir/odd" --out "$dir/db_odd" --no-progress > "$dir/out.txt" 2> "$dir/err.txt" ||
  fail "odd inputs: $(cat "$dir/err.txt")"
grep -q "packed 1 samples" "$dir/out.txt"
grep -q "skipped .*pipe.jpg: not a regular file (a FIFO)" "$dir/err.txt"
grep -q "skipped .*dangling.jpg: dangling symbolic link" "$dir/err.txt"
grep -q "skipped .*loop_a: symbolic link loop" "$dir/err.txt"
grep -q "skipped .*up: not a regular file (a symbolic link to a directory)" "$dir/err.txt"
printf 'odd/c/good.jpg 0\nodd 0\nodd/c/pipe.jpg 0\n' > "$dir/list.txt"
limited "$stoker" pack "$dir/list.txt" --out "$dir/db_list" --no-progress > "$dir/out.txt" 2> "$dir/err.txt" ||
  fail "list with a directory: $(cat "$dir/err.txt")"
grep -q "skipped .*odd: not a regular file (a directory)" "$dir/err.txt"
grep -q "skipped .*pipe.jpg: not a regular file (a FIFO)" "$dir/err.txt"
if limited "$stoker" pack "$dir/odd/c/pipe.jpg" --out "$dir/db_pipe" 2> "$dir/err.txt"; then
  fail "a FIFO was read as a list file"
fi
grep -q "not a regular file (a FIFO)" "$dir/err.txt"
no_leftovers

# What is wrong with the first bytes, said as it is.
mkdir -p "$dir/starts/c"
cp "$good" "$dir/starts/c/good.jpg"
: > "$dir/starts/c/empty.jpg"
printf '\377\330' > "$dir/starts/c/soi.jpg"
printf '\377\330\022\064' > "$dir/starts/c/garbage.jpg"
"$stoker" pack "$dir/starts" --out "$dir/db_starts" --no-progress > /dev/null 2> "$dir/err.txt"
grep -q "empty.jpg: empty file (0 bytes)" "$dir/err.txt"
grep -q "soi.jpg: JPEG ends right after its start-of-image marker (truncated)" "$dir/err.txt"
grep -q "garbage.jpg: garbage after the start-of-image marker: expected a marker (FF xx) at byte 2, found 0x12" "$dir/err.txt"

# Labels: --classes bounds them; a typo that makes a million classes is an error; sparse labels
# warn.
printf 'images/circle/00000000.jpg 0\nimages/square/00000001.jpg 5\n' > "$dir/labels.txt"
if "$stoker" pack "$dir/labels.txt" --out "$dir/db_l" --classes 5 2> "$dir/err.txt"; then
  fail "label 5 accepted with --classes 5"
fi
grep -q "labels.txt:2: label 5 is not below --classes 5" "$dir/err.txt"
"$stoker" pack "$dir/labels.txt" --out "$dir/db_l" --classes 6 --no-progress > "$dir/out.txt"
grep -q "packed 2 samples of 6 classes" "$dir/out.txt"
printf 'images/circle/00000000.jpg 0\nimages/square/00000001.jpg 1000000\n' > "$dir/typo.txt"
if "$stoker" pack "$dir/typo.txt" --out "$dir/db_t" 2> "$dir/err.txt"; then
  fail "a 1000001-class dataset from 2 labels"
fi
grep -q "grossly sparse" "$dir/err.txt"
grep -q "1000000 (1 sample: line 2)" "$dir/err.txt"
grep -q -- "--classes N" "$dir/err.txt"
printf 'images/circle/00000000.jpg 0\nimages/square/00000001.jpg 20\n' > "$dir/sparse.txt"
"$stoker" pack "$dir/sparse.txt" --out "$dir/db_s" --no-progress > "$dir/out.txt" 2> "$dir/err.txt"
grep -q "packed 2 samples of 21 classes" "$dir/out.txt"
grep -q "warning: .*the labels are sparse" "$dir/err.txt"

# Exif orientation 6 (little-endian TIFF) spliced after SOI: applied only when asked.
mkdir -p "$dir/exif/c"
{ printf '\377\330\377\341\000\042Exif\000\000II\052\000\010\000\000\000\001\000'
  printf '\022\001\003\000\001\000\000\000\006\000\000\000\000\000\000\000'
  tail -c +3 "$good"; } > "$dir/exif/c/rotated.jpg"
"$stoker" pack "$dir/exif" --out "$dir/db_e1" --no-progress > "$dir/out.txt"
if grep -q "Exif orientation" "$dir/out.txt"; then fail "Exif applied without the flag"; fi
"$stoker" pack "$dir/exif" --out "$dir/db_e2" --apply-exif-orientation --no-progress > "$dir/out.txt"
grep -q "Exif orientation: 1 re-encoded upright, 0 unreadable" "$dir/out.txt"

# A killed pack's leftover (its process is gone) is removed by the next pack to that output.
sh -c 'exit 0' &
dead=$!
wait "$dead" || true
mkdir -p "$dir/db_left.tmp-$dead"
"$stoker" pack "$dir/images" --out "$dir/db_left" --no-progress > /dev/null 2> "$dir/err.txt"
grep -q "removed a leftover of an interrupted pack: .*db_left.tmp-$dead" "$dir/err.txt"
[ ! -e "$dir/db_left.tmp-$dead" ] || fail "leftover of dead process $dead not removed"

# SIGTERM mid-pack: stops after the chunk, removes its temporary folder, writes nothing, 143.
"$stoker" pack synth --out "$dir/many" --samples 4000 --size 128 --as-folder > /dev/null
"$stoker" pack "$dir/many" --out "$dir/db_term" -j 1 --resize 64 --no-progress \
  > "$dir/out.txt" 2> "$dir/err.txt" &
pid=$!
i=0
while [ $i -lt 1000 ] && ! ls -d "$dir"/db_term.tmp-* > /dev/null 2>&1; do
  sleep 0.01 2> /dev/null || sleep 1
  i=$((i + 1))
done
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
[ "$status" -eq 143 ] || fail "SIGTERM: exit status $status, expected 143: $(cat "$dir/err.txt")"
grep -q "interrupted by SIGTERM: nothing written to" "$dir/err.txt"
[ ! -e "$dir/db_term" ] || fail "SIGTERM: output written"
no_leftovers
rm -rf "$dir/many"

# Bad case: `stoker pack photos --out photos --overwrite` deleted the photos (exit 0), and
# --overwrite deleted whatever was at --out. Now --out is never an input, nor inside nor around
# one, and --overwrite replaces only a database written by `stoker pack`; each refusal names the
# path, exits 1 and removes nothing.
count_files() { find "$1" -type f | wc -l; }
photos_before=$(count_files "$dir/images")
for out in "$dir/images" "$dir/images/" "$dir/images/circle" "$dir"; do
  if "$stoker" pack "$dir/images" --out "$out" --overwrite --no-progress > /dev/null 2> "$dir/err.txt"; then
    fail "--out $out accepted for input $dir/images"
  fi
  grep -q "stoker: error: stoker pack: --out $out \(is\|is inside\|contains\) the input folder" "$dir/err.txt" ||
    fail "--out $out: $(cat "$dir/err.txt")"
  grep -q "hint: choose an --out outside the inputs" "$dir/err.txt"
done
[ "$(count_files "$dir/images")" -eq "$photos_before" ] || fail "--out onto the input removed files"
# The list file itself as --out.
if "$stoker" pack "$dir/labels.txt" --out "$dir/labels.txt" --overwrite --classes 6 2> "$dir/err.txt"; then
  fail "--out onto the list file accepted"
fi
grep -q "is the list file $dir/labels.txt" "$dir/err.txt"
[ -s "$dir/labels.txt" ] || fail "the list file was removed"
# --overwrite onto a folder that is not a stoker database, and onto a file.
mkdir -p "$dir/project/src"
echo keep > "$dir/project/src/main.c"
echo keep > "$dir/notes.txt"
for out in "$dir/project" "$dir/notes.txt"; do
  if "$stoker" pack synth --out "$out" --samples 4 --overwrite 2> "$dir/err.txt"; then
    fail "--overwrite replaced $out"
  fi
  grep -q "\-\-overwrite replaces only a database written by .stoker pack., and --out $out is" "$dir/err.txt" ||
    fail "--overwrite $out: $(cat "$dir/err.txt")"
done
grep -q "is a regular file" "$dir/err.txt"
[ -f "$dir/project/src/main.c" ] && [ -f "$dir/notes.txt" ] || fail "--overwrite removed a non-database"
# A stoker database is replaced.
"$stoker" pack synth --out "$dir/db" --samples 5 --overwrite --no-progress > /dev/null
"$stoker" info "$dir/db" | grep -q "5 samples"

# Weak case: a 3 GiB sparse .jpg was read whole (seconds, gigabytes of memory) before its first
# bytes were looked at. Under the 2 GiB limit reading either file whole fails ("out of memory");
# both are judged unread from their first bytes and size.
mkdir -p "$dir/huge/c"
cp "$good" "$dir/huge/c/good.jpg"
: > "$dir/huge/c/zeros.jpg"
truncate -s 3G "$dir/huge/c/zeros.jpg" 2> /dev/null || dd if=/dev/null of="$dir/huge/c/zeros.jpg" bs=1 seek=3221225472 2> /dev/null
cp "$good" "$dir/huge/c/padded.jpg"
truncate -s 3G "$dir/huge/c/padded.jpg" 2> /dev/null || dd if=/dev/null of="$dir/huge/c/padded.jpg" bs=1 seek=3221225472 2> /dev/null
run_limited "$stoker" pack "$dir/huge" --out "$dir/db_huge" --no-progress > "$dir/out.txt" 2> "$dir/err.txt" ||
  fail "huge files: $(cat "$dir/err.txt")"
grep -q "packed 1 samples" "$dir/out.txt" || fail "huge files: $(cat "$dir/out.txt")"
grep -q "skipped .*zeros.jpg: not a JPEG: starts with 00 00 00 00" "$dir/err.txt" ||
  fail "zeros.jpg: $(cat "$dir/err.txt")"
grep -q "skipped .*padded.jpg: file of 3221225472 bytes is larger than a 24x24 JPEG can be" "$dir/err.txt" ||
  fail "padded.jpg: $(cat "$dir/err.txt")"
rm -rf "$dir/huge" "$dir/db_huge"

# Out-of-range values are refused by the CLI, naming the flag and the valid range.
refused() {
  flag="$1"
  shift
  if "$stoker" "$@" > /dev/null 2> "$dir/err.txt"; then fail "accepted: $*"; fi
  grep -q -- "$flag.*not in range" "$dir/err.txt" || fail "$*: $(cat "$dir/err.txt")"
}
refused --threads pack "$dir/images" --out "$dir/db_v" -j -1
refused --resize pack "$dir/images" --out "$dir/db_v" --resize -5
refused --map-size pack "$dir/images" --out "$dir/db_v" --map-size 0
refused --max-pixels pack "$dir/images" --out "$dir/db_v" --max-pixels 0
refused --classes pack "$dir/labels.txt" --out "$dir/db_v" --classes -1
refused --samples pack synth --out "$dir/db_v" --samples 0
refused --classes pack synth --out "$dir/db_v" --classes 0
refused --size pack synth --out "$dir/db_v" --size 0
refused --threads pack synth --out "$dir/db_v" -j -2
[ ! -e "$dir/db_v" ] || fail "a refused command wrote its output"

rm -rf "$dir"
echo "stoker CLI: ok"
