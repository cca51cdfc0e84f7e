#!/usr/bin/env bash
# The public API stays what an installed package can compile: every header under
# include/stoker/ includes only standard headers, the third-party headers the package config
# finds, and other public headers — never a private one (src/<layer>/*.h), which is not
# installed. Usage: public_headers_test.sh REPO_ROOT
set -uo pipefail
root=${1:?usage: public_headers_test.sh REPO_ROOT}
cd "$root/include" || exit 1
bad=0
while IFS= read -r h; do
  while IFS= read -r inc; do
    if [[ ! -f "$inc" ]]; then
      echo "$h includes \"$inc\", which is not a public header (move it under include/stoker/ or drop the include)"
      bad=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$h")
done < <(find stoker -name '*.h' | sort)
count=$(find stoker -name '*.h' | wc -l)
echo "public headers: $count"
exit $bad
