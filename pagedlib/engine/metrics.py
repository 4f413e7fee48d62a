"""What the engine measured: small typed records, readable like the dicts they replace (chapters 10, 11).

``llm.metrics`` is an :class:`EngineMetrics`; its ``history`` holds one :class:`StepRecord` per step
and its ``requests`` one :class:`RequestMetrics` per finished request. Each is a dataclass (typed
fields, ``llm.metrics.preemptions``) that can also be read by key (``llm.metrics["preemptions"]``,
``llm.metrics["history"][i]["prefill_tokens"]``) as the chapters and the figures do.

One owner: a :class:`MetricsRecorder` fills them. It keeps each request's arrival and token times
(time to first token, TTFT; the gap before each later token, the inter-token latency, ITL), and reads
the scheduler's and block manager's running counters as differences from where they stood at the
last reset, so resetting the metrics changes nothing in the engine. Latency is reported as engines
and benchmarks report it (vLLM's ``benchmark_serving``): percentiles p50 / p90 / p99 of TTFT and ITL,
and *goodput* under a service-level objective, the finished requests per second that met both a TTFT
and a TPOT (time per output token) bound (DistServe's definition).
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

__all__ = ["EngineMetrics", "RequestMetrics", "StepRecord", "ReservedStepRecord", "MetricsRecorder",
           "percentile", "request_record"]


def percentile(values, q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` (linear interpolation, as numpy); 0.0 if empty."""
    return float(np.percentile(values, q)) if len(values) else 0.0


class _ByKey:
    """Read a dataclass's fields by key too: ``record["name"]``, ``"name" in record``, ``keys()``."""

    _OLD_KEYS: ClassVar[dict[str, str]] = {}      # an old key -> the field it names now

    def __getitem__(self, key: str):
        if key in self._OLD_KEYS:
            warnings.warn(f"metrics[{key!r}] is now metrics[{self._OLD_KEYS[key]!r}]", DeprecationWarning,
                          stacklevel=2)
            key = self._OLD_KEYS[key]
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
    token; ``itl_s``: the gap before each later token (inter-token latency); ``tpot_s``: their mean
    (0.0 for a one-token output); for ``n > 1`` a step in which any sample produced a token counts.
    ``num_cached_tokens``: prompt tokens its first admission found in the prefix cache;
    ``num_preemptions``: times any of its samples was preempted."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    tpot_s: float
    num_cached_tokens: int
    num_preemptions: int
    itl_s: list[float] = field(default_factory=list)


@dataclass
class EngineMetrics(_ByKey):
    """Counters over the steps since the last ``reset_metrics`` (``generate`` resets them).
    ``num_usable_blocks``: the blocks requests can hold (``metrics["num_blocks"]``, its old key, still reads it)."""

    _OLD_KEYS = {"num_blocks": "num_usable_blocks"}

    num_usable_blocks: int
    block_size: int
    max_num_batched_tokens: int | None = None
    steps: int = 0
    preemptions: int = 0              # sequences sent back to wait because blocks ran out
    tokens_generated: int = 0         # tokens sampled
    prompt_tokens_computed: int = 0   # prompt tokens run through prefill (recomputed ones included)
    prefix_hit_tokens: int = 0        # prompt tokens found in the prefix cache instead
    resumed_hit_tokens: int = 0       # of those, found by preempted sequences when they resumed
    peak_blocks_used: int = 0
    peak_running: int = 0
    peak_blocks_saved_by_sharing: int = 0   # logical minus physical blocks (samples sharing a prompt)
    elapsed_s: float = 0.0            # time spent in steps
    tokens_per_s: float = 0.0
    history: list[StepRecord] = field(default_factory=list)
    requests: list[RequestMetrics] = field(default_factory=list)   # finished requests, as popped
    ttft_p50_s: float = 0.0           # percentiles over the finished requests (TTFT) ...
    ttft_p90_s: float = 0.0
    ttft_p99_s: float = 0.0
    itl_p50_s: float = 0.0            # ... and over all their inter-token gaps (ITL)
    itl_p90_s: float = 0.0
    itl_p99_s: float = 0.0

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

    def add_request(self, record: RequestMetrics) -> None:
        """Count one finished request and update the latency percentiles."""
        self.requests.append(record)
        ttft = [r.ttft_s for r in self.requests]
        itl = [gap for r in self.requests for gap in r.itl_s]
        self.ttft_p50_s, self.ttft_p90_s, self.ttft_p99_s = (percentile(ttft, q) for q in (50, 90, 99))
        self.itl_p50_s, self.itl_p90_s, self.itl_p99_s = (percentile(itl, q) for q in (50, 90, 99))

    @classmethod
    def from_token_times(cls, arrivals, token_times, elapsed_s: float, *, num_usable_blocks: int, block_size: int,
                         prompt_lens=None, preemptions=None) -> "EngineMetrics":
        """The metrics of a run known by its requests' arrival times and token times (seconds, any
        clock: a simulator's modelled one, say): each request that produced a token, its TTFT, ITL
        and TPOT as :class:`MetricsRecorder` records them; ``elapsed_s`` the run's length."""
        m = cls(num_usable_blocks=num_usable_blocks, block_size=block_size, elapsed_s=float(elapsed_s))
        for i, (arrival, times) in enumerate(zip(arrivals, token_times)):
            if times:
                m.add_request(request_record(i, float(arrival), list(times),
                                             prompt_lens[i] if prompt_lens is not None else 0,
                                             preemptions[i] if preemptions is not None else 0))
        m.tokens_generated = sum(len(t) for t in token_times)
        m.tokens_per_s = m.tokens_generated / m.elapsed_s if m.elapsed_s else 0.0
        return m

    def met_slo(self, ttft_slo_s: float, tpot_slo_s: float) -> int:
        """Finished requests that met both bounds: TTFT <= ``ttft_slo_s`` and TPOT <= ``tpot_slo_s``."""
        return sum(1 for r in self.requests if r.ttft_s <= ttft_slo_s and r.tpot_s <= tpot_slo_s)

    def goodput(self, ttft_slo_s: float, tpot_slo_s: float) -> float:
        """Finished requests per second of step time that met both bounds (:meth:`met_slo`;
        DistServe's goodput; vLLM's benchmark ``--goodput``)."""
        return self.met_slo(ttft_slo_s, tpot_slo_s) / self.elapsed_s if self.elapsed_s else 0.0

    def slo_attainment(self, ttft_slo_s: float, tpot_slo_s: float) -> float:
        """The share of finished requests that met both bounds (:meth:`met_slo`)."""
        return self.met_slo(ttft_slo_s, tpot_slo_s) / len(self.requests) if self.requests else 0.0


