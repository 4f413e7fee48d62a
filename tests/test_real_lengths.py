"""The one loader of the shipped length histograms, and snapshots of a busy server (chapters 2, 4, 12)."""
import numpy as np
import pytest

from pagedlib.memory.real_lengths import draw_requests, histogram, running_lengths
from pagedlib.sim import Workload


def test_draw_requests_is_the_workloads_draw():
    prompt, output = draw_requests("sharegpt", 500, seed=3)
    w = Workload.sharegpt(500, seed=3)
    assert (prompt == w.prompt_lens).all() and (output == w.output_lens).all()
    assert (prompt + output <= 2048).all() and prompt.min() >= 1 and output.min() >= 1


def test_draw_requests_follows_the_papers_means():
    prompt, output = draw_requests("sharegpt", 20_000, seed=0)
    assert abs(prompt.mean() / 161.31 - 1) < 0.02 and abs(output.mean() / 337.99 - 1) < 0.03
    lo, hi, prob = histogram("alpaca", "output")
    assert len(lo) == len(hi) == len(prob) == 128 and abs(prob.sum() - 1) < 1e-12


def test_running_lengths_catch_each_request_inside_its_reply():
    prompt, output = np.array([10, 100]), np.array([5, 1])
    now, final = running_lengths(prompt, output, num_snapshots=200, batch=3, seed=1)
    assert now.shape == final.shape == (200, 3)
    assert set(np.unique(final)) == {15, 101}
    assert (now > final - np.where(final == 15, 5, 1) - 1).all() and (now <= final).all()
    short = now[final == 15]
    assert set(np.unique(short)) == {11, 12, 13, 14, 15}       # 1 to all 5 of its reply's tokens


def test_running_lengths_errors_name_the_argument():
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        running_lengths([1], [1], 3, 0)
    with pytest.raises(ValueError, match="one length"):
        running_lengths([1, 2], [1], 3, 2)
    with pytest.raises(ValueError, match="dataset must be one of"):
        draw_requests("lmsys", 3)
