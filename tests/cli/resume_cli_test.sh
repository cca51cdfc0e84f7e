#!/bin/sh
# Resume semantics of the example trainers (docs/long_runs.md#changed-settings):
#  - an elastic resume (1 -> 3 and 2 -> 1 ranks under `stoker launch`, on the CPU) keeps the
#    learning-rate schedule on the run's progress in samples: the run ends after the samples the
#    uninterrupted one sees, the log's total step count is this job's, no step after the resume
#    trains at lr 0 and the last one is annealed as the uninterrupted run's last one;
#  - resuming with a changed setting states it on stderr (--lr, --precision, --layout) or refuses
#    it before any work, naming the flag, both values and the fix (--width, --accum,
#    --optimizer, --optimizer-state), leaving the checkpoints as they were.
# Every check runs and the failures are listed at the end.
# Usage: resume_cli_test.sh STOKER STOKER_CLASSIFIER STOKER_GPT TEXT SCRATCH
set -u
stoker="$1"
classifier="$2"
gpt="$3"
text="$4"
dir="$5"
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
# The learning rates of a metrics file's train lines after step $2, one a line.
lrs_after() {
  grep '"kind":"train"' "$1" | sed 's/.*"step":\([0-9]*\).*"lr":\([-0-9.e+]*\).*/\1 \2/' |
    awk -v s="$2" '$1 > s { print $2 }'
}
last_step() { grep '"kind":"train"' "$1" | tail -n 1 | sed 's/.*"step":\([0-9]*\).*/\1/'; }
last_lr() { grep '"kind":"train"' "$1" | tail -n 1 | sed 's/.*"lr":\([-0-9.e+]*\).*/\1/'; }
launch() {
  n="$1"
  shift
  "$stoker" launch -n "$n" --master-port 0 "$@"
}

"$stoker" pack synth --out "$dir/db" --samples 96 --classes 4 --size 32 --no-progress > /dev/null
cls() {
  "$classifier" --data "$dir/db" --device cpu --batch 8 --image-size 16 --log-interval 1 \
    --threads 1 "$@"
}
gpt_base() {
  "$gpt" --device cpu --cache "$dir/gpt-cache" --text "$text" --layers 1 --heads 2 --context 32 \
    --batch 4 --warmup 2 --log-interval 1 --sample 0 --eval-subset 8 "$@"
}
gpt_run() { gpt_base --width 32 "$@"; }

# --- classifier, 1 -> 3 ranks: 12 steps of 8 per epoch on 1 rank, 4 of 24 on 3 ranks. The
# uninterrupted run writes step_24 (after 2 epochs); 3 ranks resume it for the 2 epochs left.
expect 0 cls --epochs 4 --checkpoint-dir "$dir/c1" --checkpoint-interval 12 --keep-last 0 \
  --metrics "$dir/c1.jsonl"
[ "$(last_step "$dir/c1.jsonl")" = 48 ] || fail "classifier 1 rank: ended at $(last_step "$dir/c1.jsonl")"
expect 0 launch 3 "$classifier" --data "$dir/db" --device cpu --batch 8 --image-size 16 \
  --epochs 4 --log-interval 1 --threads 1 --checkpoint-dir "$dir/c13" \
  --resume "$dir/c1/step_24.safetensors" --metrics "$dir/c13.jsonl"
has "$out" "this job ends at step 32"
has "$out" "steps to step 32 (at the pace"
[ "$(last_step "$dir/c13.jsonl")" = 32 ] || fail "classifier 1 -> 3: ended at $(last_step "$dir/c13.jsonl"), not 32"
zero=$(lrs_after "$dir/c13.jsonl" 24 | awk '$1 == 0' | wc -l)
[ "$zero" = 0 ] || fail "classifier 1 -> 3: $zero steps of the last epochs trained at lr 0"
[ "$(lrs_after "$dir/c13.jsonl" 24 | wc -l)" = 8 ] || fail "classifier 1 -> 3: not 8 steps after the resume"

# --- classifier, 2 -> 1 ranks: 6 steps of 16 per epoch on 2 ranks; 1 rank resumes step_12 for
# 2 epochs of 12 steps and ends annealed (the cosine's last step: well below 1 % of the peak).
expect 0 launch 2 "$classifier" --data "$dir/db" --device cpu --batch 8 --image-size 16 \
  --epochs 4 --log-interval 1 --threads 1 --checkpoint-dir "$dir/c2" --checkpoint-interval 6 \
  --keep-last 0 --metrics "$dir/c2.jsonl"
expect 0 cls --epochs 4 --checkpoint-dir "$dir/c21" --resume "$dir/c2/step_12.safetensors" \
  --metrics "$dir/c21.jsonl"
has "$out" "this job ends at step 36"
[ "$(last_step "$dir/c21.jsonl")" = 36 ] || fail "classifier 2 -> 1: ended at $(last_step "$dir/c21.jsonl"), not 36"
peak=$(grep '"kind":"train"' "$dir/c21.jsonl" | head -n 1 | sed 's/.*"lr":\([-0-9.e+]*\).*/\1/')
awk -v l="$(last_lr "$dir/c21.jsonl")" -v p="$peak" 'BEGIN { exit !(l > 0 && l < 0.01 * p) }' ||
  fail "classifier 2 -> 1: the last step's lr $(last_lr "$dir/c21.jsonl") is not annealed (first $peak)"

