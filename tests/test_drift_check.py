"""scripts/drift_check.py and noxfile.py: the expectations follow pagedlib's version rules, pyproject's
floors are cells of the matrix, and nox runs one session per cell with those rules (the matrix itself
runs in `make drift`; one cell of it runs in CI). nox is not needed here: a stand-in records what the
noxfile declares and what a session asks of nox."""
import os
import importlib.util
import re
import sys
import tomllib
import types
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


def test_the_script_runs_no_cell_itself_and_points_to_nox(capsys):
    with pytest.raises(SystemExit):
        drift_check.main([])
    assert "run the matrix with nox" in capsys.readouterr().err


class FakeNox(types.ModuleType):
    """Enough of nox for noxfile.py to declare its sessions: what they are and how they are made."""

    def __init__(self):
        super().__init__("nox")
        self.options, self.sessions, self.Session = types.SimpleNamespace(), {}, object

    def session(self, func=None, **kwargs):
        def register(f):
            self.sessions[f.__name__] = (f, kwargs, getattr(f, "params", None))
            return f
        return register(func) if func else register

    def parametrize(self, name, values, ids=None):
        def mark(f):
            f.params = (name, list(values), ids)
            return f
        return mark


def test_the_noxfile_has_one_session_per_cell_and_the_table(monkeypatch):
    fake = FakeNox()
    monkeypatch.setitem(sys.modules, "nox", fake)
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    drift, kwargs, params = fake.sessions["drift"]
    assert params == ("cell", list(drift_check.MATRIX), list(drift_check.MATRIX))
    assert kwargs == {"venv_backend": "venv"}
    assert fake.sessions["drift_table"][1] == {"python": False}
    assert fake.options.sessions == ["drift", "drift_table"]
    assert Path(fake.options.envdir).is_relative_to(drift_check.WORK)   # venvs outside the checkout
    seen = []
    monkeypatch.setattr(drift_check, "check_cell", lambda session, cell: seen.append(cell))
    drift("session", "3.2.0/2.3.5")
    assert seen == ["3.2.0/2.3.5"]


class FakeSession:
    def __init__(self, posargs=()):
        self.posargs, self.bin, self.installs, self.logs = list(posargs), "/venv/bin", [], []

    def install(self, *args):
        self.installs.append(args)

    def log(self, message):
        self.logs.append(message)

    def error(self, message):
        raise RuntimeError(message)


def fake_cell(monkeypatch, tmp_path, **got):
    """check_cell with the wheel, the pins and the steps stubbed: the steps report ``got``."""
    monkeypatch.setattr(drift_check, "WORK", tmp_path)
    monkeypatch.setattr(drift_check, "build_wheel", lambda work: work / "pagedlib-0-py3-none-any.whl")
    (tmp_path / "pins.txt").write_text("numpy==2.4.6\ntorch==2.13.0\npytest==8.0\n")
    monkeypatch.setattr(drift_check, "constraints", lambda work: tmp_path / "pins.txt")
    ran = {}

    def run_steps(python, here, steps, result):
        ran.update(python=python, steps=steps)
        result.versions, result.expected = "2.13.0, 3.2.0, 2.3.5", drift_check.Expected("ok", "pass", (), "pass")
        result.guard, result.tests, result.aot_fails, result.notebooks = got.get("guard", "ok"), "pass", (), "pass"
    monkeypatch.setattr(drift_check, "run_steps", run_steps)
    return ran


def test_a_cell_session_installs_its_versions_then_the_wheel_alone(monkeypatch, tmp_path):
    ran = fake_cell(monkeypatch, tmp_path)
    session = FakeSession(["tests", "aot"])
    result = drift_check.check_cell(session, "3.2.0/2.3.5")
    first, second = session.installs
    wheel = str(tmp_path / "triton-3.2.0-numpy-2.3.5" / "pagedlib-0-py3-none-any.whl")
    assert {"torch==2.13.0", "triton==3.2.0", "numpy==2.3.5", *drift_check.TOOLS, wheel} <= set(first)
    assert first[-2:] == ("-c", str(tmp_path / "pins.txt"))
    assert second[-1] == wheel and "--no-deps" in second                 # pagedlib's dependencies too
    assert ran == {"python": Path("/venv/bin/python"), "steps": {"tests", "aot"}}
    assert "as the rules say" in session.logs[0] and result.cell == "3.2.0/2.3.5"
    with pytest.raises(RuntimeError, match="steps must be among tests, aot, notebooks"):
        drift_check.check_cell(FakeSession(["test"]), "3.2.0/2.3.5")


