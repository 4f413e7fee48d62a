"""Keep every notebook's Colab badge, setup cell and Colab metadata in step with _config.yml.

The course repository's URL lives in one place, `_config.yml` (`repository.url`, `repository.branch`).
This script rewrites, in every `notebooks/*.ipynb`:
- the Colab badge: the line of the first (markdown) cell that starts with `[![Open In Colab]`;
- the setup cell: the first code cell, identical in every notebook;
- the metadata that asks Colab for a GPU runtime.

    python scripts/sync_notebooks.py          # rewrite
    python scripts/sync_notebooks.py --check  # list drift, exit 1 if any (used by the tests)
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
BADGE_PREFIX = "[![Open In Colab]"


def repository() -> tuple[str, str]:
    """(url, branch) from _config.yml."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]
    return repo["url"].rstrip("/"), repo.get("branch", "main")


def badge(nb_path: Path) -> str:
    url, branch = repository()
    github_path = url.split("github.com/", 1)[1]
    rel = nb_path.resolve().relative_to(ROOT).as_posix()
    return (f"{BADGE_PREFIX}(https://colab.research.google.com/assets/colab-badge.svg)]"
            f"(https://colab.research.google.com/github/{github_path}/blob/{branch}/{rel})")


def setup_source() -> str:
    url, _ = repository()
    # It never installs torch, triton or numpy: `import pagedlib` checks their versions against
    # pagedlib.runtime.RULES and names the pip command that fixes a known-bad mix; the learner runs it.
    return f'''# Setup: install pagedlib if it is missing (on Colab), then check the versions.
import importlib.util, subprocess, sys
SOURCE = "git+{url}"
if importlib.util.find_spec("pagedlib") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", SOURCE], check=True)
import pagedlib       # refuses versions known to give wrong results, naming the fix
pagedlib.print_env()  # versions, device and the verdict on them (with any fix)'''


COLAB_METADATA = {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}}
SETUP_TAGS = ["nbval-ignore-output"]  # versions and device differ between machines


def sync(nb_path: Path, write: bool) -> list[str]:
    """Return the drift found in one notebook; fix it when `write`."""
    nb = nbformat.read(nb_path, as_version=4)
    drift = []
    first = nb.cells[0] if nb.cells else None
    if first is None or first.cell_type != "markdown" or not first.source.startswith("# "):
        drift.append("first cell must be a markdown cell starting with '# Title'")
    else:
        lines = first.source.split("\n")
        want = badge(nb_path)
        idx = next((i for i, line in enumerate(lines) if line.startswith(BADGE_PREFIX)), None)
        if idx is None:
            drift.append("no Colab badge in the first cell")
            lines[1:1] = ["", want]
        elif lines[idx] != want:
            drift.append("Colab badge points elsewhere")
            lines[idx] = want
        first.source = "\n".join(lines)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if not code:
        drift.append("no setup cell")
    else:
        setup = code[0]
        if setup.source != setup_source():
            drift.append("setup cell differs from the course's setup cell")
            setup.source = setup_source()
        if setup.metadata.get("tags") != SETUP_TAGS:
            drift.append("setup cell tags differ")
            setup.metadata["tags"] = list(SETUP_TAGS)
    for key, value in COLAB_METADATA.items():
        if nb.metadata.get(key) != value:
            drift.append(f"metadata {key!r} should be {value!r}")
            nb.metadata[key] = value
    if drift and write:
        nbformat.write(nb, nb_path)
    return drift


def main(argv: list[str]) -> int:
    check = "--check" in argv
    bad = 0
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        drift = sync(path, write=not check)
        if drift:
            bad += 1
            print(f"{path.relative_to(ROOT)}: " + "; ".join(drift))
    if check and bad:
        print("Run `python scripts/sync_notebooks.py` to fix.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
