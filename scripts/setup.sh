#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages stoker needs to build and test, and only those that are
# missing, then the Python modules the interop tests use (numpy, safetensors, sentencepiece) for the `python3`
# on PATH, with pip, when they do not import. Idempotent: when everything is present it only
# asks dpkg and Python (well under 2 s) and touches neither the network nor apt's lists. The CUDA toolkit is NOT installed here: CUDA
# builds use the toolkit already on the machine (see README.md); without it, stoker builds its
# CPU backend only.
#
#   bash scripts/setup.sh            # install what is missing
#   bash scripts/setup.sh --tests    # ... and the test-only tools (a headless browser)
#   bash scripts/setup.sh --check    # only report what is missing (exit 1 if anything is)
# Environment: STOKER_SETUP_NO_PYTHON=1 skips the Python modules.
set -euo pipefail

check_only=0
with_tests=0
case "${1:-}" in
  --check) check_only=1 ;;
  --tests) with_tests=1 ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  "") ;;
  *) echo "setup.sh: unknown argument '$1' (use --check, --tests or nothing)" >&2; exit 2 ;;
esac

# One entry per need; "a|b|c" = alternatives (the first one apt knows is installed when none is
# present). Why each one is needed: README.md, section Dependencies.
PACKAGES=(
  cmake                  # build system (presets need >= 3.25)
  ninja-build            # generator used by CMakePresets.json
  g++                    # C++20 compiler
  clang                  # sanitizer builds: ASan+UBSan with the fuzz targets (asan), ThreadSanitizer (tsan)
  libclang-rt-dev        # clang's sanitizer runtimes
  binutils               # strip/ldd-side tools used by scripts/gpu-check.sh
  libtbb-dev             # oneTBB: CPU parallelism, data-loader pipeline
  liblmdb-dev            # LMDB: packed datasets
  libturbojpeg0-dev      # libjpeg-turbo, TurboJPEG API
  "libjpeg62-turbo-dev|libjpeg-turbo8-dev|libjpeg-dev"  # libjpeg API (DCT-scaled decode)
  libopenblas-dev        # BLAS for the CPU GEMM (fast)
  libblas-dev            # netlib reference BLAS (static, for the GPU-machine build)
  libgtest-dev           # GoogleTest
  libgmock-dev           # GoogleMock
  libbenchmark-dev       # Google Benchmark
  libcli11-dev           # command-line parsing (stoker CLI, examples)
  nlohmann-json3-dev     # JSON (reports, configs, safetensors headers)
  libxxhash-dev          # xxHash: checksums of packed records and checkpoint tensors
  libsentencepiece-dev   # SentencePiece: the tokenizer of `stoker pack-text`
  libfmt-dev             # fmt: string formatting of messages
  python3                # helper scripts, interop tests
)
# Test-only tools (--tests): the HTML report test loads the report in a headless browser. Debian
# ships chromium as a package; where apt has none (Ubuntu ships it as a snap) that test skips,
# except in CI (scripts/test.sh requires the browser there).
declare -A optional=()
if ((with_tests)); then
  PACKAGES+=(
    chromium             # headless browser: the HTML report test
    fonts-dejavu-core    # font for that test's screenshots (without any font, text is not drawn)
  )
  optional=([chromium]=1 [fonts-dejavu-core]=1)
fi

# Which alternatives are installed? One dpkg-query call for all names (fast).
all_names=()
for entry in "${PACKAGES[@]}"; do
  IFS='|' read -r -a alts <<<"$entry"
  all_names+=("${alts[@]}")
done

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "setup.sh: dpkg-query not found: this is not a Debian/Ubuntu system." >&2
  echo "Install by hand the equivalents of: ${all_names[*]}" >&2
  exit 1
fi

declare -A installed=()
while read -r name status; do
  [[ "$status" == "installed" ]] && installed["${name%%:*}"]=1
done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${all_names[@]}" 2>/dev/null || true)

