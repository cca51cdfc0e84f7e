#!/usr/bin/env bash
# The GPU-host scripts and the PyTorch peers without a GPU (CTest scripts.cli, label cpu):
# every script answers --help and rejects a bad argument with a message that names it;
# gpu-measure.sh finds every peer it runs inside the repository, also in a copy of the tree with
# nothing beside it, and names a missing one; each peer program answers --help without PyTorch;
# kill-rank-check.sh judges a job that stops after a killed rank and one that hangs, with a
# stand-in launcher.
#
#   bash tests/cli/scripts_cli_test.sh SOURCE_DIR SCRATCH_DIR
set -uo pipefail
src=${1:?usage: scripts_cli_test.sh SOURCE_DIR SCRATCH_DIR}
scratch=${2:?usage: scripts_cli_test.sh SOURCE_DIR SCRATCH_DIR}
rm -rf "$scratch"
mkdir -p "$scratch"
fails=0
passes=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { passes=$((passes + 1)); }

# expect RC PATTERN CMD...: CMD exits with RC and its output (stdout + stderr) matches PATTERN.
expect() {
  local want=$1 pattern=$2 out rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc != "$want" ]]; then
    fail "'$*' exited $rc, expected $want; output:"
    echo "$out" | head -20 | sed 's/^/    /'
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    fail "'$*': output does not match /$pattern/:"
    echo "$out" | head -20 | sed 's/^/    /'
  else
    pass
  fi
}

cd "$src" || exit 1
S=scripts
export STOKER_BUNDLE=$scratch/no-bundle STOKER_MEASURE_OUT=$scratch/measure \
  STOKER_GPU_CHECK_OUT=$scratch/gpu-check STOKER_IMAGENET_KIT=$scratch/no-kit

# --help: exit 0 and the usage, which names the script.
for s in gpu-check gpu-measure make-imagenet-like kill-rank-check; do
  expect 0 "bash scripts/$s\\.sh" bash "$S/$s.sh" --help
done

# Bad arguments: exit 2 and a message naming the script and what was wrong.
expect 2 "gpu-check: unknown command 'bogus'" bash "$S/gpu-check.sh" bogus
expect 2 "gpu-check: run: unknown option '--frob'" bash "$S/gpu-check.sh" run --frob
expect 2 "gpu-check: --out needs a folder" bash "$S/gpu-check.sh" run --out
expect 2 "gpu-check: exec: no program given" bash "$S/gpu-check.sh" exec
expect 2 "gpu-measure: unknown measurement 'bogus'" bash "$S/gpu-measure.sh" run train bogus
expect 2 "gpu-measure: unknown command 'stage'" bash "$S/gpu-measure.sh" stage
expect 2 "make-imagenet-like: make: N='many' is not a positive number" \
  bash "$S/make-imagenet-like.sh" make "$scratch/jpegs" many
expect 2 "make-imagenet-like: kit: --out is an option of measure" \
  bash "$S/make-imagenet-like.sh" kit --out "$scratch/x"
expect 2 "kill-rank-check: launcher 'mpirun' is not stoker or torchrun" \
  bash "$S/kill-rank-check.sh" mpirun true
expect 2 "kill-rank-check: no program given" bash "$S/kill-rank-check.sh" stoker
expect 2 "kill-rank-check: STOKER_NPROC='one' is not a whole number" \
  env STOKER_NPROC=one bash "$S/kill-rank-check.sh" torchrun true

# Without a bundle, run says where one comes from instead of failing later.
expect 1 "no bundle at .*gpu-check.sh build" bash "$S/gpu-check.sh" run
expect 1 "no GPU bundle at .*gpu-check.sh build" bash "$S/gpu-measure.sh" run gpt
expect 1 "no photos in .*kit" bash "$S/make-imagenet-like.sh" make "$scratch/jpegs" 10

