"""vLLM v1's prefix-caching scenarios, stated in pagedlib's API.

Each test restates a scenario of vLLM's ``tests/v1/core/test_prefix_caching.py`` (read at
vllm-project/vllm, December 2026; ``test_prefill``, ``test_evict``, ``test_hash_block_correct_reuse``,
``test_computed_blocks_not_evicted``, ``test_basic_prefix_caching_disabled``, ``test_cache_key_salting``,
``test_prefill_not_enough_free_blocks_with_computed_blocks``, ``test_reset_prefix_cache``,
``test_maybe_evict_cached_block``) with pagedlib's calls: ``allocate`` is vLLM's
``get_computed_blocks`` + ``allocate_slots`` for a new request, ``free_block_ids()`` its
``free_block_queue.get_all_free_blocks()``. ``null_block=True`` and ``num_blocks`` as vLLM's pool, so
block ids are vLLM's: block 0 is the null block in both. The last tests state the duplicate-block
scenario of issue 40 (finding 1) under chunked prefill, and what vLLM's ``BlockHashToBlockMap``
implies for it: every cached copy serves hits and survives its twin's eviction.
"""
import pytest

from pagedlib.memory.block_manager import BlockManager, OutOfBlocks

COMMON = [i for i in range(3) for _ in range(16)]     # 3 full blocks of 16 tokens


def manager(num_blocks: int = 11, block_size: int = 16, caching: bool = True, **kw) -> BlockManager:
    return BlockManager(num_blocks, block_size, enable_prefix_caching=caching, null_block=True, **kw)


def test_prefill_block_ids_and_free_order():
    bm = manager()
    assert bm.allocate("0", COMMON + [3] * 7) == 0
    assert bm.block_table("0") == [1, 2, 3, 4]
    assert [bm.is_cached(b) for b in (1, 2, 3, 4)] == [True, True, True, False]
    assert bm.allocate("1", COMMON + [3] * 5) == 48           # hit while the blocks are in use
    assert bm.block_table("1") == [1, 2, 3, 5]
    assert [bm.ref_count(b) for b in (1, 2, 3)] == [2, 2, 2] and bm.num_free_blocks == 5
    bm.free("0")
    bm.free("1")
    # uncached partial blocks first, newest first (5, 4); then the never used; then LRU, tail first
    assert bm.free_block_ids() == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert bm.allocate("2", COMMON + [3] * 6) == 48           # hit on free cached blocks
    assert bm.block_table("2") == [1, 2, 3, 5]                # the partial block 5 reused
    assert bm.num_free_blocks == 6
    bm.free("2")
    assert bm.allocate("3", [99] * 160) == 0                  # a miss that evicts every cached block
    assert bm.block_table("3") == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert bm.num_free_blocks == 0 and bm.num_cached_blocks == 10   # its own 10 full blocks


def test_decode_names_a_block_only_when_it_is_full():
    bm = manager()
    tokens = COMMON + [3] * 7
    bm.allocate("0", tokens)
    for t in [8] * 4:                                          # 59 tokens: no new block
        tokens.append(t)
        bm.append("0")
        bm.commit("0", len(tokens), tokens)
    assert bm.block_table("0") == [1, 2, 3, 4] and not bm.is_cached(4)
    for t in [7] * 19:                                         # fills block 4, then one more block
        tokens.append(t)
        bm.append("0")
        bm.commit("0", len(tokens), tokens)
    table = bm.block_table("0")
    assert len(table) == 5 and bm.is_cached(table[-2]) and not bm.is_cached(table[-1])


def test_evict_order_partial_blocks_first_then_lru_tail_first():
    bm = manager()
    bm.allocate("0", list(range(5 * 16 + 7)))                 # 5 full + 1 partial: blocks 1-6
    bm.allocate("1", list(range(87, 87 + 48)))                # 3 full: blocks 7-9
    assert bm.num_free_blocks == 1
    bm.free("0")
    assert bm.free_block_ids() == [6, 10, 5, 4, 3, 2, 1]
    bm.free("1")
    assert bm.free_block_ids() == [6, 10, 5, 4, 3, 2, 1, 9, 8, 7]
    assert bm.allocate("2", list(range(2 * 16 + 3))) == 32    # touch the first two blocks
    assert bm.block_table("2") == [1, 2, 6]
    assert bm.num_free_blocks == 7


def test_a_reused_cached_block_forgets_its_name():
    bm = manager(num_blocks=2)
    bm.allocate("0", list(range(16)))
    assert bm.is_cached(1)
    bm.free("0")
    bm.allocate("1", list(range(15)))                          # a partial block: the cached one, evicted
    assert bm.block_table("1") == [1] and not bm.is_cached(1) and bm.num_cached_blocks == 0


def test_computed_blocks_are_not_evicted_while_others_are_free():
    bm = manager(num_blocks=3)
    bm.allocate("0", list(range(16)))
    bm.allocate("1", list(range(16, 32)))
    assert bm.block_table("0") == [1] and bm.block_table("1") == [2]
    bm.free("0")
    bm.free("1")
    assert bm.allocate("2", list(range(32))) == 16             # hits block 1, evicts block 2
    assert bm.block_table("2") == [1, 2]


def test_prefix_caching_disabled():
    bm = manager(num_blocks=5, block_size=4, caching=False)
    assert bm.allocate("1", list(range(10))) == 0 and len(bm.block_table("1")) == 3
    bm.free("1")
    assert bm.allocate("2", list(range(16))) == 0 and len(bm.block_table("2")) == 4
    with pytest.raises(OutOfBlocks):                          # vLLM's allocate_slots: None
        bm.allocate("3", list(range(4)))


