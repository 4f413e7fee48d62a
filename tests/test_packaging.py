"""`pip install .` gives a working pagedlib: every subpackage and the data files, loose dependencies."""
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    str(ROOT), "-w", str(out)], check=True, capture_output=True)
    (path,) = out.glob("pagedlib-*.whl")
    return path


@pytest.mark.slow
def test_wheel_holds_every_module_and_the_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "pagedlib").rglob("*.py")}
    assert source <= names, f"missing from the wheel: {sorted(source - names)}"
    for data in ("sharegpt_lengths.csv", "alpaca_lengths.csv", "README.md"):
        assert f"pagedlib/data/{data}" in names


@pytest.mark.slow
def test_installed_package_runs_outside_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    code = ("import pagedlib, pagedlib.sim as sim\n"
            "assert pagedlib.__file__.startswith(%r), pagedlib.__file__\n"
            "w = sim.Workload.sharegpt(50, seed=0)\n"
            "print(len(w.prompt_lens), pagedlib.paged_plan([512, 37, 1900, 128, 4], 16).allocated)"
            % str(target))
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["50", "2608"]


def test_dependencies_are_loose_so_colab_keeps_its_own():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        spec = dep.split(";")[0]  # the part before an environment marker
        assert "==" not in spec and "<" not in spec, f"pinned dependency: {dep}"
    names = {d.split(">")[0].split("=")[0].split(";")[0].strip() for d in deps}
    assert {"torch", "triton", "numpy", "matplotlib", "ipywidgets", "tqdm"} <= names


def test_requirements_pin_the_exact_environment():
    lines = [l.strip() for l in (ROOT / "requirements.txt").read_text().splitlines()
             if l.strip() and not l.startswith("#")]
    assert all("==" in l for l in lines), [l for l in lines if "==" not in l]
    pins = dict(l.split("==") for l in lines)
    assert pins["jupyter-book"].startswith("1.")      # the book's config is Jupyter Book 1's
    for name in ("torch", "triton", "jupyterlab", "ipywidgets", "matplotlib", "nbval", "pytest", "hypothesis",
                 "transformers"):
        assert name in pins, name
