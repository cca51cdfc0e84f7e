#!/bin/sh
# End-to-end check of `stoker info FILE.safetensors [--verify]` on real files of a stoker_gpt
# run (checkpoints and --save weights): what they hold, an edited stoker.step (refused by the
# header checksum, naming the file), a damaged tensor (--verify names it, exit 1), a file that
# is not safetensors; and a run whose every file write fails (a file size limit, as a full disk)
# ends with an error naming each place the weights were tried, never a silent loss.
# Usage: info_checkpoint_cli_test.sh STOKER STOKER_GPT SCRATCH_DIR
set -eu
stoker="$1"
gpt="$2"
dir="$3"
rm -rf "$dir"
mkdir -p "$dir"
out="$dir/out.txt"
err="$dir/err.txt"

fail() {
  echo "FAIL: $*" >&2
  cat "$out" "$err" >&2
  exit 1
}
# Runs the command with stdout in $out and stderr in $err; fails unless its exit status is $1.
expect() {
  want="$1"
  shift
  set +e
  "$@" > "$out" 2> "$err"
  got=$?
  set -e
  [ "$got" -eq "$want" ] || fail "exit status $got, expected $want: $*"
}
has() { grep -q -- "$2" "$1" || fail "no '$2' in $1"; }

head -c 16384 /dev/zero > "$dir/tokens.u16"
gpt_run() {
  "$gpt" --device cpu --data "$dir/tokens.u16" --vocab 256 --steps 4 --sample 0 "$@"
}
expect 0 gpt_run --checkpoint-dir "$dir/ck" --checkpoint-interval 2 --save "$dir/w.safetensors"
ck="$dir/ck/step_2.safetensors"

# A checkpoint: position, run, tensors, checksums.
expect 0 "$stoker" info "$ck"
has "$out" "^$ck: stoker training checkpoint (checkpoint version 2), [0-9]* bytes"
has "$out" "^  position: step 2, epoch 0, batch 2 of the epoch, epoch progress [0-9]*"
has "$out" "^  run: world size 1, batch size per rank [0-9]*, seed [0-9]*, samples [0-9]*"
has "$out" "^  tensors: [0-9]*, [0-9]* bytes .*: model [0-9]* .* optim [0-9]*"
has "$out" "^  checksums: header checksum ok (metadata and tensor table); \([0-9]*\) of \1 tensors"
has "$out" "^checked: the header and its checksum; --verify also reads every tensor"
expect 0 "$stoker" info --verify "$dir/ck/last.safetensors"
has "$out" "position: step 4"
has "$out" "^verified: header checksum ok, [0-9]* tensors against their checksums (.* read): 0 bad"

# A weights file: tensors, dtypes, parameters.
expect 0 "$stoker" info "$dir/w.safetensors"
has "$out" "^$dir/w.safetensors: safetensors weights, [0-9]* bytes"
has "$out" "^  format: pt"
has "$out" "^  tensors: [0-9]*, [0-9]* bytes (.*); [0-9]* parameters; dtypes: [0-9]* F32"
# Told by its first bytes when the name does not say.
cp "$dir/w.safetensors" "$dir/weights.bin"
expect 0 "$stoker" info --verify "$dir/weights.bin"
has "$out" "safetensors weights"
has "$out" ": 0 bad"

# stoker.step edited to another valid number (one byte): refused, naming the file.
cp "$ck" "$dir/edited.safetensors"
at=$(grep -obUa '"stoker.step":"2"' "$dir/edited.safetensors" | head -n 1 | cut -d: -f1)
[ -n "$at" ] || fail "no stoker.step in $ck"
printf 3 | dd of="$dir/edited.safetensors" bs=1 seek=$((at + 15)) conv=notrunc 2> /dev/null
expect 1 "$stoker" info "$dir/edited.safetensors"
has "$err" "^stoker: error: $dir/edited.safetensors: the header fails its checksum (stored [0-9a-f]*, computed [0-9a-f]*): the file is damaged"
has "$err" "^  hint: "
expect 1 "$stoker" info --verify "$dir/edited.safetensors"
has "$err" "the header fails its checksum"

# A damaged tensor byte (the file's last tensor): the header is fine, --verify names the tensor.
cp "$ck" "$dir/damaged.safetensors"
size=$(wc -c < "$dir/damaged.safetensors")
printf 'Z' | dd of="$dir/damaged.safetensors" bs=1 seek=$((size - 2)) conv=notrunc 2> /dev/null
expect 0 "$stoker" info "$dir/damaged.safetensors"
expect 1 "$stoker" info --verify "$dir/damaged.safetensors"
has "$out" "^bad tensors:"
has "$out" "^  [a-z]*\..*: fails its checksum (stored [0-9a-f]*, computed [0-9a-f]*)"
has "$err" "^stoker: error: $dir/damaged.safetensors is damaged: 1 of [0-9]* tensors fail their checksums"
has "$err" "^  hint: resume from an earlier checkpoint"

# Not safetensors at all, or cut short.
echo "not a checkpoint" > "$dir/junk.safetensors"
expect 1 "$stoker" info "$dir/junk.safetensors"
has "$err" "^stoker: error: $dir/junk.safetensors"
head -c 100 "$ck" > "$dir/cut.safetensors"
expect 1 "$stoker" info --verify "$dir/cut.safetensors"
has "$err" "^stoker: error: $dir/cut.safetensors: header length [0-9]* runs beyond the end of the file"

# Every file write fails past 16 KB (a full disk, everywhere): the run trains, then the error
# names --save and every place the weights were tried; exit status 1, nothing half-written.
mkdir -p "$dir/full" "$dir/full-tmp"
set +e
(
  cd "$dir/full" && ulimit -f 32 && trap '' XFSZ &&
    TMPDIR="$dir/full-tmp" exec "$gpt" --device cpu --data "$dir/tokens.u16" --vocab 256 \
      --steps 2 --sample 0 --save "$dir/full/w.safetensors"
) > "$out" 2> "$err"
got=$?
set -e
[ "$got" -eq 1 ] || fail "exit status $got under a file size limit, expected 1"
has "$err" "^stoker_gpt: error: --save $dir/full/w.safetensors could not be written (writing .* failed: File too large), nor any of the places tried instead:"
has "$err" "$dir/full-tmp/w.unsaved-"
left="$(ls -A "$dir/full")$(ls -A "$dir/full-tmp")"
[ -z "$left" ] || fail "files left behind: $left"
echo "info_checkpoint_cli_test: ok"
