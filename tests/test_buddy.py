"""Tests for pagedlib.sim.buddy: the buddy allocator of the Orca baselines."""
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pagedlib.sim.buddy import BuddyAllocator, next_pow2


def test_next_pow2():
    assert [next_pow2(n) for n in (1, 2, 3, 4, 5, 1000, 1024, 1025)] == [1, 2, 4, 4, 8, 1024, 1024, 2048]
    with pytest.raises(ValueError, match="n must be >= 1"):
        next_pow2(0)


def test_paper_pool_is_cut_into_aligned_power_of_two_arenas():
    b = BuddyAllocator(15_728)
    assert b.arenas == [(0, 8192), (8192, 4096), (12288, 2048), (14336, 1024), (15360, 256),
                        (15616, 64), (15680, 32), (15712, 16)]
    assert all(start % size == 0 for start, size in b.arenas)
    assert b.free_slots == 15_728 and b.largest_free == 8192


def test_max_policy_fits_exactly_seven_2048_blocks_leaving_8_85_percent():
    b = BuddyAllocator(15_728)
    addresses = [b.alloc(2048) for _ in range(7)]
    assert None not in addresses and len(set(addresses)) == 7
    assert b.alloc(2048) is None                       # the 8th does not fit
    assert b.free_slots == 15_728 - 7 * 2048 == 1392
    assert round(b.free_slots / 15_728, 4) == 0.0885
    assert b.largest_free == 1024                      # free, but in pieces too small


def test_split_and_merge_by_hand():
    b = BuddyAllocator(16)
    a = b.alloc(3)                                      # a 4-slot block: 16 -> 8 + 4 + 4
    assert a == 0 and b.used_slots == 4
    assert b.free_blocks() == [(4, 4), (8, 8)]
    c = b.alloc(4)
    assert c == 4 and b.free_blocks() == [(8, 8)]
    b.free(a)
    assert b.free_blocks() == [(0, 4), (8, 8)]          # buddy (4) still in use: no merge
    b.free(c)
    assert b.free_blocks() == [(0, 16)]                 # merged all the way up


def test_min_block_rounds_small_requests_up_and_drops_the_tail():
    b = BuddyAllocator(70, min_block=16)               # 64 usable slots, 6 never used
    assert b.free_slots == 64 and b.block_for(1) == 16 and b.block_for(17) == 32


def test_errors_name_the_problem_and_leave_the_state_alone():
    b = BuddyAllocator(64)
    with pytest.raises(ValueError, match="n must be >= 1"):
        b.alloc(0)
    with pytest.raises(ValueError, match="largest block of this pool is 64"):
        b.alloc(65)
    a = b.alloc(8)
    with pytest.raises(ValueError, match="no block starts at address 3"):
        b.free(3)
    b.free(a)
    with pytest.raises(ValueError, match="already free"):
        b.free(a)
    assert b.free_blocks() == [(0, 64)]
    with pytest.raises(ValueError, match="capacity"):
        BuddyAllocator(0)
    with pytest.raises(ValueError, match="min_block must be a power of two"):
        BuddyAllocator(64, min_block=3)


class BuddyMachine(RuleBasedStateMachine):
    """Random allocs and frees on an odd-sized pool against a model of which slots are in use."""

    def __init__(self):
        super().__init__()
        self.b = BuddyAllocator(1000)                   # 512 + 256 + 128 + 64 + 32 + 8
        self.blocks: dict[int, int] = {}                # start -> block size (the model)

    @rule(n=st.integers(1, 600))
    def alloc(self, n):
        size = self.b.block_for(n)
        if size > self.b.largest_block:
            with pytest.raises(ValueError):
                self.b.alloc(n)
            return
        fits = self.b.largest_free >= size
        start = self.b.alloc(n)
        assert (start is not None) == fits
        if start is not None:
            assert start % size == 0                   # aligned to its size
            assert all(start + size <= s or s + z <= start for s, z in self.blocks.items())
            assert any(a <= start and start + size <= a + z for a, z in self.b.arenas)
            self.blocks[start] = size

    @precondition(lambda self: self.blocks)
    @rule(data=st.data())
    def free(self, data):
        start = data.draw(st.sampled_from(sorted(self.blocks)))
        self.b.free(start)
        del self.blocks[start]

    @invariant()
    def slots_add_up(self):
        assert self.b.used_slots == sum(self.blocks.values())
        assert self.b.used_slots + self.b.free_slots == 1000

    @invariant()
    def free_buddies_are_merged(self):
        free = set(self.b.free_blocks())
        assert all((start ^ size, size) not in free for start, size in free)

    def teardown(self):
        for start in list(self.blocks):
            self.b.free(start)
        assert self.b.free_blocks() == self.b.arenas   # everything merges back


TestBuddyMachine = BuddyMachine.TestCase
TestBuddyMachine.settings = settings(max_examples=60, stateful_step_count=40, derandomize=True,
                                     deadline=None, suppress_health_check=[HealthCheck.too_slow])
