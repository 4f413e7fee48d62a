"""RadixCache: matching, splitting, locking, LRU leaf eviction, and a state machine that checks the
tree's invariants against a model of every sequence ever cached."""
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pagedlib.memory.block_manager import BlockManager, OutOfBlocks
from pagedlib.memory.radix_cache import RadixCache


def common(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# ---- basics ------------------------------------------------------------------------------------
def test_match_at_token_granularity_and_split():
    rc = RadixCache(64, page_size=1)
    assert rc.allocate("a", [1, 2, 3, 4, 5, 6]) == 0
    assert rc.allocate("b", [1, 2, 3, 9, 9]) == 3          # shares 3 tokens, mid-edge: split
    assert sorted(len(n.key) for n in rc.nodes()) == [2, 3, 3]   # [1,2,3] -> [4,5,6] | [9,9]
    rc.check()


def test_a_new_leaf_is_as_recent_as_the_insert_that_made_it():
    rc = RadixCache(8, page_size=1)
    rc.insert([1, 2], rc._take(2))             # leaf [1, 2]
    rc.match_prefix([1, 2])                    # used again
    rc.insert([7, 8], rc._take(2))             # leaf [7, 8], made later: the most recent
    assert rc.evict(2) == 2
    assert (rc.cached_len([1, 2]), rc.cached_len([7, 8])) == (0, 2)


def test_page_size_rounds_hits_down_to_whole_pages():
    rc = RadixCache(64, page_size=4)
    rc.allocate("a", list(range(12)))
    assert rc.allocate("b", list(range(7)) + [99, 98]) == 4      # 7 common tokens: one page
    assert rc.allocate("c", list(range(12))) == 8                # exact repeat: last token computed
    rc.check()


def test_last_prompt_token_never_hits():
    rc = RadixCache(16, page_size=1)
    rc.allocate("a", [5, 6, 7])
    assert rc.allocate("b", [5, 6, 7]) == 2
    assert rc.hit_tokens == 2 and rc.query_tokens == 6


def test_free_caches_the_reply_and_frees_duplicates():
    rc = RadixCache(32, page_size=1)
    rc.allocate("a", [1, 2, 3], num_tokens=5)
    rc.free("a", [1, 2, 3, 4, 5])
    assert rc.allocate("b", [1, 2, 3, 4, 5, 6]) == 5             # the reply is cached too
    rc.allocate("c", [1, 2, 3, 4, 5, 6])                          # c computes 6 again: a duplicate
    rc.free("c", [1, 2, 3, 4, 5, 6])
    rc.check()
    assert rc.tree_pages == 6 and rc.num_free_pages == 32 - 6


def test_unaligned_tail_is_freed_at_page_size_16():
    rc = RadixCache(8, page_size=16)
    rc.allocate("a", list(range(40)))                             # 3 pages, 2 whole ones cached
    assert rc.tree_pages == 2 and rc.private_pages("a") == 1
    rc.free("a", list(range(40)))
    assert rc.tree_pages == 2 and rc.num_free_pages == 6
    rc.check()


def test_evicts_least_recently_used_leaf_and_never_a_locked_one():
    rc = RadixCache(6, page_size=1)
    rc.allocate("a", [1, 2])
    rc.free("a", [1, 2])
    rc.allocate("b", [3, 4])
    rc.free("b", [3, 4])
    rc.allocate("c", [5, 6])                                    # live: locked
    rc.allocate("d", [7, 8])                                    # needs 2 pages: evicts a's leaf
    assert rc.cached_len([1, 2]) == 0 and rc.cached_len([3, 4]) == 2
    with pytest.raises(OutOfBlocks):
        rc.allocate("e", [9, 10, 11, 12, 13])                   # c and d are locked: refused
    assert rc.cached_len([5, 6]) == 2 and rc.cached_len([3, 4]) == 2   # nothing changed
    rc.check()


def test_eviction_frees_a_whole_leaf():
    rc = RadixCache(10, page_size=1)
    rc.allocate("a", list(range(8)))
    rc.free("a", list(range(8)))
    rc.allocate("b", [100, 101, 102])                           # needs 1 more than the 2 free
    assert rc.num_evicted_pages == 8 and rc.num_overevicted_pages == 7
    rc.check()


def test_trimmed_leaves_free_only_what_is_needed_from_the_end():
    rc = RadixCache(10, page_size=1, trim_leaves=True)
    rc.allocate("a", list(range(8)))
    rc.free("a", list(range(8)))
    rc.allocate("b", [100, 101, 102])                           # needs 1 more than the 2 free
    assert rc.num_evicted_pages == 1 and rc.num_overevicted_pages == 0
    assert rc.cached_len(list(range(8))) == 7                   # the head stays cached
    rc.check()


def test_same_hits_as_the_hash_chain_when_nothing_is_evicted():
    from pagedlib.sim.prefix_trace import few_shot, make_cache, multi_turn_chat, replay
    for trace in (multi_turn_chat(seed=1, sessions=6, turns=3), few_shot(seed=1, requests=40)):
        pool = 64 * 1024
        hash_chain = replay(trace, make_cache("hash", pool, 16))
        radix16 = replay(trace, make_cache("radix", pool, 16))
        radix1 = replay(trace, make_cache("radix", pool, 1))
        assert radix16.hit_tokens == hash_chain.hit_tokens
        assert radix1.hit_tokens > hash_chain.hit_tokens


def test_lpm_computes_fewer_prefill_tokens_on_a_tight_pool():
    from pagedlib.sim.prefix_trace import few_shot, make_cache, replay
    trace = few_shot(seed=0, tasks=8, requests=80, example_len=(20, 40))
    fcfs = replay(trace, make_cache("radix", 1024, 1), max_running=4)
    lpm = replay(trace, make_cache("radix", 1024, 1), max_running=4, policy="lpm")
    assert lpm.prefill_tokens < fcfs.prefill_tokens
    assert sorted(lpm.order) == sorted(fcfs.order) == [r.rid for r in trace]


def test_chat_turns_wait_for_their_previous_turn():
    from pagedlib.sim.prefix_trace import make_cache, multi_turn_chat, replay
    trace = multi_turn_chat(seed=2, sessions=4, turns=3)
    for policy in ("fcfs", "lpm"):
        order = replay(trace, make_cache("radix", 8192, 1), policy=policy).order
        where = {rid: i for i, rid in enumerate(order)}
        assert all(r.after is None or where[r.after] < where[r.rid] for r in trace)


def test_a_pool_too_small_for_one_request_is_named():
    from pagedlib.sim.prefix_trace import make_cache, multi_turn_chat, replay
    with pytest.raises(ValueError, match="larger pool"):
        replay(multi_turn_chat(seed=0), make_cache("radix", 64, 1))


def test_traces_are_seeded():
    from pagedlib.sim.prefix_trace import few_shot, multi_turn_chat
    assert multi_turn_chat(seed=3) == multi_turn_chat(seed=3) != multi_turn_chat(seed=4)
    assert few_shot(seed=3) == few_shot(seed=3) != few_shot(seed=4)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="num_pages"):
        RadixCache(0)
    rc = RadixCache(4, page_size=2)
    with pytest.raises(ValueError, match="whole pages"):
        rc.insert([1, 2, 3], [0, 1])
    with pytest.raises(ValueError, match="empty"):
        rc.allocate("a", [])


