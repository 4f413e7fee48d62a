"""Drift check: does the course still work on the torch / triton / numpy that a learner really has?

For each cell of ``MATRIX`` it builds a venv with torch (the pin of requirements.txt, the CPU build),
the cell's triton and numpy, the test tools pinned by requirements.txt and a *non-editable* install
of pagedlib (a wheel), then, from a folder outside the checkout:

1. ``guard``: ``import pagedlib``: ok, warned (a ``VersionWarning``) or refused (``UnsupportedVersions``);
2. ``tests``: the kernel and engine tests (``TEST_FILES``) through the Triton interpreter, which
   pagedlib switches on by itself (a refused cell runs them with the refusal bypassed, to show that
   the rule still holds);
3. ``aot``: every Triton kernel compiled ahead of time, fp16, for sm_75 (a T4), sm_80 and sm_90;
4. ``notebooks``: the two kernel chapters (``*triton_kernel*``, ``*faster_kernels*``) under
   ``nbval-lax``: every cell runs, every assert holds.

It prints the matrix as a markdown table, and exits 1 if any cell departs from its expectation
(which is how a newer triton or numpy that breaks the course, or fixes a known problem, shows up).

    python scripts/drift_check.py                      # the whole matrix (make drift)
    python scripts/drift_check.py --cells 3.2 newest   # some cells, by name
    python scripts/drift_check.py --list               # the cells and their expectations
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST_FILES = ("conftest.py", "test_attention.py", "test_attention_errors.py", "test_model.py",
              "test_engine.py")
NOTEBOOK_STEMS = ("triton_kernel", "faster_kernels")
TOOLS = ("transformers", "matplotlib", "ipywidgets", "tqdm", "pytest", "nbval", "ipykernel")
CAPABILITIES = (75, 80, 90)
IGNORE_RULES_VAR = "PAGEDLIB_IGNORE_VERSION_RULES"   # pagedlib.runtime's bypass of a refusal


@dataclass(frozen=True)
class Cell:
    """One combination and what it must give: guard "ok" | "warned" | "refused"; tests and
    notebooks "pass" | "fail" | None (not run); aot: the capabilities expected to fail to compile."""
    name: str
    triton: str                       # a pip requirement: "triton==3.2.0", or "triton" for the newest
    numpy: str
    guard: str
    tests: str | None = "pass"
    aot_fails: tuple[int, ...] | None = ()
    notebooks: str | None = "pass"
    why: str = ""


MATRIX: tuple[Cell, ...] = (
    Cell("3.1", "triton==3.1.0", "numpy==2.3.5", guard="refused", tests="fail", aot_fails=None,
         notebooks=None, why="wrong results with no error: refused on import"),
    Cell("3.2", "triton==3.2.0", "numpy==2.3.5", guard="ok", why="the oldest triton tested"),
    Cell("3.3", "triton==3.3.1", "numpy==2.3.5", guard="ok", aot_fails=(75,),
         why="cannot compile fp16 for a T4 (warned on such a GPU)"),
    Cell("3.6", "triton==3.6.0", "numpy>=2.4", guard="warned", tests="fail", notebooks="fail",
         why="fails loudly with numpy 2.4: the guard must warn"),
    Cell("3.7.1", "triton==3.7.1", "numpy", guard="ok", why="the triton torch 2.13's CUDA wheel pins"),
    Cell("newest", "triton", "numpy", guard="ok", why="the newest of both"),
)

AOT_SCRIPT = r'''
"""Compile every pagedlib kernel for one GPU: argv = kernels folder, compute capability."""
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
         "partial_out": "*fp32", "partial_lse": "*fp32", "scale": "fp32", "num_splits": "i32"}
META = dict(GROUP=4, GROUP_PAD=16, BLOCK_M=32, BLOCK_SIZE=16, TILE=64, HEAD_DIM=80, HEAD_DIM_PAD=128,
            DOT_PRECISION="tf32", SPLITS_PAD=8, NUM_KV_HEADS=3, HEADS_PAD=4)
OLD_API = tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 3)
def source(fn, dtype):
    kind = lambda p: TYPES.get(p.name, "i32" if p.name.startswith("stride") else dtype)
    if OLD_API:   # triton < 3.3: constexprs by index, absent from the signature
        consts = {i: META[p.name] for i, p in enumerate(fn.params) if p.is_constexpr}
        sig = {i: kind(p) for i, p in enumerate(fn.params) if not p.is_constexpr}
        return ASTSource(fn, sig, consts)
    consts = {p.name: META[p.name] for p in fn.params if p.is_constexpr}
    sig = {p.name: "constexpr" if p.is_constexpr else kind(p) for p in fn.params}
    return ASTSource(fn, sig, consts)
failed = 0
for module, name in [("decode", "decode_kernel"), ("split_k", "split_kernel"),
                     ("split_k", "merge_kernel"), ("prefill", "prefill_kernel"),
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
'''


@dataclass
class Result:
    """What one cell gave, with the time each step took (seconds)."""
    versions: str = ""
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
        return subprocess.CompletedProcess(cmd, 124, error.stdout or "", f"timed out after {timeout} s")


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without what would point Python at the checkout or force the
    interpreter: pagedlib must find its own way."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TRITON_INTERPRET", "VIRTUAL_ENV", IGNORE_RULES_VAR)}
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0", MPLBACKEND="Agg", **extra)
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
    done = run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                str(src), "-w", str(dist)], cwd=work, env=clean_env())
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


def make_venv(cell: Cell, work: Path, wheel: Path, pins: Path) -> Path:
    """The cell's venv (reused when it exists), with pagedlib's wheel installed afresh."""
    venv = work / f"venv-{cell.name}"
    python = venv / "bin" / "python"
    if not python.exists():
        done = run([sys.executable, "-m", "venv", str(venv)], cwd=work, env=clean_env())
        if done.returncode:
            raise SystemExit(f"python -m venv failed: {done.stderr}")
    torch_pin = next(line for line in pins.read_text().splitlines() if line.startswith("torch=="))
    steps = [["install", "--quiet", "--upgrade", torch_pin, cell.triton, cell.numpy, *TOOLS, "-c", str(pins)],
             ["install", "--quiet", "--no-deps", "--force-reinstall", str(wheel)]]
    for step in steps:
        done = run([str(python), "-m", "pip", *step], cwd=work, env=clean_env())
        if done.returncode:
            raise SystemExit(f"pip {' '.join(step)} failed in {venv}:\n{done.stderr[-3000:]}")
    return python


def check_guard(python: Path, here: Path, venv: Path) -> tuple[str, str]:
    """(verdict of the guard, the versions) of `import pagedlib` in the cell's venv."""
    code = ("import os, warnings\nwarnings.simplefilter('always')\n"
            "import torch, numpy, triton\n"
            "print(torch.__version__, triton.__version__, numpy.__version__)\n"
            "import pagedlib\n"
            "assert pagedlib.__file__.startswith(os.environ['VENV']), pagedlib.__file__\n"
            "assert os.environ.get('TRITON_INTERPRET') == '1', 'the runtime did not set the interpreter'\n")
    done = run([str(python), "-c", code], cwd=here, env=clean_env(VENV=str(venv)))
    versions = done.stdout.strip().splitlines()[0] if done.stdout.strip() else "?"
    if "UnsupportedVersions" in done.stderr:
        return "refused", versions
    if done.returncode:
        raise SystemExit(f"import pagedlib failed in {venv}:\n{done.stderr[-2000:]}")
    return ("warned" if "VersionWarning" in done.stderr else "ok"), versions


