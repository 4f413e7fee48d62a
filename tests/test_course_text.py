"""Course text that once tripped a learner: each check reads the notebooks' sources (not outputs)."""
import re
from pathlib import Path

import nbformat

from test_site import toc_pages

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def _markdown(name: str) -> str:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"
                     and "exercise-help" not in c.metadata.get("tags", []))


def _cells(name: str):
    return nbformat.read(NOTEBOOKS / name, as_version=4).cells


def test_the_five_request_mix_is_only_in_the_intro_chapter_2_and_chapter_4():
    mix = re.compile(r"512,\s*37,\s*1,?900,\s*128(,| and)\s*4")
    found = {p.name for p in NOTEBOOKS.glob("*.ipynb")
             if any(mix.search(c.source) for c in _cells(p.name))}
    assert found == {"02_reserve_max.ipynb", "04_pages.ipynb", "04b_sizing.ipynb"}


def test_chapter_11_does_not_lean_on_chapter_12_before_it():
    text = _markdown("11_scheduling.ipynb")
    body = text.split("**Next:**")[0]
    assert "simulator of chapter 12" not in body and "Figure 13's batch sizes" not in body


def test_chapter_8_step_c_states_the_query_shape():
    text = " ".join(_markdown("08_triton_kernel.ipynb").split())
    step_c = text[text.index("## Exercise (c)"):]
    assert "`[num_seqs, head_dim]`" in step_c[:1200]


def test_chapter_2_uses_reservation_in_the_papers_sense_only():
    text = " ".join(_markdown("02_reserve_max.ipynb").split())
    for whole_slot in ("each reservation splits", "in its reservation of", "each reservation a coloured",
                       "Capacity is set by the reservation"):
        assert whole_slot not in text


def test_chapter_4b_says_one_block_id_names_the_same_rows_in_every_layer():
    assert "the same rows in every layer's tensor" in " ".join(_markdown("04b_sizing.ipynb").split())


def test_chapter_7_asks_about_vllms_eviction_order_too():
    sources = [c.source for c in _cells("07_prefix_caching.ipynb") if c.cell_type == "code"]
    assert any("ex.evicted_prefix.check" in s for s in sources)
    assert any("ex.evicted_prefix_v1.check" in s for s in sources)


def test_chapter_10_keeps_one_paragraph_and_the_figure_of_the_comparison():
    ch10 = _cells("10_serving_engine.ipynb")
    assert not any("peer.compare(" in c.source or "vllm.LLM(" in c.source or "peer.measured(models" in c.source
                   for c in ch10), "the benchmark against transformers and vLLM lives in chapter 10b"
    assert sum("lead_by_requests(" in c.source for c in ch10) == 1
    assert any("10b_beside_other_engines" in c.source for c in ch10 if c.cell_type == "markdown")   # a link


