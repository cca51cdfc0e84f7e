#!/usr/bin/env python3
"""Proves that html_browser_check.py can fail: runs it on three small pages.

  good.html      2 charts following the report's conventions        -> exit 0
  throws.html    the same, plus an inline <script> that throws      -> exit 1, names the error
  mismatch.html  a polyline whose data-points disagrees with points -> exit 1, names the series

Each page is checked by the real command line (a subprocess), so argument parsing, exit codes
and the summary line are tested as CTest will run them. Exit 0 when all three behave, 1 when
one does not, 77 when no browser is found (1 instead when STOKER_REQUIRE_BROWSER is set).

usage: html_browser_check_selftest.py [--chromium PATH] [--keep DIR]
  --keep DIR  write the pages and screenshots to DIR (kept) instead of a temporary folder
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "html_browser_check.py")
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True   # no __pycache__ in the source tree
import html_browser_check  # noqa: E402  (for find_browser / the skip rule only)


def polyline(series, pairs):
    pts = " ".join(f"{x},{y}" for x, y in pairs)
    return (f'<polyline class="series" data-series="{series}" data-points="{len(pairs)}" '
            f'points="{pts}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')


def chart(name, title, series):
    """An SVG chart as the report draws it: a frame, a title, polylines."""
    body = "\n".join(series)
    return f"""<h2>{title}</h2>
<svg class="chart" data-chart="{name}" width="800" height="240" viewBox="0 0 800 240"
     xmlns="http://www.w3.org/2000/svg">
  <rect x="40" y="10" width="740" height="200" fill="none" stroke="#888"/>
  <text x="45" y="230" font-size="12">{title} (test page)</text>
{body}
</svg>"""


def page(title, charts, script=""):
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body {{ font-family: sans-serif; margin: 20px; }}</style></head>
<body>
<h1>{title}</h1>
<p>stoker diagnostics report: self-test page for the browser check.</p>
{charts}
{script}
<script>document.body.setAttribute("data-report-ready", "1");</script>
</body></html>
"""


def wave(n, y0, amp):
    return [(40 + i * 740 // max(1, n - 1), y0 + (i * 37 % 11 - 5) * amp) for i in range(n)]


def good_charts():
    return (chart("step_time", "Step time (ms)", [polyline("step_ms", wave(120, 110, 8))]) + "\n"
            + chart("gpu_util", "GPU utilization (%)",
                    [polyline("util_gpu", wave(300, 100, 6)),
                     polyline("util_mem", wave(300, 150, 3))]))


EXPECT = {"charts": {"step_time": {"step_ms": 120}, "gpu_util": {"util_gpu": 300}},
          "min_charts": 2}


def pages():
    good = page("Good report", good_charts())
    throws = page("Report whose script throws", good_charts(),
                  '<script>throw new Error("selftest-boom");</script>')
    # data-points says 120, points holds 119 pairs.
    bad_pl = polyline("step_ms", wave(119, 110, 8)).replace('data-points="119"',
                                                            'data-points="120"')
    mismatch = page("Report with a wrong data-points",
                    chart("step_time", "Step time (ms)", [bad_pl]) + "\n"
                    + chart("gpu_util", "GPU utilization (%)",
                            [polyline("util_gpu", wave(300, 100, 6))]))
    return [
        # name, html, expected exit, text the output must contain
        ("good", good, 0, "html_browser_check: OK (2 charts, 3 series, 720 points"),
        ("throws", throws, 1, "selftest-boom"),
        ("mismatch", mismatch, 1, "step_time/step_ms: data-points=120 but points has 119"),
    ]


def main():
    ap = argparse.ArgumentParser(description="self-test of html_browser_check.py")
    ap.add_argument("--chromium")
    ap.add_argument("--keep", help="folder for the pages and screenshots (kept)")
    args = ap.parse_args()

    if html_browser_check.find_browser(args.chromium) is None:
        return html_browser_check.no_browser_exit("no browser to run the self-test with")

    tmp = None
    if args.keep:
        out = args.keep
        os.makedirs(out, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="stoker-html-selftest-")
        out = tmp.name
    expect_path = os.path.join(out, "expect.json")
    with open(expect_path, "w") as f:
        json.dump(EXPECT, f)

    failures = 0
    for name, html, want_rc, want_text in pages():
        html_path = os.path.join(out, f"{name}.html")
        with open(html_path, "w", encoding="utf-8") as f:
            f.write(html)
        cmd = [sys.executable, CHECK, "--html", html_path, "--expect", expect_path,
               "--screenshot", os.path.join(out, f"{name}.png"), "--timeout", "60"]
        if args.chromium:
            cmd += ["--chromium", args.chromium]
        t0 = time.monotonic()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        dt = time.monotonic() - t0
        ok = r.returncode == want_rc and want_text in r.stdout
        print(f"--- {name}.html: exit {r.returncode} (want {want_rc}) in {dt:.2f} s: "
              f"{'as expected' if ok else 'WRONG'}")
        print(r.stdout.rstrip())
        if not ok:
            failures += 1
            if want_text not in r.stdout:
                print(f"*** expected the output to contain: {want_text}")
    if tmp:
        tmp.cleanup()
    print(f"html_browser_check_selftest: {'OK' if not failures else f'{failures} of 3 FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