missing=()   # entries (with alternatives) that have no installed alternative
for entry in "${PACKAGES[@]}"; do
  IFS='|' read -r -a alts <<<"$entry"
  ok=0
  for a in "${alts[@]}"; do [[ -n "${installed[$a]:-}" ]] && ok=1 && break; done
  ((ok)) || missing+=("$entry")
done

install_apt() {
  echo "setup.sh: missing: ${missing[*]}"
  if ((check_only)); then return 1; fi

  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup.sh: apt-get is not available; install these packages by other means: ${missing[*]}" >&2
    return 1
  fi

  local entry alts ok a pick cand
  to_install=()
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
      SUDO=(sudo)
    else
      echo "setup.sh: not root and sudo is not available; as root run:" >&2
      echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]//|/ or }" >&2
      return 1
    fi
  fi

  export DEBIAN_FRONTEND=noninteractive
  echo "setup.sh: apt-get update"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1

  # Resolve alternatives: the first name apt has a candidate for.
  for entry in "${missing[@]}"; do
    IFS='|' read -r -a alts <<<"$entry"
    pick=""
    for a in "${alts[@]}"; do
      cand=$(apt-cache policy "$a" 2>/dev/null | awk '/Candidate:/ {print $2}')
      if [[ -n "$cand" && "$cand" != "(none)" ]]; then pick=$a; break; fi
    done
    if [[ -z "$pick" && -n "${optional[$entry]:-}" ]]; then
      echo "setup.sh: '$entry' is not available from apt's sources: the tests that need it skip" >&2
      continue
    fi
    if [[ -z "$pick" ]]; then
      echo "setup.sh: no package of '${entry//|/ or }' is available from apt's sources" >&2
      return 1
    fi
    to_install+=("$pick")
  done

  ((${#to_install[@]} > 0)) || return 0
  echo "setup.sh: installing: ${to_install[*]}"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${to_install[@]}" || return 1
  echo "setup.sh: installed: ${to_install[*]}"
}

# Python modules for the interop tests, installed into the python3 found on PATH (pyenv's on the
# development machines). Module name = pip package name here.
PY_MODULES=(numpy safetensors sentencepiece)  # sentencepiece: pack-text against Python's encoding
install_python() {
  local py
  py=$(command -v python3 || true)
  if [[ -z $py ]]; then
    echo "setup.sh: python3 not on PATH; skipping Python modules" >&2
    return 0
  fi
  local m missing_py=()
  for m in "${PY_MODULES[@]}"; do
    "$py" -c "import $m" >/dev/null 2>&1 || missing_py+=("$m")
  done
  ((${#missing_py[@]} == 0)) && return 0
  echo "setup.sh: Python modules missing for $py: ${missing_py[*]}"
  ((check_only)) && return 1
  if ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "setup.sh: pip is not available for $py; install python3-pip, then: $py -m pip install ${missing_py[*]}" >&2
    return 1
  fi
  local log
  log=$(mktemp)
  if ! "$py" -m pip install --quiet --disable-pip-version-check "${missing_py[@]}" >"$log" 2>&1; then
    if grep -q externally-managed "$log"; then  # Debian's own python3 (PEP 668)
      "$py" -m pip install --quiet --disable-pip-version-check --break-system-packages \
        "${missing_py[@]}" || { rm -f "$log"; return 1; }
    else
      cat "$log" >&2
      rm -f "$log"
      return 1
    fi
  fi
  rm -f "$log"
  echo "setup.sh: installed Python modules: ${missing_py[*]}"
}

rc=0
if ((${#missing[@]} == 0)); then
  echo "setup.sh: all ${#PACKAGES[@]} required packages are installed."
else
  install_apt || rc=1
fi
if [[ -z ${STOKER_SETUP_NO_PYTHON:-} ]] && ((rc == 0 || check_only)); then
  install_python || rc=1
fi
exit "$rc"