def test_chapter_10b_compares_with_vllm_in_a_list_that_fits_a_phone():
    cells = _cells("10b_beside_other_engines.ipynb")
    markdown = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert "<dl" in markdown and "| pagedlib | vLLM |" not in markdown      # no wide table
    assert all(len(code) <= 40 for code in re.findall(r"<code>(.*?)</code>", markdown)), \
        "a long code span cannot wrap in a phone's column"
    outputs = "".join(o.get("text", "") for c in cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "nothing to show" not in outputs and "not run here" not in outputs


def test_the_collapsed_tangents_are_collapsed():
    ch10 = _cells("10b_beside_other_engines.ipynb")      # chapter 10's comparison, on a page of its own
    live = next(c for c in ch10 if "peer.compare(" in c.source)
    assert "hide-cell" in live.metadata.get("tags", [])
    assert any(c.cell_type == "markdown" and c.source.startswith("<details>") and "near-ties" in c.source
               for c in ch10)
    ch05 = _cells("05_paged_attention.ipynb")
    legacy = next(c for c in ch05 if "vLLM's legacy paged kernel" in c.source)
    assert "<details>" in legacy.source


def _next_link(page: str) -> str | None:
    """The first link of a page's **Next:** line (a notebook's markdown or a book page), or None."""
    text = _markdown(Path(page).name + ".ipynb") if page.startswith("notebooks/") \
        else (ROOT / f"{page}.md").read_text()
    found = re.search(r"\*\*Next:\*\*\s*\[[^\]]*\]\(([^)]+)\)", text)
    return found.group(1) if found else None


def test_every_page_sends_the_reader_where_the_table_of_contents_goes_next():
    """Each page but the last chapter and the references ends with a **Next:** link to the page
    _toc.yml puts after it (07 skipped the GPU primer, 4b chapter 5's prerequisite page; 12, the
    how-to and the Try-it page had none)."""
    order = toc_pages()[1:]                        # after the landing page, in reading order
    wrong = []
    for page, after in zip(order, order[1:]):
        if after == "book/references":
            continue
        link = _next_link(page)
        name = Path(after).name
        if link is None or not re.search(rf"(^|/){re.escape(name)}\.(html|md|ipynb)(#.*)?$", link):
            wrong.append(f"{page}: Next is {link!r}, the table of contents goes to {after}")
    assert not wrong, "\n".join(wrong)


def test_the_landing_page_lists_every_page_of_the_table_of_contents():
    """The introduction's chapter list names every page the sidebar does (4b and 10b were missing)."""
    pages = [p for p in toc_pages()[1:] if p != "book/references"]
    intro = (ROOT / "book" / "intro.md").read_text().split("## The chapters", 1)[1]
    linked = {Path(t).stem for t in re.findall(r"\]\(([^)#]+)\)", intro)}
    assert [p for p in pages if Path(p).name not in linked] == []


def test_chapter_13_asks_for_the_transfer_bytes_before_it_prints_them():
    """Exercise 2 ("how many bytes move?") came right after the cell printing "= 512 MiB"."""
    cells = _cells("13_beyond_one_engine.ipynb")
    ask = next(i for i, c in enumerate(cells) if "ex.transfer_bytes.check(" in c.source)
    tell = next(i for i, c in enumerate(cells) if "nbytes = 4096 * llama.kv_bytes_per_token" in c.source)
    assert ask < tell


def test_chapter_12_says_what_a_dash_means_and_names_chapter_13_once():
    """The capacity table's '-' was explained only in a docstring; "Where to go next" and the
    **Next:** line both introduced chapter 13."""
    code = next(c.source for c in _cells("12_capacity_at_scale.ipynb") if "def cell(row)" in c.source)
    assert "-: longer " in code.split("caption=", 1)[1]
    assert _markdown("12_capacity_at_scale.ipynb").count("13_beyond_one_engine.html") == 1


def _printed_lines(cell) -> list[str]:
    return [line for out in cell.get("outputs", []) for line in out.get("text", "").splitlines()]


def test_chapter_11_prints_lines_that_a_phone_shows_whole():
    """A printed line over 48 characters is shrunk to a 9 px font in a phone's column; chapter 11's
    tables of several columns are HTML tables instead (the setup cell's versions apart)."""
    long = [(n, line) for n, c in enumerate(_cells("11_scheduling.ipynb"))
            if c.cell_type == "code" and not c.source.startswith("# Setup")
            for line in _printed_lines(c) if len(line) > 48]
    assert long == [], f"printed lines over 48 characters (cell, line): {long}"


def _broken_comments(source: str) -> list[str]:
    """The lines of a comment of several lines that end it too soon: a line well short of the next
    one's length, mid-sentence, leaves an orphan ("# at 0.15," then a new line), as a comment
    re-wrapped by a formatter does."""
    lines = source.splitlines()
    found = []
    for a, b in zip(lines, lines[1:]):
        if a.lstrip().startswith("#") and b.lstrip().startswith("#"):
            text = a.strip().lstrip("#").strip()
            if len(a.strip()) < 0.5 * len(b.strip()) and not text.endswith((".", ":", ";")):
                found.append(a.strip())
    last = [ln.strip() for ln in lines]
    for prev, line, nxt in zip([""] + last, last, last[1:] + [""]):
        if (line.startswith("#") and prev.startswith("#") and not nxt.startswith("#")
                and len(line.split()) <= 2 and len(prev) > 60):
            found.append(line)                       # a one-word tail: "# all"
    return found


def test_chapter_11_comments_are_whole_lines():
    broken = [line for c in _cells("11_scheduling.ipynb") if c.cell_type == "code"
              for line in _broken_comments(c.source)]
    assert broken == [], f"comments broken into orphan lines: {broken}"


def test_broken_comment_check_can_fail():
    assert _broken_comments("# long prompts at 0.15 s and more words here\n# at 0.15,\n"
                            "# 0.3 and 0.45 s (about steps 4, 8 and 12 of a modelled OPT-13B step)\n"
                            "# short\n# requests at 0.2 s, which decode while an older long prompt\n"
                            "x = 1") == ["# at 0.15,", "# short"]
    assert _broken_comments("# ShareGPT-like lengths (the paper's histograms), a quarter of size\n"
                            "# all\nx = 1") == ["# all"]
    assert _broken_comments("# one whole line\n# and another whole line\nx = 1") == []
