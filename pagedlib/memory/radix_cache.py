"""A radix tree of cached prefixes with LRU leaf eviction, as SGLang's RadixAttention keeps it (ch. 7).

The block manager names each *full block* by a hash chained on its parent's; a prompt hits whole
blocks only. A radix tree instead keys the cache by the token ids themselves: each edge holds a run
of tokens (and the pool pages holding their K/V), shared prefixes share a path, and a lookup walks
down from the root comparing tokens. With ``page_size=1`` a prefix of any length can hit; with a
larger page, keys are cut to whole pages, as the block manager's are.

The pool here has ``num_pages`` pages of ``page_size`` token slots (the same slots as a block
manager's ``num_blocks * block_size`` when the sizes agree). A page is owned by exactly one of: the
free list, one tree node, or one live sequence (its private pages: the part of its tokens not yet
in the tree). A node's pages are freed only when the node is evicted.

The contract, as SGLang's ``RadixCache`` has it (its ``match_prefix``, ``insert``, ``evict``,
``inc_lock_ref`` / ``dec_lock_ref``):

- :meth:`match_prefix` returns the longest cached prefix (whole pages) and the node where it ends,
  splitting an edge if the match ends inside it, and marks the path as used now;
- :meth:`insert` adds a token run and its pages; it returns how many leading tokens were already in
  the tree, whose pages the caller then frees (the tree keeps its own copy);
- a live sequence *locks* the node its prefix ends at: every node on the path gets ``lock_ref += 1``,
  and a node with ``lock_ref > 0`` is never evicted;
- :meth:`evict` frees whole leaves with ``lock_ref == 0``, the least recently used first; a parent
  left childless becomes a leaf in turn. A leaf is freed whole, so eviction can free more than
  asked for: its granularity is a node, not a page (``trim_leaves=True`` frees only what is needed,
  from the end of the last leaf it picks, to measure what that granularity costs).

On top of that, the per-sequence calls the simulator uses, named as the block manager's:
:meth:`allocate` (match, lock, take pages for the rest, enter the prompt in the tree, as SGLang's
``cache_unfinished_req`` does after a prefill), :meth:`allocate_slots` (grow for generated tokens)
and :meth:`free` (enter the whole sequence, free the duplicates and the unaligned tail, unlock: its
``cache_finished_req``). Time is a counter, so replays are deterministic.

>>> rc = RadixCache(num_pages=32, page_size=1)
>>> rc.allocate("a", [1, 2, 3, 4, 5]), rc.allocate("b", [1, 2, 3, 9])
(0, 3)
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Hashable, Sequence

from ..validation import cdiv, positive_int
from .block_manager import OutOfBlocks

__all__ = ["RadixCache", "RadixNode"]


class RadixNode:
    """One edge of the tree and the node below it: ``key`` (its token ids, a whole number of pages),
    ``pages`` (one pool page per ``page_size`` tokens of ``key``), ``children`` (by the first page's
    tokens), ``parent``, ``lock_ref`` (live sequences whose prefix runs through it) and
    ``last_access`` (the tree's clock when a lookup or insert last passed it)."""
    __slots__ = ("key", "pages", "children", "parent", "lock_ref", "last_access")

    def __init__(self, key: tuple = (), pages: list | None = None, parent: RadixNode | None = None):
        self.key = key
        self.pages = pages if pages is not None else []
        self.children: dict[tuple, RadixNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = 0

    def __repr__(self) -> str:
        return f"RadixNode({len(self.key)} tokens, lock_ref={self.lock_ref})"


class _Seq:
    """A live sequence: its pages in order, how many leading pages the tree owns (the rest are
    private), how many token slots it holds, and the node its locked prefix ends at."""
    __slots__ = ("pages", "num_shared", "num_tokens", "node")

    def __init__(self, pages: list[int], num_shared: int, num_tokens: int, node: RadixNode):
        self.pages, self.num_shared, self.num_tokens, self.node = pages, num_shared, num_tokens, node


class RadixCache:
    """A token radix tree over a pool of ``num_pages`` pages of ``page_size`` tokens (SGLang's
    ``RadixCache`` over its token pool). ``allocate`` returns the cached prefix length, a multiple
    of ``page_size`` and at most ``len(prompt) - 1`` (the last prompt token is always computed, for
    its logits), or raises :class:`OutOfBlocks` and changes nothing but access times.

    ``trim_leaves=True`` (not SGLang's rule) makes eviction free a leaf's pages from its end, only as
    many as needed, as a hash chain frees one block at a time, instead of the whole leaf."""

    def __init__(self, num_pages: int, page_size: int = 1, *, trim_leaves: bool = False):
        self.num_pages = positive_int("num_pages", num_pages)
        self.page_size = positive_int("page_size", page_size)
        self.trim_leaves = trim_leaves             # evict a leaf's pages from its end, only as many as needed
        self.root = RadixNode()
        self.root.lock_ref = 1                     # the root is never evicted
        self._free: deque[int] = deque(range(num_pages))
        self._seqs: dict[Hashable, _Seq] = {}
        self._clock = 0
        self.hit_tokens = 0                        # prompt tokens found in the tree
        self.query_tokens = 0                      # prompt tokens looked up
        self.num_evicted_pages = 0                 # pages freed by eviction
        self.num_overevicted_pages = 0             # of those, beyond what was asked (whole leaves)

    # ---- the tree ------------------------------------------------------------------------------
    def _child_key(self, key: Sequence[int]) -> tuple:
        return tuple(key[:self.page_size])

    def _common(self, a: Sequence[int], b: Sequence[int]) -> int:
        """Leading tokens ``a`` and ``b`` share, rounded down to whole pages."""
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n - n % self.page_size

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Cut ``child``'s edge after ``at`` tokens (a page boundary); return the new upper node."""
        pages_at = at // self.page_size
        upper = RadixNode(child.key[:at], child.pages[:pages_at], child.parent)
        upper.lock_ref, upper.last_access = child.lock_ref, child.last_access
        upper.children[self._child_key(child.key[at:])] = child
        child.parent.children[self._child_key(child.key)] = upper
        child.key, child.pages, child.parent = child.key[at:], child.pages[pages_at:], upper
        return upper

    def match_prefix(self, token_ids: Sequence[int]) -> tuple[int, list[int], RadixNode]:
        """The longest cached prefix of ``token_ids`` (whole pages): its length, its pages and the
        node it ends at (an edge is split if the match ends inside it). The path is marked as used."""
        key = tuple(token_ids[:len(token_ids) - len(token_ids) % self.page_size])
        node, matched, pages = self._descend(key)
        return matched, pages, node

    def _descend(self, key: tuple) -> tuple[RadixNode, int, list[int]]:
        """Walk down from the root as far as the tree holds ``key``, marking the path as used and
        splitting the edge the match ends inside: the node reached, the tokens matched, their pages."""
        now = self._tick()
        node, matched, pages = self.root, 0, []
        node.last_access = now
        while matched < len(key):
            child = node.children.get(self._child_key(key[matched:]))
            if child is None:
                break
            child.last_access = now
            n = self._common(child.key, key[matched:])
            if n < len(child.key):
                child = self._split(child, n)
            pages += child.pages
            matched += n
            node = child
        return node, matched, pages

    def insert(self, token_ids: Sequence[int], pages: Sequence[int]) -> int:
        """Enter ``token_ids`` (a whole number of pages) with their ``pages``; return how many
        leading tokens the tree already held. The tree takes the pages past that point; the
        caller still owns (and should free) its pages before it."""
        if len(token_ids) % self.page_size or len(pages) != len(token_ids) // self.page_size:
            raise ValueError(f"insert: token_ids must be whole pages of {self.page_size} tokens with one "
                             f"page each; got {len(token_ids)} tokens and {len(pages)} pages")
        key = tuple(token_ids)
        node, done, _ = self._descend(key)
        if done < len(key):
            leaf = RadixNode(key[done:], list(pages[done // self.page_size:]), node)
            leaf.last_access = node.last_access          # this call's tick, as the path
            node.children[self._child_key(leaf.key)] = leaf
        return done

    def cached_len(self, token_ids: Sequence[int]) -> int:
        """How many leading tokens of ``token_ids`` the tree holds (whole pages), read only: no
        split, no access time (a scheduler's look at the waiting queue)."""
        node, n = self.root, 0
        while n < len(token_ids):
            child = node.children.get(self._child_key(token_ids[n:]))
            if child is None or len(token_ids) - n < self.page_size:
                break
            common = self._common(child.key, token_ids[n:])
            n += common
            if common < len(child.key):
                break
            node = child
        return n

    def lock(self, node: RadixNode) -> None:
        """Protect ``node`` and its ancestors from eviction (a live sequence uses their K/V)."""
        while node is not self.root:
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: RadixNode) -> None:
        """Undo one :meth:`lock` of ``node``."""
        while node is not self.root:
            if node.lock_ref <= 0:
                raise RuntimeError(f"unlock: {node!r} is not locked")
            node.lock_ref -= 1
            node = node.parent

    def evictable_leaves(self) -> list[RadixNode]:
        """Leaves that no live sequence locks: the candidates for eviction."""
        return [n for n in self.nodes() if not n.children and not n.lock_ref]

    def evict(self, num_pages: int) -> int:
        """Free at least ``num_pages`` pages if it can, by removing unlocked leaves, least recently
        used first (a parent left childless joins the candidates); return the pages freed."""
        heap = [(n.last_access, id(n), n) for n in self.evictable_leaves()]
        heapq.heapify(heap)
        freed = 0
        while freed < num_pages and heap:
            _, _, leaf = heapq.heappop(heap)
            keep = len(leaf.pages) - (num_pages - freed)
            if self.trim_leaves and keep > 0:      # cut the leaf's tail, keep its head cached
                self._free.extend(leaf.pages[keep:])
                freed += len(leaf.pages) - keep
                leaf.pages, leaf.key = leaf.pages[:keep], leaf.key[:keep * self.page_size]
                break
            parent = leaf.parent
            del parent.children[self._child_key(leaf.key)]
            self._free.extend(leaf.pages)
            freed += len(leaf.pages)
            if parent is not self.root and not parent.children and not parent.lock_ref:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        self.num_evicted_pages += freed
        self.num_overevicted_pages += max(0, freed - num_pages)
        return freed

    def nodes(self) -> list[RadixNode]:
        """Every node but the root, parents before children."""
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children.values())
        return out

    def describe(self, shown: int = 4) -> list[str]:
        """The tree as text, one line per node (children indented under their parent): its length,
        its first ``shown`` token ids and its lock count."""
        lines = ["root"]

        def walk(node: RadixNode, depth: int) -> None:
            for child in sorted(node.children.values(), key=lambda c: c.key):
                head = " ".join(map(str, child.key[:shown])) + (" ..." if len(child.key) > shown else "")
                lines.append(f"{'  ' * depth}+ {len(child.key)} tokens [{head}]"
                             + (f" lock {child.lock_ref}" if child.lock_ref else ""))
                walk(child, depth + 1)

        walk(self.root, 1)
        return lines

    # ---- sizes ---------------------------------------------------------------------------------
    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def tree_pages(self) -> int:
        """Pages the tree holds (cached K/V, shared or evictable)."""
        return sum(len(n.pages) for n in self.nodes())

    @property
    def evictable_pages(self) -> int:
        """Tree pages no live sequence locks."""
        return sum(len(n.pages) for n in self.nodes() if not n.lock_ref)

    def private_pages(self, seq_id: Hashable) -> int:
        """Pages a live sequence holds that the tree does not own."""
        seq = self._seqs[seq_id]
        return len(seq.pages) - seq.num_shared

    def _take(self, k: int) -> list[int] | None:
        """``k`` free pages, evicting unlocked leaves if needed; ``None`` (nothing evicted) if even
        evicting every unlocked node would not free enough."""
        if k > len(self._free):
            if k > len(self._free) + self.evictable_pages:
                return None
            self.evict(k - len(self._free))
        return [self._free.popleft() for _ in range(k)]

    # ---- per sequence --------------------------------------------------------------------------
    def allocate(self, seq_id: Hashable, token_ids: Sequence[int], num_tokens: int | None = None) -> int:
        """Give a new sequence pages for ``num_tokens`` slots (default: its prompt) after its cached
        prefix; return the prefix length. The prompt enters the tree at once (the caller computes
        its K/V in this step), so later prompts can hit it while this sequence runs."""
        if seq_id in self._seqs:
            raise ValueError(f"allocate({seq_id!r}): this sequence already has pages; free it first")
        n = len(token_ids)
        if not n:
            raise ValueError(f"allocate({seq_id!r}): token_ids is empty; a prompt needs at least one token")
        total = n if num_tokens is None else max(n, num_tokens)
        hit, pages, node = self.match_prefix(token_ids[:n - 1])   # the last token is always computed
        self.lock(node)
        new = self._take(cdiv(total, self.page_size) - len(pages))
        if new is None:
            self.unlock(node)
            free = len(self._free) + self.evictable_pages
            raise OutOfBlocks(f"allocate({seq_id!r}): {total - hit} tokens need more pages than the "
                              f"{free} free or evictable", cdiv(total - hit, self.page_size), free)
        self._seqs[seq_id] = _Seq(pages + new, len(pages), total, node)
        self.query_tokens += n
        self.hit_tokens += hit
        self._cache(seq_id, token_ids)
        return hit

    def allocate_slots(self, seq_id: Hashable, num_tokens: int) -> bool:
        """Grow a sequence to ``num_tokens`` slots; ``False`` (nothing changed) if no page is left."""
        seq = self._seqs[seq_id]
        new = self._take(max(0, cdiv(num_tokens, self.page_size) - len(seq.pages)))
        if new is None:
            return False
        seq.pages += new
        seq.num_tokens = max(seq.num_tokens, num_tokens)
        return True

    def _cache(self, seq_id: Hashable, token_ids: Sequence[int]) -> None:
        """Enter the sequence's whole pages of ``token_ids`` in the tree, hand over its pages, free
        its duplicates of pages the tree already had, and move its lock to the new end."""
        seq = self._seqs[seq_id]
        aligned = len(token_ids) - len(token_ids) % self.page_size
        full = aligned // self.page_size
        if full <= seq.num_shared:
            return
        key = token_ids[:aligned]
        self.insert(key, seq.pages[:full])
        _, tree_pages, node = self.match_prefix(key)
        for i in range(seq.num_shared, full):
            if seq.pages[i] != tree_pages[i]:      # the tree had it already: drop our copy
                self._free.append(seq.pages[i])
                seq.pages[i] = tree_pages[i]
        seq.num_shared = full
        self.lock(node)
        self.unlock(seq.node)
        seq.node = node

    def free(self, seq_id: Hashable, token_ids: Sequence[int]) -> None:
        """A sequence finished: enter its ``token_ids`` (prompt and output, as far as it has
        slots) in the tree, free its unaligned tail and its duplicates, and release its lock."""
        seq = self._seqs[seq_id]
        self._cache(seq_id, token_ids[:seq.num_tokens])
        self._free.extend(seq.pages[seq.num_shared:])
        self.unlock(seq.node)
        del self._seqs[seq_id]

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    def check(self) -> None:
        """Assert the invariants: every page owned once, lock counts equal to the live sequences
        below each node, keys in whole pages with one page each."""
        owners = list(self._free)
        for node in self.nodes():
            assert len(node.key) % self.page_size == 0 and len(node.key) > 0, node
            assert len(node.pages) == len(node.key) // self.page_size, node
            assert node.parent.children[self._child_key(node.key)] is node, node
            owners += node.pages
        for seq in self._seqs.values():
            owners += seq.pages[seq.num_shared:]
        assert sorted(owners) == list(range(self.num_pages)), "a page is lost or owned twice"
        locks: dict[int, int] = {}
        for seq in self._seqs.values():
            node = seq.node
            while node is not self.root:
                locks[id(node)] = locks.get(id(node), 0) + 1
                node = node.parent
        for node in self.nodes():
            assert node.lock_ref == locks.get(id(node), 0), (node, locks.get(id(node), 0))
