#!/bin/sh
# Bad input to the programs (the example trainers and `stoker` itself) ends in one clear error,
# before any work, never in an uncaught exception (status 134): bad values and enumerations
# (CLI11's status 105 and a message naming the flag and its range), a device that is not there,
# output paths that cannot be written (checked before training: a path below a regular file and
# /proc refuse root too), --classes and --val databases that do not match --data, and a
# database with a damaged record under --on-corrupt fail and skip; the flags of long runs
# (checkpoints, resume, evaluation, metrics) and the old spelling of activation checkpointing; the
# classifier's optimizer flags (a short LARS run must lower its loss); outputs that would land
# on an input (the input's bytes checked after the refusal), inputs that are FIFOs or folders
# (under `timeout`: a hang fails), empty paths, --val equal to --data, and the library's errors
# in the programs' flags. Every check runs and the failures are listed at the end.
# Usage: examples_cli_test.sh STOKER STOKER_MLP STOKER_DEMO STOKER_CLASSIFIER STOKER_GPT SCRATCH
set -u
stoker="$1"
mlp="$2"
demo="$3"
classifier="$4"
gpt="$5"
dir="$6"
rm -rf "$dir"
mkdir -p "$dir"
out="$dir/out.txt"
err="$dir/err.txt"
failures=0

fail() {
  echo "FAIL: $*"
  echo "  stdout: $(head -c 600 "$out")"
  echo "  stderr: $(head -c 600 "$err")"
  failures=$((failures + 1))
}

# expect STATUS COMMAND...: runs COMMAND (stdout in $out, stderr in $err) and checks its status.
expect() {
  want="$1"
  shift
  status=0
  "$@" > "$out" 2> "$err" || status=$?
  [ "$status" = "$want" ] || fail "status $status, expected $want: $*"
}
# has FILE PATTERN: FILE matches the grep pattern.
has() { grep -q -- "$2" "$1" || fail "no '$2' in $(basename "$1")"; }
hasnt() { if grep -q -- "$2" "$1"; then fail "unexpected '$2' in $(basename "$1")"; fi; }

# A small database (4 classes) and the classifier's quick settings on the CPU.
"$stoker" pack synth --out "$dir/db" --samples 64 --classes 4 --size 32 --no-progress > /dev/null
run_classifier() {
  "$classifier" --data "$dir/db" --device cpu --epochs 1 --batch 16 --image-size 16 "$@"
}

# --- uncaught exceptions: every program ends a bad input with "NAME: error: ...", status 1.
expect 104 "$mlp" --epochs abc
has "$err" "--epochs"
expect 1 "$mlp" --device tpu
has "$err" "^stoker_mlp: error: --device tpu: unknown device"
expect 105 "$mlp" --epochs 0
has "$err" "--epochs: 0 is below the minimum 1"
expect 109 "$mlp" --no-such-flag
hasnt "$out" "parameters"
expect 0 "$mlp" --help
has "$out" "--epochs"
hasnt "$out" "parameters"  # the help, no training
expect 1 "$demo" tpu
has "$err" "^stoker_demo: error: DEVICE tpu: unknown device"
expect 1 "$gpt" --device tpu --cache "$dir/gpt-cache"
has "$err" "^stoker_gpt: error: --device tpu"
# CUDA_VISIBLE_DEVICES="" hides every GPU, so this holds on GPU machines too.
expect 1 env CUDA_VISIBLE_DEVICES= "$classifier" --data "$dir/db" --device cuda
has "$err" "^stoker_classifier: error: --device cuda: no CUDA device is visible"
has "$err" "^  hint: use --device cpu"
expect 1 env CUDA_VISIBLE_DEVICES= "$mlp" --device cuda:1
has "$err" "^stoker_mlp: error: --device cuda:1: no CUDA device is visible"

# --- output paths are checked before the first step.
expect 0 run_classifier --save "$dir/new/folder/w.safetensors"
[ -s "$dir/new/folder/w.safetensors" ] || fail "--save into a missing folder wrote nothing"
printf 'x' > "$dir/plain"
expect 1 run_classifier --save "$dir/plain/w.safetensors"
has "$err" "^stoker_classifier: error: --save $dir/plain/w.safetensors: $dir/plain is not a folder"
has "$err" "^  hint: "
hasnt "$out" "^step "  # nothing trained
expect 1 "$classifier" --synthetic --device cpu --save "$dir/bench.safetensors"
has "$err" "^stoker_classifier: error: --save has no use in a --synthetic bench"
expect 1 run_classifier --save "$dir/new"
has "$err" "--save $dir/new: is a folder, not a file"
hasnt "$out" "^step "
if [ -d /proc/self ]; then
  expect 1 run_classifier --save /proc/stoker-w.safetensors
  has "$err" "--save /proc/stoker-w.safetensors: cannot create a file in /proc"
  hasnt "$out" "^step "
