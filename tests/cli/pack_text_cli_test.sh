#!/bin/sh
# End-to-end check of `stoker pack-text`: the bundled text packed with a trained tokenizer and
# read back by a reader written from Megatron's specification (tests/data/check_megatron_pack.py,
# numpy; with Python's sentencepiece the ids are compared with its encoding); the same bytes
# with -j 1 and -j 4; SIGTERM mid-pack (exit 143, nothing written) and kill -9 (a temporary
# folder only, removed by the next pack); bad inputs: FIFO (no hang), empty file, invalid UTF-8,
# a JSON line that is not JSON or lacks the field, --out onto an input, an existing --out, a
# vocabulary the text cannot fill.
# Usage: pack_text_cli_test.sh STOKER_BINARY SOURCE_DIR SCRATCH_DIR
set -eu
stoker="$1"
src="$2"
dir="$3"
rm -rf "$dir"
mkdir -p "$dir"
kjv="$src/examples/gpt/data/kjv-genesis-exodus.txt"
check="$src/tests/data/check_megatron_pack.py"
fail() {
  echo "pack_text_cli_test: FAILED: $*" >&2
  exit 1
}
limited() {
  if command -v timeout > /dev/null 2>&1; then timeout 120 "$@"; else "$@"; fi
}
no_leftovers() {
  if ls -d "$dir"/*.tmp-* > /dev/null 2>&1; then fail "temporary folder left: $(ls -d "$dir"/*.tmp-*)"; fi
}
# expect_error STATUS PATTERN COMMAND...: fails unless COMMAND exits STATUS with PATTERN on stderr.
expect_error() {
  want="$1"
  pattern="$2"
  shift 2
  status=0
  limited "$@" > "$dir/out.txt" 2> "$dir/err.txt" || status=$?
  [ "$status" -eq "$want" ] || fail "$*: exit status $status, expected $want: $(cat "$dir/err.txt")"
  grep -q -- "$pattern" "$dir/err.txt" || fail "$*: no '$pattern' in: $(cat "$dir/err.txt")"
}

# The demo corpus.
"$stoker" pack-text "$kjv" --out "$dir/kjv" --train-tokenizer --vocab-size 2000 -j 2 \
  --no-progress > "$dir/out.txt"
grep -q "packed 180 documents" "$dir/out.txt" || fail "kjv: $(cat "$dir/out.txt")"
[ "$(ls "$dir/kjv" | tr '\n' ' ')" = "tokenizer.model tokens.bin tokens.idx tokens.manifest.json " ] ||
  fail "kjv holds: $(ls "$dir/kjv")"
# stoker's own reader (TokenCorpus) takes it too, every id below the vocabulary.
"$stoker" info "$dir/kjv/tokens.idx" --verify --vocab 2000 > "$dir/out.txt" ||
  fail "stoker info: $(cat "$dir/out.txt")"
grep -q "documents: 180" "$dir/out.txt" || fail "stoker info: $(cat "$dir/out.txt")"
# --verify checks the manifest's checksums: all match here; one changed byte of tokens.bin (an
# id still below the vocabulary, so only the checksum can tell) is named, exit 1.
grep -q "checksums: every file of $dir/kjv/tokens.manifest.json matches" "$dir/out.txt" ||
  fail "stoker info --verify: $(cat "$dir/out.txt")"
mkdir "$dir/changed"
cp "$dir/kjv/"* "$dir/changed/"
printf '\001' | dd of="$dir/changed/tokens.bin" bs=1 seek=1000 conv=notrunc 2> /dev/null
expect_error 1 "tokens.bin: .* the manifest says" "$stoker" info "$dir/changed/tokens.idx" --verify
grep -q "do not match the manifest" "$dir/err.txt" || fail "no summary: $(cat "$dir/err.txt")"
"$stoker" info "$dir/changed/tokens.idx" > /dev/null ||
  fail "info without --verify reads the changed (still valid) dataset"
py=$(command -v python3 || true)
if [ -n "$py" ] && "$py" -c "import numpy" 2> /dev/null; then
  "$py" "$check" "$dir/kjv/tokens" "$dir/kjv/tokenizer.model" "$kjv" || fail "Megatron reader"
  # The reader does fail on a damaged pack (one id changed).
  mkdir "$dir/damaged"
  cp "$dir/kjv/"* "$dir/damaged/"
  printf '\377' | dd of="$dir/damaged/tokens.bin" bs=1 seek=1001 conv=notrunc 2> /dev/null
  if "$py" "$check" "$dir/damaged/tokens" "$dir/damaged/tokenizer.model" "$kjv" > /dev/null; then
    "$py" -c "import sentencepiece" 2> /dev/null && fail "the reader missed a changed id"
  fi
else
  echo "pack_text_cli_test: numpy not installed: Megatron reader skipped" >&2
fi

# The same bytes whatever the thread count.
"$stoker" pack-text "$kjv" --out "$dir/j1" --train-tokenizer --vocab-size 800 --split line -j 1 \
  --no-progress > /dev/null
"$stoker" pack-text "$kjv" --out "$dir/j4" --train-tokenizer --vocab-size 800 --split line -j 4 \
  --no-progress > /dev/null 2> "$dir/err.txt"
for f in tokens.bin tokens.idx tokenizer.model tokens.manifest.json; do
  cmp "$dir/j1/$f" "$dir/j4/$f" || fail "-j 1 and -j 4 differ in $f"
done
[ ! -s "$dir/err.txt" ] || fail "-j 4 printed: $(cat "$dir/err.txt")"

# A big input for the interruptions: the text 40 times (15 MB).
i=0
while [ $i -lt 40 ]; do cat "$kjv"; i=$((i + 1)); done > "$dir/big.txt"
cp "$dir/kjv/tokenizer.model" "$dir/kjv.model"
model="$dir/kjv.model"
wait_for_tmp() {
  i=0
  while [ $i -lt 1000 ] && ! ls "$dir/$1".tmp-*/tokens.bin > /dev/null 2>&1; do
    sleep 0.01 2> /dev/null || sleep 1
    i=$((i + 1))
  done
}
# SIGTERM mid-pack: exit 143, the temporary folder removed, nothing at --out.
"$stoker" pack-text "$dir/big.txt" --out "$dir/term" --tokenizer "$model" --split line -j 1 \
  --no-progress > "$dir/out.txt" 2> "$dir/err.txt" &
