"""scripts/drift_check.py: its expectations follow pagedlib's version rules, and pyproject's floors are
cells of its matrix (the matrix itself runs in `make drift`; one cell of it runs in CI)."""
import re
import sys
import tomllib
from pathlib import Path

import pytest

from pagedlib import runtime

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import drift_check  # noqa: E402


def _problems(cell: str) -> tuple[list, list]:
    """pagedlib's rules broken by a matrix cell, in the interpreter and on a T4 (2.4.* read as 2.4.0)."""
    triton, numpy = (v.replace("*", "0") for v in cell.split("/"))
    here = runtime.Versions("2.13.0", triton, numpy, interpret=True, capability=None)
    t4 = runtime.Versions("2.13.0", triton, numpy, interpret=False, capability=(7, 5))
    return runtime.problems(here), runtime.problems(t4)


def _rules_for(cell: str) -> tuple[list[bool], list[bool]]:
    """What the cell's venv reports to the drift check: each broken rule's `refuse`."""
    return tuple([r.refuse for r in side] for side in _problems(cell))


@pytest.mark.parametrize("cell, guard, tests, aot, notebooks", [
    ("3.1.0/2.3.5", "refused", "fail", (), "fail"),
    ("3.1.0/1.26.4", "ok", "pass", (), "pass"),
    ("3.3.1/2.3.5", "ok", "fail", (75,), "pass"),      # the tests include an sm_75 compile
    ("3.6.0/2.4.*", "warned", "fail", (), "fail"),
    ("3.7.1/2.4.6", "ok", "pass", (), "pass"),
])
def test_each_cell_expects_what_the_rules_say(cell, guard, tests, aot, notebooks):
    assert drift_check.Expected.from_rules(*_rules_for(cell)) == drift_check.Expected(
        guard, tests, aot, notebooks)


def test_the_matrix_covers_every_rule_and_the_issue_s_cells():
    pinned = [c for c in drift_check.MATRIX if drift_check.NEWEST not in c]
    broken = {r.fix for c in pinned for side in _problems(c) for r in side}
    assert broken == {r.fix for r in runtime.RULES}
    for cell in ("3.2.0/2.3.5", "3.6.0/2.4.*", "3.7.1/newest", "newest/newest"):
        assert cell in drift_check.MATRIX


def test_pyproject_floors_are_cells_of_the_matrix():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = {d.split(">=")[0]: d.split(">=")[1].split(";")[0].strip() for d in deps if ">=" in d}
    good = [tuple(runtime.release(v)[:2] for v in c.split("/")) for c in drift_check.MATRIX
            if drift_check.NEWEST not in c and _problems(c) == ([], [])]
    assert (runtime.release(floor["triton"]), runtime.release(floor["numpy"])) in good
    assert min(t for t, _ in good) == runtime.release(floor["triton"])
    assert min(n for _, n in good) == runtime.release(floor["numpy"])


def test_the_bypass_is_the_one_pagedlib_reads():
    assert drift_check.IGNORE_RULES_VAR == runtime.IGNORE_RULES_VAR


def test_a_departure_names_the_step_and_both_values():
    result = drift_check.Result(guard="ok", tests="pass", aot_fails=(), notebooks=None,
                                expected=drift_check.Expected("warned", "fail", (), "fail"))
    assert drift_check.departures(result) == ["guard ok, the rules expect warned",
                                              "tests pass, the rules expect fail"]


def test_pytest_output_is_summarised_with_its_most_common_error():
    out = ("FAILED t.py::a - InterpreterError: TypeError('only 0-dimensional')\n"
           "FAILED t.py::b - InterpreterError: TypeError('only 0-dimensional')\n"
           "FAILED t.py::c - AssertionError\n"
           "3 failed, 252 passed, 3459 warnings in 78.64s (0:01:18)\n")
    assert drift_check.pytest_summary(out) == "3 failed, 252 passed"
    assert drift_check.common_error(out) == "InterpreterError: TypeError('only 0-dimensional')"
    assert drift_check.pytest_summary("") == "no summary" and drift_check.common_error("") == ""


def test_cell_names_become_folder_names_and_pip_requirements():
    assert drift_check.slug("3.6.0/2.4.*") == "triton-3.6.0-numpy-2.4.x"
    assert drift_check.requirement("numpy", "2.4.*") == "numpy==2.4.*"
    assert drift_check.requirement("triton", "newest") == "triton"
    assert all(re.fullmatch(r"(newest|[\d.]+)/(newest|[\d.]+\*?)", c) for c in drift_check.MATRIX)


def test_a_malformed_cell_is_refused_with_the_form_it_needs(capsys):
    with pytest.raises(SystemExit):
        drift_check.main(["--cells", "3.2"])
    assert "each cell is triton/numpy like 3.2.0/2.3.5" in capsys.readouterr().err


def test_a_crashed_test_run_names_the_crash_and_its_test():
    out = ("........Fatal Python error: Segmentation fault\n\nCurrent thread 0x7f (most recent call first):\n"
           '  File "/x/site-packages/triton/runtime/interpreter.py", line 381 in create_masked_load\n'
           '  File "/x/run/tests/test_attention_errors.py", line 117 in test_validate_false\n'
           '  File "/x/site-packages/_pytest/python.py", line 187 in pytest_pyfunc_call\n')
    assert drift_check.common_error(out) == (
        "crashed: Segmentation fault in test_attention_errors.py::test_validate_false")
    assert drift_check.pytest_summary(out) == "no summary"
