"""pagedlib.sim.latency: Figure 12's normalised latency against request rate, and the knee."""
import numpy as np
import pytest

from pagedlib.sim import OPT13B_A100, Workload, simulate
from pagedlib.sim.latency import PAPER_RATE_RATIOS, latency_curve, sustainable_rate


def test_normalized_latency_is_latency_over_output_length():
    w = Workload([10, 20], [4, 8])
    r = simulate(w, "paged", kv_slots=512, request_rate=0.001, seed=0)
    assert np.all(r.latency_s > 0)
    assert r.normalized_latency == pytest.approx(np.mean(r.latency_s / np.array([4, 8])))


def test_an_idle_system_answers_at_one_step_per_token():
    w = Workload([100], [50])
    r = simulate(w, "paged", request_rate=0.001, seed=0)
    fastest, slowest = OPT13B_A100(100), OPT13B_A100(150, prefill_tokens=100)   # s per step, alone
    assert fastest <= r.normalized_latency <= slowest


def test_sustainable_rate_interpolates_the_crossing():
    rates, lat = [1, 2, 3, 4], [0.1, 0.2, 0.3, 1.3]
    assert sustainable_rate(rates, lat) == pytest.approx(3.1)    # threshold 0.4 = 4 x 0.1
    assert sustainable_rate(rates, lat, threshold=10) == 4     # never crosses: the highest rate
    with pytest.raises(ValueError, match="lowest rate"):
        sustainable_rate(rates, lat, threshold=0.05)
    with pytest.raises(ValueError, match="increasing"):
        sustainable_rate([2, 1], [0.1, 0.2])


def test_latency_explodes_past_the_knee_and_paging_sustains_more():
    w = Workload.sharegpt(300, seed=0)
    rates = [0.2, 0.6, 1.0, 1.4, 1.8, 2.2, 2.6, 3.0]
    knee = {p: sustainable_rate(rates, latency_curve(w, p, rates)) for p in ("max", "oracle", "paged")}
    assert knee["max"] < knee["oracle"] < knee["paged"]
    lo, hi = PAPER_RATE_RATIOS["oracle"]
    assert lo * 0.8 <= knee["paged"] / knee["oracle"] <= hi * 1.2
    with pytest.raises(ValueError, match="positive request rates"):
        latency_curve(w, "paged", [0])