fi
expect 1 "$gpt" --device cpu --cache "$dir/gpt-cache" --parity-dir "$dir/plain/parity"
has "$err" "^stoker_gpt: error: --parity-dir $dir/plain/parity: $dir/plain is not a folder"

# --- values are checked before any work, naming the flag and the valid range.
expect 105 run_classifier --lr -1
has "$err" "--lr: -1 is not a positive number"
expect 105 run_classifier --lr nan
has "$err" "--lr: nan is not a finite number"
expect 105 "$classifier" --batch 0
has "$err" "--batch: 0 is below the minimum 1"
expect 105 "$classifier" --epochs -2
has "$err" "--epochs: -2 is below the minimum 1"
expect 105 "$classifier" --threads 10000
has "$err" "--threads: 10000 is not in \[0, 1024\]"
expect 105 "$classifier" --precision fp4
has "$err" "--precision: fp4 not in"
expect 105 "$classifier" --on-corrupt maybe
has "$err" "--on-corrupt: maybe not in"
expect 105 "$classifier" --seed -1  # not wrapped around to 2^64 - 1
has "$err" "--seed: -1 is below the minimum 0"
expect 105 "$gpt" --batch 0
has "$err" "--batch: 0 is below the minimum 1"
hasnt "$err" "179769"  # not CLI::PositiveNumber's 300-digit upper bound
expect 105 "$gpt" --lr -1
has "$err" "--lr: -1 is not a positive number"
expect 105 "$gpt" --dropout 1.5
has "$err" "--dropout: 1.5 is not in \[0, 1\]"
expect 1 "$gpt" --device cpu --cache "$dir/gpt-cache" --width 100 --heads 3
has "$err" "--width 100 is not a multiple of --heads 3"
expect 1 "$gpt" --device cpu --prompt ""
has "$err" "^stoker_gpt: error: --prompt is empty"
expect 1 run_classifier --classes 2
has "$err" "^stoker_classifier: error: --classes 2 is below the 4 classes of $dir/db"
hasnt "$out" "^step "
expect 1 run_classifier --eval-resize 8
has "$err" "--eval-resize 8 is smaller than the --image-size 16"
expect 1 run_classifier --min-accuracy 0.5
has "$err" "--min-accuracy 0.5 needs a validation set"
# --val with other classes than --data: another count, then other names.
"$stoker" pack synth --out "$dir/db3" --samples 16 --classes 3 --size 32 --no-progress > /dev/null
expect 1 run_classifier --val "$dir/db3"
has "$err" "--val $dir/db3 has 3 classes but --data $dir/db has 4"
"$stoker" pack synth --out "$dir/imgs" --samples 16 --classes 4 --size 32 --as-folder > /dev/null
mv "$dir/imgs/circle" "$dir/imgs/aardvark"
"$stoker" pack "$dir/imgs" --out "$dir/db-renamed" --no-progress > /dev/null
expect 1 run_classifier --val "$dir/db-renamed"
has "$err" "class 0 is 'circle' in --data $dir/db but 'aardvark' in --val $dir/db-renamed"
# No validation set: said so, no made-up accuracy.
expect 0 run_classifier
has "$out" "^epoch 1/1: train loss [0-9.]*, [0-9]* img/s, no validation set"
hasnt "$out" "-100.00"
out_default="$dir/out_default.txt"
cp "$out" "$out_default"

