"""Drift check: does the course still work on the torch / triton / numpy that a learner really has?

The rules and steps of the drift matrix; ``noxfile.py`` runs each cell of ``MATRIX`` as a nox session
(``drift(TRITON/NUMPY)``), in a venv nox makes, with torch (the pin of requirements.txt, the CPU build),
the cell's triton and numpy, the test tools pinned by requirements.txt and a *non-editable* install of
pagedlib (a wheel). Then, from a folder outside the checkout (``DRIFT_WORK``):

1. ``guard``: ``import pagedlib``: ok, warned (a ``VersionWarning``) or refused (``UnsupportedVersions``);
2. ``tests``: the kernel and engine tests (``TEST_FILES``) through the Triton interpreter, which
   pagedlib switches on by itself (a refused cell runs them with the refusal bypassed, to show that
   the rule still holds);
3. ``aot``: every Triton kernel compiled ahead of time, fp16, for sm_75 (a T4), sm_80 and sm_90;
4. ``notebooks``: the two kernel chapters (``*triton_kernel*``, ``*faster_kernels*``) under
   ``nbval-lax``: every cell runs, every assert holds.

What each cell must give comes from ``pagedlib.runtime.RULES``, asked inside the cell's venv: no
rule, everything passes and the guard stays quiet; a rule that warns, the guard warns and the
interpreted tests and notebooks fail (a T4 rule: the sm_75 compile fails); a rule that refuses, the
import refuses, the notebooks stop at their setup cell with the fix, and the tests, run with the
refusal bypassed, fail on wrong values. A cell that departs from the rules fails its session: that is
how a new triton or numpy that breaks the course, or fixes a known problem, shows up. Each cell's
result is kept (``DRIFT_WORK/results``); ``drift_table`` prints them as a markdown table::

    make drift                                           # every cell, then the table
    make drift DRIFT_CELLS=3.2.0/2.3.5                   # some cells (the one CI runs)
    python -m nox -s "drift(3.2.0/2.3.5)" -- tests aot   # some steps of one cell
    python -m nox -l                                     # the matrix's sessions
    python scripts/drift_check.py --table                # the stored results as a table
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_FILES = ("conftest.py", "test_attention.py", "test_attention_errors.py", "test_model.py",
              "test_engine.py")
NOTEBOOK_STEMS = ("triton_kernel", "faster_kernels")
TOOLS = ("transformers", "matplotlib", "ipywidgets", "tqdm", "pytest", "nbval", "ipykernel")
CAPABILITIES = (75, 80, 90)
IGNORE_RULES_VAR = "PAGEDLIB_IGNORE_VERSION_RULES"   # pagedlib.runtime's bypass of a refusal
NEWEST = "newest"

# "triton/numpy": an exact version, a pip wildcard ("2.4.*": the newest 2.4) or "newest". Every row
# of the README's "Tested combinations" is a cell.
MATRIX: tuple[str, ...] = (
    "3.0.0/2.3.5",        # wrong results with no error: refused on import
    "3.1.0/1.26.4",       # the floors of pyproject.toml
    "3.1.0/2.3.5",        # wrong results with no error: refused on import
    "3.1.0/2.4.*",        # fails loudly, refused all the same
    "3.2.0/2.3.5",        # the oldest triton that takes numpy 2 (the cell CI runs)
    "3.3.1/2.3.5",        # cannot compile fp16 for a T4 (sm_75)
    "3.4.0/2.3.5",        # the fix for that
    "3.5.1/2.4.*",        # fails loudly with numpy 2.4: the guard must warn
    "3.6.0/2.3.5",        # the newest triton that needs numpy < 2.4 ...
    "3.6.0/2.4.*",        # ... and fails loudly with 2.4: the guard must warn
    "3.7.1/newest",       # the triton torch 2.13's CUDA wheel pins
    "3.8.0/newest",
    "newest/newest",      # the newest of both
)


def requirement(package: str, version: str) -> str:
    """The pip requirement for one side of a cell name."""
    return package if version == NEWEST else f"{package}=={version}"


AOT_SCRIPT = r"""
# Compile every pagedlib kernel for one GPU, fp16: argv = the kernels folder, a compute capability.
# The same harness as tests/test_attention.py's (which compiles for sm_90 and checks T4 tile sizes).
import importlib.util, os, sys, types
os.environ.pop("TRITON_INTERPRET", None)       # compile for real: no interpreter in this process
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