def pytest_summary(output: str) -> str:
    """pytest's closing counts, e.g. '101 failed, 154 passed'."""
    counts = re.findall(r"(\d+) (passed|failed|errors?|skipped)", output.strip().splitlines()[-1]
                        if output.strip() else "")
    return ", ".join(f"{n} {word}" for n, word in counts) or "no summary"


def first_error(output: str) -> str:
    """The most common reason among pytest's FAILED/ERROR lines."""
    reasons = [line.split(" - ", 1)[1] for line in output.splitlines()
               if line.startswith(("FAILED ", "ERROR ")) and " - " in line]
    return max(set(reasons), key=reasons.count)[:140] if reasons else ""


PYTEST_INI = """[pytest]
markers = slow: takes more than a few seconds (still runs in CI)
addopts = -ra --strict-markers -p no:cacheprovider
filterwarnings = ignore::DeprecationWarning:jupyter_client.*
"""


def run_tests(python: Path, here: Path, cell: Cell, result: Result) -> None:
    """The kernel and engine tests, copied next to a pytest.ini outside the checkout."""
    tests = here / "tests"
    tests.mkdir(exist_ok=True)
    for name in TEST_FILES:
        shutil.copy(ROOT / "tests" / name, tests / name)
    (here / "pytest.ini").write_text(PYTEST_INI)
    extra = {IGNORE_RULES_VAR: "1"} if cell.guard == "refused" else {}
    done = run([str(python), "-m", "pytest", "-q", "-c", "pytest.ini", "--rootdir", ".", "tests"],
               cwd=here, env=clean_env(TRITON_CACHE_DIR=str(here / "triton-cache"), **extra))
    (here / "tests.log").write_text(done.stdout + done.stderr)
    result.tests = "pass" if done.returncode == 0 else "fail"
    result.tests_summary = pytest_summary(done.stdout)
    result.first_error = first_error(done.stdout)


