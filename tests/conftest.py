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
