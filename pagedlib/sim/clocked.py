"""The real engine on a simulated clock (chapter 11): ``pagedlib.LLM``'s scheduler and block manager
decide every step, and a step-time model (:mod:`pagedlib.sim.timing`) says how long each step would
take on a real GPU, so that latencies are those of the modelled GPU, not of the CPU running the toy
model.

:func:`serve` adds each request when the clock passes its arrival time, runs ``llm.step()`` until all
have finished, and advances the clock by ``step_time(kv_tokens, prefill_tokens)`` per step (the K/V
the step reads and the prompt tokens it computes). It records when each request produced each token,
so TTFT, ITL and their percentiles come out in modelled seconds. The outputs are the engine's own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .timing import OPT13B_A100, StepTime

__all__ = ["ClockedRun", "serve"]


@dataclass
class ClockedRun:
    """What :func:`serve` measured, in modelled seconds: per request its output, arrival, and the time
    of each of its tokens; per step its duration."""

    outputs: list[list[int]]
    arrival_s: list[float]
    token_times_s: list[list[float]]
    step_s: list[float] = field(default_factory=list)

    @property
    def ttft_s(self) -> np.ndarray:
        return np.array([t[0] - a for t, a in zip(self.token_times_s, self.arrival_s)])

    @property
    def itl_s(self) -> np.ndarray:
        """Every gap between two consecutive tokens of a request, all requests together."""
        return np.concatenate([np.diff(t) for t in self.token_times_s] + [np.zeros(0)])

    @property
    def elapsed_s(self) -> float:
        return float(sum(self.step_s))

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per modelled second of steps (throughput)."""
        tokens = sum(sum(map(len, o)) if o and isinstance(o[0], list) else len(o) for o in self.outputs)
        return tokens / self.elapsed_s if self.elapsed_s else 0.0

    def percentiles(self, qs: Sequence[float] = (50, 90, 99)) -> dict[str, float]:
        """``{"ttft_p50_s": ..., "itl_p99_s": ...}``."""
        out = {}
        for name, values in (("ttft", self.ttft_s), ("itl", self.itl_s)):
            for q in qs:
                out[f"{name}_p{q:g}_s"] = float(np.percentile(values, q)) if len(values) else 0.0
        return out


def serve(llm, requests: Sequence[tuple[float, list[int], object]], step_time: StepTime = OPT13B_A100,
          max_steps: int = 1_000_000) -> ClockedRun:
    """Serve ``requests`` (``(arrival_s, prompt, SamplingParams)``) on ``llm`` under the modelled
    clock; see the module docstring. A request with ``n > 1`` samples has one token time per step in
    which any of its samples produced a token (as the engine's metrics count it), and its output is
    the list of its samples' outputs."""
    order = sorted(range(len(requests)), key=lambda i: requests[i][0])
    ids: dict[int, int] = {}                      # request id -> index in requests
    seen: dict[int, int] = {}                     # tokens seen so far, per sequence (sample)
    times: list[list[float]] = [[] for _ in requests]
    outputs: list[list[int] | None] = [None] * len(requests)
    run = ClockedRun(outputs=[], arrival_s=[float(r[0]) for r in requests], token_times_s=times)
    clock, nxt, bm = 0.0, 0, llm.block_manager
    for _ in range(max_steps):
        while nxt < len(order) and requests[order[nxt]][0] <= clock:
            i = order[nxt]
            ids[llm.add_request(requests[i][1], requests[i][2])] = i
            nxt += 1
        if not llm.scheduler.has_unfinished():
            if nxt == len(order):
                break
            clock = max(clock, requests[order[nxt]][0])   # idle until the next arrival
            continue
        finished = llm.step()
        record = llm.metrics.history[-1]
        kv_tokens = sum(bm.num_tokens(s.seq_id) for s in llm.scheduler.running)
        seconds = step_time(kv_tokens, record.prefill_tokens)
        clock += seconds
        run.step_s.append(seconds)
        produced = set(finished)                  # a request finishes in a step that produced its last token
        for seq in llm.scheduler.running:
            if len(seq.output) > seen.get(seq.seq_id, 0):
                produced.add(seq.request_id)
                seen[seq.seq_id] = len(seq.output)
        for rid in produced:
            times[ids[rid]].append(clock)
        for rid in finished:
            outputs[ids[rid]] = llm.pop_result(rid)
    else:
        raise RuntimeError(f"serve: not finished after {max_steps} steps")
    run.outputs = outputs
    return run
