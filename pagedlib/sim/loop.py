"""The step loop of the Orca baselines: first come, first served, iteration-level scheduling over one
pool of contiguous reservations (:mod:`pagedlib.sim.reservation`).

Each step (one engine iteration):

1. requests that have arrived join the back of the queue;
2. from the head of the queue, requests are admitted while the pool takes them (strict FCFS: when
   the head does not fit, nobody behind it is tried);
3. every running request, new ones included (their prompt is processed in the same step, as in
   Orca's iteration-level batching), generates one token: its reservation has room for it, so
   nobody is ever preempted;
4. the meter records the pool and the batch size; finished requests give their memory back;
5. the clock advances by the step's duration (only the arrivals depend on it).

A request's K/V: ``stored`` counts the token generated in a step as stored in that step, so a request
holds ``prompt + output`` tokens at its end. vLLM's paged policy does not run here: it runs on the
engine's own scheduler and block manager (:mod:`pagedlib.sim.counting_engine`).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .request import SimRequest
from .reservation import ReservationPool
from .result import Meter, SimResult
from .timing import StepTime


class StepLoop:
    """One simulation: the queue, the running batch, the pool and the meter, advanced step by step."""

    def __init__(self, requests: list[SimRequest], arrivals: np.ndarray, pool: ReservationPool,
                 step_time: StepTime):
        for r in requests:
            pool.check(r)
        self.requests, self.arrivals, self.pool = requests, arrivals, pool
        self.step_time = step_time
        order = np.argsort(arrivals, kind="stable")
        self.pending = deque(requests[i] for i in order)   # not arrived yet, by arrival time
        self.waiting: deque[SimRequest] = deque()          # arrived, not running; head first
        self.running: list[SimRequest] = []                # by admission, oldest first
        self.meter = Meter(pool.kv_slots)
        self.tokens = 0                                    # K/V tokens stored by running requests
        self.clock, self.steps, self.measuring = 0.0, 0, True

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
        prefill = self.admit()
        if not self.running:
            raise RuntimeError(f"request {self.waiting[0].rid} does not fit in an empty pool: the "
                               "pool's check() should have rejected it")
        for r in self.running:                             # one token each, into its reservation
            r.generated += 1
        self.tokens += len(self.running)
        if self.measuring:
            pool = self.pool
            self.meter.record(self.tokens, pool.useful, pool.reserved, pool.held, len(self.running))
        finished = self.finish()
        self.clock += self.step_time(self.tokens, prefill)
        for r in finished:
            r.finish_s = self.clock                         # its last token is out when the step ends
        self.steps += 1

    def admit(self) -> int:
        """Admit requests from the head of the queue while the pool takes them; return the number
        of prompt tokens to prefill."""
        prefill = 0
        while self.waiting and self.pool.admit(self.waiting[0]):
            r = self.waiting.popleft()
            self.running.append(r)
            self.tokens += r.stored
            prefill += r.stored
        return prefill

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
        return self.meter.result(
            policy, block_size, total_steps=self.steps, seconds=self.clock, preemptions=0,
            generated=np.array([r.generated for r in self.requests], dtype=np.int64),
            finish_steps=np.array([r.finish_step for r in self.requests], dtype=np.int64),
            latency_s=np.array([r.finish_s - self.arrivals[r.rid] for r in self.requests]),
            output_lens=np.array([r.output for r in self.requests], dtype=np.int64))