root, capability = sys.argv[1], int(sys.argv[2])
pkg = types.ModuleType("kernels"); pkg.__path__ = [root]; sys.modules["kernels"] = pkg
def load(name):                                 # the kernel files alone, not pagedlib
    spec = importlib.util.spec_from_file_location(f"kernels.{name}", f"{root}/{name}.py")
    mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod
    spec.loader.exec_module(mod); return mod
TYPES = {"block_tables": "*i32", "seq_lens": "*i32", "query_start_loc": "*i32", "slot_mapping": "*i64",
         "partial_out": "*fp32", "partial_lse": "*fp32", "scale": "fp32", "qk_scale": "fp32",
         "num_splits": "i32", "num_seqs": "i32"}
META = dict(GROUP=4, GROUP_PAD=16, TILE_M=32, TILE_Q=8, SPLIT_Q=8, BLOCK_SIZE=16, TILE=64, HEAD_DIM=80,
            HEAD_DIM_PAD=128, DOT_PRECISION="tf32", SPLITS_PAD=8, NUM_KV_HEADS=3, HEADS_PAD=4)
def source(fn, dtype):
    consts = {p.name: META[p.name] for p in fn.params if p.is_constexpr}
    sig = {p.name: "constexpr" if p.is_constexpr else
           TYPES.get(p.name, "i32" if p.name.startswith("stride") else dtype) for p in fn.params}
    return ASTSource(fn, sig, consts)
failed = 0
for module, name in [("decode", "decode_kernel"), ("split_k", "split_kernel"),
                     ("split_k", "merge_kernel"), ("prefill", "prefill_kernel"),
                     ("varlen", "varlen_kernel"), ("varlen", "varlen_merge_kernel"),
                     ("write_kv", "write_kv_kernel")]:
    try:
        compiled = triton.compile(source(getattr(load(module), name), "*fp16"),
                                  target=GPUTarget("cuda", capability, 32), options=dict(num_warps=4))
        assert "cubin" in compiled.asm
        print(f"ok {name}")
    except Exception as error:                  # report every kernel, not just the first failure
        failed += 1
        print(f"FAIL {name}: {type(error).__name__}: {str(error).strip().splitlines()[-1][:160]}")
sys.exit(1 if failed else 0)
"""

# Asked inside the cell's venv: its versions and what pagedlib's rules say about them, on this
# CPU (the interpreter) and on a T4 (compiled, compute capability 7.5).
RULES_SCRIPT = r"""
import json, os, warnings
warnings.simplefilter("ignore")
import pagedlib
from pagedlib import runtime
assert pagedlib.__file__.startswith(os.environ["VENV"]), f"pagedlib imported from {pagedlib.__file__}"
assert os.environ.get("TRITON_INTERPRET") == "1", "pagedlib did not switch the interpreter on"
here = runtime.current_versions()
t4 = runtime.Versions(here.torch, here.triton, here.numpy, interpret=False, capability=(7, 5))
print(json.dumps({"versions": f"{here.torch}, {here.triton}, {here.numpy}",
                  "interpreter": [r.refuse for r in runtime.problems(here)],
                  "t4": [r.refuse for r in runtime.problems(t4)]}))
"""


@dataclass
class Expected:
    """What a cell must give, from pagedlib's rules for its versions."""
    guard: str                                  # "ok" | "warned" | "refused"
    tests: str                                  # "pass" | "fail"
    aot_fails: tuple[int, ...]
    notebooks: str

    @classmethod
    def from_rules(cls, interpreter: list[bool], t4: list[bool]) -> "Expected":
        guard = "refused" if any(interpreter) else "warned" if interpreter else "ok"
        # the tests include an sm_75 compile (tests/test_attention.py), so a T4 rule fails them too
        return cls(guard=guard, tests="fail" if interpreter or t4 else "pass",
                   aot_fails=(75,) if t4 else (), notebooks="fail" if interpreter else "pass")


@dataclass
class Result:
    """What one cell gave, with the time each step took (seconds)."""
    cell: str = ""
    versions: str = ""
    expected: Expected | None = None
    guard: str = ""
    tests: str | None = None
    tests_summary: str = ""
    first_error: str = ""
    aot_fails: tuple[int, ...] | None = None
    aot_errors: str = ""
    notebooks: str | None = None
    notebooks_summary: str = ""
    times: dict[str, float] = field(default_factory=dict)


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 3600) -> subprocess.CompletedProcess:
    """Run a command, capturing text output; a timeout counts as a failure, not a crash."""
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        return subprocess.CompletedProcess(cmd, 124, str(error.stdout or ""), f"timed out after {timeout} s")


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without what would point Python at the checkout or force the
    interpreter: pagedlib must find its own way."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TRITON_INTERPRET", "VIRTUAL_ENV", IGNORE_RULES_VAR)}
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0", MPLBACKEND="Agg", COLUMNS="240", **extra)
    return env