# --- gpt, 1 -> 3 ranks: --steps 16 of 4 sequences; step_8 resumed on 3 ranks has 32 sequences
# left, 3 steps of 12; its last lr is the uninterrupted run's last.
expect 0 gpt_run --steps 16 --checkpoint-dir "$dir/g1" --checkpoint-interval 8 --keep-last 0 \
  --metrics "$dir/g1.jsonl"
expect 0 launch 3 "$gpt" --device cpu --cache "$dir/gpt-cache" --text "$text" --layers 1 \
  --width 32 --heads 2 --context 32 --batch 4 --steps 16 --warmup 2 --log-interval 1 --sample 0 \
  --eval-subset 8 --checkpoint-dir "$dir/g13" --resume "$dir/g1/step_8.safetensors" \
  --metrics "$dir/g13.jsonl"
has "$out" "this job ends at step 11"
[ "$(last_step "$dir/g13.jsonl")" = 11 ] || fail "gpt 1 -> 3: ended at $(last_step "$dir/g13.jsonl"), not 11"
[ "$(last_lr "$dir/g13.jsonl")" = "$(last_lr "$dir/g1.jsonl")" ] ||
  fail "gpt 1 -> 3: last lr $(last_lr "$dir/g13.jsonl"), the uninterrupted run's $(last_lr "$dir/g1.jsonl")"

# --- gpt, 2 -> 1 ranks: step_8 of a 2-rank run (64 sequences left) takes 16 steps on 1 rank.
expect 0 launch 2 "$gpt" --device cpu --cache "$dir/gpt-cache" --text "$text" --layers 1 \
  --width 32 --heads 2 --context 32 --batch 4 --steps 16 --warmup 2 --log-interval 1 --sample 0 \
  --eval-subset 8 --checkpoint-dir "$dir/g2" --checkpoint-interval 8 --keep-last 0 \
  --metrics "$dir/g2.jsonl"
expect 0 gpt_run --steps 16 --checkpoint-dir "$dir/g21" --resume "$dir/g2/step_8.safetensors" \
  --metrics "$dir/g21.jsonl"
has "$out" "this job ends at step 24"
[ "$(last_step "$dir/g21.jsonl")" = 24 ] || fail "gpt 2 -> 1: ended at $(last_step "$dir/g21.jsonl"), not 24"
[ "$(last_lr "$dir/g21.jsonl")" = "$(last_lr "$dir/g2.jsonl")" ] ||
  fail "gpt 2 -> 1: last lr $(last_lr "$dir/g21.jsonl"), the uninterrupted run's $(last_lr "$dir/g2.jsonl")"

# --- changed settings. A finished run of each program, resumed with one flag changed.
expect 0 gpt_run --steps 2 --checkpoint-dir "$dir/gs"
expect 0 cls --epochs 1 --checkpoint-dir "$dir/cs"
sum_g=$(cksum < "$dir/gs/last.safetensors")
sum_c=$(cksum < "$dir/cs/last.safetensors")
refused() {  # refused PROGRAM-NAME FLAG OLD NEW COMMAND...
  name="$1" flag="$2" old="$3" new="$4"
  shift 4
  expect 1 "$@"
  has "$err" "^$name: error: "
  has "$err" "$flag"
  has "$err" " $old"
  has "$err" " $new"
  has "$err" "hint: resume with $flag $old"
  has "$err" "another --checkpoint-dir"
  hasnt "$err" "damaged"
  hasnt "$out" "^step "
}
refused stoker_gpt --width 32 64 gpt_base --steps 2 --checkpoint-dir "$dir/gs" --width 64
has "$err" "the checkpoint was written for --width 32, this run has --width 64"
refused stoker_gpt --accum 1 2 gpt_run --steps 2 --checkpoint-dir "$dir/gs" --accum 2
has "$err" "global batch"
refused stoker_gpt --optimizer-state f32 bf16 gpt_run --steps 2 --checkpoint-dir "$dir/gs" \
  --optimizer-state bf16
refused stoker_classifier --width 16 32 cls --epochs 1 --checkpoint-dir "$dir/cs" --width 32
has "$err" "the checkpoint was written for --width 16, this run has --width 32"
refused stoker_classifier --accum 1 2 cls --epochs 1 --checkpoint-dir "$dir/cs" --accum 2
refused stoker_classifier --optimizer sgd lars cls --epochs 1 --checkpoint-dir "$dir/cs" \
  --optimizer lars
[ "$(cksum < "$dir/gs/last.safetensors")" = "$sum_g" ] || fail "a refused gpt resume changed the checkpoint"
[ "$(cksum < "$dir/cs/last.safetensors")" = "$sum_c" ] || fail "a refused classifier resume changed the checkpoint"
# Allowed, each stated on stderr.
expect 0 gpt_run --steps 2 --checkpoint-dir "$dir/gs" --lr 0.001
has "$err" "^resume: --lr changed 0.002 -> 0.001"
expect 0 gpt_run --steps 2 --checkpoint-dir "$dir/gs" --precision bf16
has "$err" "^resume: --precision changed fp32 -> bf16"
expect 0 cls --epochs 1 --checkpoint-dir "$dir/cs" --lr 0.05
has "$err" "^resume: --lr changed .* -> 0.05"
expect 0 cls --epochs 1 --checkpoint-dir "$dir/cs" --precision bf16
has "$err" "^resume: --precision changed fp32 -> bf16"
expect 0 cls --epochs 1 --checkpoint-dir "$dir/cs" --layout nchw
has "$err" "^resume: --layout changed nhwc -> nchw"

if [ "$failures" -gt 0 ]; then
  echo "resume CLI test: $failures failures"
  exit 1
fi
echo "resume CLI test passed"
