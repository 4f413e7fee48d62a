"""Links between chapters work wherever a notebook is read.

On Colab a notebook opens alone: a relative link such as ``03_fragmentation.ipynb`` or
``../book/references.md`` leads nowhere there. So every link from a notebook to another course page
is written at its published address (``pagedlib.facts.site_url``), and must name a page that exists
(and, for the references, a heading that exists). On the site, ``_static/course.js`` turns those
addresses back into relative links, so a local build stays local: the browser test follows one.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import yaml

from pagedlib import facts

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


def links(nb) -> list[str]:
    return [target for cell in nb.cells if cell.cell_type == "markdown"
            for target in LINK.findall(cell.source)]


def relative_course_links(targets: list[str]) -> list[str]:
    """Links that only work next to the other files of the repository (dead on Colab)."""
    return [t for t in targets if not t.startswith(("http://", "https://", "#", "mailto:"))
            and re.search(r"\.(md|ipynb)(#|$)", t)]


def headings(md: Path) -> set[str]:
    """The anchors of a book page's headings (slugs as myst_heading_anchors makes them)."""
    text = md.read_text()
    return {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-")
            for h in re.findall(r"^#{1,3} (.+)$", text, flags=re.M)}


def broken_site_links(targets: list[str]) -> list[str]:
    """Links to the published site whose page (or references heading) does not exist here."""
    out = []
    for t in targets:
        if not t.startswith(facts.SITE_URL):
            continue
        path, _, anchor = t[len(facts.SITE_URL):].partition("#")
        if not path.endswith(".html"):
            out.append(f"{t}: not a page")
            continue
        stem = ROOT / path[:-len(".html")]
        source = next((s for s in (stem.with_suffix(".md"), stem.with_suffix(".ipynb")) if s.exists()), None)
        if source is None:
            out.append(f"{t}: no page {path}")
        elif anchor and source.suffix == ".md" and anchor not in headings(source):
            out.append(f"{t}: no heading #{anchor} in {source.name}")
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_links_work_on_colab(path):
    targets = links(nbformat.read(path, as_version=4))
    assert not relative_course_links(targets), "write these with pagedlib.facts.site_url"
    assert not broken_site_links(targets)


def test_the_link_checks_can_fail():
    assert relative_course_links(["03_fragmentation.ipynb", "../book/references.md#x",
                                  "https://example.com/a.md"]) == ["03_fragmentation.ipynb",
                                                                   "../book/references.md#x"]
    good = facts.site_url("notebooks/03_fragmentation.ipynb")
    assert broken_site_links([good]) == []
    assert broken_site_links([facts.site_url("notebooks/99_missing.ipynb")])
    assert broken_site_links([facts.site_url("book/references.md", "no-such-heading")])
    assert broken_site_links([facts.site_url("book/references.md", "facts-about-production-engines")]) == []


def test_site_url_is_the_configured_base_and_the_one_course_js_localises():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["html"]["baseurl"] == facts.SITE_URL
    assert f'var SITE = "{facts.SITE_URL}";' in (ROOT / "_static" / "course.js").read_text()
    assert facts.site_url("book/references.md", "x") == f"{facts.SITE_URL}book/references.html#x"
    with pytest.raises(ValueError, match="book/"):
        facts.site_url("references")


@pytest.mark.slow
def test_on_the_site_a_chapter_link_stays_on_this_copy(site):
    from browser import open_browser
    page = site / "notebooks" / "02_reserve_max.html"
    with open_browser() as b:
        b.viewport(1400, 900)
        b.open(page.as_uri())
        hrefs = b.js("""[...document.querySelectorAll('article a')].map(a => a.href)""")
    nxt = [h for h in hrefs if h.endswith("03_fragmentation.html")]
    assert nxt and all(h == (site / "notebooks" / "03_fragmentation.html").as_uri() for h in nxt), nxt
    assert not [h for h in hrefs if h.startswith(facts.SITE_URL)]
