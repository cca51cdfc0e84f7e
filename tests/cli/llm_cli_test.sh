#!/bin/sh
# stoker_llm on the CPU (docs/llm.md):
#  - llama3-debug trains on the bundled text (packed on the first run) and its validation loss
#    falls; the sample at the end is decoded text;
#  - a run stopped at its last step resumes from --checkpoint-dir and continues to more steps;
#    SIGTERM stops a run with a checkpoint (exit 143) that the same command continues from;
#  - --save DIR writes a transformers folder (f32 for an fp32 run), --init-from DIR continues from
#    it: its validation loss before training is the saved run's after training;
#  - bf16 with activation checkpointing saves bf16 weights; --document-mask trains;
#  - `stoker launch -n 2` with --zero1 and 8-bit optimizer state trains;
#  - --synthetic prints its timed line; --parity-dir writes every file of a parity run;
#  - --memory-plan prints the plan; llama3-8b on a device too small says what it needs and which
#    flags would fit, before allocating anything (exit 1);
#  - bad inputs (an unknown preset, --init-from a missing or non-Llama folder, --save onto an
#    input, a shape flag contradicting --init-from, --document-mask on a raw token file) exit 1
#    naming the flag, no signal.
# Every check runs and the failures are listed at the end.
# Usage: llm_cli_test.sh STOKER STOKER_LLM TEXT SCRATCH
set -u
stoker="$1"
llm="$2"
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
# A refused input: exit 1 (or CLI11's own status for a value outside a flag's choices), no signal.
refused() {
  status=0
  "$@" > "$out" 2> "$err" || status=$?
  { [ "$status" -ge 1 ] && [ "$status" -lt 128 ]; } || fail "status $status, expected 1..127: $*"
}
has() { grep -q -- "$2" "$1" || fail "no '$2' in $(basename "$1")"; }
hasnt() { if grep -q -- "$2" "$1"; then fail "unexpected '$2' in $(basename "$1")"; fi; }
# The number after "$2" on the first line of file $1 holding it.
number_after() { grep -- "$2" "$1" | head -n 1 | sed "s/.*$2 *\([-0-9.]*\).*/\1/"; }
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

base() {
  "$llm" --device cpu --data-cache "$dir/cache" --text "$text" --batch 8 --context 64 \
    --log-interval 10 --eval-subset 16 "$@"
}
quiet() { base --sample 0 "$@"; }

# 1. llama3-debug learns the bundled text: the validation loss falls well below ln 1024.
expect 0 base --steps 60 --sample 20 --prompt "And God said" --checkpoint-dir "$dir/ck"
has "$out" "memory plan:"
has "$out" "Llama(V=1024 C=128 L=4 H=4 KV=2 D=32 F=384"
has "$out" "sample (top-5"
before=$(number_after "$out" "validation loss before training:")
after=$(number_after "$out" "validation loss after training:")
below "$after" "$before" || fail "validation loss did not fall: $before -> $after"
below "$after" 5.5 || fail "validation loss $after after 60 steps is not below 5.5"
cp "$out" "$dir/first.txt"

# 2. The same command with more steps resumes the run's last checkpoint and continues.
expect 0 quiet --steps 70 --checkpoint-dir "$dir/ck"
has "$out" "resum"
has "$out" "step     70 |"
has "$out" "trained 10 steps (to step 70)"
hasnt "$out" "step     10 |"
# Resuming into another model shape is refused before any work, naming the flag.
expect 1 quiet --steps 80 --checkpoint-dir "$dir/ck" --layers 2
has "$err" "--layers"

# 2b. SIGTERM (a scheduler's preemption) stops after the step in progress with a checkpoint
# (exit 143); the next run on that folder continues from it.
# (The program itself in the background, not a shell function: $! must be its pid.)
"$llm" --device cpu --data-cache "$dir/cache" --text "$text" --batch 8 --context 64 \
  --log-interval 10 --sample 0 --steps 400 --checkpoint-dir "$dir/ck3" \
  --metrics "$dir/m.jsonl" > "$out" 2> "$err" &
pid=$!
i=0
while ! grep -q '"kind":"train"' "$dir/m.jsonl" 2> /dev/null && [ $i -lt 1200 ]; do
  sleep 0.1
  i=$((i + 1))
done
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
[ "$status" = 143 ] || fail "status $status after SIGTERM, expected 143"
has "$err" "stopped by SIGTERM after step"
has "$err" "run the same command to continue"
stopped=$(sed -n 's/.*stopped by SIGTERM after step \([0-9]*\).*/\1/p' "$err")
expect 0 quiet --steps $((${stopped:-0} + 2)) --checkpoint-dir "$dir/ck3" \
  --metrics "$dir/m.jsonl"
has "$out" "resuming from $dir/ck3/step_$stopped.safetensors"
has "$out" "trained 2 steps"

