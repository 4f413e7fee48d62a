"""The Orca baselines: each request reserves one contiguous chunk for its whole life.

The paper compares vLLM with three versions of Orca that differ only in how much they reserve when a
request is admitted (a buddy allocator then rounds the reservation up to a power of two):

- ``"max"``: ``max_len`` slots, whatever the request (what a system that knows nothing must do:
  :func:`pagedlib.memory.capacity.reserve_max_slots`, the rule the engine's baseline uses too);
- ``"pow2"``: the prompt plus the output length rounded up to a power of two (at most 2x too much);
- ``"oracle"``: exactly prompt + output (it knows the future: an upper bound for reservation).

The reservation is taken once, at admission, and given back when the request finishes; a running
request never needs more, so these policies never preempt.
"""
from __future__ import annotations

from ..memory.capacity import reserve_max_slots
from .buddy import BuddyAllocator, next_pow2
from .request import SimRequest

RESERVATION_POLICIES = ("max", "pow2", "oracle")


def reservation_size(policy: str, prompt: int, output: int, max_len: int) -> int:
    """Slots that ``policy`` reserves for a request of ``prompt`` + ``output`` tokens."""
    if policy == "max":
        return reserve_max_slots(prompt + output, max_len)
    if policy == "pow2":
        return prompt + min(next_pow2(output), max_len - prompt)
    if policy == "oracle":
        return prompt + output
    raise ValueError(f"policy must be one of {RESERVATION_POLICIES}; got {policy!r}")


class ReservationPool:
    """A pool of ``kv_slots`` where every request holds one buddy block for its reservation.

    Accounting (kept up to date for the meter): ``held`` slots are in buddy blocks, ``reserved`` are
    the reservations inside them (``held - reserved`` is the buddy's rounding), ``useful`` the part of
    the reservations that the requests will fill (prompt + output each).
    """

    def __init__(self, policy: str, kv_slots: int, max_len: int, min_block: int = 1):
        reservation_size(policy, 1, 1, max_len)          # validates the policy name
        self.policy, self.kv_slots, self.max_len = policy, kv_slots, max_len
        self.buddy = BuddyAllocator(kv_slots, min_block)
        if self.buddy.block_for(max_len) > self.buddy.largest_block:
            raise ValueError(f"max_len={max_len} needs a block of {self.buddy.block_for(max_len)} "
                             f"slots but kv_slots={kv_slots} has none that big; lower max_len")
        self.held = self.reserved = self.useful = 0

    def check(self, r: SimRequest) -> None:
        """Raise a ValueError if ``r`` could never run under this pool."""
        if r.need > self.max_len:
            raise ValueError(f"request {r.rid} needs {r.need} tokens (prompt {r.prompt} + output "
                             f"{r.output}) > max_len={self.max_len}; drop it or raise max_len")

    def admit(self, r: SimRequest) -> bool:
        """Reserve ``r``'s chunk; False (nothing changed) if no free block is big enough."""
        size = reservation_size(self.policy, r.prompt, r.output, self.max_len)
        address = self.buddy.alloc(size)
        if address is None:
            return False
        r.address, r.slots = address, size
        self.held += self.buddy.block_for(size)
        self.reserved += size
        self.useful += r.need
        return True

    def release(self, r: SimRequest) -> None:
        """Give ``r``'s block back to the buddy allocator."""
        self.buddy.free(r.address)
        self.held -= self.buddy.block_for(r.slots)
        self.reserved -= r.slots
        self.useful -= r.need
        r.address, r.slots = -1, 0
