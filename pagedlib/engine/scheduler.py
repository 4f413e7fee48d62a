"""Continuous batching under a token budget: what runs in the next step (chapters 10 and 11).

A serving engine runs in *steps*; each step is **one forward pass** over a flat batch that mixes the
sequences' new tokens: one token for each decoding sequence, a chunk of prompt for each prefilling
one (what vLLM v1 and Sarathi-Serve do). Before each step the scheduler fills that batch with at most
``max_num_batched_tokens`` tokens (the *token budget*; ``None``: no limit), in this order:

1. **Decodes first**, oldest running sequence first, one token each: the block manager makes room
   for the token it sampled last (``append``; a new block every ``block_size`` tokens, a copy-on-write
   copy if the last block is shared). When no block is free, the **newest** running sequence is
   *preempted*: its blocks are freed and it goes back to the **front** of the waiting line, to be
   recomputed later from its prompt plus everything it had generated (nothing is lost).
2. **Prefill chunks** with what is left of the budget: first the running sequences whose prompt is
   not fully computed yet, then waiting ones, oldest first. A waiting sequence is admitted while it
   has a seat (``max_num_seqs``, counting all ``n`` samples of a request from its admission) and the
   block manager can hold its prompt *now* (on demand, not its maximum length; a cached prefix is
   reused). Nobody is admitted in a step that had to preempt, and nobody overtakes a request that
   does not fit (first come, first served). A prompt longer than the budget left is computed in
   chunks over several steps (*chunked prefill*).

Each sequence counts its ``num_computed_tokens`` (K/V in the cache); the scheduler advances it by
the tokens it schedules, as vLLM v1 does, and commits the blocks they complete to the prefix cache.
A sequence samples a token only in the step that computes its last prompt token, or in a decode.
The scheduler only moves sequences between ``waiting`` and ``running`` and talks to the block
manager; the engine runs the model and samples.
"""
from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..memory.block_manager import BlockManager, OutOfBlocks
from ..validation import positive_int


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """One sequence of tokens being generated: its prompt, what it has generated so far, and its
    place in the scheduler. ``num_samples > 1`` marks a request that will be forked into that many
    sequences once its prompt is computed (parallel sampling): it holds that many seats until then,
    and each fork hands one of them to a child."""

    seq_id: Any
    request_id: int
    prompt: list[int]
    params: Any                         # the request's SamplingParams
    output: list[int] = field(default_factory=list)
    num_samples: int = 1
    sample_index: int = 0               # which of its request's samples this is
    status: Status = Status.WAITING
    num_computed_tokens: int = 0        # tokens whose K/V this step leaves in the cache
    num_prompt_tokens: int = 0          # tokens to prefill since its last admission (prompt + output then)
    num_cached_tokens: int = 0          # prefix-cache hit at its last admission
    num_preemptions: int = 0
    seed: int = 0                       # its request's seed (sample j draws with seed + j)
    generator: Any = None               # its torch.Generator when sampling

    @property
    def tokens(self) -> list[int]:
        """Prompt and output (a new list: use :attr:`last_token` or :meth:`token_slice` in hot loops)."""
        return self.prompt + self.output

    @property
    def last_token(self) -> int:
        return self.output[-1] if self.output else self.prompt[-1]

    def token_slice(self, start: int, stop: int) -> list[int]:
        """``tokens[start:stop]`` without building the whole token list."""
        n = len(self.prompt)
        if stop <= n:
            return self.prompt[start:stop]
        if start >= n:
            return self.output[start - n:stop - n]
        return self.prompt[start:] + self.output[:stop - n]

    @property
    def prefilling(self) -> bool:
        """Running with part of its prompt (since its last admission) still to compute."""
        return self.num_computed_tokens < self.num_prompt_tokens

    def __len__(self) -> int:
        return len(self.prompt) + len(self.output)


@dataclass
class ScheduledStep:
    """The scheduler's decision for one step: the batch of one forward pass, decodes first."""

    decodes: list[Sequence] = field(default_factory=list)    # one token each: their last sampled one
    prefills: list[Sequence] = field(default_factory=list)   # a chunk of prompt each
    prefill_chunks: list[int] = field(default_factory=list)  # tokens computed for each prefill
    preempted: list[Sequence] = field(default_factory=list)  # sent back to wait, blocks freed
    copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) blocks to copy first

    @property
    def seqs(self) -> list[Sequence]:
        """Every scheduled sequence, in batch order."""
        return self.decodes + self.prefills

    @property
    def num_new_tokens(self) -> list[int]:
        """Tokens each of :attr:`seqs` computes."""
        return [1] * len(self.decodes) + self.prefill_chunks

    @property
    def num_tokens(self) -> int:
        return len(self.decodes) + sum(self.prefill_chunks)