# --- the classifier's optimizer, schedule and loss: bad values name the flag; the startup line
# names what is used; LARS with the poly schedule and label smoothing trains (the loss goes down).
expect 105 run_classifier --optimizer adam
has "$err" "--optimizer: adam not in"
expect 105 run_classifier --lr-schedule step
has "$err" "--lr-schedule: step not in"
expect 105 run_classifier --label-smoothing 1.5
has "$err" "--label-smoothing: 1.5 is not in \[0, 1\]"
expect 105 run_classifier --optimizer lars --lars-eta 0
has "$err" "--lars-eta: 0 is not a positive number"
expect 1 run_classifier --lars-eta 0.01
has "$err" "^stoker_classifier: error: --lars-eta applies to --optimizer lars, not --optimizer sgd"
hasnt "$out" "^step "
# The default (one epoch: its warm-up is clamped to none, and said so).
has "$out_default" "SGD lr 0.00625 (momentum 0.9, weight decay 5e-05; cosine, 0 warm-up epochs)$"
lars_classifier() {
  "$classifier" --data "$dir/db" --device cpu --epochs 4 --batch 16 --image-size 16 \
    --optimizer lars --lr 0.5 --lars-eta 0.01 --lr-schedule poly --label-smoothing 0.1 "$@"
}
expect 0 lars_classifier
has "$out" "LARS lr 0.5 (momentum 0.9, weight decay 5e-05, eta 0.01, [1-9][0-9]* of [1-9][0-9]* parameters adapted; poly (power 2, down to 0.0001), 1 warm-up epoch), label smoothing 0.1$"
first=$(sed -n 's|^epoch 1/4: train loss \([0-9.]*\),.*|\1|p' "$out")
last=$(sed -n 's|^epoch 4/4: train loss \([0-9.]*\),.*|\1|p' "$out")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a != "" && b != "" && b + 0.05 < a) }' ||
  fail "LARS did not train: train loss $first in epoch 1, $last in epoch 4"
# --no-fuse-bn-relu: the same run with torchvision's separate ReLU modules instead of each BN's
# ReLU and each block's tail relu(bn + shortcut) fused (the default) gives the same losses (the
# CPU's fused batch norm has the separate modules' bits).
expect 0 lars_classifier --no-fuse-bn-relu
unfused_last=$(sed -n 's|^epoch 4/4: train loss \([0-9.]*\),.*|\1|p' "$out")
[ -n "$unfused_last" ] && [ "$unfused_last" = "$last" ] ||
  fail "--no-fuse-bn-relu changed the result: train loss $unfused_last in epoch 4, fused $last"
# --cuda-graph: refused on the CPU before any work, with the fix.
expect 1 run_classifier --cuda-graph
has "$err" "^stoker_classifier: error: --cuda-graph: the run is on cpu; CUDA graphs need a GPU (drop --cuda-graph for a CPU run)"
hasnt "$out" "^epoch "

# --- the flags of long runs (examples/common/run_flags.h), the same in both trainers.
expect 1 run_classifier --checkpoint-interval 10
has "$err" "^stoker_classifier: error: --checkpoint-interval needs --checkpoint-dir"
expect 1 run_classifier --checkpoint-dir "$dir/ck" --checkpoint-interval 30x
has "$err" "--checkpoint-interval '30x': the unit 'x' is not s, m, h or d"
has "$err" "hint: give a number of steps (500) or a duration (90s, 30m, 1.5h, 2d)"
expect 1 "$gpt" --device cpu --cache "$dir/gpt-cache" --checkpoint-dir "$dir/ck" --checkpoint-interval 0
has "$err" "^stoker_gpt: error: --checkpoint-interval 0: a number of steps is a whole number"
expect 105 run_classifier --checkpoint-dir "$dir/ck" --keep-last -1
has "$err" "--keep-last: -1 is below the minimum 0"
expect 1 run_classifier --resume
has "$err" "--resume without a file resumes the newest checkpoint of --checkpoint-dir"
expect 1 "$gpt" --device cpu --cache "$dir/gpt-cache" --resume "$dir/nope.safetensors"
has "$err" "^stoker_gpt: error: --resume $dir/nope.safetensors: no such file"
expect 1 run_classifier --checkpoint-dir "$dir/empty-ck" --resume
has "$err" "--resume: --checkpoint-dir $dir/empty-ck holds no checkpoint to resume"
has "$err" "hint: leave --resume out to start the run"
expect 1 run_classifier --eval-every 5
has "$err" "--eval-every needs a validation set: there is no --val"
expect 1 "$gpt" --device cpu --cache "$dir/gpt-cache" --val "$dir/nope.u16"
has "$err" "^stoker_gpt: error: --val $dir/nope.u16: no such file or folder"
expect 1 run_classifier --checkpoint-dir "$dir/plain/ck"
has "$err" "--checkpoint-dir $dir/plain/ck: $dir/plain is not a folder"
hasnt "$out" "^step "
expect 1 "$gpt" --device cpu --cache "$dir/gpt-cache" --metrics "$dir/plain/m.jsonl"
has "$err" "--metrics $dir/plain/m.jsonl: $dir/plain is not a folder"
expect 1 "$gpt" --device cpu --synthetic --checkpoint-dir "$dir/ck"
has "$err" "^stoker_gpt: error: --checkpoint-dir has no use in a --synthetic bench"
# The old spelling of activation checkpointing still works, with a warning; not both at once.
expect 0 run_classifier --checkpoint-every 1
has "$err" "warning: --checkpoint-every is now spelled --activation-checkpoint-every"
expect 1 run_classifier --checkpoint-every 1 --activation-checkpoint-every 2
has "$err" "are the same flag"
# A folder holding another run's checkpoints (another seed) is refused, not silently continued.
expect 0 run_classifier --checkpoint-dir "$dir/run-ck"
[ -s "$dir/run-ck/last.safetensors" ] || fail "no last.safetensors in --checkpoint-dir"
expect 0 run_classifier --checkpoint-dir "$dir/run-ck"
has "$out" "^resuming from $dir/run-ck/last.safetensors at step 4"
expect 1 run_classifier --checkpoint-dir "$dir/run-ck" --seed 7
has "$err" "the data seed differs"
# --save never replaces a training checkpoint (another run's state) with a weights file; an
# existing weights file is replaced as before.
cp "$dir/run-ck/last.safetensors" "$dir/ck-copy.safetensors"
expect 1 run_classifier --save "$dir/run-ck/last.safetensors"
has "$err" "^stoker_classifier: error: --save $dir/run-ck/last.safetensors is a training checkpoint (step 4)"
has "$err" "hint: give --save another path"
cmp -s "$dir/run-ck/last.safetensors" "$dir/ck-copy.safetensors" || fail "--save replaced a checkpoint"
expect 0 run_classifier --save "$dir/weights.safetensors"
expect 0 run_classifier --save "$dir/weights.safetensors"

