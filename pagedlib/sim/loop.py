"""The step loop: first-come-first-served, iteration-level scheduling over one K/V pool.

Each step (one engine iteration):

1. requests that have arrived join the back of the queue;
2. from the head of the queue, requests are admitted while the pool takes them (strict FCFS: when
   the head does not fit, nobody behind it is tried);
3. every running request, new ones included (their prompt is processed in the same step, as in
   Orca's iteration-level batching), generates one token. Under the paged policy a request that
   needs a page when none is free makes the loop preempt the newest running request: it goes back
   to the head of the queue and is recomputed later;
4. the meter records the pool and the batch size; finished requests give their memory back;
5. the clock advances by the step's duration (only the arrivals depend on it).

Which rule of the engine's scheduler (:mod:`pagedlib.engine.scheduler`) each part mirrors, and where it
differs on purpose (the simulator reproduces the paper's experiments, the engine follows vLLM v1):

- first come, first served, no overtaking (step 2): the same rule as ``Scheduler._admit_waiting``;
- on-demand pages and preemption of the newest running request by recompute, back to the head of
  the queue (step 3, :meth:`StepLoop.generate`): the same as ``Scheduler._schedule_decodes``;
- the order: by default the loop admits *before* growing the running requests (so a request admitted
  in a step can be preempted in that step) and the paged pool keeps a ``watermark`` of pages free at
  admission; the engine grows first, admits nobody in a step that preempted, has no watermark, and
  also caps seats (``max_num_seqs``) and tokens per step (``max_num_batched_tokens``), which the
  simulator leaves out. ``StepLoop(..., grow_first=True)`` with ``watermark=0`` runs the engine's order:
  ``tests/test_sim_mirrors_scheduler.py`` checks that it then admits and preempts as the scheduler does;
- a request's K/V: here ``stored`` counts the token generated in a step as stored in that step; the
  engine writes it in the next step, so a simulated prompt of ``p`` tokens holds what an engine
  prompt of ``p + 1`` holds.

``StepLoop(..., prefill_only=True)`` runs the scheduler of vLLM v0 as released instead of step 3's
mixed iteration: a step that admits anyone is a prefill-only iteration (only the new requests run,
each samples its first token, the running ones wait), and a step that admits nobody is a decode
iteration. The meter still counts every running request in the batch.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .request import SimRequest
from .result import Meter, SimResult
from .timing import StepTime


class StepLoop:
    """One simulation: the queue, the running batch, the pool and the meter, advanced step by step."""

    def __init__(self, requests: list[SimRequest], arrivals: np.ndarray, pool, step_time: StepTime,
                 grow_first: bool = False, prefill_only: bool = False):
        for r in requests:
            pool.check(r)
        self.requests, self.arrivals, self.pool = requests, arrivals, pool
        self.step_time = step_time
        if grow_first and prefill_only:
            raise ValueError("grow_first and prefill_only are two different schedulers; pick one")
        self.grow_first = grow_first                       # the engine's order (see the module docstring)
        self.prefill_only = prefill_only                   # vLLM v0's prefill-or-decode iterations
        order = np.argsort(arrivals, kind="stable")
        self.pending = deque(requests[i] for i in order)   # not arrived yet, by arrival time
        self.waiting: deque[SimRequest] = deque()          # arrived, not running; head first
        self.running: list[SimRequest] = []                # by admission, oldest first
        self.meter = Meter(pool.kv_slots)
        self.tokens = 0                                    # K/V tokens stored by running requests
        self.clock, self.steps, self.preemptions, self.measuring = 0.0, 0, 0, True

    def run(self) -> "StepLoop":
        while self.pending or self.waiting or self.running:
            self.step()
        return self

    def step(self) -> None:
        """One engine iteration (or a jump of the clock to the next arrival if nothing is to do)."""
        while self.pending and self.arrivals[self.pending[0].rid] <= self.clock:
            self.waiting.append(self.pending.popleft())
        if not self.running and not self.waiting:
            self.clock = self.arrivals[self.pending[0].rid]
            return
        # the averages stop once every request has arrived and been admitted (the drain is left out)
        self.measuring = self.measuring and bool(self.pending or self.waiting)
        kv_read = None                                     # K/V the step reads: all stored tokens
        if self.grow_first:                                # the engine: grow, then admit if none was preempted
            preempted = self.preemptions
            self.generate()
            prefill = self.admit(generate=True) if self.preemptions == preempted else 0
        else:
            before = len(self.running)
            prefill = self.admit()
        if not self.running:
            raise RuntimeError(f"request {self.waiting[0].rid} does not fit in an empty pool: the "
                               "pool's check() should have rejected it")
        if self.prefill_only and prefill:                  # a prefill-only iteration: the new requests
            self.generate(start=before)
            kv_read = sum(r.stored for r in self.running[before:])
        elif not self.grow_first:
            self.generate()
        if self.measuring:
            self.meter.record(self.tokens, self.pool, len(self.running))
        finished = self.finish()
        self.clock += self.step_time(self.tokens if kv_read is None else kv_read, prefill)
        for r in finished:
            r.finish_s = self.clock                         # its last token is out when the step ends
        self.steps += 1

    def admit(self, generate: bool = False) -> int:
        """Admit requests from the head of the queue while the pool takes them; return the number
        of prompt tokens to prefill (a preempted request recomputes its generated tokens too).
        ``generate``: each admitted request also generates its first token now (the engine's order;
        the pool gave it a slot for that token)."""
        prefill = 0
        while self.waiting and self.pool.admit(self.waiting[0]):
            r = self.waiting.popleft()
            self.running.append(r)
            self.tokens += r.stored
            prefill += r.stored
            if generate:
                r.generated += 1
                self.tokens += 1
        return prefill

    def generate(self, start: int = 0) -> None:
        """One token for every running request from ``start`` on, oldest first, preempting the
        newest if needed."""
        i = start
        while i < len(self.running):
            r = self.running[i]
            if self.pool.make_room(r):
                r.generated += 1
                self.tokens += 1
                i += 1
            else:
                self.preempt(self.running.pop())           # the newest; may be r itself

    def preempt(self, r: SimRequest) -> None:
        """Evict ``r``: free its memory and put it back at the head of the queue (recompute)."""
        self.pool.release(r)
        self.tokens -= r.stored
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    def finish(self) -> list[SimRequest]:
        """Release the requests that have generated their whole output; return them."""
        finished = [r for r in self.running if r.done]
        for r in finished:
            self.pool.release(r)
            self.tokens -= r.stored
            r.finish_step = self.steps
        if finished:
            self.running = [r for r in self.running if not r.done]
        return finished

    def result(self, policy: str, block_size: int) -> SimResult:
        """The measured averages, as a :class:`SimResult`."""
        s, m = self.meter.shares(), self.meter
        return SimResult(
            policy=policy, kv_slots=self.pool.kv_slots, block_size=block_size,
            token_frac=s["token"], reservation_frac=s["reservation"], internal_frac=s["internal"],
            rounding_frac=s["rounding"], free_frac=s["free"],
            avg_batch=m.batch_sum / max(1, m.steps), steps=m.steps, total_steps=self.steps,
            seconds=self.clock, preemptions=self.preemptions, peak_held=m.peak_held,
            generated=np.array([r.generated for r in self.requests], dtype=np.int64),
            finish_steps=np.array([r.finish_step for r in self.requests], dtype=np.int64),
            latency_s=np.array([r.finish_s - self.arrivals[r.rid] for r in self.requests]),
            output_lens=np.array([r.output for r in self.requests], dtype=np.int64))
