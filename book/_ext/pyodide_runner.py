"""Sphinx extension: write-a-function exercises run on the site, with the course's own checkers.

Under the starter cell of each write-a-function exercise whose chapter's checkers import without
torch, numpy and Triton (``pagedlib.exercises.in_browser.runnable``, asked in a fresh Python at
build time), a code box with the starter code and Run and Check buttons (_static/pyodide-runner.js).
Pressing one loads Pyodide, Python compiled to WebAssembly, in a worker, with this checkout's pagedlib
modules that those checkers import (a zip made at build time: the site and the notebooks run the
same Python). Another write-a-function exercise says in one line what its checker needs and keeps
its Colab link.

Pyodide comes from the npm registry (``npm pack pyodide@PYODIDE_VERSION``), once, into a cache
(``$PAGEDLIB_PYODIDE_CACHE``, else ``~/.cache/pagedlib/pyodide``), and the files a runner needs are
copied into the built site's ``_static/pyodide/``. Without npm or the registry the book still
builds: the code boxes then say that Python could not be loaded (tests/test_pyodide_runner.py checks
that the built site has the files).
"""
from __future__ import annotations

import ast
import builtins
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

PYODIDE_VERSION = "314.0.8"
# what the worker loads: the loader, the interpreter and its standard library, the package list
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")
SITE_DIR = "_static/pyodide"          # in the built site
BUNDLE = "pagedlib.zip"
NEEDS = {"torch": "PyTorch", "numpy": "NumPy", "triton": "Triton"}

_HEAD = re.compile(r'<div class="pagedlib-exercise" data-exercise="([^"]+)"')
_RUNNABLE: dict | None = None


def cache_dir() -> Path:
    base = os.environ.get("PAGEDLIB_PYODIDE_CACHE")
    root = Path(base) if base else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pagedlib" / "pyodide"
    return root / PYODIDE_VERSION


def fetch_pyodide() -> Path:
    """The cached Pyodide files, fetched from the npm registry when missing (npm checks the
    package's integrity hash). Raises RuntimeError when npm or the registry is not there."""
    cache = cache_dir()
    if all((cache / name).is_file() for name in PYODIDE_FILES):
        return cache
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([npm, "pack", f"pyodide@{PYODIDE_VERSION}", "--pack-destination", tmp],
                             capture_output=True, text=True, timeout=600, cwd=tmp)
        tarballs = list(Path(tmp).glob("pyodide-*.tgz"))
        if run.returncode != 0 or not tarballs:
            raise RuntimeError(f"npm pack pyodide@{PYODIDE_VERSION} failed: {run.stderr.strip()[-300:]}")
        part = Path(tmp) / "files"
        part.mkdir()
        with tarfile.open(tarballs[0]) as tar:
            for name in PYODIDE_FILES:
                member = tar.getmember(f"package/{name}")
                with tar.extractfile(member) as src, open(part / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        cache.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(dir=cache.parent))
        for name in PYODIDE_FILES:
            shutil.move(str(part / name), staged / name)
        if cache.exists() and not all((cache / name).is_file() for name in PYODIDE_FILES):
            aside = cache.with_name(f"{cache.name}.old-{os.getpid()}")     # a half cache: away with it
            cache.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
        try:
            staged.rename(cache)      # whole or not at all: a cut fetch leaves no half cache
        except OSError:               # another build (a parallel test) put it there first
            shutil.rmtree(staged, ignore_errors=True)
    return cache


def _pagedlib_root() -> Path:
    import pagedlib       # the one the other extensions (exercise_boxes) and the notebooks import
    return Path(pagedlib.__file__).resolve().parent.parent


def runnable() -> dict:
    """``{"exercises": [...], "modules": [...], "blocked": {chapter: module}}``, once per build."""
    global _RUNNABLE
    if _RUNNABLE is None:
        from pagedlib.exercises.in_browser import BLOCK_HEAVY
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(_pagedlib_root()), *filter(None, [os.environ.get("PYTHONPATH")])])}
        run = subprocess.run([sys.executable, "-c", BLOCK_HEAVY], capture_output=True, text=True,
                             timeout=300, env=env)
        if run.returncode != 0:
            raise RuntimeError(f"pagedlib.exercises.in_browser.runnable failed:\n{run.stderr[-2000:]}")
        _RUNNABLE = json.loads(run.stdout.strip().splitlines()[-1])
    return _RUNNABLE


