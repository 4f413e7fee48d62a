"""Every page of the built site on a phone (400 px, mobile emulation, headless Chromium): what a
reader sees must fit the screen or say that it scrolls.

For each page, every failure is listed (not only the first):

- **outputs**: no printed output block (a cell's ``pre``) wider than its box: its lines are at most
  60 characters (the course's rule) and the page sets their font so that 60 fit (course.js);
- **tables**: no table with headings wider than its box (course.js stacks it: a card per row, each
  cell labelled with its column's heading); any other table wider than its box shows that it
  scrolls: its first column stays put when the box is scrolled sideways (a sticky first column,
  course.css) and the box fades out at its right edge;
- **figures**: each content image's smallest text at least PHONE_TEXT_PX CSS px when the figure is
  shown PHONE_WIDTH (360) px wide, or as wide as it is shown, if narrower. The text's size is
  measured on the rendered image: the PNG's smallest text height in image pixels, from its metadata
  (``pagedlib.plots.display.png_2x`` writes it) or, without one, the course's smallest font
  (SMALLEST_FONT pt at PIXEL_RATIO x DISPLAY_DPI), times the shown width over the natural width;
- **steppers** (chapters 6 and 8): every column inside the 400 px screen, no sideways scrolling
  (chapter 8's m, l and acc included);
- **Try-it**: its table stacked (one row under another), every cell inside the screen.

A small book of tables (one notebook page, built in seconds) checks the stacking itself: at 400 px a
table wider than its box becomes a card per row, every cell labelled, and one that fits keeps its
columns, also after the window is widened and narrowed again; at 1400 px no table is stacked.

Screenshots of the top of every page go to ``artifacts/site/phone/``.
"""
from __future__ import annotations

import base64
import json
import shutil
import struct
import subprocess
import sys
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
        // wider than its box: on a phone a table with headings is stacked instead (course.js) ...
        if (vw <= 600 && t.tHead) { tables.push(`${label}: ${Math.round(box.scrollWidth)} px in a ` +
                                                `${box.clientWidth} px box, not stacked`); continue; }
        // ... and any other keeps its first column in place when the box scrolls sideways
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