def test_a_cell_that_departs_fails_its_session_and_the_table(monkeypatch, tmp_path, capsys):
    fake_cell(monkeypatch, tmp_path, guard="warned")
    with pytest.raises(RuntimeError, match=r"3.6.0/2.4.\* departs .*: guard warned, the rules expect ok"):
        drift_check.check_cell(FakeSession(), "3.6.0/2.4.*")
    fake_cell(monkeypatch, tmp_path)
    drift_check.check_cell(FakeSession(), "3.2.0/2.3.5")
    assert drift_check.main(["--table"]) == 1                 # the kept results, in the matrix's order
    out = capsys.readouterr().out
    assert out.index("| 3.2.0/2.3.5 |") < out.index("| 3.6.0/2.4.* |")
    assert "NO: guard warned, the rules expect ok" in out and "1 of 2 cells as the rules say" in out


def test_a_crashed_test_run_names_the_crash_and_its_test():
    out = ("........Fatal Python error: Segmentation fault\n\nCurrent thread 0x7f (most recent call first):\n"
           '  File "/x/site-packages/triton/runtime/interpreter.py", line 381 in create_masked_load\n'
           '  File "/x/run/tests/test_attention_errors.py", line 117 in test_validate_false\n'
           '  File "/x/site-packages/_pytest/python.py", line 187 in pytest_pyfunc_call\n')
    assert drift_check.common_error(out) == (
        "crashed: Segmentation fault in test_attention_errors.py::test_validate_false")
    assert drift_check.pytest_summary(out) == "no summary"


def test_make_drift_installs_nox_from_pypi_and_ci_runs_one_cell_in_a_fresh_venv():
    """nox is not assumed installed: `make drift` pip-installs its pinned version first; CI (.ci/run)
    runs the triton 3.2.0 / numpy 2.3.5 cell with --reuse-venv=no."""
    import subprocess
    ci = (ROOT / ".ci" / "run").read_text()
    (line,) = [line for line in ci.splitlines() if line.startswith("make drift")]
    args = line.split()[2:]
    assert "DRIFT_CELLS=3.2.0/2.3.5" in args and "3.2.0/2.3.5" in drift_check.MATRIX
    # run under `make test` (a sub-make): no "Entering directory" lines, no inherited flags
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    shown = subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed", "drift",
                            *args], cwd=ROOT, env=env, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    assert re.fullmatch(r'\S+ -m pip install --quiet "nox==[\d.]+"', shown[0])
    assert shown[1].endswith('-m nox -f noxfile.py --reuse-venv=no -s "drift(3.2.0/2.3.5)" drift_table')


def test_the_aot_harness_compiles_every_kernel_with_every_constexpr():
    """The drift cell compiles each kernel file alone for sm_75/80/90 with one META of constexprs:
    a kernel that is not in its list goes untested on older Triton, and a constexpr missing from
    META fails every cell there (a KeyError, as TILE_Q did when the prefill tile was packed). Read
    from the harness's text, against the kernels' own signatures."""
    import inspect

    from triton.runtime.jit import KernelInterface

    from pagedlib.attention import kernels

    script = drift_check.AOT_SCRIPT
    listed = set(re.findall(r'\("(\w+)", "(\w+_kernel)"\)', script))
    meta = eval(re.search(r"META = (dict\(.*?\))\n", script, re.S).group(1))   # noqa: S307 (our text)
    found = set()
    for path in sorted(Path(kernels.__file__).parent.glob("*.py")):
        module = importlib.import_module(f"pagedlib.attention.kernels.{path.stem}")
        for name, fn in vars(module).items():
            if isinstance(fn, KernelInterface) and name.endswith("_kernel") \
                    and fn.fn.__module__ == module.__name__:     # jitted (or interpreted) here
                found.add((path.stem, name))
                params = inspect.signature(fn.fn).parameters.values()
                missing = [p.name for p in params if "constexpr" in str(p.annotation)
                           and p.default is inspect.Parameter.empty and p.name not in meta]
                assert not missing, f"{name}'s constexprs {missing} are not in the harness's META"
    assert found and found <= listed, f"kernels the drift harness does not compile: {sorted(found - listed)}"
