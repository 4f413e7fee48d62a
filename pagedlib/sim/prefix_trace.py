"""Prefix-sharing traces and a replay that counts prefix-cache hits, for two cache designs (ch. 7).

Two seeded, deterministic traces of token ids (no model: a reply is a run of made-up ids):

- :func:`multi_turn_chat`: chat sessions behind one system prompt; turn ``t`` of a session sends the
  system prompt, every earlier user message and reply, and a new message, so each turn's prompt
  starts with the whole previous turn;
- :func:`few_shot`: tasks, each an instruction and an ordered list of worked examples; a request sends
  its task's instruction, the first ``k`` examples (``k`` varies) and a question, so two requests of
  one task share a prefix that ends wherever an example ends, at any token.

:func:`replay` runs a trace through a cache that implements ``allocate`` / ``allocate_slots`` /
``free`` (the course's :class:`~pagedlib.memory.block_manager.BlockManager` through
:class:`HashChainCache`, or :class:`~pagedlib.memory.radix_cache.RadixCache`) with at most
``max_running`` requests live, each holding its prompt and its reply until it finishes (oldest
first). When the pool is short, the oldest running request finishes early. ``policy`` picks the next
waiting request: ``"fcfs"`` (arrival order) or ``"lpm"`` (longest cached prefix first, as SGLang's
cache-aware ``--schedule-policy lpm``). The replay counts prompt tokens looked up, found in the cache
and computed (prefill).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Hashable, Sequence

from ..memory.block_manager import BlockManager, OutOfBlocks
from ..memory.radix_cache import RadixCache
from ..validation import positive_int

__all__ = ["TraceRequest", "multi_turn_chat", "few_shot", "HashChainCache", "make_cache", "replay",
           "ReplayResult", "DESIGNS"]


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: its id, a group (a chat session or a few-shot task), its prompt's
    token ids, the reply it will generate, and the request whose reply its prompt contains (a chat's
    previous turn; it must finish first), if any."""
    rid: int
    group: int
    prompt: tuple[int, ...]
    reply: tuple[int, ...]
    after: int | None = None


MAX_ID = 50_000     # made-up token ids are drawn from 1000 to MAX_ID - 1


def _ids(rng: random.Random, n: int, max_id: int = MAX_ID) -> list[int]:
    return [rng.randrange(1000, max_id) for _ in range(n)]


def multi_turn_chat(seed: int = 0, sessions: int = 24, turns: int = 4, system_len: int = 120,
                    user_len: tuple[int, int] = (10, 40), reply_len: tuple[int, int] = (20, 80),
                    max_id: int = MAX_ID) -> list[TraceRequest]:
    """Chat sessions behind one shared system prompt, their turns interleaved at random (each
    session's turns in order). Turn ``t``'s prompt = system prompt + the earlier turns' messages and
    replies + a new message. Token ids are drawn below ``max_id``: a real model's vocabulary size
    when the trace is fed to a model."""
    rng = random.Random(seed)
    system = _ids(rng, system_len, max_id)
    history = [list(system) for _ in range(sessions)]
    left = [turns] * sessions
    last: list[int | None] = [None] * sessions
    trace: list[TraceRequest] = []
    while any(left):
        s = rng.choice([i for i in range(sessions) if left[i]])
        prompt = history[s] + _ids(rng, rng.randint(*user_len), max_id)
        reply = _ids(rng, rng.randint(*reply_len), max_id)
        trace.append(TraceRequest(len(trace), s, tuple(prompt), tuple(reply), last[s]))
        last[s] = len(trace) - 1
        history[s] = prompt + reply
        left[s] -= 1
    return trace


def few_shot(seed: int = 0, tasks: int = 6, requests: int = 120, instruction_len: tuple[int, int] = (15, 40),
             example_len: tuple[int, int] = (12, 30), max_shots: int = 5,
             question_len: tuple[int, int] = (5, 15), reply_len: tuple[int, int] = (1, 8)
             ) -> list[TraceRequest]:
    """Few-shot prompts: each of ``tasks`` tasks has an instruction and ``max_shots`` worked examples;
    a request picks a task and ``k`` in 1..``max_shots`` at random and sends the instruction, the
    task's first ``k`` examples and a question of its own (short replies, as classification has)."""
    rng = random.Random(seed)
    heads = [_ids(rng, rng.randint(*instruction_len)) for _ in range(tasks)]
    shots = [[_ids(rng, rng.randint(*example_len)) for _ in range(max_shots)] for _ in range(tasks)]
    trace = []
    for rid in range(requests):
        t, k = rng.randrange(tasks), rng.randint(1, max_shots)
        prompt = heads[t] + [tok for ex in shots[t][:k] for tok in ex] + _ids(rng, rng.randint(*question_len))
        trace.append(TraceRequest(rid, t, tuple(prompt), tuple(_ids(rng, rng.randint(*reply_len)))))
    return trace