def build_wheel(work: Path) -> Path:
    """A wheel of the checkout's pagedlib, built from a copy so the checkout gets no build files."""
    src, dist = work / "src", work / "dist"
    for path in (src, dist):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(ROOT / "pagedlib", src / "pagedlib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    done = run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(src), "-w", str(dist)],
               cwd=work, env=clean_env())           # pyproject's build-system, in pip's isolated build env
    if done.returncode:
        raise SystemExit(f"building the pagedlib wheel failed:\n{done.stderr[-2000:]}")
    (wheel,) = dist.glob("pagedlib-*.whl")
    return wheel


def constraints(work: Path) -> Path:
    """requirements.txt's pins, less triton and numpy (the cell chooses those)."""
    keep = [line for line in (ROOT / "requirements.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")
            and line.split("==")[0].strip().lower() not in ("triton", "numpy")]
    path = work / "constraints.txt"
    path.write_text("\n".join(keep) + "\n")
    return path


def slug(cell: str) -> str:
    """A folder name for a cell: '3.6.0/2.4.*' -> 'triton-3.6.0-numpy-2.4.x'."""
    triton, numpy = cell.split("/")
    return f"triton-{triton}-numpy-{numpy}".replace("*", "x")


def check_guard(python: Path, here: Path, venv: Path, result: Result) -> None:
    """The rules' expectation for the venv's versions, and what a plain `import pagedlib` does."""
    asked = run([str(python), "-c", RULES_SCRIPT], cwd=here,
                env=clean_env(VENV=str(venv), **{IGNORE_RULES_VAR: "1"}))
    if asked.returncode:
        raise SystemExit(f"asking pagedlib's rules failed in {venv}:\n{asked.stderr[-2000:]}")
    answer = json.loads(asked.stdout.strip().splitlines()[-1])
    result.versions = answer["versions"]
    result.expected = Expected.from_rules(answer["interpreter"], answer["t4"])
    plain = run([str(python), "-W", "always", "-c", "import pagedlib"], cwd=here, env=clean_env())
    if "UnsupportedVersions" in plain.stderr:
        result.guard = "refused"
    elif plain.returncode:
        raise SystemExit(f"import pagedlib failed in {venv}:\n{plain.stderr[-2000:]}")
    else:
        result.guard = "warned" if "VersionWarning" in plain.stderr else "ok"


def pytest_summary(output: str) -> str:
    """pytest's closing counts, e.g. '101 failed, 154 passed'."""
    last = output.strip().splitlines()[-1] if output.strip() else ""
    counts = re.findall(r"(\d+) (passed|failed|errors?|skipped)", last)
    return ", ".join(f"{n} {word}" for n, word in counts) or "no summary"


def common_error(output: str) -> str:
    """The most common reason among pytest's FAILED/ERROR lines, or the test a crash happened in."""
    crash = re.search(r"Fatal Python error: (.*)", output)
    if crash:                                       # the test's frame is the innermost one in tests/
        where = re.findall(r'tests/(\S+)", line \d+ in (\w+)', output)
        return f"crashed: {crash.group(1).strip()}" + (f" in {where[0][0]}::{where[0][1]}" if where else "")
    reasons = [line.split(" - ", 1)[1] for line in output.splitlines()
               if line.startswith(("FAILED ", "ERROR ")) and " - " in line]
    return max(set(reasons), key=reasons.count)[:120] if reasons else ""


PYTEST_INI = """[pytest]
markers = slow: takes more than a few seconds (still runs in CI)
addopts = -ra --strict-markers -p no:cacheprovider
filterwarnings = ignore::DeprecationWarning:jupyter_client.*
"""


def run_tests(python: Path, here: Path, result: Result) -> None:
    """The kernel and engine tests, copied next to a pytest.ini outside the checkout; on refused
    versions with the refusal bypassed, so the rule itself is put to the test."""
    tests = here / "tests"
    tests.mkdir(exist_ok=True)
    for name in TEST_FILES:
        shutil.copy(ROOT / "tests" / name, tests / name)
    extra = {IGNORE_RULES_VAR: "1"} if result.guard == "refused" else {}
    done = run([str(python), "-m", "pytest", "-q", "-c", "pytest.ini", "--rootdir", ".", "tests"],
               cwd=here, env=clean_env(TRITON_CACHE_DIR=str(here / "triton-cache"), **extra))
    (here / "tests.log").write_text(done.stdout + done.stderr)
    result.tests = "pass" if done.returncode == 0 else "fail"
    result.tests_summary = pytest_summary(done.stdout)
    result.first_error = common_error(done.stdout + done.stderr)