# --- outputs never touch inputs: an output flag naming an input (the file itself, a link to it,
# a file inside an input database, a checkpoint folder holding an input) is refused before any
# work naming both flags, and the input keeps its bytes.
head -c 8192 /dev/zero > "$dir/tokens.u16"
head -c 4096 /dev/zero > "$dir/val.u16"
cp "$dir/tokens.u16" "$dir/tokens.orig"
cp "$dir/val.u16" "$dir/val.orig"
cp "$dir/db/data.mdb" "$dir/db.orig"
ln -sf "$dir/tokens.u16" "$dir/tokens-link.u16"
gpt_tokens() {
  "$gpt" --device cpu --data "$dir/tokens.u16" --vocab 256 --steps 2 --sample 0 "$@"
}
intact() {  # intact: no input was changed
  cmp -s "$dir/tokens.u16" "$dir/tokens.orig" || fail "$*: the token file was changed"
  cmp -s "$dir/val.u16" "$dir/val.orig" || fail "$*: the validation file was changed"
  cmp -s "$dir/db/data.mdb" "$dir/db.orig" || fail "$*: $dir/db/data.mdb was changed"
}
for flag in --metrics --save; do
  expect 1 gpt_tokens "$flag" "$dir/tokens.u16"
  has "$err" "^stoker_gpt: error: $flag $dir/tokens.u16 is the input --data $dir/tokens.u16"
  has "$err" "^  hint: write $flag somewhere else"
  hasnt "$out" "^step "
  intact "stoker_gpt $flag onto --data"
  expect 1 gpt_tokens "$flag" "$dir/tokens-link.u16"
  has "$err" "$flag $dir/tokens-link.u16 is the input --data $dir/tokens.u16"
  expect 1 gpt_tokens --val "$dir/val.u16" "$flag" "$dir/val.u16"
  has "$err" "$flag $dir/val.u16 is the input --val $dir/val.u16"
  intact "stoker_gpt $flag onto --val"
  expect 1 run_classifier "$flag" "$dir/db/data.mdb"
  has "$err" "^stoker_classifier: error: $flag $dir/db/data.mdb is inside the input folder --data $dir/db"
  hasnt "$out" "^step "
  intact "stoker_classifier $flag onto --data's data.mdb"
  expect 1 run_classifier --val "$dir/db3" "$flag" "$dir/db3/data.mdb"
  has "$err" "$flag $dir/db3/data.mdb is inside the input folder --val $dir/db3"