def run_aot(python: Path, here: Path, venv: Path, result: Result) -> None:
    """Compile every kernel of the installed pagedlib for each capability."""
    (here / "aot.py").write_text(AOT_SCRIPT)
    kernels = next(venv.glob("lib/python*/site-packages/pagedlib/kernels"))
    fails, errors = [], []
    for capability in CAPABILITIES:
        done = run([str(python), "aot.py", str(kernels), str(capability)], cwd=here,
                   env=clean_env(TRITON_CACHE_DIR=str(here / f"aot-cache-{capability}")), timeout=900)
        if done.returncode:
            fails.append(capability)
            bad = [l for l in done.stdout.splitlines() if l.startswith("FAIL")] or [done.stderr[-300:]]
            errors.append(f"sm_{capability}: " + "; ".join(bad))
        shutil.rmtree(here / f"aot-cache-{capability}", ignore_errors=True)   # cold cache next time
    result.aot_fails, result.aot_errors = tuple(fails), "\n".join(errors)


def run_notebooks(python: Path, here: Path, result: Result) -> None:
    """The two kernel chapters, every cell run under nbval-lax (errors and failed asserts count)."""
    folder = here / "notebooks"
    folder.mkdir(exist_ok=True)
    paths = []
    for stem in NOTEBOOK_STEMS:
        (path,) = (ROOT / "notebooks").glob(f"*{stem}*.ipynb")
        paths.append(shutil.copy(path, folder / path.name))
    done = run([str(python), "-m", "pytest", "-q", "-c", "pytest.ini", "--rootdir", ".", "--nbval-lax",
                "--nbval-cell-timeout", "1800", *[str(Path(p).relative_to(here)) for p in paths]],
               cwd=here, env=clean_env(TRITON_CACHE_DIR=str(here / "triton-cache")))
    (here / "notebooks.log").write_text(done.stdout + done.stderr)
    result.notebooks = "pass" if done.returncode == 0 else "fail"
    result.notebooks_summary = pytest_summary(done.stdout) + " cells"


def check_cell(cell: Cell, work: Path, wheel: Path, pins: Path, steps: set[str]) -> Result:
    """Build the cell's venv and run the selected steps, timing each."""
    result = Result()
    clock = time.monotonic()
    python = make_venv(cell, work, wheel, pins)
    venv = python.parent.parent
    here = work / f"run-{cell.name}"
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir()
    result.times["venv"] = time.monotonic() - clock
    result.guard, result.versions = check_guard(python, here, venv)
    plan = [("tests", cell.tests is not None, lambda: run_tests(python, here, cell, result)),
            ("aot", cell.aot_fails is not None, lambda: run_aot(python, here, venv, result)),
            ("notebooks", cell.notebooks is not None, lambda: run_notebooks(python, here, result))]
    for name, wanted, step in plan:
        if wanted and name in steps:
            clock = time.monotonic()
            step()
            result.times[name] = time.monotonic() - clock
            print(f"  {cell.name}: {name} done in {result.times[name]:.0f} s", flush=True)
    return result


