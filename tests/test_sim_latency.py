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


def test_knee_band_covers_every_setting_and_reads_thresholds_from_one_curve():
    from pagedlib.sim.latency import knee_band
    rates = [0.5, 1, 2, 4, 8]
    band = knee_band(["max", "paged"], rates, seeds=(0, 1), num_requests=(40, 60), thresholds=(2, 4),
                     kv_slots=4096)
    assert band.settings == [(s, n, t) for s in (0, 1) for n in (40, 60) for t in (2.0, 4.0)]
    assert all(len(k) == 8 for k in band.knees.values())
    for p in ("max", "paged"):
        k = band.knees[p]
        # a looser threshold never lowers the knee read off the same curve
        assert all(k[i] <= k[i + 1] for i in range(0, 8, 2))
        lo, hi = band.range(p)
        assert lo == min(k) and hi == max(k) and rates[0] <= lo <= hi <= rates[-1]
    assert band.ratios("paged", "max") == [a / b for a, b in zip(band.knees["paged"], band.knees["max"])]
    assert band.order_holds(["max", "paged"]) == all(
        a < b for a, b in zip(band.knees["max"], band.knees["paged"]))
    with pytest.raises(ValueError, match="thresholds"):
        knee_band(["paged"], rates, thresholds=(1,))
