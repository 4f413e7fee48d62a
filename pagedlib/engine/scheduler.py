"""Continuous batching under a token budget: what runs in the next step (chapters 10 and 11).

A serving engine runs in *steps*; each step is **one forward pass** over a flat batch that mixes the
sequences' new tokens: one token for a decoding sequence, a chunk of prompt for a prefilling one.
Before each step the scheduler fills that batch with at most ``max_num_batched_tokens`` tokens (the
*token budget*; ``None``: no limit). Each sequence counts its ``num_computed_tokens`` (K/V in the
cache) and needs ``len(seq) - num_computed_tokens`` more: 1 for a decode, the rest of its prompt for
a prefill (vLLM v1's rule: there is no prefill phase and no decode phase, only tokens owed).

**Blocks follow the computed tokens.** A sequence scheduled for ``n`` tokens gets blocks for
``num_computed_tokens + n`` slots, no more (vLLM v1's ``allocate_slots``): a long prompt starts in
whatever blocks are free and takes more chunk by chunk. When blocks run out, the **newest** running
sequence (decoding or still prefilling) is *preempted*: its blocks are freed and it goes back to the
**front** of the waiting line, to be recomputed later from its prompt plus everything it had generated
(nothing is lost). With prefix caching its full blocks stay in the cache and are hit when it resumes
(:attr:`Scheduler.num_resumed_hit_tokens` counts the tokens that saves).

Three orders (``scheduling``):

- ``"vllm"`` (the default): vLLM v1's. Walk ``running`` in admission order, giving each what it owes
  (capped by the budget left and by ``long_prefill_token_threshold``, 0: no cap), then admit from
  ``waiting``.
- ``"decode_first"``: Sarathi-Serve's stall-free batching. Every running decode first (one token
  each), then the running prefills' chunks, then admissions.
- ``"prefill_first"``: vLLM v0's default from August 2023 on (prefills or decodes, never both in one
  step): the running prefills' chunks and the admissions make a step of prompts only, and only a step
  with no prompt to run decodes the running sequences (who all wait while new prompts run).

Admission from ``waiting`` (``admission``), first come, first served: the head of the line is admitted
while it has a seat (``max_num_seqs``, counting all ``n`` samples of a request from its admission),
the budget lasts, the policy accepts it and the block manager has the blocks (a cached prefix is
reused). Which blocks: with ``scheduler_reserve_full_isl=True`` (the default, vLLM's
``SchedulerConfig.scheduler_reserve_full_isl`` since vllm-project/vllm#37307, March 2026) those for
its whole known sequence (the prompt, and the output so far of a preempted one) must be free, net of
cache hits, though only its first chunk's are taken; ``False`` asks only for the first chunk's, as
vLLM v1 did before (a long prompt admitted that way can fill the cache mid-prefill, be preempted and
come back, over and over). Nobody is admitted in a step that had to preempt, and nobody overtakes a
request that does not fit. The three policies of production engines:

- ``"on_demand"`` (vLLM): no rule beyond those blocks now; preempt when the cache runs out.
- ``"guaranteed"`` (TensorRT-LLM's ``GUARANTEED_NO_EVICT`` capacity scheduler): admit only if every
  running sequence's prompt + ``max_new_tokens`` blocks and the newcomer's can all be held at once;
  then nobody is ever preempted.
- ``"estimated"`` (SGLang, as its ``PrefillAdder`` and ``retract_decode`` run it): charge each running
  sequence its blocks plus ``new_token_ratio`` of the tokens it may still generate (at most 4,096),
  and the newcomer its prompt minus its cached prefix plus ``min(max_new_tokens, 4096)``. When blocks
  run out, the victims are taken in SGLang's order (fewest generated tokens first, then the longest
  prompt), at least one, then more until the free blocks hold the next token of every sequence left
  to schedule; then the ratio jumps to what the survivors generated plus 20 more steps each
  (``retract_decode_steps``), over their ``max_new_tokens`` (+1); in every step without a retraction
  it decays by a 600th of its range, to a floor.

A sequence samples a token only in the step that computes its last token. The scheduler only moves
sequences between ``waiting`` and ``running`` and talks to the block manager; the engine runs the
model, samples, and calls :meth:`Scheduler.undo` if the step fails.
"""
from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Hashable

from ..memory.block_manager import BlockManager
from ..validation import cdiv, nonnegative_int, positive_int

__all__ = ["Scheduler", "SeqState", "ScheduledStep", "Status", "SCHEDULING_ORDERS", "ADMISSION_POLICIES"]

