"""The website's small bugs and housekeeping (issue 38), checked without a browser.

The sources (notebooks, _config.yml, the CSS and JavaScript in _static, book/_ext) are read as text;
the slow tests at the end parse a built site with BeautifulSoup (a fresh strict build, or the one
PAGEDLIB_SITE names, as in tests/test_site.py).
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "_static"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
MIN_CONTRAST = 4.5                      # WCAG AA for normal text


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- item 6: small bugs -----------------------------------------------------------------------------
OBJECT_REPR = re.compile(r"^<[\w.]+( object)? at 0x[0-9a-f]+>$")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_cell_prints_an_object_s_address(path):
    """A cell's last expression (``ax.legend(...)``) must not leave ``<matplotlib.legend.Legend at
    0x...>`` in the stored output: the site shows it, and gives it a figure's caption."""
    nb = nbformat.read(path, as_version=4)
    bad = [(cell.get("id"), out["data"]["text/plain"]) for cell in nb.cells if cell.cell_type == "code"
           for out in cell.get("outputs", []) if out.get("output_type") == "execute_result"
           and OBJECT_REPR.match(str(out.get("data", {}).get("text/plain", "")).strip())]
    assert not bad, f"{path.name}: cells print an object's repr (end them with `_ = ...`): {bad}"


def _css_rules(css: str) -> list[tuple[str, str]]:
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return [(sel.strip(), body) for sel, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css)]


def test_every_element_the_steppers_mark_current_is_highlighted():
    """steppers.js marks a log row (tr) and a shared block's ref count (td) "pagedlib-current";
    exercises.css must style that class on both elements (it styled only tr's cells)."""
    js = (STATIC / "steppers.js").read_text()
    tags = set(re.findall(r'el\("(\w+)",\s*\{[^}]*class:[^}]*"pagedlib-current"', js))
    assert tags == {"tr", "td"}, tags
    selectors = [s for sel, body in _css_rules((STATIC / "exercises.css").read_text())
                 if "background" in body for s in sel.split(",")]
    for tag in tags:
        assert any(re.search(rf"(^|\s){tag}\.pagedlib-current($|\s)", s.strip()) for s in selectors), \
            f"no rule with a background for {tag}.pagedlib-current in exercises.css"


def test_the_website_s_fallback_names_its_hint_button():
    """On the site there is no `.hint()` to call: a wrong answer no mistake explains says to press
    Hint; the notebook's checker still says `.hint()`."""
    from pagedlib.exercises import SITE_TRY_A_HINT, TRY_A_HINT, registry
    from pagedlib.exercises.answers import answer_spec
    value = [ex for ex in registry().values() if ex.is_declarative]
    assert value
    for ex in value[:5]:
        fallback = answer_spec(ex)["fallback"]
        assert fallback == SITE_TRY_A_HINT and ".hint()" not in fallback and "Hint" in fallback
    assert "`.hint()`" in TRY_A_HINT and "website" not in TRY_A_HINT


# ---- item 7: lighter pages and housekeeping -----------------------------------------------------------
def test_the_config_has_no_binder_or_thebe_leftovers():
    assert set(CONFIG["launch_buttons"]) == {"colab_url"}, "only the Colab launch button is used"
    assert CONFIG["sphinx"]["local_extensions"]["lighter_pages"] == "book/_ext"


