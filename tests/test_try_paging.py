"""The "Try it" page (book/try-paging.md + _static/try-paging.{js,css}) in a real, headless Chromium.

The test builds a one-page book with Jupyter Book (about 3 s), opens it from ``file://`` and drives it
the way a reader does (clicks, arrow keys, typing) through Playwright (tests/browser.py). Every number
the page shows is compared with ``pagedlib.reserve_max_plan`` / ``pagedlib.paged_plan``. Screenshots
of every state land in ``artifacts/try-paging/`` (look at them).

Chromium comes from Debian (``apt-get install chromium``; ``.ci/run`` installs it in CI). Without it
these tests are reported as skipped with that line (in CI they fail).
"""
from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser import Chromium, open_browser

import pagedlib
from pagedlib.plots.style import COLORS

pytestmark = pytest.mark.slow   # a browser, a notebook run or a fresh venv: left out of `make unit`

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "try-paging.md"
STATIC = [ROOT / "_static" / "try-paging.js", ROOT / "_static" / "try-paging.css",
          ROOT / "_static" / "favicon.svg"]                  # _config.yml names the favicon
ARTIFACTS = ROOT / "artifacts" / "try-paging"
SEED = [512, 37, 1900, 128, 4]
MAX_LEN, POOL = 2048, 40960


