"""The naive contiguous allocators: placement, waste, fragmentation, refusals, snapshots."""
import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import pagedlib
from pagedlib.memory.allocators import FirstFitAllocator, ReserveMaxAllocator, Segment, fragmenting_events


def test_exports():
    assert pagedlib.FirstFitAllocator is FirstFitAllocator
    assert pagedlib.ReserveMaxAllocator is ReserveMaxAllocator


def test_first_fit_places_in_the_lowest_hole_that_fits():
    a = FirstFitAllocator(100)
    a.replay([("arrive", "a", 30), ("arrive", "b", 20), ("arrive", "c", 30), ("finish", "a"),
              ("arrive", "d", 40), ("arrive", "e", 10)])
    assert {s.owner: s.start for s in a.history[2].segments if s.owner} == {"a": 0, "b": 30, "c": 50}
    assert a.waiting == [("d", 40), ("e", 10)]           # d fits no hole; e queues behind it (FCFS)
    assert a.refusals == 2 and a.holes() == [(0, 30), (80, 20)]
    assert a.external_fragmentation == 0                 # both holes fit e, the smallest waiting need
    a.finish("b")                                        # hole 0..50 takes d, then e goes first fit
    assert {s.owner: s.start for s in a.snapshot() if s.owner} == {"d": 0, "e": 40, "c": 50}


def test_fragmenting_stream_refuses_although_enough_is_free():
    a = FirstFitAllocator(4096)
    history = a.replay(fragmenting_events())
    refused = [s for s in history if s.refused]
    assert [s.refused for s in refused] == ["r7"]
    step = refused[0]
    free = sum(seg.size for seg in step.segments if seg.owner is None)
    assert free == 2048 > 1024 and step.external == 2048   # every hole is too small for 1024
    assert step.reserved == step.used                       # exact sizes: no internal waste
    assert a.internal_waste == 0 and a.refusals == 1 and a.waiting == []
    assert "r7" in a.live


def test_reserve_max_has_internal_waste_but_no_holes():
    a = ReserveMaxAllocator(4096, max_len=2048)
    a.replay([("arrive", "a", 100), ("arrive", "b", 2000), ("arrive", "c", 5)])
    assert a.refusals == 1 and a.waiting == [("c", 5)]
    assert a.internal_waste == 1948 + 48 and a.used_slots == 2100
    assert a.external_fragmentation == 0 and a.free_slots == 0
    a.finish("a")
    assert a.live == ["b", "c"] and [s.start for s in a.snapshot() if s.owner == "c"] == [0]
    r = a.report()
    assert r["allocator"] == "reserve-max" and r["refusals"] == 1 and r["used"] == 2005


def test_pool_remainder_counts_as_external_fragmentation_for_reserve_max():
    a = ReserveMaxAllocator(5000, max_len=2048)
    a.replay([("arrive", i, 10) for i in range(3)])
    assert a.holes() == [(4096, 904)] and a.external_fragmentation == 904


def test_snapshot_covers_the_pool_in_order():
    a = FirstFitAllocator(50)
    a.replay([("arrive", "a", 10), ("arrive", "b", 15), ("finish", "a")])
    assert a.snapshot() == [Segment(0, 10), Segment(10, 15, "b", 15), Segment(25, 25)]
    assert [s.index for s in a.history] == [0, 1, 2] and a.history[0].event == ("arrive", "a", 10)


def test_finish_cancels_a_waiting_request():
    a = FirstFitAllocator(10)
    a.replay([("arrive", "a", 8), ("arrive", "b", 5), ("finish", "b")])
    assert a.waiting == [] and a.live == ["a"]


def test_errors_change_nothing():
    a = FirstFitAllocator(10)
    a.arrive("a", 4)
    before = (a.snapshot(), a.waiting, a.refusals, len(a.history))
    with pytest.raises(ValueError, match="already live"):
        a.arrive("a", 2)
    with pytest.raises(ValueError, match="positive integer"):
        a.arrive("b", 0)
    with pytest.raises(ValueError, match="could never fit"):
        a.arrive("b", 11)
    with pytest.raises(KeyError, match="no such request"):
        a.finish("zz")
    for bad in [("start", "q"), (), "arrive", ("arrive", "q")]:
        with pytest.raises(ValueError, match="unknown event"):
            a.replay([bad])
    with pytest.raises(ValueError, match="length=11 tokens is longer than max_len=10; raise max_len"):
        ReserveMaxAllocator(100, 10).arrive("x", 11)
    assert (a.snapshot(), a.waiting, a.refusals, len(a.history)) == before


class PoolMachine(RuleBasedStateMachine):
    """Random arrivals and finishes: the snapshot always tiles the pool and the counters add up."""

    def __init__(self):
        super().__init__()
        self.allocs = [FirstFitAllocator(64), ReserveMaxAllocator(64, max_len=16)]
        self.n = 0

    @rule(length=st.integers(1, 16))
    def arrive(self, length):
        for a in self.allocs:
            a.arrive(self.n, length)
        self.n += 1

    @rule(data=st.data())
    def finish(self, data):
        ids = sorted(set(self.allocs[0].live) | {r for r, _ in self.allocs[0].waiting})
        if ids:
            rid = data.draw(st.sampled_from(ids))
            for a in self.allocs:
                a.finish(rid)

    @invariant()
    def snapshot_tiles_pool(self):
        for a in self.allocs:
            segs = a.snapshot()
            assert segs[0].start == 0 and segs[-1].end == a.pool_slots
            assert all(x.end == y.start for x, y in zip(segs, segs[1:]))
            assert not any(x.owner is None and y.owner is None for x, y in zip(segs, segs[1:]))
            assert a.used_slots + a.internal_waste + a.free_slots == a.pool_slots
            assert 0 <= a.external_fragmentation <= a.free_slots
            assert a.internal_waste == 0 or isinstance(a, ReserveMaxAllocator)
            if a.waiting:   # the head of the queue really does not fit any hole
                need = a.reservation(a.waiting[0][1])
                assert all(size < need for _, size in a.holes())


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=60, stateful_step_count=30, derandomize=True, deadline=None)