# ---- wide tables are stacked on a phone (a small book: one notebook page, built in seconds) -------
@pytest.fixture(scope="module")
def table_book(tmp_path_factory) -> Path:
    """A one-page book of tables, built with the course's _config.yml and _static: Markdown tables
    (one wide, one narrow), show_table's HTML tables (wide, narrow, and one too wide even for a
    desktop column), a wide table inside a stepper and a code line wider than a phone."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    from pagedlib.output import TableView
    book = tmp_path_factory.mktemp("table-book")
    shutil.copytree(ROOT / "_static", book / "_static")
    shutil.copytree(ROOT / "book" / "_ext", book / "book" / "_ext")
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    words = ["pages", "blocks", "tokens", "requests", "waste", "slots", "copies", "steps"]
    shape = "`[num_seqs, num_heads, max_blocks_per_seq, block_size]`"    # code: kept whole in a column
    md_wide = ("| model | " + " | ".join(f"{w} per step" for w in words) + " | shape |\n"
               + "|---" * (len(words) + 2) + "|\n"
               + "".join(f"| model-{i} | " + " | ".join(f"{i * 100 + j:,} {w}" for j, w in enumerate(words))
                         + f" | {shape} |\n" for i in range(3)))
    md_narrow = "| block | share |\n|---|---|\n| 16 | 3.1% |\n| 32 | 6.0% |\n"
    wide = TableView([[f"engine {i}", *(f"{i * 1000 + j:,}" for j in range(5))] for i in range(4)],
                     ["engine", "running at once", "peak tokens", "preemptions", "TTFT p99 (s)",
                      "tokens/s"], caption="A table wider than a phone.")
    narrow = TableView([["16", "3.1%"], ["32", "6.0%"]], ["page", "waste"])
    numbered = TableView([[f"{16 * 4 ** i}", *(f"{i * 1000 + j:,} tokens" for j in range(5))]
                          for i in range(3)],
                         ["budget", "running at once", "peak tokens", "preemptions", "TTFT p99 (s)",
                          "tokens/s"])
    widest = TableView([[f"row {i}", *(f"value {i}.{j}" for j in range(18))] for i in range(3)],
                       ["row", *(f"column {j}" for j in range(18))])
    stepper = ('<div class="pagedlib-stepper"><table><thead><tr>' + "".join(
        f"<th>{'m' * 12} {j}</th>" for j in range(8)) + "</tr></thead><tbody><tr>" + "".join(
        f"<td>{j}.000000</td>" for j in range(8)) + "</tr></tbody></table></div>")

    def html(text):
        return new_output("display_data", data={"text/html": text, "text/plain": "table"})
    nb = new_notebook(cells=[
        new_markdown_cell("# Tables on a phone\n\nA wide Markdown table:\n\n" + md_wide
                          + "\nA narrow one:\n\n" + md_narrow),
        new_code_cell("show_table(rows, headers)  # " + "a comment wider than a phone " * 3,
                      outputs=[html(wide._repr_html_()), html(narrow._repr_html_()),
                               html(numbered._repr_html_()),
                               html(widest._repr_html_()), html(stepper)], execution_count=1)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (book / "notebooks").mkdir()
    nbformat.write(nb, book / "notebooks" / "tables.ipynb")
    (book / "_toc.yml").write_text("format: jb-book\nroot: notebooks/tables\n")
    jb = Path(sys.executable).with_name("jupyter-book")
    run = subprocess.run([str(jb), "build", str(book), "-W", "-n", "--keep-going"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"jupyter-book build failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return book / "_build" / "html" / "notebooks" / "tables.html"


# Each table of the page (the stepper's apart): whether its rows are stacked, whether it is wider than
# its box, and its body cells' labels against the column headers.
TABLE_FORMS = r"""(() => {
    const shown = e => e.getClientRects().length > 0;
    return [...document.querySelectorAll('.bd-article table')].filter(shown).map(t => {
        const heads = [...t.querySelectorAll('thead th')].map(th => th.textContent.trim());
        const rows = [...t.querySelectorAll('tbody tr')];
        const box = t.parentElement, cells = rows.flatMap(r => [...r.cells]);
        const stacked = rows.every(r => r.cells.length < 2 ||
            r.cells[1].getBoundingClientRect().top >= r.cells[0].getBoundingClientRect().bottom - 1);
        const unlabelled = rows.flatMap(r => [...r.cells].filter((c, i) => i > 0 && (
            c.dataset.label !== heads[i] ||
            !getComputedStyle(c, '::before').content.includes(heads[i])))
            .map(c => c.textContent.trim()));
        // a cell's value starts on its label's line (a Markdown cell's paragraph too)
        const split = cells.filter(c => { const r = document.createRange(); r.selectNodeContents(c);
            const text = [...r.getClientRects()].find(q => q.width > 0), cs = getComputedStyle(c);
            return text && text.top - c.getBoundingClientRect().top - parseFloat(cs.paddingTop) >
                           0.8 * parseFloat(cs.fontSize); }).length;
        return {first: heads[0] || (t.querySelector('td, th') || t).textContent.trim().slice(0, 20),
                stepper: !!t.closest('.pagedlib-stepper'), stacked,
                wider: Math.max(box.scrollWidth, t.getBoundingClientRect().width) > box.clientWidth + 1,
                titlesBold: rows.every(r => parseInt(getComputedStyle(r.cells[0]).fontWeight) >= 600),
                // a card titled by a bare number shows its column's heading before it
                titleLabels: rows.map(r => getComputedStyle(r.cells[0], '::before').content),
                cellsPastScreen: cells.filter(c => c.getBoundingClientRect().right >
                                              document.documentElement.clientWidth + 1).length,
                unlabelled, split, scrollCue: !!t.closest('.course-scrolls')};
    });
})()"""
WIDE_TABLES = {"model", "engine", "row", "budget"}   # the first headers of the tables wider than a phone


def _table_forms(browser) -> dict[str, dict]:
    forms = browser.js(TABLE_FORMS)
    return {("stepper" if f["stepper"] else f["first"]): f for f in forms}


def test_a_wide_table_is_stacked_on_a_phone_and_not_on_a_desktop(browser, table_book):
    """At 400 px every table wider than its box (Markdown or show_table's, steppers apart) becomes a
    card per row: the row's first cell bold, each other cell "header: value"; a table that fits keeps
    its columns. The check is made again after the window grows past the phone width and shrinks
    back (a phone turned sideways). At 1400 px no table is stacked and the one wider than the column
    scrolls with its cue. Code keeps its fade at any width."""
    browser.viewport(PHONE, 900, mobile=True)
    browser.open(table_book.as_uri())
    time.sleep(0.3)
    for turn in ("loaded", "turned back"):
        forms = _table_forms(browser)
        assert set(forms) == {"model", "block", "page", "engine", "row", "budget", "stepper"}, forms
        assert forms["budget"]["titleLabels"] == ['"budget: "'] * 3, forms["budget"]
        assert forms["engine"]["titleLabels"] == ["none"] * 4, forms["engine"]   # named by its title
        for name, form in forms.items():
            if name in WIDE_TABLES:
                assert form["stacked"] and form["titlesBold"], (turn, form)
                assert not form["wider"] and form["cellsPastScreen"] == 0, (turn, form)
                assert form["unlabelled"] == [] and form["split"] == 0, (turn, form)
                assert not form["scrollCue"], (turn, form)
            else:
                assert not form["stacked"], (turn, form)
        assert forms["stepper"]["wider"], "the stepper's table keeps its own layout"
        assert browser.js("!!document.querySelector('.bd-article div.highlight pre.course-scrolls')")
        browser.screenshot(ARTIFACTS / f"stacked-tables-{turn.replace(' ', '-')}.png")
        browser.viewport(700, 900, mobile=True)       # wider than a phone: the tables come back
        time.sleep(0.4)
        assert not any(f["stacked"] for f in _table_forms(browser).values())
        browser.viewport(PHONE, 900, mobile=True)
        time.sleep(0.4)
    browser.viewport(1400, 900, mobile=False)
    browser.open(table_book.as_uri())
    time.sleep(0.3)
    forms = _table_forms(browser)
    assert not any(f["stacked"] for f in forms.values()), forms
    assert forms["row"]["wider"] and forms["row"]["scrollCue"], forms["row"]
    assert not forms["engine"]["wider"], forms["engine"]      # wide on a phone, not on a desktop
    browser.screenshot(ARTIFACTS / "stacked-tables-desktop.png")


def test_the_fade_goes_when_a_table_is_scrolled_to_its_end(browser, table_book):
    """A table wider than a desktop column (on a phone it is stacked) fades at its box's right edge
    until the box is scrolled to its end."""
    browser.viewport(1400, 900, mobile=False)
    browser.open(table_book.as_uri())
    time.sleep(0.2)
    box = "document.querySelector('.pagedlib-table.course-scrolls')"
    fade = f"(b => {{ const cs = getComputedStyle(b); return (cs.maskImage || cs.webkitMaskImage || 'none'); }})({box})"
    assert "gradient" in browser.js(fade)
    browser.js(f"(b => {{ b.scrollLeft = b.scrollWidth; }})({box})")
    time.sleep(0.3)                                   # the scroll event is delivered on the next frame
    assert browser.js(fade) == "none"
    browser.js(f"(b => {{ b.scrollLeft = 0; }})({box})")
    time.sleep(0.3)
    assert "gradient" in browser.js(fade)


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
