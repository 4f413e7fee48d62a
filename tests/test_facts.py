"""pagedlib.facts: every fact about a production engine is written once, sourced and dated, and the
course says nothing that contradicts it."""
import datetime as dt
import re
from pathlib import Path

import nbformat
import pytest

from pagedlib import facts

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PAGES = sorted((ROOT / "book").glob("*.md")) + [ROOT / "README.md"]


def _sources(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        return [c.source for c in nbformat.read(path, as_version=4).cells]
    return [path.read_text()]


def _course_texts() -> dict[str, str]:
    """Every text a learner reads: notebook cells (markdown and code) and the book's pages."""
    return {str(p.relative_to(ROOT)): "\n\n".join(_sources(p)) for p in NOTEBOOKS + PAGES}


def _document(name: str) -> Path:
    if name.startswith("book/"):
        return ROOT / name
    return next(p for p in NOTEBOOKS if p.name.startswith(name + "_"))


@pytest.mark.parametrize("f", facts.FACTS, ids=lambda f: f.key)
def test_every_fact_has_an_engine_a_version_a_source_and_a_date(f):
    assert f.engine and f.version and f.text and f.source_name
    assert re.match(r"https://\S+$", f.source), f"{f.key}: the source must be a URL, got {f.source!r}"
    checked = dt.date.fromisoformat(f.checked)
    assert dt.date(2023, 6, 1) <= checked <= dt.date.today(), f"{f.key}: checked {f.checked}?"
    assert f.text.rstrip().endswith((".", ")")), f"{f.key}: the statement must end a sentence"


def test_keys_are_unique_and_every_fact_is_shown_somewhere():
    keys = [f.key for f in facts.FACTS]
    assert len(keys) == len(set(keys))
    shown = {k for box in facts.BOXES.values() for k in box} | {f.key for f in facts.FACTS if f.used_in}
    assert shown == set(keys), f"facts nobody shows: {sorted(set(keys) - shown)}"
    with pytest.raises(KeyError, match="known:"):
        facts.fact("no_such_fact")


def test_a_fact_is_told_once_in_a_chapter_and_once_in_chapters_5_to_9():
    """A fact a chapter's prose states word for word is not repeated in its box, and no box of
    chapters 5 to 9 repeats another's: the reader of one chapter after the next meets it once."""
    told_twice = [(f.key, ch) for f in facts.FACTS for ch in f.used_in if f.key in facts.BOXES.get(ch, ())]
    assert told_twice == [], "a fact in both the prose and the box of a chapter"
    later = [facts.BOXES[ch] for ch in ("05", "06", "07", "08", "09")]
    keys = [k for box in later for k in box]
    assert sorted({k for k in keys if keys.count(k) > 1}) == []


def test_chapters_10_and_10b_state_each_fact_in_one_box():
    """Read one after the other, the two engine chapters' boxes do not repeat a bullet word for word."""
    both = set(facts.BOXES["10"]) & set(facts.BOXES["10b"])
    assert not both, f"facts in the boxes of both chapter 10 and 10b: {sorted(both)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem.split("_")[0])
def test_each_chapter_shows_its_box_as_the_registry_writes_it(path):
    sources = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    boxes = [s for s in sources if facts.BOX_START in s]
    assert len(boxes) == 1, f"{path.name}: {len(boxes)} 'In production today' boxes"
    assert facts.render_box(path.stem.split("_")[0]) in boxes[0], \
        f"{path.name}: the box was edited by hand; edit pagedlib/facts.py and run scripts/sync_notebooks.py"
    # Reads the same in JupyterLab, on Colab and on the site: no MyST directive (Colab shows a fence)
    assert not any("```{" in s for s in sources), f"{path.name}: a MyST directive in its Markdown"


def test_a_box_is_html_around_markdown_with_every_source_and_date():
    box = facts.render_box("10")
    assert '<div class="admonition note">' in box and "In production today</strong></p>\n\n- " in box
    assert box.count("checked 20") == len(facts.BOXES["10"])      # one citation per fact
    assert "\n\n</div>" in box                                    # Markdown ends before the tag closes


@pytest.mark.parametrize("f", [f for f in facts.FACTS if f.used_in], ids=lambda f: f.key)
def test_a_fact_stated_in_prose_is_the_registered_sentence(f):
    want = facts.normalise(f.text)
    for name in f.used_in:
        text = facts.normalise("\n".join(_sources(_document(name))))
        assert want in text, f"{name} does not state {f.key!r} as pagedlib/facts.py does: {f.text}"


def test_no_text_of_the_course_contradicts_a_registered_fact():
    texts = _course_texts()
    found = [f"{where}: {m.group(0)!r} contradicts {f.key!r} ({f.text[:60]}...)"
             for f in facts.FACTS for pattern in f.contradicted_by
             for where, text in texts.items() for m in re.finditer(pattern, text)]
    assert not found, "\n".join(found)


# "vLLM's `block_size` is 16", "`tokens_per_block` is 32 by default", "`free_gpu_memory_fraction`, 0.9 by
# default": a setting named in backticks with its default value.
DEFAULT = re.compile(
    r"`(?P<a>[\w-]+)`,? (?:is |defaults to |of )?(?P<va>\d[\d.,]*\d|\d)(?: tokens)? by default"
    r"|`(?P<b>[\w-]+)` (?:is|defaults to) (?P<vb>\d[\d.,]*\d|\d)"
    r"|`(?P<c>[\w-]+)`[^.;`]{0,30}?\((?P<vc>\d[\d.,]*\d|\d) by default\)")


def _default_clashes(texts: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """Settings whose default the texts state with more than one value: name -> [(where, value)]."""
    found: dict[str, list[tuple[str, str]]] = {}
    for where, text in texts.items():
        for m in DEFAULT.finditer(facts.normalise(text)):
            name = m["a"] or m["b"] or m["c"]
            found.setdefault(name, []).append((where, m["va"] or m["vb"] or m["vc"]))
    return {name: seen for name, seen in found.items() if len({v for _, v in seen}) > 1}


def test_one_default_has_one_value_across_the_course():
    """The same setting, stated with its default in two places, says the same number."""
    texts = {**_course_texts(), "pagedlib/facts.py": "\n".join(f.text for f in facts.FACTS)}
    clashes = _default_clashes(texts)
    assert not clashes, f"one default, several values: {clashes}"


def test_the_default_check_can_fail():
    texts = {"a": "vLLM's default `block_size` is 16, and", "b": "with `block_size` 32 by default.",
             "c": "TensorRT-LLM's `tokens_per_block` is 32 by default; "
                  "`free_gpu_memory_fraction` (0.9 by default)"}
    assert _default_clashes(texts) == {"block_size": [("a", "16"), ("b", "32")]}


def test_sync_rewrites_a_box_edited_by_hand(tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "scripts"))
    import sync_notebooks
    nb = nbformat.v4.new_notebook()
    box = facts.render_box("04")
    edited = box.replace("is 16", "is 32")
    nb.cells = [nbformat.v4.new_markdown_cell("Text before.\n\n" + edited + "\n\nAfter.")]
    path = tmp_path / "04_pages.ipynb"
    assert sync_notebooks.sync_production_box(path, nb) == [
        "'In production today' box differs from pagedlib/facts.py"]
    assert nb.cells[0].source == "Text before.\n\n" + box + "\n\nAfter."   # the text around it is kept
    assert sync_notebooks.sync_production_box(path, nb) == []
    nb.cells[0].source = "no box"
    assert "0 'In production today' boxes" in sync_notebooks.sync_production_box(path, nb)[0]


def test_every_box_links_to_a_heading_of_the_references():
    text = (ROOT / "book" / "references.md").read_text()
    slugs = {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-")
             for h in re.findall(r"^## (.+)$", text, flags=re.M)}
    for chapter in facts.BOXES:
        for anchor in re.findall(r"references\.html#([\w-]+)", facts.render_box(chapter)):
            assert anchor in slugs, f"chapter {chapter}'s box links to #{anchor}, no such heading"


@pytest.mark.parametrize("f", [f for f in facts.FACTS if f.contradicted_by], ids=lambda f: f.key)
def test_a_contradiction_pattern_does_not_match_the_fact_itself(f):
    for pattern in f.contradicted_by:
        assert not re.search(pattern, f.text), f"{f.key}: {pattern!r} matches the registered statement"


def test_a_box_renders_as_a_titled_list_in_a_commonmark_renderer():
    """JupyterLab and Colab render notebook Markdown as CommonMark with HTML blocks passed through:
    the statements must come out as a list inside the box, not as raw text or a code block."""
    from markdown_it import MarkdownIt
    html = MarkdownIt("commonmark").render(facts.render_box("05"))
    assert html.index('<div class="admonition note">') < html.index("<strong>In production today</strong>") \
        < html.index("<ul>") < html.index("</ul>") < html.index("</div>")
    assert html.count("<li>") == len(facts.BOXES["05"]) and "<pre>" not in html and "- **" not in html


def test_a_merged_fact_cites_each_of_its_sources():
    merged = [f for f in facts.FACTS if f.also]
    assert merged, "no fact with more than one source to check"
    for f in merged:
        for url, name in ((f.source, f.source_name), *f.also):
            assert re.match(r"https://\S+$", url), f"{f.key}: a source must be a URL, got {url!r}"
            assert f"[{name}]({url})" in f.cite() and f"[{name}]({url})" in facts.render_list()


def test_a_box_calls_its_own_chapter_this_chapter():
    """Inside chapter 13 its box said "the same trade as chapter 13's prefix-aware router"; there it
    reads "this chapter's", while the list of every fact (book/references.md) keeps the number."""
    box13, box12 = facts.render_box("13"), facts.render_box("12")
    assert "the same trade as this chapter's prefix-aware router" in box13
    assert "Two levers this chapter's simulator leaves out" in box12
    assert not re.search(r"chapter 1[23]'s", box13 + box12)
    assert "the same trade as chapter 13's prefix-aware router" in facts.render_list()
    assert facts.in_chapter("Chapter 4b's pages and chapter 4's", "04b") == \
        "this chapter's pages and chapter 4's"
    assert facts.in_chapter("the page table of chapter 5, as built in chapter 5 (not chapter 50)", "05") == \
        "the page table of this chapter, as built in this chapter (not chapter 50)"
    assert "the CSR page table of this chapter" in facts.render_box("05")


def _opening(markdown: str, words: int = 5) -> str:
    """The first ``words`` words of a Markdown statement, as read: no emphasis, code marks or links."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"[*_`]", "", text)
    return " ".join(re.sub(r"[^\w.'-]+", " ", text).lower().split()[:words])


def _listed_facts() -> dict[str, list[str]]:
    """The list of facts in book/references.md: each heading (### ...) with its bullets."""
    text = (ROOT / "book" / "references.md").read_text()
    section = text.split("<!-- facts:", 1)[1].split("<!-- /facts -->", 1)[0].split("\n", 1)[1]
    groups: dict[str, list[str]] = {"": []}
    heading = ""
    for line in section.splitlines():
        if line.startswith("### "):
            heading = line[4:].strip()
            assert heading not in groups, f"two headings {heading!r} in the list of facts"
            groups[heading] = []
        elif line.startswith("- "):
            groups[heading].append(line[2:])
    return {h: bullets for h, bullets in groups.items() if bullets or h}


def test_the_references_list_facts_under_one_heading_per_engine_each_opening_once():
    """book/references.md lists the facts under a heading per engine, and under one heading no two
    bullets open with the same five words ("FlashInfer is a kernel library" twice read as a dump)."""
    groups = _listed_facts()
    assert "" not in groups, "facts listed before the first engine's heading"
    for heading, bullets in groups.items():
        openings = [_opening(b) for b in bullets]
        repeated = sorted({o for o in openings if openings.count(o) > 1})
        assert not repeated, f"under {heading!r}, bullets open alike: {repeated}"
    assert {"vLLM", "SGLang", "TensorRT-LLM", "FlashInfer"} <= set(groups)
    assert _opening("**FlashInfer** is a [kernel](x) `library`: it") == "flashinfer is a kernel library"


PAPER_LINK = re.compile(r"https://(?:arxiv\.org/abs|doi\.org|crfm\.stanford\.edu)/[^)\s]+")


def _papers_cited_twice(references: str) -> dict[str, int]:
    """Papers (arXiv, DOI and Stanford CRFM links) that more than one bullet of the references cites,
    outside the generated list of facts."""
    written = re.sub(r"<!-- facts:.*?<!-- /facts -->", "", references, flags=re.S)
    bullets = re.split(r"\n(?=- )", written)
    counts: dict[str, int] = {}
    for bullet in bullets:
        for url in set(PAPER_LINK.findall(bullet)):
            counts[url] = counts.get(url, 0) + 1
    return {url: n for url, n in counts.items() if n > 1}


def test_each_paper_is_cited_once_with_one_venue_and_year():
    """A paper is cited in one place (Flash-Decoding sat under two headings, DistServe and Mooncake
    too), and never with a bare year that its venue contradicts ("Mooncake ... (2024)" beside "FAST
    2025")."""
    text = (ROOT / "book" / "references.md").read_text()
    assert _papers_cited_twice(text) == {}
    assert not re.search(r"\*(?:Mooncake|vAttention|DistServe)[^*]*\* \(20\d\d\)", text)
    assert _papers_cited_twice("- [a](https://arxiv.org/abs/1)\n- again [a](https://arxiv.org/abs/1)\n") == {
        "https://arxiv.org/abs/1": 2}


def test_the_list_states_every_fact_once_with_its_source():
    """Each fact is in the list once: its statement with its citation, or, where another fact's
    statement already says it (LIST_RESTATED_BY), its source in that one's citation; a fact folded
    into another's entry has the same heading."""
    listed = facts.render_list()
    folded = {**facts.LIST_CONTINUES, **facts.LIST_RESTATED_BY}
    for f in facts.FACTS:
        if f.key in folded:
            lead = facts.fact(folded[f.key])
            assert lead.key not in folded and facts.list_heading(lead) == facts.list_heading(f), f.key
            assert f.source in listed, f"{f.key}: its source is missing from the list"
            if f.key in facts.LIST_CONTINUES:
                assert facts._after_opening(f.text, lead.text) in listed
        else:
            assert listed.count(f"- {f.text} ") == 1, f"{f.key} is not listed once"
    assert facts._after_opening("**X** is a library: it reads.", "**X** is a library: decode") == "It reads."


def test_chapter_11_box_tells_only_what_chapters_10_and_10b_have_not():
    """Chapter 11's box is about scheduling and admission: nothing of chapter 10's or 10b's boxes
    again, and short enough to read in about a screen of a phone (it ran for three)."""
    assert set(facts.BOXES["11"]).isdisjoint(facts.BOXES["10"] + facts.BOXES["10b"])
    words = sum(len(facts.fact(key).text.split()) for key in facts.BOXES["11"])
    assert words <= 160, f"chapter 11's box states {words} words"
