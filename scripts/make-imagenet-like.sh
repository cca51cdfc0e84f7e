#!/usr/bin/env bash
# The ImageNet-like JPEG set for the loader measurement, and the side-by-side run of stoker's
# loader and PyTorch's DataLoader on it (docs/benchmarks.md, "Loader throughput").
#
#   bash scripts/make-imagenet-like.sh kit             # HERE: real photos (Debian's
#        mate-backgrounds, via apt-get download + dpkg -x) and the peer scripts from
#        ../shared/peers into build/imagenet-kit/ (ignored by git; ~7 MiB, carried to the GPU
#        machine, where ../shared does not travel)
#   bash scripts/make-imagenet-like.sh make DST [N]    # anywhere with python3 + PIL: N (20000)
#        ImageNet-like JPEGs (random crops of the photos, shorter side 300-500 px, q85-95) into
#        DST/NNN/imgNNNNNNN.jpg
#   bash scripts/make-imagenet-like.sh measure [N]     # THERE, from the repository root, $OUT set:
#        make N JPEGs in /tmp, then stoker_loader_throughput --folder (packs them into LMDB
#        first, measures the crop-decode ceiling and the loader for each thread count) and
#        torch_loader.py on the same files; logs and JSON into $OUT
#
# Device-tool call (after `bash scripts/gpu-check.sh build` and `... kit` here):
#   carry   = ["build-gpu/carry", "build/imagenet-kit"]
#   command = "bash scripts/make-imagenet-like.sh measure"
# Knobs for `measure`: STOKER_LT_THREADS (default 1,4,8,16,auto), STOKER_LT_EPOCHS (2),
# STOKER_LT_WARMUP (1), STOKER_TORCH_WORKERS ("8 16"), STOKER_SKIP_TORCH=1,
# STOKER_LT_PLAIN=16,auto (also run the loader on the files packed byte for byte, without
# restart markers, at these thread counts: loader_throughput_plain.log).
# Files written to $OUT: make.log, loader_throughput.log, loader_throughput.json,
# torch_loader.log, summary.txt.
set -euo pipefail
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$SELF")/.."
ROOT=$PWD
KIT=build/imagenet-kit
PEERS_SRC=${STOKER_PEERS_DIR:-$ROOT/../shared/peers}
MAX_PHOTO_BYTES=$((4 * 1024 * 1024))  # leaves out the 8 and 16 MB 4K/5K duplicates
KIT_LIMIT_MIB=30

usage() { sed -n '2,27p' "$SELF"; }