def test_cache_salts_separate_the_cache():
    bm = manager()
    bm.allocate("0", COMMON + [3] * 11, cache_salt="salt1")
    assert bm.block_table("0") == [1, 2, 3, 4]
    assert bm.num_cached_tokens(COMMON + [4] * 11, cache_salt="salt1") == 48
    assert bm.num_cached_tokens(COMMON + [4] * 11, cache_salt="salt2") == 0
    assert bm.num_cached_tokens(COMMON + [4] * 11) == 0


def test_a_refused_allocation_does_not_touch_its_hits():
    bm = manager()
    bm.allocate("0", COMMON)                                   # 3 full blocks, all cached
    part0 = bm.block_table("0")
    assert bm.allocate("1", COMMON * 2) == 48                  # hits them, 3 more blocks
    part1 = bm.block_table("1")
    assert part1[:3] == part0
    bm.free("1")
    assert [bm.ref_count(b) for b in part1] == [1, 1, 1, 0, 0, 0]
    bm.allocate("2", [7] * 32)
    assert bm.num_free_blocks == 5
    assert bm.num_cached_tokens(COMMON * 3) == 96              # 6 blocks cached, 3 more needed
    with pytest.raises(OutOfBlocks):
        bm.allocate("3", COMMON * 3)
    assert [bm.ref_count(b) for b in part1] == [1, 1, 1, 0, 0, 0]


def test_reset_prefix_cache():
    bm = manager()
    bm.allocate("0", COMMON + [3] * 7)
    assert bm.allocate("1", COMMON + [4] * 7) == 48 and bm.block_table("1") == [1, 2, 3, 5]
    assert not bm.reset_prefix_cache() and bm.num_cached_blocks == 3   # blocks still in use
    bm.free("0")
    bm.free("1")
    assert bm.reset_prefix_cache()
    assert bm.num_cached_blocks == 0 and not any(bm.is_cached(b) for b in range(11))
    assert bm.num_cached_tokens(COMMON + [3]) == 0 and bm.num_free_blocks == 10


def test_evicting_one_copy_of_a_name_keeps_the_others():
    """vLLM's ``test_maybe_evict_cached_block``: blocks 0 and 3 share a name; evicting 0 keeps 3."""
    name = lambda parent, tokens: b"same" if tokens == (1, 1) else bytes(tokens)   # noqa: E731
    bm = BlockManager(5, 2, enable_prefix_caching=True, prefix_caching_hash=name)
    bm.allocate("a", [1, 1, 0])                                # block 0: named b"same"
    bm.allocate("b", [2, 2, 0])                                # block 2, after a's partial block 1
    bm.allocate("c", [1, 1, 0], commit=False, num_new_tokens=0)   # hits block 0: no copy
    bm.free("c")
    assert bm.num_cached_blocks == 2
    bm.free("a")
    bm.free("b")
    assert bm.num_cached_tokens([1, 1, 5]) == 2 and bm.num_cached_tokens([2, 2, 5]) == 2


# ---- duplicates (issue 40, finding 1) ------------------------------------------------------------
PROMPT = list(range(100, 200))                                  # 100 tokens: 6 full blocks of 16


def chunked_twins(bm: BlockManager) -> None:
    """A commits chunk 1; B hits it and commits chunk 2 first; A computes chunk 2 again in its own
    blocks (a duplicate of B's); B is freed, and its blocks evicted by a filler."""
    bm.allocate("A", PROMPT, commit=False, num_new_tokens=32)
    bm.commit("A", 32, PROMPT)
    assert bm.allocate("B", PROMPT, commit=False, num_new_tokens=32) == 32
    bm.commit("B", 64, PROMPT)
    assert bm.allocate_slots("A", 64) == []
    bm.commit("A", 64, PROMPT)                                  # A's blocks 2-3: copies of B's
    a, b = bm.block_table("A"), bm.block_table("B")
    assert a[:2] == b[:2] and set(a[2:]).isdisjoint(b[2:])
    assert all(bm.is_cached(x) for x in a + b)                  # every copy is cached
    bm.free("B")
    bm.allocate("filler", [7] * 16 * bm.num_free_blocks)        # evicts B's copies (and more)
    bm.free("filler")


def test_every_cached_copy_serves_hits_and_survives_its_twins_eviction():
    bm = manager(num_blocks=17)
    chunked_twins(bm)
    assert bm.num_cached_tokens(PROMPT) == 64                   # A's copies still hit (vLLM: 64)
    assert bm.allocate("C", PROMPT, commit=False, num_new_tokens=0) == 64
    assert bm.block_table("C") == bm.block_table("A")[:4]


def test_a_chain_goes_on_after_a_copy_whose_twin_was_evicted():
    bm = manager(num_blocks=17)
    chunked_twins(bm)
    assert bm.allocate_slots("A", 100) == []
    bm.commit("A", 100, PROMPT)                                 # blocks 4-5, children of a copy
    assert bm.num_cached_tokens(PROMPT) == 96                   # the whole chain reachable


def test_a_collision_never_stops_a_later_chain_from_registering():
    """Under one name for every block, the old code registered a prompt's first block only."""
    bm = BlockManager(16, 2, enable_prefix_caching=True, prefix_caching_hash=lambda parent, tokens: 0)
    bm.allocate("a", [1, 2, 3, 4, 5, 6, 0])
    assert bm.num_cached_tokens([1, 2, 3, 4, 5, 6, 9]) == 6
    assert bm.num_cached_tokens([1, 2, 5, 6, 9]) == 2           # never a wrong hit
