"""Sphinx extension: lighter pages, and the tags a link preview reads.

- **No thebe.** Jupyter Book 1.x always loads sphinx-thebe (a "live code" button run on Binder). The
  course has no such button, so every page carried its stylesheet, its script, a configuration
  pointing at an example Binder repository and a CDN address: all are dropped here.
- **MathJax served with the site.** A copy of MathJax 3 (``_static/mathjax``, from the npm package
  ``mathjax``; Apache-2.0, its LICENSE beside it) is loaded, only on pages with math, through
  ``mathjax_path`` in _config.yml. Jupyter Book adds every ``.js`` file under ``_static`` to every
  page; MathJax's are taken back out of that list, and out of the pages with no math of their own
  (Sphinx counts a toctree's children's math as the landing page's).
- **A description and Open Graph tags** on every page: ``description`` and ``og:description`` are
  the page's first paragraph of prose (cut at a word, at most DESCRIPTION_CHARS characters), the
  landing page's being SITE_DESCRIPTION; ``og:title``, ``og:site_name`` and ``og:type`` too.
- **The landing page's title said once**: "Paged attention from scratch", not "Paged attention from
  scratch - Paged attention from scratch" (fixed in the written page: the theme sets the suffix).
- **Font Awesome, only the icons used.** The theme loads Font Awesome's whole JavaScript bundle
  (``_static/scripts/fontawesome.js``, 1.49 MB, every free icon) on every page, and its web fonts
  (156 KB for the solid icons alone) for the icons its CSS draws. The theme's CSS draws every icon
  by itself from the fonts, so after the build the bundle's script tag is dropped from every page
  and the fonts are cut (fontTools) to the icons the pages and the theme's scripts name
  (``fa-bars``, ``fa-github``, ...) and those the theme's CSS shows (admonitions, link arrows): a
  few KB of WOFF. Where the theme's files are not as expected (another version) nothing changes.
"""
from __future__ import annotations

import html
import re

from docutils import nodes

MATHJAX_DIR = "mathjax/"               # under _static
DESCRIPTION_CHARS = 160                # what search engines show of a description
SITE_DESCRIPTION = ("An open course on how LLM serving engines manage KV-cache memory: from the naive "
                    "cache to paged attention, a Triton kernel and a serving engine.")
CHAPTER_FACTS = "Prerequisites:"      # a chapter's header line (scripts/sync_notebooks.py): not prose
_THEBE_CONFIG = re.compile(r'\s*<script type="text/x-thebe-config">.*?</script>', re.S)


def _drop_bundled_mathjax(app, config) -> None:
    config.html_js_files = [js for js in config.html_js_files
                            if not str(js[0] if isinstance(js, tuple) else js).startswith(MATHJAX_DIR)]


def _is_thebe(asset) -> bool:
    name = getattr(asset, "filename", None) or ""
    body = getattr(asset, "attributes", {}).get("body", "") or ""
    return "thebe" in name or "THEBE_JS_URL" in body


def _first_paragraph(doctree) -> str:
    """The first paragraph of prose: not a badge, a chapter's header line of facts or a caption."""
    if doctree is None:
        return ""
    for para in doctree.findall(nodes.paragraph):
        if any(isinstance(a, (nodes.caption, nodes.admonition, nodes.table, nodes.field_list))
               for a in _ancestors(para)):
            continue
        text = " ".join(para.astext().split())
        if len(text) >= 80 and not text.startswith(CHAPTER_FACTS):
            return text
    return ""


def _ancestors(node):
    while node.parent is not None:
        node = node.parent
        yield node


