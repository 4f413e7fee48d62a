"""Course conventions every notebook keeps (nbval, run by `make test`, checks their outputs)."""
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from pagedlib import facts

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
sys.path.insert(0, str(ROOT / "scripts"))
import sync_notebooks  # noqa: E402


def _toc_files() -> set[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = {toc["root"]}
    for part in toc.get("parts", []):
        files |= {c["file"] for c in part["chapters"]}
    return files


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name == "00_getting_started.ipynb"


@pytest.mark.slow
def test_badges_and_setup_cells_are_in_step_with_config():
    result = subprocess.run([sys.executable, str(ROOT / "scripts/sync_notebooks.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_sync_detects_drift(tmp_path, monkeypatch):
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    nb.cells[0].source = nb.cells[0].source.replace("colab.research.google.com/github/",
                                                    "colab.research.google.com/github/someone-else/")
    next(c for c in nb.cells if c.cell_type == "code").source += "\nprint('extra')"
    path = tmp_path / "notebooks" / "x.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    monkeypatch.setattr(sync_notebooks, "ROOT", tmp_path)
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text())
    drift = sync_notebooks.sync(path, write=False)
    assert "Colab badge points elsewhere" in drift
    assert "setup cell differs from the course's setup cell" in drift


def test_repository_url_lives_in_config_only():
    url, branch = sync_notebooks.repository()
    assert url.startswith("https://github.com/") and branch == "main"
    setup = sync_notebooks.setup_source()
    assert f"git+{url}" in setup and "!" not in setup
    for banned in ("torch", "triton", "ipywidgets"):
        assert f"install {banned}" not in setup and f'"{banned}"' not in setup


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_in_the_book(path):
    assert f"notebooks/{path.stem}" in _toc_files()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_executed_without_errors(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code if c.source.strip() and
               not c.source.lstrip().startswith("# Uncomment")), "run `make notebooks`"
    counts = [c.execution_count for c in code if c.execution_count is not None]
    assert counts == sorted(counts), "stored outputs are not from one top-to-bottom run"
    for cell in code:
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"stored error in a cell: {cell.source[:80]}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_anatomy(path):
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert re.search(r"what you will learn", text, re.I), "needs 'What you will learn'"
    assert re.search(r"key takeaways", text, re.I), "needs 'Key takeaways'"
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert ".check(" in code, "needs at least one self-checking exercise"
    has_figure = any(o.get("data", {}).get("image/png") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []))
    assert has_figure, "needs at least one figure"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_nbval_ignore_without_reason(path):
    """Cells that skip output comparison must say why in a comment."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        tags = cell.metadata.get("tags", [])
        if i == 0:
            continue  # the setup cell: versions and device differ between machines
        if "nbval-ignore-output" in tags or "nbval-skip" in tags:
            assert cell.source.lstrip().startswith("#"), (
                f"cell ignored by nbval without a first-line comment saying why: {cell.source[:80]}")


_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(%|x|×)?")


def _prose_numbers_not_computed(nb) -> list[str]:
    """Numbers in the markdown (3+ digits, decimals, percentages) that no code cell or output contains.

    A claim in the course is a number computed in a cell; a number typed only in prose is either a
    typo waiting to happen or a claim nobody checks. Links, inline code, maths and headings are skipped.
    """
    computed = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            computed.append(cell.source)
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                computed += [out.get("text", ""), str(data.get("text/plain", "")), str(data.get("text/html", ""))]
    computed = "\n".join(computed)
    missing = []
    for cell in nb.cells:
        if cell.cell_type != "markdown" or "exercise-help" in cell.metadata.get("tags", []):
            continue   # an exercise's help is generated from pagedlib.exercises, not prose
        # the "In production today" box and the facts stated in prose: facts about other engines,
        # sourced and dated in pagedlib.facts
        prose = re.sub(re.escape(facts.BOX_START) + ".*?" + re.escape(facts.BOX_END), " ", cell.source,
                       flags=re.S)
        for fact in facts.FACTS:
            prose = re.sub(r"\s+".join(map(re.escape, fact.text.split())), " ", prose)
        prose = re.sub(r"\[[^\]]*\]\([^)]*\)|\(https?://[^)]*\)|`[^`]*`|\$[^$]*\$", " ", prose)
        prose = re.sub(r"^#+ .*$", " ", prose, flags=re.M)
        prose = re.sub(r"<[^>]*>", " ", prose)     # an HTML tag's attributes are data (a stepper's scores)
        for m in _NUMBER.finditer(prose):
            n = m.group(1)
            if "." not in n and not m.group(2) and len(n.replace(",", "")) < 3:
                continue  # small integers: chapter numbers, "two steps", "16 tokens"
            if not any(v in computed for v in {n, n.replace(",", ""), n.replace(",", "_")}):
                missing.append(m.group(0))
    return missing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_numbers_in_prose_are_computed_in_cells(path):
    missing = _prose_numbers_not_computed(nbformat.read(path, as_version=4))
    assert not missing, f"numbers in the prose that no cell computes or prints: {missing}"


def test_prose_number_check_can_fail():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("waste = 0.748"),
                nbformat.v4.new_markdown_cell("Waste is 74.8% of 10,240 slots, about 3.9x.")]
    assert _prose_numbers_not_computed(nb) == ["74.8%", "10,240", "3.9x"]


# A float in scientific notation printed by a cell is most often rounding noise (how far two orders of
# the same sums drift apart), and rounding noise depends on the processor: stored, it makes nbval fail
# on the next machine. Print a bound instead ("less than 1e-6", the bound a constant in the cell) or
# add a sanitizer to tests/nbval_sanitize.cfg. Sourced constants printed from elsewhere (a paper's
# figure) are listed here with their source: (notebook, value as printed) -> where it comes from.
SOURCED_SCIENTIFIC: dict[tuple[str, str], str] = {}
_SCIENTIFIC = re.compile(r"(?<![\w.#])[-+]?\d+(?:\.\d+)?[eE][-+]?\d+(?![\w.])")
_LITERAL = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def _sanitizers() -> list[tuple[re.Pattern, str]]:
    """tests/nbval_sanitize.cfg, read by nbval's own parser."""
    from nbval.plugin import get_sanitize_patterns
    text = (ROOT / "tests" / "nbval_sanitize.cfg").read_text(encoding="utf-8")
    return [(re.compile(regex), replace) for regex, replace in get_sanitize_patterns(text)]


def _unsanitized_scientific(nb, name: str) -> list[str]:
    """Floats in scientific notation in the stored text outputs that no sanitizer replaces, that are
    not a number written in the same cell's code (a bound, a constant) and not a sourced constant."""
    sanitizers, found = _sanitizers(), []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        constants = {float(m.group(0)) for m in _LITERAL.finditer(cell.source)}
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items()
                                             if k.startswith("text/") and isinstance(v, str)]
            for text in texts:
                for regex, replace in sanitizers:
                    text = regex.sub(replace, text)
                for m in _SCIENTIFIC.finditer(text):
                    if float(m.group(0)) not in constants and (name, m.group(0)) not in SOURCED_SCIENTIFIC:
                        found.append(text[max(0, m.start() - 40):m.end()].strip())
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_stored_output_depends_on_the_processor(path):
    found = _unsanitized_scientific(nbformat.read(path, as_version=4), path.name)
    assert not found, (f"stored outputs print rounding-noise-like figures {found}: print a bound from a "
                       "constant in the cell, or sanitize them in tests/nbval_sanitize.cfg")


def test_scientific_output_check_can_fail():
    nb = nbformat.v4.new_notebook()
    printed = nbformat.v4.new_output("stream", name="stdout",
                                     text="differ by up to 8.9e-08; below 1e-6; 3.2e-05 s; #6e7781\n")
    nb.cells = [nbformat.v4.new_code_cell("BOUND = 1e-6", outputs=[printed])]
    assert _unsanitized_scientific(nb, "x.ipynb") == ["differ by up to 8.9e-08"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_help_cell_is_the_uncomment_for_help_form(path):
    """A cell of commented ``.hint()`` / ``.solution()`` calls opens with "# Uncomment for help":
    the site drops that cell and builds the exercise's box from it (book/_ext/exercise_boxes.py);
    in another form the cell stays on the page and the exercise gets no box."""
    for cell in nbformat.read(path, as_version=4).cells:
        lines = [line for line in cell.source.splitlines() if line.strip()]
        if (cell.cell_type == "code" and lines and all(line.lstrip().startswith("#") for line in lines)
                and re.search(r"#\s*\w+\.\w+\.(hint|solution)\(", cell.source)):
            assert lines[0].startswith("# Uncomment for help"), cell.source


# A predict-first exercise's answer is printed by a cell below the question; that cell keeps its output
# folded on the site (tag hide-output: a "show output" toggle), so reading on does not give the answer
# away. (notebook, text of the answer in the stored output)
ANSWERS_BELOW_A_QUESTION = [
    ("07_prefix_caching.ipynb", "'A again': 4"),       # exercise 2
    ("07_prefix_caching.ipynb", "A again=0"),          # exercise 3
    ("08_triton_kernel.ipynb", "lengths whose output holds NaN"),   # exercise (e)
]


def _output_text(cell) -> str:
    texts = []
    for out in cell.get("outputs", []):
        texts.append(out.get("text", ""))
        texts += [str(v) for k, v in out.get("data", {}).items() if k.startswith("text/")]
    return "\n".join(texts)


@pytest.mark.parametrize("name, answer", ANSWERS_BELOW_A_QUESTION)
def test_a_cell_that_answers_a_prediction_folds_its_output(name, answer):
    cells = [c for c in nbformat.read(ROOT / "notebooks" / name, as_version=4).cells
             if c.cell_type == "code" and answer in _output_text(c)]
    assert cells, f"no stored output shows {answer!r}"
    for cell in cells:
        assert "hide-output" in cell.metadata.get("tags", []), (
            f"{name}: the cell printing {answer!r} answers a prediction: tag it hide-output")


def test_chapter_7_folds_the_prose_and_figure_that_answer_its_predictions():
    """Chapter 7's exercises 2 and 3 ask for a prediction: the pool snapshots (whose last row reads
    "allocate A: 4 cached") fold their output, and the paragraphs that give the answers sit in a
    <details> block, so reading on does not give them away."""
    cells = nbformat.read(ROOT / "notebooks" / "07_prefix_caching.ipynb", as_version=4).cells
    figure = next(c for c in cells if c.cell_type == "code" and "plot_pool_snapshots(snapshots)" in c.source)
    assert "hide-output" in figure.metadata.get("tags", [])
    for answer in ("4 tokens hit instead of none", "C takes all four"):
        where = [c for c in cells if c.cell_type == "markdown" and answer in " ".join(c.source.split())]
        assert len(where) == 1 and where[0].source.startswith("<details>"), answer
        assert where[0].source.rstrip().endswith("</details>") or "</details>" in where[0].source


def test_chapter_8_exercise_cells_fit_the_exercise_box():
    """The starter cells of chapter 8's kernel exercises sit in a box narrower than the text: lines of
    at most 70 characters, so no comment runs past its edge on a desktop."""
    nb = nbformat.read(ROOT / "notebooks" / "08_triton_kernel.ipynb", as_version=4)
    starters = [c for c in nb.cells if c.cell_type == "code" and re.search(r"\.check\(my_", c.source)]
    assert len(starters) == 7        # six kernels and the prediction of (e)
    long = [line for c in starters for line in c.source.splitlines() if len(line) > 70]
    assert long == []


PHONE_OUTPUT_CHARS = 48     # the monospace characters a phone's column shows at full size


@pytest.mark.parametrize("name", ["00_getting_started", "01_kv_cache", "02_reserve_max",
                                  "03_fragmentation", "04_pages", "04b_sizing", "05_paged_attention",
                                  "06_sharing", "07_prefix_caching", "12_capacity_at_scale",
                                  "13_beyond_one_engine"])
def test_printed_lines_fit_a_phone(name):
    """Chapters 0 to 7, 12 and 13 print lines of at most PHONE_OUTPUT_CHARS characters (longer ones were
    shrunk to 9 px on a phone); the setup cell, the same in every chapter, is left out."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    long = [f"cell {i}: {len(line)} chars: {line}"
            for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            and "hide-cell" not in cell.metadata.get("tags", [])
            for out in cell.get("outputs", []) if out.get("output_type") == "stream"
            for line in out["text"].splitlines() if len(line) > PHONE_OUTPUT_CHARS]
    assert not long, "\n".join(long)