done
expect 1 gpt_tokens --metrics "$dir/m.jsonl" --save "$dir/m.jsonl"
has "$err" "--save $dir/m.jsonl is also --metrics $dir/m.jsonl"
expect 1 run_classifier --checkpoint-dir "$dir/db"
has "$err" "^stoker_classifier: error: --checkpoint-dir $dir/db is the input --data $dir/db"
expect 1 run_classifier --checkpoint-dir "$dir/db/ck"
has "$err" "--checkpoint-dir $dir/db/ck is inside the input folder --data $dir/db"
[ -e "$dir/db/ck" ] && fail "--checkpoint-dir inside --data was created"
mkdir -p "$dir/run"
cp "$dir/tokens.u16" "$dir/run/tokens.u16"
expect 1 "$gpt" --device cpu --data "$dir/run/tokens.u16" --vocab 256 --checkpoint-dir "$dir/run"
has "$err" "--checkpoint-dir $dir/run holds the input --data $dir/run/tokens.u16"
has "$err" "hint: give --checkpoint-dir a folder of its own"
# The default text's packed corpus (its pack-text folder) and the byte-level token files are
# inputs too. The default run packs the text once, and decodes its sample with the trained
# tokenizer; a second run reuses the pack.
rm -rf "$dir/gpt-cache"
expect 0 "$gpt" --device cpu --data-cache "$dir/gpt-cache" --layers 1 --heads 2 --width 32 \
  --context 32 --steps 2 --eval-subset 2 --sample 8 --prompt "And God said"
has "$out" "^packed .*kjv-genesis-exodus.txt into $dir/gpt-cache/kjv-genesis-exodus-[0-9a-f]*-sp1024: 180 documents"
has "$out" "V=1024"
has "$out" "validation split of .*: the last 17 documents"
has "$out" "^And God said"
pack=$(ls -d "$dir/gpt-cache"/kjv-genesis-exodus-*-sp1024)
[ -f "$pack/tokenizer.model" ] && [ -f "$pack/tokens.manifest.json" ] || fail "no pack-text folder in $dir/gpt-cache"
expect 0 "$gpt" --device cpu --cache "$dir/gpt-cache" --layers 1 --heads 2 --width 32 \
  --context 32 --steps 1 --eval-subset 1 --sample 0
hasnt "$out" "^packed"
expect 1 "$gpt" --device cpu --data-cache "$dir/gpt-cache" --metrics "$pack/m.jsonl"
has "$err" "--metrics $pack/m.jsonl is inside the input folder --data-cache $pack"
expect 1 "$gpt" --device cpu --byte-level --cache "$dir/gpt-cache" --metrics "$dir/gpt-cache/kjv-genesis-exodus.train.u16"
has "$err" "--metrics $dir/gpt-cache/kjv-genesis-exodus.train.u16 is the input --data-cache"
expect 1 gpt_tokens --byte-level
has "$err" "^stoker_gpt: error: --byte-level reads --text, not --data or --mix"
# Validation on the training data is refused, with the fix.
expect 1 gpt_tokens --val "$dir/tokens-link.u16"
has "$err" "^stoker_gpt: error: --val $dir/tokens-link.u16 is the same as --data $dir/tokens.u16"
has "$err" "hint: split off a validation set"
expect 1 run_classifier --val "$dir/db/"
has "$err" "^stoker_classifier: error: --val $dir/db/ is the same as --data $dir/db"
# The diagnostics' files asked for through the environment (what `stoker doctor -- PROGRAM`
# sets) are outputs as well.
expect 1 env STOKER_DIAG=1 STOKER_DIAG_HTML="$dir/db/data.mdb" "$classifier" --data "$dir/db" \
  --device cpu --epochs 1 --batch 16 --image-size 16
has "$err" "STOKER_DIAG_HTML $dir/db/data.mdb is inside the input folder --data $dir/db"
expect 1 env STOKER_DIAG=1 STOKER_DIAG_TIMELINE_CSV="$dir/tokens.u16" "$gpt" --device cpu \
  --data "$dir/tokens.u16" --vocab 256 --steps 2 --sample 0
has "$err" "STOKER_DIAG_TIMELINE_CSV $dir/tokens.u16 is the input --data $dir/tokens.u16"
intact "the refusals"

