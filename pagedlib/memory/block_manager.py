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
keeps its K/V and its hash until the pool needs it back. The free blocks wait in vLLM v1's order
(``BlockPool.free_blocks``): blocks with no cached content first, the most recently freed first (a
freed sequence's uncached blocks go to the front, its tail block first); then the blocks never used;
then cached ones, least recently used first (a sequence's tail before its prefix), so a later request
with the same prefix still hits. :meth:`BlockManager.free_block_ids` lists them in that order.

Duplicates. Two sequences can compute the same block in blocks of their own (chunked prefill: B hits
A's first chunk and commits the second before A computes it again). As in vLLM (whose
``BlockHashToBlockMap`` keeps every copy, "so that block tables are append-only"), both copies are
cached and both serve hits; evicting one keeps the other, and the blocks after either one stay
reachable.

What a hit must match. A block's name is only an index into the cache: a hit is taken only if the
cached block's token ids equal the prompt's *and* its parent is the block just matched (each
content gets a serial number when its first copy is registered, every copy carries it, and a block
records its parent's), so even two prefixes whose names collide can never be handed each other's K/V:
the whole chain is checked, not only the last block. Blocks whose names collide are all kept, side by
side, so a collision (or a cached block whose parent was evicted) never stops a later chain from
being registered. ``cache_salt`` (per sequence, as vLLM's API has) starts the chain from a different root, so
tenants with different salts never share a block, nor learn from a hit's speed what another tenant
sent. ``prefix_caching_hash`` picks the name: ``"builtin"`` (the default: Python's ``hash`` of the
parent's name and the token tuple, the fastest), ``"blake2"`` (:func:`block_hash`, the 128-bit digest
chapter 7 builds), ``"sha256"`` (vLLM's default), or any function ``(parent_name, token_ids) -> name``
(a test passes one that collides). vLLM needs a strong hash because a hit there is
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

Each block is a :class:`Block` record (its id, ref count, and, once cached, its name, tokens, parent
and serial). Every operation is O(1) per block: free blocks sit in a deque and an insertion-ordered
dict (an LRU list with O(1) removal), never scanned.

>>> bm = BlockManager(num_blocks=8, block_size=4)
>>> bm.allocate("a", [1, 2, 3, 4, 5])        # 5 tokens: 2 blocks, nothing cached
0
>>> bm.block_table("a"), bm.num_free_blocks
([0, 1], 6)
>>> bm.fork("a", "b"); bm.ref_count(1)
2
>>> bm.append("b")                            # b writes into the shared half-full block: copy it
[(1, 2)]
"""
from __future__ import annotations

import hashlib
import itertools
import sys
import warnings
from array import array
from collections import OrderedDict, deque
from typing import Callable, Hashable, Sequence

from ..validation import as_int, cdiv, positive_int

__all__ = ["BlockManager", "Block", "OutOfBlocks", "block_hash", "HASHES", "NULL_BLOCK"]

_ROOT = b""  # the parent hash of a sequence's first block (no salt)
NULL_BLOCK = 0  # the block padding names when ``null_block=True``
_NEVER = sys.maxsize  # a token count no sequence reaches (commit_at without prefix caching)


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


# the names ``prefix_caching_hash`` can pick; a function ``(parent_name, token_ids) -> name`` can be
# passed instead
HASHES: dict[str, Callable] = {"blake2": block_hash, "sha256": _sha256_hash, "builtin": _builtin_hash}


class Block:
    """One KV block's facts (nano-vllm's ``Block``, vLLM's ``KVCacheBlock``): its id, how many block
    tables hold it, and, while the prefix cache names it, its ``name``, ``tokens`` (checked on a
    hit), ``parent`` (the serial of its parent's content, or the salted root) and ``serial`` (the
    number of its content, shared by every cached copy of it; the next block names it as parent)."""
    __slots__ = ("block_id", "ref_count", "name", "tokens", "parent", "serial")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_count = 0
        self.reset()

    def reset(self) -> None:
        """Forget the cached content (the block is evicted or its registration undone)."""
        self.name = self.tokens = self.parent = None
        self.serial = 0

    def __repr__(self) -> str:
        cached = f", cached as {self.name!r}" if self.name is not None else ""
        return f"Block({self.block_id}, ref_count={self.ref_count}{cached})"


class _Seq:
    """A live sequence: its block table (block ids), how many token slots it holds, the names of its
    full blocks known so far (prefix caching only), the serial of each committed block's content
    (which the next block names as its parent; ``len(keys)`` blocks are committed) and its cache
    salt. Its token ids live with the caller."""
    __slots__ = ("table", "num_tokens", "hashes", "keys", "salt", "commit_at")

    def __init__(self, table: list[int], num_tokens: int, hashes: list, keys: list, salt: Hashable,
                 commit_at: int):
        self.table = table
        self.num_tokens = num_tokens
        self.hashes = hashes
        self.keys = keys
        self.salt = salt
        self.commit_at = commit_at     # commit has a block to register from this many tokens on


class BlockManager:
    """Hands out KV blocks to sequences and keeps their block tables (modelled on vLLM v1's
    ``BlockPool`` and ``KVCacheManager``).

    ``num_blocks`` blocks of ``block_size`` tokens (with ``null_block`` block 0 is kept out, so
    ``num_blocks - 1`` can be handed out). With ``enable_prefix_caching`` full blocks are shared
    between sequences whose prompts start alike, named by ``prefix_caching_hash`` (a name in
    :data:`HASHES` or a function). Operations that need blocks raise :class:`OutOfBlocks` when there
    are too few and then leave everything unchanged, except :meth:`allocate_slots`, which a
    scheduler calls in its hot loop: it returns ``None`` (as vLLM's does). A sequence id that already
    exists is a ``ValueError``, an unknown one a ``KeyError``.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = False, *,
                 null_block: bool = False, prefix_caching_hash: str | Callable = "builtin"):
        self.num_blocks = positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        if callable(prefix_caching_hash):
            self._hash = prefix_caching_hash
        elif prefix_caching_hash in HASHES:
            self._hash = HASHES[prefix_caching_hash]
        else:
            raise ValueError(f"prefix_caching_hash must be one of {sorted(HASHES)} or a function "
                             f"(parent_name, token_ids) -> name; got {prefix_caching_hash!r}")
        if null_block and num_blocks < 2:
            raise ValueError(f"num_blocks must be at least 2 with null_block=True (block 0 is never "
                             f"handed out); got {num_blocks}")
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.prefix_caching_hash = prefix_caching_hash
        self.null_block: int | None = NULL_BLOCK if null_block else None
        self.blocks = [Block(i) for i in range(num_blocks)]
        first = 1 if null_block else 0
        self._fresh: deque[int] = deque(range(first, num_blocks))   # free, holding nothing worth keeping
        self._cached_free: OrderedDict[int, None] = OrderedDict()  # free, still cached; LRU first
        # name -> the Block cached under it, or {block_id: Block} when several are (copies of one
        # content, or contents whose names collide), oldest first
        self._cache: dict = {}
        self._serials = itertools.count(1)
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
                 num_new_tokens: int | None = None, cache_salt: Hashable = None,
                 full_sequence_must_fit: bool = False) -> int:
        """Give a new sequence the blocks for its prompt; return how many leading tokens are cached.
        :class:`OutOfBlocks` (nothing changed) when the blocks are not free: :meth:`try_allocate`
        answers ``None`` instead, as a scheduler wants.

        The return value is a multiple of ``block_size`` and at most ``len(token_ids) - 1`` (always 0
        without prefix caching): the caller computes and writes the K/V of ``token_ids[n_cached:]``
        at their slots. ``num_new_tokens`` (default: all the rest) gives slots for only that many
        tokens after the cached ones, as a scheduler that prefills in chunks does (vLLM v1's
        ``allocate_slots``); :meth:`allocate_slots` grows the table later. ``full_sequence_must_fit``
        (vLLM's name, since vllm#37307): refuse unless the blocks for *all* of ``token_ids`` (net of
        cache hits) are free now, although only those for the first chunk are taken. ``commit=True``
        enters the prompt's full blocks in the prefix cache at once (the caller will write their K/V
        before any other sequence's attention reads them); a chunking scheduler passes
        ``commit=False`` and calls :meth:`commit` as each chunk is scheduled. ``cache_salt``:
        sequences share cached blocks only with sequences of the same salt.
        """
        n_cached = self.try_allocate(seq_id, token_ids, commit, num_new_tokens=num_new_tokens,
                                     cache_salt=cache_salt, full_sequence_must_fit=full_sequence_must_fit)
        if n_cached is None:                        # refused: by how much, for the message
            n = len(token_ids)
            _, _, slots, needed = self._demand(token_ids, cache_salt, num_new_tokens, full_sequence_must_fit)
            what = f"all {n} tokens (full_sequence_must_fit)" if full_sequence_must_fit else f"{slots} tokens"
            raise OutOfBlocks(
                f"allocate({seq_id!r}): {what} need {needed} free blocks but only "
                f"{self.num_free_blocks} of {self.num_usable_blocks} are free; free or preempt a sequence, "
                "or make num_blocks larger", needed, self.num_free_blocks)
        return n_cached

    def try_allocate(self, seq_id: Hashable, token_ids: Sequence[int], commit: bool = True, *,
                     num_new_tokens: int | None = None, cache_salt: Hashable = None,
                     full_sequence_must_fit: bool = False) -> int | None:
        """:meth:`allocate`, or ``None`` and nothing changed when the blocks are not free now (vLLM's
        ``allocate_slots`` answers a waiting request the same way: the scheduler stops admitting)."""
        if seq_id in self._seqs:
            raise ValueError(f"allocate({seq_id!r}): this sequence already has blocks; free it first "
                             "or use a new seq_id")
        n = len(token_ids)
        if not n:
            raise ValueError(f"allocate({seq_id!r}): token_ids is empty; a prompt needs at least one token")
        hashes, hits, slots, needed = self._demand(token_ids, cache_salt, num_new_tokens, full_sequence_must_fit)
        if needed > self.num_free_blocks:
            return None
        n_cached = len(hits) * self.block_size
        for b in hits:
            self._claim(b)
        table = [b.block_id for b in hits] + self._take(cdiv(slots, self.block_size) - len(hits))
        self._seqs[seq_id] = _Seq(table, slots, hashes, [b.serial for b in hits], cache_salt,
                                  self._commit_at(len(hits)))
        if self.enable_prefix_caching:
            self.query_tokens += n
            self.hit_tokens += n_cached
        if commit:
            self.commit(seq_id, slots, token_ids)
        return n_cached

    def allocate_slots(self, seq_id: Hashable, num_tokens: int) -> list[tuple[int, int]] | None:
        """Grow the sequence to hold ``num_tokens`` token slots; return the block copies to make
        first, or ``None`` if there are not enough free blocks (nothing changed; vLLM's
        ``allocate_slots`` answers the same way, so a scheduler can preempt and try again).

        New blocks are taken as the slots need them. If the first new slot falls in a partly filled
        last block shared with another sequence, the writer moves to a fresh copy and
        ``[(src, dst)]`` is returned: copy block ``src``'s K/V to ``dst`` before writing. Usually ``[]``.
        """
        seq = self._seq(seq_id, "allocate_slots")
        have, bs = seq.num_tokens, self.block_size
        if num_tokens <= have:
            return []
        grow = cdiv(num_tokens, bs) - len(seq.table)
        cow = have % bs != 0 and self.blocks[seq.table[-1]].ref_count > 1
        if grow + cow > len(self._fresh) + len(self._cached_free):
            return None
        copies: list[tuple[int, int]] = []
        if cow:                                    # shared, partly filled: copy on write
            src = seq.table[-1]
            dst = self._take(1)[0]
            self.blocks[src].ref_count -= 1
            seq.table[-1] = dst
            copies.append((src, dst))
            self.num_copies += 1
        if grow:
            seq.table += self._take(grow)
        seq.num_tokens = num_tokens
        return copies

    def append(self, seq_id: Hashable, token_id: None = None) -> list[tuple[int, int]]:
        """Make room for one more token of a sequence; return the block copies to make first.

        ``allocate_slots(seq_id, num_tokens + 1)``: a new block when the last one is full, a copy
        when it is partly filled and shared; :class:`OutOfBlocks` if no block is free. The block
        manager keeps no tokens (the caller owns them and passes them to :meth:`commit`), so it takes
        none: ``token_id``, the old form's token, is deprecated (it still works, and warns).
        """
        if token_id is not None:
            warnings.warn("BlockManager.append(seq_id, token): the token is not used and the argument "
                          "will go; call append(seq_id), and pass the tokens to commit()",
                          DeprecationWarning, stacklevel=2)
        seq = self._seqs.get(seq_id) or self._seq(seq_id, "append")
        have = seq.num_tokens
        if have % self.block_size == 0:            # last block full (or none): grow by one block
            fresh = self._fresh
            if fresh:                              # usually: an uncached free block
                b = fresh.popleft()
                self.blocks[b].ref_count = 1
                seq.table.append(b)
            elif self._cached_free:
                seq.table += self._take(1)
            else:
                raise self._out_of_blocks(seq_id, "append")
        elif self.blocks[seq.table[-1]].ref_count > 1:   # shared, partly filled: copy on write
            copies = self.allocate_slots(seq_id, have + 1)
            if copies is None:
                raise self._out_of_blocks(seq_id, "append")
            return copies
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
        if num_tokens < seq.commit_at:             # usually: no block newly full
            return
        bs = self.block_size
        full = num_tokens // bs
        keys = seq.keys
        if len(token_ids) < full * bs:
            raise ValueError(f"commit({seq_id!r}, {num_tokens}): token_ids holds {len(token_ids)} tokens; "
                             f"pass the sequence's tokens (at least the first {full * bs})")
        hashes, table, blocks = seq.hashes, seq.table, self.blocks
        parent = keys[-1] if keys else self._root_key(seq.salt)
        for i in range(len(keys), full):
            block_tokens = tuple(token_ids[i * bs:(i + 1) * bs])
            if i == len(hashes):                   # a block not named yet: name it now that it is full
                hashes.append(self._hash(hashes[-1] if hashes else self._root(seq.salt), block_tokens))
            parent = self._register(blocks[table[i]], hashes[i], block_tokens, parent)
            keys.append(parent)
        seq.commit_at = self._commit_at(full)

    def uncommit(self, seq_id: Hashable, num_tokens: int) -> None:
        """Take out of the prefix cache the sequence's committed blocks past its first ``num_tokens``
        tokens (their K/V was never written: the step that would have written it failed)."""
        seq = self._seq(seq_id, "uncommit")
        keep = num_tokens // self.block_size
        for i in range(keep, len(seq.keys)):
            block = self.blocks[seq.table[i]]
            if block.name is not None:
                self._uncache(block)
        del seq.keys[keep:]
        seq.commit_at = self._commit_at(len(seq.keys))

    def fork(self, parent_id: Hashable, child_id: Hashable) -> None:
        """Start ``child_id`` as a copy of ``parent_id`` that shares all its blocks (no K/V is copied)."""
        parent = self._seq(parent_id, "fork")
        if child_id in self._seqs:
            raise ValueError(f"fork({parent_id!r}, {child_id!r}): child_id already exists; "
                             "fork onto a new id")
        blocks = self.blocks
        for b in parent.table:
            blocks[b].ref_count += 1
        self._seqs[child_id] = _Seq(list(parent.table), parent.num_tokens, list(parent.hashes),
                                    list(parent.keys), parent.salt, parent.commit_at)

    def free(self, seq_id: Hashable) -> None:
        """Drop a sequence; its blocks no other sequence holds become free (cached ones stay findable).

        In vLLM's order: its uncached blocks go to the front of the free blocks (reused first, its
        tail first), its cached ones to the back of the LRU list (its tail evicted before its prefix).
        """
        seq = self._seq(seq_id, "free")
        del self._seqs[seq_id]
        blocks, lru, uncached = self.blocks, self._cached_free, []
        for b in reversed(seq.table):              # tail first: the prefix is evicted last
            block = blocks[b]
            block.ref_count -= 1
            if not block.ref_count:
                if block.name is None:
                    uncached.append(b)
                else:
                    lru[b] = None                  # most recently used end
        if uncached:
            self._fresh.extendleft(reversed(uncached))   # the tail block ends up first

    def block_table(self, seq_id: Hashable) -> list[int]:
        """The physical block of each logical block of the sequence, in order (a copy)."""
        return list(self._seq(seq_id, "block_table").table)

    @property
    def num_free_blocks(self) -> int:
        """Blocks no live sequence references, cached ones included (never the null block)."""
        return len(self._fresh) + len(self._cached_free)

    def free_block_ids(self) -> list[int]:
        """The free blocks in the order they will be handed out (vLLM's free block queue)."""
        return list(self._fresh) + list(self._cached_free)

    def ref_count(self, block_id: int) -> int:
        """How many live block tables hold ``block_id``."""
        return self.blocks[self._block(block_id)].ref_count

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (weights changed, or a benchmark starts cold); refused, with
        ``False``, while a live sequence holds blocks (as vLLM's ``reset_prefix_cache``)."""
        if self._seqs:
            return False
        for b in self._cached_free:
            self.blocks[b].reset()
        self._fresh.extend(self._cached_free)
        self._cached_free.clear()
        self._cache.clear()
        return True

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
        needs_block = seq.num_tokens % self.block_size == 0 or self.blocks[seq.table[-1]].ref_count > 1
        return not needs_block or self.num_free_blocks > 0

    def num_blocks_to_allocate(self, seq_id: Hashable, num_tokens: int) -> int:
        """Free blocks :meth:`allocate_slots` would take to grow the sequence to ``num_tokens`` (vLLM's
        ``get_num_blocks_to_allocate``; :func:`pagedlib.memory.capacity.blocks_for` counts the blocks
        that ``num_tokens`` tokens fill)."""
        seq = self._seq(seq_id, "num_blocks_to_allocate")
        if num_tokens <= seq.num_tokens:
            return 0
        cow = seq.num_tokens % self.block_size != 0 and self.blocks[seq.table[-1]].ref_count > 1
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
        """Blocks whose content the prefix cache can hand out (live or free), every copy counted."""
        return sum(1 if isinstance(v, Block) else len(v) for v in self._cache.values())

    def is_cached(self, block_id: int) -> bool:
        """True if the prefix cache names this block."""
        return self.blocks[self._block(block_id)].name is not None

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
        index = as_int(block_id)
        if index is None or not 0 <= index < self.num_blocks:
            raise ValueError(f"block_id must be an int in [0, {self.num_blocks}); got {block_id!r}")
        return index

    def _out_of_blocks(self, seq_id: Hashable, op: str) -> OutOfBlocks:
        return OutOfBlocks(f"{op}({seq_id!r}): needs 1 free block but all {self.num_usable_blocks} are "
                           "in use; free or preempt a sequence, or make num_blocks larger", 1, 0)

    def _commit_at(self, committed: int) -> int:
        """The token count from which :meth:`commit` has a block to register, ``committed`` blocks
        in (never without prefix caching)."""
        return (committed + 1) * self.block_size if self.enable_prefix_caching else _NEVER

    def _root(self, salt: Hashable):
        """The parent name of a sequence's first block: salted per tenant."""
        builtin = self.prefix_caching_hash == "builtin"
        if salt is None:
            return 0 if builtin else _ROOT
        return hash(("salt", salt)) if builtin else hashlib.sha256(repr(salt).encode()).digest()

    @staticmethod
    def _root_key(salt: Hashable) -> tuple:
        """What a first block records as its parent: the salt, so other tenants' chains never match."""
        return ("root", salt)

    def _demand(self, token_ids: Sequence[int], salt: Hashable, num_new_tokens: int | None,
                full_sequence_must_fit: bool) -> tuple[list, list[Block], int, int]:
        """What allocating this prompt asks for: its block names and cache hits, the token slots it
        gets now (the hits plus ``num_new_tokens``, or all), and the free blocks that takes (for the
        whole prompt with ``full_sequence_must_fit``). Changes nothing."""
        n = len(token_ids)
        hashes, hits = self._match_prefix(token_ids, salt)
        slots = n if num_new_tokens is None else min(n, len(hits) * self.block_size + max(0, num_new_tokens))
        needed = self._blocks_needed(cdiv(n if full_sequence_must_fit else slots, self.block_size), hits)
        return hashes, hits, slots, needed

    def _blocks_needed(self, n_blocks: int, hits: list[Block]) -> int:
        """Free blocks a prompt of ``n_blocks`` blocks takes: the misses, plus the hits now free."""
        return n_blocks - len(hits) + sum(1 for b in hits if not b.ref_count)

    def _lookup(self, name, tokens: tuple, parent) -> Block | None:
        """The first cached block under ``name`` holding exactly ``tokens`` after ``parent``."""
        found = self._cache.get(name)
        if found is None:
            return None
        if isinstance(found, Block):
            return found if found.parent == parent and found.tokens == tokens else None
        for block in found.values():
            if block.parent == parent and block.tokens == tokens:
                return block
        return None

    def _match_prefix(self, tokens: Sequence[int], salt: Hashable) -> tuple[list, list[Block]]:
        """Names of the prompt's leading full blocks up to its first miss (the rest are named when
        committed), and the cached blocks matching its longest prefix. A hit must match its tokens
        and its parent's content, not only its name."""
        if not self.enable_prefix_caching:
            return [], []
        bs, h, cache = self.block_size, self._hash, self._cache
        hashes, hits, parent, key = [], [], self._root(salt), self._root_key(salt)
        for i in range((len(tokens) - 1) // bs):      # leave the last token to be recomputed
            block = tuple(tokens[i * bs:(i + 1) * bs])
            parent = h(parent, block)
            hashes.append(parent)
            hit = cache.get(parent)
            if hit is None:
                break
            if type(hit) is not Block:                # several blocks under this name
                hit = self._lookup(parent, block, key)
                if hit is None:
                    break
            elif hit.parent != key or hit.tokens != block:
                break
            hits.append(hit)
            key = hit.serial
        return hashes, hits

    def _claim(self, block: Block) -> None:
        """Take a reference to a cached block (moving it out of the free list if it was free)."""
        if not block.ref_count:
            del self._cached_free[block.block_id]
        block.ref_count += 1

    def _take(self, k: int) -> list[int]:
        """``k`` free blocks, ref count 1: uncached ones first, then the least recently used cached
        ones (evicted); the caller has checked there are enough."""
        fresh, blocks = self._fresh, self.blocks
        if len(fresh) >= k:
            popleft = fresh.popleft
            taken = [popleft() for _ in range(k)]
        else:
            taken = list(fresh)
            fresh.clear()
            lru = self._cached_free
            for _ in range(k - len(taken)):
                b, _ = lru.popitem(last=False)
                if self.on_evict is not None:        # e.g. a second tier keeps the block's K/V
                    self.on_evict(b, blocks[b].name, blocks[b].tokens)
                self._uncache(blocks[b])
                self.num_evictions += 1
                taken.append(b)
        for b in taken:
            blocks[b].ref_count = 1
        return taken

    def _uncache(self, block: Block) -> None:
        """Take one block out of the prefix cache; other copies of its content stay cached."""
        name = block.name
        found = self._cache[name]
        if found is block:
            del self._cache[name]
        else:
            del found[block.block_id]
            if len(found) == 1:
                (self._cache[name],) = found.values()
        block.reset()

    def _register(self, block: Block, name, tokens: tuple, parent) -> int:
        """Enter a full block in the prefix cache under ``name``; return the serial of its content,
        which its child names as parent. A copy of content already cached takes that content's
        serial; every copy is kept (vLLM does not de-duplicate either), and so are blocks whose names
        collide."""
        if block.name is not None:                  # a hit being committed again: nothing new
            return block.serial
        block.name, block.tokens, block.parent = name, tokens, parent
        found = self._cache.get(name)
        if found is None:                           # usually: a name not cached yet
            block.serial = next(self._serials)
            self._cache[name] = block
            return block.serial
        twin = self._lookup(name, tokens, parent)
        block.serial = twin.serial if twin is not None else next(self._serials)
        if isinstance(found, Block):
            self._cache[name] = {found.block_id: found, block.block_id: block}
        else:
            found[block.block_id] = block
        return block.serial