def run_aot(python: Path, here: Path, venv: Path, result: Result) -> None:
    """Compile every kernel of the installed pagedlib for each capability, from a cold cache."""
    (here / "aot.py").write_text(AOT_SCRIPT)
    kernels = next(venv.glob("lib/python*/site-packages/pagedlib/attention/kernels"))
    fails, errors = [], []
    for capability in CAPABILITIES:
        cache = here / f"aot-cache-{capability}"
        done = run([str(python), "aot.py", str(kernels), str(capability)], cwd=here,
                   env=clean_env(TRITON_CACHE_DIR=str(cache)), timeout=900)
        if done.returncode:
            fails.append(capability)
            bad = [l for l in done.stdout.splitlines() if l.startswith("FAIL")] or [done.stderr[-300:]]
            bad += [l[:160] for l in done.stderr.splitlines() if l.startswith("Unsupported")][:1]
            errors.append(f"sm_{capability}: " + "; ".join(bad))
        shutil.rmtree(cache, ignore_errors=True)
    result.aot_fails, result.aot_errors = tuple(fails), "\n".join(errors)
    (here / "aot.log").write_text(result.aot_errors or "every kernel compiled for every capability\n")


def run_notebooks(python: Path, here: Path, result: Result) -> None:
    """The two kernel chapters, every cell run under nbval-lax (errors and failed asserts count),
    with no bypass: on refused versions they must stop at the setup cell, with the fix."""
    folder = here / "notebooks"
    folder.mkdir(exist_ok=True)
    names = []
    for stem in NOTEBOOK_STEMS:
        (path,) = (ROOT / "notebooks").glob(f"*{stem}*.ipynb")
        shutil.copy(path, folder / path.name)
        names.append(f"notebooks/{path.name}")
    done = run([str(python), "-m", "pytest", "-q", "-c", "pytest.ini", "--rootdir", ".", "--nbval-lax",
                "--nbval-cell-timeout", "1800", *names],
               cwd=here, env=clean_env(TRITON_CACHE_DIR=str(here / "triton-cache")))
    (here / "notebooks.log").write_text(done.stdout + done.stderr)
    result.notebooks = "pass" if done.returncode == 0 else "fail"
    result.notebooks_summary = pytest_summary(done.stdout) + " cells"
    if result.guard == "refused" and "UnsupportedVersions" in done.stdout:
        result.notebooks_summary += ", refused at setup"


def departures(result: Result) -> list[str]:
    """Where the result differs from what the rules expect (steps not run are not judged)."""
    want = result.expected
    got = {"guard": result.guard, "tests": result.tests, "aot": result.aot_fails,
           "notebooks": result.notebooks}
    expected = {"guard": want.guard, "tests": want.tests, "aot": want.aot_fails,
                "notebooks": want.notebooks}
    return [f"{key} {got[key]}, the rules expect {expected[key]}" for key in got
            if got[key] is not None and got[key] != expected[key]]


def table(rows: list[tuple[str, Result, list[str]]]) -> str:
    """The matrix as a markdown table."""
    lines = ["| triton / numpy | torch, triton, numpy | guard | kernel + engine tests | "
             "AOT sm_75 / sm_80 / sm_90 | notebooks 08, 09 | as the rules say | minutes |",
             "|---|---|---|---|---|---|---|---|"]
    for cell, r, off in rows:
        tests = "-" if r.tests is None else r.tests_summary + (
            f": `{r.first_error}`" if r.first_error else "")
        aot = "-" if r.aot_fails is None else " / ".join(
            "fail" if c in r.aot_fails else "ok" for c in CAPABILITIES)
        nbs = "-" if r.notebooks is None else f"{r.notebooks} ({r.notebooks_summary})"
        mins = f"{sum(r.times.values()) / 60:.1f} (" + ", ".join(
            f"{k} {v / 60:.1f}" for k, v in r.times.items()) + ")"
        lines.append(f"| {cell} | {r.versions} | {r.guard} | {tests} | {aot} | {nbs} | "
                     f"{'yes' if not off else 'NO: ' + '; '.join(off)} | {mins} |")
    return "\n".join(lines)


