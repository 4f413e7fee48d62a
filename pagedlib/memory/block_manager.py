"""The paged KV cache's bookkeeping: blocks, block tables, ref counts, copy-on-write, prefixes (ch. 4, 6).

The cache is ``num_blocks`` blocks of ``block_size`` token slots each. A sequence owns a *block
table*: the physical block of each of its logical blocks, in order. Token ``i`` of a sequence lives at

    slot = table[i // block_size] * block_size + i % block_size

so its K/V can sit anywhere in the pool, and a sequence grows one block at a time, only when its last
block is full. The manager never touches K/V itself: it hands out block ids and tells the caller where
to write and what to copy.

Sharing. Every block has a *ref count*, the number of block tables that hold it; a block is free when
no live sequence references it. :meth:`BlockManager.fork` gives a child the parent's blocks (parallel
sampling, beam search). Full blocks stay shared for good; before a sequence writes into a shared,
partly filled last block, :meth:`BlockManager.append` moves it to a fresh copy and returns
``[(src, dst)]``: *copy-on-write*, the caller copies the block's K/V first.

Prefix caching (``enable_prefix_caching=True``). Each full block is named by a hash chained on its
parent block's hash and its own token ids, so equal hashes mean equal prefixes. :meth:`allocate`
reuses the longest run of cached full blocks that matches the prompt (checking their token ids too),
but always leaves the last prompt token to be recomputed, since its logits are needed. A freed block
keeps its K/V and its hash until the pool needs it back: free blocks with no cached content are
handed out first, then cached ones, least recently used first (a sequence's tail before its prefix),
so a later request with the same prefix still hits.

When a block enters the cache. Only a *committed* block can be hit. :meth:`commit` registers the
full blocks among a sequence's first ``num_tokens`` tokens, once the caller guarantees that their K/V
exists before any other sequence's attention reads them; :meth:`allocate` commits the whole prompt
unless told not to (``commit=False``), and :meth:`append` only hands out a slot. ``pagedlib``'s
scheduler allocates without committing and commits, as vLLM v1 does, *at scheduling time*: each
scheduled sequence commits the blocks that its tokens of this step complete. That is safe because
the engine runs the whole step as one forward pass in which every layer writes all scheduled tokens'
K/V before its attention reads, so a request admitted in the same step (a chat's next turn, whose
prompt holds the previous answer) reads a block written earlier in that very layer. An engine that
ran a prefill pass before a decode pass would lose that guarantee and would have to commit after the
pass that writes the block instead. A prompt prefilled in chunks over several steps commits only the
blocks its computed chunks cover.

Every operation is O(1) per block: free blocks sit in a deque and an insertion-ordered dict
(an LRU list with O(1) removal), never scanned.

>>> bm = BlockManager(num_blocks=8, block_size=4)
>>> bm.allocate("a", [1, 2, 3, 4, 5])        # 5 tokens: 2 blocks, nothing cached
0
>>> bm.block_table("a"), bm.num_free_blocks
([0, 1], 6)
>>> bm.fork("a", "b"); bm.ref_count(1)
2
>>> bm.append("b", 6)                         # b writes into the shared half-full block: copy it
[(1, 2)]
"""
from __future__ import annotations

import hashlib
import operator
from array import array
from collections import OrderedDict, deque
from typing import Hashable, Sequence

from ..validation import cdiv, positive_int

__all__ = ["BlockManager", "OutOfBlocks"]

_ROOT = b""  # the parent hash of a sequence's first block


class OutOfBlocks(RuntimeError):
    """Not enough free blocks for an operation; it was refused and nothing changed.

    ``needed`` and ``free`` give the numbers. Free a finished sequence, preempt one, or build the
    manager with more blocks.
    """

    def __init__(self, message: str, needed: int, free: int):
        super().__init__(message)
        self.needed = needed
        self.free = free


def block_hash(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
    """Name of a full block: a 128-bit BLAKE2 digest of its parent's name and its token ids.

    Chaining makes the name depend on the whole prefix, so two blocks with the same tokens after
    different prefixes get different names. A strong hash makes an accidental collision (which would
    hand one prompt another prompt's K/V) practically impossible; hits are also checked token by token.
    """
    try:
        data = array("q", token_ids).tobytes()
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"token ids must be integers that fit in 64 bits; got {list(token_ids)!r}") from exc
    return hashlib.blake2b(parent_hash + data, digest_size=16).digest()


