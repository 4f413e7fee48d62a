"""Continuous batching with preemption: which sequences run in the next step (chapter 10).

A serving engine runs in *steps*. Before each one the scheduler decides who takes part:

1. **Grow the running sequences.** Each running sequence is about to feed the token it sampled last;
   the block manager makes room for it (``append``; a new block every ``block_size`` tokens, and a
   copy-on-write copy if the last block is shared). When no block is free, the **newest** running
   sequence is *preempted*: its blocks are freed and it goes back to the **front** of the waiting
   line, to be recomputed later from its prompt plus everything it had generated (so nothing is lost).
2. **Admit waiting sequences**, oldest first, while there is a seat (``max_num_seqs``) and the
   block manager can hold their tokens *now* (on demand: their prompt, not their maximum length).
   Nobody is admitted in a step that had to preempt.

The scheduler only moves sequences between the ``waiting`` line and the ``running`` list and talks to
the block manager; the engine runs the model and samples.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .block_manager import BlockManager, OutOfBlocks


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One sequence of tokens being generated: its prompt, what it has generated so far, and its
    place in the scheduler. ``num_samples > 1`` marks a request that will be forked into that many
    sequences once its prompt is computed (parallel sampling): it needs that many seats."""

    seq_id: int
    request_id: int
    prompt: list[int]
    params: Any                         # the request's SamplingParams
    output: list[int] = field(default_factory=list)
    num_samples: int = 1
    sample_index: int = 0               # which of its request's samples this is
    status: Status = Status.WAITING
    num_cached: int = 0                 # prefix-cache hit (tokens) at its last admission
    seed: int = 0                       # its request's seed (sample j draws with seed + j)
    generator: Any = None               # its torch.Generator when sampling

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    def __len__(self) -> int:
        return len(self.prompt) + len(self.output)


@dataclass
class ScheduledStep:
    """The scheduler's decision for one step."""

    prefills: list[Sequence] = field(default_factory=list)   # just admitted: compute their tokens
    decodes: list[Sequence] = field(default_factory=list)    # running: feed their last token
    preempted: list[Sequence] = field(default_factory=list)  # sent back to wait, blocks freed
    copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) blocks to copy first


class Scheduler:
    """First come, first served continuous batching over a :class:`~pagedlib.BlockManager`, at most
    ``max_num_seqs`` sequences running at once, preempting the newest by recompute when blocks run out."""

    def __init__(self, block_manager: BlockManager, max_num_seqs: int):
        if max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be at least 1; got {max_num_seqs}.")
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []       # in admission order: the newest is last
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Put a new sequence at the back of the waiting line."""
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledStep:
        """Decide the next step: grow (or preempt) the running sequences, then admit waiting ones."""
        step = ScheduledStep()
        self._grow_running(step)
        if not step.preempted:
            self._admit_waiting(step)
        return step

    def _grow_running(self, step: ScheduledStep) -> None:
        """Make room for each running sequence's next token, oldest first; out of blocks, preempt the
        newest running sequence (possibly the one that asked) and try again."""
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            try:
                step.copies += self.block_manager.append(seq.seq_id, seq.tokens[-1])
            except OutOfBlocks:
                victim = self.running[-1]           # the newest; never one already grown this step
                self.preempt(victim)
                step.preempted.append(victim)
                continue                            # retry seq (unless it was the victim)
            step.decodes.append(seq)
            i += 1

    def _admit_waiting(self, step: ScheduledStep) -> None:
        """Admit from the front of the line while a seat is free and the blocks for the sequence's
        tokens can be had now. First come, first served: nobody overtakes a request that does not fit."""
        while self.waiting:
            seq = self.waiting[0]
            if len(self.running) + seq.num_samples > self.max_num_seqs or not self.can_admit(seq):
                break
            try:
                seq.num_cached = self.block_manager.allocate(seq.seq_id, seq.tokens)
            except OutOfBlocks:
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
            self.on_admit(seq)
            step.prefills.append(seq)

    def preempt(self, seq: Sequence) -> None:
        """Free a running sequence's blocks and put it first in line, to be recomputed later."""
        self.running.remove(seq)
        self.block_manager.free(seq.seq_id)
        self.on_release(seq)
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Start ``child`` as a running copy of ``parent`` that shares all its blocks (parallel sampling)."""
        self.block_manager.fork(parent.seq_id, child.seq_id)
        child.status = Status.RUNNING
        self.running.append(child)
        self.on_admit(child)

    def finish(self, seq: Sequence) -> None:
        """A sequence is done: it leaves the batch and its blocks are freed."""
        self.running.remove(seq)
        self.block_manager.free(seq.seq_id)
        self.on_release(seq)
        seq.status = Status.FINISHED

    # Hooks for other admission policies (the reserve-max baseline uses them).
    def can_admit(self, seq: Sequence) -> bool:
        """Extra admission rule; the paged scheduler needs none beyond free seats and blocks."""
        return True

    def on_admit(self, seq: Sequence) -> None:
        """Called when a sequence starts running."""

    def on_release(self, seq: Sequence) -> None:
        """Called when a running sequence finishes or is preempted."""
