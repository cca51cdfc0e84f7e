#!/usr/bin/env bash
# The ImageNet-like JPEG set for the loader measurements, and the side-by-side run of stoker's
# loader and PyTorch's DataLoader on it (docs/benchmarks.md, "Loader throughput").
#
#   bash scripts/make-imagenet-like.sh kit [--kit DIR]
#        Real photos for the set: Debian's mate-backgrounds package (apt-get download +
#        dpkg -x; needs the Debian package lists), photos up to 4 MiB each, into
#        DIR/photos/ with a MANIFEST (sha256 of each). Run it where apt-get reaches the Debian
#        archive; copy DIR to the GPU host with the repository if that host has no network.
#   bash scripts/make-imagenet-like.sh make [--kit DIR] [--realistic] DST [N]
#        N (20000) ImageNet-like JPEGs into DST/NNN/imgNNNNNNN.jpg from the kit's photos
#        (benchmarks/peers/make_imagenet_like.py: random crops, shorter side 300-500 px,
#        quality 85-95; smooth, mean ~35 KiB); anywhere with python3 and Pillow. DST is
#        replaced. --realistic: files like ImageNet's own instead (mean ~110 KiB): crops of
#        aspect 3:4 to 16:9, shorter side 333-500 px, longer at most 800, Gaussian grain added,
#        quality 80-98, chroma 4:2:0 / 4:2:2 / 4:4:4, ~5 % grayscale, ~10 % progressive; they
#        cost about twice as much per core to decode (docs/benchmarks.md, "JPEG sets: smooth
#        vs realistic"). Same seed, same files.
#   bash scripts/make-imagenet-like.sh measure [--kit DIR] [--out DIR] [--realistic] [N]
#        On the GPU host, from the repository root: make N JPEGs in ${TMPDIR:-/tmp}
#        (--realistic: the realistic set, as make --realistic), then
#        stoker_loader_throughput --folder (packs them into LMDB first, measures the
#        crop-decode ceiling and the loader at each thread count) and
#        benchmarks/peers/torch_loader.py on the same files.
#   bash scripts/make-imagenet-like.sh --help
#
# The kit: --kit DIR, else $STOKER_IMAGENET_KIT, else build/imagenet-kit.
# Output folder of `measure` (--out DIR, else $STOKER_MEASURE_OUT, else build/imagenet-measure):
# make.log, loader_throughput.log, loader_throughput.json, torch_loader.log, summary.txt.
# stoker_loader_throughput comes from $STOKER_LOADER_BENCH, else the GPU bundle
# ($STOKER_BUNDLE, else build-gpu/bundle; run with its libraries), else build/release or
# build/ci.
# Knobs for `measure`: STOKER_LT_THREADS (default 1,4,8,16,auto), STOKER_LT_EPOCHS (2),
# STOKER_LT_WARMUP (1), STOKER_TORCH_WORKERS ("8 16"), STOKER_SKIP_TORCH=1,
# STOKER_LT_PLAIN=16,auto (also run the loader on the files packed byte for byte, without
# restart markers, at these thread counts: loader_throughput_plain.log).
set -euo pipefail
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$SELF")/.."
KIT=${STOKER_IMAGENET_KIT:-build/imagenet-kit}
OUT_DIR=${STOKER_MEASURE_OUT:-build/imagenet-measure}
BUNDLE=${STOKER_BUNDLE:-build-gpu/bundle}
MAKER=benchmarks/peers/make_imagenet_like.py
TORCH_LOADER=benchmarks/peers/torch_loader.py
MAX_PHOTO_BYTES=$((4 * 1024 * 1024))  # leaves out the 8 and 16 MB 4K/5K duplicates

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$SELF"; }
die() { echo "make-imagenet-like: $*" >&2; exit 2; }

positive() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

