"""Exercises on the website: one box per exercise, value answers checked in the page, in Chromium.

Two parts:

- The checker in the page (_static/exercises.js) against the Python one (Exercise.check), on every
  value exercise of the registry and a battery of answers each (its answer, its wrong answers and
  listed mistakes, type slips, numbers around the answer): same verdict, same message. No site build.
- A small book (chapters 2, 8 and 10: value and code exercises, a statement in bold and one under an
  "Exercise" heading), built with the real config and extensions, at 400 and 1400 px: one box per
  exercise with the statement once, no "Uncomment for help" cell, no "Not attempted yet", a Colab
  link; a wrong answer shows its targeted message (Markdown rendered), the right one "Correct" with
  the why; Hint opens the hints in turn; the solution is highlighted Python with a copy button and
  keeps its lines. Screenshots go to artifacts/exercises/ (look at them).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from browser import open_browser
from test_site import console_problems

from pagedlib.exercises import CORRECT, NOT_ATTEMPTED, registry
from pagedlib.exercises.answers import answer_spec

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "exercises"
JS = ROOT / "_static" / "exercises.js"
EXERCISES = registry()
VALUE = {name: ex for name, ex in EXERCISES.items() if ex.is_declarative}
BOOK_CHAPTERS = ["02_reserve_max", "06_sharing", "07_prefix_caching", "08_triton_kernel", "10_serving_engine"]
WIDTHS = (400, 1400)


def test_every_value_exercise_is_declarative():
    """A value exercise the site cannot check (a diagnose or compare function) fails here."""
    values = [name for name, ex in EXERCISES.items() if not ex.is_function]
    assert len(values) >= 15 and set(values) == set(VALUE), sorted(set(values) - set(VALUE))


def battery(ex) -> list:
    """Answers to try on ``ex``: its own, its wrong ones and mistakes, and the usual slips."""
    ref = ex.reference
    out = [ref, *ex.wrong, "a string", True]
    if isinstance(ref, (int, float)) and not isinstance(ref, bool):
        out += [ref + 1, ref - 1, -1, 0, 2, 10**6, float(ref), ref * 100, ref / 2, str(ref)]
        if isinstance(ref, float):
            out += [round(ref, 2), ref + ex.tolerance if ex.tolerance else ref * 1.0000001, 0.99, 1.5]
    if isinstance(ref, (list, tuple)):
        out += [[], list(ref), tuple(ref), list(reversed(ref)), list(ref)[:-1], [*ref, ref[-1]], 5,
                [str(x) for x in ref]]
        out += [type(ref)(x + 1 if isinstance(x, int) else x for x in ref)]
        if len(ref) == 2:
            out += [(ref[0], ref[1] if not isinstance(ref[1], int) else ref[1] + 1),
                    ("a", ref[1]), ("A", 1), (" c ", ref[1]) if isinstance(ref[0], str) else (0, 0)]
        if all(isinstance(x, list) for x in ref):
            out += [type(ref)([0, *x[1:]] if x else x for x in ref), type(ref)(x[::-1] for x in ref)]
    return out


def python_verdict(ex, answer) -> tuple[str, str]:
    """The notebook's verdict, in the website's words (its fallback names the Hint button)."""
    from pagedlib.exercises import SITE_TRY_A_HINT, TRY_A_HINT
    result = ex.check(answer)
    return result.state, result.message.replace(TRY_A_HINT, SITE_TRY_A_HINT)


@pytest.fixture(scope="module")
def browser():
    with open_browser() as b:
        yield b


@pytest.mark.slow
def test_the_page_gives_every_value_exercise_the_python_checker_s_verdict(browser, capsys):
    browser.open("about:blank")
    browser.js(JS.read_text() + "; 0")
    cases = []
    for name, ex in VALUE.items():
        for answer in battery(ex):
            state, message = python_verdict(ex, answer)
            if state == NOT_ATTEMPTED:
                continue
            cases.append({"name": name, "text": repr(answer), "state": state, "message": message})
    specs = {name: answer_spec(ex) for name, ex in VALUE.items()}
    got = browser.js(f"""(() => {{ const specs = {json.dumps(specs)}; const cases = {json.dumps(cases)};
        return cases.map(c => pagedlibExercises.checkText(specs[c.name], c.text)); }})()""")
    capsys.readouterr()
    assert len(cases) > 200
    wrong = [(c["name"], c["text"], (c["state"], c["message"]), (g["state"], g["message"]))
             for c, g in zip(cases, got) if (c["state"], c["message"]) != (g["state"], g["message"])]
    assert not wrong, f"{len(wrong)} verdicts differ, e.g.\n" + "\n".join(map(str, wrong[:5]))
    # the battery reaches the targeted messages, not only the fallback
    from pagedlib.exercises import SITE_TRY_A_HINT
    targeted = {c["message"] for c in cases if c["state"] != CORRECT and SITE_TRY_A_HINT not in c["message"]}
    assert len(targeted) >= 40


@pytest.mark.slow
def test_the_page_reads_python_as_typed(browser):
    browser.open("about:blank")
    browser.js(JS.read_text() + "; 0")
    texts = ["36", "0.376", "[9, 17]", "(6, 2)", "('C', 3)", "'C', 3", '("C", 3)', "1e-5", "4.0", "-3",
             "40_960 // 2048", "7 / 2", "-7 // 2", "2 ** 10", "(1,)", "()", "True", "[1, [2, 3.5]]",
             "0.1 + 0.2", "1e16", "123456789.125"]
    got = browser.js(f"{json.dumps(texts)}.map(t => pagedlibExercises.pyRepr(pagedlibExercises.parsePython(t)))")
    want = [repr(eval(t)) for t in texts]    # noqa: S307 - the test's own literals
    assert got == want
    bad = browser.js("""["[9,", "abc", "'x", "1 2", "1__0", "import os"].map(t => {
        try { pagedlibExercises.parsePython(t); return null; } catch (e) { return e.message; } })""")
    assert all(bad), bad


# ---- the built pages ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    book = tmp_path_factory.mktemp("exercise-book")
    (book / "notebooks").mkdir()
    (book / "book").mkdir()
    shutil.copytree(ROOT / "_static", book / "_static")
    shutil.copytree(ROOT / "book" / "_ext", book / "book" / "_ext")
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    for chapter in BOOK_CHAPTERS:
        shutil.copy(ROOT / "notebooks" / f"{chapter}.ipynb", book / "notebooks")
    (book / "_toc.yml").write_text(f"format: jb-book\nroot: notebooks/{BOOK_CHAPTERS[0]}\nchapters:\n" +
                                   "".join(f"  - file: notebooks/{c}\n" for c in BOOK_CHAPTERS[1:]))
    jb = Path(sys.executable).with_name("jupyter-book")
    # not -W: the other chapters that these three link to are not in this small book
    run = subprocess.run([str(jb), "build", str(book), "-n", "--keep-going"], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"jupyter-book build failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    warnings = [line for line in run.stderr.splitlines() if "WARNING" in line
                and "cross-reference target not found" not in line]
    assert not warnings, "\n".join(warnings)
    return book / "_build" / "html"


def _open(browser, site, chapter, width):
    browser.viewport(width, 860, mobile=width < 600)
    browser.open((site / "notebooks" / f"{chapter}.html").as_uri())


def _checked(chapter) -> list[str]:
    sys.path.insert(0, str(ROOT / "scripts"))
    import nbformat
    import sync_notebooks
    nb = nbformat.read(ROOT / "notebooks" / f"{chapter}.ipynb", as_version=4)
    cells = [c for c in nb.cells if not sync_notebooks.is_help_cell(c)]
    return [name for _, name in sync_notebooks.checked_exercises(cells)]


@pytest.mark.slow
@pytest.mark.parametrize("chapter", BOOK_CHAPTERS)
def test_one_box_per_exercise_with_its_statement_once(browser, site, chapter):
    _open(browser, site, chapter, 1400)
    boxes = browser.js("""[...document.querySelectorAll('.pagedlib-exercise')].map(b => ({
        name: b.dataset.exercise, answer: b.dataset.answerFor || null, text: b.innerText,
        colab: (b.querySelector('a.pagedlib-colab') || {}).href || '',
        cells: b.querySelectorAll('.cell').length,
        last: [...b.querySelectorAll('.cell')].map(c => c.innerText).pop() || '',
        questions: b.querySelectorAll('.pagedlib-question').length,
        summaries: [...b.querySelectorAll('details > summary')].map(s => s.textContent),
        open: b.querySelectorAll('details[open]').length}))""")
    want = _checked(chapter)
    assert [b["name"] for b in boxes] == want
    page = browser.js("document.querySelector('article').innerText")
    # every "**Exercise ...**" statement of the notebook is inside its box
    outside = browser.js("""[...document.querySelectorAll('article p')].filter(p => {
        const first = p.firstElementChild; return first && first.tagName === 'STRONG' &&
            p.textContent.trim().startsWith(first.textContent.trim()) &&
            /^exercise/i.test(first.textContent.trim()) && !p.closest('.pagedlib-exercise'); })
        .map(p => p.textContent.slice(0, 60))""")
    assert outside == [], "a statement outside its exercise's box"
    assert "Uncomment for help" not in page and "Not attempted yet" not in page
    for box in boxes:
        ex = EXERCISES[box["name"]]
        attr = box["name"].split(".", 1)[1]
        assert 1 <= box["cells"] <= 2 and f".{attr}.check(" in box["last"], \
            f"{box['name']}: the starter cell belongs in its box"
        assert box["colab"].startswith("https://colab.research.google.com/github/") and \
            f"notebooks/{chapter}.ipynb#scrollTo=" in box["colab"]
        assert box["summaries"] == [ex.hint_title(n) for n in range(1, len(ex.hints) + 1)] + ["Solution"]
        assert box["open"] == 0
        assert (box["answer"] == box["name"]) == (box["name"] in VALUE)
        # the statement once: the notebook's, or else the registry's question, never both
        question = " ".join(ex.question.split())[:60].replace("`", "")
        assert page.count(question) <= 1, f"{box['name']}: the registry's question is shown twice"
        assert box["questions"] <= 1
    if chapter == "10_serving_engine":
        # the replay below the question no longer prints the answer before the learner predicts
        assert "('C', 3)" not in page


def _shot(browser, path: Path, selector: str) -> None:
    """A screenshot of the window with ``selector``'s top at the top of it (below the theme's bar)."""
    browser.js(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
        window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 70); }})()""")
    browser.screenshot(path, beyond_viewport=False)


