"""vLLM's policy: fixed-size pages allocated on demand, preemption (by recompute) when they run out.

Any free page serves any request, so the pool is just a count of free pages: there is no external
fragmentation to simulate, only the unused tail of each request's last page. Admission follows vLLM:
the request at the head of the queue is admitted if its tokens so far fit and at least a
``watermark`` share of the pages stays free (room for the running requests to grow). When a running
request needs a page and none is free, the loop preempts the newest request: its pages are freed and
it is recomputed later from its prompt plus the tokens it had generated.
"""
from __future__ import annotations

from ..memory.capacity import blocks_for
from .request import SimRequest


class PagedPool:
    """``kv_slots // block_size`` pages; requests hold whole pages, taken one at a time.

    Accounting (kept up to date for the meter): ``held`` slots are in pages given to requests,
    ``reserved`` is the same number (a page is the unit of reservation), ``useful`` the part of those
    pages that their requests will fill before they finish.
    """

    def __init__(self, kv_slots: int, block_size: int = 16, watermark: float = 0.01):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1 slot; got {block_size}")
        if not 0 <= watermark < 1:
            raise ValueError(f"watermark must be a share of the pages in [0, 1); got {watermark}")
        self.kv_slots, self.block_size = kv_slots, block_size
        self.num_blocks = kv_slots // block_size
        self.free_blocks = self.num_blocks
        self.watermark_blocks = int(watermark * self.num_blocks)
        self.held = self.reserved = self.useful = 0

    def check(self, r: SimRequest) -> None:
        """Raise a ValueError if ``r`` could never run under this pool."""
        pages = blocks_for(r.need, self.block_size)
        if pages > self.num_blocks - self.watermark_blocks:
            raise ValueError(f"request {r.rid} needs {pages} pages of {self.block_size} slots but the "
                             f"pool has {self.num_blocks} (keeping {self.watermark_blocks} free); "
                             "raise kv_slots or drop the request")

    def admit(self, r: SimRequest) -> bool:
        """Give ``r`` pages for its tokens so far and the one it generates next; False (nothing
        changed) if fewer than the watermark's pages would stay free."""
        pages = blocks_for(r.stored + 1, self.block_size)
        if self.free_blocks - pages < self.watermark_blocks:
            return False
        self._give(r, pages)
        return True

    def make_room(self, r: SimRequest) -> bool:
        """Make sure ``r`` has a slot for its next token: a new page if its last one is full."""
        if r.stored < r.slots:
            return True
        if self.free_blocks == 0:
            return False
        self._give(r, 1)
        return True

    def release(self, r: SimRequest) -> None:
        """Free all of ``r``'s pages (it finished, or it is preempted)."""
        self.free_blocks += r.slots // self.block_size
        self.held -= r.slots
        self.reserved -= r.slots
        self.useful -= min(r.slots, r.need)
        r.slots = 0

    def _give(self, r: SimRequest, pages: int) -> None:
        self.useful -= min(r.slots, r.need)
        self.free_blocks -= pages
        r.slots += pages * self.block_size
        self.held += pages * self.block_size
        self.reserved += pages * self.block_size
        self.useful += min(r.slots, r.need)
