"""Re-execute notebooks in place and store their outputs (what `make notebooks` runs).

Usage: python scripts/execute_notebooks.py notebooks/*.ipynb
Each notebook runs top to bottom in a fresh kernel with its own folder as the working directory.
No widget state is stored (``metadata.widgets``): the website never renders a widget view (it shows
the static fallback that pagedlib.widgets.with_fallback adds), and a widget needs a running kernel
in Jupyter or Colab anyway, so the state only made the pages heavier (115 KB in chapter 4).
"""
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def strip_widget_state(nb) -> bool:
    """Remove ``nb``'s stored widget state (metadata.widgets); True if there was one."""
    return nb.metadata.pop("widgets", None) is not None


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=900, kernel_name="python3", store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    strip_widget_state(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(paths: list[str]) -> None:
    os.environ.setdefault("PYTHONHASHSEED", "0")
    for p in paths:
        seconds = execute(Path(p))
        print(f"{p}: executed in {seconds:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
