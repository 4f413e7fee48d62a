"""vLLM's paged policy, simulated by the engine's own scheduler and block manager, with no model.

:class:`CountingEngine` serves a workload with :class:`pagedlib.engine.scheduler.Scheduler` over a
:class:`pagedlib.memory.block_manager.BlockManager` of ``kv_slots // block_size`` blocks. Each step:

1. requests that have arrived join the back of the waiting line;
2. the scheduler decides the step, exactly as in ``pagedlib.LLM``: who is admitted, how many tokens
   each sequence computes, who is preempted (the newest, by recompute) when blocks run out; the block
   manager hands out the blocks;
3. the meter reads the pool from the block manager and the sequences (:mod:`pagedlib.sim.result`);
4. every scheduled sequence whose tokens are now all computed "samples" a token (the model's place:
   any token will do, nothing reads it), and one that has its whole output is finished;
5. the clock advances by ``step_time(K/V the step reads, prompt tokens it computes)``.

Nothing here decides what the engine decides: the simulator's vLLM is the engine's scheduler.
``max_num_seqs`` and ``max_num_batched_tokens`` default to limits that never bind (the paper's runs
were limited by memory), so every prompt is computed whole in its first step. The default order,
``scheduling="vllm"``, is that of the vLLM the paper measured (v0.1: grow the running requests,
preempting the newest when blocks run out, then admit new prompts into the same step; nobody is
admitted past a request preempted in that step); ``"prefill_first"`` is vLLM v0's from August 2023
on. The paper's vLLM also kept a 1% watermark of free blocks at admission, which this leaves out
(see :mod:`pagedlib.sim`).

It counts as the engine does: the token sampled in a step has no K/V until the next step computes it,
and the last one never does, so a request of ``p`` prompt and ``o`` output tokens holds at most
``p + o - 1`` tokens of K/V (the Orca loop, :mod:`pagedlib.sim.loop`, counts ``p + o``: one token per
request, 0.2% of a ShareGPT request).
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

from ..engine.request_checks import check_request
from ..engine.sampling import SamplingParams
from ..engine.scheduler import ScheduledStep, Scheduler, SeqState, Status
from ..memory.block_manager import BlockManager
from .result import Meter, SimResult
from .timing import StepTime

__all__ = ["CountingEngine"]


class CountingEngine:
    """The engine's scheduler and block manager serving ``prompt_lens`` / ``output_lens`` (tokens)
    arriving at ``arrivals`` (s), on a pool of ``kv_slots`` slots in blocks of ``block_size``.

    :meth:`run` serves them all; :meth:`step` runs one step and returns the scheduler's decision
    (``None`` when the clock only jumped to the next arrival). ``scheduler`` and ``block_manager``
    are the engine's own objects, to inspect between steps.
    """

    def __init__(self, prompt_lens: Sequence[int], output_lens: Sequence[int], arrivals: np.ndarray, *,
                 kv_slots: int, block_size: int, max_len: int, step_time: StepTime,
                 scheduling: str = "vllm", max_num_seqs: int | None = None,
                 max_num_batched_tokens: int | None = None, admission: str = "on_demand",
                 max_new_tokens: int | Sequence[int] | None = None):
        self.kv_slots, self.max_len, self.step_time, self.arrivals = kv_slots, max_len, step_time, arrivals
        self.block_manager = BlockManager(kv_slots // block_size, block_size)
        seats = max_num_seqs if max_num_seqs is not None else max(1, len(prompt_lens))  # never binds
        # first-chunk admission, as the simulations of chapters 11 and 12 were measured (LLM's default
        # since issue 40 is vLLM's scheduler_reserve_full_isl=True)
        self.scheduler = Scheduler(self.block_manager, seats, max_num_batched_tokens, scheduling=scheduling,
                                   admission=admission, scheduler_reserve_full_isl=False)
        # max_new_tokens: the cap each client asks for (vLLM's max_tokens); the reply then ends with
        # its end-of-sequence token after output_lens tokens, or at the cap if that comes first.
        # None: the cap is the reply's own length (as if every client knew it).
        caps = output_lens if max_new_tokens is None else (
            [max_new_tokens] * len(output_lens) if np.ndim(max_new_tokens) == 0 else max_new_tokens)
        self.seqs = [self._checked(i, int(p), int(c))
                     for i, (p, c) in enumerate(zip(prompt_lens, caps))]
        self.reply_lens = [min(int(o), s.max_new_tokens) for o, s in zip(output_lens, self.seqs)]
        self.kv_at_end = [len(s.prompt) + n - 1 for s, n in zip(self.seqs, self.reply_lens)]   # by seq_id
        self.token_s: list[list[float]] = [[] for _ in self.seqs]   # when each token came out
        order = np.argsort(arrivals, kind="stable")
        self.pending = deque(self.seqs[i] for i in order)   # not arrived yet, by arrival time
        self.meter = Meter(kv_slots)
        self.finish_step = [-1] * len(self.seqs)
        self.finish_s = [-1.0] * len(self.seqs)
        self.clock, self.steps, self.measuring = 0.0, 0, True

    def _checked(self, i: int, prompt: int, output: int) -> SeqState:
        """Request ``i`` as a sequence, refused as the engine refuses it if it could never run."""
        params = SamplingParams(max_new_tokens=output)
        try:
            tokens = check_request(i, [0] * prompt, params, vocab_size=1, context_length=self.max_len,
                                   block_size=self.block_manager.block_size,
                                   num_usable_blocks=self.block_manager.num_usable_blocks,
                                   max_num_seqs=self.scheduler.max_num_seqs)
        except ValueError as exc:
            raise ValueError(f"{exc} In the simulator: raise kv_slots (or max_len), or drop the "
                             "request.") from None
        return SeqState(seq_id=i, request_id=i, prompt=tokens, params=params)

    def run(self) -> "CountingEngine":
        while self.pending or self.scheduler.has_unfinished():
            self.step()
        return self

    def step(self) -> ScheduledStep | None:
        """One engine step (see the module docstring), or a jump of the clock to the next arrival."""
        sched = self.scheduler
        while self.pending and self.arrivals[self.pending[0].seq_id] <= self.clock:
            sched.add(self.pending.popleft())
        if not sched.has_unfinished():
            self.clock = float(self.arrivals[self.pending[0].seq_id])
            return None
        # the averages stop once every request has arrived and been admitted (the drain is left out)
        self.measuring = self.measuring and bool(self.pending or sched.waiting)
        scheduled = sched.schedule()
        if not scheduled.seqs:
            raise RuntimeError("the scheduler ran nobody although requests wait; every request was "
                               "checked to fit an empty pool, so this is a bug")
        if self.measuring:
            self.meter.record_blocks(self.block_manager, sched.running, self.kv_at_end)
        kv_read = sum(s.num_computed_tokens for s in scheduled.seqs)
        sampled = []
        for seq in scheduled.seqs:
            if seq.all_computed:                   # its last token's K/V is computed: it samples
                seq.output.append(0)
                sampled.append(seq.seq_id)
                if len(seq.output) >= self.reply_lens[seq.seq_id]:   # end of sequence, or the cap
                    sched.finish(seq)
        self.clock += self.step_time(kv_read, sum(scheduled.prefill_chunks))
        for i in sampled:
            self.token_s[i].append(self.clock)
            if self.seqs[i].status is Status.FINISHED:
                self.finish_step[i], self.finish_s[i] = self.steps, self.clock   # its last token is out
        self.steps += 1
        return scheduled

    def result(self) -> SimResult:
        """The measured averages, as a :class:`SimResult`."""
        return self.meter.result(
            "paged", self.block_manager.block_size, total_steps=self.steps, seconds=self.clock,
            preemptions=self.scheduler.num_preemptions,
            generated=np.array([len(s.output) for s in self.seqs], dtype=np.int64),
            finish_steps=np.array(self.finish_step, dtype=np.int64),
            latency_s=np.array(self.finish_s) - self.arrivals,
            output_lens=np.array(self.reply_lens, dtype=np.int64))

    def metrics(self):
        """The run's latencies as the engine reports them: an
        :class:`~pagedlib.engine.metrics.EngineMetrics` of every finished request's TTFT and ITL on
        the modelled clock (its ``goodput`` and percentiles)."""
        from ..engine.metrics import EngineMetrics
        return EngineMetrics.from_token_times(self.arrivals, self.token_s, self.clock,
                                              num_usable_blocks=self.block_manager.num_usable_blocks,
                                              block_size=self.block_manager.block_size,
                                              prompt_lens=[len(s.prompt) for s in self.seqs],
                                              preemptions=[s.num_preemptions for s in self.seqs])
