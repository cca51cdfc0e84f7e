#!/bin/sh
# stoker_gpt on token corpora: the bundled text packed by `stoker pack-text` (a Megatron dataset)
# as --data (folder, prefix, .idx), --mix of two sources, --val, --val-split; an elastic resume 2 -> 3 -> 1
# ranks (`stoker launch`) that continues the epoch's global order (the sources' report at the end
# counts every sequence the job consumed); bad input: zero, negative and malformed --mix weights,
# --mix with --data, --val the same corpus as --data, ids above --vocab, a context longer than
# the corpus, a folder with two indexes, bad --val-split, a --tokenizer that is no model or has
# more ids than --vocab. Each error is exit status 1 naming the input.
# Usage: gpt_tokens_cli_test.sh STOKER GPT TEXT SCRATCH_DIR
set -u
stoker="$1"
gpt="$2"
text="$3"
dir="$4"
rm -rf "$dir"
mkdir -p "$dir"
out="$dir/out.txt"
err="$dir/err.txt"
failures=0

fail() {
  echo "FAIL: $*"
  echo "  stdout: $(tail -c 800 "$out")"
  echo "  stderr: $(tail -c 800 "$err")"
  failures=$((failures + 1))
}
expect() {
  want="$1"
  shift
  status=0
  "$@" > "$out" 2> "$err" || status=$?
  [ "$status" = "$want" ] || fail "status $status, expected $want: $*"
}
has() { grep -q -- "$2" "$1" || fail "no '$2' in $(basename "$1")"; }
hasnt() { if grep -q -- "$2" "$1"; then fail "unexpected '$2' in $(basename "$1")"; fi; }
launch() {
  n="$1"
  shift
  "$stoker" launch -n "$n" --master-port 0 "$@"
}

expect 0 "$stoker" pack-text "$text" --out "$dir/kjv" --train-tokenizer --vocab-size 600
pack="$dir/kjv"
run() {
  "$gpt" --device cpu --layers 1 --heads 2 --width 32 --context 32 --batch 4 --warmup 2 \
    --log-interval 1 --sample 0 --vocab 600 "$@"
}

# --- the corpus by folder, prefix and .idx; a mixture; a validation corpus
for data in "$pack" "$pack/tokens" "$pack/tokens.idx"; do
  expect 0 run --data "$data" --steps 3
  has "$out" "data: token corpus"
  has "$out" "each once"
  has "$out" "weight 1.0000, 0.002 epochs (12 of its"
done
expect 0 run --mix "$pack:0.75,$pack/tokens.bin:0.25" --steps 5
has "$out" "data: mixture"
has "$out" "weight 0.7500, .* epochs (15 of its"
has "$out" "weight 0.2500, .* epochs (5 of its"
mkdir -p "$dir/val"
cp "$pack/tokens.bin" "$pack/tokens.idx" "$dir/val/"
expect 0 run --data "$pack" --val "$dir/val" --steps 2 --eval-subset 8
has "$out" "validation:"
# A validation split by document (--seed's choice), left out of training.
expect 0 run --data "$pack" --val-split 0.1 --steps 2 --eval-subset 8
has "$out" "validation split of $pack: 18 documents"
has "$out" "validation loss after training"

# --- the tokenizer the pack records: the vocabulary when --vocab is not given, and the sample's
# decoding (the prompt encoded with it); --tokenizer names one for a corpus without a manifest.
plain() {
  "$gpt" --device cpu --layers 1 --heads 2 --width 32 --context 32 --batch 4 --warmup 2 "$@"
}
expect 0 plain --data "$pack" --steps 2 --sample 6 --prompt "And Moses said"
has "$out" "V=600"
has "$out" "^And Moses said"
mkdir -p "$dir/bare"
cp "$pack/tokens.bin" "$pack/tokens.idx" "$dir/bare/"
expect 0 plain --data "$dir/bare" --vocab 600 --steps 1 --sample 3 --prompt "And God"
has "$out" "^And God[0-9]* [0-9]* [0-9]* $"
expect 0 plain --data "$dir/bare" --steps 1 --sample 3 --prompt "And God" \
  --tokenizer "$pack/tokenizer.model"
