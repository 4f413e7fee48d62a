"""What a simulation measures: time-averaged shares of the K/V pool, and the batch size.

Every slot of the pool is, at each step, in exactly one of five states:

- **token**: holds the K/V of a token a request has (prompt or generated);
- **reservation**: set aside for a token the request will still generate;
- **internal** fragmentation: set aside for the request but never used (it finishes first);
- **rounding**: the allocator's own waste (a buddy block bigger than the reservation inside it);
- **free**: in nobody's hands.

The Orca baselines keep these counts in their pool (:class:`pagedlib.sim.reservation.ReservationPool`);
under paging the meter reads them from the engine's own state (:meth:`Meter.record_blocks`): a
sequence's K/V from its ``num_computed_tokens``, its slots from the block manager (the whole blocks
holding the slots it was given), and the blocks held from the block manager's count. Under paging a request holds no reservation beyond
its last block, so the tail of that block is split: the part its own later tokens fill is reservation,
the part past its final token internal fragmentation.

The paper's Figure 2 counts rounding and free together as "external fragmentation and other".
Averages are over steps (one step = one engine iteration), up to the step where the last request is
admitted: the drain at the end, where the pool empties because no one is left to wait, is left out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..validation import cdiv

SHARES = ("token", "reservation", "internal", "rounding", "free")


class Meter:
    """Adds up, step by step, the slots in each state and the number of running requests."""

    def __init__(self, kv_slots: int):
        self.kv_slots = kv_slots
        self.sums = dict.fromkeys(SHARES, 0)
        self.batch_sum = self.steps = self.peak_held = 0

    def record(self, tokens: int, useful: int, reserved: int, held: int, batch: int) -> None:
        """One step: ``tokens`` of K/V stored by the running requests; ``useful``, the slots set aside
        for them that they will fill (tokens included); ``reserved``, all slots set aside for them;
        ``held``, the slots the allocator gave out (reservations and its rounding); the batch size."""
        s = self.sums
        s["token"] += tokens
        s["reservation"] += useful - tokens
        s["internal"] += reserved - useful
        s["rounding"] += held - reserved
        s["free"] += self.kv_slots - held
        self.batch_sum += batch
        self.steps += 1
        self.peak_held = max(self.peak_held, held)

    def record_blocks(self, block_manager, running, kv_at_end: Sequence[int]) -> None:
        """One step of the paged policy, read from the engine: each running sequence's K/V
        (``num_computed_tokens``), the slots of its blocks (the whole blocks that hold the slots the
        block manager gave it), what it will hold at its end (``kv_at_end[seq_id]``), and the
        blocks in use (the block manager's count)."""
        bs, tokens, useful = block_manager.block_size, 0, 0
        for seq in running:
            tokens += seq.num_computed_tokens
            slots = cdiv(block_manager.num_tokens(seq.seq_id), bs) * bs   # its blocks, unshared
            useful += min(slots, kv_at_end[seq.seq_id])
        held = block_manager.num_used_blocks * bs       # a block is reserved whole: no rounding
        self.record(tokens, useful, held, held, len(running))

    def shares(self) -> dict[str, float]:
        """Time-averaged share of the pool in each state (they sum to 1)."""
        total = max(1, self.steps) * self.kv_slots
        return {k: v / total for k, v in self.sums.items()}

    def result(self, policy: str, block_size: int, **run) -> "SimResult":
        """What was measured, as a :class:`SimResult`: the meter's shares, batch and peak, and what
        only the loop knows (``total_steps``, ``seconds``, ``preemptions`` and the per-request arrays)."""
        s = self.shares()
        return SimResult(
            policy=policy, kv_slots=self.kv_slots, block_size=block_size,
            token_frac=s["token"], reservation_frac=s["reservation"], internal_frac=s["internal"],
            rounding_frac=s["rounding"], free_frac=s["free"],
            avg_batch=self.batch_sum / max(1, self.steps), steps=self.steps, peak_held=self.peak_held, **run)


@dataclass
class SimResult:
    """The outcome of :func:`pagedlib.sim.simulate`.

    Shares of the pool (time averages, summing to 1): ``token_frac``, ``reservation_frac``,
    ``internal_frac`` and ``external_frac`` (= ``rounding_frac + free_frac``). ``avg_batch`` is the
    average number of running requests. ``steps`` counts the measured steps, ``total_steps`` all of
    them; ``seconds`` is the simulated time at the end, ``preemptions`` how often a request was
    evicted, ``generated[i]`` the tokens request i produced (its full output once finished).
    """

    policy: str
    kv_slots: int
    block_size: int
    token_frac: float
    reservation_frac: float
    internal_frac: float
    rounding_frac: float
    free_frac: float
    avg_batch: float
    steps: int
    total_steps: int
    seconds: float
    preemptions: int
    peak_held: int
    generated: np.ndarray = field(repr=False)
    finish_steps: np.ndarray = field(repr=False)
    latency_s: np.ndarray = field(repr=False)      # per request: arrival to its last token (s)
    output_lens: np.ndarray = field(repr=False)

    @property
    def normalized_latency(self) -> float:
        """The paper's Figure 12 metric: the mean over requests of end-to-end latency divided by the
        request's output length, in seconds per token."""
        return float(np.mean(self.latency_s / self.output_lens))

    @property
    def external_frac(self) -> float:
        """External fragmentation and other: the buddy's rounding plus free slots (Figure 2's term)."""
        return self.rounding_frac + self.free_frac

    def shares(self) -> dict[str, float]:
        """The four shares of the paper's Figure 2, by name."""
        return {"token": self.token_frac, "reservation": self.reservation_frac,
                "internal": self.internal_frac, "external": self.external_frac}

    def __str__(self) -> str:
        s = self.shares()
        return (f"{self.policy:>6}: token {s['token']:6.1%}  reservation {s['reservation']:6.1%}  "
                f"internal {s['internal']:6.1%}  external {s['external']:6.1%}  "
                f"batch {self.avg_batch:6.2f}  preemptions {self.preemptions}")