cmd_kit() {
  local tmp
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/imagenet-kit.XXXXXX")
  trap 'rm -rf "$tmp"' RETURN
  (cd "$tmp" && apt-get download mate-backgrounds >/dev/null 2>&1) || {
    echo "make-imagenet-like: 'apt-get download mate-backgrounds' failed (needs the Debian" \
         "package lists: apt-get update)" >&2
    exit 1
  }
  local deb
  deb=$(ls "$tmp"/mate-backgrounds_*.deb)
  dpkg -x "$deb" "$tmp/x"
  rm -rf "$KIT"
  mkdir -p "$KIT/photos" "$KIT/peers"
  local f n=0
  while IFS= read -r -d '' f; do
    (($(stat -c %s "$f") <= MAX_PHOTO_BYTES)) || continue
    cp "$f" "$KIT/photos/"
    n=$((n + 1))
  done < <(find "$tmp/x" -type f -iname '*.jpg' -print0 | sort -z)
  for f in make_imagenet_like.py torch_loader.py; do
    if [[ ! -f $PEERS_SRC/$f ]]; then
      echo "make-imagenet-like: $PEERS_SRC/$f not found (set STOKER_PEERS_DIR)" >&2
      exit 1
    fi
    cp "$PEERS_SRC/$f" "$KIT/peers/"
  done
  {
    echo "source=$(basename "$deb")"
    echo "photos=$n"
    (cd "$KIT" && sha256sum photos/* peers/*)
  } >"$KIT/MANIFEST"
  local bytes
  bytes=$(du -sb "$KIT" | cut -f1)
  echo "$KIT: $n photos from $(basename "$deb") + peer scripts, $(awk -v b="$bytes" \
    'BEGIN { printf "%.1f MiB", b / 1048576 }')"
  if ((bytes > KIT_LIMIT_MIB * 1048576)); then
    echo "make-imagenet-like: over ${KIT_LIMIT_MIB} MiB: too big to carry" >&2
    exit 1
  fi
}

# A python3 that has PIL: $PYTHON, python3 on PATH, or Debian's /usr/bin/python3.
find_python() {
  local p
  for p in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import PIL' 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo "make-imagenet-like: no python3 with PIL (Debian: apt-get install python3-pil)" >&2
  exit 1
}

cmd_make() {
  local dst=${1:?usage: make DST [N]} n=${2:-20000}
  [[ -d $KIT/photos ]] || { echo "make-imagenet-like: $KIT missing: run '$0 kit' first" >&2; exit 1; }
  rm -rf "$dst"
  PYTHONUNBUFFERED=1 "$(find_python)" "$KIT/peers/make_imagenet_like.py" "$KIT/photos" "$dst" "$n"
}

cmd_measure() {
  local n=${1:-20000}
  : "${OUT:=$ROOT/build/imagenet-measure-out}"
  mkdir -p "$OUT"
  local dst=${TMPDIR:-/tmp}/imagenet_like work=${TMPDIR:-/tmp}/imagenet_like_lmdb
  local bench=build-gpu/carry/benchmarks/stoker_loader_throughput
  [[ -x $bench ]] || bench=build/loader/benchmarks/stoker_loader_throughput
  [[ -x $bench ]] || { echo "make-imagenet-like: no stoker_loader_throughput built" >&2; exit 1; }
  echo "==== $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $(nproc) CPUs"
  nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
  local t0=$SECONDS
  echo "==== making $n ImageNet-like JPEGs in $dst"
  cmd_make "$dst" "$n" 2>&1 | tee "$OUT/make.log"
  echo "  ($((SECONDS - t0)) s)"

  local -a run=("$bench")
  [[ $bench == build-gpu/carry/* ]] && run=(bash scripts/gpu-check.sh exec "$bench")
  # run_loader LOG ARGS...: the loader on the JPEGs (packed into $work, removed after), output
  # teed into $OUT/LOG; sets rc_loader.
  local rc_loader
  run_loader() {
    local log=$1
    shift
    t0=$SECONDS
    echo "==== stoker_loader_throughput $* ($bench)"
    rm -rf "$work"
    set +e
    "${run[@]}" --folder "$dst" --workdir "$work" --epochs "${STOKER_LT_EPOCHS:-2}" \
      --warmup "${STOKER_LT_WARMUP:-1}" "$@" 2>&1 | tee "$OUT/$log"
    rc_loader=${PIPESTATUS[0]}
    set -e
    rm -rf "$work"
    echo "  ($((SECONDS - t0)) s, exit $rc_loader)"
  }
  run_loader loader_throughput.log --threads "${STOKER_LT_THREADS:-1,4,8,16,auto}" \
    --json "$OUT/loader_throughput.json"
  local rc_stoker=$rc_loader
  if [[ -n ${STOKER_LT_PLAIN:-} ]]; then
    # The same files packed byte for byte (no restart markers): the whole-image decode path.
    run_loader loader_throughput_plain.log --threads "$STOKER_LT_PLAIN" --no-restart-markers
  fi

  local rc_torch=skipped
  if [[ -z ${STOKER_SKIP_TORCH:-} ]]; then
    t0=$SECONDS
    echo "==== torch_loader.py $dst ${STOKER_TORCH_WORKERS:-8 16}"
    set +e
    # shellcheck disable=SC2086  # the worker counts are separate arguments
    PYTHONUNBUFFERED=1 python3 "$KIT/peers/torch_loader.py" "$dst" ${STOKER_TORCH_WORKERS:-8 16} \
      2>&1 | tee "$OUT/torch_loader.log"
    rc_torch=${PIPESTATUS[0]}
    set -e
    echo "  ($((SECONDS - t0)) s, exit $rc_torch)"
  fi

  {
    echo "==== summary"
    grep -E '^(cpu|device|libjpeg-turbo|dataset):' "$OUT/loader_throughput.log" || true
    sed -n '/^ceiling:/,/^$/p' "$OUT/loader_throughput.log"
    sed -n '/^loader:/,$p' "$OUT/loader_throughput.log" | grep -v '^JSON' || true
    if [[ -f $OUT/loader_throughput_plain.log ]]; then
      echo "without restart markers (whole-image decode path):"
      sed -n '/^ceiling:/,/^$/p' "$OUT/loader_throughput_plain.log"
      sed -n '/^loader:/,$p' "$OUT/loader_throughput_plain.log" | grep -v '^JSON' || true
    fi
    [[ -f $OUT/torch_loader.log ]] && grep -E '^(files|single-core|DataLoader)' "$OUT/torch_loader.log"
    echo "stoker exit $rc_stoker, torch exit $rc_torch"
  } | tee "$OUT/summary.txt"
  [[ $rc_stoker == 0 ]]
}

case "${1:-}" in
  kit) shift; cmd_kit "$@" ;;
  make) shift; cmd_make "$@" ;;
  measure) shift; cmd_measure "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