class HashChainCache:
    """The block manager's prefix cache (a hash chain of full blocks) behind the replay's three calls."""

    def __init__(self, num_blocks: int, block_size: int):
        self.bm = BlockManager(num_blocks, block_size, enable_prefix_caching=True)

    def allocate(self, seq_id: Hashable, token_ids: Sequence[int], num_tokens: int) -> int:
        """Blocks for ``num_tokens`` slots (prompt and reply) after the cached prefix; the prompt's
        full blocks enter the cache. :class:`OutOfBlocks` and no change if they do not fit."""
        bm = self.bm
        hit = bm.allocate(seq_id, token_ids, commit=False)
        if bm.allocate_slots(seq_id, num_tokens) is None:
            bm.free(seq_id)                       # nothing was committed: no trace of the attempt
            bm.query_tokens -= len(token_ids)
            bm.hit_tokens -= hit
            raise OutOfBlocks(f"allocate({seq_id!r}): {num_tokens} slots do not fit", 0, bm.num_free_blocks)
        bm.commit(seq_id, len(token_ids), token_ids)
        return hit

    def free(self, seq_id: Hashable, token_ids: Sequence[int]) -> None:
        """The request finished: its reply's full blocks enter the cache too, then all are freed."""
        self.bm.commit(seq_id, min(len(token_ids), self.bm.num_tokens(seq_id)), token_ids)
        self.bm.free(seq_id)


class _RadixAdapter:
    """:class:`RadixCache` behind the replay's calls (it reserves the reply at admission too)."""

    def __init__(self, num_pages: int, page_size: int, trim_leaves: bool = False):
        self.rc = RadixCache(num_pages, page_size, trim_leaves=trim_leaves)

    def allocate(self, seq_id: Hashable, token_ids: Sequence[int], num_tokens: int) -> int:
        return self.rc.allocate(seq_id, token_ids, num_tokens)

    def free(self, seq_id: Hashable, token_ids: Sequence[int]) -> None:
        self.rc.free(seq_id, token_ids)


#: The designs the chapter compares: a label -> (kind, page or block size).
DESIGNS: dict[str, tuple[str, int]] = {
    "hash chain, blocks of 16": ("hash", 16),
    "radix tree, pages of 16": ("radix", 16),
    "radix tree, pages of 1": ("radix", 1),
}


def make_cache(kind: str, pool_tokens: int, size: int, *, trim_leaves: bool = False):
    """A cache of ``pool_tokens`` token slots: ``"hash"`` (the block manager, blocks of ``size``) or
    ``"radix"`` (the radix tree, pages of ``size``; ``trim_leaves`` as :class:`RadixCache` has it)."""
    if pool_tokens % size:
        raise ValueError(f"pool_tokens must be a multiple of the block size {size}; got {pool_tokens}")
    if kind == "hash":
        return HashChainCache(pool_tokens // size, size)
    if kind == "radix":
        return _RadixAdapter(pool_tokens // size, size, trim_leaves)
    raise ValueError(f"kind must be 'hash' or 'radix'; got {kind!r}")


@dataclass
class ReplayResult:
    """What a replay counted: prompt tokens looked up, found in the cache, and computed."""
    query_tokens: int
    hit_tokens: int
    order: list[int]                  # request ids in the order they were admitted

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0

    @property
    def prefill_tokens(self) -> int:
        return self.query_tokens - self.hit_tokens


def _cached_len(cache, prompt: Sequence[int]) -> int:
    """The prefix of ``prompt`` the cache holds now (for the lpm order), without changing it."""
    if isinstance(cache, HashChainCache):
        return cache.bm.num_cached_tokens(prompt)
    return cache.rc.cached_len(prompt[:len(prompt) - 1])


def replay(trace: Sequence[TraceRequest], cache, max_running: int = 8, policy: str = "fcfs"
           ) -> ReplayResult:
    """Run ``trace`` through ``cache`` (see the module's docstring); return the counts.

    Requests wait in trace order; at most ``max_running`` run, the oldest finishing first when a
    new one needs its place or its memory. ``policy="lpm"`` admits the waiting request with the
    longest cached prefix next (ties: the earliest); a request is never admitted before the one
    named by its ``after`` finished (a chat turn's prompt contains the previous turn's reply).
    """
    positive_int("max_running", max_running)
    if policy not in ("fcfs", "lpm"):
        raise ValueError(f"policy must be 'fcfs' or 'lpm'; got {policy!r}")
    waiting = list(trace)
    running: list[TraceRequest] = []
    finished: set[int] = set()
    query = hit = 0
    order: list[int] = []

    def finish_oldest() -> None:
        r = running.pop(0)
        cache.free(r.rid, r.prompt + r.reply)
        finished.add(r.rid)

    while waiting:
        candidates = [r for r in waiting if r.after is None or r.after in finished]
        if not candidates:
            finish_oldest()
            continue
        if policy == "lpm":
            nxt = max(candidates, key=lambda r: (_cached_len(cache, r.prompt), -r.rid))
        else:
            nxt = candidates[0]
        if len(running) >= max_running:
            finish_oldest()
            continue
        try:
            h = cache.allocate(nxt.rid, nxt.prompt, len(nxt.prompt) + len(nxt.reply))
        except OutOfBlocks as exc:
            if not running:
                raise ValueError(f"request {nxt.rid} needs {len(nxt.prompt) + len(nxt.reply)} token slots "
                                 "but does not fit in the empty pool; give the cache a larger pool") from exc
            finish_oldest()
            continue
        waiting.remove(nxt)
        running.append(nxt)
        order.append(nxt.rid)
        query += len(nxt.prompt)
        hit += h
    while running:
        finish_oldest()
    return ReplayResult(query, hit, order)