# 3. --save DIR writes a transformers folder; --init-from DIR continues from its weights.
expect 0 quiet --steps 5 --save "$dir/hf"
for f in config.json model.safetensors; do
  [ -f "$dir/hf/$f" ] || fail "--save wrote no $f"
done
has "$dir/hf/config.json" '"model_type": *"llama"'
saved=$(number_after "$out" "validation loss after training:")
expect 0 quiet --steps 5 --init-from "$dir/hf" --lr 1e-4
has "$out" "from $dir/hf"
resumed=$(number_after "$out" "validation loss before training:")
[ -n "$saved" ] && [ "$resumed" = "$saved" ] ||
  fail "--init-from starts at validation loss $resumed, not the saved run's $saved"

# 3b. bf16 with every block checkpointed saves bf16 weights; --document-mask trains on the
# packed text's documents.
expect 0 quiet --steps 3 --precision bf16 --activation-checkpoint-every 1 --save "$dir/hf16"
has "$out" "4 blocks checkpointed"
has "$dir/hf16/config.json" '"torch_dtype": *"bfloat16"'
expect 0 quiet --steps 3 --document-mask
has "$out" "document-masked"

# 4. Two ranks under `stoker launch`, ZeRO-1 and 8-bit optimizer state.
expect 0 "$stoker" launch -n 2 --master-port 0 "$llm" --device cpu --data-cache "$dir/cache" \
  --text "$text" --batch 4 --context 32 --steps 4 --log-interval 2 --eval-subset 8 --sample 0 \
  --zero1 --optimizer-state int8
has "$out" "x 2 ranks"

# 4b. --synthetic: timed steps on random ids, in torch_train.py llama's line format.
expect 0 "$llm" --device cpu --synthetic --steps 3 --bench-warmup 1 --batch 2 --context 32
has "$out" "stoker Llama llama3-debug B=2 T=32 fp32"
has "$out" "tok/s"

# 5. The memory plan, and a run that cannot fit.
expect 0 "$llm" --device cpu --preset llama3-8b --memory-plan --precision bf16 --batch 1 \
  --context 2048
has "$out" "optimizer"
has "$out" "activations"
expect 1 "$llm" --device cpu --preset llama3-8b --batch 64 --context 8192
has "$err" "does not fit on cpu"
has "$err" "activation-checkpoint-every"

# 5b. --parity-dir: init/ and final/ transformers folders, every batch (int32 [steps, 2, B, T])
# and every step's loss; refused with a flag of a kept run, or onto an input.
expect 0 "$llm" --device cpu --data-cache "$dir/cache" --text "$text" --batch 8 --context 64 \
  --sample 0 --parity-dir "$dir/parity" --steps 3 --lr 1e-3
has "$out" "parity files in"
for f in config.json losses.json batches.i32 init/config.json init/model.safetensors \
  final/config.json final/model.safetensors; do
  [ -s "$dir/parity/$f" ] || fail "--parity-dir wrote no $f"
done
[ "$(wc -c < "$dir/parity/batches.i32")" -eq $((3 * 2 * 8 * 64 * 4)) ] ||
  fail "batches.i32 holds $(wc -c < "$dir/parity/batches.i32") bytes, expected 3 x 2 x 8 x 64 x 4"
has "$dir/parity/losses.json" '"steps":3'
expect 1 "$llm" --device cpu --data-cache "$dir/cache" --text "$text" --sample 0 \
  --parity-dir "$dir/parity2" --steps 3 --checkpoint-dir "$dir/ck-parity"
has "$err" "--parity-dir"
expect 1 "$llm" --device cpu --data-cache "$dir/cache" --text "$text" --sample 0 \
  --parity-dir "$dir/hf" --init-from "$dir/hf" --steps 3
has "$err" "--parity-dir"

# 6. Bad inputs: exit 1, the flag named, no signal.
refused "$llm" --device cpu --preset llama9
has "$err" "--preset"
expect 1 quiet --init-from "$dir/no-such-folder"
has "$err" "--init-from"
mkdir -p "$dir/not-llama"
echo '{"model_type": "gpt2", "vocab_size": 10}' > "$dir/not-llama/config.json"
expect 1 quiet --init-from "$dir/not-llama"
has "$err" "--init-from $dir/not-llama"
has "$err" "model_type"
expect 1 quiet --init-from "$dir/hf" --layers 7
has "$err" "--layers 7 contradicts --init-from"
expect 1 quiet --init-from "$dir/hf" --save "$dir/hf"
has "$err" "--save"
has "$err" "--init-from"
head -c 4000 /dev/urandom > "$dir/raw.u16"
expect 1 quiet --data "$dir/raw.u16" --document-mask
has "$err" "--document-mask"
expect 1 quiet --document-mask --cuda-graph
has "$err" "--cuda-graph with --document-mask"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all stoker_llm checks passed"