class _Seq:
    """A live sequence: its block table, its token ids, the names of its full blocks known so far
    (prefix caching only) and how many of its leading blocks are committed to the prefix cache."""
    __slots__ = ("table", "tokens", "hashes", "num_committed")

    def __init__(self, table: list[int], tokens: list[int], hashes: list[bytes], num_committed: int):
        self.table = table
        self.tokens = tokens
        self.hashes = hashes
        self.num_committed = num_committed


class BlockManager:
    """Hands out KV blocks to sequences and keeps their block tables (modelled on vLLM's).

    ``num_blocks`` blocks of ``block_size`` tokens. With ``enable_prefix_caching`` full blocks are
    shared between sequences whose prompts start alike. Operations that need blocks raise
    :class:`OutOfBlocks` when there are too few and then leave everything unchanged. A sequence id
    that already exists is a ``ValueError``, an unknown one a ``KeyError``.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False):
        self.num_blocks = positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self._ref = [0] * num_blocks
        self._fresh: deque[int] = deque(range(num_blocks))         # free, holding nothing worth keeping
        self._cached_free: OrderedDict[int, None] = OrderedDict()  # free, still cached; LRU first
        self._hash_of: list[bytes | None] = [None] * num_blocks     # name of a block in the cache
        self._tokens_of: list[tuple | None] = [None] * num_blocks   # its token ids, checked on a hit
        self._cache: dict[bytes, int] = {}                          # name -> block id
        self._seqs: dict[Hashable, _Seq] = {}
        self.hit_tokens = 0      # prompt tokens served from the prefix cache
        self.query_tokens = 0    # prompt tokens looked up in the prefix cache
        self.num_copies = 0      # copy-on-write copies handed to callers
        self.num_evictions = 0   # cached blocks whose content was dropped for reuse

    # ---- the contract ------------------------------------------------------------------------
    def allocate(self, seq_id: Hashable, token_ids: Sequence[int], commit: bool = True) -> int:
        """Give a new sequence the blocks for its prompt; return how many leading tokens are cached.

        The return value is a multiple of ``block_size`` and at most ``len(token_ids) - 1`` (always 0
        without prefix caching): the caller computes and writes the K/V of ``token_ids[n_cached:]``
        at their slots. ``commit=True`` enters the prompt's full blocks in the prefix cache at once (the
        caller will write their K/V before any other sequence's attention reads them, as when the
        whole prompt runs in one forward pass); a scheduler that prefills in chunks passes
        ``commit=False`` and calls :meth:`commit` as each chunk is scheduled.
        """
        if seq_id in self._seqs:
            raise ValueError(f"allocate({seq_id!r}): this sequence already has blocks; free it first "
                             "or use a new seq_id")
        tokens = list(token_ids)
        if not tokens:
            raise ValueError(f"allocate({seq_id!r}): token_ids is empty; a prompt needs at least one token")
        hashes, hits = self._match_prefix(tokens)
        n_blocks = cdiv(len(tokens), self.block_size)
        needed = self._blocks_needed(n_blocks, hits)
        if needed > self.num_free_blocks:
            raise OutOfBlocks(
                f"allocate({seq_id!r}): {len(tokens)} tokens need {needed} free blocks but only "
                f"{self.num_free_blocks} of {self.num_blocks} are free; free or preempt a sequence, "
                "or make num_blocks larger", needed, self.num_free_blocks)
        for b in hits:
            self._claim(b)
        table = hits + self._take(n_blocks - len(hits))
        self._seqs[seq_id] = _Seq(table, tokens, hashes, num_committed=len(hits))
        if self.enable_prefix_caching:
            self.query_tokens += len(tokens)
            self.hit_tokens += len(hits) * self.block_size
        if commit:
            self.commit(seq_id, len(tokens))
        return len(hits) * self.block_size

    def append(self, seq_id: Hashable, token_id: int) -> list[tuple[int, int]]:
        """Make room for one more token of a sequence; return the block copies to make first.

        A new block is taken when the last one is full. If the last block is partly filled and
        shared with another sequence, the writer moves to a fresh copy and ``[(src, dst)]`` is
        returned: copy block ``src``'s K/V to ``dst`` before writing the new token. Usually ``[]``.
        """
        seq = self._seq(seq_id, "append")
        if self.enable_prefix_caching:             # it will be hashed when its block is committed
            block_hash(_ROOT, [token_id])
        pos = len(seq.tokens)                      # the new token's position
        copies: list[tuple[int, int]] = []
        if pos % self.block_size == 0:             # last block full (or none): grow by one block
            seq.table.append(self._take_one(seq_id, "append"))
        elif self._ref[seq.table[-1]] > 1:         # shared, partly filled: copy on write
            src = seq.table[-1]
            dst = self._take_one(seq_id, "append")
            self._ref[src] -= 1
            seq.table[-1] = dst
            copies.append((src, dst))
            self.num_copies += 1
        seq.tokens.append(token_id)
        return copies

    def commit(self, seq_id: Hashable, num_tokens: int) -> None:
        """Enter the full blocks among the sequence's first ``num_tokens`` tokens in the prefix cache
        (a no-op without prefix caching, and for blocks committed before); from then on another
        prompt can hit them.

        Call it once their K/V is written, or (the scheduler's way) when they are scheduled into a
        single forward pass that writes every layer's K/V before that layer's attention reads.
        """
        seq = self._seq(seq_id, "commit")
        if not 0 <= num_tokens <= len(seq.tokens):
            raise ValueError(f"commit({seq_id!r}, {num_tokens}): num_tokens must be in "
                             f"[0, {len(seq.tokens)}], the tokens the sequence holds slots for")
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        for i in range(seq.num_committed, num_tokens // bs):
            block_tokens = seq.tokens[i * bs:(i + 1) * bs]
            if i == len(seq.hashes):               # a block filled after allocate: name it now
                seq.hashes.append(block_hash(seq.hashes[-1] if seq.hashes else _ROOT, block_tokens))
            self._register(seq.table[i], seq.hashes[i], block_tokens)
            seq.num_committed = i + 1

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Start ``child_id`` as a copy of ``parent_id`` that shares all its blocks (no K/V is copied)."""
        parent = self._seq(parent_id, "fork")
        if child_id in self._seqs:
            raise ValueError(f"fork({parent_id!r}, {child_id!r}): child_id already exists; "
                             "fork onto a new id")
        for b in parent.table:
            self._ref[b] += 1
        self._seqs[child_id] = _Seq(list(parent.table), list(parent.tokens), list(parent.hashes),
                                    parent.num_committed)

    def free(self, seq_id: Hashable) -> None:
        """Drop a sequence; its blocks no other sequence holds become free (cached ones stay findable)."""
        seq = self._seq(seq_id, "free")
        del self._seqs[seq_id]
        for b in reversed(seq.table):              # tail first: the prefix is evicted last
            self._release(b)

    def block_table(self, seq_id: Hashable) -> list[int]:
        """The physical block of each logical block of the sequence, in order (a copy)."""
        return list(self._seq(seq_id, "block_table").table)

    @property
    def num_free_blocks(self) -> int:
        """Blocks no live sequence references, cached ones included."""
        return len(self._fresh) + len(self._cached_free)

    def ref_count(self, block_id: int) -> int:
        """How many live block tables hold ``block_id``."""
        return self._ref[self._block(block_id)]

    # ---- helpers for schedulers and notebooks --------------------------------------------------
    def can_allocate(self, token_ids: Sequence[int]) -> bool:
        """True if :meth:`allocate` of this prompt would succeed now (cache hits counted).

        An empty prompt is False: :meth:`allocate` refuses it.
        """
        tokens = list(token_ids)
        if not tokens:
            return False
        _, hits = self._match_prefix(tokens)
        return self._blocks_needed(cdiv(len(tokens), self.block_size), hits) <= self.num_free_blocks

    def can_append(self, seq_id: Hashable) -> bool:
        """True if :meth:`append` on this sequence would succeed now."""
        seq = self._seq(seq_id, "can_append")
        pos = len(seq.tokens)
        needs_block = pos % self.block_size == 0 or self._ref[seq.table[-1]] > 1
        return not needs_block or self.num_free_blocks > 0

    def num_tokens(self, seq_id: Hashable) -> int:
        """Tokens the sequence holds slots for."""
        return len(self._seq(seq_id, "num_tokens").tokens)

    def token_ids(self, seq_id: Hashable) -> list[int]:
        """The sequence's token ids (a copy)."""
        return list(self._seq(seq_id, "token_ids").tokens)

    def slot(self, seq_id: Hashable, position: int) -> int:
        """The cache slot of token ``position``: ``table[position // block_size] * block_size + offset``."""
        seq = self._seq(seq_id, "slot")
        if not 0 <= position < len(seq.tokens):
            raise IndexError(f"slot({seq_id!r}, {position}): position must be in [0, {len(seq.tokens)})")
        return seq.table[position // self.block_size] * self.block_size + position % self.block_size

    @property
    def seq_ids(self) -> list[Hashable]:
        """Ids of the live sequences."""
        return list(self._seqs)

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one live sequence."""
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks whose content the prefix cache can hand out (live or free)."""
        return len(self._cache)

    def is_cached(self, block_id: int) -> bool:
        """True if the prefix cache names this block."""
        return self._hash_of[self._block(block_id)] is not None

    def stats(self) -> dict:
        """Counters for the course: blocks used / free / cached, cache hits in tokens, copies, evictions."""
        return {
            "num_blocks": self.num_blocks, "used_blocks": self.num_used_blocks,
            "free_blocks": self.num_free_blocks, "cached_blocks": self.num_cached_blocks,
            "sequences": len(self._seqs), "hit_tokens": self.hit_tokens,
            "query_tokens": self.query_tokens,
            "hit_rate": self.hit_tokens / self.query_tokens if self.query_tokens else 0.0,
            "copies": self.num_copies, "evictions": self.num_evictions,
        }

    def __repr__(self) -> str:
        return (f"BlockManager(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"enable_prefix_caching={self.enable_prefix_caching}: {len(self._seqs)} sequences, "
                f"{self.num_free_blocks} free blocks)")

    # ---- internals -----------------------------------------------------------------------------
    def _seq(self, seq_id: Hashable, op: str) -> _Seq:
        try:
            return self._seqs[seq_id]
        except KeyError:
            raise KeyError(f"{op}({seq_id!r}): no live sequence has this id; allocate it first "
                           f"(live: {len(self._seqs)} sequences)") from None

    def _block(self, block_id: int) -> int:
        """``block_id`` checked: an int in ``[0, num_blocks)`` (a negative one would wrap around)."""
        try:
            index = None if isinstance(block_id, bool) else operator.index(block_id)
        except TypeError:
            index = None
        if index is None or not 0 <= index < self.num_blocks:
            raise ValueError(f"block_id must be an int in [0, {self.num_blocks}); got {block_id!r}")
        return index

    def _blocks_needed(self, n_blocks: int, hits: list[int]) -> int:
        """Free blocks a prompt of ``n_blocks`` blocks takes: the misses, plus the hits now free."""
        return n_blocks - len(hits) + sum(1 for b in hits if self._ref[b] == 0)

    def _match_prefix(self, tokens: list[int]) -> tuple[list[bytes], list[int]]:
        """Names of the prompt's full blocks, and the cached blocks matching its longest prefix."""
        if not self.enable_prefix_caching:
            return [], []
        bs = self.block_size
        hashes, parent = [], _ROOT
        for i in range(len(tokens) // bs):
            parent = block_hash(parent, tokens[i * bs:(i + 1) * bs])
            hashes.append(parent)
        hits = []
        for i in range((len(tokens) - 1) // bs):   # leave the last token to be recomputed
            b = self._cache.get(hashes[i])
            if b is None or self._tokens_of[b] != tuple(tokens[i * bs:(i + 1) * bs]):
                break
            hits.append(b)
        return hashes, hits

    def _claim(self, b: int) -> None:
        """Take a reference to a cached block (moving it out of the free list if it was free)."""
        if self._ref[b] == 0:
            del self._cached_free[b]
        self._ref[b] += 1

    def _take(self, k: int) -> list[int]:
        """``k`` free blocks, ref count 1; the caller has checked there are enough."""
        if len(self._fresh) >= k:
            popleft = self._fresh.popleft
            blocks = [popleft() for _ in range(k)]
        else:
            blocks = [self._pop_free() for _ in range(k)]
        ref = self._ref
        for b in blocks:
            ref[b] = 1
        return blocks

    def _take_one(self, seq_id: Hashable, op: str) -> int:
        if not self._fresh and not self._cached_free:
            raise OutOfBlocks(f"{op}({seq_id!r}): needs 1 free block but all {self.num_blocks} are in "
                              "use; free or preempt a sequence, or make num_blocks larger", 1, 0)
        b = self._pop_free()
        self._ref[b] = 1
        return b

    def _pop_free(self) -> int:
        """A free block: one holding nothing first, else the least recently used cached one."""
        if self._fresh:
            return self._fresh.popleft()
        b, _ = self._cached_free.popitem(last=False)
        del self._cache[self._hash_of[b]]
        self._hash_of[b] = self._tokens_of[b] = None
        self.num_evictions += 1
        return b

    def _release(self, b: int) -> None:
        self._ref[b] -= 1
        if self._ref[b] == 0:
            if self._hash_of[b] is not None:
                self._cached_free[b] = None        # most recently used end
            else:
                self._fresh.append(b)

    def _register(self, b: int, name: bytes, tokens: Sequence[int]) -> None:
        """Enter a full block in the prefix cache, unless a block with the same content already is."""
        if name not in self._cache:
            self._cache[name] = b
            self._hash_of[b] = name
            self._tokens_of[b] = tuple(tokens)
