"""Latency against request rate: the PagedAttention paper's Figure 12, simulated (chapter 11).

Figure 12 plots the *normalised latency* of each policy (the mean over requests of end-to-end latency
divided by output length, in seconds per token) against the request rate. At low rates every policy
answers at the speed of one step per token; past a policy's capacity its queue grows without bound
and latency explodes: the *knee*. The paper compares policies by the highest rate they sustain at
similar latency: vLLM 1.7-2.7x Orca (Oracle) and 2.7-8x Orca (Max) on ShareGPT (section 6.2).

:func:`latency_curve` runs the simulator at each rate; :func:`sustainable_rate` finds the highest rate
whose normalised latency stays under a threshold (by default 4x the policy's latency at the lowest
rate measured: an assumption of ours; the paper reads the knee off its plots).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .workload import Workload

__all__ = ["latency_curve", "sustainable_rate", "knee_band", "KneeBand", "PAPER_RATE_RATIOS"]

# Section 6.2, ShareGPT, basic sampling: vLLM's sustainable request rate over each Orca baseline's.
PAPER_RATE_RATIOS = {"oracle": (1.7, 2.7), "max": (2.7, 8.0)}


def latency_curve(workload: Workload, policy: str, rates: Sequence[float], *, seed: int = 0,
                  **simulate_kwargs) -> np.ndarray:
    """Normalised latency (s/token) of ``policy`` serving ``workload`` at each Poisson rate (req/s)."""
    from . import simulate
    if len(rates) == 0 or any(r <= 0 for r in rates):
        raise ValueError(f"rates must be a non-empty list of positive request rates (req/s); got {rates!r}")
    return np.array([simulate(workload, policy, request_rate=float(rate), seed=seed,
                              **simulate_kwargs).normalized_latency for rate in rates])


def sustainable_rate(rates: Sequence[float], latency: Sequence[float], threshold: float | None = None) -> float:
    """The highest rate of an increasing ``rates`` grid whose latency, and every lower rate's, stays
    under ``threshold`` (s/token; default: 4x the latency at the lowest rate). Linear between grid points."""
    rates, latency = np.asarray(rates, dtype=float), np.asarray(latency, dtype=float)
    if rates.shape != latency.shape or rates.size < 2 or np.any(np.diff(rates) <= 0):
        raise ValueError("rates must be increasing, at least two, one latency per rate")
    limit = 4 * latency[0] if threshold is None else threshold
    over = np.nonzero(latency > limit)[0]
    if over.size == 0:
        return float(rates[-1])                  # never crosses: at least the highest rate tried
    i = over[0]
    if i == 0:
        raise ValueError(f"latency {latency[0]:.3g} s/token at the lowest rate is already over the "
                         f"threshold {limit:.3g}: start the grid at a lower rate")
    # where the line from (rates[i-1], latency[i-1]) to (rates[i], latency[i]) crosses the limit
    frac = (limit - latency[i - 1]) / (latency[i] - latency[i - 1])
    return float(rates[i - 1] + frac * (rates[i] - rates[i - 1]))


@dataclass(frozen=True)
class KneeBand:
    """Knees of several policies measured over a grid of settings (:func:`knee_band`).

    ``settings`` lists ``(seed, num_requests, threshold_factor)`` in order; ``knees[policy]`` holds
    one sustainable rate (req/s) per setting, in the same order. Claim only what holds in every
    setting: :meth:`range`, :meth:`ratio_range`, :meth:`order_holds`.
    """
    settings: list[tuple[int, int, float]]
    knees: dict[str, list[float]] = field(repr=False)

    def range(self, policy: str) -> tuple[float, float]:
        """Lowest and highest knee of ``policy`` over every setting."""
        return min(self.knees[policy]), max(self.knees[policy])

    def ratios(self, policy: str, base: str) -> list[float]:
        """``policy``'s knee over ``base``'s, setting by setting."""
        return [a / b for a, b in zip(self.knees[policy], self.knees[base])]

    def ratio_range(self, policy: str, base: str) -> tuple[float, float]:
        r = self.ratios(policy, base)
        return min(r), max(r)

    def order_holds(self, order: Sequence[str]) -> bool:
        """Whether the knees come strictly in ``order`` (lowest first) in every setting."""
        return all(all(self.knees[a][i] < self.knees[b][i] for a, b in zip(order, order[1:]))
                   for i in range(len(self.settings)))


def knee_band(policies: Sequence[str], rates: Sequence[float], *, seeds: Sequence[int] = (0, 1, 2),
              num_requests: Sequence[int] = (300, 600), thresholds: Sequence[float] = (3, 4, 6),
              dataset: str = "sharegpt", **simulate_kwargs) -> KneeBand:
    """Each policy's knee over seeds (lengths and arrivals), request counts and thresholds.

    A knee read off one seed, one request count and one threshold is one sample of a noisy quantity.
    For every ``seed`` and ``num_requests`` this draws a workload of ``dataset``, runs
    :func:`latency_curve` once per policy, then reads the knee at every threshold (a multiple of the
    latency at the lowest rate), so thresholds cost nothing extra."""
    if not thresholds or any(t <= 1 for t in thresholds):
        raise ValueError(f"thresholds are multiples of the lowest-rate latency, each > 1; got {thresholds!r}")
    settings, knees = [], {p: [] for p in policies}
    for seed in seeds:
        for n in num_requests:
            workload = Workload.from_dataset(dataset, n, seed=seed)
            curves = {p: latency_curve(workload, p, rates, seed=seed, **simulate_kwargs) for p in policies}
            for factor in thresholds:
                settings.append((seed, n, float(factor)))
                for p, curve in curves.items():
                    knees[p].append(sustainable_rate(rates, curve, threshold=factor * curve[0]))
    return KneeBand(settings, knees)
