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