class Scheduler:
    """First come, first served continuous batching over a :class:`~pagedlib.BlockManager`: at most
    ``max_num_seqs`` sequences, at most ``max_num_batched_tokens`` tokens per step (``None``: whole
    prompts), decodes first, preempting the newest by recompute when blocks run out."""

    def __init__(self, block_manager: BlockManager, max_num_seqs: int,
                 max_num_batched_tokens: int | None = None):
        self.block_manager = block_manager
        self.max_num_seqs = positive_int("max_num_seqs", max_num_seqs)
        self.max_num_batched_tokens = (None if max_num_batched_tokens is None else
                                       positive_int("max_num_batched_tokens", max_num_batched_tokens))
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []       # in admission order: the newest is last
        self.num_seats = 0                      # seats the running hold: sum of their num_samples
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        """Put a new sequence at the back of the waiting line."""
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledStep:
        """Decide the next step: decodes (preempting if blocks run out), then prefill chunks."""
        step = ScheduledStep()
        budget = math.inf if self.max_num_batched_tokens is None else self.max_num_batched_tokens
        budget = self._schedule_decodes(step, budget)
        budget = self._schedule_running_prefills(step, budget)
        if not step.preempted:
            self._admit_waiting(step, budget)
        return step

    def _computed(self, seq: Sequence, n: int) -> None:
        """``n`` more tokens of ``seq`` are in this step: after it their K/V is in the cache. The
        blocks they complete enter the prefix cache now, so a request admitted later in this very
        step can hit them: safe because the step is one forward pass in which each layer writes
        every scheduled K/V before it reads (see :mod:`pagedlib.memory.block_manager`)."""
        seq.num_computed_tokens += n
        self.block_manager.commit(seq.seq_id, seq.num_computed_tokens)

    def _schedule_decodes(self, step: ScheduledStep, budget: float) -> float:
        """One token for each decoding sequence, oldest first, while the budget lasts. Out of blocks,
        preempt the newest running sequence (possibly the one that asked: never one already scheduled,
        since they are older) and try again."""
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            if seq.prefilling:                  # its turn comes with the prefill chunks
                i += 1
                continue
            try:
                step.copies += self.block_manager.append(seq.seq_id, seq.last_token)
            except OutOfBlocks:
                victim = self.running[-1]       # the newest
                self.preempt(victim)
                step.preempted.append(victim)
                continue                        # retry seq (unless it was the victim)
            step.decodes.append(seq)
            self._computed(seq, 1)
            budget -= 1
            i += 1
        return budget

    def _schedule_running_prefills(self, step: ScheduledStep, budget: float) -> float:
        """The next chunk of each running sequence still prefilling, oldest first (its blocks are held)."""
        for seq in self.running:
            if budget <= 0:
                break
            if seq.prefilling:
                budget -= self._add_chunk(step, seq, budget)
        return budget

    def _admit_waiting(self, step: ScheduledStep, budget: float) -> None:
        """Admit from the front of the line while a seat is free, the budget lasts and the blocks for
        the sequence's tokens can be had now; schedule its first chunk."""
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            if self.num_seats + seq.num_samples > self.max_num_seqs or not self.can_admit(seq):
                break
            try:
                seq.num_cached_tokens = self.block_manager.allocate(seq.seq_id, seq.tokens, commit=False)
            except OutOfBlocks:
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            seq.num_computed_tokens = seq.num_cached_tokens
            seq.num_prompt_tokens = len(seq)
            self.running.append(seq)
            self.num_seats += seq.num_samples
            budget -= self._add_chunk(step, seq, budget)

    def _add_chunk(self, step: ScheduledStep, seq: Sequence, budget: float) -> int:
        """Schedule as much of the sequence's prompt as the budget allows; return its length."""
        chunk = int(min(seq.num_prompt_tokens - seq.num_computed_tokens, budget))
        step.prefills.append(seq)
        step.prefill_chunks.append(chunk)
        self._computed(seq, chunk)
        return chunk

    def preempt(self, seq: Sequence) -> None:
        """Free a running sequence's blocks and put it first in line, to be recomputed later."""
        self._leave(seq)
        seq.status = Status.WAITING
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Start ``child`` as a running copy of ``parent`` that shares all its blocks (parallel
        sampling); it takes one of the seats the parent holds for its samples."""
        if parent.num_samples < 2:
            raise ValueError(f"fork: sequence {parent.seq_id!r} holds no seat for another sample "
                             f"(num_samples = {parent.num_samples}); set num_samples before admitting it")
        self.block_manager.fork(parent.seq_id, child.seq_id)
        parent.num_samples -= 1
        child.num_samples = 1
        child.num_computed_tokens = parent.num_computed_tokens
        child.num_prompt_tokens = parent.num_prompt_tokens
        child.status = Status.RUNNING
        self.running.append(child)

    def finish(self, seq: Sequence) -> None:
        """A sequence is done: it leaves the batch and its blocks are freed."""
        self._leave(seq)
        seq.status = Status.FINISHED

    def _leave(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq.seq_id)
        self.num_seats -= seq.num_samples

    def can_admit(self, seq: Sequence) -> bool:
        """Extra admission rule for other policies (reserve-max); the paged scheduler needs none
        beyond free seats and blocks."""
        return True
