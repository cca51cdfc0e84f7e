#!/bin/sh
# End-to-end check of `stoker info` and `stoker info --verify`: a good database, one with
# damaged records (bytes flipped inside stored JPEGs, as a bad disk or copy would), and one
# whose data.mdb is cut short (an error naming the file, never a SIGBUS), and ones with a damaged
# LMDB page header (a leaf's, the root's: errors naming "damaged page", never a signal).
# Usage: info_cli_test.sh STOKER_BINARY SCRATCH_DIR
set -eu
stoker="$1"
dir="$2"
rm -rf "$dir"
mkdir -p "$dir"

# Runs the command with stdout in $dir/out.txt and stderr in $dir/err.txt; fails unless its exit
# status is $1 (a signal would be 128 + its number, e.g. 135 for SIGBUS).
expect() {
  want="$1"
  shift
  set +e
  "$@" > "$dir/out.txt" 2> "$dir/err.txt"
  got=$?
  set -e
  if [ "$got" -ne "$want" ]; then
    echo "exit status $got, expected $want: $*" >&2
    cat "$dir/out.txt" "$dir/err.txt" >&2
    exit 1
  fi
}

# Stored bytes equal the generated files (--no-restart-markers), so a file's bytes can be found
# in data.mdb: sample i is $dir/images/<class>/<i, 8 digits>.jpg.
synth="--samples 40 --classes 2 --size 48 --seed 3"
"$stoker" pack synth --out "$dir/db" $synth --no-restart-markers --no-progress -j 1 > /dev/null
"$stoker" pack synth --out "$dir/images" $synth --as-folder > /dev/null

expect 0 "$stoker" info "$dir/db"
grep -q "40 samples, 2 classes" "$dir/out.txt"
grep -q "^records: 40 of version 2 (record checksum)" "$dir/out.txt"
grep -q "^payload: [0-9]* bytes .*; data.mdb: [0-9]* bytes" "$dir/out.txt"
grep -q "^checked 40 records (headers and lengths; --verify also checks .*): 0 bad" "$dir/out.txt"
expect 0 "$stoker" info --verify "$dir/db"
grep -q "^verified 40 records (headers, lengths, record checksums, JPEG headers): 0 bad" \
  "$dir/out.txt"

