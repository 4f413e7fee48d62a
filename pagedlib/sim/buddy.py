"""A buddy allocator over a pool of KV slots: the contiguous allocator of the Orca baselines.

A buddy allocator hands out blocks whose size is a power of two, each aligned to its size. A request
for ``n`` slots gets the smallest such block that holds it (so up to half of a block can be wasted:
the allocator's own *rounding*), taken from the smallest free block that is big enough, split in
halves ("buddies") as needed. Freeing a block merges it with its buddy whenever the buddy is free too,
so the pool can become one big block again.

A pool whose size is not a power of two (the paper's 15,728 slots) is cut into power-of-two *arenas*,
largest first: 15,728 = 8,192 + 4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16. Cut this way, every
arena starts at a multiple of its own size, so the usual buddy rule (``buddy = address XOR size``)
works across the whole pool, and a block never merges past the end of its arena.
"""
from __future__ import annotations

from ..memory.capacity import next_pow2


class BuddyAllocator:
    """Power-of-two blocks over ``capacity`` slots; ``alloc(n)`` returns an address or ``None``.

    ``min_block`` (a power of two) is the smallest block handed out; slots past the last multiple of
    ``min_block`` are never used. ``used_slots`` counts whole blocks (the rounding included),
    ``free_slots`` what is left, ``largest_free`` the biggest request that would succeed now.
    """

    def __init__(self, capacity: int, min_block: int = 1):
        if capacity < 1:
            raise ValueError(f"capacity must be a positive number of slots; got {capacity}")
        if min_block < 1 or min_block & (min_block - 1):
            raise ValueError(f"min_block must be a power of two; got {min_block}")
        self.capacity = capacity
        self.min_block = min_block
        self._free: dict[int, set[int]] = {}   # block size -> start addresses of free blocks
        self._used: dict[int, int] = {}        # start address -> block size
        self.arenas = self._cut_into_arenas(capacity - capacity % min_block)
        for start, size in self.arenas:
            self._free.setdefault(size, set()).add(start)

    @staticmethod
    def _cut_into_arenas(slots: int) -> list[tuple[int, int]]:
        """(start, size) of the power-of-two arenas, largest first, that tile ``slots``."""
        arenas, start = [], 0
        for bit in reversed(range(slots.bit_length())):
            if slots >> bit & 1:
                arenas.append((start, 1 << bit))
                start += 1 << bit
        return arenas

    # --- sizes ------------------------------------------------------------------------------------
    def block_for(self, n: int) -> int:
        """The size of the block a request for ``n`` slots gets."""
        return max(self.min_block, next_pow2(n))

    @property
    def largest_block(self) -> int:
        """The biggest block this pool can ever hand out (its largest arena)."""
        return self.arenas[0][1] if self.arenas else 0

    @property
    def used_slots(self) -> int:
        return sum(self._used.values())

    @property
    def free_slots(self) -> int:
        return sum(size * len(starts) for size, starts in self._free.items())

    @property
    def largest_free(self) -> int:
        return max((size for size, starts in self._free.items() if starts), default=0)

    def free_blocks(self) -> list[tuple[int, int]]:
        """(start, size) of every free block, by address: the holes of the pool."""
        return sorted((start, size) for size, starts in self._free.items() for start in starts)

    # --- alloc / free -----------------------------------------------------------------------------
    def alloc(self, n: int) -> int | None:
        """Reserve a block for ``n`` slots; return its start address, or ``None`` if no block fits."""
        if n < 1:
            raise ValueError(f"n must be >= 1 slot; got {n}")
        want = self.block_for(n)
        if want > self.largest_block:
            raise ValueError(f"n={n} needs a block of {want} slots but the largest block of this pool "
                             f"is {self.largest_block}; use a bigger capacity or a smaller request")
        size = min((s for s, starts in self._free.items() if s >= want and starts), default=None)
        if size is None:
            return None
        start = min(self._free[size])
        self._free[size].remove(start)
        while size > want:                      # split, keep the lower half, free the upper buddy
            size //= 2
            self._free.setdefault(size, set()).add(start + size)
        self._used[start] = size
        return start

    def free(self, start: int) -> None:
        """Give back the block at ``start``, merging it with its free buddies."""
        if start not in self._used:
            raise ValueError(f"no block starts at address {start}: it was never allocated or is "
                             "already free")
        size = self._used.pop(start)
        while start ^ size in self._free.get(size, ()):
            self._free[size].remove(start ^ size)
            start = min(start, start ^ size)
            size *= 2
        self._free.setdefault(size, set()).add(start)