SCHEDULING_ORDERS = ("vllm", "decode_first", "prefill_first")
ADMISSION_POLICIES = ("on_demand", "guaranteed", "estimated")

# SGLang's defaults (pagedlib.facts: sglang_new_token_ratio, sglang_retract_decode): the ratio starts at
# 0.7, decays over 600 steps to 0.7 * 0.14, and after a retraction counts 20 more decode steps for
# each survivor; admission charges at most 4096 new tokens per request.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.7 * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20
CLIP_MAX_NEW_TOKENS = 4096


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class SeqState:
    """One sequence of tokens being generated, as the scheduler sees it: its prompt, what it has
    generated so far, and its place in the queues. ``num_samples > 1`` marks a request that will be
    forked into that many sequences once its prompt is computed (parallel sampling): it holds that
    many seats until then, and each fork hands one of them to a child. It reads like a list of its
    tokens (``len(seq)``, ``seq[i]``, ``seq[a:b]``), without copying them."""

    seq_id: Hashable
    request_id: int
    prompt: list[int]
    params: Any = None                  # the request's SamplingParams (max_new_tokens for admission)
    output: list[int] = field(default_factory=list)
    num_samples: int = 1
    cache_salt: Hashable = None         # sequences share cached blocks only with the same salt
    status: Status = Status.WAITING
    num_computed_tokens: int = 0        # tokens whose K/V this step leaves in the cache
    num_cached_tokens: int = 0          # prefix-cache hit at its last admission
    num_preemptions: int = 0

    @property
    def tokens(self) -> list[int]:
        """Prompt and output (a new list: use :attr:`last_token` or slicing in hot loops)."""
        return self.prompt + self.output

    @property
    def last_token(self) -> int:
        return self.output[-1] if self.output else self.prompt[-1]

    def __getitem__(self, index: int | slice) -> int | list[int]:
        """``seq[i]`` and ``seq[a:b]``: its tokens (prompt, then output) read in place, without building
        the whole list: the batch builder reads a step's tokens this way, and the block manager the
        tokens of a block it commits."""
        n = len(self.prompt)
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return self.tokens[index]
            if stop <= n:
                return self.prompt[start:stop]
            if start >= n:
                return self.output[start - n:stop - n]
            return self.prompt[start:] + self.output[:stop - n]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"token index out of range: the sequence has {len(self)} tokens")
        return self.prompt[index] if index < n else self.output[index - n]

    @property
    def num_new_tokens(self) -> int:
        """Tokens it still owes the cache: 1 for a decode, the rest of its prompt for a prefill."""
        return len(self) - self.num_computed_tokens

    @property
    def prefilling(self) -> bool:
        """It owes the cache more than the one token it sampled last: part of its prompt (or, after a
        preemption, of its prompt and output) is not computed yet."""
        return self.num_computed_tokens < len(self) - (1 if self.output else 0)

    @property
    def all_computed(self) -> bool:
        """Every token's K/V is computed; right after :meth:`Scheduler.schedule`: it samples in this step."""
        return self.num_computed_tokens == len(self)

    @property
    def max_new_tokens(self) -> int:
        return self.params.max_new_tokens if self.params is not None else 0

    def __len__(self) -> int:
        return len(self.prompt) + len(self.output)


@dataclass
class ScheduledStep:
    """The scheduler's decision for one step: the batch of one forward pass, in batch order."""

    seqs: list[SeqState] = field(default_factory=list)        # every scheduled sequence
    num_new_tokens: list[int] = field(default_factory=list)   # tokens each computes in this step
    is_decode: list[bool] = field(default_factory=list)       # its one token is the one it sampled last
    preempted: list[SeqState] = field(default_factory=list)   # sent back to wait, blocks freed
    copies: list[tuple[int, int]] = field(default_factory=list)  # (src, dst) blocks to copy first
    admitted: list[SeqState] = field(default_factory=list)    # taken from waiting in this step
    computed_before: list[int] = field(default_factory=list)  # each one's num_computed_tokens before it

    def add(self, seq: SeqState, n: int, decode: bool, before: int) -> None:
        self.seqs.append(seq)
        self.num_new_tokens.append(n)
        self.is_decode.append(decode)
        self.computed_before.append(before)

    @property
    def decodes(self) -> list[SeqState]:
        return [s for s, d in zip(self.seqs, self.is_decode) if d]

    @property
    def prefills(self) -> list[SeqState]:
        return [s for s, d in zip(self.seqs, self.is_decode) if not d]

    @property
    def prefill_chunks(self) -> list[int]:
        """Tokens computed for each of :attr:`prefills`."""
        return [n for n, d in zip(self.num_new_tokens, self.is_decode) if not d]

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)