def departures(cell: Cell, result: Result, steps: set[str]) -> list[str]:
    """Where the result differs from the cell's expectation (steps not run are not judged)."""
    out = [] if result.guard == cell.guard else [f"guard {result.guard}, expected {cell.guard}"]
    if "tests" in steps and result.tests != cell.tests:
        out.append(f"tests {result.tests}, expected {cell.tests}")
    if "aot" in steps and result.aot_fails != cell.aot_fails:
        out.append(f"aot fails on {result.aot_fails}, expected {cell.aot_fails}")
    if "notebooks" in steps and result.notebooks != cell.notebooks:
        out.append(f"notebooks {result.notebooks}, expected {cell.notebooks}")
    return out


def table(rows: list[tuple[Cell, Result, list[str]]]) -> str:
    """The matrix as a markdown table."""
    lines = ["| cell | torch, triton, numpy | guard | kernel + engine tests | AOT compile "
             "sm_75 / sm_80 / sm_90 | notebooks | as expected | minutes (venv, tests, aot, nb) |",
             "|---|---|---|---|---|---|---|---|"]
    for cell, r, off in rows:
        tests = "-" if r.tests is None else f"{r.tests_summary}" + (f": `{r.first_error}`"
                                                                    if r.first_error else "")
        aot = "-" if r.aot_fails is None else " / ".join(
            "fail" if c in r.aot_fails else "ok" for c in CAPABILITIES)
        nbs = "-" if r.notebooks is None else f"{r.notebooks} ({r.notebooks_summary})"
        mins = ", ".join(f"{r.times[k] / 60:.1f}" if k in r.times else "-"
                         for k in ("venv", "tests", "aot", "notebooks"))
        lines.append(f"| {cell.name} | {r.versions} | {r.guard} | {tests} | {aot} | {nbs} | "
                     f"{'yes' if not off else 'NO: ' + '; '.join(off)} | {mins} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", nargs="*", help="cell names (default: all); see --list")
    parser.add_argument("--steps", default="tests,aot,notebooks",
                        help="comma-separated steps to run after the guard (default: all)")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get(
        "DRIFT_WORK", Path.home() / ".cache" / "pagedlib-drift")), help="where the venvs live")
    parser.add_argument("--list", action="store_true", help="print the cells and exit")
    args = parser.parse_args(argv)
    if args.list:
        for c in MATRIX:
            print(f"{c.name:8} {c.triton:16} {c.numpy:14} guard {c.guard:8} tests {c.tests} "
                  f"aot fails {c.aot_fails} notebooks {c.notebooks}  ({c.why})")
        return 0
    names = {c.name for c in MATRIX}
    unknown = set(args.cells or ()) - names
    if unknown:
        parser.error(f"--cells: unknown {sorted(unknown)}; choose from {sorted(names)}")
    steps = set(args.steps.split(",")) - {""}
    if steps - {"tests", "aot", "notebooks"}:
        parser.error(f"--steps must be among tests, aot, notebooks; got {args.steps!r}")
    cells = [c for c in MATRIX if not args.cells or c.name in args.cells]
    args.work.mkdir(parents=True, exist_ok=True)
    wheel, pins = build_wheel(args.work), constraints(args.work)
    rows = []
    for cell in cells:
        start = time.monotonic()
        print(f"cell {cell.name}: {cell.triton}, {cell.numpy} ({cell.why})", flush=True)
        result = check_cell(cell, args.work, wheel, pins, steps)
        off = departures(cell, result, steps)
        rows.append((cell, result, off))
        print(f"  {cell.name}: {'as expected' if not off else '; '.join(off)} "
              f"({(time.monotonic() - start) / 60:.1f} min)", flush=True)
        if result.aot_errors:
            print("  " + result.aot_errors.replace("\n", "\n  "), flush=True)
    print()
    print(table(rows))
    bad = sum(1 for _, _, off in rows if off)
    print(f"\n{len(rows) - bad} of {len(rows)} cells as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
