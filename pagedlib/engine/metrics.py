"""What the engine measured: small typed records, readable like the dicts they replace (chapter 10).

``llm.metrics`` is an :class:`EngineMetrics`; its ``history`` holds one :class:`StepRecord` per step
and its ``requests`` one :class:`RequestMetrics` per finished request. Each is a dataclass (typed
fields, ``llm.metrics.preemptions``) that can also be read by key (``llm.metrics["preemptions"]``,
``llm.metrics["history"][i]["prefill_tokens"]``) as the chapters and the figures do.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["EngineMetrics", "RequestMetrics", "StepRecord", "ReservedStepRecord"]


class _ByKey:
    """Read a dataclass's fields by key too: ``record["name"]``, ``"name" in record``, ``keys()``."""

    def __getitem__(self, key: str):
        if key not in self:
            raise KeyError(f"{type(self).__name__} has no field {key!r}; its fields: {list(self.keys())}")
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]


@dataclass
class StepRecord(_ByKey):
    """One engine step, measured after its forward pass and before its finished sequences retire."""

    step: int
    running: int               # sequences running (forked samples counted one by one)
    waiting: int               # sequences waiting
    blocks_used: int           # physical blocks held
    logical_blocks: int        # blocks the running sequences' tables name (shared ones counted each time)
    preempted: int             # sequences preempted in this step
    prefill_tokens: int        # prompt tokens computed (prefill chunks)
    decode_tokens: int         # decode tokens computed (one per decoding sequence)
    seconds: float


@dataclass
class ReservedStepRecord(StepRecord):
    """A step of the reserve-max baseline: also the blocks its admissions reserved."""

    reserved_blocks: int = 0


@dataclass
class RequestMetrics(_ByKey):
    """One request's latency and cache use. ``ttft_s``: from its arrival (``add_request``) to its first
    token; ``tpot_s``: mean time per output token after the first (0.0 for a one-token output); for
    ``n > 1`` the longest sample counts. ``num_cached_tokens``: prompt tokens its first admission found
    in the prefix cache; ``num_preemptions``: times any of its samples was preempted."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    tpot_s: float
    num_cached_tokens: int
    num_preemptions: int


@dataclass
class EngineMetrics(_ByKey):
    """Counters over the steps since the last ``reset_metrics`` (``generate`` resets them)."""

    num_blocks: int
    block_size: int
    max_num_batched_tokens: int | None = None
    steps: int = 0
    preemptions: int = 0              # sequences sent back to wait because blocks ran out
    tokens_generated: int = 0         # tokens sampled
    prompt_tokens_computed: int = 0   # prompt tokens run through prefill (recomputed ones included)
    prefix_hit_tokens: int = 0        # prompt tokens found in the prefix cache instead
    peak_blocks_used: int = 0
    peak_running: int = 0
    peak_blocks_saved_by_sharing: int = 0   # logical minus physical blocks (samples sharing a prompt)
    elapsed_s: float = 0.0            # time spent in steps
    tokens_per_s: float = 0.0
    history: list[StepRecord] = field(default_factory=list)
    requests: list[RequestMetrics] = field(default_factory=list)   # finished requests, as popped

    def add_step(self, record: StepRecord, tokens_sampled: int) -> None:
        """Count one step."""
        self.steps += 1
        self.tokens_generated += tokens_sampled
        self.prompt_tokens_computed += record.prefill_tokens
        self.peak_blocks_used = max(self.peak_blocks_used, record.blocks_used)
        self.peak_running = max(self.peak_running, record.running)
        self.peak_blocks_saved_by_sharing = max(self.peak_blocks_saved_by_sharing,
                                                record.logical_blocks - record.blocks_used)
        self.elapsed_s += record.seconds
        self.tokens_per_s = self.tokens_generated / self.elapsed_s if self.elapsed_s else 0.0
        self.history.append(record)
