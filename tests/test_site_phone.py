"""Every page of the built site on a phone (400 px, mobile emulation, headless Chromium): what a
reader sees must fit the screen or say that it scrolls.

For each page, every failure is listed (not only the first):

- **outputs**: no printed output block (a cell's ``pre``) wider than its box: its lines are at most
  60 characters (the course's rule) and the page sets their font so that 60 fit (course.js);
- **tables**: no table wider than its box unless the box shows that it scrolls: its first column
  stays put when the box is scrolled sideways (a sticky first column, course.css);
- **figures**: each content image's smallest text at least PHONE_TEXT_PX CSS px when the figure is
  shown PHONE_WIDTH (360) px wide, or as wide as it is shown, if narrower. The text's size is
  measured on the rendered image: the PNG's smallest text height in image pixels, from its metadata
  (``pagedlib.plots.display.png_2x`` writes it) or, without one, the course's smallest font
  (SMALLEST_FONT pt at PIXEL_RATIO x DISPLAY_DPI), times the shown width over the natural width;
- **steppers** (chapters 6 and 8): every column inside the 400 px screen, no sideways scrolling
  (chapter 8's m, l and acc included);
- **Try-it**: its table stacked (one row under another), every cell inside the screen.

Screenshots of the top of every page go to ``artifacts/site/phone/``.
"""
from __future__ import annotations

import base64
import json
import struct
import time
import zlib
from pathlib import Path

import pytest
from browser import open_browser
from test_site import PAGES, console_problems

from pagedlib.plots.style import DISPLAY_DPI, PHONE_TEXT_PX, PHONE_WIDTH, PIXEL_RATIO, SMALLEST_FONT

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "site" / "phone"
PHONE = 400
TEXT_KEY = "pagedlib:smallest-text-px"     # the PNG tEXt key png_2x writes (image pixels)
DEFAULT_TEXT_PX = SMALLEST_FONT * DISPLAY_DPI / 72 * PIXEL_RATIO


@pytest.fixture(scope="module")
def browser():
    with open_browser() as b:
        yield b


# MathJax typesets after the load event: wait for it (a page without equations has no MathJax)
MATH_TYPESET = """new Promise(done => { const start = Date.now(); const wait = () => {
    const mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(() => done(0));
    else if (!document.querySelector('.math') || Date.now() - start > 10000) done(0);
    else setTimeout(wait, 50); }; wait(); })"""

