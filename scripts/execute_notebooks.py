"""Re-execute notebooks in place and store their outputs (what `make notebooks` runs).

Usage: python scripts/execute_notebooks.py notebooks/*.ipynb
Each notebook runs top to bottom in a fresh kernel with its own folder as the working directory;
widget state is stored so that widgets render on the static website.
"""
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=900, kernel_name="python3", store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(paths: list[str]) -> None:
    os.environ.setdefault("PYTHONHASHSEED", "0")
    for p in paths:
        seconds = execute(Path(p))
        print(f"{p}: executed in {seconds:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