# --- inputs that are not regular files (a FIFO with no writer blocked forever before) are
# refused without being opened; `timeout` turns a hang into a failure.
mkfifo "$dir/fifo"
mkdir -p "$dir/fifo-db"
mkfifo "$dir/fifo-db/data.mdb"
expect 1 timeout 60 "$gpt" --device cpu --data "$dir/fifo" --vocab 256
has "$err" "^stoker_gpt: error: --data $dir/fifo: is a FIFO (named pipe), not a regular file"
expect 1 timeout 60 "$gpt" --device cpu --data "$dir/tokens.u16" --vocab 256 --val "$dir/fifo"
has "$err" "^stoker_gpt: error: --val $dir/fifo: is a FIFO"
expect 1 timeout 60 "$gpt" --device cpu --data "$dir/tokens.u16" --vocab 256 --resume "$dir/fifo"
has "$err" "^stoker_gpt: error: --resume $dir/fifo: not a regular file"
expect 1 timeout 60 "$gpt" --device cpu --text "$dir/fifo" --cache "$dir/fifo-cache"
has "$err" "^stoker_gpt: error: --text $dir/fifo: is a FIFO"
expect 1 timeout 60 "$gpt" --device cpu --data "$dir" --vocab 256
has "$err" "--data $dir: is a folder, not a regular file"
expect 1 timeout 60 "$classifier" --device cpu --data "$dir/fifo"
has "$err" "^stoker_classifier: error: --data $dir/fifo: is a FIFO (named pipe), not a folder"
expect 1 timeout 60 "$classifier" --device cpu --data "$dir/fifo-db"
has "$err" "^stoker_classifier: error: --data $dir/fifo-db: $dir/fifo-db/data.mdb is a FIFO"
expect 1 timeout 60 "$classifier" --device cpu --data "$dir/db" --val "$dir/fifo-db"
has "$err" "--val $dir/fifo-db: $dir/fifo-db/data.mdb is a FIFO"

# --- an empty path is not "off": refused naming the flag.
for flag in --save --metrics --checkpoint-dir --val; do
  expect 105 run_classifier "$flag" ""
  has "$err" "^$flag: an empty path does not turn it off"
done
for flag in --data --text --data-cache --tokenizer --parity-dir --save --metrics --checkpoint-dir \
  --val; do
  expect 105 "$gpt" --device cpu "$flag" ""
  has "$err" "^$flag: an empty path does not turn it off"
done
expect 105 "$classifier" --device cpu --data ""
has "$err" "^--data: an empty path does not turn it off"

# --- the library's errors name the programs' flags, not the C++ options.
expect 1 "$gpt" --device cpu --data "$dir/tokens.u16" --vocab 256 --sample 0 --lr 1e30 \
  --steps 20 --log-interval 1 --warmup 0
has "$err" "^stoker_gpt: error: training stopped: the loss became NaN/Inf"
has "$err" "Lower the learning rate (--lr), enable gradient clipping (--clip)"
hasnt "$err" "Options::"
hasnt "$err" "clip_grad_norm"
expect 1 run_classifier --lr 1e30 --log-interval 1
has "$err" "^stoker_classifier: error: training stopped: the loss became NaN/Inf"
has "$err" "Lower the learning rate (--lr)"
hasnt "$err" "Options::"
hasnt "$err" "clip_grad_norm"

# --- the stoker tool: an unknown subcommand is named, with the valid ones.
expect 109 "$stoker" frobnicate
has "$err" "unknown subcommand 'frobnicate': the subcommands are pack, pack-text, info, launch, doctor"

# --- a damaged record (tests/cli/damage_record.sh: its magic overwritten).
"$stoker" pack synth --out "$dir/bad" --samples 64 --classes 4 --size 32 --no-progress > /dev/null
[ "$(sh "$(dirname "$0")/damage_record.sh" "$dir/bad")" -ge 1 ] || fail "no record damaged"
bad_classifier() {
  "$classifier" --data "$dir/bad" --device cpu --epochs 2 --batch 16 --image-size 16 "$@"
}
expect 1 bad_classifier
has "$err" "^stoker_classifier: error: .*key 00000000[0-9][0-9]: bad magic"
expect 1 bad_classifier --on-corrupt fail
has "$err" "key 00000000[0-9][0-9]: bad magic"
expect 0 bad_classifier --on-corrupt skip
has "$out" "^epoch 2/2: "
has "$out" "^--on-corrupt skip: [1-9][0-9]* bad samples skipped"

rm -rf "$dir"
if [ "$failures" -gt 0 ]; then
  echo "examples CLI test: $failures failures"
  exit 1
fi
echo "examples CLI test passed"