# ---- what a code box uses from the chapter's earlier cells (the notebook's TinyPool, an import) ----
def _free_names(source: str) -> set[str]:
    """Names ``source`` reads that it never binds (nor builtins, nor ``ex``, the chapter's exercises)."""
    loaded, bound = set(), {"ex", *dir(builtins)}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound


def _definitions(cells: list[str]) -> dict[str, str]:
    """name -> the top-level statement of ``cells`` that last binds it (an import: that name only)."""
    found: dict[str, str] = {}
    for source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError:          # an IPython magic
            continue
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
                found[stmt.name] = ast.get_source_segment(source, stmt, padded=True)
            elif isinstance(stmt, ast.Import):
                for a in stmt.names:
                    found[(a.asname or a.name).split(".")[0]] = f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
            elif isinstance(stmt, ast.ImportFrom):
                for a in stmt.names:
                    found[a.asname or a.name] = (f"from {'.' * stmt.level}{stmt.module or ''} import {a.name}"
                                                 + (f" as {a.asname}" if a.asname else ""))
            elif isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
                for t in stmt.targets:
                    found[t.id] = ast.get_source_segment(source, stmt)
    return found


def setup_for(code: str, earlier: list[str]) -> tuple[str, list[str]] | None:
    """The statements of the ``earlier`` cells that ``code`` needs, dependencies first, and the names
    it takes from them; None when a name is not defined there or needs a module the site lacks."""
    definitions, order, seen = _definitions(earlier), [], set()

    def need(name: str, depth: int) -> bool:
        if name in seen:
            return True
        statement = definitions.get(name)
        if statement is None or depth > 8:
            return False
        seen.add(name)
        if re.match(rf"(from|import)\s+({'|'.join(NEEDS)}|matplotlib|IPython|ipywidgets)\b", statement):
            return False
        if not all(need(dep, depth + 1) for dep in sorted(_free_names(statement))):
            return False
        order.append(statement)
        return True

    try:
        names = sorted(_free_names(code))
    except SyntaxError:
        return None
    if not all(need(name, 0) for name in names):
        return None
    return "\n\n".join(dict.fromkeys(order)), names


def _is_code_cell(node) -> bool:
    return isinstance(node, nodes.container) and node.get("nb_element") == "cell_code"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower())


def _runner_html(name: str, code: str, answer: str, setup: str, uses: list[str]) -> str:
    slug = _slug(name)
    rows = min(max(code.count("\n") + 2, 4), 24)
    before = ""
    if uses:
        listed = ", ".join(f"<code>{html.escape(n)}</code>" for n in uses)
        before = f'<p class="pagedlib-runner-keys">It runs after what it uses from the cells above: {listed}.</p>'
    script = setup.replace("</", "<\\/")          # raw text in a <script>: only "</" must go
    return (f'<div class="pagedlib-runner" data-runner-for="{html.escape(name)}" '
            f'data-answer-name="{html.escape(answer)}" hidden>'
            f'<script type="text/plain" class="pagedlib-runner-setup">{script}</script>'
            f'<label class="pagedlib-runner-label" for="code-{slug}">Your code (Python runs in this '
            f'page; the first Run or Check loads it, about 13 MB):</label>{before}'
            f'<textarea id="code-{slug}" class="pagedlib-runner-code" data-testid="code" rows="{rows}" '
            f'spellcheck="false" autocapitalize="off" autocomplete="off" autocorrect="off" '
            f'aria-describedby="keys-{slug}">{html.escape(code)}</textarea>'
            f'<p class="pagedlib-runner-keys" id="keys-{slug}">Tab indents; Esc, then Tab, leaves the box.</p>'
            f'<div class="pagedlib-runner-row">'
            f'<button type="button" class="pagedlib-run" data-testid="run">Run</button>'
            f'<button type="button" class="pagedlib-check" data-testid="check-code">Check</button>'
            f'<button type="button" class="pagedlib-reset" data-testid="reset">Reset the code</button>'
            f'</div>'
            f'<div class="pagedlib-runner-status" data-testid="runner-status" role="status" aria-live="polite"></div>'
            f'<pre class="pagedlib-runner-output" data-testid="output" hidden></pre>'
            f'<div class="pagedlib-verdict" data-testid="verdict" role="status" aria-live="polite"></div>'
            f'</div>')


