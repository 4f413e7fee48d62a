"""Prefill and decode on different engines, on the modelled clock (chapter 13).

:func:`serve_disaggregated` serves requests the way a disaggregated deployment does: a *prefill
engine* computes each prompt, whole, one at a time in arrival order; the prompt's K/V then crosses a
link (``kv_bytes_per_token`` per prompt token at ``link_gbs`` x ``efficiency``); the *decode engine*
takes the request when its K/V has arrived and generates the rest. The decode engine is a real
``pagedlib.LLM`` run by :func:`pagedlib.sim.clocked.serve` (its outputs are its own tokens), but its
steps are priced without prefill: the prompt was computed elsewhere, so a decode step costs the
weights and the K/V it reads, whatever prompts join it. The result's arrivals are the requests' own,
so TTFT includes the prefill engine's queue, the prefill and the transfer.

Compare with :func:`pagedlib.sim.clocked.serve` on one engine, where a prompt that joins a step makes
every running request wait for it: the tail of inter-token latency (ITL p99) is what disaggregation
buys, at the price of the transfer and of a second engine.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from .clocked import ClockedRun, serve
from .timing import OPT13B_A100, StepTime

__all__ = ["serve_disaggregated", "prefill_done_s"]

GB = 10**9


def prefill_done_s(arrivals: Sequence[float], prompt_lens: Sequence[int], step_time: StepTime) -> list[float]:
    """When the prefill engine finishes each prompt: one prompt per step, whole, in arrival order,
    each step costing ``step_time(0, prompt_len)``."""
    done = [0.0] * len(arrivals)
    free = 0.0
    for i in sorted(range(len(arrivals)), key=lambda i: arrivals[i]):
        free = max(free, arrivals[i]) + step_time(0, prompt_lens[i])
        done[i] = free
    return done


def serve_disaggregated(decode_llm, requests: Sequence[tuple[float, list[int], object]], *,
                        kv_bytes_per_token: int, link_gbs: float, step_time: StepTime = OPT13B_A100,
                        efficiency: float = 0.5) -> ClockedRun:
    """Serve ``requests`` (``(arrival_s, prompt, SamplingParams)``) with a modelled prefill engine, a
    link and ``decode_llm`` on the modelled clock; see the module docstring. Returns the decode
    engine's :class:`~pagedlib.sim.clocked.ClockedRun` with the requests' own arrival times."""
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1]; got {efficiency}")
    arrivals = [float(r[0]) for r in requests]
    lens = [len(r[1]) for r in requests]
    done = prefill_done_s(arrivals, lens, step_time)
    moved = [d + n * kv_bytes_per_token / (link_gbs * GB * efficiency) for d, n in zip(done, lens)]
    decode_time = dataclasses.replace(step_time, per_prefill_token_s=0.0)
    run = serve(decode_llm, [(t, prompt, params) for t, (_, prompt, params) in zip(moved, requests)],
                decode_time)
    run.arrival_s = arrivals
    return run
