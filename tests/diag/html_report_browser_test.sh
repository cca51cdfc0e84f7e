#!/usr/bin/env bash
# The HTML report in a real headless browser: writes the sample pages (a made-up GPU run and a
# real CPU fit, tests/diag/html_report_sample.cpp), then loads each in chromium
# (html_browser_check.py): no console error, every chart's expected number of points, a
# screenshot kept as a test artifact. Exit 77 (skip) without a browser, unless
# STOKER_REQUIRE_BROWSER is set (scripts/test.sh sets it: CI installs chromium).
#   html_report_browser_test.sh SAMPLE_PROGRAM ARTIFACT_DIR
set -euo pipefail
sample=$1
artifacts=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$artifacts"
"$sample" "$artifacts"
# The check must be able to fail: its own self-test first (a page that throws, a chart whose
# points disagree).
python3 "$here/html_browser_check_selftest.py"
for page in synthetic fit; do
  python3 "$here/html_browser_check.py" --html "$artifacts/$page.html" \
    --expect "$artifacts/$page.expect.json" --screenshot "$artifacts/$page.png"
done