def _needs(name: str, info: dict) -> str:
    from pagedlib.exercises import registry
    exercise = registry().get(name)
    chapter = name.split(".", 1)[0]
    if name in info["exercises"]:
        return ('<p class="pagedlib-runner-note" data-testid="runner-note">It uses the chapter\'s earlier '
                'cells, which this page cannot run: open the chapter in Colab to check your function.</p>')
    if type(exercise).__name__ == "KernelExercise":
        what = "Triton and PyTorch"
    else:
        what = NEEDS.get(info.get("blocked", {}).get(chapter, "torch"), "PyTorch")
    return (f'<p class="pagedlib-runner-note" data-testid="runner-note">Its checker needs {what}, which '
            f'this page cannot run: open the chapter in Colab to check your function.</p>')


def add_runners(app, doctree) -> None:
    heads = [n for n in doctree.findall(nodes.raw) if _HEAD.search(n.astext())]
    if not heads:
        return
    from pagedlib.exercises import registry
    exercises = registry()
    info = runnable()
    for head in heads:
        name = _HEAD.search(head.astext()).group(1)
        exercise = exercises.get(name)
        if exercise is None or not exercise.is_function:
            continue
        parent = head.parent
        siblings = list(parent.children)
        attr = name.split(".", 1)[1]
        check = None
        for node in siblings[siblings.index(head) + 1:]:
            if _is_code_cell(node):
                source = next((b.astext() for b in node.findall(nodes.literal_block)), "")
                if f".{attr}.check(" in source:
                    check = node
                    break
            if isinstance(node, nodes.raw) and "pagedlib-exercise-help" in node.astext():
                break
        if check is None:
            continue
        code = next(b.astext() for b in check.findall(nodes.literal_block))
        answer = re.search(rf"\.{re.escape(attr)}\.check\(\s*([A-Za-z_]\w*)\s*\)", code)
        cells = [n for n in doctree.findall(nodes.container) if _is_code_cell(n)]
        earlier = [next((b.astext() for b in c.findall(nodes.literal_block)), "")
                   for c in cells[:next(i for i, c in enumerate(cells) if c is check)]]
        setup = setup_for(code, earlier)
        if name in info["exercises"] and answer and setup is not None:
            markup = _runner_html(name, code, answer.group(1), *setup)
        else:
            markup = _needs(name, info)
        parent.insert(parent.index(check) + 1, nodes.raw("", markup, format="html"))


def write_bundle(path: Path) -> None:
    """The pagedlib modules the runnable checkers import, as a zip (fixed dates: reproducible)."""
    root = _pagedlib_root()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bundle:
        # pagedlib/__init__.py imports runtime, which raises torch's ModuleNotFoundError there
        for module in sorted({*runnable()["modules"], "pagedlib.runtime"}):
            rel = Path(*module.split("."))
            source = root / rel / "__init__.py" if (root / rel).is_dir() else root / rel.with_suffix(".py")
            info = zipfile.ZipInfo(source.relative_to(root).as_posix(), date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, source.read_bytes())


def copy_files(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir) / SITE_DIR
    out.mkdir(parents=True, exist_ok=True)
    write_bundle(out / BUNDLE)
    try:
        cache = fetch_pyodide()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        logger.info(f"pyodide_runner: no Pyodide on the site ({exc}); the code boxes will say so")
        return
    for name in PYODIDE_FILES:
        target = out / name
        if not target.exists() or target.stat().st_size != (cache / name).stat().st_size:
            shutil.copyfile(cache / name, target)


def setup(app):
    # after exercise_boxes (priority 500) has made each exercise's box
    app.connect("doctree-read", add_runners, priority=600)
    app.connect("build-finished", copy_files)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
