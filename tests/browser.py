"""A tiny Chrome DevTools Protocol client for the browser tests (test_try_paging.py, test_site.py).

Debian's headless Chromium (``bash scripts/ensure_chromium.sh``) is driven over its DevTools websocket
with ``websocket-client``: no driver, no extra package. ``Chromium.call`` sends one protocol command;
console messages, exceptions and network events are kept in ``Chromium.events`` for the tests to read.
"""
from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
                  "--remote-debugging-port=0", "--window-size=1100,900"]
# Console errors that Jupyter Book 1.x's theme stack prints on EVERY page of the book, whatever the page
# holds; they are not this widget's. Each is matched exactly; anything else fails the test.
#  - Sphinx 7.4 writes inline scripts that extensions add after the builder starts twice, so
#    sphinx-thebe's `const THEBE_JS_URL = ...` is declared twice (a SyntaxError in the page's <head>).
#  - pydata-sphinx-theme logs "Got invalid theme mode" on a first visit (empty localStorage) unless
#    `html_context: {default_mode: auto}` is set.
THEME_NOISE: tuple[str, ...] = ()  # the book's config fixes the theme's own console errors
KEYS = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowUp": 38, "ArrowDown": 40, "Home": 36, "End": 35,
        "Tab": 9, "Enter": 13, " ": 32}


class Chromium:
    """One headless Chromium with one page, driven over the DevTools protocol.

    ``call(method, **params)`` sends a command and returns its result; events that arrive meanwhile
    are kept in ``events`` (console messages, exceptions, network requests).
    """

    def __init__(self, binary: str, profile: Path):
        self.proc = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else ""
                self.close()
                raise RuntimeError(f"chromium did not start its DevTools endpoint: {err[-2000:]}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = [t for t in json.load(reply) if t["type"] == "page"]
        self.ws = websocket.create_connection(targets[0]["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params) -> dict:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method} failed: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for_event(self, method: str, timeout: float = 30, since: int | None = None) -> dict:
        """Wait for the next ``method`` event; with ``since``, one already among events[since:]
        counts too (for an event that a command's own reply may have overtaken)."""
        deadline = time.monotonic() + timeout
        seen = len(self.events) if since is None else since
        while time.monotonic() < deadline:
            for event in self.events[seen:]:
                if event["method"] == method:
                    return event
            seen = len(self.events)
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(f"no {method} within {timeout} s")

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for_event("Page.loadEventFired")

    def js(self, expression: str):
        """Evaluate JavaScript in the page; returns its value (must be JSON-serialisable)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error in {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def key(self, key: str) -> None:
        """Press and release one key, as a keyboard would (it goes to the focused element)."""
        code = {" ": "Space"}.get(key, key)
        common = {"key": key, "code": code, "windowsVirtualKeyCode": KEYS[key],
                  "nativeVirtualKeyCode": KEYS[key]}
        down = {"type": "keyDown", **common}
        if key in ("Enter", " "):
            down.update(text="\r" if key == "Enter" else " ")
        self.call("Input.dispatchKeyEvent", **down)
        self.call("Input.dispatchKeyEvent", type="keyUp", **common)

    def type_text(self, text: str) -> None:
        self.call("Input.insertText", text=text)

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element, once it has stopped moving (a smooth
        scroll or a sliding sidebar would otherwise move it between measuring and clicking)."""
        where = f"""new Promise(done => requestAnimationFrame(() => {{
            const e = document.querySelector({json.dumps(selector)});
            if (!e) {{ done(null); return; }}
            e.scrollIntoView({{block: 'center', behavior: 'instant'}}); const r = e.getBoundingClientRect();
            done([r.x + r.width / 2, r.y + r.height / 2]); }}))"""
        box, deadline = self.js(where), time.monotonic() + 5
        if box is None:
            raise RuntimeError(f"nothing on the page matches {selector!r}")
        while time.monotonic() < deadline:
            again = self.js(where)
            if again == box:
                break
            box = again
            time.sleep(0.05)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=mobile)

    def screenshot(self, path: Path, selector: str | None = None, *, beyond_viewport: bool = True) -> None:
        """Save a PNG of the page, or of the element `selector` once its layout has settled;
        `beyond_viewport=False` keeps to what the window shows."""
        params = {"format": "png", "captureBeyondViewport": beyond_viewport}
        if selector:
            measure = f"""new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => {{
                const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();
                done([r.x + scrollX, r.y + scrollY, r.width, r.height]); }})))"""
            rect, deadline = self.js(measure), time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.1)
                again = self.js(measure)
                if again == rect:
                    break
                rect = again
            pad = 8
            params["clip"] = {"x": max(rect[0] - pad, 0), "y": max(rect[1] - pad, 0),
                              "width": rect[2] + 2 * pad, "height": rect[3] + 2 * pad, "scale": 1}
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def problems(self, ignore: tuple[str, ...] = THEME_NOISE) -> list[str]:
        """Console errors and warnings, uncaught exceptions and failed loads since the page opened,
        except those that contain one of the `ignore` texts."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                details = p["exceptionDetails"]
                out.append(f"exception: {details.get('exception', {}).get('description', details.get('text'))} "
                           f"at {details.get('url', '')}:{details.get('lineNumber')}")
            elif e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p['args']]}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
            elif e["method"] == "Network.loadingFailed":
                out.append(f"failed load: {p.get('errorText')} ({p.get('type')})")
        return [line for line in out if not any(text in line for text in ignore)]

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


@contextlib.contextmanager
def open_browser(prefix: str):
    """A headless Chromium with a fresh profile for one test module; fails the test if none is installed."""
    import pytest
    binary = find_chromium()
    if binary is None:
        pytest.fail("chromium is not installed: run `bash scripts/ensure_chromium.sh` (make test does)")
    with tempfile.TemporaryDirectory(prefix=prefix) as profile:
        b = Chromium(binary, Path(profile))
        try:
            yield b
        finally:
            b.close()