def check_limits(max_num_seqs: int, max_num_batched_tokens: int | None) -> tuple[int, int | None]:
    """The engine's two limits, checked in one place (the scheduler and ``LLM`` both call this)."""
    return (positive_int("max_num_seqs", max_num_seqs),
            None if max_num_batched_tokens is None else positive_int("max_num_batched_tokens",
                                                                     max_num_batched_tokens))


class Scheduler:
    """First come, first served continuous batching over a :class:`~pagedlib.BlockManager`: at most
    ``max_num_seqs`` sequences, at most ``max_num_batched_tokens`` tokens per step (``None``: whole
    prompts), in the ``scheduling`` order, admitting by the ``admission`` policy, blocks taken as the
    computed tokens need them, preempting the newest by recompute when blocks run out."""

    def __init__(self, block_manager: BlockManager, max_num_seqs: int,
                 max_num_batched_tokens: int | None = None, *, scheduling: str = "vllm",
                 admission: str = "on_demand", long_prefill_token_threshold: int = 0,
                 scheduler_reserve_full_isl: bool = True):
        if scheduling not in SCHEDULING_ORDERS:
            raise ValueError(f"scheduling must be one of {SCHEDULING_ORDERS}; got {scheduling!r}")
        if admission not in ADMISSION_POLICIES:
            raise ValueError(f"admission must be one of {ADMISSION_POLICIES}; got {admission!r}")
        self.block_manager = block_manager
        self.max_num_seqs, self.max_num_batched_tokens = check_limits(max_num_seqs, max_num_batched_tokens)
        self.scheduling = scheduling
        self.admission = admission
        self.long_prefill_token_threshold = nonnegative_int("long_prefill_token_threshold",   # 0: no cap
                                                            long_prefill_token_threshold)
        if not isinstance(scheduler_reserve_full_isl, bool):
            raise ValueError(f"scheduler_reserve_full_isl must be True or False; got {scheduler_reserve_full_isl!r}")
        self.scheduler_reserve_full_isl = scheduler_reserve_full_isl
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO     # the "estimated" policy's share
        self.waiting: deque[SeqState] = deque()
        self.running: list[SeqState] = []       # in admission order: the newest is last
        self.num_seats = 0                      # seats the running hold: sum of their num_samples
        self.num_preemptions = 0                # since the scheduler was built (metrics take differences)
        self.num_resumed_hit_tokens = 0         # tokens a resumed (preempted) sequence found cached

    def add(self, seq: SeqState) -> None:
        """Put a new sequence at the back of the waiting line."""
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- one step --------------------------------------------------------------------------------
    def schedule(self) -> ScheduledStep:
        """Decide the next step: the running sequences in the chosen order (preempting if blocks run
        out), then admissions from the waiting line (``"prefill_first"``: the running decode only in
        a step where no prompt runs)."""
        step = ScheduledStep()
        budget = math.inf if self.max_num_batched_tokens is None else self.max_num_batched_tokens
        if self.scheduling == "vllm":
            budget = self._schedule_running(step, budget, lambda seq: True)
        elif self.scheduling == "decode_first":  # Sarathi-Serve: decodes, then the running prefills
            budget = self._schedule_running(step, budget, self._is_decode)
            budget = self._schedule_running(step, budget, lambda seq: not self._is_decode(seq))
        else:                                   # vLLM v0: the running prefills (then admissions) ...
            budget = self._schedule_running(step, budget, lambda seq: not self._is_decode(seq))
        if step.preempted:
            self._after_preemption()
        else:
            self._admit_waiting(step, budget)
            self.new_token_ratio = max(self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        if self.scheduling == "prefill_first" and not step.seqs:   # ... or, with no prompt to run, decodes
            self._schedule_running(step, budget, self._is_decode)
            if step.preempted:
                self._after_preemption()
        return step

    @staticmethod
    def _is_decode(seq: SeqState) -> bool:
        return bool(seq.output) and seq.num_computed_tokens == len(seq) - 1

    def _cap(self, owed: int, budget: float) -> int:
        threshold = self.long_prefill_token_threshold
        if threshold and owed > threshold:
            owed = threshold
        return int(min(owed, budget))

    def _schedule_running(self, step: ScheduledStep, budget: float, wanted) -> float:
        """Give each running sequence ``wanted`` picks (oldest first) the tokens it owes, within the
        budget. Out of blocks, preempt the newest running sequence not scheduled in this step
        (possibly the one that asked; in vLLM's order those scheduled are all older anyway, in
        decode-first order a newer decode may already be in the batch) and try again."""
        scheduled = {id(s) for s in step.seqs}
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            if id(seq) in scheduled or not wanted(seq):
                i += 1
                continue
            n = self._cap(seq.num_new_tokens, budget)
            if n <= 0:
                i += 1
                continue
            decode = self._is_decode(seq)
            copies = self.block_manager.allocate_slots(seq.seq_id, seq.num_computed_tokens + n)
            if copies is None:                  # out of blocks (vLLM's allocate_slots answers None)
                for victim in self._victims(scheduled):   # not yet scheduled (seq itself, at worst)
                    self.preempt(victim)
                    step.preempted.append(victim)
                i = 0                           # retry from the start: seq, unless it was a victim
                continue
            step.copies += copies
            scheduled.add(id(seq))
            self._computed(step, seq, n, decode)
            budget -= n
            i += 1
        return budget

    def _victims(self, scheduled: set[int]) -> list[SeqState]:
        """Whom to preempt when blocks run out, among the running sequences not scheduled in this step.
        vLLM: the newest. ``"estimated"`` (SGLang's ``retract_decode``): the fewest generated tokens
        first, then the longest prompt; at least one, then more while the free blocks cannot hold
        the next token of every survivor still to be scheduled (never the last one)."""
        candidates = [s for s in self.running if id(s) not in scheduled]
        if self.admission != "estimated":
            return candidates[-1:]
        candidates.sort(key=lambda s: (len(s.output), -len(s.prompt)), reverse=True)   # victims last
        victims = [candidates.pop()]
        free = self.block_manager.num_free_blocks + self._held(victims[0])
        while candidates and len(self.running) - len(victims) > 1 and \
                free < sum(self._next_token_blocks(s) for s in candidates):
            victims.append(candidates.pop())
            free += self._held(victims[-1])
        return victims

    def _next_token_blocks(self, seq: SeqState) -> int:
        """New blocks ``seq`` needs to compute one more token (SGLang's ``check_decode_mem``)."""
        bm = self.block_manager
        return max(0, cdiv(seq.num_computed_tokens + 1, bm.block_size) - len(bm.block_table(seq.seq_id)))

    def _held(self, seq: SeqState) -> int:
        """Blocks freeing ``seq`` would give back (those no other sequence holds)."""
        bm = self.block_manager
        return sum(1 for b in bm.block_table(seq.seq_id) if bm.ref_count(b) == 1)

    def _admit_waiting(self, step: ScheduledStep, budget: float) -> None:
        """Admit from the front of the line while a seat is free, the budget lasts, the policy accepts
        and the blocks for its first chunk can be had now; schedule that chunk."""
        bm = self.block_manager
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            if self.num_seats + seq.num_samples > self.max_num_seqs or not self.can_admit(seq):
                break
            cap = self._cap(len(seq), budget)
            cached = bm.try_allocate(seq.seq_id, seq, commit=False, num_new_tokens=cap, cache_salt=seq.cache_salt,
                                     full_sequence_must_fit=self.scheduler_reserve_full_isl)
            if cached is None:
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            seq.num_cached_tokens = seq.num_computed_tokens = cached
            if seq.num_preemptions:
                self.num_resumed_hit_tokens += cached
            self.running.append(seq)
            self.num_seats += seq.num_samples
            step.admitted.append(seq)
            n = min(len(seq) - cached, cap)
            self._computed(step, seq, n, False)
            budget -= n

    def _computed(self, step: ScheduledStep, seq: SeqState, n: int, decode: bool) -> None:
        """``n`` more tokens of ``seq`` are in this step: after it their K/V is in the cache. The
        blocks they complete enter the prefix cache now, so a request admitted later in this very
        step can hit them: safe because the step is one forward pass in which each layer writes
        every scheduled K/V before it reads (see :mod:`pagedlib.memory.block_manager`)."""
        step.add(seq, n, decode, seq.num_computed_tokens)
        seq.num_computed_tokens += n
        self.block_manager.commit(seq.seq_id, seq.num_computed_tokens, seq)

    def undo(self, step: ScheduledStep) -> None:
        """The step's forward pass failed: take back what :meth:`schedule` did that the pass would
        have made true. Every scheduled sequence still running goes back to wait as if preempted
        (recomputed later, nothing it generated lost), after the prefix-cache blocks it registered
        in this step (their K/V never written) are dropped. Copies already made are harmless."""
        for seq, before in zip(step.seqs, step.computed_before):
            if seq.status is Status.RUNNING and seq.seq_id in self.block_manager:
                self.block_manager.uncommit(seq.seq_id, before)
        for seq in sorted({id(s): s for s in step.seqs}.values(), key=self._age, reverse=True):
            if seq.status is Status.RUNNING:
                self.preempt(seq, count=False)

    def _age(self, seq: SeqState) -> int:
        return self.running.index(seq) if seq in self.running else -1

    # ---- admission policies ------------------------------------------------------------------------
    def can_admit(self, seq: SeqState) -> bool:
        """The admission policy's rule for the head of the waiting line (blocks for its first chunk
        are checked afterwards, by allocating them)."""
        if self.admission == "on_demand":
            return True
        usable = self.block_manager.num_usable_blocks
        if self.admission == "guaranteed":
            return self.reserved_blocks + seq.num_samples * self._blocks_at_most(seq) <= usable
        return self.estimated_blocks + self._estimated_charge(seq) <= usable

    def _estimated_charge(self, seq: SeqState) -> int:
        """``estimated``: SGLang's charge for a newcomer (``PrefillAdder.add_one_req``): the tokens it
        still has to compute (its cached prefix not counted) plus ``min(max_new_tokens, 4096)``, each
        of its samples."""
        bm = self.block_manager
        cached = bm.num_cached_tokens(seq, seq.cache_salt) if bm.enable_prefix_caching else 0
        new = min(max(seq.max_new_tokens - len(seq.output), 1), CLIP_MAX_NEW_TOKENS)
        return seq.num_samples * cdiv(len(seq) - cached + new, bm.block_size)

    def _blocks_at_most(self, seq: SeqState) -> int:
        """Blocks the sequence holds at its longest: prompt + max_new_tokens."""
        return cdiv(len(seq.prompt) + max(seq.max_new_tokens, 1), self.block_manager.block_size)

    @property
    def reserved_blocks(self) -> int:
        """``guaranteed``: blocks promised to the running sequences (each seat its longest)."""
        return sum(s.num_samples * self._blocks_at_most(s) for s in self.running)

    @property
    def estimated_blocks(self) -> int:
        """``estimated``: the running sequences' blocks now plus ``new_token_ratio`` of the tokens
        they may still generate (SGLang's charge)."""
        bs = self.block_manager.block_size
        return sum(s.num_samples * cdiv(len(s) + math.ceil(self.new_token_ratio * min(max(
            0, s.max_new_tokens - len(s.output)), CLIP_MAX_NEW_TOKENS)), bs) for s in self.running)

    def _after_preemption(self) -> None:
        """SGLang's ``retract_decode``: after a retraction, the share of the remaining tokens the
        survivors are expected to use jumps up (what they generated, plus 20 steps each, over their
        maximum)."""
        decoded = sum(len(s.output) for s in self.running)
        total = sum(s.max_new_tokens for s in self.running)
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (total + 1))

    # ---- moving sequences ----------------------------------------------------------------------------
    def preempt(self, seq: SeqState, count: bool = True) -> None:
        """Free a running sequence's blocks and put it first in line, to be recomputed later (its full
        blocks stay in the prefix cache, if it is on)."""
        self._leave(seq)
        seq.status = Status.WAITING
        seq.num_computed_tokens = 0
        if count:
            seq.num_preemptions += 1
            self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def fork(self, parent: SeqState, child: SeqState) -> None:
        """Start ``child`` as a running copy of ``parent`` that shares all its blocks (parallel
        sampling); it takes one of the seats the parent holds for its samples."""
        if parent.num_samples < 2:
            raise ValueError(f"fork: sequence {parent.seq_id!r} holds no seat for another sample "
                             f"(num_samples = {parent.num_samples}); set num_samples before admitting it")
        self.block_manager.fork(parent.seq_id, child.seq_id)
        parent.num_samples -= 1
        child.num_samples = 1
        child.num_computed_tokens = parent.num_computed_tokens
        child.cache_salt = parent.cache_salt
        child.status = Status.RUNNING
        self.running.append(child)

    def abort(self, seq: SeqState) -> None:
        """Drop a sequence now, running or waiting (its request was aborted): its blocks are freed at
        once and it never runs again."""
        if seq.status is Status.RUNNING:
            self._leave(seq)
        elif seq.status is Status.WAITING:
            self.waiting.remove(seq)
        seq.status = Status.FINISHED

    def finish(self, seq: SeqState) -> None:
        """A sequence is done: it leaves the batch and its blocks are freed."""
        self._leave(seq)
        seq.status = Status.FINISHED

    def _leave(self, seq: SeqState) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq.seq_id)
        self.num_seats -= seq.num_samples