STEPS = ("tests", "aot", "notebooks")
WORK = Path(os.environ.get("DRIFT_WORK", Path.home() / ".cache" / "pagedlib-drift"))


def install_args(cell: str, pins: Path, wheel: Path) -> list[list[str]]:
    """The two ``pip install`` argument lists of a cell's venv: torch, the cell's triton and numpy, the
    test tools and pagedlib's wheel with its own dependencies (requirements.txt's pins for the rest);
    then the wheel alone again, so that a reused venv holds this checkout's pagedlib."""
    triton, numpy = cell.split("/")
    torch_pin = next(line for line in pins.read_text().splitlines() if line.startswith("torch=="))
    return [["--quiet", "--no-compile", "--upgrade", torch_pin, requirement("triton", triton),
             requirement("numpy", numpy), *TOOLS, str(wheel), "-c", str(pins)],
            ["--quiet", "--no-deps", "--force-reinstall", str(wheel)]]


def run_steps(python: Path, here: Path, steps: set[str], result: Result) -> None:
    """The guard, then the selected steps in the venv of ``python`` from the folder ``here``, timed."""
    venv = python.parent.parent
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir(parents=True)
    (here / "pytest.ini").write_text(PYTEST_INI)
    check_guard(python, here, venv, result)
    step = {"tests": lambda: run_tests(python, here, result),
            "aot": lambda: run_aot(python, here, venv, result),
            "notebooks": lambda: run_notebooks(python, here, result)}
    for name in STEPS:
        if name in steps:
            clock = time.monotonic()
            step[name]()
            result.times[name] = time.monotonic() - clock


def check_cell(session, cell: str) -> Result:
    """noxfile.py's ``drift`` session for one cell: install its venv, run the steps (``session.posargs``,
    default all of ``STEPS``), keep the result, and fail the session if it departs from the rules."""
    steps = set(session.posargs) or set(STEPS)
    if steps - set(STEPS):
        session.error(f"steps must be among {', '.join(STEPS)}; got {' '.join(session.posargs)}")
    clock, work, result = time.monotonic(), WORK / slug(cell), Result(cell=cell)
    work.mkdir(parents=True, exist_ok=True)
    try:                                        # a broken build or venv stops this cell, not the matrix
        wheel, pins = build_wheel(work), constraints(work)
        for args in install_args(cell, pins, wheel):
            session.install(*args)
        result.times["venv"] = time.monotonic() - clock
        run_steps(Path(session.bin) / "python", WORK / f"run-{slug(cell)}", steps, result)
    except SystemExit as error:
        session.error(f"{cell}: {error}")
    save(result)
    off = departures(result)
    session.log(f"{cell} ({result.versions}): {'as the rules say' if not off else '; '.join(off)} "
                f"({sum(result.times.values()) / 60:.1f} min)")
    if result.aot_errors:
        session.log(result.aot_errors)
    if off:
        session.error(f"{cell} departs from pagedlib's version rules: {'; '.join(off)}")
    return result


def save(result: Result) -> Path:
    """Keep a cell's result (``WORK/results/<cell>.json``) for :func:`load_results` and the table."""
    folder = WORK / "results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug(result.cell)}.json"
    path.write_text(json.dumps(asdict(result), indent=1))
    return path


def load_results() -> list[Result]:
    """The kept results, in the matrix's order (cells outside it last)."""
    results = []
    for path in sorted((WORK / "results").glob("*.json")):
        data = json.loads(path.read_text())
        expected = data.pop("expected")
        result = Result(**data)
        result.expected = None if expected is None else Expected(
            **{**expected, "aot_fails": tuple(expected["aot_fails"])})
        if result.aot_fails is not None:
            result.aot_fails = tuple(result.aot_fails)
        results.append(result)
    order = {cell: i for i, cell in enumerate(MATRIX)}
    return sorted(results, key=lambda r: order.get(r.cell, len(order)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the matrix's cells")
    parser.add_argument("--table", action="store_true",
                        help="print the kept results as a markdown table (exit 1 if one departs)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(MATRIX))
        return 0
    if not args.table:
        parser.error("run the matrix with nox (make drift, or python -m nox -s drift); "
                     "this script has --list and --table")
    rows = [(r.cell, r, departures(r)) for r in load_results()]
    if not rows:
        print(f"no results in {WORK / 'results'}: run make drift first")
        return 1
    print(table(rows))
    bad = sum(1 for _, _, off in rows if off)
    print(f"\n{len(rows) - bad} of {len(rows)} cells as the rules say (logs in {WORK}/run-*)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