# ---- a state machine: the tree's invariants after every step -------------------------------------
TOKENS = st.lists(st.integers(0, 3), min_size=1, max_size=12)   # a small alphabet: many shared prefixes


class RadixMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.rc = RadixCache(24, page_size=self.page_size)
        self.live = {}           # seq id -> (prompt, full sequence)
        self.entered = []        # every token sequence the tree was ever given
        self.next_id = 0

    page_size = 1

    @rule(prompt=TOKENS, reply=st.integers(0, 4))
    def allocate(self, prompt, reply):
        full = prompt + [7] * reply
        locked = {s: self.rc.cached_len(p[:len(p) - 1]) for s, (p, _) in self.live.items()}
        before = self.rc.evictable_pages
        try:
            hit = self.rc.allocate(self.next_id, prompt, len(full))
        except OutOfBlocks:
            assert self.rc.evictable_pages <= before
            return
        best = max((common(prompt, e) for e in self.entered), default=0)
        assert hit <= min(best, len(prompt) - 1)                  # never more than a true common prefix
        assert hit % self.rc.page_size == 0
        for s, n in locked.items():                               # a locked prefix was not evicted
            assert self.rc.cached_len(self.live[s][0][:len(self.live[s][0]) - 1]) >= n
        self.live[self.next_id] = (prompt, full)
        self.entered.append(prompt)
        self.next_id += 1

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.live)))
        _, full = self.live.pop(seq)
        self.rc.free(seq, full)
        self.entered.append(full)

    @invariant()
    def tree_is_consistent(self):
        self.rc.check()                                           # ref counts, every page owned once
        assert self.rc.num_free_pages + self.rc.tree_pages + sum(
            self.rc.private_pages(s) for s in self.live) == self.rc.num_pages   # never over capacity
        for n in self.rc.nodes():
            if n.lock_ref:
                assert n.parent is self.rc.root or n.parent.lock_ref >= n.lock_ref


class RadixMachinePaged(RadixMachine):
    page_size = 2


class RadixMachineTrimmed(RadixMachine):
    page_size = 2

    def __init__(self):
        super().__init__()
        self.rc.trim_leaves = True


TestRadixMachine = RadixMachine.TestCase
TestRadixMachine.settings = settings(max_examples=150, stateful_step_count=30, deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
TestRadixMachinePaged = RadixMachinePaged.TestCase
TestRadixMachinePaged.settings = TestRadixMachine.settings
TestRadixMachineTrimmed = RadixMachineTrimmed.TestCase
TestRadixMachineTrimmed.settings = TestRadixMachine.settings


def test_hash_chain_adapter_leaves_no_trace_when_refused():
    from pagedlib.sim.prefix_trace import HashChainCache
    cache = HashChainCache(4, 4)
    cache.allocate("a", list(range(8)), 12)
    with pytest.raises(OutOfBlocks):
        cache.allocate("b", list(range(8)), 16)
    assert cache.bm.hit_tokens == 0 and cache.bm.query_tokens == 8 and "b" not in cache.bm
    assert isinstance(cache.bm, BlockManager)