# What the page shows at 400 px; each list holds one line per problem.
PHONE_FACTS = r"""(() => {
    const visible = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
    const vw = document.documentElement.clientWidth;
    const where = e => { const s = e.closest('section[id]'); return s ? '#' + s.id : ''; };
    const outputs = [...document.querySelectorAll('.bd-article .cell_output pre, .bd-article .output pre')]
        .filter(visible).filter(p => p.scrollWidth > p.clientWidth + 1)
        .map(p => { const longest = p.textContent.split('\n').reduce((a, b) => b.length > a.length ? b : a, '');
            return `output ${where(p)} ${p.scrollWidth} px in a ${p.clientWidth} px box ` +
                   `(${longest.length} chars: "${longest.slice(0, 70)}")`; });
    const scrollBox = t => { for (let p = t.parentElement; p; p = p.parentElement) {
        if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return p;
        if (p.classList.contains('bd-article')) return null; } return null; };
    const tables = [];
    for (const t of [...document.querySelectorAll('.bd-article table')].filter(visible)) {
        if (t.closest('.pagedlib-stepper')) continue;            // the steppers are checked below
        const box = scrollBox(t);
        const r = t.getBoundingClientRect();
        const label = `table ${where(t)} "${(t.querySelector('th, td') || t).textContent.trim().slice(0, 30)}"`;
        if (!box) { if (r.right > vw + 1) tables.push(`${label}: ${Math.round(r.width)} px, cut at the screen`); continue; }
        if (box.scrollWidth <= box.clientWidth + 1) { if (r.right > vw + 1) tables.push(`${label}: past the screen`); continue; }
        // wider than its box: its first column must stay put when the box scrolls sideways
        const firsts = [...t.rows].map(row => row.cells[0]).filter(Boolean);
        const before = firsts.map(c => c.getBoundingClientRect().left);
        const keep = box.scrollLeft; box.scrollLeft = 40;
        const moved = box.scrollLeft > 0 && firsts.some((c, i) => Math.abs(c.getBoundingClientRect().left - before[i]) > 1);
        box.scrollLeft = keep;
        // ... and, before any scrolling, its box fades out at the right edge (course.js, course.css)
        const cs = getComputedStyle(box), fade = cs.maskImage || cs.webkitMaskImage || 'none';
        const missing = [moved && 'its first column scrolls away',
                         !fade.includes('gradient') && 'no fade at its right edge'].filter(Boolean);
        if (missing.length) tables.push(`${label}: ${Math.round(box.scrollWidth)} px in a ${box.clientWidth} ` +
                                        `px box with no scroll cue (${missing.join('; ')})`);
    }
    // a results table's caption is a paragraph under its box (course.js), never cut by the box
    for (const c of document.querySelectorAll('.bd-article .pagedlib-table caption, .bd-article .pagedlib-table-caption'))
        if (c.tagName === 'CAPTION' || c.getBoundingClientRect().right > vw + 1)
            tables.push(`caption ${where(c)} "${c.textContent.trim().slice(0, 30)}": cut at the screen`);
    const images = [...document.querySelectorAll('.bd-article img')].filter(visible)
        .filter(i => i.naturalWidth > 0 && !i.closest('.animation'))
        .map(i => ({src: i.currentSrc || i.src, alt: (i.alt || '').slice(0, 50), natural: i.naturalWidth,
                    shown: i.getBoundingClientRect().width}));
    const steppers = [];
    for (const s of [...document.querySelectorAll('.bd-article .pagedlib-stepper')].filter(visible)) {
        const sr = s.getBoundingClientRect();
        if (sr.right > vw + 1) steppers.push(`stepper ${s.dataset.stepper}: its box ends at ${Math.round(sr.right)} px`);
        for (const box of s.querySelectorAll('*')) {
            if (visible(box) && box.scrollWidth > box.clientWidth + 1 && ['auto', 'scroll', 'hidden'].includes(getComputedStyle(box).overflowX))
                steppers.push(`stepper ${s.dataset.stepper}: ${box.tagName.toLowerCase()} scrolls sideways (${box.scrollWidth} px in ${box.clientWidth})`);
        }
        for (const th of s.querySelectorAll('th')) {
            const r = th.getBoundingClientRect();
            if (visible(th) && r.right > Math.min(vw, sr.right) + 1) steppers.push(`stepper ${s.dataset.stepper}: column "${th.textContent.trim()}" off the screen`);
        }
    }
    const tryit = [];
    for (const t of [...document.querySelectorAll('.bd-article table')].filter(visible)) {
        if (!location.pathname.endsWith('try-paging.html')) break;
        if (t.closest('.pagedlib-stepper')) continue;
        const rows = [...t.querySelectorAll('tbody tr')];
        const stacked = rows.length > 0 && rows.every(r => { const cs = [...r.cells].filter(visible);
            return cs.length < 2 || cs[1].getBoundingClientRect().top >= cs[0].getBoundingClientRect().bottom - 1; });
        if (!stacked) tryit.push(`table "${(t.querySelector('th, td') || t).textContent.trim().slice(0, 30)}" is not stacked`);
        for (const c of t.querySelectorAll('td, th')) if (visible(c) && c.getBoundingClientRect().right > vw + 1)
            tryit.push(`cell "${c.textContent.trim().slice(0, 30)}" ends at ${Math.round(c.getBoundingClientRect().right)} px`);
    }
    const math = [...document.querySelectorAll('.bd-article mjx-container[display="true"]')].filter(visible)
        .filter(m => m.scrollWidth > m.clientWidth + 1)
        .map(m => `equation ${where(m)} ${m.scrollWidth} px in a ${m.clientWidth} px box (break it into lines)`);
    return {outputs, tables, images, steppers, tryit, math, scrollWidth: document.documentElement.scrollWidth};
})()"""