pid=$!
wait_for_tmp term
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
[ "$status" -eq 143 ] || fail "SIGTERM: exit status $status, expected 143: $(cat "$dir/err.txt")"
grep -q "interrupted by SIGTERM: nothing written to" "$dir/err.txt"
[ ! -e "$dir/term" ] || fail "SIGTERM: output written"
no_leftovers
# kill -9: only "<out>.tmp-PID" remains (no manifest: not a pack), and the next pack removes it.
"$stoker" pack-text "$dir/big.txt" --out "$dir/killed" --tokenizer "$model" --split line -j 1 \
  --no-progress > /dev/null 2>&1 &
pid=$!
wait_for_tmp killed
kill -KILL "$pid"
wait "$pid" || true
[ ! -e "$dir/killed" ] || fail "kill -9: output written"
[ -d "$dir/killed.tmp-$pid" ] || fail "kill -9: no temporary folder"
[ ! -e "$dir/killed.tmp-$pid/tokens.manifest.json" ] || fail "kill -9: a manifest in the leftover"
"$stoker" pack-text "$kjv" --out "$dir/killed" --tokenizer "$model" --no-progress \
  > /dev/null 2> "$dir/err.txt"
grep -q "removed a leftover of an interrupted pack: .*killed.tmp-$pid" "$dir/err.txt" ||
  fail "leftover: $(cat "$dir/err.txt")"
no_leftovers
rm -f "$dir/big.txt"

# Bad inputs: clear errors, exit 1, nothing written.
mkfifo "$dir/fifo"
expect_error 1 "not a regular file\|FIFO\|fifo" "$stoker" pack-text "$dir/fifo" --out "$dir/o" \
  --tokenizer "$model"
: > "$dir/empty.txt"
expect_error 1 "empty.txt is empty" "$stoker" pack-text "$dir/empty.txt" --out "$dir/o" \
  --tokenizer "$model"
printf 'good text\n\ncaf\351 latin-1\n' > "$dir/latin1.txt"
expect_error 1 "latin1.txt:3: invalid UTF-8" "$stoker" pack-text "$dir/latin1.txt" --out "$dir/o" \
  --tokenizer "$model"
grep -q "hint: .*--skip-bad-documents" "$dir/err.txt"
"$stoker" pack-text "$dir/latin1.txt" --out "$dir/skipped" --tokenizer "$model" \
  --skip-bad-documents --no-progress > "$dir/out.txt" 2> "$dir/err.txt"
grep -q "packed 1 documents" "$dir/out.txt"
grep -q "1 bad documents" "$dir/out.txt"
grep -q "skipped .*latin1.txt:3" "$dir/err.txt"
printf '{"text": "a"}\n{"text": "b"\n' > "$dir/cut.jsonl"
expect_error 1 "cut.jsonl:2: not JSON" "$stoker" pack-text "$dir/cut.jsonl" --out "$dir/o" \
  --tokenizer "$model"
printf '{"body": "a"}\n' > "$dir/key.jsonl"
expect_error 1 "key.jsonl:1: has no \"text\" field" "$stoker" pack-text "$dir/key.jsonl" \
  --out "$dir/o" --tokenizer "$model"
grep -q "hint: .*--text-key" "$dir/err.txt"
"$stoker" pack-text "$dir/key.jsonl" --out "$dir/keyed" --tokenizer "$model" --text-key body \
  --no-progress | grep -q "packed 1 documents"
expect_error 1 "--out" "$stoker" pack-text "$dir/latin1.txt" --out "$dir/latin1.txt" \
  --tokenizer "$model" --overwrite
expect_error 1 "--out" "$stoker" pack-text "$dir/latin1.txt" --out "$dir" --tokenizer "$model" \
  --overwrite
[ -s "$dir/latin1.txt" ] || fail "an input was touched"
expect_error 1 "already exists" "$stoker" pack-text "$kjv" --out "$dir/kjv" --tokenizer "$model"
grep -q "hint: pass --overwrite" "$dir/err.txt"
expect_error 1 "was not written by stoker pack-text" "$stoker" pack-text "$kjv" --out "$src/tests" \
  --tokenizer "$model" --overwrite
printf 'a few words\n' > "$dir/small.txt"
expect_error 1 "smaller --vocab-size" "$stoker" pack-text "$dir/small.txt" --out "$dir/o" \
  --train-tokenizer --vocab-size 4000
expect_error 1 "no tokenizer" "$stoker" pack-text "$dir/small.txt" --out "$dir/o"
[ ! -e "$dir/o" ] || fail "an error left an output"
no_leftovers
echo "pack_text_cli_test: ok"
