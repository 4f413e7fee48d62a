"""Write-a-function exercises on the site: Run and Check with Pyodide, judged by the notebook's checker.

- In this Python: pagedlib and the runnable chapters' checkers import with torch, numpy and Triton
  blocked; ``in_browser.run`` gives the notebook's verdict in the site's words; the build finds what
  a code box uses from the chapter's earlier cells (chapter 6's TinyPool).
- In Chromium (slow): a small book of every chapter that has a runnable exercise, built with the real
  config, served on 127.0.0.1 with every other address blocked. For every runnable exercise a wrong
  and a right answer get, in the page, the verdict that ``in_browser.run`` (the notebook's
  ``check``) gives here; the other write-a-function exercises say what their checker needs. The same
  site without its Pyodide files says so in the code box and shows no error. Screenshots go to
  artifacts/pyodide/ (look at them).
"""
from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from pagedlib.exercises import CORRECT, INCORRECT, NOT_ATTEMPTED, RUN_IT_YOURSELF, registry
from pagedlib.exercises import in_browser

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "pyodide"
EXERCISES = registry()
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import pyodide_runner  # noqa: E402 - the build's extension


def _runnable() -> dict:
    run = subprocess.run([sys.executable, "-c", in_browser.BLOCK_HEAVY], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


RUNNABLE = _runnable()


def test_the_pure_python_checkers_import_without_torch_numpy_and_triton():
    names = set(RUNNABLE["exercises"])
    functions = {n for n, ex in EXERCISES.items() if ex.is_function}
    # Part I and the engine chapters' checkers run; kernels (Triton) and tensors (torch) do not
    assert {"ch00.num_programs", "ch01.kv_bytes_per_token", "ch02.reserve_max_waste", "ch04.append_token",
            "ch06.fork_and_copy_on_write", "ch10.num_steps", "ch11.plan_step", "ch13.pick_replica"} <= names
    assert names <= functions and not any(n.startswith(("ch08.", "ch09.")) for n in names)
    # every write-a-function exercise left out is in a chapter that needs a heavy module, or takes tensors
    import torch
    for name in functions - names:
        assert (RUNNABLE["blocked"].get(name.split(".")[0]) in in_browser.HEAVY
                or isinstance(EXERCISES[name].cases[0][0], torch.Tensor)), name
    assert {"ch05.slot_of", "ch05.merge_partials", "ch05.block_table_to_csr"} <= names
    assert not any(m.startswith(("pagedlib.attention", "pagedlib.models", "pagedlib.plots"))
                   for m in RUNNABLE["modules"])


def test_pagedlib_without_torch_names_torch_when_its_runtime_is_read():
    code = ("import sys; sys.modules['torch'] = None; import pagedlib\n"
            "try:\n    pagedlib.DEVICE\nexcept ModuleNotFoundError as e:\n    print(e.name)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert run.stdout.strip() == "torch", run.stderr


# ---- the right and the wrong answer of each runnable exercise ------------------------------------
def right_code(name: str, starter: str, answer: str) -> str:
    """The exercise's solution, under the name the starter checks (chapter 6: methods of its class)."""
    ex = EXERCISES[name]
    chapter = name.split(".")[0]
    solution = ex.solution_code()
    head = re.match(r"class (\w+)\((\w+)\)", starter)
    if head and solution.startswith("def ") and "(self" in solution.split("\n", 1)[0]:
        body = f"class {head.group(1)}({head.group(2)}):\n" + textwrap.indent(solution, "    ")
    else:
        body = f"from pagedlib.exercises.{chapter} import *\n\n{solution}\n\n{answer} = {ex.reference.__name__}"
    return f"{body}\n\nex.{name.split('.')[1]}.check({answer})\n"


def wrong_code(starter: str) -> str:
    """The starter with each ``raise NotImplementedError`` turned into ``return None``."""
    return re.sub(r"raise NotImplementedError.*", "return None", starter)


def test_run_gives_the_notebook_s_verdict_in_the_site_s_words():
    ex = EXERCISES["ch02.reserve_max_waste"]
    starter = "def f(lengths, max_len):\n    raise NotImplementedError\n\nex.reserve_max_waste.check(f)\n"
    got = in_browser.run(ex.name, starter, "f")
    assert got["state"] == NOT_ATTEMPTED and RUN_IT_YOURSELF not in got["message"] and got["output"] == ""
    got = in_browser.run(ex.name, wrong_code(starter), "f")
    assert got["state"] == INCORRECT and got["message"] == in_browser.site_words(ex.check(lambda a, b: None).message)
    got = in_browser.run(ex.name, right_code(ex.name, starter, "f"), "f")
    assert got["state"] == CORRECT and got["message"] == ex.why and got["error"] is None
    got = in_browser.run(ex.name, "print('hi')\ndef f(:\n", "f")
    assert got["state"] is None and got["error"].startswith("SyntaxError") and "(line 2)" in got["error"]
    got = in_browser.run(ex.name, "print(1 + 1)\nundefined_name\n")
    assert got["output"] == "2\n" and got["error"] == "NameError: name 'undefined_name' is not defined (line 2)"


def test_a_code_box_gets_what_it_uses_from_the_chapter_s_earlier_cells():
    earlier = ["%matplotlib inline", "import torch\nfrom pagedlib import blocks_for, GPUS",
               "from collections import deque\n\nclass TinyPool:\n    def f(self):\n"
               "        return deque(), blocks_for(3, 2)\n", "x = torch.zeros(3)"]
    setup, uses = pyodide_runner.setup_for("class MyPool(TinyPool):\n    pass\nex.a.check(MyPool)", earlier)
    assert uses == ["TinyPool"]
    assert [line for line in setup.splitlines() if line][:2] == ["from pagedlib import blocks_for", "from collections import deque"]
    assert "class TinyPool:" in setup and "torch" not in setup and "GPUS" not in setup
    assert pyodide_runner.setup_for("y = x + 1", earlier) is None          # x needs torch
    assert pyodide_runner.setup_for("y = nowhere", earlier) is None
    assert pyodide_runner.setup_for("def f(n):\n    return n\n", earlier) == ("", [])


# ---- the site, in Chromium ---------------------------------------------------------------------------
def _chapters() -> list[str]:
    wanted = {n.split(".")[0] for n in RUNNABLE["exercises"]} | {"ch05"}     # ch05: a torch checker
    return sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb") if f"ch{p.stem[:2]}" in wanted)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    """The small book's html folder: PAGEDLIB_PYODIDE_BOOK if set (one built by this fixture before),
    else a fresh build."""
    import os
    if os.environ.get("PAGEDLIB_PYODIDE_BOOK"):
        return Path(os.environ["PAGEDLIB_PYODIDE_BOOK"])
    book = tmp_path_factory.mktemp("pyodide-book")
    (book / "notebooks").mkdir()
    (book / "book").mkdir()
    shutil.copytree(ROOT / "_static", book / "_static")
    shutil.copytree(ROOT / "book" / "_ext", book / "book" / "_ext")
    shutil.copy(ROOT / "_config.yml", book / "_config.yml")
    chapters = _chapters()
    for chapter in chapters:
        shutil.copy(ROOT / "notebooks" / f"{chapter}.ipynb", book / "notebooks")
    (book / "_toc.yml").write_text(f"format: jb-book\nroot: notebooks/{chapters[0]}\nchapters:\n" +
                                   "".join(f"  - file: notebooks/{c}\n" for c in chapters[1:]))
    jb = Path(sys.executable).with_name("jupyter-book")
    run = subprocess.run([str(jb), "build", str(book), "-n", "--keep-going"], capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, f"jupyter-book build failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    warnings = [line for line in run.stderr.splitlines() if "WARNING" in line
                and "cross-reference target not found" not in line]
    assert not warnings, "\n".join(warnings)
    return book / "_build" / "html"


@pytest.fixture(scope="module")
def served(book):
    """The small book on http://127.0.0.1:PORT (a module worker and WebAssembly need http)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(book)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield book, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser(served):
    from browser import open_browser
    with open_browser() as b:
        yield b


def _offline(browser, origin: str) -> None:
    """Every request but the local server's is aborted: the runner must need no network."""
    browser.context.unroute("**/*")
    browser.context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(origin + "/")
                          else route.abort())


def _check(browser, name: str, code: str, button: str = "check-code", timeout_s: float = 180) -> dict:
    box = f'[data-runner-for="{name}"]'
    browser.js(f"""(() => {{ const c = document.querySelector('{box} [data-testid="code"]');
        c.value = {json.dumps(code)}; }})()""")
    browser.click(f'{box} [data-testid="{button}"]')
    browser.page.wait_for_function(f"""(() => {{ const b = document.querySelector('{box}');
        return !b.querySelector('[data-testid="run"]').disabled; }})()""", timeout=timeout_s * 1000)
    return browser.js(f"""(() => {{ const b = document.querySelector('{box}');
        const v = b.querySelector('[data-testid="verdict"]');
        return {{state: v.dataset.state || null, text: v.innerText,
                 status: b.querySelector('[data-testid="runner-status"]').innerText,
                 error: b.querySelector('[data-testid="runner-status"]').dataset.error || null,
                 output: b.querySelector('[data-testid="output"]').textContent}}; }})()""")


def _label(state: str) -> str:
    return {CORRECT: "Correct", INCORRECT: "Incorrect", NOT_ATTEMPTED: "Not attempted yet"}[state]


@pytest.mark.slow
def test_every_runnable_exercise_is_judged_on_the_page_as_in_the_notebook(served, browser):
    from test_site import console_problems
    book, origin = served
    _offline(browser, origin)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    seen, problems, boxed = [], [], []
    for chapter in _chapters():
        browser.viewport(1400, 900)
        browser.open(f"{origin}/notebooks/{chapter}.html")
        boxes = browser.js("""[...document.querySelectorAll('.pagedlib-runner[data-runner-for]')].map(b => ({
            name: b.dataset.runnerFor, answer: b.dataset.answerName, visible: !b.hidden,
            starter: b.querySelector('[data-testid="code"]').value,
            setup: (b.querySelector('script.pagedlib-runner-setup') || {}).textContent || ''}))""")
        notes = browser.js("[...document.querySelectorAll('[data-testid=runner-note]')].map(n => n.innerText)")
        # the write-a-function exercises that have a box on the page (book/_ext/exercise_boxes.py)
        functions = [n for n in browser.js("[...document.querySelectorAll('.pagedlib-exercise')]"
                                           ".map(b => b.dataset.exercise)") if EXERCISES[n].is_function]
        boxed += functions
        shown = sorted(b["name"] for b in boxes)
        assert shown == sorted(n for n in functions if n in RUNNABLE["exercises"]), chapter
        assert len(notes) == len(functions) - len(shown), chapter
        assert all(re.match(r"Its checker needs (PyTorch|NumPy|Triton)", n) for n in notes), notes
        for box in boxes:
            name, answer = box["name"], box["answer"]
            setup = box["setup"].replace("<\\/", "</")
            assert box["visible"], name
            for code in (wrong_code(box["starter"]), right_code(name, box["starter"], answer)):
                want = in_browser.run(name, code, answer, setup)
                got = _check(browser, name, code)
                assert got["error"] is None and want["error"] is None, (name, got, want)
                assert got["state"] == want["state"], (name, code, got, want)
                shown_text = f"{_label(want['state'])} {want['message']}".replace("`", "").replace("**", "")
                assert " ".join(got["text"].split()) == " ".join(shown_text.split()), name
                assert got["output"].strip() == want["output"].strip(), name
            assert want["state"] == CORRECT and got["state"] == CORRECT, name
            seen.append(name)
        # a page of the course that this small book leaves out is a 404 (course.js checks links)
        problems += [p for p in console_problems(browser) if not ("404" in p and p.endswith(".html"))]
    assert sorted(seen) == sorted(set(RUNNABLE["exercises"]) & set(boxed)) and len(seen) >= 13
    print(f"{len(seen)} of {len(boxed)} write-a-function exercises of these chapters run on the page")
    assert problems == []


@pytest.mark.slow
@pytest.mark.parametrize("width", (400, 1400))
def test_the_code_box_works_by_keyboard_and_fits_a_phone(served, browser, width):
    book, origin = served
    _offline(browser, origin)
    browser.viewport(width, 860, mobile=width < 600)
    browser.open(f"{origin}/notebooks/02_reserve_max.html")
    name = "ch02.reserve_max_waste"
    box = f'[data-runner-for="{name}"]'
    # the code box takes the starter cell's place; its status and verdict are announced
    assert browser.js(f"getComputedStyle(document.querySelector('{box}').previousElementSibling).display") == "none"
    assert browser.js(f"[...document.querySelectorAll('{box} [aria-live=polite]')].length") == 2
    browser.js(f"document.querySelector('{box} [data-testid=code]').focus()")
    browser.js(f"document.querySelector('{box} [data-testid=code]').setSelectionRange(0, 0)")
    browser.key("Tab")                                   # indents inside the box
    assert browser.js(f"document.querySelector('{box} [data-testid=code]').value.startsWith('    def')")
    browser.key("Escape")
    browser.key("Tab")                                   # Esc, then Tab: on to the Run button
    assert browser.js("document.activeElement.dataset.testid") == "run"
    browser.key("Tab")
    assert browser.js("document.activeElement.dataset.testid") == "check-code"
    browser.click(f'{box} [data-testid="reset"]')
    starter = browser.js(f"document.querySelector('{box} [data-testid=code]').value")
    assert starter.startswith("def ") and ".check(" in starter
    got = _check(browser, name, "print('pages', 6 // 4)\n", button="run")
    assert got["output"] == "pages 1\n" and got["state"] is None
    got = _check(browser, name, wrong_code(starter))
    assert got["state"] == INCORRECT
    assert browser.js("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"
    assert browser.js(f"document.querySelector('{box}').getBoundingClientRect().right") <= width
    browser.js(f"""(() => {{ const e = document.querySelector('{box}');
        window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 120); }})()""")
    browser.screenshot(ARTIFACTS / f"ch02-runner-{width}.png", beyond_viewport=False)


@pytest.mark.slow
def test_a_loop_that_never_ends_is_stopped_and_python_starts_again(served, browser):
    book, origin = served
    _offline(browser, origin)
    browser.viewport(1400, 900)
    browser.open(f"{origin}/notebooks/04_pages.html")
    name = "ch04.blocks_for"
    box = f'[data-runner-for="{name}"]'
    _check(browser, name, "print('warm')\n", button="run")               # Python loaded
    browser.js(f"document.querySelector('{box}').dataset.limitS = '3'")
    got = _check(browser, name, "def my_blocks_for(n, b):\n    while True:\n        pass\n\n"
                                "ex.blocks_for.check(my_blocks_for)\n")
    assert got["state"] == INCORRECT and "ran for more than 3 s" in got["text"], got
    browser.js(f"delete document.querySelector('{box}').dataset.limitS")
    got = _check(browser, name, "def my_blocks_for(n, b):\n    return -(-n // b)\n\n"
                                "ex.blocks_for.check(my_blocks_for)\n")
    assert got["state"] == CORRECT, got


@pytest.mark.slow
def test_without_its_pyodide_files_the_site_says_so_and_shows_no_error(book, browser, tmp_path):
    from test_site import console_problems
    bare = tmp_path / "html"
    shutil.copytree(book, bare, ignore=shutil.ignore_patterns(*pyodide_runner.PYODIDE_FILES))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(bare)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        browser.viewport(1400, 900)
        _offline(browser, origin)
        browser.open(f"{origin}/notebooks/02_reserve_max.html")
        got = _check(browser, "ch02.reserve_max_waste", "def f():\n    return 1\n", timeout_s=60)
        assert got["state"] is None and "could not be loaded" in got["status"] and "Colab" in got["status"]
        lock = f"{origin}/_static/pyodide/pyodide-lock.json"
        # the one expected line: the probe for the missing file, answered 404
        assert [p for p in console_problems(browser) if lock not in p and "404" not in p] == []
        assert browser.log.exceptions == []
        assert browser.js("document.querySelectorAll('.pagedlib-answer-ready').length") >= 1  # value boxes work
    finally:
        server.shutdown()


@pytest.mark.slow
def test_the_built_site_serves_pyodide_and_the_checkers_it_runs(book):
    """The book carries Pyodide's files (from npm, at build time) and the pagedlib modules, from
    this checkout, that the runnable checkers import: the notebook's Python, not a copy."""
    import zipfile
    folder = book / pyodide_runner.SITE_DIR
    for name in (*pyodide_runner.PYODIDE_FILES, pyodide_runner.BUNDLE):
        assert (folder / name).is_file(), f"{name} is missing from the built site (npm pack failed?)"
    with zipfile.ZipFile(folder / pyodide_runner.BUNDLE) as bundle:
        for entry in bundle.namelist():
            assert bundle.read(entry) == (ROOT / entry).read_bytes(), entry
        assert "pagedlib/exercises/ch02.py" in bundle.namelist()
