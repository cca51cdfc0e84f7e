#!/usr/bin/env python3
"""Checks stoker's self-contained HTML diagnostics report in a real headless browser.

usage: html_browser_check.py --html REPORT.html --expect EXPECT.json --screenshot OUT.png
                             [--chromium PATH] [--timeout 60]

Loads REPORT.html (file:// URL, nothing else may be fetched) in headless Chromium and fails when
  * the page logs a console error, throws an uncaught JavaScript exception, fails to load a
    resource, loads anything but itself (data:/blob: URLs aside), opens a dialog or crashes;
  * the rendered DOM breaks the report's conventions: every chart is
    `<svg class="chart" data-chart="NAME">`, every series in it a
    `<polyline class="series" data-series="S" data-points="N" points="x,y x,y ...">` whose
    `points` holds exactly N finite coordinate pairs, and `<body data-report-ready="1">`;
  * the expectations are not met. EXPECT.json:
        {"charts": {"step_time": {"step_ms": 120}, "gpu_util": {"util_gpu": 300}},
         "min_charts": 5}
    each listed chart/series must exist with exactly that many points, and the page must have
    at least min_charts charts;
  * the screenshot (1280 CSS pixels wide, as tall as the page) is not a valid PNG.

Exit status: 0 passed, 1 failed (also: browser hung past --timeout, or it is missing while
STOKER_REQUIRE_BROWSER is set), 77 no browser found (CTest's skip code), 2 bad arguments.
Standard library only.

How the page is observed: Chromium's DevTools protocol over --remote-debugging-pipe (the
browser reads JSON commands from fd 3 and writes replies and events to fd 4, each message ended
by a NUL byte). Why the pipe and not the simpler `--enable-logging=stderr` + `--dump-dom` +
`--screenshot` switches:
  * one browser start gives everything (events, DOM, screenshot); the switches need one start
    each, and start-up is most of the cost on a 2-core CI machine;
  * console calls, uncaught exceptions and failed loads arrive as structured events
    (Runtime.consoleAPICalled, Runtime.exceptionThrown, Log.entryAdded), not as
    stderr lines whose `CONSOLE(...)` format and verbosity rules have changed between Chromium
    versions and which are mixed with the browser's own noise (D-Bus, GPU, fontconfig);
  * the load event says exactly when the page is done, instead of --virtual-time-budget guesses;
  * no TCP port: parallel CTest jobs cannot collide and no network is involved.
"""
import argparse
import base64
import fcntl
import json
import math
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

EXIT_OK, EXIT_FAIL, EXIT_SKIP = 0, 1, 77
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
WINDOW_WIDTH = 1280
MIN_HEIGHT, MAX_HEIGHT = 600, 16384   # screenshot height: the page's, within these bounds
READY_GRACE_S = 5.0   # how long after the load event data-report-ready="1" may still appear
SETTLE_S = 0.3        # events still collected after the screenshot (errors of timers, frames)
MIN_PNG_BYTES = 2000  # a 1280-wide page with charts and text is far larger than this


class BrowserGone(Exception):
    """The browser closed the pipe or the page target crashed: nothing more will come."""


class Timeout(Exception):
    pass


def log(msg):
    print(f"html_browser_check: {msg}", flush=True)


def find_browser(explicit=None):
    """Path of the browser to use, or None. `explicit` may be a name on PATH or a path."""
    if explicit:
        return shutil.which(explicit)
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def no_browser_exit(reason):
    """Skip (77) when no browser is found, unless the environment demands one (CI)."""
    if os.environ.get("STOKER_REQUIRE_BROWSER"):
        log(f"FAIL: {reason} (STOKER_REQUIRE_BROWSER is set; install it: bash scripts/setup.sh)")
        return EXIT_FAIL
    log(f"SKIP: {reason} (install chromium: bash scripts/setup.sh)")
    return EXIT_SKIP


# --------------------------------------------------------------------------------------------
# Browser process and the DevTools pipe
# --------------------------------------------------------------------------------------------