def test_the_favicon_and_mathjax_are_served_with_the_site():
    favicon = ROOT / CONFIG["html"]["favicon"]
    assert favicon.is_file() and favicon.stat().st_size < 4096
    assert favicon.read_text().lstrip().startswith("<svg")
    mathjax = STATIC / CONFIG["sphinx"]["config"]["mathjax_path"]
    assert mathjax.is_file() and "://" not in CONFIG["sphinx"]["config"]["mathjax_path"]
    fonts = list((mathjax.parent / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert len(fonts) >= 20, "MathJax's CHTML output loads its woff-v2 fonts next to the script"
    total = sum(f.stat().st_size for f in mathjax.parent.rglob("*") if f.is_file())
    assert total < 2_000_000, f"the bundled MathJax is {total} bytes"
    assert (mathjax.parent / "LICENSE").is_file()


class _Asset:
    def __init__(self, filename, body=""):
        self.filename, self.attributes = filename, {"body": body} if body else {}


class _App:
    class config:
        html_title = "Paged attention from scratch"
        project = "Paged attention from scratch"
        root_doc = "book/intro"


def test_pages_lose_thebe_and_gain_a_description_and_open_graph_tags():
    ext = _module(ROOT / "book" / "_ext" / "lighter_pages.py", "lighter_pages")
    from docutils.utils import new_document
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser

    doc = new_document("x", get_default_settings(Parser))
    doc += nodes.paragraph(text="short")
    doc += nodes.paragraph(text="Prerequisites: chapter 4 · Time: about 35 minutes · GPU: not needed (runs "
                                "on a CPU) · Code: pagedlib/memory/block_manager.py")
    doc += nodes.paragraph(text="Pages of sixteen tokens, taken only as tokens arrive, waste under one "
                                "page per request, so many more requests fit. " * 3)
    context = {"script_files": [_Asset("_static/sphinx-thebe.js"), _Asset(None, 'const THEBE_JS_URL = "x"'),
                                _Asset("_static/course.js"), _Asset("_static/mathjax/tex-chtml-full.js")],
               "css_files": [_Asset("_static/sphinx-thebe.css"), _Asset("_static/course.css")],
               "body": '<p>a</p>\n<script type="text/x-thebe-config">\n{ binderOptions: {} }\n</script>',
               "title": "Sharing pages", "titlesuffix": " &#8212; Paged attention from scratch",
               "metatags": ""}
    ext._page_context(_App, "notebooks/06_sharing", "page.html", context, doc)
    assert [a.filename for a in context["script_files"]] == ["_static/course.js"], "no math: no MathJax"
    with_math = {"script_files": [_Asset("_static/mathjax/tex-chtml-full.js")], "title": "t"}
    doc_math = new_document("m", get_default_settings(Parser))
    doc_math += nodes.math(text="x^2")
    ext._page_context(_App, "notebooks/08_triton_kernel", "page.html", with_math, doc_math)
    assert [a.filename for a in with_math["script_files"]] == ["_static/mathjax/tex-chtml-full.js"]
    assert [a.filename for a in context["css_files"]] == ["_static/course.css"]
    assert "thebe" not in context["body"] and "<p>a</p>" in context["body"]
    description = re.search(r'<meta name="description" content="([^"]+)"', context["metatags"]).group(1)
    assert description.startswith("Pages of sixteen tokens") and len(description) <= ext.DESCRIPTION_CHARS
    assert description.endswith("\u2026")
    for prop in ("og:title", "og:description", "og:site_name", "og:type"):
        assert f'property="{prop}"' in context["metatags"]
    assert 'property="og:title" content="Sharing pages"' in context["metatags"]
    landing = {"title": "Paged attention from scratch"}
    ext._page_context(_App, "book/intro", "page.html", landing, None)
    site = "Paged attention from scratch"
    assert ext.title_once(f"<head><title>{site} &#8212; {site}</title>") == f"<head><title>{site}</title>", \
        "the landing page's title is the site's: said once"
    chapter = f"<title>Sharing pages &#8212; {site}</title>"
    assert ext.title_once(chapter) == chapter, "a chapter keeps the site's name after its own"
    assert ext.SITE_DESCRIPTION[:40] in landing["metatags"]
    assert 40 <= len(ext.SITE_DESCRIPTION) <= ext.DESCRIPTION_CHARS


def _hex_luminance(colour: str) -> float:
    c = [int(colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_hex_luminance(a), _hex_luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _theme_surfaces() -> dict[str, str]:
    """The theme's --pst-color-surface in light and dark mode, from the installed theme's CSS."""
    import pydata_sphinx_theme
    css = (Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static"
           / "styles" / "pydata-sphinx-theme.css").read_text()
    out = {}
    for mode in ("light", "dark"):
        block = re.search(rf"html\[data-theme={mode}\]\{{([^}}]*)\}}", css).group(1)
        out[mode] = re.search(r"--pst-color-surface:(#[0-9a-fA-F]{6})", block).group(1)
    return out


def test_exercise_actions_have_a_contrast_of_4_5_in_both_modes():
    """"Open in Colab" and Hint (text on the box's surface) and Check (text on its button)."""
    rules = dict(_css_rules((STATIC / "exercises.css").read_text()))
    surfaces = _theme_surfaces()
    for mode, selector in (("light", "html"), ("dark", 'html[data-theme="dark"]')):
        body = rules[selector]
        action = re.search(r"--pagedlib-action:\s*(#[0-9a-fA-F]{6})", body).group(1)
        on_action = re.search(r"--pagedlib-on-action:\s*(#[0-9a-fA-F]{6})", body).group(1)
        assert contrast(action, surfaces[mode]) >= MIN_CONTRAST, (mode, action, surfaces[mode])
        assert contrast(on_action, action) >= MIN_CONTRAST, (mode, on_action, action)
    css = (STATIC / "exercises.css").read_text()
    for selector in (".pagedlib-exercise-head .pagedlib-colab", ".pagedlib-answer-row .pagedlib-hint-button"):
        assert "color: var(--pagedlib-action)" in rules[selector], selector
    assert "background: var(--pagedlib-action); color: var(--pagedlib-on-action)" in \
        rules[".pagedlib-answer-row .pagedlib-check"], css[:0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_stores_widget_state(path):
    """The site never renders a widget view and a widget needs a kernel anyway: its stored state
    (115 KB in chapter 4) only weighed the pages down."""
    assert "widgets" not in nbformat.read(path, as_version=4).metadata


@pytest.mark.slow
def test_executing_a_notebook_stores_no_widget_state(tmp_path):
    path = tmp_path / "w.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import ipywidgets\nipywidgets.IntSlider(value=3)")])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nbformat.write(nb, path)
    execute = _module(ROOT / "scripts" / "execute_notebooks.py", "execute_notebooks")
    execute.execute(path)
    ran = nbformat.read(path, as_version=4)
    assert "application/vnd.jupyter.widget-view+json" in ran.cells[0].outputs[0]["data"]
    assert "widgets" not in ran.metadata


def test_the_landing_card_adds_up_the_chapters_header_lines():
    """Audience, prerequisites, the total time (the sum of the 'Time: about N minutes' of every
    chapter's header line) and the chapters that use a GPU, on the landing page."""
    total = 0
    for path in NOTEBOOKS:
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
        total += int(re.search(r"\*\*Time:\*\* about (\d+) minutes", text).group(1))
    intro = (ROOT / "book" / "intro.md").read_text()
    card = intro[intro.index("<!-- course-card"):intro.index("<!-- /course-card -->")]
    assert f"about {total / 60:.1f} hours for the {len(NOTEBOOKS)} chapters" in card
    for label in ("For:", "You need:", "Time:", "GPU:"):
        assert f"<strong>{label}</strong>" in card
    assert "chapters 0, 8, 9, 10 and 10b" in card
    # after the three buttons, which stay on a phone's first screen (tests/test_site.py)
    assert intro.index('<div class="course-buttons">') < intro.index("<!-- course-card")


# ---- the built site -------------------------------------------------------------------------------------
# the `site` fixture (one strict build of the book) is in tests/conftest.py


def _soup(site: Path, page: str):
    from bs4 import BeautifulSoup
    return BeautifulSoup((site / f"{page}.html").read_text(), "html.parser")


BUILT_PAGES = ("book/intro", "notebooks/04_pages", "notebooks/06_sharing", "notebooks/08_triton_kernel",
               "notebooks/10_serving_engine")


@pytest.mark.slow
@pytest.mark.parametrize("page", BUILT_PAGES)
def test_built_pages_are_lighter_and_describe_themselves(site, page):
    soup = _soup(site, page)
    html = str(soup)
    assert "thebe" not in html.lower(), f"{page} still loads sphinx-thebe"
    assert "binder" not in html.lower()
    assert "application/vnd.jupyter.widget-state+json" not in html, f"{page} embeds widget state"
    assert "cdn.jsdelivr.net/npm/mathjax" not in html
    icon = soup.find("link", rel="icon")
    assert icon and (site / page).parent.joinpath(icon["href"]).resolve().is_file()
    description = soup.find("meta", attrs={"name": "description"})
    assert description and 40 <= len(description["content"]) <= 160
    for prop in ("og:title", "og:description", "og:site_name", "og:type"):
        assert soup.find("meta", property=prop), f"{page}: no {prop}"
    title = soup.title.get_text()
    assert title.count("Paged attention from scratch") == 1, title
    mathjax = [s["src"] for s in soup.find_all("script", src=True) if "mathjax" in s["src"]]
    assert bool(mathjax) == bool(soup.select(".math")), f"{page}: MathJax {mathjax} without math, or math without it"


@pytest.mark.slow
def test_math_is_typeset_by_the_site_s_own_mathjax(site):
    soup = _soup(site, "notebooks/08_triton_kernel")
    src = [s["src"] for s in soup.find_all("script", src=True) if "mathjax" in s["src"]]
    assert len(src) == 1 and "://" not in src[0], src
    assert (site / "notebooks" / src[0].split("?")[0]).resolve().is_file()


@pytest.mark.slow
def test_the_ref_count_stepper_and_the_exercise_fallback_on_the_built_site(site):
    assert "td.pagedlib-current" in (site / "_static" / "exercises.css").read_text()
    spec_pages = [p for p in (site / "notebooks").glob("*.html") if "pagedlib-answer-spec" in p.read_text()]
    assert spec_pages
    for page in spec_pages:
        text = page.read_text()
        assert "(on the website: the Hint button)" not in text and "Press Hint for a clue." in text


def test_font_awesome_is_cut_to_the_icons_used():
    """The icons a page names and those the theme's CSS draws keep their glyphs; no other."""
    ext = _module(ROOT / "book" / "_ext" / "lighter_pages.py", "lighter_pages")
    css = ('.fa-bars:before,.fa-navicon:before{content:"\\f0c9"}.fa-rocket:before{content:"\\f135"}'
           ':root{--pst-icon-admonition-tip:"\\f0eb";--pst-icon-github:"\uf09b"}')
    assert ext.icon_code_points(css, {"bars", "lg"}) == {0xF0C9, 0xF0EB, 0xF09B}
    page = ('<script defer src="../_static/scripts/fontawesome.js?digest=55c2"></script>\n'
            '<script src="../_static/course.js"></script>')
    kept = ext.drop_fontawesome_script(page)
    assert "fontawesome" not in kept and kept.strip() == '<script src="../_static/course.js"></script>'


@pytest.mark.slow
def test_the_built_site_has_no_font_awesome_bundle_and_small_icon_fonts(site):
    assert not (site / "_static" / "scripts" / "fontawesome.js").exists()
    fonts = list((site / "_static" / "vendor" / "fontawesome" / "webfonts").iterdir())
    assert fonts and all(f.name.endswith(".subset.woff") and f.stat().st_size < 10_000 for f in fonts), fonts
    for page in BUILT_PAGES:
        assert "fontawesome.js" not in (site / f"{page}.html").read_text()


def _split_prints(soup) -> list[str]:
    """Printed outputs shown as two boxes in a row: a cell's consecutive prints (stdout between other
    writes) that the build did not merge, so a sentence is cut across boxes."""
    split = []
    for output in soup.select("div.cell_output"):
        boxes = [c for c in output.find_all("div", recursive=False)]
        for a, b in zip(boxes, boxes[1:]):
            if "stream" in a.get("class", []) and "stream" in b.get("class", []):
                split.append(b.get_text()[:60])
    return split


@pytest.mark.slow
def test_a_cell_s_prints_are_one_box(site):
    """nb_merge_streams: chapter 8 showed "every slot is block_tables[s, t // block_size]" and
    "* block_size + t % block_size" in two boxes."""
    from bs4 import BeautifulSoup
    split = {p.stem: _split_prints(_soup(site, f"notebooks/{p.stem}")) for p in NOTEBOOKS}
    assert {k: v for k, v in split.items() if v} == {}
    two = BeautifulSoup('<div class="cell_output"><div class="output stream">a</div>'
                        '<div class="output stream">b</div></div>', "html.parser")
    assert _split_prints(two) == ["b"]