def _answer(browser, name: str, text: str) -> dict:
    box = f'[data-answer-for="{name}"]'
    browser.js(f"""(() => {{ const i = document.querySelector('{box} [data-testid="answer"]');
        i.focus(); i.value = ''; }})()""")
    browser.type_text(text)
    browser.click(f'{box} [data-testid="check"]')
    return browser.js(f"""(() => {{ const v = document.querySelector('{box} [data-testid="verdict"]');
        return {{text: v.innerText, html: v.innerHTML, state: v.dataset.state}}; }})()""")


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_value_answers_get_their_verdict_on_the_page(browser, site, width):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ch10 = EXERCISES["ch10.preempted"]
    _open(browser, site, "10_serving_engine", width)
    assert browser.js("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"
    got = _answer(browser, "ch10.preempted", "('A', 3)")
    assert got["state"] == "incorrect" and got["text"].startswith("Incorrect")
    assert ch10.check(("A", 3)).message in " ".join(got["text"].split())
    _shot(browser, ARTIFACTS / f"ch10-wrong-{width}.png", '[data-answer-for="ch10.preempted"] .cell')
    got = _answer(browser, "ch10.preempted", "('C', 3)")
    assert got["state"] == "correct" and got["text"].startswith("Correct") and ch10.why[:40] in got["text"]
    _shot(browser, ARTIFACTS / f"ch10-right-{width}.png", '[data-answer-for="ch10.preempted"] .cell')
    # Markdown in a message is rendered, not shown literally
    _open(browser, site, "08_triton_kernel", width)
    got = _answer(browser, "ch08.bug_lengths", "[3, 9, 17]")
    assert "<code>offsets &lt; seq_len</code>" in got["html"] and "`" not in got["text"]
    got = _answer(browser, "ch08.bug_lengths", "[17, 9]")
    assert got["state"] == "correct"
    # a type slip gets the Python checker's message, and odd input says what Python cannot read
    _open(browser, site, "02_reserve_max", width)
    got = _answer(browser, "ch02.predict_capacity", "10.0")
    assert got["state"] == "incorrect" and "a float; expected an int" in got["text"]
    got = _answer(browser, "ch02.predict_capacity", "ten")
    assert got["state"] == "incorrect" and "Python cannot read that" in got["text"]
    got = _answer(browser, "ch02.predict_capacity", "")
    assert got["state"] == "not attempted"
    # Hint opens the hints one by one
    box = '[data-answer-for="ch02.predict_capacity"]'
    for n in (1, 2, 3):
        browser.click(f'{box} [data-testid="hint"]')
        assert browser.js(f"document.querySelectorAll('{box} details.pagedlib-hint[open]').length") == n
    _shot(browser, ARTIFACTS / f"ch02-hints-{width}.png", box)
    assert console_problems(browser) == []


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_solutions_are_highlighted_python_that_keeps_its_lines(browser, site, width):
    _open(browser, site, "02_reserve_max", width)
    name = "ch02.reserve_max_waste"
    sol = browser.js("""(() => { const d = document.querySelector(
        '[data-exercise="ch02.reserve_max_waste"] details.pagedlib-solution'); d.open = true;
        const pre = d.querySelector('div.highlight pre');
        return {spans: pre.querySelectorAll('span.k, span.kn, span.n, span.mi').length,
                copy: !!d.querySelector('button.copybtn'), ws: getComputedStyle(pre).whiteSpace,
                text: pre.innerText,
                prose: (d.querySelector('.pagedlib-solution-why') || {}).innerText || ''}; })()""")
    ex = EXERCISES[name]
    assert sol["spans"] > 0 and sol["copy"] and sol["ws"] == "pre"
    assert "Solution to" not in sol["text"] and sol["text"].strip() == ex.solution_code().strip()
    assert sol["prose"] and ex.explanation[:30] in sol["prose"]
    _shot(browser, ARTIFACTS / f"ch02-solution-{width}.png", f'[data-exercise="{name}"] details.pagedlib-solution')
    browser.screenshot(ARTIFACTS / f"ch02-page-{width}.png", beyond_viewport=False)


# ---- the steppers (_static/steppers.js) ---------------------------------------------------------
def _stepper_data(browser, kind: str) -> dict:
    return browser.js(f"""(() => {{ const d = document.querySelector('.pagedlib-stepper[data-stepper="{kind}"]');
        return {{...d.dataset}}; }})()""")


@pytest.mark.slow
def test_the_online_softmax_stepper_computes_pagedlib_s_numbers(browser, site):
    from pagedlib.attention.reference import online_softmax_steps
    _open(browser, site, "08_triton_kernel", 1400)
    data = _stepper_data(browser, "online-softmax")
    scores, values = json.loads(data["scores"]), json.loads(data["values"])
    for tile in range(1, len(scores) + 1):
        got = browser.js(f"pagedlibSteppers.onlineSoftmax({data['scores']}, {data['values']}, {tile})")
        want = online_softmax_steps(scores, values, tile)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            for key in ("start", "end", "tile_max", "m", "alpha", "l", "acc", "out"):
                assert g[key] == pytest.approx(w[key], rel=1e-12, abs=1e-15), (tile, key, g, w)
        import torch
        exact = (torch.tensor(scores, dtype=torch.float64).softmax(0) @ torch.tensor(values, dtype=torch.float64))
        assert got[-1]["out"] == pytest.approx(exact.item(), rel=1e-12)


@pytest.mark.slow
def test_the_refcount_stepper_follows_the_chapter_s_pool(browser, site):
    from pagedlib.exercises.ch06 import SharingPool
    _open(browser, site, "06_sharing", 1400)
    data = _stepper_data(browser, "refcount")
    script = json.loads(data["script"])
    got = browser.js(f"pagedlibSteppers.refcountSteps({data['blocks']}, {data['blockSize']}, {data['script']})")
    pool = SharingPool(int(data["blocks"]), int(data["blockSize"]))
    want = [{"tables": {}, "lens": {}, "ref": list(pool.ref), "free": list(pool.free_blocks), "copies": []}]
    for op, *args in script:
        copies = getattr(pool, op)(*args) or []
        want.append({"tables": {k: list(v) for k, v in pool.tables.items()}, "lens": dict(pool.lens),
                     "ref": list(pool.ref), "free": list(pool.free_blocks), "copies": [list(c) for c in copies]})
    assert got == want
    assert any(step["copies"] for step in want) and "free" in {op for op, *_ in script}


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("chapter, kind", [("08_triton_kernel", "online-softmax"), ("06_sharing", "refcount")])
def test_the_steppers_step(browser, site, chapter, kind, width):
    _open(browser, site, chapter, width)
    box = f'.pagedlib-stepper[data-stepper="{kind}"]'
    assert browser.js(f"document.querySelector('{box}').classList.contains('pagedlib-stepper-ready')")
    total = browser.js(f"""(() => {{ const b = document.querySelector('{box}');
        return (b.pagedlibSteps || b.pagedlibStates.slice(1)).length; }})()""")
    rows = lambda: browser.js(f"document.querySelector('{box} [data-testid=stepper-table]').rows.length")  # noqa: E731
    at = lambda: int(browser.js(f"document.querySelector('{box}').dataset.at"))  # noqa: E731
    assert at() == 0
    for n in range(1, total + 1):
        browser.click(f'{box} [data-testid="stepper-next"]')
        assert at() == n
        if kind == "online-softmax":
            assert rows() == n + 1                       # the header and one row per tile read
    assert browser.js(f"document.querySelector('{box} [data-testid=stepper-next]').disabled")
    if kind == "online-softmax":
        assert "the same: done" in browser.js(f"document.querySelector('{box} [data-testid=stepper-note]').innerText")
    else:
        op = browser.js(f"document.querySelector('{box} [data-testid=stepper-op]').innerText")
        assert op.startswith(f"Step {total}:")
    _shot(browser, ARTIFACTS / f"stepper-{kind}-{width}.png", box)
    browser.click(f'{box} [data-testid="stepper-back"]')
    assert at() == total - 1
    browser.click(f'{box} [data-testid="stepper-reset"]')
    assert at() == 0
    if kind == "online-softmax":
        browser.js(f"""(() => {{ const s = document.querySelector('{box} [data-testid=stepper-tile]');
            s.value = '3'; s.dispatchEvent(new Event('change')); }})()""")
        assert browser.js(f"document.querySelector('{box}').pagedlibSteps.length") == 4
    assert browser.js("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"
    assert console_problems(browser) == []
