"""Capacity at scale: a simulator of the PagedAttention paper's memory results (chapter 10).

::

    w = Workload.sharegpt(2000, seed=0)          # lengths drawn from the paper's Figure 11
    r = simulate(w, "oracle")                    # or "max", "pow2", "paged"
    r.token_frac, r.reservation_frac, r.internal_frac, r.external_frac, r.avg_batch

Modules: ``workload`` (lengths and arrivals), ``buddy`` (the Orca baselines' allocator),
``reservation`` (the Orca policies), ``paged`` (vLLM's policy), ``timing`` (seconds per step),
``loop`` (the step loop), ``result`` (the meter and :class:`SimResult`), ``paper`` (the numbers
to compare with). The model is a counting one: no tensors, only slots.
"""
from __future__ import annotations

from .buddy import BuddyAllocator, next_pow2
from .loop import StepLoop
from .paged import PagedPool
from .paper import FIGURE2, FIGURE13, KV_SLOTS, MAX_LEN, POLICY_LABELS
from .request import SimRequest
from .reservation import RESERVATION_POLICIES, ReservationPool, reservation_size
from .result import SimResult
from .timing import OPT13B_A100, StepTime
from .workload import Workload

POLICIES = (*RESERVATION_POLICIES, "paged")

__all__ = ["Workload", "simulate", "SimResult", "BuddyAllocator", "StepTime", "OPT13B_A100",
           "POLICIES", "FIGURE2", "FIGURE13", "KV_SLOTS", "MAX_LEN", "POLICY_LABELS",
           "reservation_size", "next_pow2", "compare_with_paper"]


def simulate(workload: Workload, policy: str, kv_slots: int = KV_SLOTS, block_size: int = 16,
             max_len: int = MAX_LEN, request_rate: float | None = None, *, seed: int = 0,
             step_time: StepTime = OPT13B_A100, watermark: float = 0.01) -> SimResult:
    """Serve ``workload`` under ``policy`` with a pool of ``kv_slots`` K/V slots; return the shares.

    ``policy`` is ``"max"``, ``"pow2"``, ``"oracle"`` (the paper's Orca baselines, contiguous
    reservations from a buddy allocator) or ``"paged"`` (vLLM: ``block_size``-slot pages on demand,
    preemption by recompute, ``watermark`` share of pages kept free at admission). With
    ``request_rate=None`` every request is queued at time 0 (a saturated queue); with a number, they
    arrive as a Poisson process of that many requests per second (drawn with ``seed``), and
    ``step_time`` says how many seconds a step takes.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}; got {policy!r}")
    if policy == "paged":
        pool = PagedPool(kv_slots, block_size, watermark)
    else:
        pool = ReservationPool(policy, kv_slots, max_len)
    requests = [SimRequest(i, int(p), int(o))
                for i, (p, o) in enumerate(zip(workload.prompt_lens, workload.output_lens))]
    arrivals = workload.arrival_times(request_rate, seed)
    return StepLoop(requests, arrivals, pool, step_time).run().result(policy, block_size)


def compare_with_paper(results: dict[str, SimResult]) -> str:
    """A text table of simulated Figure 2 shares (percent) beside the paper's, one row per policy."""
    lines = [f"{'policy':<14}" + "".join(f"{k:>22}" for k in ("token", "reservation", "internal",
                                                              "external")) + f"{'batch':>8}"]
    for policy, r in results.items():
        paper, sim = FIGURE2[policy], r.shares()
        cells = "".join(f"{100 * sim[k]:>9.1f} (paper {paper[k]:>5.1f})" for k in paper)
        lines.append(f"{POLICY_LABELS[policy]:<14}{cells}{r.avg_batch:>8.2f}")
    return "\n".join(lines)