def request_record(request_id: int, arrival: float, times: list[float], prompt_tokens: int,
                   num_preemptions: int, num_cached_tokens: int = 0) -> RequestMetrics:
    """One request's latencies from its arrival and the times its tokens came out (the one rule)."""
    gaps = [b - a for a, b in zip(times, times[1:])]
    return RequestMetrics(
        request_id=request_id, prompt_tokens=prompt_tokens, output_tokens=len(times),
        ttft_s=times[0] - arrival, tpot_s=sum(gaps) / len(gaps) if gaps else 0.0,
        num_cached_tokens=num_cached_tokens, num_preemptions=num_preemptions, itl_s=gaps)


class _RequestLog:
    """When a request arrived and produced tokens, and its first prefix hit."""
    __slots__ = ("arrival", "token_times", "num_cached_tokens")

    def __init__(self, arrival: float):
        self.arrival = arrival
        self.token_times: list[float] = []
        self.num_cached_tokens: int | None = None


class MetricsRecorder:
    """The one owner of the engine's measurements: request logs, and :attr:`metrics` since the last
    :meth:`reset`. It reads the scheduler's and block manager's cumulative counters (preemptions,
    prefix hits) and reports their growth since the reset; it never writes into them."""

    def __init__(self, scheduler, block_manager, num_usable_blocks: int, block_size: int,
                 max_num_batched_tokens: int | None):
        self.scheduler, self.block_manager = scheduler, block_manager
        self._config = dict(num_usable_blocks=num_usable_blocks, block_size=block_size,
                            max_num_batched_tokens=max_num_batched_tokens)
        self._logs: dict[int, _RequestLog] = {}
        self.reset()

    def reset(self) -> None:
        self.metrics = EngineMetrics(**self._config)
        self._base = self._counters()

    def _counters(self) -> tuple[int, int, int]:
        s, bm = self.scheduler, self.block_manager
        return s.num_preemptions, bm.hit_tokens, s.num_resumed_hit_tokens

    def arrived(self, request_id: int) -> None:
        self._logs[request_id] = _RequestLog(time.perf_counter())

    def admitted(self, request_id: int, num_cached_tokens: int) -> None:
        log = self._logs[request_id]
        if log.num_cached_tokens is None:                # its first admission's prefix hit
            log.num_cached_tokens = num_cached_tokens

    def produced(self, request_ids, now: float) -> None:
        """Requests that produced a token (any of their samples) in the step that ended at ``now``."""
        for request_id in request_ids:
            self._logs[request_id].token_times.append(now)

    def step(self, record: StepRecord, tokens_sampled: int) -> None:
        m = self.metrics
        m.preemptions, m.prefix_hit_tokens, m.resumed_hit_tokens = (
            now - base for now, base in zip(self._counters(), self._base))
        m.add_step(record, tokens_sampled)

    def finished(self, request_id: int, prompt_tokens: int, output_tokens: int, num_preemptions: int) -> None:
        """A request was popped: its latencies join ``metrics.requests`` (if it produced a token)."""
        log = self._logs.pop(request_id)
        if not log.token_times:
            return
        record = request_record(request_id, log.arrival, log.token_times, prompt_tokens, num_preemptions,
                                log.num_cached_tokens or 0)
        record.output_tokens = output_tokens          # all samples' tokens (n > 1)
        self.metrics.add_request(record)
