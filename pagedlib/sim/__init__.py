"""Capacity at scale: a simulator of the PagedAttention paper's memory results (chapter 12).

::

    w = Workload.sharegpt(2000, seed=0)          # lengths drawn from the paper's Figure 11
    r = simulate(w, "oracle")                    # or "max", "pow2", "paged"
    r.token_frac, r.reservation_frac, r.internal_frac, r.external_frac, r.avg_batch

Modules: ``workload`` (lengths and arrivals), ``buddy`` (the Orca baselines' allocator),
``reservation`` (the Orca policies), ``loop`` (the Orca baselines' step loop), ``counting_engine``
(vLLM's policy: the engine's own scheduler and block manager, no model), ``timing`` (seconds per
step), ``result`` (the meter and :class:`SimResult`), ``paper`` (the numbers to compare with);
``prefix_trace`` (chapter 7: prefix-sharing traces replayed through the hash chain and the radix
tree) and ``clocked`` runs the whole engine (``pagedlib.LLM``, with a model) on the simulated clock (chapter
11). No tensors: only slots and blocks are counted.

The model, in short: 15,728 slots (12 GiB / 800 KiB per OPT-13B token), ``max_len`` 2048, strict
FCFS admission, one token per running request per step (a new request's prompt is processed in its
first step). Orca reserves a contiguous chunk per request from a buddy allocator (the buddy's rounding
counts as external fragmentation, as the paper's "external fragmentation and others"). vLLM is
``pagedlib.engine.scheduler.Scheduler`` over ``pagedlib.memory.block_manager.BlockManager``: 16-slot
blocks taken as the computed tokens need them, the newest request preempted (and later recomputed)
when none is free, in vLLM's order (the running decode, then new prompts join the same step: vLLM's
scheduler until August 2023, the one of the paper's time, and vLLM v1's);
``scheduling="prefill_first"`` gives the prefill-only steps of vLLM v0 from August 2023 on. Shares
are averaged over steps up to the admission of the last request. Poisson arrivals need seconds per
step: see :mod:`pagedlib.sim.timing` (a linear cost model of OPT-13B on an A100 at 50% efficiency,
an assumption).

How close the simulation comes to the paper, where it misses and why, is chapter 12's to measure
(its section "Where the simulation and the paper disagree, and why"): the numbers are computed there,
not written here. What leaving out v0.1's watermark and step caps changes is in the course's
references (chapters 11 and 12).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_submodules
from ..output import TableView
from ..validation import positive_int
from .buddy import BuddyAllocator, next_pow2
from .paper import FIGURE2, FIGURE2_APPROXIMATE, FIGURE13, KV_SLOTS, MAX_LEN, POLICY_LABELS
from .reservation import RESERVATION_POLICIES, reservation_size
from .timing import OPT13B_A100, StepTime

if TYPE_CHECKING:
    from .result import SimResult
    from .workload import Workload

POLICIES = (*RESERVATION_POLICIES, "paged")

__all__ = ["Workload", "simulate", "SimResult", "BuddyAllocator", "StepTime", "OPT13B_A100",
           "POLICIES", "FIGURE2", "FIGURE2_APPROXIMATE", "FIGURE13", "KV_SLOTS", "MAX_LEN", "POLICY_LABELS",
           "reservation_size", "next_pow2", "compare_with_paper"]

# The modules that use numpy load on first use, so that the Orca policies (chapter 3's checkers)
# import where numpy does not (the site's in-browser Python).
__getattr__, __dir__ = lazy_submodules(
    __name__, ("buddy", "clocked", "counting_engine", "cuda_graphs", "disaggregated", "latency", "loop", "paper", "prefix_trace",
               "request", "reservation", "result", "router", "tiers", "timing", "workload"),
    exports={"Workload": "workload", "SimResult": "result", "CountingEngine": "counting_engine",
             "StepLoop": "loop", "SimRequest": "request", "ReservationPool": "reservation"})


def simulate(workload: Workload, policy: str, kv_slots: int = KV_SLOTS, block_size: int = 16,
             max_len: int = MAX_LEN, request_rate: float | None = None, *, seed: int = 0,
             step_time: StepTime = OPT13B_A100, scheduling: str = "vllm",
             max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None) -> SimResult:
    """Serve ``workload`` under ``policy`` with a pool of ``kv_slots`` K/V slots; return the shares.

    ``policy`` is ``"max"``, ``"pow2"``, ``"oracle"`` (the paper's Orca baselines, contiguous
    reservations from a buddy allocator, :mod:`pagedlib.sim.loop`) or ``"paged"`` (vLLM: the engine's
    own :class:`~pagedlib.engine.scheduler.Scheduler` and
    :class:`~pagedlib.memory.block_manager.BlockManager` with ``block_size``-slot blocks, no model,
    :mod:`pagedlib.sim.counting_engine`). With ``request_rate=None`` every request is queued at time 0
    (a saturated queue); with a number, they arrive as a Poisson process of that many requests per
    second (drawn with ``seed``), and ``step_time`` says how many seconds a step takes.

    Under ``"paged"``, ``scheduling`` is the scheduler's order: ``"vllm"`` (the default: the running
    decode, then new prompts join the same step, as in the vLLM the paper measured and in vLLM v1),
    ``"prefill_first"`` (vLLM v0 from August 2023 on: a step of new prompts alone, the running
    requests waiting) or ``"decode_first"``. ``max_num_seqs`` and ``max_num_batched_tokens`` are the
    engine's caps; by default neither binds, as memory, not a cap, limited the paper's runs. The
    paper's vLLM also kept a 1% watermark of free blocks at admission; the course's references say
    what leaving it and its caps out changes (little).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}; got {policy!r}")
    for name, value in (("kv_slots", kv_slots), ("block_size", block_size), ("max_len", max_len)):
        positive_int(name, value, "slots")
    from .counting_engine import CountingEngine
    from .loop import StepLoop
    from .request import SimRequest
    from .reservation import ReservationPool

    arrivals = workload.arrival_times(request_rate, seed)
    if policy == "paged":
        return CountingEngine(workload.prompt_lens, workload.output_lens, arrivals, kv_slots=kv_slots,
                              block_size=block_size, max_len=max_len, step_time=step_time,
                              scheduling=scheduling, max_num_seqs=max_num_seqs,
                              max_num_batched_tokens=max_num_batched_tokens).run().result()
    engine_only = {"scheduling": scheduling != "vllm", "max_num_seqs": max_num_seqs is not None,
                   "max_num_batched_tokens": max_num_batched_tokens is not None}
    if any(engine_only.values()):
        raise ValueError(f"{[k for k, v in engine_only.items() if v]} set the engine's scheduler, which "
                         f"only policy 'paged' runs; the Orca policies ({policy!r}) have their own loop")
    pool = ReservationPool(policy, kv_slots, max_len)
    requests = [SimRequest(i, int(p), int(o))
                for i, (p, o) in enumerate(zip(workload.prompt_lens, workload.output_lens))]
    return StepLoop(requests, arrivals, pool, step_time).run().result(policy, block_size)


def compare_with_paper(results: dict[str, SimResult]) -> str:
    """A text table of simulated Figure 2 shares (percent) beside the paper's, one row per policy."""
    shares = ("token", "reservation", "internal", "external")
    rows = [[POLICY_LABELS[policy], *(f"{100 * r.shares()[k]:.1f} (paper {FIGURE2[policy][k]:.1f})"
                                      for k in shares), r.avg_batch] for policy, r in results.items()]
    return TableView(rows, ["policy", *shares, "batch"]).text()
