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

What a hit must match. A block's name is only an index into the cache: a hit is taken only if the
cached block's token ids equal the prompt's *and* its parent is the block just matched (each
registration gets a serial number, and a block records its parent's), so even two prefixes whose
names collide can never be handed each other's K/V: the whole chain is checked, not only the last
block. ``cache_salt`` (per sequence, as vLLM's API has) starts the chain from a different root, so
tenants with different salts never share a block, nor learn from a hit's speed what another tenant
sent. ``prefix_caching_hash`` picks the name: ``"builtin"`` (the default: Python's ``hash`` of the
parent's name and the token tuple, the fastest), ``"blake2"`` (:func:`block_hash`, the 128-bit digest
chapter 7 builds) or ``"sha256"`` (vLLM's default). vLLM needs a strong hash because a hit there is
trusted on its name alone; here a hit is checked, so the name only has to be fast.

When a block enters the cache. Only a *committed* block can be hit. :meth:`commit` registers the
full blocks among a sequence's first ``num_tokens`` tokens, once the caller guarantees that their K/V
exists before any other sequence's attention reads them; the caller passes the token ids, since the
manager keeps no copy of them (the sequence owns its tokens; the manager counts slots). A block is
named only then, when it is full and committed. :meth:`allocate` commits the whole prompt unless told
not to (``commit=False``); :meth:`append` and :meth:`allocate_slots` only hand out slots.
``pagedlib``'s scheduler allocates without committing and commits, as vLLM v1 does, *at scheduling
time*: each scheduled sequence commits the blocks that its tokens of this step complete. That is
safe because the engine runs the whole step as one forward pass in which every layer writes all
scheduled tokens' K/V before its attention reads, so a request admitted in the same step (a chat's
next turn, whose prompt holds the previous answer) reads a block written earlier in that very layer.
If that pass fails, :meth:`uncommit` drops what the step registered but never wrote.

The null block (``null_block=True``, as the engine builds it, and as vLLM v1's ``BlockPool`` does):
block 0 is never handed out, so a padded block-table entry can name it and a kernel that reads a
padded entry reads a block nobody owns.

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
import itertools
import operator
from array import array
from collections import OrderedDict, deque
from typing import Callable, Hashable, Sequence

from ..validation import cdiv, positive_int

__all__ = ["BlockManager", "OutOfBlocks", "block_hash", "HASHES", "NULL_BLOCK"]

_ROOT = b""  # the parent hash of a sequence's first block (no salt)
NULL_BLOCK = 0  # the block padding names when ``null_block=True``


class OutOfBlocks(RuntimeError):
    """Not enough free blocks for an operation; it was refused and nothing changed.

    ``needed`` and ``free`` give the numbers. Free a finished sequence, preempt one, or build the
    manager with more blocks.
    """

    def __init__(self, message: str, needed: int, free: int):
        super().__init__(message)
        self.needed = needed
        self.free = free


def _token_bytes(token_ids: Sequence[int]) -> bytes:
    try:
        return array("q", token_ids).tobytes()
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"token ids must be integers that fit in 64 bits; got {list(token_ids)!r}") from exc


def block_hash(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
    """Name of a full block: a 128-bit BLAKE2 digest of its parent's name and its token ids.

    Chaining makes the name depend on the whole prefix, so two blocks with the same tokens after
    different prefixes get different names. The manager checks every hit's tokens and parent too,
    so even a collision could not hand one prompt another prompt's K/V.
    """
    return hashlib.blake2b(parent_hash + _token_bytes(token_ids), digest_size=16).digest()


def _sha256_hash(parent_hash, token_ids: Sequence[int]) -> bytes:
    return hashlib.sha256(parent_hash + _token_bytes(token_ids)).digest()


def _builtin_hash(parent_hash, token_ids: Sequence[int]) -> int:
    return hash((parent_hash, tuple(token_ids)))


# the names ``prefix_caching_hash`` can pick (a manager looks block_hash up when it is built, so a
# test can swap in a colliding one)
HASHES: dict[str, Callable] = {"blake2": block_hash, "sha256": _sha256_hash, "builtin": _builtin_hash}


class _Seq:
    """A live sequence: its block table, how many token slots it holds, the names of its full blocks
    known so far (prefix caching only), the key of each committed block (the serial number of its
    registration, which the next block names as its parent; ``len(keys)`` blocks are committed) and
    its cache salt. Its token ids live with the caller."""
    __slots__ = ("table", "num_tokens", "hashes", "keys", "salt")

    def __init__(self, table: list[int], num_tokens: int, hashes: list, keys: list, salt: Hashable):
        self.table = table
        self.num_tokens = num_tokens
        self.hashes = hashes
        self.keys = keys
        self.salt = salt


class BlockManager:
    """Hands out KV blocks to sequences and keeps their block tables (modelled on vLLM's).

    ``num_blocks`` blocks of ``block_size`` tokens (with ``null_block`` block 0 is kept out, so
    ``num_blocks - 1`` can be handed out). With ``enable_prefix_caching`` full blocks are shared
    between sequences whose prompts start alike, named by ``prefix_caching_hash``. Operations that
    need blocks raise :class:`OutOfBlocks` when there are too few and then leave everything
    unchanged. A sequence id that already exists is a ``ValueError``, an unknown one a ``KeyError``.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False, *,
                 null_block: bool = False, prefix_caching_hash: str = "builtin"):
        self.num_blocks = positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        if prefix_caching_hash not in HASHES:
            raise ValueError(f"prefix_caching_hash must be one of {sorted(HASHES)}; got {prefix_caching_hash!r}")
        if null_block and num_blocks < 2:
            raise ValueError(f"num_blocks must be at least 2 with null_block=True (block 0 is never "
                             f"handed out); got {num_blocks}")
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.prefix_caching_hash = prefix_caching_hash
        self.null_block: int | None = NULL_BLOCK if null_block else None
        self._hash = block_hash if prefix_caching_hash == "blake2" else HASHES[prefix_caching_hash]
        self._ref = [0] * num_blocks
        first = 1 if null_block else 0
        self._fresh: deque[int] = deque(range(first, num_blocks))   # free, holding nothing worth keeping
        self._cached_free: OrderedDict[int, None] = OrderedDict()  # free, still cached; LRU first
        self._hash_of: list = [None] * num_blocks                  # name of a block in the cache
        self._tokens_of: list[tuple | None] = [None] * num_blocks   # its token ids, checked on a hit
        self._parent_of: list = [None] * num_blocks                # its parent's serial (or salt root)
        self._serial_of: list[int] = [0] * num_blocks              # its registration's serial number
        self._serials = itertools.count(1)
        self._cache: dict = {}                                      # name -> block id
        self._seqs: dict[Hashable, _Seq] = {}
        self.hit_tokens = 0      # prompt tokens served from the prefix cache
        self.query_tokens = 0    # prompt tokens looked up in the prefix cache
        self.num_copies = 0      # copy-on-write copies handed to callers
        self.num_evictions = 0   # cached blocks whose content was dropped for reuse
        # Eviction hook (chapter 13): a function ``on_evict(block_id, name, token_ids)`` called just
        # before a cached block's content is dropped for reuse, while its K/V is still in the block:
        # a second tier (pagedlib.sim.tiers.CpuTier) copies it out here. None: nothing is called.
        self.on_evict: Callable[[int, Hashable, tuple], None] | None = None

    @property
    def num_usable_blocks(self) -> int:
        """Blocks that can ever be handed out (all but the null block)."""
        return self.num_blocks - (self.null_block is not None)

    # ---- the contract ------------------------------------------------------------------------
    def allocate(self, seq_id: Hashable, token_ids: Sequence[int], commit: bool = True, *,
                 num_new_tokens: int | None = None, cache_salt: Hashable = None) -> int:
        """Give a new sequence the blocks for its prompt; return how many leading tokens are cached.

        The return value is a multiple of ``block_size`` and at most ``len(token_ids) - 1`` (always 0
        without prefix caching): the caller computes and writes the K/V of ``token_ids[n_cached:]``
        at their slots. ``num_new_tokens`` (default: all the rest) gives slots for only that many
        tokens after the cached ones, as a scheduler that prefills in chunks does (vLLM v1's
        ``allocate_slots``); :meth:`allocate_slots` grows the table later. ``commit=True`` enters
        the prompt's full blocks in the prefix cache at once (the caller will write their K/V before
        any other sequence's attention reads them); a chunking scheduler passes ``commit=False`` and
        calls :meth:`commit` as each chunk is scheduled. ``cache_salt``: sequences share cached
        blocks only with sequences of the same salt.
        """
        if seq_id in self._seqs:
            raise ValueError(f"allocate({seq_id!r}): this sequence already has blocks; free it first "
                             "or use a new seq_id")
        n = len(token_ids)
        if not n:
            raise ValueError(f"allocate({seq_id!r}): token_ids is empty; a prompt needs at least one token")
        hashes, hits = self._match_prefix(token_ids, cache_salt)
        n_cached = len(hits) * self.block_size
        slots = n if num_new_tokens is None else min(n, n_cached + max(0, num_new_tokens))
        n_blocks = cdiv(slots, self.block_size)
        needed = self._blocks_needed(n_blocks, hits)
        if needed > self.num_free_blocks:
            raise OutOfBlocks(
                f"allocate({seq_id!r}): {slots} tokens need {needed} free blocks but only "
                f"{self.num_free_blocks} of {self.num_usable_blocks} are free; free or preempt a sequence, "
                "or make num_blocks larger", needed, self.num_free_blocks)
        for b in hits:
            self._claim(b)
        table = hits + self._take(n_blocks - len(hits))
        serial_of = self._serial_of
        self._seqs[seq_id] = _Seq(table, slots, hashes, [serial_of[b] for b in hits], cache_salt)
        if self.enable_prefix_caching:
            self.query_tokens += n
            self.hit_tokens += n_cached
        if commit:
            self.commit(seq_id, slots, token_ids)
        return n_cached

    def allocate_slots(self, seq_id: Hashable, num_tokens: int) -> list[tuple[int, int]]:
        """Grow the sequence to hold ``num_tokens`` token slots; return the block copies to make first.

        New blocks are taken as the slots need them. If the first new slot falls in a partly filled
        last block shared with another sequence, the writer moves to a fresh copy and
        ``[(src, dst)]`` is returned: copy block ``src``'s K/V to ``dst`` before writing. Usually ``[]``.
        """
        seq = self._seq(seq_id, "allocate_slots")
        have, bs = seq.num_tokens, self.block_size
        if num_tokens <= have:
            return []
        grow = cdiv(num_tokens, bs) - len(seq.table)
        cow = have % bs != 0 and self._ref[seq.table[-1]] > 1
        needed = grow + cow
        if needed > self.num_free_blocks:
            raise OutOfBlocks(
                f"allocate_slots({seq_id!r}, {num_tokens}): needs {needed} free blocks but "
                f"{'only ' + str(self.num_free_blocks) if self.num_free_blocks else 'none'} of "
                f"{self.num_usable_blocks} are free; free or preempt a sequence, or make num_blocks "
                "larger", needed, self.num_free_blocks)
        copies: list[tuple[int, int]] = []
        if cow:                                    # shared, partly filled: copy on write
            src = seq.table[-1]
            dst = self._take_one()
            self._ref[src] -= 1
            seq.table[-1] = dst
            copies.append((src, dst))
            self.num_copies += 1
        if grow:
            seq.table += self._take(grow)
        seq.num_tokens = num_tokens
        return copies

    def append(self, seq_id: Hashable, token_id: int | None = None) -> list[tuple[int, int]]:
        """Make room for one more token of a sequence; return the block copies to make first.

        ``allocate_slots(seq_id, num_tokens + 1)``: a new block when the last one is full, a copy
        when it is partly filled and shared. ``token_id`` is not stored (the caller owns the tokens
        and passes them to :meth:`commit`); it is accepted so that the lessons can say which token.
        """
        seq = self._seqs.get(seq_id) or self._seq(seq_id, "append")
        have = seq.num_tokens
        if have % self.block_size == 0:            # last block full (or none): grow by one block
            seq.table.append(self._take_one(seq_id, "append"))
        elif self._ref[seq.table[-1]] > 1:         # shared, partly filled: copy on write
            return self.allocate_slots(seq_id, have + 1)
        seq.num_tokens = have + 1                  # usually: a free slot in its last block
        return []

    def commit(self, seq_id: Hashable, num_tokens: int, token_ids: Sequence[int] = ()) -> None:
        """Enter the full blocks among the sequence's first ``num_tokens`` tokens in the prefix cache
        (a no-op without prefix caching, and for blocks committed before); from then on another
        prompt can hit them. ``token_ids``: the sequence's tokens (at least its first
        ``num_tokens``; anything that slices); each newly full block is named from them now.

        Call it once their K/V is written, or (the scheduler's way) when they are scheduled into a
        single forward pass that writes every layer's K/V before that layer's attention reads.
        """
        seq = self._seqs.get(seq_id) or self._seq(seq_id, "commit")
        if not 0 <= num_tokens <= seq.num_tokens:
            raise ValueError(f"commit({seq_id!r}, {num_tokens}): num_tokens must be in "
                             f"[0, {seq.num_tokens}], the tokens the sequence holds slots for")
        bs = self.block_size
        full = num_tokens // bs
        keys = seq.keys
        if full <= len(keys) or not self.enable_prefix_caching:   # usually: no block newly full
            return
        if len(token_ids) < full * bs:
            raise ValueError(f"commit({seq_id!r}, {num_tokens}): token_ids holds {len(token_ids)} tokens; "
                             f"pass the sequence's tokens (at least the first {full * bs})")
        hashes, table = seq.hashes, seq.table
        for i in range(len(keys), full):
            block_tokens = tuple(token_ids[i * bs:(i + 1) * bs])
            if i == len(hashes):                   # a block not named yet: name it now that it is full
                hashes.append(self._hash(hashes[-1] if hashes else self._root(seq.salt), block_tokens))
            keys.append(self._register(table[i], hashes[i], block_tokens,
                                       keys[-1] if keys else self._root_key(seq.salt)))

    def uncommit(self, seq_id: Hashable, num_tokens: int) -> None:
        """Take out of the prefix cache the sequence's committed blocks past its first ``num_tokens``
        tokens (their K/V was never written: the step that would have written it failed)."""
        seq = self._seq(seq_id, "uncommit")
        keep = num_tokens // self.block_size
        for i in range(keep, len(seq.keys)):
            b = seq.table[i]
            name = self._hash_of[b]
            if name is not None and self._cache.get(name) == b:
                del self._cache[name]
                self._hash_of[b] = self._tokens_of[b] = self._parent_of[b] = None
        del seq.keys[keep:]

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Start ``child_id`` as a copy of ``parent_id`` that shares all its blocks (no K/V is copied)."""
        parent = self._seq(parent_id, "fork")
        if child_id in self._seqs:
            raise ValueError(f"fork({parent_id!r}, {child_id!r}): child_id already exists; "
                             "fork onto a new id")
        for b in parent.table:
            self._ref[b] += 1
        self._seqs[child_id] = _Seq(list(parent.table), parent.num_tokens, list(parent.hashes),
                                    list(parent.keys), parent.salt)

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
        """Blocks no live sequence references, cached ones included (never the null block)."""
        return len(self._fresh) + len(self._cached_free)

    def ref_count(self, block_id: int) -> int:
        """How many live block tables hold ``block_id``."""
        return self._ref[self._block(block_id)]

    # ---- helpers for schedulers and notebooks --------------------------------------------------
    def num_cached_tokens(self, token_ids: Sequence[int], cache_salt: Hashable = None) -> int:
        """The leading tokens of this prompt :meth:`allocate` would find in the prefix cache now."""
        if not len(token_ids):
            return 0
        return len(self._match_prefix(token_ids, cache_salt)[1]) * self.block_size

    def block_names(self, token_ids: Sequence[int], cache_salt: Hashable = None) -> list:
        """The prefix cache's names of the full blocks of ``token_ids`` (chained from the salt's root):
        what :attr:`on_evict` hands a second tier, so that it can look a prompt's blocks up."""
        bs, h, parent, names = self.block_size, self._hash, self._root(cache_salt), []
        for i in range(len(token_ids) // bs):
            parent = h(parent, tuple(token_ids[i * bs:(i + 1) * bs]))
            names.append(parent)
        return names

    def can_allocate(self, token_ids: Sequence[int], cache_salt: Hashable = None) -> bool:
        """True if :meth:`allocate` of this prompt would succeed now (cache hits counted).

        An empty prompt is False: :meth:`allocate` refuses it.
        """
        if not len(token_ids):
            return False
        _, hits = self._match_prefix(token_ids, cache_salt)
        return self._blocks_needed(cdiv(len(token_ids), self.block_size), hits) <= self.num_free_blocks

    def can_append(self, seq_id: Hashable) -> bool:
        """True if :meth:`append` on this sequence would succeed now."""
        seq = self._seq(seq_id, "can_append")
        needs_block = seq.num_tokens % self.block_size == 0 or self._ref[seq.table[-1]] > 1
        return not needs_block or self.num_free_blocks > 0

    def blocks_for(self, seq_id: Hashable, num_tokens: int) -> int:
        """Free blocks :meth:`allocate_slots` would take to grow the sequence to ``num_tokens``."""
        seq = self._seq(seq_id, "blocks_for")
        if num_tokens <= seq.num_tokens:
            return 0
        cow = seq.num_tokens % self.block_size != 0 and self._ref[seq.table[-1]] > 1
        return cdiv(num_tokens, self.block_size) - len(seq.table) + cow

    def num_tokens(self, seq_id: Hashable) -> int:
        """Tokens the sequence holds slots for."""
        return self._seq(seq_id, "num_tokens").num_tokens

    def slot(self, seq_id: Hashable, position: int) -> int:
        """The cache slot of token ``position``: ``table[position // block_size] * block_size + offset``."""
        seq = self._seq(seq_id, "slot")
        if not 0 <= position < seq.num_tokens:
            raise IndexError(f"slot({seq_id!r}, {position}): position must be in [0, {seq.num_tokens})")
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
        return self.num_usable_blocks - self.num_free_blocks

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

    def _root(self, salt: Hashable):
        """The parent name of a sequence's first block: salted per tenant."""
        if salt is None:
            return _ROOT if self.prefix_caching_hash != "builtin" else 0
        if self.prefix_caching_hash == "builtin":
            return hash(("salt", salt))
        return hashlib.sha256(repr(salt).encode()).digest()

    @staticmethod
    def _root_key(salt: Hashable) -> tuple:
        """What a first block records as its parent: the salt, so other tenants' chains never match."""
        return ("root", salt)

    def _blocks_needed(self, n_blocks: int, hits: list[int]) -> int:
        """Free blocks a prompt of ``n_blocks`` blocks takes: the misses, plus the hits now free."""
        return n_blocks - len(hits) + sum(1 for b in hits if self._ref[b] == 0)

    def _match_prefix(self, tokens: Sequence[int], salt: Hashable) -> tuple[list, list[int]]:
        """Names of the prompt's leading full blocks up to its first miss (the rest are named when
        committed), and the cached blocks matching its longest prefix. A hit must match its tokens
        and its parent's registration, not only its name."""
        if not self.enable_prefix_caching:
            return [], []
        bs, h, cache = self.block_size, self._hash, self._cache
        tokens_of, parent_of, serial_of = self._tokens_of, self._parent_of, self._serial_of
        hashes, hits, parent, key = [], [], self._root(salt), self._root_key(salt)
        for i in range((len(tokens) - 1) // bs):      # leave the last token to be recomputed
            block = tuple(tokens[i * bs:(i + 1) * bs])
            parent = h(parent, block)
            hashes.append(parent)
            b = cache.get(parent)
            if b is None or parent_of[b] != key or tokens_of[b] != block:
                break
            hits.append(b)
            key = serial_of[b]
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

    def _take_one(self, seq_id: Hashable = None, op: str = "") -> int:
        if not self._fresh and not self._cached_free:
            raise OutOfBlocks(f"{op}({seq_id!r}): needs 1 free block but all {self.num_usable_blocks} are "
                              "in use; free or preempt a sequence, or make num_blocks larger", 1, 0)
        b = self._fresh.popleft() if self._fresh else self._pop_free()
        self._ref[b] = 1
        return b

    def _pop_free(self) -> int:
        """A free block: one holding nothing first, else the least recently used cached one."""
        if self._fresh:
            return self._fresh.popleft()
        b, _ = self._cached_free.popitem(last=False)
        if self.on_evict is not None:
            self.on_evict(b, self._hash_of[b], self._tokens_of[b])
        del self._cache[self._hash_of[b]]
        self._hash_of[b] = self._tokens_of[b] = self._parent_of[b] = None
        self.num_evictions += 1
        return b

    def _release(self, b: int) -> None:
        self._ref[b] -= 1
        if self._ref[b] == 0:
            if self._hash_of[b] is not None:
                self._cached_free[b] = None        # most recently used end
            else:
                self._fresh.append(b)

    def _register(self, b: int, name, tokens: tuple, parent_key) -> object:
        """Enter a full block in the prefix cache, unless a block with the same content already is;
        return the key its child must name as parent (None: the chain is broken by a collision,
        so nothing after it is registered)."""
        if parent_key is None:
            return None
        other = self._cache.get(name)
        if other is None:
            serial = next(self._serials)
            self._cache[name] = b
            self._hash_of[b], self._tokens_of[b], self._parent_of[b] = name, tokens, parent_key
            self._serial_of[b] = serial
            return serial
        if self._tokens_of[other] == tokens and self._parent_of[other] == parent_key:
            return self._serial_of[other]           # the same content, cached in another block
        return None                                  # a different block under the same name