cmd_kit() {
  (($# == 0)) || die "kit: unexpected argument '$1' (see --help)"
  command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 ||
    { echo "make-imagenet-like: kit needs apt-get and dpkg (a Debian or Ubuntu machine)" >&2; exit 1; }
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
  mkdir -p "$KIT/photos"
  local f n=0
  while IFS= read -r -d '' f; do
    (($(stat -c %s "$f") <= MAX_PHOTO_BYTES)) || continue
    cp "$f" "$KIT/photos/"
    n=$((n + 1))
  done < <(find "$tmp/x" -type f -iname '*.jpg' -print0 | sort -z)
  ((n > 0)) || { echo "make-imagenet-like: no JPEG photos in $(basename "$deb")" >&2; exit 1; }
  {
    echo "source=$(basename "$deb")"
    echo "photos=$n"
    (cd "$KIT" && sha256sum photos/*)
  } >"$KIT/MANIFEST"
  echo "$KIT: $n photos from $(basename "$deb"), $(du -sh "$KIT" | cut -f1)"
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
  echo "make-imagenet-like: no python3 with Pillow (Debian: apt-get install python3-pil)" >&2
  exit 1
}

cmd_make() {
  local -a mode=()
  if [[ ${1:-} == --realistic ]]; then
    mode=(--realistic)
    shift
  fi
  (($# >= 1 && $# <= 2)) || die "make: expected [--realistic] DST [N] (see --help)"
  local dst=$1 n=${2:-20000}
  positive "$n" || die "make: N='$n' is not a positive number of images"
  [[ -n $dst && $dst != / && $dst != . ]] || die "make: DST='$dst' cannot be replaced"
  [[ -d $KIT/photos ]] || { echo "make-imagenet-like: no photos in $KIT/photos: run '$0 kit' first (or give --kit DIR)" >&2; exit 1; }
  local py
  py=$(find_python)
  rm -rf "$dst"
  PYTHONUNBUFFERED=1 "$py" "$MAKER" "$KIT/photos" "$dst" "$n" ${mode[@]+"${mode[@]}"}
}

cmd_measure() {
  local -a mode=()
  local dst=${TMPDIR:-/tmp}/imagenet_like work=${TMPDIR:-/tmp}/imagenet_like_lmdb
  if [[ ${1:-} == --realistic ]]; then
    mode=(--realistic)
    dst=${TMPDIR:-/tmp}/imagenet_realistic work=${TMPDIR:-/tmp}/imagenet_realistic_lmdb
    shift
  fi
  (($# <= 1)) || die "measure: expected at most N (see --help)"
  local n=${1:-20000}
  positive "$n" || die "measure: N='$n' is not a positive number of images"
  mkdir -p "$OUT_DIR"
  local bench=${STOKER_LOADER_BENCH:-}
  local -a run=()
  if [[ -n $bench ]]; then
    [[ -x $bench ]] || { echo "make-imagenet-like: STOKER_LOADER_BENCH=$bench is not a program" >&2; exit 1; }
    run=("$bench")
  elif [[ -x $BUNDLE/benchmarks/stoker_loader_throughput ]]; then
    bench=$BUNDLE/benchmarks/stoker_loader_throughput
    run=(bash scripts/gpu-check.sh exec --bundle "$BUNDLE" "$bench")
  else
    for bench in build/release/benchmarks/stoker_loader_throughput \
                 build/ci/benchmarks/stoker_loader_throughput ""; do
      [[ -z $bench || -x $bench ]] && break
    done
    [[ -n $bench ]] || { echo "make-imagenet-like: no stoker_loader_throughput: build it" \
                              "(preset release or ci, or the GPU bundle) or set STOKER_LOADER_BENCH" >&2; exit 1; }
    run=("$bench")
  fi
  echo "==== $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $(nproc) CPUs; output in $OUT_DIR"
  nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
  local t0=$SECONDS
  echo "==== making $n ImageNet-like JPEGs ${mode[*]:-(smooth)} in $dst"
  cmd_make ${mode[@]+"${mode[@]}"} "$dst" "$n" 2>&1 | tee "$OUT_DIR/make.log"
  echo "  ($((SECONDS - t0)) s)"

  # run_loader LOG ARGS...: the loader on the JPEGs (packed into $work, removed after), output
  # teed into $OUT_DIR/LOG; sets rc_loader.
  local rc_loader
  run_loader() {
    local log=$1
    shift
    t0=$SECONDS
    echo "==== stoker_loader_throughput $* ($bench)"
    rm -rf "$work"
    set +e
    "${run[@]}" --folder "$dst" --workdir "$work" --epochs "${STOKER_LT_EPOCHS:-2}" \
      --warmup "${STOKER_LT_WARMUP:-1}" "$@" 2>&1 | tee "$OUT_DIR/$log"
    rc_loader=${PIPESTATUS[0]}
    set -e
    rm -rf "$work"
    echo "  ($((SECONDS - t0)) s, exit $rc_loader)"
  }
  run_loader loader_throughput.log --threads "${STOKER_LT_THREADS:-1,4,8,16,auto}" \
    --json "$OUT_DIR/loader_throughput.json"
  local rc_stoker=$rc_loader
  if [[ -n ${STOKER_LT_PLAIN:-} ]]; then
    # The same files packed byte for byte (no restart markers): the whole-image decode path.
    run_loader loader_throughput_plain.log --threads "$STOKER_LT_PLAIN" --no-restart-markers
  fi

  local rc_torch=skipped
  if [[ -z ${STOKER_SKIP_TORCH:-} ]]; then
    t0=$SECONDS
    echo "==== $TORCH_LOADER $dst --workers ${STOKER_TORCH_WORKERS:-8 16}"
    set +e
    # shellcheck disable=SC2086  # the worker counts are separate arguments
    PYTHONUNBUFFERED=1 python3 "$TORCH_LOADER" "$dst" --workers ${STOKER_TORCH_WORKERS:-8 16} \
      2>&1 | tee "$OUT_DIR/torch_loader.log"
    rc_torch=${PIPESTATUS[0]}
    set -e
    echo "  ($((SECONDS - t0)) s, exit $rc_torch)"
  fi

  {
    echo "==== summary"
    grep -E '^(made|  mean)' "$OUT_DIR/make.log" || true  # the set: sizes (and the mix)
    grep -E '^(cpu|device|libjpeg-turbo|dataset):' "$OUT_DIR/loader_throughput.log" || true
    sed -n '/^ceiling:/,/^$/p' "$OUT_DIR/loader_throughput.log"
    sed -n '/^loader:/,$p' "$OUT_DIR/loader_throughput.log" | grep -v '^JSON' || true
    if [[ -f $OUT_DIR/loader_throughput_plain.log ]]; then
      echo "without restart markers (whole-image decode path):"
      sed -n '/^ceiling:/,/^$/p' "$OUT_DIR/loader_throughput_plain.log"
      sed -n '/^loader:/,$p' "$OUT_DIR/loader_throughput_plain.log" | grep -v '^JSON' || true
    fi
    [[ -f $OUT_DIR/torch_loader.log ]] && grep -E '^(files|single-core|DataLoader)' "$OUT_DIR/torch_loader.log"
    echo "stoker exit $rc_stoker, torch exit $rc_torch"
  } | tee "$OUT_DIR/summary.txt"
  [[ $rc_stoker == 0 ]]
}

# Options: --kit DIR (every command), --out DIR (measure); the rest are the command's arguments.
sub=${1:-}
case $sub in
  kit|make|measure) shift ;;
  -h|--help|help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
  *) die "unknown command '$sub': kit, make or measure (see --help)" ;;
esac
args=()
REALISTIC=
while (($#)); do
  case $1 in
    --kit) (($# >= 2)) || die "--kit needs a folder"; KIT=$2; shift 2 ;;
    --kit=*) KIT=${1#--kit=}; shift ;;
    --out) [[ $sub == measure ]] || die "$sub: --out is an option of measure"
           (($# >= 2)) || die "--out needs a folder"; OUT_DIR=$2; shift 2 ;;
    --out=*) [[ $sub == measure ]] || die "$sub: --out is an option of measure"; OUT_DIR=${1#--out=}; shift ;;
    --realistic) [[ $sub != kit ]] || die "kit: --realistic is an option of make and measure"
                 REALISTIC=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "$sub: unknown option '$1' (see --help)" ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -n $KIT ]] || die "--kit: empty folder name"
[[ -n $OUT_DIR ]] || die "--out: empty folder name"
[[ -n $REALISTIC ]] && args=(--realistic ${args[@]+"${args[@]}"})
"cmd_$sub" ${args[@]+"${args[@]}"}
