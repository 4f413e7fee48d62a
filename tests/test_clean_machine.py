"""The first command passes on every machine: `make test-clean` and CI (.ci/run) run the README's
`make test` with every per-user cache in empty folders (scripts/with_empty_caches.sh), no make target
or test installs anything system-wide, and CI is the one script .github/workflows/ci.yml runs."""
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "with_empty_caches.sh"
# Every per-user cache or settings folder the course, its tests and its tools read.
CACHES = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "HF_HOME", "TORCH_HOME",
          "TORCHINDUCTOR_CACHE_DIR", "TRITON_HOME", "TRITON_CACHE_DIR", "MPLCONFIGDIR", "IPYTHONDIR",
          "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")


def run_with_empty_caches(env: dict) -> dict:
    """The environment the script gives its command, and each folder's contents then."""
    report = "import os, json; print(json.dumps({k: [os.environ.get(k), sorted(os.listdir(os.environ[k]))] " \
             f"if os.environ.get(k) else [None, []] for k in {list(CACHES)!r}}}))"
    run = subprocess.run(["bash", str(SCRIPT), "python3", "-c", report], capture_output=True, text=True,
                         env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    import json
    return json.loads(run.stdout.splitlines()[-1])


def test_every_cache_is_a_fresh_empty_folder_removed_afterwards(tmp_path):
    home = tmp_path / "home"
    (home / ".cache" / "pagedlib").mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
           "TRITON_CACHE_DIR": str(home / ".triton"), "MPLCONFIGDIR": str(home / "mpl"), "TMPDIR": str(tmp_path)}
    env.pop("CI_TRITON_CACHE_DIR", None)
    seen = run_with_empty_caches(env)
    folders = {k: Path(v[0]) for k, v in seen.items()}
    assert all(v[0] for v in seen.values()), [k for k, v in seen.items() if not v[0]]
    assert all(v[1] == [] for v in seen.values()), seen
    assert len(set(folders.values())) == len(CACHES)
    assert not any(home in f.parents for f in folders.values()), "a cache was left in HOME"
    assert not any(f.exists() for f in folders.values()), "the empty caches were not removed"


def test_ci_keeps_its_keyed_triton_cache(tmp_path):
    kept = tmp_path / "triton-cache"
    kept.mkdir()
    seen = run_with_empty_caches({**os.environ, "CI_TRITON_CACHE_DIR": str(kept), "TMPDIR": str(tmp_path)})
    assert seen["TRITON_CACHE_DIR"][0] == str(kept) and kept.is_dir()


def test_make_test_clean_and_ci_run_the_readme_test_command_with_empty_caches():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-clean:.*\n\tbash scripts/with_empty_caches.sh \$\(MAKE\) test$", makefile, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/with_empty_caches.sh make test\n" in ci and "make lint\n" in ci
    assert "make test   #" in (ROOT / "README.md").read_text()       # the README's test command
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert re.search(r"^\s+run: \.ci/run$", workflow, re.M) and "make test" not in workflow.replace(
        "`make test`", "")


def test_no_make_target_script_or_test_installs_system_packages():
    """Only .ci/run installs Chromium, as CI set-up (as root: nothing calls sudo)."""
    files = [ROOT / "Makefile", *(ROOT / "scripts").iterdir(), *(ROOT / "tests").glob("*.py"), ROOT / ".ci" / "run"]
    for path in files:
        if path.is_file() and path != Path(__file__):
            assert not re.search(r"\bsudo\b", path.read_text()), path
    recipes = [line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("\t")]
    for path in (ROOT / "scripts").glob("*.sh"):
        recipes += [line for line in path.read_text().splitlines()
                    if not line.lstrip().startswith(("#", "echo"))]
    assert not [line for line in recipes if "apt-get" in line]


def test_unit_runs_ruff():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^unit: lint$", makefile, re.M) and "\t$(VENV)/bin/ruff check .\n" in makefile
    assert re.search(r'^ruff==[\d.]+$', (ROOT / "requirements.txt").read_text(), re.M)
