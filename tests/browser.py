"""The browser tests' driver (test_try_paging.py, test_site.py, test_exercise_boxes.py): Playwright
for Python driving Debian's Chromium (``/usr/bin/chromium``, no browser download).

``open_browser`` launches it and gives a :class:`Chromium`: one page at a time, with the few verbs the
tests use (open, js, click, key, type_text, viewport, screenshot) on top of Playwright's page, its
auto-waiting locators (a click waits until the element is visible, stable and enabled) and its
events (console messages, uncaught exceptions, requests and failed loads, kept in ``Chromium.log``).
``Chromium.page`` is the Playwright page itself, for anything else.

Without Chromium the browser tests are reported as skipped, with the line that installs it;
``.ci/run`` installs it and sets ``PAGEDLIB_REQUIRE_BROWSER=1``, so in CI a missing browser fails.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

INSTALL = "apt-get install chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-extensions", "--hide-scrollbars", "--mute-audio"]
# Console errors that the book's theme prints on EVERY page whatever the page holds (none today:
# the book's config fixes them); each is matched exactly, anything else fails the test.
THEME_NOISE: tuple[str, ...] = ()
KEYS = {" ": "Space"}             # key names as the old driver spelt them -> Playwright's


@dataclass
class Log:
    """What the page reported since it was opened."""
    console: list[dict] = field(default_factory=list)     # {"type", "text", "url"}
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)      # {"url", "error", "type"}


class Chromium:
    """One headless Chromium with one page at a time. A change between phone (``mobile=True``) and
    desktop emulation needs a new browser context: the address shown is opened again in it, unless
    ``open`` names another one first."""

    def __init__(self, browser):
        self.browser = browser
        self.context = self.page = None
        self.mobile = None
        self.pending: str | None = None         # an address to open again in a new context
        self.log = Log()
        self._new_page(1100, 900, mobile=False)

    def _new_page(self, width: int, height: int, mobile: bool) -> None:
        url = self.pending or (self.page.url if self.page is not None else "about:blank")
        if self.context is not None:
            self.context.close()
        self.context = self.browser.new_context(viewport={"width": width, "height": height},
                                                device_scale_factor=1, is_mobile=mobile, has_touch=mobile)
        self.mobile = mobile
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        page, log = self.page, lambda: self.log
        page.on("console", lambda m: log().console.append(
            {"type": m.type, "text": m.text, "url": (m.location or {}).get("url", "")}))
        page.on("pageerror", lambda e: log().exceptions.append(f"{e.name}: {e.message}"))
        page.on("request", lambda r: log().requests.append(r.url))
        page.on("requestfailed", lambda r: log().failed.append(
            {"url": r.url, "error": r.failure, "type": r.resource_type}))
        self.pending = url if url != "about:blank" else None

    def _ready(self):
        if self.pending is not None:
            self.open(self.pending)
        return self.page

    def open(self, url: str) -> None:
        """Go to ``url`` and wait for its load event; the log starts afresh."""
        self.pending = None
        self.log = Log()
        self.page.goto(url, wait_until="load")

    def js(self, expression: str):
        """Evaluate JavaScript in the page (an expression or statements; a promise is awaited) and
        return its value."""
        return self._ready().evaluate(expression)

    def click(self, selector: str) -> None:
        """A real mouse click on the first element ``selector`` matches, once it is visible, stable
        and enabled (Playwright's actionability checks)."""
        self._ready().locator(selector).first.click()

    def click_to_navigate(self, selector: str) -> None:
        """Click a link and wait for the page it opens to load."""
        self._ready()
        with self.page.expect_navigation(wait_until="load"):
            self.click(selector)
        self.log = Log()

    def key(self, key: str) -> None:
        """Press and release one key; it goes to the focused element."""
        self._ready().keyboard.press(KEYS.get(key, key))

    def type_text(self, text: str) -> None:
        self._ready().keyboard.insert_text(text)

    def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        if mobile != self.mobile:
            self._new_page(width, height, mobile)
        else:
            self.page.set_viewport_size({"width": width, "height": height})

    def screenshot(self, path: Path, selector: str | None = None, *, beyond_viewport: bool = True) -> None:
        """A PNG of the element ``selector`` (once it is visible and stable), or of the page: the
        whole page, or with ``beyond_viewport=False`` what the window shows."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._ready()
        if selector:
            self.page.locator(selector).first.screenshot(path=path, animations="disabled")
        else:
            self.page.screenshot(path=path, full_page=beyond_viewport, animations="disabled")

    def problems(self, ignore: tuple[str, ...] = THEME_NOISE) -> list[str]:
        """Console errors and warnings, uncaught exceptions and failed loads since the page opened,
        except those that contain one of the ``ignore`` texts."""
        out = [f"exception: {e}" for e in self.log.exceptions]
        out += [f"console.{m['type']}: {m['text']} {m['url']}" for m in self.log.console
                if m["type"] in ("error", "warning", "assert")]
        out += [f"failed load: {f['error']} ({f['type']}) {f['url']}" for f in self.log.failed]
        return [line for line in out if not any(text in line for text in ignore)]

    def requested_urls(self) -> list[str]:
        return list(self.log.requests)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


def missing() -> str | None:
    """Why the browser tests cannot run here (no Chromium: the line that installs it), or None."""
    return None if find_chromium() else f"no Chromium found: `{INSTALL}` (Debian/Ubuntu) to run the browser tests"


def required() -> bool:
    """Whether a missing Chromium fails the browser tests instead of skipping them (CI)."""
    return os.environ.get("PAGEDLIB_REQUIRE_BROWSER") == "1"


@contextlib.contextmanager
def open_browser():
    """A headless Chromium for one test module. Without one installed the tests are skipped with
    the line that installs it (failed instead where ``PAGEDLIB_REQUIRE_BROWSER=1``, as in CI)."""
    why = missing()
    if why:
        if required():
            pytest.fail(why)
        pytest.skip(why)
    binary = find_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            yield Chromium(browser)
        finally:
            browser.close()