def png_text_px(data: bytes) -> float | None:
    """The smallest text's height in image pixels that a PNG's tEXt chunk ``TEXT_KEY`` holds, or None."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    at = 8
    while at + 8 <= len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + size]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            if key.decode("latin-1") == TEXT_KEY:
                return float(value)
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            if key.decode("latin-1") == TEXT_KEY:
                flag, rest = rest[0], rest[2:]
                _, _, rest = rest.partition(b"\0")
                _, _, text = rest.partition(b"\0")
                return float(zlib.decompress(text) if flag else text)
        elif kind == b"IEND":
            break
        at += 12 + size
    return None


def _image_bytes(src: str, page_file: Path) -> bytes:
    if src.startswith("data:"):
        return base64.b64decode(src.split(",", 1)[1])
    if src.startswith("file://"):
        return Path(src[len("file://"):].split("?")[0]).read_bytes()
    return (page_file.parent / src).read_bytes()


def figure_problems(images: list[dict], page_file: Path) -> list[str]:
    out = []
    for img in images:
        if img["src"].startswith("data:image/svg") or img["src"].lower().split("?")[0].endswith(".svg"):
            continue                                      # vector: measured by its own text size
        text = png_text_px(_image_bytes(img["src"], page_file))
        source = "its metadata"
        if text is None:
            text, source = DEFAULT_TEXT_PX, f"the course's {SMALLEST_FONT} pt"
        shown = min(PHONE_WIDTH, img["shown"])
        px = text * shown / img["natural"]
        if px < PHONE_TEXT_PX - 0.05:
            out.append(f"figure '{img['alt']}': smallest text {px:.1f} px at {shown:.0f} px wide "
                       f"({text:.0f} image px by {source}, {img['natural']} px natural)")
    return out


def phone_problems(facts: dict, page_file: Path) -> list[str]:
    return (facts["outputs"] + facts["tables"] + figure_problems(facts["images"], page_file)
            + facts["steppers"] + facts["tryit"] + facts["math"]
            + ([f"the page is {facts['scrollWidth']} px wide"] if facts["scrollWidth"] > PHONE else []))


@pytest.mark.parametrize("page", PAGES)
def test_the_page_fits_a_phone(browser, site, page):
    browser.viewport(PHONE, 900, mobile=True)
    page_file = site / f"{page}.html"
    browser.open(page_file.as_uri())
    browser.js("""new Promise(done => { const imgs = [...document.images];
        const wait = () => imgs.every(i => i.complete) ? done(0) : setTimeout(wait, 50); wait(); })""")
    browser.js(MATH_TYPESET)
    time.sleep(0.2)
    # open every collapsed output, hint and solution: what a reader can open must fit too
    browser.js("document.querySelectorAll('.bd-article details').forEach(d => d.open = true)")
    time.sleep(0.1)
    facts = browser.js(PHONE_FACTS)
    browser.screenshot(ARTIFACTS / f"{page.replace('/', '__')}.png", beyond_viewport=False)
    problems = phone_problems(facts, page_file)
    assert console_problems(browser) == []
    assert not problems, f"{len(problems)} problem(s) on {page} at {PHONE} px:\n" + "\n".join(problems)


# The right-hand contents column: each heading's text ends inside the column and the window.
CONTENTS_PAST_EDGE = """(() => { const s = document.querySelector('.bd-sidebar-secondary');
    if (!s || !s.getClientRects().length) return [];
    const edge = Math.min(s.getBoundingClientRect().right, document.documentElement.clientWidth);
    const out = [];
    for (const a of s.querySelectorAll('a')) { const r = document.createRange(); r.selectNodeContents(a);
        const right = Math.max(...[...r.getClientRects()].map(q => q.right));
        if (right > edge + 1) out.push(`contents: "${a.textContent.trim().slice(0, 40)}" ends at ` +
                                       `${Math.round(right)} px, past ${Math.round(edge)} px`); }
    return out; })()"""


@pytest.mark.parametrize("page", PAGES)
def test_a_desktop_page_keeps_its_columns(browser, site, page):
    """At 1400 px a table wider than the column (chapter 12's page-size sweep) keeps the same cues:
    its first column stays put and its box fades out at the right edge; the page's contents column
    (right) holds its headings (the references page's long code name pushed it past the window)."""
    browser.viewport(1400, 900, mobile=False)
    browser.open((site / f"{page}.html").as_uri())
    time.sleep(0.2)
    problems = browser.js(PHONE_FACTS)["tables"]
    problems += browser.js(CONTENTS_PAST_EDGE)
    assert not problems, f"{len(problems)} problem(s) on {page} at 1400 px:\n" + "\n".join(problems)


def test_the_fade_goes_when_a_table_is_scrolled_to_its_end(browser, site):
    browser.viewport(PHONE, 900, mobile=True)
    browser.open((site / "notebooks" / "12_capacity_at_scale.html").as_uri())
    time.sleep(0.2)
    fade = "(b => { const cs = getComputedStyle(b); return (cs.maskImage || cs.webkitMaskImage || 'none'); })"
    assert "gradient" in browser.js(f"{fade}(document.querySelector('.course-scrolls'))")
    browser.js("(() => { const b = document.querySelector('.course-scrolls'); b.scrollLeft = b.scrollWidth; })()")
    time.sleep(0.3)                                   # the scroll event is delivered on the next frame
    assert browser.js(f"{fade}(document.querySelector('.course-scrolls'))") == "none"
    browser.js("(() => { const b = document.querySelector('.course-scrolls'); b.scrollLeft = 0; })()")
    time.sleep(0.3)
    assert "gradient" in browser.js(f"{fade}(document.querySelector('.course-scrolls'))")


# ---- the checks can fail -------------------------------------------------------------------------
def _png_with_text(value: str) -> bytes:
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"tEXt", TEXT_KEY.encode() + b"\0" + value.encode()) + chunk(b"IEND", b""))