# Flips one bit in the entropy-coded data of sample $2's JPEG inside database $1, in the record
# and in any stale copy of it that LMDB left in freed pages.
damage() {
  file=$(ls "$dir"/images/*/"$(printf %08d "$2")".jpg)
  size=$(wc -c < "$file")
  # A 32-byte piece of the JPEG's last quarter (past the tables every image shares) without
  # newline or NUL bytes (grep -F matches it as one line).
  skip=$((size * 3 / 4))
  while :; do
    [ "$skip" -lt "$((size - 32))" ]
    dd if="$file" of="$dir/piece" bs=1 skip="$skip" count=32 2> /dev/null
    skip=$((skip + 1))
    [ "$(tr -d '\n\000' < "$dir/piece" | wc -c)" -eq 32 ] && break
  done
  found=0
  for at in $(LC_ALL=C grep -obUaF -f "$dir/piece" "$1/data.mdb" | cut -d: -f1); do
    at=$((at + 16))
    byte=$(od -An -tu1 -j "$at" -N 1 "$1/data.mdb" | tr -d ' ')
    printf "\\$(printf %o $((byte ^ 1)))" | dd of="$1/data.mdb" bs=1 seek="$at" conv=notrunc \
      2> /dev/null
    found=$((found + 1))
  done
  [ "$found" -gt 0 ]
}

cp -r "$dir/db" "$dir/damaged"
damage "$dir/damaged" 7
# The header scan does not read payloads: nothing to see without --verify.
expect 0 "$stoker" info "$dir/damaged"
expect 1 "$stoker" info --verify "$dir/damaged"
grep -q "^verified 40 records .*: 1 bad" "$dir/out.txt"
grep -q "^  0000000007: record checksum mismatch (stored [0-9a-f]*, computed [0-9a-f]*)" \
  "$dir/out.txt"
grep -q "1 of 40 records of $dir/damaged are bad" "$dir/err.txt"
grep -q "hint: .*--on-corrupt skip" "$dir/err.txt"

# More bad records than the listing shows: the first 20, then a count.
cp -r "$dir/db" "$dir/many"
i=3
while [ "$i" -lt 28 ]; do
  damage "$dir/many" "$i"
  i=$((i + 1))
done
expect 1 "$stoker" info --verify "$dir/many"
grep -q ": 25 bad" "$dir/out.txt"
[ "$(grep -c "^  [0-9]\{10\}: record checksum mismatch" "$dir/out.txt")" -eq 20 ]
grep -q "^  0000000003: " "$dir/out.txt"
grep -q "^  and 5 more" "$dir/out.txt"

# data.mdb cut to 90 % of its size: exit status 1 (not 135, SIGBUS) and the file named.
cp -r "$dir/db" "$dir/cut"
size=$(wc -c < "$dir/db/data.mdb")
dd if="$dir/db/data.mdb" of="$dir/cut/data.mdb" bs="$((size * 9 / 10))" count=1 2> /dev/null
for flag in "" --verify; do
  expect 1 "$stoker" info $flag "$dir/cut"
  grep -q "$dir/cut/data.mdb is truncated" "$dir/err.txt"
  grep -q "hint: the file is truncated or damaged: copy it again or re-pack it" "$dir/err.txt"
done
# ... and to a few KiB (less than LMDB's meta pages), and to nothing.
for keep in 4096 0; do
  head -c "$keep" "$dir/db/data.mdb" > "$dir/cut/data.mdb"
  expect 1 "$stoker" info "$dir/cut"
  grep -q "$dir/cut/data.mdb ($keep bytes) is truncated or damaged" "$dir/err.txt"
done

# Bad case: one damaged byte in the header of a live LMDB page (here a node count, cleared) ended
# `stoker info` and `info --verify` with SIGSEGV/SIGBUS inside mdb_get. The damaged page is
# found by walking the tree: the newest meta page (0 or 1) names the root, whose first node names
# the first leaf (LMDB's page layout: tests/data/lmdb_pages.h).
u16() { od -An -tu2 -j "$2" -N 2 "$1" | tr -d ' '; }
u64() { od -An -tu8 -j "$2" -N 8 "$1" | tr -d ' '; }
zero() { printf '\000\000' | dd of="$1" bs=1 seek="$2" conv=notrunc 2> /dev/null; }
mdb="$dir/db/data.mdb"
psize=$(od -An -tu4 -j 40 -N 4 "$mdb" | tr -d ' ')
meta=0
[ "$(u64 "$mdb" $((psize + 144)))" -gt "$(u64 "$mdb" 144)" ] && meta=$psize
root=$(($(u64 "$mdb" $((meta + 128))) * psize))
[ $(($(u16 "$mdb" $((root + 10))) & 1)) -eq 1 ] || { echo "the root is not a branch page" >&2; exit 1; }
node=$((root + $(u16 "$mdb" $((root + 16)))))
lo=$(u16 "$mdb" "$node")
hi=$(u16 "$mdb" $((node + 2)))
leaf=$(((lo + 65536 * hi) * psize))
cp -r "$dir/db" "$dir/leaf"
zero "$dir/leaf/data.mdb" $((leaf + 12))
for flag in "" --verify; do
  expect 1 "$stoker" info $flag "$dir/leaf"
  grep -q "^  0000000000: damaged page in data.mdb (SIG" "$dir/out.txt"
  grep -q "of 40 records of $dir/leaf are bad" "$dir/err.txt"
done
# The root's node count cleared: the open names the damage, not "not written by stoker pack".
cp -r "$dir/db" "$dir/root"
zero "$dir/root/data.mdb" $((root + 12))
for flag in "" --verify; do
  expect 1 "$stoker" info $flag "$dir/root"
  grep -q "stoker: error: $dir/root: damaged page: data.mdb cannot be read at key __stoker__/format" \
    "$dir/err.txt"
  grep -q "hint: the file is truncated or damaged: copy it again or re-pack it" "$dir/err.txt"
done

# A FIFO is named without being opened (no writer: opening it would block); a file of no known
# kind is named for the formats it is not, not as "not an LMDB folder".
mkfifo "$dir/pipe"
expect 1 timeout 20 "$stoker" info "$dir/pipe"
grep -q "FIFO" "$dir/err.txt"
printf 'hello, not a dataset\n' > "$dir/notes.txt"
expect 1 "$stoker" info "$dir/notes.txt"
grep -q "not a Megatron dataset" "$dir/err.txt"
grep -q "hint: if it holds raw token ids, give their width: --token-bytes" "$dir/err.txt"

rm -rf "$dir"
echo "stoker info: ok"
