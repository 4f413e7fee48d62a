"""The drift matrix on nox: one session per torch / triton / numpy cell of scripts/drift_check.py's
``MATRIX`` (its docstring says what a cell runs and what it must give), then ``drift_table``.

    make drift                                    # installs nox from PyPI, runs every cell, the table
    python -m nox -s "drift(3.2.0/2.3.5)"         # one cell (CI's, with --reuse-venv=no: a fresh venv)
    python -m nox -s "drift(3.2.0/2.3.5)" -- aot  # some steps of it: tests, aot, notebooks
    python -m nox -l                              # the sessions

The venvs live in ``DRIFT_WORK/venvs`` (default ``~/.cache/pagedlib-drift``), outside the checkout,
and are reused from run to run (pip still brings each up to the cell's pins).
"""
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))
import drift_check  # noqa: E402

nox.options.envdir = str(drift_check.WORK / "venvs")
nox.options.reuse_venv = "yes"
nox.options.sessions = ["drift", "drift_table"]


@nox.session(venv_backend="venv")
@nox.parametrize("cell", list(drift_check.MATRIX), ids=list(drift_check.MATRIX))
def drift(session: nox.Session, cell: str) -> None:
    """One cell: its venv, the guard, the kernel and engine tests, the compiles, chapters 8 and 9."""
    drift_check.check_cell(session, cell)


@nox.session(python=False)
def drift_table(session: nox.Session) -> None:
    """The kept results of every cell run so far, as the README's markdown table."""
    if drift_check.main(["--table"]):
        session.error("a cell departs from pagedlib's version rules (see the table)")
