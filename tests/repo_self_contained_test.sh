#!/usr/bin/env bash
# The repository stands on its own (CTest repo.self_contained, label cpu):
#  1. no file refers to anything outside the tree or to the setup it was developed with: no
#     path into a sibling "shared" folder, no design or GPU-notes file that the tree does not
#     hold, no output-folder variable or transfer folder of a particular tool;
#  2. every link to a section of a doc (docs/NAME.md#anchor in any file, NAME.md#anchor
#     inside docs/) names a heading that exists in that doc.
#
#   bash tests/repo_self_contained_test.sh SOURCE_DIR
#
# Searches the files git tracks plus the untracked ones it does not ignore (without git: every
# file outside .git and the build folders). Excluded: examples/gpt/data/kjv-genesis-exodus.txt,
# the bundled public-domain text of the GPT example, where the only match is an English verb of
# Genesis and Exodus, not a reference.
set -uo pipefail
root=${1:?usage: repo_self_contained_test.sh SOURCE_DIR}
cd "$root" || { echo "FAIL: cannot enter $root"; exit 1; }
text=examples/gpt/data/kjv-genesis-exodus.txt

# The pattern of the issue's check, spelled in pieces so that this file does not match itself.
dollar='\$'
pattern="\\.\\./shared|DESIGN\\.md|GPU\\.md|${dollar}OUT\\b|ca""rry"

fail=0
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  hits=$(git grep -nE --untracked "$pattern" -- . ":(exclude)$text")
  files=$(git ls-files --cached --others --exclude-standard)
else
  hits=$(grep -rnE --exclude-dir=.git --exclude-dir=build --exclude-dir='build-*' "$pattern" . |
         grep -v "^\./$text:" | sed 's|^\./||')
  files=$(find . -path ./.git -prune -o -path ./build -prune -o -path './build-*' -prune -o \
               -type f -print | sed 's|^\./||')
fi
if [[ -n $hits ]]; then
  echo "FAIL: references outside the repository or to its development setup:"
  echo "$hits" | sed 's/^/  /'
  fail=1
else
  echo "ok: no references outside the repository ($(echo "$files" | wc -l) files searched)"
fi

# GitHub's heading anchors: lower case, punctuation dropped (hyphen and underscore kept),
# spaces to hyphens; plus explicit <a id="..."> / <a name="...">.
anchors_of() {
  sed -n 's/^#\{1,6\}[[:space:]]\{1,\}//p' "$1" |
    tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'
  grep -oE '<a (id|name)="[^"]+"' "$1" | sed 's/.*="//; s/"$//'
}

checked=0
while IFS= read -r ref; do
  [[ -n $ref ]] || continue
  src=${ref%%:*}
  link=${ref#*:}
  doc=${link%%#*}
  anchor=${link#*#}
  # inside docs/, NAME.md is relative to docs/
  if [[ $doc != docs/* && $src == docs/* ]]; then doc=docs/$doc; fi
  [[ $doc == docs/* ]] || continue
  checked=$((checked + 1))
  if [[ ! -f $doc ]]; then
    echo "FAIL: $src links to $link, but $doc does not exist"
    fail=1
  elif ! grep -qxF -- "$anchor" <<<"$(anchors_of "$doc")"; then
    echo "FAIL: $src links to $link, but $doc has no heading with that anchor"
    fail=1
  fi
done < <(echo "$files" | grep -v -xF "$text" | tr '\n' '\0' |
           xargs -0 grep -oHE '(docs/)?[a-z_]+\.md#[A-Za-z0-9_-]+' 2>/dev/null | sort -u)
echo "ok: $checked links to doc sections checked"

if ((fail)); then
  echo "repo.self_contained: FAILED"
  exit 1
fi
echo "repo.self_contained: passed"