def test_the_figure_measure_reads_the_png_and_can_fail(tmp_path):
    png = _png_with_text("20")
    assert png_text_px(png) == 20.0 and png_text_px(b"\x89PNG\r\n\x1a\n") is None
    src = "data:image/png;base64," + base64.b64encode(png).decode()
    ok = {"src": src, "alt": "a", "natural": 720, "shown": 352}          # 20 * 352 / 720 = 9.8 px
    small = {"src": src, "alt": "b", "natural": 1560, "shown": 352}      # 20 * 352 / 1560 = 4.5 px
    assert figure_problems([ok], tmp_path / "x.html") == []
    assert "4.5 px" in figure_problems([small], tmp_path / "x.html")[0]


def test_a_page_that_breaks_every_rule_is_reported_whole(browser, tmp_path):
    """A page with a long output line, a wide table without a cue, a wide stepper and an unstacked
    table: every one is reported."""
    long_line = "x" * 120
    cells = "".join(f"<td>column {i} with words</td>" for i in range(12))
    (tmp_path / "bad.html").write_text(f"""<html><head><meta name="viewport" content="width=device-width">
        </head><body><article class="bd-article"><section id="s">
        <div class="cell_output"><pre>{long_line}</pre></div>
        <div style="overflow-x:auto"><table><tr>{cells}</tr><tr>{cells}</tr></table></div>
        <div class="pagedlib-stepper" data-stepper="wide"><div style="overflow-x:auto"><table>
          <tr><th>{'m' * 80}</th><th>l</th><th>acc</th></tr></table></div></div>
        </section></article></body></html>""")
    browser.viewport(PHONE, 900, mobile=True)
    browser.open((tmp_path / "bad.html").as_uri())
    facts = browser.js(PHONE_FACTS)
    assert len(facts["outputs"]) == 1 and "120 chars" in facts["outputs"][0]
    assert len(facts["tables"]) == 1 and "no scroll cue" in facts["tables"][0]
    assert any('column "acc" off the screen' in s for s in facts["steppers"])
    assert json.dumps(facts["tryit"]) == "[]"        # not the Try-it page


def test_the_colab_badge_is_never_a_broken_image(browser, site):
    """Offline (as here), Colab's badge cannot load: course.js puts the course's own in its place."""
    browser.viewport(1400, 900, mobile=False)
    browser.open((site / "notebooks" / "03_fragmentation.html").as_uri())
    time.sleep(0.5)
    badges = browser.js("""[...document.querySelectorAll('.bd-article img[alt="Open In Colab"]')]
        .map(i => [i.getAttribute('src'), i.naturalWidth])""")
    assert badges and all(width > 0 for _, width in badges), badges
    assert all(src.endswith("_static/colab-badge.svg") for src, _ in badges)
