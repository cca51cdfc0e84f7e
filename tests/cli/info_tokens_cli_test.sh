#!/bin/sh
# End-to-end check of `stoker info` on token corpora written by tests/data/write_token_corpora.py
# (from the formats' specifications): a Megatron dataset by its prefix, .idx and .bin, a glob of
# llm.c shards, raw ids with --token-bytes; then bad inputs: ids above --vocab, a truncated .bin,
# a shard with a bad magic, a raw file without --token-bytes, an empty file, a FIFO. Each is an
# exit status 1 with `stoker: error:` naming the file, never a signal or a hang.
# Usage: info_tokens_cli_test.sh STOKER_BINARY PYTHON3 SCRATCH_DIR
set -eu
stoker="$1"
python="$2"
dir="$3"
rm -rf "$dir"
mkdir -p "$dir"
"$python" "$(dirname "$0")/../data/write_token_corpora.py" "$dir"

# Runs the command (at most 60 s) with stdout in $dir/out.txt and stderr in $dir/err.txt; fails
# unless its exit status is $1 (124: it hung; 128 + N: signal N).
expect() {
  want="$1"
  shift
  set +e
  timeout 60 "$@" > "$dir/out.txt" 2> "$dir/err.txt"
  got=$?
  set -e
  if [ "$got" -ne "$want" ]; then
    echo "exit status $got, expected $want: $*" >&2
    cat "$dir/out.txt" "$dir/err.txt" >&2
    exit 1
  fi
}
# The value of a field of corpus $1 in expected.json ($2: a Python expression of `c`).
field() {
  "$python" -c "import json,sys; c=json.load(open(sys.argv[1]))[sys.argv[2]]; print($2)" \
    "$dir/expected.json" "$1"
}
has() {
  if ! grep -q -- "$1" "$dir/$2"; then
    echo "expected '$1' in $2:" >&2
    cat "$dir/out.txt" "$dir/err.txt" >&2
    exit 1
  fi
}

# Megatron by its prefix, its .idx and its .bin: the same description.
tokens=$(field megatron_int32 "len(c['tokens'])")
docs=$(field megatron_int32 "len(c['documents']) - 1")
seqs=$(field megatron_int32 "len(c['sequences']) - 1")
largest=$(field megatron_int32 "c['max_id']")
for source in "$dir/mega_i32" "$dir/mega_i32.idx" "$dir/mega_i32.bin"; do
  expect 0 "$stoker" info "$source"
  has "^$dir/mega_i32: Megatron-LM indexed dataset (MMIDIDX version 1), int32 ids (dtype code 4)" out.txt
  has "^  tokens: $tokens\$" out.txt
  has "^  documents: $docs (from the index), 0 empty" out.txt
  has "^  sequences: $seqs\$" out.txt
  has "^  ids: largest $largest," out.txt
done
# Empty documents are counted (the uint16 dataset has a document without sequences and one with
# an empty sequence).
expect 0 "$stoker" info --verify "$dir/mega_u16" --vocab 65536
has "^  documents: $(field megatron_uint16 "len(c['documents']) - 1") (from the index), 2 empty" out.txt
has "^  document length: min 0," out.txt
has "^verified: header, sizes, sequence lengths and pointers .*all below --vocab 65536" out.txt
has "^checksums: none: Megatron's indexed dataset has no checksums" out.txt

# llm.c shards by a glob (quoted: stoker expands it and sorts it as llm.c does).
expect 0 "$stoker" info "$dir/shards/gpt2_train_*.bin" --verify --vocab 50257
has "^3 shards (.*gpt2_train_000000.bin .. .*gpt2_train_000002.bin): llm.c token shards (magic 20240520, version 1: GPT-2), uint16 ids" out.txt
has "^  tokens: $(field llmc_gpt2 "len(c['tokens'])")\$" out.txt
has "^  documents: $(field llmc_gpt2 "len(c['documents']) - 1") (each begins with id 50256), 0 empty" out.txt
has "^  ids: largest 50256, smallest $(field llmc_gpt2 "c['min_id']"), all below --vocab 50257" out.txt
has "^checksums: none: llm.c's shards have no checksums" out.txt
expect 0 "$stoker" info "$dir/shards/llama3_train_000001.bin"
has "llm.c token shards (magic 20240801, version 7: Llama 3), uint32 ids" out.txt

# Raw ids: the width is given; documents end at --eot.
expect 0 "$stoker" info "$dir/raw_u16.bin" --token-bytes 2 --eot 50256
has "^  tokens: $(field raw_uint16 "len(c['tokens'])")\$" out.txt
has "^  documents: $(field raw_uint16 "len(c['documents']) - 1") (each ends with id 50256" out.txt
expect 0 "$stoker" info "$dir/raw_u32.bin" --token-bytes 4
has "^$dir/raw_u32.bin: raw token ids, uint32" out.txt
has "^  documents: 1 (one per file)" out.txt

# Bad inputs.
expect 1 "$stoker" info "$dir/raw_u16.bin"
has "^stoker: error: token corpus $dir/raw_u16.bin: not a Megatron dataset" err.txt
has "hint: .*--token-bytes 2 (uint16) or 4 (uint32)" err.txt
expect 1 "$stoker" info "$dir/shards/gpt2_train_*.bin" --vocab 50256
has "^stoker: error: .*token id 50256 at $dir/shards/gpt2_train_000000.bin token 0 (byte 1024), document 0 token 0 is not below the vocabulary size 50256" err.txt
has "hint: .*--vocab" err.txt
cp "$dir/mega_u8.idx" "$dir/cut.idx"
head -c 50 "$dir/mega_u8.bin" > "$dir/cut.bin"
expect 1 "$stoker" info "$dir/cut"
has "^stoker: error: Megatron index $dir/cut.idx: sequence [0-9]* (.*) points outside $dir/cut.bin (50 bytes): the .bin is truncated" err.txt
cp "$dir/shards/gpt2_train_000001.bin" "$dir/badmagic.bin"
printf 'XXXX' | dd of="$dir/badmagic.bin" bs=1 count=4 conv=notrunc 2> /dev/null
expect 1 "$stoker" info "$dir/badmagic.bin"
has "^stoker: error: token corpus $dir/badmagic.bin: .*not an llm.c shard (it starts with 1482184792, not the magic 20240520 or 20240801)" err.txt
cp "$dir/shards/gpt2_train_000001.bin" "$dir/short.bin"
truncate -s -2 "$dir/short.bin"
expect 1 "$stoker" info "$dir/short.bin"
has "^stoker: error: llm.c shard $dir/short.bin: its header counts 64 tokens (128 bytes of uint16), but the file has 126 bytes after the header (truncated)" err.txt
: > "$dir/empty.bin"
expect 1 "$stoker" info "$dir/empty.bin" --token-bytes 2
has "raw token file $dir/empty.bin: empty (0 bytes)" err.txt
expect 1 "$stoker" info "$dir/nothing_*.bin"
has "no file matches the pattern $dir/nothing_\*.bin" err.txt
mkfifo "$dir/pipe"
expect 1 "$stoker" info "$dir/pipe" --token-bytes 2
has "$dir/pipe: is a FIFO" err.txt
expect 105 "$stoker" info "$dir/raw_u16.bin" --token-bytes 3
has "--token-bytes: 3 not in {2,4}" err.txt
echo "info_tokens_cli_test: ok"