has "$out" "V=600"
has "$out" "^And God"
hasnt "$out" "^And God[0-9][0-9]* "
expect 1 run --data "$dir/bare" --steps 1 --tokenizer "$pack/tokens.idx"
has "$err" "^stoker_gpt: error: --tokenizer $pack/tokens.idx is not a SentencePiece model"
expect 1 run --data "$dir/bare" --steps 1 --tokenizer "$dir/nope.model"
has "$err" "^stoker_gpt: error: --tokenizer $dir/nope.model: No such file"
expect 1 plain --data "$dir/bare" --steps 1 --vocab 300 --tokenizer "$pack/tokenizer.model"
has "$err" "has 600 ids, more than the model's vocabulary of 300"

# --- elastic resume: 2 ranks to step 4 (32 sequences), 3 ranks to step 6 (+24), 1 rank to the
# end of --steps 8 of the 2-rank run's 64 sequences: the report counts 64, as a 1-rank run of
# 16 steps does.
expect 0 launch 2 "$gpt" --device cpu --layers 1 --heads 2 --width 32 --context 32 --batch 4 \
  --warmup 2 --log-interval 1 --sample 0 --vocab 600 --data "$pack" --steps 8 \
  --checkpoint-dir "$dir/e2" --checkpoint-interval 4 --keep-last 0
expect 0 launch 3 "$gpt" --device cpu --layers 1 --heads 2 --width 32 --context 32 --batch 4 \
  --warmup 2 --log-interval 1 --sample 0 --vocab 600 --data "$pack" --steps 8 \
  --checkpoint-dir "$dir/e3" --checkpoint-interval 2 --keep-last 0 \
  --resume "$dir/e2/step_4.safetensors"
has "$out" "resume:"
last3=$(ls "$dir/e3" | grep '^step_.*safetensors$' | sort -t_ -k2 -n | tail -n 1)
expect 0 run --data "$pack" --steps 8 --checkpoint-dir "$dir/e1" --resume "$dir/e3/$last3"
has "$out" "(64 of its"
expect 0 run --data "$pack" --steps 16
has "$out" "(64 of its"

# --- bad input
expect 1 run --mix "$pack:0,$pack/tokens.idx:1" --steps 1
has "$err" "the weight \"0\" of $pack is not a positive number"
expect 1 run --mix "$pack:-0.5" --steps 1
has "$err" "the weight \"-0.5\""
expect 1 run --mix "$pack" --steps 1
has "$err" "is not SOURCE:WEIGHT"
expect 1 run --mix "$pack:1" --data "$pack" --steps 1
has "$err" "--mix and --data both name the training data"
expect 1 run --data "$pack" --val "$pack/tokens.bin" --steps 1
has "$err" "is the same as --data"
expect 1 "$gpt" --device cpu --layers 1 --heads 2 --width 32 --context 32 --batch 4 --sample 0 \
  --vocab 100 --data "$pack" --steps 1
has "$err" "outside the vocabulary \[0, 100)"
expect 1 "$gpt" --device cpu --layers 1 --heads 2 --width 32 --context 1000000 --batch 4 \
  --sample 0 --vocab 600 --data "$pack" --steps 1
has "$err" "not one sequence of context + 1 = 1000001 tokens"
expect 1 run --data "$pack" --val-split 2.5 --steps 1
has "$err" "neither a fraction below 1 nor a whole number"
expect 1 run --data "$pack" --val-split 0.1 --val "$dir/val" --steps 1
has "$err" "--val-split needs a --data corpus and no --val"
expect 1 run --data "$pack" --val-split 180 --steps 1
has "$err" "would leave none to train on"
expect 1 run --data "$pack" --steps 1 --on-corrupt skip
has "$err" "^stoker_gpt: error: --on-corrupt skip: token corpora have no skip policy"
cp "$pack/tokens.idx" "$dir/val/other.idx"
expect 1 run --data "$dir/val" --steps 1
has "$err" "a folder with 2 Megatron indexes"

if [ "$failures" -ne 0 ]; then
  echo "stoker_gpt token data test: $failures failures"
  exit 1
fi
echo "stoker_gpt token data test: ok"