# ---- fixtures --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built_page(tmp_path_factory) -> Path:
    """Build a one-page Jupyter Book holding just the "Try it" page; return the page's HTML file."""
    book = tmp_path_factory.mktemp("try-paging-book")
    (book / "book").mkdir()
    (book / "_static").mkdir()
    # the page alone: its Next link points at a chapter this one-page book does not hold
    page = "".join(line for line in PAGE.read_text().splitlines(keepends=True)
                   if not line.startswith("**Next:**"))
    (book / "book" / PAGE.name).write_text(page)
    for asset in STATIC:
        shutil.copy(asset, book / "_static" / asset.name)
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")  # the real book's settings and extensions
    shutil.copytree(ROOT / "book" / "_ext", book / "book" / "_ext")
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/try-paging\n")
    jb = Path(sys.executable).with_name("jupyter-book")
    run = subprocess.run([str(jb), "build", str(book), "-W", "-n", "--keep-going"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"jupyter-book build failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    html = book / "_build" / "html" / "book" / "try-paging.html"
    assert html.exists(), f"the build did not write {html}"
    for asset in STATIC:
        assert (book / "_build" / "html" / "_static" / asset.name).exists(), f"{asset.name} was not copied"
    return html


@pytest.fixture(scope="module")
def browser():
    with open_browser() as b:
        yield b


@pytest.fixture
def page(browser, built_page):
    """The page, freshly loaded at a desktop width; fails the test if the console saw any problem."""
    browser.viewport(1100, 900)
    browser.open(built_page.as_uri())
    assert browser.js("!!document.querySelector('.tp.tp-ready')"), "the widget did not start"
    yield browser
    browser.js("0")   # collect the events still in flight
    assert browser.problems() == [], "the browser console reported problems"


# ---- reading the page ----------------------------------------------------------------------------
def shown(b: Chromium) -> dict:
    """The numbers on the page, as text and as the raw values the page computed."""
    return b.js("""(() => { const out = {};
        for (const id of ['used', 'allocated', 'waste', 'capacity', 'ratio', 'page-size-value']) {
            const e = document.querySelector(`[data-testid="${id}"]`);
            out[id] = e.textContent; out[id + ':value'] = e.getAttribute('data-value'); }
        const m = document.querySelector('[data-testid="message"]');
        out.message = m.hidden ? '' : m.textContent;
        out.mode = document.querySelector('[data-testid="mode-paged"]').checked ? 'paged' : 'reserve';
        out.rows = document.querySelectorAll('.tp-row').length;
        return out; })()""")


def expected(lengths, mode: str, block_size: int = 16, max_len: int = MAX_LEN, pool: int = POOL) -> dict:
    """What the page must show, from pagedlib."""
    reserve = pagedlib.reserve_max_plan(lengths, max_len)
    plan = pagedlib.paged_plan(lengths, block_size) if mode == "paged" else reserve
    capacity = plan.capacity(pool)
    return {"used": plan.used, "allocated": plan.allocated, "waste": plan.waste, "capacity": capacity,
            "ratio": capacity / reserve.capacity(pool)}


def number(text: str) -> float:
    return float(re.sub(r"[,%\u00d7\s]", "", text))


def assert_matches(got: dict, want: dict) -> None:
    assert int(number(got["used"])) == want["used"]
    assert int(number(got["allocated"])) == want["allocated"]
    assert int(number(got["capacity"])) == want["capacity"]
    assert got["waste"] == f"{want['waste'] * 100:.1f}%", (got["waste"], want["waste"])
    assert abs(number(got["ratio"]) - want["ratio"]) <= 0.05 + 1e-9, (got["ratio"], want["ratio"])
    # the values behind the text, exactly
    assert abs(float(got["waste:value"]) - want["waste"]) < 1e-12
    assert abs(float(got["ratio:value"]) - want["ratio"]) < 1e-12


def focus(b: Chromium, testid: str) -> None:
    b.js(f"document.querySelector('[data-testid=\"{testid}\"]').focus()")


def set_lengths(b: Chromium, text: str) -> None:
    """Select the lengths box, type `text` and press Enter, as a reader does."""
    focus(b, "lengths")
    b.js("document.querySelector('[data-testid=\"lengths\"]').select()")
    b.type_text(text)
    b.key("Enter")


def shot(b: Chromium, name: str) -> None:
    b.screenshot(ARTIFACTS / f"{name}.png", selector=".tp")


# ---- tests -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_default_state_is_the_seed_lesson_in_reserve_max(page):
    got = shown(page)
    assert got["mode"] == "reserve" and got["rows"] == 5 and got["message"] == ""
    assert (got["waste"], got["capacity"], got["allocated"], got["used"]) == ("74.8%", "20", "10,240", "2,581")
    assert_matches(got, expected(SEED, "reserve"))
    # every reserve-max row is K/V plus hatched padding, filling the whole max length
    pads = page.js("""[...document.querySelectorAll('.tp-row .tp-padding')].map(e =>
        [Number(e.dataset.slots), getComputedStyle(e).backgroundImage])""")
    assert [slots for slots, _ in pads] == [MAX_LEN - n for n in SEED]
    assert all("repeating-linear-gradient" in image for _, image in pads), "padding must be hatched"
    shot(page, "01-reserve-max-default")


@pytest.mark.slow
def test_paged_at_16_collapses_the_rows(page):
    page.click('[data-testid="mode-paged"]')
    got = shown(page)
    assert got["mode"] == "paged" and got["page-size-value"] == "16"
    assert (got["waste"], got["capacity"], got["allocated"]) == ("1.0%", "78", "2,608")
    assert got["ratio"] == "3.9\u00d7"
    assert_matches(got, expected(SEED, "paged", 16))
    tails = page.js("[...document.querySelectorAll('.tp-row .tp-tail')].map(e => Number(e.dataset.slots))")
    assert tails == [pagedlib.blocks_for(n, 16) * 16 - n for n in SEED if n % 16]
    assert page.js("document.querySelectorAll('.tp-row .tp-padding').length") == 0
    shot(page, "02-paged-16")


@pytest.mark.slow
def test_slider_moves_by_keyboard_and_waste_follows_pagedlib(page):
    page.click('[data-testid="mode-paged"]')
    focus(page, "page-size")
    page.key("Home")
    sizes = []
    for step in range(12):
        got = shown(page)
        size = int(number(got["page-size-value"]))
        assert size == 2 ** step
        assert page.js("document.querySelector('[data-testid=\"page-size\"]').getAttribute('aria-valuetext')") \
            .startswith(f"{size:,} token")
        assert_matches(got, expected(SEED, "paged", size))
        sizes.append((size, float(got["waste:value"])))
        if size in (1, 64, 256, 2048):
            shot(page, f"03-paged-page-{size:04d}")
        page.key("ArrowRight")
    assert shown(page)["page-size-value"] == "2,048", "the slider must stop at 2,048"
    assert page.js("document.querySelector('[data-testid=\"summary\"]').textContent") \
        .startswith("Paged, 2,048-token pages:"), "numbers on the page are written 2,048"
    wastes = [w for _, w in sizes]
    assert wastes == sorted(wastes), "waste must creep back as pages grow"
    assert wastes[0] == 0.0


@pytest.mark.slow
def test_custom_and_random_lengths_match_pagedlib(page):
    page.click('[data-testid="mode-paged"]')
    custom = [3, 700, 41, 2048, 17, 1]
    set_lengths(page, ", ".join(map(str, custom)))
    assert shown(page)["rows"] == len(custom)
    assert_matches(shown(page), expected(custom, "paged", 16))
    shot(page, "04-custom-lengths-paged-16")
    page.click('[data-testid="mode-reserve"]')
    assert_matches(shown(page), expected(custom, "reserve"))
    # many random mixes and page sizes, typed into the page and compared with pagedlib
    rng = random.Random(9)
    page.click('[data-testid="mode-paged"]')
    for _ in range(25):
        lengths = [rng.choice([rng.randint(1, 64), rng.randint(1, MAX_LEN)]) for _ in range(rng.randint(1, 12))]
        exponent = rng.randint(0, 11)
        set_lengths(page, ",".join(map(str, lengths)))
        page.js(f"""(() => {{ const s = document.querySelector('[data-testid="page-size"]');
            s.disabled = false; s.value = {exponent}; s.dispatchEvent(new Event('input', {{bubbles: true}})); }})()""")
        assert_matches(shown(page), expected(lengths, "paged", 2 ** exponent))
    # the page's own "Random mix" button
    page.click('[data-testid="random"]')
    mix = [int(x) for x in page.js("document.querySelector('[data-testid=\"lengths\"]').value").split(",")]
    got = shown(page)
    assert got["message"] == "" and got["rows"] == len(mix)
    assert_matches(got, expected(mix, "paged", int(number(got["page-size-value"]))))
    shot(page, "05-random-mix")


@pytest.mark.slow
@pytest.mark.parametrize("bad, says", [
    ("", "at least one request length"),
    ("512, -5, 4", "cannot be negative"),
    ("512, abc", "not a whole number"),
    ("12.5", "not a whole number"),
    ("512, 4096", "longer than the max length"),
    ("512,,4", "is empty"),
    ("0", "at least 1 token"),
])
def test_bad_lengths_show_a_message_and_keep_the_last_numbers(page, bad, says):
    page.click('[data-testid="mode-paged"]')
    good = [100, 200, 300]
    set_lengths(page, "100, 200, 300")
    before = shown(page)
    assert_matches(before, expected(good, "paged"))
    set_lengths(page, bad)
    after = shown(page)
    assert says in after["message"], after["message"]
    assert page.js("document.querySelector('[data-testid=\"lengths\"]').getAttribute('aria-invalid')") == "true"
    assert {k: v for k, v in after.items() if k != "message"} == {k: v for k, v in before.items() if k != "message"}
    if bad == "512, abc":
        shot(page, "06-bad-input")
    # the page still works, and a good input clears the message
    set_lengths(page, "64")
    got = shown(page)
    assert got["message"] == "" and got["rows"] == 1
    assert_matches(got, expected([64], "paged"))


@pytest.mark.slow
def test_max_length_and_pool_size(page):
    focus(page, "max-len")
    page.js("document.querySelector('[data-testid=\"max-len\"]').select()")
    page.type_text("4096")
    page.key("Tab")                                       # leaving the field applies it (change event)
    focus(page, "pool-size")
    page.js("document.querySelector('[data-testid=\"pool-size\"]').select()")
    page.type_text("100000")
    page.key("Enter")
    page.key("Tab")
    assert_matches(shown(page), expected(SEED, "reserve", max_len=4096, pool=100000))
    page.click('[data-testid="mode-paged"]')
    assert_matches(shown(page), expected(SEED, "paged", 16, max_len=4096, pool=100000))
    # a max length below the longest request is refused, and changes nothing
    before = shown(page)
    focus(page, "max-len")
    page.js("document.querySelector('[data-testid=\"max-len\"]').select()")
    page.type_text("1000")
    page.key("Tab")
    after = shown(page)
    assert "shorter than the longest request" in after["message"]
    assert after["allocated"] == before["allocated"] and after["capacity"] == before["capacity"]
    # a pool smaller than one reserve-max slot: reserve-max fits nobody, so there is no ratio
    focus(page, "max-len")
    page.js("document.querySelector('[data-testid=\"max-len\"]').select()")
    page.type_text("4096")
    page.key("Tab")
    focus(page, "pool-size")
    page.js("document.querySelector('[data-testid=\"pool-size\"]').select()")
    page.type_text("3000")
    page.key("Tab")
    got = shown(page)
    assert got["message"] == ""
    assert pagedlib.reserve_max_plan(SEED, 4096).capacity(3000) == 0
    assert int(got["capacity"]) == pagedlib.paged_plan(SEED, 16).capacity(3000)
    assert got["ratio"] == "n/a"
    summary = page.js("document.querySelector('[data-testid=\"summary\"]').textContent")
    assert "reserve-max fits none: the pool is smaller than one 4,096-token reservation" in summary
    assert "n/a" not in summary


def _red_borders(page) -> list[str]:
    return page.js("""[...document.querySelectorAll('.tp input')].filter(e =>
        e.getAttribute('aria-invalid') === 'true' || getComputedStyle(e).borderTopWidth === '2px')
        .map(e => e.dataset.testid)""")


def _type_into(page, testid: str, text: str) -> None:
    focus(page, testid)
    page.js(f"document.querySelector('[data-testid=\"{testid}\"]').select()")
    page.type_text(text)
    page.key("Tab")


@pytest.mark.slow
def test_back_to_the_example_clears_every_error_and_red_border(page):
    set_lengths(page, "512, abc")
    _type_into(page, "pool-size", "-3")
    assert shown(page)["message"] and sorted(_red_borders(page)) == ["lengths", "pool-size"]
    page.click('[data-testid="reset"]')
    got = shown(page)
    assert got["message"] == "" and _red_borders(page) == []
    assert_matches(got, expected(SEED, "reserve"))
    shot(page, "10-after-back-to-the-example")


@pytest.mark.slow
def test_a_rejected_field_that_another_change_makes_valid_loses_its_red_border(page):
    _type_into(page, "max-len", "1000")                  # shorter than the 1,900-token request
    assert "shorter than the longest request" in shown(page)["message"]
    assert _red_borders(page) == ["max-len"]
    set_lengths(page, "100, 200, 900")                   # now 1,000 is long enough: it applies
    got = shown(page)
    assert got["message"] == "" and _red_borders(page) == []
    assert_matches(got, expected([100, 200, 900], "reserve", max_len=1000))
    set_lengths(page, "100, 3000")                       # longer than the max length: refused
    assert _red_borders(page) == ["lengths"]
    _type_into(page, "max-len", "4096")                  # a larger max length admits it
    assert shown(page)["message"] == "" and _red_borders(page) == []
    assert_matches(shown(page), expected([100, 3000], "reserve", max_len=4096))


@pytest.mark.slow
def test_keyboard_reaches_every_control_in_order_and_all_are_labelled(page):
    page.click('[data-testid="mode-paged"]')
    order = []
    for _ in range(7):
        page.key("Tab")
        order.append(page.js("document.activeElement.getAttribute('data-testid')"))
    assert order == ["page-size", "lengths", "apply", "random", "reset", "max-len", "pool-size"]
    page.click('[data-testid="mode-reserve"]')
    page.key("Tab")                                       # the slider is disabled in reserve-max: skipped
    assert page.js("document.activeElement.getAttribute('data-testid')") == "lengths"
    # arrow keys switch the layout radios, as in any radio group
    focus(page, "mode-reserve")
    page.key("ArrowRight")
    assert shown(page)["mode"] == "paged"
    focus(page, "page-size")
    page.key("ArrowRight")
    assert shown(page)["page-size-value"] == "32"
    page.key("ArrowLeft")
    page.key("ArrowLeft")
    assert shown(page)["page-size-value"] == "8"
    shot(page, "07-keyboard-focus")
    unlabelled = page.js("""[...document.querySelectorAll('.tp input, .tp button')]
        .filter(e => !(e.labels && e.labels.length) && !e.textContent.trim() && !e.getAttribute('aria-label'))
        .map(e => e.dataset.testid)""")
    assert unlabelled == []


@pytest.mark.slow
def test_phone_width_is_readable(page):
    page.viewport(400, 1400, mobile=True)
    page.js("window.dispatchEvent(new Event('resize'))")
    page.click('[data-testid="mode-paged"]')
    width = page.js("document.querySelector('.tp').getBoundingClientRect().width")
    overflow = page.js("""[...document.querySelectorAll('.tp *')].filter(e => {
        const r = e.getBoundingClientRect(), w = document.querySelector('.tp').getBoundingClientRect();
        return r.width > 0 && (r.right > w.right + 1 || r.left < w.left - 1); }).map(e => e.className || e.tagName)""")
    assert 0 < width <= 400 and overflow == [], overflow
    smallest = page.js("""Math.min(...[...document.querySelectorAll('.tp *')]
        .filter(e => e.childNodes.length && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
        .map(e => parseFloat(getComputedStyle(e).fontSize)))""")
    assert smallest >= 11, f"text as small as {smallest}px is hard to read on a phone"
    shot(page, "08-phone-400px")


@pytest.mark.slow
def test_dark_theme_keeps_the_text_readable(page, built_page):
    page.js("localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark')")
    page.open(built_page.as_uri())
    try:
        assert page.js("document.documentElement.dataset.theme") == "dark"
        page.click('[data-testid="mode-paged"]')
        colours = """(() => { const c = e => getComputedStyle(document.querySelector(e)).color;
            return [c('[data-testid="waste"]'), c('.tp-row-label'), c('.tp legend')]; })()"""
        # light text on the dark page (each channel above 150 of 255), once the theme's transition ends
        deadline = time.monotonic() + 5
        while True:
            seen = page.js(colours)
            light = all(min(map(int, re.findall(r"\d+", c)[:3])) > 150 for c in seen)
            if light or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert light, seen
        shot(page, "09-dark-theme")
    finally:
        page.js("localStorage.removeItem('mode'); localStorage.removeItem('theme')")


@pytest.mark.slow
def test_page_loads_nothing_from_the_network(page):
    page.click('[data-testid="mode-paged"]')
    page.click('[data-testid="random"]')
    remote = [u for u in page.requested_urls() if not u.startswith(("file:", "data:", "blob:", "about:"))]
    assert remote == []


def test_css_colours_are_the_course_palette():
    css = STATIC[1].read_text()
    for name in ("kv", "tail", "padding", "free"):
        match = re.search(rf"--tp-{name}:\s*(#[0-9A-Fa-f]{{6}})", css)
        assert match, f"--tp-{name} is missing from {STATIC[1].name}"
        assert match.group(1).lower() == COLORS[name].lower(), name


def test_the_page_is_in_the_book_after_how_to_use():
    toc = (ROOT / "_toc.yml").read_text()
    files = re.findall(r"file:\s*(\S+)", toc)
    assert "book/try-paging" in files
    assert files.index("book/try-paging") == files.index("book/how-to-use") + 1


def _text(page, testid: str) -> str:
    return page.js(f"document.querySelector('[data-testid=\"{testid}\"]').textContent")


@pytest.mark.slow
def test_one_is_singular_and_back_to_the_example_resets_the_page_size_and_layout(page):
    page.click('[data-testid="mode-paged"]')
    focus(page, "page-size")
    page.key("Home")                                      # 1-token pages
    assert _text(page, "page-size-value") == "1" and _text(page, "page-size-unit") == "token"
    set_lengths(page, "1")
    summary = _text(page, "summary")
    assert "for 1 token of K/V" in summary and "1 tokens" not in summary, summary
    assert _text(page, "pool-caption").startswith("This request takes 1 of the pool's")
    page.click('[data-testid="reset"]')
    assert page.js("document.querySelector('[data-testid=\"page-size\"]').value") == "4"
    assert _text(page, "page-size-value") == "16" and _text(page, "page-size-unit") == "tokens"
    assert page.js("document.querySelector('[data-testid=\"mode-reserve\"]').checked")
    assert_matches(shown(page), expected(SEED, "reserve"))


@pytest.mark.slow
def test_a_pool_smaller_than_one_request_says_that_request_does_not_fit(page):
    page.click('[data-testid="mode-paged"]')
    _type_into(page, "pool-size", "1000")                 # r3 alone takes 1,904 slots in 16-token pages
    summary = _text(page, "summary")
    assert "the longest request alone needs 1,904 slots, more than the pool's 1,000" in summary, summary
    assert "does not fit the pool at all" in _text(page, "pool-caption")