# The peers: all found in this tree, none outside it.
expect 0 "ok +benchmarks/peers/torch_train.py" bash "$S/gpu-measure.sh" peers
out=$(bash "$S/gpu-measure.sh" peers 2>&1)
if grep -v '^ok ' <<<"$out" | grep -q .; then fail "gpu-measure.sh peers: not all ok:"$'\n'"$out"; else pass; fi
n=$(grep -c '^ok .*benchmarks/peers/' <<<"$out")
((n >= 8)) && pass || fail "gpu-measure.sh peers lists $n files of benchmarks/peers, expected >= 8"

# ... also in a copy of the tree with nothing beside it; a missing peer is named.
copy=$scratch/lone/stoker
mkdir -p "$copy"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard -- scripts benchmarks/peers tests/parity examples/gpt/data |
    while IFS= read -r -d '' f; do [[ -f $f ]] && { mkdir -p "$copy/$(dirname "$f")"; cp "$f" "$copy/$f"; }; done
else
  cp -r scripts "$copy/" && mkdir -p "$copy/benchmarks" "$copy/tests" "$copy/examples/gpt" &&
    cp -r benchmarks/peers "$copy/benchmarks/" && cp -r tests/parity "$copy/tests/" &&
    cp -r examples/gpt/data "$copy/examples/gpt/"
fi
expect 0 "ok +benchmarks/peers/torch_ddp.py" bash "$copy/scripts/gpu-measure.sh" peers multi
rm "$copy/benchmarks/peers/torch_ddp.py"
expect 1 "MISSING +benchmarks/peers/torch_ddp.py \(needed by 'multi'\)" \
  bash "$copy/scripts/gpu-measure.sh" peers multi
expect 0 "ok +benchmarks/peers/torch_train.py" bash "$copy/scripts/gpu-measure.sh" peers train

# Every peer program parses its arguments before it needs PyTorch.
for f in benchmarks/peers/torch_*.py benchmarks/peers/make_imagenet_like.py; do
  expect 0 "usage: $(basename "$f")" python3 "$f" --help
done
expect 2 "invalid choice: 'lstm'" python3 benchmarks/peers/torch_train.py lstm
expect 2 "unknown model 'bert'" python3 benchmarks/peers/torch_ddp.py bert

# kill-rank-check.sh with a stand-in for `stoker launch`: ranks are PROGRAM with RANK set.
fake=$scratch/fake
mkdir -p "$fake"
cat >"$fake/rank" <<'EOF'
#!/usr/bin/env bash
echo "rank $RANK up"
sleep 30
EOF
# A launcher that stops every rank when one ends (what stoker launch does).
cat >"$fake/launcher" <<'EOF'
#!/usr/bin/env bash
[[ $1 == launch && $2 == --nproc-per-node ]] || exit 9
n=$3; shift 3
pids=()
for ((r = 0; r < n; ++r)); do RANK=$r "$@" & pids+=($!); done
wait -n; rc=$?
echo "FAILED: a rank exited with status $rc"
kill "${pids[@]}" 2>/dev/null; wait
exit 1
EOF
# A launcher that never notices (the job hangs).
cat >"$fake/hanging" <<'EOF'
#!/usr/bin/env bash
n=$3; shift 3
for ((r = 0; r < n; ++r)); do RANK=$r "$@" & done
wait
EOF
chmod +x "$fake/rank" "$fake/launcher" "$fake/hanging"
expect 0 "job ended: yes .*launcher exit code 1" \
  env STOKER_CLI="$fake/launcher" STOKER_KILL_AFTER=1 bash "$S/kill-rank-check.sh" stoker "$fake/rank"
expect 1 "job ended: NO .*launcher exit code timeout" \
  env STOKER_CLI="$fake/hanging" STOKER_KILL_AFTER=1 STOKER_END_TIMEOUT=1 \
  bash "$S/kill-rank-check.sh" stoker "$fake/rank"
# the hanging job's whole session was killed: no rank of it is left
if pgrep -f -- "$fake/rank" >/dev/null; then fail "kill-rank-check.sh left ranks of the hanging job running"; else pass; fi

echo "$passes passed, $fails failed"
((fails == 0))