def shorten(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """``text`` cut at a word to at most ``limit`` characters, with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "\u2026"


def has_math(doctree) -> bool:
    return doctree is not None and any(True for _ in doctree.findall(
        lambda n: isinstance(n, (nodes.math, nodes.math_block))))


def _is_mathjax(asset) -> bool:
    return MATHJAX_DIR in (getattr(asset, "filename", None) or "")


def _page_context(app, pagename, templatename, context, doctree) -> None:
    for key in ("script_files", "css_files"):
        if context.get(key):
            context[key] = [a for a in context[key] if not _is_thebe(a)]
    # Sphinx counts a page's toctree children's math as its own (the landing page would load MathJax
    # for the chapters' formulas): only a page with math of its own loads it.
    if context.get("script_files") and not has_math(doctree):
        context["script_files"] = [a for a in context["script_files"] if not _is_mathjax(a)]
    if context.get("body"):
        context["body"] = _THEBE_CONFIG.sub("", context["body"])

    site = app.config.html_title or app.config.project
    title = re.sub(r"<[^>]+>", "", context.get("title") or "")
    is_root = pagename == app.config.root_doc
    description = SITE_DESCRIPTION if is_root else shorten(_first_paragraph(doctree)) or SITE_DESCRIPTION
    tags = {"description": description}
    og = {"og:title": html.unescape(title) or site, "og:description": description,
          "og:site_name": site, "og:type": "website"}
    meta = [f'<meta name="{k}" content="{html.escape(v, quote=True)}" />' for k, v in tags.items()]
    meta += [f'<meta property="{k}" content="{html.escape(v, quote=True)}" />' for k, v in og.items()]
    context["metatags"] = context.get("metatags", "") + "\n" + "\n".join(meta)


_REPEATED_TITLE = re.compile(r"<title>(.+?) &#8212; \1</title>")


def title_once(page_html: str) -> str:
    """``<title>X &#8212; X</title>`` (a page titled like the site, as the theme writes it) as
    ``<title>X</title>``."""
    return _REPEATED_TITLE.sub(r"<title>\1</title>", page_html, count=1)


# ---- Font Awesome: only the icons the site uses ----------------------------------------------------
FONTAWESOME_JS = "_static/scripts/fontawesome.js"          # under the output folder (the theme's)
THEME_CSS = "_static/styles/pydata-sphinx-theme.css"
WEBFONTS = "_static/vendor/fontawesome/webfonts"
_FA_SCRIPT = re.compile(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>')
_FA_USED = re.compile(r"\bfa-([a-z0-9]+(?:-[a-z0-9]+)*)")
_FA_GLYPH = re.compile(r'((?:\.fa-[a-z0-9-]+:before,?)+)\{content:"(\\[0-9a-f]+|[^"\\])"\}')
_THEME_ICON = re.compile(r'--pst-icon-[a-z0-9-]+:"(\\[0-9a-f]+|[^"\\])"')
_FONT_SRC = re.compile(r'src:url\((\.\./vendor/fontawesome/webfonts/)(fa-[a-z]+-\d+)\.woff2\) format\("woff2"\),'
                       r'url\(\.\./vendor/fontawesome/webfonts/\2\.ttf\) format\("truetype"\)')


def _char(text: str) -> int:
    return int(text[1:], 16) if text.startswith("\\") else ord(text)


def icon_code_points(theme_css: str, used: set[str]) -> set[int]:
    """The code points of the icons named in ``used`` (``.fa-bars:before{content:"\f0c9"}``) and of
    every icon the theme's own CSS shows (``--pst-icon-...``: admonitions, links, arrows)."""
    points = {_char(m.group(1)) for m in _THEME_ICON.finditer(theme_css)}
    for m in _FA_GLYPH.finditer(theme_css):
        names = set(re.findall(r"\.fa-([a-z0-9-]+):before", m.group(1)))
        if names & used:
            points.add(_char(m.group(2)))
    return points


def _icons_used(outdir) -> set[str]:
    """Icon names in the written pages' class attributes and in the scripts they load (the theme's
    scripts add a few icons, such as the search dialog's close button, at run time)."""
    used = set()
    for path in outdir.rglob("*.html"):
        for classes in re.findall(r'class="([^"]*)"', path.read_text(encoding="utf-8")):
            used.update(_FA_USED.findall(classes))
    for path in (outdir / "_static").rglob("*.js"):
        if "fontawesome" not in path.name and "mathjax" not in path.parts:
            used.update(_FA_USED.findall(path.read_text(encoding="utf-8", errors="replace")))
    return used


def _lighter_icons(outdir) -> bool:
    """Subset Font Awesome's fonts to the icons used (WOFF), point the theme's CSS at them, and drop
    the JavaScript bundle; False (nothing changed) where the theme's files are not as expected."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    bundle, css_path, fonts = outdir / FONTAWESOME_JS, outdir / THEME_CSS, outdir / WEBFONTS
    if not (bundle.is_file() and css_path.is_file() and fonts.is_dir()):
        return False
    css = css_path.read_text(encoding="utf-8")
    if len(_FONT_SRC.findall(css)) != 3:
        return False
    points = icon_code_points(css, _icons_used(outdir))
    for name in {m[1] for m in _FONT_SRC.findall(css)}:
        font = TTFont(fonts / f"{name}.ttf")
        options = subset.Options()
        options.flavor, options.layout_features = "woff", []
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=points & set(font.getBestCmap()))
        subsetter.subset(font)
        font.flavor = "woff"
        font.save(fonts / f"{name}.subset.woff")
        for old in (fonts / f"{name}.woff2", fonts / f"{name}.ttf"):
            old.unlink()
    css_path.write_text(_FONT_SRC.sub(r'src:url(\1\2.subset.woff) format("woff")', css), encoding="utf-8")
    for extra in bundle.parent.glob("fontawesome.js*"):
        extra.unlink()
    return True


def drop_fontawesome_script(page_html: str) -> str:
    return _FA_SCRIPT.sub("", page_html)


def _fix_written_pages(app, exception) -> None:
    # The theme's template sets the title's suffix itself (" - " + the site's title), after every
    # event a page's context goes through, and writes the Font Awesome script tag itself: both are
    # corrected in the written pages.
    if exception is not None or app.builder.format != "html":
        return
    from pathlib import Path
    outdir = Path(app.outdir)
    icons = _lighter_icons(outdir)
    for path in outdir.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        fixed = title_once(text)
        if icons:
            fixed = drop_fontawesome_script(fixed)
        if fixed != text:
            path.write_text(fixed, encoding="utf-8")


def setup(app):
    app.connect("build-finished", _fix_written_pages)
    app.connect("config-inited", _drop_bundled_mathjax, priority=900)
    app.connect("html-page-context", _page_context, priority=950)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
