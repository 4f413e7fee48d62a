"""The naive KV-cache allocators, before paging (chapters 2 and 3).

Both keep one *contiguous* range of token slots per request in a linear pool, and both place it
first-fit (the lowest free hole that is big enough). They differ in how much they reserve:

- :class:`ReserveMaxAllocator` reserves ``max_len`` slots for every request, because its final length
  is unknown: *internal waste* (reserved but unused slots inside a reservation).
- :class:`FirstFitAllocator` reserves exactly the request's length (as if it were known): no internal
  waste, but requests of different sizes leave holes between them as they finish, and a request can be
  refused although enough slots are free in total: *external fragmentation*.

Replay a stream of events, ``("arrive", request_id, length)`` and ``("finish", request_id)``, with
``replay(events)``. An arrival that does not fit waits (first come, first served) and is admitted
when finishes make room; it counts as a refusal. After every event the allocator records a
:class:`Step` with a :class:`Segment` snapshot of the pool (who owns which range), which
``pagedlib.plots.plot_pool_timeline`` draws.

>>> a = FirstFitAllocator(pool_slots=10)
>>> _ = a.replay([("arrive", "a", 4), ("arrive", "b", 2), ("arrive", "c", 4), ("finish", "a"),
...               ("finish", "c"), ("arrive", "d", 6)])
>>> a.refusals, a.free_slots, a.holes()
(1, 8, [(0, 4), (6, 4)])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable

from ..validation import positive_int
from .capacity import reserve_max_slots

__all__ = ["Segment", "Step", "ContiguousAllocator", "ReserveMaxAllocator", "FirstFitAllocator",
           "fragmenting_events"]


@dataclass(frozen=True)
class Segment:
    """A range of the pool: ``size`` slots from ``start``; ``owner`` is a request id, or None if free.

    ``used`` is how many of the slots hold real K/V (the rest of an owned segment is padding).
    """
    start: int
    size: int
    owner: Hashable | None = None
    used: int = 0

    @property
    def end(self) -> int:
        """The first slot past the segment."""
        return self.start + self.size


@dataclass(frozen=True)
class Step:
    """The pool after one event: the event, the snapshot, the waiting queue and the counters.

    ``refused`` is the request id that arrived and could not be placed at this step (or None).
    """
    index: int
    event: tuple
    segments: list[Segment]
    waiting: list[tuple[Hashable, int]]
    refused: Hashable | None
    used: int
    reserved: int
    external: int


class ContiguousAllocator:
    """First-fit allocation of contiguous ranges in a pool of ``pool_slots`` token slots.

    Subclasses choose how many slots a request of a given length reserves (:meth:`reservation`).
    """

    kind = "contiguous"

    def __init__(self, pool_slots: int):
        self.pool_slots = positive_int("pool_slots", pool_slots)
        self._live: dict[Hashable, Segment] = {}          # request id -> its range
        self._waiting: list[tuple[Hashable, int]] = []    # (request id, length), first come first
        self.refusals = 0
        self.refused: list[Hashable] = []
        self.history: list[Step] = []

    # ---- what a request reserves ------------------------------------------------------------
    def reservation(self, length: int) -> int:
        """Slots reserved for a request of ``length`` tokens."""
        raise NotImplementedError

    # ---- events -----------------------------------------------------------------------------
    def arrive(self, request_id: Hashable, length: int) -> bool:
        """A request of ``length`` tokens arrives; place it first-fit. False if it has to wait."""
        self._check_new(request_id, length)
        placed = not self._waiting and self._place(request_id, length)
        if not placed:
            self._waiting.append((request_id, length))
            self.refusals += 1
            self.refused.append(request_id)
        self._record(("arrive", request_id, length), None if placed else request_id)
        return placed

    def finish(self, request_id: Hashable) -> list[Hashable]:
        """A request finishes (or a waiting one is cancelled); returns the waiting ids admitted now."""
        if request_id in self._live:
            del self._live[request_id]
        else:
            before = len(self._waiting)
            self._waiting = [(r, n) for r, n in self._waiting if r != request_id]
            if len(self._waiting) == before:
                raise KeyError(f"finish({request_id!r}): no such request is live or waiting; "
                               f"live ones are {list(self._live)}")
        admitted = self._admit_waiting()
        self._record(("finish", request_id), None)
        return admitted

    def replay(self, events: Iterable[tuple]) -> list[Step]:
        """Apply ``("arrive", id, length)`` and ``("finish", id)`` events in order; return the history."""
        for event in events:
            kind = event[0] if isinstance(event, (tuple, list)) and event else None
            if kind == "arrive" and len(event) == 3:
                self.arrive(event[1], event[2])
            elif kind == "finish" and len(event) == 2:
                self.finish(event[1])
            else:
                raise ValueError(f"unknown event {event!r}; use ('arrive', id, length) or ('finish', id)")
        return self.history

    # ---- what the pool looks like -----------------------------------------------------------
    def snapshot(self) -> list[Segment]:
        """The whole pool in order: owned segments and free holes (owner None)."""
        out, pos = [], 0
        for seg in sorted(self._live.values(), key=lambda s: s.start):
            if seg.start > pos:
                out.append(Segment(pos, seg.start - pos))
            out.append(seg)
            pos = seg.end
        if pos < self.pool_slots:
            out.append(Segment(pos, self.pool_slots - pos))
        return out

    def holes(self) -> list[tuple[int, int]]:
        """The free holes as ``(start, size)``, in pool order."""
        return [(s.start, s.size) for s in self.snapshot() if s.owner is None]

    @property
    def live(self) -> list[Hashable]:
        """Ids of the requests placed in the pool, in admission order."""
        return list(self._live)

    @property
    def waiting(self) -> list[tuple[Hashable, int]]:
        """Requests that arrived but did not fit, as ``(id, length)``, first come first."""
        return list(self._waiting)

    @property
    def used_slots(self) -> int:
        """Slots holding real K/V."""
        return sum(s.used for s in self._live.values())

    @property
    def reserved_slots(self) -> int:
        """Slots reserved by live requests (used plus internal waste)."""
        return sum(s.size for s in self._live.values())

    @property
    def free_slots(self) -> int:
        """Slots in no reservation (the holes together)."""
        return self.pool_slots - self.reserved_slots

    @property
    def internal_waste(self) -> int:
        """Reserved slots that hold nothing (padding inside reservations)."""
        return self.reserved_slots - self.used_slots

    @property
    def external_fragmentation(self) -> int:
        """Free slots no waiting request can use, because their hole is too small for every one.

        Zero while nobody waits: free space is only "fragmented" once someone is refused.
        """
        if not self._waiting:
            return 0
        need = min(self.reservation(n) for _, n in self._waiting)
        return sum(size for _, size in self.holes() if size < need)

    def report(self) -> dict:
        """The counters now, as a dict (slots and fractions of the pool)."""
        return {
            "allocator": self.kind, "pool_slots": self.pool_slots, "live": len(self._live),
            "waiting": len(self._waiting), "refusals": self.refusals,
            "used": self.used_slots, "internal_waste": self.internal_waste,
            "external_fragmentation": self.external_fragmentation, "free": self.free_slots,
            "used_fraction": self.used_slots / self.pool_slots,
        }

    # ---- internals --------------------------------------------------------------------------
    def _check_new(self, request_id: Hashable, length: int) -> None:
        if request_id in self._live or any(r == request_id for r, _ in self._waiting):
            raise ValueError(f"arrive({request_id!r}): this request id is already live or waiting; "
                             "use a new id")
        positive_int(f"arrive({request_id!r}): length", length)
        if self.reservation(length) > self.pool_slots:
            raise ValueError(f"arrive({request_id!r}): needs {self.reservation(length)} slots but the "
                             f"pool has {self.pool_slots}; it could never fit")

    def _place(self, request_id: Hashable, length: int) -> bool:
        need = self.reservation(length)
        for start, size in self.holes():
            if size >= need:
                self._live[request_id] = Segment(start, need, request_id, length)
                return True
        return False

    def _admit_waiting(self) -> list[Hashable]:
        admitted = []
        while self._waiting and self._place(*self._waiting[0]):
            admitted.append(self._waiting.pop(0)[0])
        return admitted

    def _record(self, event: tuple, refused: Hashable | None) -> None:
        self.history.append(Step(len(self.history), event, self.snapshot(), list(self._waiting),
                                 refused, self.used_slots, self.reserved_slots,
                                 self.external_fragmentation))


class ReserveMaxAllocator(ContiguousAllocator):
    """Each request reserves one contiguous slot of ``max_len`` tokens, however short it turns out.

    Every reservation has the same size, so any free slot fits any request: the cost is internal
    waste (padding), not holes.
    """

    kind = "reserve-max"

    def __init__(self, pool_slots: int, max_len: int):
        self.max_len = positive_int("max_len", max_len)
        super().__init__(pool_slots)

    def reservation(self, length: int) -> int:
        """Always ``max_len`` (:func:`~pagedlib.memory.capacity.reserve_max_slots`); a ``length``
        above it is a ValueError."""
        return reserve_max_slots(length, self.max_len)


class FirstFitAllocator(ContiguousAllocator):
    """Each request reserves exactly its length, in the first hole big enough.

    No padding, but finished requests leave holes of assorted sizes: a new request can be refused
    while the free slots add up to more than it needs (external fragmentation).
    """

    kind = "first-fit"

    def reservation(self, length: int) -> int:
        """Exactly ``length``."""
        return length


def fragmenting_events() -> list[tuple]:
    """A short stream in which first fit refuses a request although enough slots are free.

    In a 4,096-slot pool: six requests fill 3,968 slots, every other one finishes and leaves
    holes of 512, 640 and 768 slots (2,048 free with the 128 at the end), then a request of 1,024
    tokens arrives: it fits no hole and waits until a neighbour finishes.
    """
    sizes = {"r1": 512, "r2": 768, "r3": 640, "r4": 512, "r5": 768, "r6": 768}
    events = [("arrive", r, n) for r, n in sizes.items()]
    events += [("finish", "r1"), ("finish", "r3"), ("finish", "r5"), ("arrive", "r7", 1024),
               ("finish", "r4"), ("finish", "r2")]
    return events
