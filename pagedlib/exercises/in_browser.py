"""The site's Run and Check buttons: a write-a-function exercise run in the reader's browser.

The course's website runs this module with Pyodide (Python compiled to WebAssembly, loaded only when
a reader presses Run or Check; _static/pyodide-runner.js and book/_ext/pyodide_runner.py). It runs
the code box as the notebook runs the exercise's cell, ``ex`` being the chapter's exercises, then
judges the function with the exercise's own ``check``: the site and the notebook share one checker.

Two phrases differ on the site, as in the value answers' box (_static/exercises.js): the fallback
names the Hint button instead of ``.hint()``, and "not attempted" does not send the reader to Colab.
Only exercises whose chapter module imports without torch, numpy and Triton run here
(:func:`runnable`, which the site's build calls).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.resources
import io
import sys
import traceback

from . import RUN_IT_YOURSELF, SITE_TRY_A_HINT, TRY_A_HINT

HEAVY = ("torch", "numpy", "triton")     # not in the site's Python


def site_words(text: str) -> str:
    """``text`` (a verdict, or a cell's output) in the site's words."""
    return text.replace(f" {RUN_IT_YOURSELF}", "").replace(RUN_IT_YOURSELF, "").replace(
        TRY_A_HINT, SITE_TRY_A_HINT)


def _error_line(exc: BaseException) -> str:
    """The last line of the traceback a notebook would show, with the line of the code box."""
    line = None
    if isinstance(exc, SyntaxError) and exc.filename == "<your code>":
        line = exc.lineno
    else:
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename == "<your code>":
                line = frame.lineno
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
    return f"{text} (line {line})" if line else text


def run(exercise: str, code: str, answer: str | None = None, setup: str = "") -> dict:
    """Run ``code`` as the exercise's notebook cell, after ``setup`` (what it uses from the
    chapter's earlier cells); with ``answer`` (the name of what the code defines), check it too.
    Returns ``{"output", "error", "state", "message"}``: what the code printed (without the
    verdict of its own ``check`` call when checked), the error that stopped it (None when none),
    and the checker's verdict (None without ``answer`` or after an error)."""
    chapter, attr = exercise.split(".", 1)
    module = importlib.import_module(f"{__package__}.{chapter}")
    namespace = {"__name__": "__main__", "ex": module}
    out, error = io.StringIO(), None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            if setup:
                exec(compile(setup, "<the chapter's earlier cells>", "exec"), namespace)  # noqa: S102
            exec(compile(code, "<your code>", "exec"), namespace)  # noqa: S102 - the reader's own code
        except BaseException as exc:  # noqa: BLE001 - shown to the reader, as a notebook would
            error = _error_line(exc)
    printed = site_words(out.getvalue())
    result = {"output": printed, "error": error, "state": None, "message": None}
    if answer is not None and error is None:
        with contextlib.redirect_stdout(io.StringIO()):
            verdict = getattr(module, attr).check(namespace.get(answer))
        message = site_words(verdict.message)
        shown = str(type(verdict)(verdict.exercise, verdict.state, message))   # as the cell printed it
        lines = [line for line in printed.splitlines(keepends=True) if line.rstrip("\n") != shown]
        result.update(output="".join(lines), state=verdict.state, message=message)
    return result


def runnable() -> dict:
    """Which write-a-function exercises run without torch, numpy and Triton, and the pagedlib
    modules they need: ``{"exercises": [...], "modules": [...], "blocked": {chapter: the module that stopped it}}``. Call it in a fresh Python that
    has not imported any of them: it blocks their imports (:data:`BLOCK_HEAVY` does it first)."""
    for name in HEAVY:
        sys.modules[name] = None          # an import of it raises ModuleNotFoundError
    from . import _REGISTRY
    chapters = sorted(p.stem for p in importlib.resources.files(__package__).iterdir()
                      if p.name.startswith("ch") and p.name.endswith(".py"))
    loaded, blocked = set(), {}
    for chapter in chapters:
        before = set(sys.modules)
        try:
            importlib.import_module(f"{__package__}.{chapter}")
            loaded.add(chapter)
        except ModuleNotFoundError as exc:
            if exc.name not in HEAVY:
                raise
            blocked[chapter] = exc.name
            for name in set(sys.modules) - before:     # what it half-imported is not needed
                del sys.modules[name]
    found = []
    for name, ex in sorted(_REGISTRY.items()):
        if ex.is_function and name.split(".")[0] in loaded:
            with contextlib.redirect_stdout(io.StringIO()):
                if ex.check(ex.reference).correct:
                    found.append(name)
    modules = sorted(m for m, v in sys.modules.items()
                     if v is not None and (m == "pagedlib" or m.startswith("pagedlib.")))
    return {"exercises": found, "modules": modules, "blocked": blocked}


# The command the site's build runs (book/_ext/pyodide_runner.py): a fresh Python, torch, numpy and
# Triton blocked before pagedlib is imported.
BLOCK_HEAVY = ("import sys, json; [sys.modules.__setitem__(m, None) for m in {heavy!r}]; "
               "from pagedlib.exercises.in_browser import runnable; print(json.dumps(runnable()))"
               ).format(heavy=HEAVY)