class Browser:
    """A headless Chromium driven over --remote-debugging-pipe, with an overall deadline."""

    def __init__(self, exe, deadline):
        self.deadline = deadline
        self.profile = tempfile.mkdtemp(prefix="stoker-chromium-")
        self.log_path = os.path.join(self.profile, "browser.log")
        self.next_id = 0
        self.buf = bytearray()
        self.proc = None
        # Command pipe (we write, browser reads fd 3) and event pipe (browser writes fd 4).
        cmd_r, cmd_w = os.pipe()
        evt_r, evt_w = os.pipe()
        # The child's ends are first moved to fds >= 5 so that placing them on 3 and 4 in the
        # child cannot overwrite one with the other (os.pipe may well have returned 3..6).
        child_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 5)
        child_w = fcntl.fcntl(evt_w, fcntl.F_DUPFD_CLOEXEC, 5)
        os.close(cmd_r)
        os.close(evt_w)

        def child_fds():   # runs in the child between fork and exec
            os.dup2(child_r, 3)   # dup2's copies are inheritable: they survive the exec
            os.dup2(child_w, 4)

        args = [
            exe,
            "--headless=new",       # accepted since Chromium 109, the only mode since 132
            "--no-sandbox",         # root in CI; containers without user namespaces need it too
            "--disable-gpu",
            "--disable-dev-shm-usage",  # small /dev/shm in containers crashes the renderer
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile}",
            f"--window-size={WINDOW_WIDTH},{MIN_HEIGHT}",
            "--force-device-scale-factor=1",
            "--hide-scrollbars",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-breakpad",
            "--mute-audio",
            "about:blank",
        ]
        # HOME and XDG dirs inside the temporary profile: nothing is written to the user's home
        # (Debian's wrapper script and NSS like to), and all of it goes away with the profile.
        env = dict(os.environ, HOME=self.profile, XDG_CONFIG_HOME=self.profile,
                   XDG_CACHE_HOME=self.profile)
        self.cmd_w, self.evt_r = cmd_w, evt_r
        self.log_file = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=self.log_file, stderr=self.log_file,
                env=env, preexec_fn=child_fds,
                # close_fds=True would close 3 and 4 after preexec_fn. Python opens every fd
                # close-on-exec, so only stdio and the dup2'ed 3 and 4 reach the browser.
                close_fds=False,
                # Own process group: on timeout or exit, one killpg reaches the browser and all
                # the helpers (zygote, renderer, GPU/utility processes) it forked.
                start_new_session=True)
        except OSError:
            self.close()
            raise
        finally:
            os.close(child_r)
            os.close(child_w)
        # Non-blocking both ways: every wait is a select() bounded by the deadline.
        os.set_blocking(self.evt_r, False)
        os.set_blocking(self.cmd_w, False)

    # -- transport -----------------------------------------------------------------------------

    def remaining(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Timeout()
        return left

    def send(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            _, w, _ = select.select([], [self.cmd_w], [], self.remaining())
            if not w:
                raise Timeout()
            try:
                n = os.write(self.cmd_w, data)
            except BlockingIOError:
                continue
            except OSError:   # EPIPE: Python ignores SIGPIPE
                raise BrowserGone("the browser closed its command pipe (it exited or crashed)")
            data = data[n:]
        return self.next_id

    def read_message(self):
        """The next message from the browser (a dict); blocks until the deadline."""
        end = self.buf.find(b"\0")
        while end < 0:
            r, _, _ = select.select([self.evt_r], [], [], self.remaining())
            if not r:
                raise Timeout()
            try:
                chunk = os.read(self.evt_r, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise BrowserGone("the browser closed its event pipe (it exited or crashed)")
            # Only the new chunk is searched: a screenshot reply is megabytes of base64.
            pos = chunk.find(b"\0")
            if pos >= 0:
                end = len(self.buf) + pos
            self.buf += chunk
        raw = bytes(self.buf[:end])
        del self.buf[:end + 1]
        return json.loads(raw)

    # -- shutdown --------------------------------------------------------------------------------

    def close(self, polite=True):
        """Stops the browser and everything it started, removes the temporary profile. Safe to
        call more than once and after any failure. polite=False: the browser is unresponsive
        (timed out), kill it at once."""
        if self.proc is not None:
            # A polite Browser.close first: the browser then reaps its own helpers. Killed
            # outright, they would be left as zombies for init to collect.
            if polite and self.proc.poll() is None:
                try:
                    self.deadline = time.monotonic() + 2
                    self.send("Browser.close")
                    self.proc.wait(timeout=2)
                except (Timeout, BrowserGone, subprocess.TimeoutExpired):
                    pass
            # Then SIGKILL to the process group: stragglers, or everything after a timeout.
            # The helpers (zygote, renderer, GPU/utility processes) share the browser's group.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        for fd in ("cmd_w", "evt_r"):
            if getattr(self, fd, None) is not None:
                try:
                    os.close(getattr(self, fd))
                except OSError:
                    pass
                setattr(self, fd, None)
        if self.log_file:
            self.log_file.close()
            self.log_file = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def log_tail(self, lines=20):
        """The end of the browser's stdout/stderr, for failure messages. Without its D-Bus
        complaints: a CI container has no session or system bus, which is harmless."""
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        keep = [ln for ln in text.splitlines() if ":ERROR:dbus/" not in ln]
        return "\n".join(keep[-lines:]) or "(nothing)"


# --------------------------------------------------------------------------------------------
# The page session: events are collected while commands run
# --------------------------------------------------------------------------------------------

def remote_object_text(obj):
    """Readable text of a Runtime.RemoteObject (a console.* argument)."""
    if "value" in obj:
        v = obj["value"]
        return v if isinstance(v, str) else json.dumps(v)
    if "unserializableValue" in obj:
        return obj["unserializableValue"]
    return obj.get("description") or obj.get("type", "?")


def location(url, line, col):
    if not url:
        return ""
    where = os.path.basename(url) if url.startswith("file:") else url
    return f" ({where}:{line + 1}:{col + 1})" if line is not None else f" ({where})"


class Page:
    """The one page target, attached with flatten=true (its commands name a sessionId)."""

    def __init__(self, browser):
        self.b = browser
        self.session = None
        self.page_url = None
        self.errors = []     # page problems: console errors, exceptions, failed/external loads
        self.warnings = []   # console warnings: printed, not failures
        self.loaded = False

    def call(self, method, params=None, session=True):
        """Sends a command and returns its result, handling events that arrive meanwhile."""
        mid = self.b.send(method, params, self.session if session else None)
        while True:
            msg = self.b.read_message()
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error'].get('message', msg['error'])}")
                return msg.get("result", {})
            self.on_event(msg)

    def wait_until(self, predicate):
        while not predicate():
            self.on_event(self.b.read_message())

    def drain(self, seconds):
        """Handles the events that arrive within the next `seconds`."""
        saved, self.b.deadline = self.b.deadline, min(self.b.deadline, time.monotonic() + seconds)
        try:
            while True:
                self.on_event(self.b.read_message())
        except Timeout:
            pass
        finally:
            self.b.deadline = saved

    def on_event(self, msg):
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(remote_object_text(a) for a in p.get("args", []))
            frame = (p.get("stackTrace") or {}).get("callFrames") or [{}]
            where = location(frame[0].get("url"), frame[0].get("lineNumber"),
                              frame[0].get("columnNumber"))
            if p.get("type") in ("error", "assert"):
                self.errors.append(f"console.{p['type']}: {text}{where}")
            elif p.get("type") == "warning":
                self.warnings.append(f"console.warn: {text}{where}")
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            exc = d.get("exception") or {}
            # description holds "Error: message\n    at stack"; text alone is "Uncaught".
            desc = (exc.get("description") or remote_object_text(exc)) if exc else ""
            first = desc.splitlines()[0] if desc else ""
            msg_text = f"{d.get('text', 'Uncaught')} {first}".strip()
            where = location(d.get("url"), d.get("lineNumber"), d.get("columnNumber"))
            self.errors.append(f"uncaught exception: {msg_text}{where}")
        elif method == "Log.entryAdded":
            e = p.get("entry", {})
            # Browser-side messages: failed resource loads (source "network"), SVG/HTML
            # attribute parse errors ("rendering"), CSP violations ("security"), ...
            if e.get("level") == "error":
                self.errors.append(f"log ({e.get('source', '?')}): {e.get('text', '')}"
                                   f"{location(e.get('url'), e.get('lineNumber'), 0)}")
            elif e.get("level") == "warning":
                self.warnings.append(f"log ({e.get('source', '?')}): {e.get('text', '')}")
        elif method == "Network.requestWillBeSent":
            # (A failed load shows up above as a Log entry of source "network".)
            url = p.get("request", {}).get("url", "")
            # The report must be one self-contained file: only itself and inline data.
            if self.page_url and url != self.page_url and not url.startswith(("data:", "blob:",
                                                                               "about:")):
                self.errors.append(f"external resource requested (the report must be "
                                   f"self-contained): {url}")
        elif method == "Page.loadEventFired":
            self.loaded = True
        elif method == "Page.javascriptDialogOpening":
            # An alert()/confirm() would block the page forever in headless mode.
            self.errors.append(f"page opened a JavaScript {p.get('type')} dialog: "
                               f"{p.get('message', '')}")
            self.b.send("Page.handleJavaScriptDialog", {"accept": False}, self.session)
        elif method in ("Inspector.targetCrashed", "Target.targetCrashed"):
            raise BrowserGone("the page's renderer crashed")
        elif method == "Target.detachedFromTarget" and p.get("sessionId") == self.session:
            raise BrowserGone("the page target went away")

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluating the page failed: {r['exceptionDetails'].get('text')}")
        return r.get("result", {}).get("value")


# Runs in the page after load: the raw attributes; all checking is done in Python.
DOM_EXPRESSION = r"""
(() => {
  const charts = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    const series = [];
    for (const pl of svg.querySelectorAll('polyline.series')) {
      series.push({name: pl.getAttribute('data-series'),
                   declared: pl.getAttribute('data-points'),
                   points: pl.getAttribute('points')});
    }
    charts.push({name: svg.getAttribute('data-chart'), series});
  }
  // Width of the page's first visible text: 0 when no font could be found to draw it.
  let text = null;
  if (document.body) {
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const tag = n.parentElement ? n.parentElement.tagName.toLowerCase() : '';
      if (!n.data.trim() || tag === 'script' || tag === 'style') continue;
      const r = document.createRange();
      r.selectNodeContents(n);
      text = {sample: n.data.trim().slice(0, 40), width: r.getBoundingClientRect().width};
      break;
    }
  }
  return {ready: document.body ? document.body.getAttribute('data-report-ready') : null,
          title: document.title, charts, text,
          height: Math.ceil(Math.max(document.documentElement.scrollHeight,
                                     document.body ? document.body.scrollHeight : 0))};
})()
"""

READY_EXPRESSION = "document.body ? document.body.getAttribute('data-report-ready') : null"


# --------------------------------------------------------------------------------------------
# Checks on the extracted DOM, the expectations and the PNG
# --------------------------------------------------------------------------------------------

# An SVG <number>. Stricter than float(): no "nan", "inf", "1_000", hex.
SVG_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")


def count_points(points_attr):
    """(number of coordinate pairs, problem or None) of an SVG `points` attribute."""
    tokens = [t for t in re.split(r"[\s,]+", (points_attr or "").strip()) if t]
    bad = [t for t in tokens if not SVG_NUMBER.match(t) or not math.isfinite(float(t))]
    if bad:
        return len(tokens) // 2, f"non-numeric coordinate(s) {', '.join(bad[:3])}"
    if len(tokens) % 2:
        return len(tokens) // 2, f"odd number of coordinates ({len(tokens)})"
    return len(tokens) // 2, None


def check_dom(dom, expect):
    """(problems, found) where found maps (chart, series) -> number of points."""
    problems, found = [], {}
    if dom.get("ready") != "1":
        problems.append(f'<body data-report-ready="1"> missing (data-report-ready is '
                        f'{dom.get("ready")!r}): the page did not finish rendering')
    text = dom.get("text")
    if text and text.get("width", 0) <= 0:
        problems.append(f"text {text.get('sample')!r} is drawn 0 pixels wide: the browser found "
                        f"no font (install fonts-dejavu-core: bash scripts/setup.sh)")
    charts = dom.get("charts", [])
    names = [c.get("name") for c in charts]
    for c in charts:
        cname = c.get("name")
        if not cname:
            problems.append('<svg class="chart"> without a data-chart name')
            continue
        if names.count(cname) > 1 and names.index(cname) != charts.index(c):
            problems.append(f"chart {cname!r} appears more than once")
            continue
        for s in c.get("series", []):
            sname = s.get("name")
            label = f"{cname}/{sname}"
            if not sname:
                problems.append(f'chart {cname!r}: <polyline class="series"> without data-series')
                continue
            if (cname, sname) in found:
                problems.append(f"series {label} appears more than once")
                continue
            n, bad = count_points(s.get("points"))
            found[(cname, sname)] = n
            if bad:
                problems.append(f"series {label}: {bad}")
            declared = s.get("declared")
            if declared is None or not declared.strip().isdigit():
                problems.append(f"series {label}: data-points is {declared!r}, not a count")
            elif int(declared) != n:
                problems.append(f"series {label}: data-points={declared} but points has "
                                f"{n} coordinate pairs")
    min_charts = expect.get("min_charts", 0)
    if len(charts) < min_charts:
        problems.append(f"{len(charts)} charts on the page, expected at least {min_charts}")
    for cname, series in expect.get("charts", {}).items():
        if cname not in names:
            problems.append(f"expected chart {cname!r} is missing (charts: "
                            f"{', '.join(str(n) for n in names) or 'none'})")
            continue
        for sname, want in series.items():
            have = found.get((cname, sname))
            if have is None:
                problems.append(f"expected series {cname}/{sname} is missing")
            elif have != want:
                problems.append(f"series {cname}/{sname}: {have} points, expected {want}")
    return problems, found


def load_expect(path):
    with open(path, encoding="utf-8") as f:
        expect = json.load(f)
    if not isinstance(expect, dict):
        raise ValueError("top level must be an object")
    charts = expect.get("charts", {})
    if not isinstance(charts, dict) or not all(
            isinstance(s, dict) and all(isinstance(n, int) and not isinstance(n, bool)
                                        and n >= 0 for n in s.values())
            for s in charts.values()):
        raise ValueError('"charts" must map chart -> {series: number of points}')
    mc = expect.get("min_charts", 0)
    if not isinstance(mc, int) or isinstance(mc, bool) or mc < 0:
        raise ValueError('"min_charts" must be a non-negative integer')
    return expect


def check_png(path):
    """(width, height, problem or None). Checks the signature, IHDR and that the image data
    inflates to the size IHDR promises (a truncated or garbled file fails)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < MIN_PNG_BYTES:
        return 0, 0, f"screenshot is only {len(data)} bytes"
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return 0, 0, "screenshot is not a PNG (bad signature)"
    length, ctype = struct.unpack(">I4s", data[8:16])
    if ctype != b"IHDR" or length != 13:
        return 0, 0, "screenshot PNG does not start with an IHDR chunk"
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    if width == 0 or height == 0:
        return width, height, f"screenshot is {width}x{height}"
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color)
    if channels is None:
        return width, height, f"screenshot has an unknown PNG color type {color}"
    idat, pos = [], 8
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        if ctype == b"IDAT":
            idat.append(data[pos + 8:pos + 8 + length])
        pos += 12 + length
        if ctype == b"IEND":
            break
    else:
        return width, height, "screenshot PNG has no IEND chunk (truncated?)"
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        return width, height, f"screenshot PNG data is corrupt: {e}"
    row = 1 + (width * channels * depth + 7) // 8   # filter byte + pixels of one scanline
    if interlace == 0 and len(raw) != row * height:
        return width, height, (f"screenshot PNG holds {len(raw)} bytes of pixels, expected "
                               f"{row * height}")
    return width, height, None


# --------------------------------------------------------------------------------------------

def run_check(exe, html, expect, screenshot, timeout):
    """Returns (problems, summary, timings)."""
    t0 = time.monotonic()
    try:
        browser = Browser(exe, t0 + timeout)
    except OSError as e:
        return [f"cannot start {exe}: {e}"], "0 charts", {}
    page = Page(browser)
    problems, timings, found, dom = [], {}, {}, None
    stage = "starting the browser"
    hung = False
    try:
        # The pipe is usable once the browser answers; that is its start-up time.
        page.call("Browser.getVersion", session=False)
        timings["start"] = time.monotonic() - t0
        target = page.call("Target.createTarget", {"url": "about:blank"}, session=False)
        page.session = page.call("Target.attachToTarget",
                                 {"targetId": target["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network", "Inspector"):
            page.call(f"{domain}.enable")
        page.call("Emulation.setDeviceMetricsOverride",
                  {"width": WINDOW_WIDTH, "height": MIN_HEIGHT, "deviceScaleFactor": 1,
                   "mobile": False})
        page.page_url = "file://" + os.path.abspath(html)
        stage = "loading the page"
        t_nav = time.monotonic()
        nav = page.call("Page.navigate", {"url": page.page_url})
        if nav.get("errorText"):
            raise RuntimeError(f"navigation to {page.page_url} failed: {nav['errorText']}")
        page.wait_until(lambda: page.loaded)
        timings["load"] = time.monotonic() - t_nav

        stage = "reading the rendered page"
        # data-report-ready may be set by a script that runs after load; give it a moment.
        ready_deadline = time.monotonic() + READY_GRACE_S
        while page.evaluate(READY_EXPRESSION) != "1" and time.monotonic() < ready_deadline:
            time.sleep(0.05)
        dom = page.evaluate(DOM_EXPRESSION)

        stage = "taking the screenshot"
        # Grow the viewport to the whole page, then capture it: one image, no stitching.
        height = max(MIN_HEIGHT, min(MAX_HEIGHT, int(dom.get("height") or 0)))
        page.call("Emulation.setDeviceMetricsOverride",
                  {"width": WINDOW_WIDTH, "height": height, "deviceScaleFactor": 1,
                   "mobile": False})
        shot = page.call("Page.captureScreenshot", {"format": "png", "fromSurface": True})
        with open(screenshot, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        # Errors of code that runs shortly after load (a timer, an animation frame) count too.
        page.drain(SETTLE_S)
        timings["total"] = time.monotonic() - t0
    except Timeout:
        hung = True
        problems.append(f"timed out after {timeout:g} s while {stage} (the page or the browser "
                        f"hung); browser output:\n" + browser.log_tail())
    except BrowserGone as e:
        problems.append(f"{e}; browser output:\n" + browser.log_tail())
    except (RuntimeError, KeyError, OSError, json.JSONDecodeError) as e:
        problems.append(f"{e}; browser output:\n" + browser.log_tail())
    finally:
        browser.close(polite=not hung)

    # Page errors collected up to the screenshot (also those of a run that then failed).
    problems[:0] = page.errors
    for w in page.warnings:
        log(f"warning: {w}")
    if dom is not None:
        dom_problems, found = check_dom(dom, expect)
        problems += dom_problems
    if "total" in timings:
        w, h, bad = check_png(screenshot)
        if bad:
            problems.append(bad)
        elif w != WINDOW_WIDTH:
            problems.append(f"screenshot is {w} pixels wide, expected {WINDOW_WIDTH}")
        timings["size"] = f"{w}x{h}"
    n_charts = len(dom.get("charts", [])) if dom else 0
    summary = (f"{n_charts} charts, {len(found)} series, {sum(found.values())} points; "
               f"screenshot {screenshot}")
    return problems, summary, timings


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--html", required=True, help="the report to check")
    ap.add_argument("--expect", required=True, help="expected charts/series/points (JSON)")
    ap.add_argument("--screenshot", required=True, help="PNG to write")
    ap.add_argument("--chromium", help="browser executable (default: first of "
                                       f"{', '.join(BROWSER_NAMES)} on PATH)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds for the whole check")
    args = ap.parse_args(argv)

    exe = find_browser(args.chromium)
    if exe is None:
        what = (f"browser {args.chromium!r} not found or not executable" if args.chromium
                else f"no browser on PATH (looked for {', '.join(BROWSER_NAMES)})")
        return no_browser_exit(what)
    if not os.path.isfile(args.html):
        log(f"FAIL: {args.html}: no such file")
        return EXIT_FAIL
    try:
        expect = load_expect(args.expect)
    except (OSError, ValueError) as e:
        log(f"FAIL: expectations {args.expect}: {e}")
        return EXIT_FAIL

    problems, summary, t = run_check(exe, args.html, expect, args.screenshot, args.timeout)
    if "total" in t:
        log(f"browser {exe}: started in {t['start']:.2f} s, page loaded in {t['load']:.2f} s, "
            f"{t['total']:.2f} s in all; screenshot {t.get('size', '?')}")
    if problems:
        for p in problems:
            log(f"FAIL: {p}")
        log(f"FAILED ({len(problems)} problem{'s' if len(problems) != 1 else ''}; {summary})")
        return EXIT_FAIL
    log(f"OK ({summary})")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
