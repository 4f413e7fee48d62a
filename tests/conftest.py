"""Shared test settings."""
import pytest
import torch


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
