"""Shared test settings."""
import sys

import pytest
import torch


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Without Chromium the browser tests are skipped (tests/browser.py): reported from one place,
    so the summary says why, and how to install it, in one line instead of one per test."""
    report = (yield).get_result()
    browser = sys.modules.get("browser")     # imported by the browser tests (drift_check copies none)
    why = browser.missing() if browser is not None and report.skipped else None
    if why and report.skipped and isinstance(report.longrepr, tuple) and why in str(report.longrepr[2]):
        report.longrepr = (browser.__file__, None, report.longrepr[2])


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tests use tiny tensors: one torch thread is fastest, and two pytest workers on two cores do not
    oversubscribe them (small ops ran ~30x slower with the default thread count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def close_figures():
    """After a plot test: every figure it drew is readable at 360 px (tests/figures.py), then closed.
    A plot test module asks for it with ``pytestmark = pytest.mark.usefixtures("close_figures")``."""
    yield
    from figures import check_open_figures
    check_open_figures()


# ---- the built site (tests/test_site.py and tests/test_site_static.py) -------------------------------
@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The built site's html folder: PAGEDLIB_SITE if set, else one fresh strict build of the book
    shared by every test of the session that asks for it."""
    import os
    import subprocess
    from pathlib import Path
    if os.environ.get("PAGEDLIB_SITE"):
        html = Path(os.environ["PAGEDLIB_SITE"]).resolve()
        assert (html / "index.html").exists(), f"PAGEDLIB_SITE={html} holds no built site"
        return html
    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("site")
    jb = Path(sys.executable).with_name("jupyter-book")
    run = subprocess.run([str(jb), "build", str(root), "--path-output", str(out), "-W", "-n",
                          "--keep-going"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"jupyter-book build failed:\n{run.stdout[-4000:]}\n{run.stderr[-3000:]}"
    return out / "_build" / "html"
