"""BlockManager: the contract, copy-on-write, prefix caching, and a state machine against a shadow KV store."""
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import pagedlib
from pagedlib.memory.block_manager import BlockManager, OutOfBlocks


def state(bm: BlockManager):
    """Everything observable through the public API, to prove a refused operation changed nothing."""
    return ({s: (bm.block_table(s), bm.num_tokens(s)) for s in bm.seq_ids},
            [(bm.ref_count(b), bm.is_cached(b)) for b in range(bm.num_blocks)], bm.num_free_blocks,
            bm.stats())


# ---- basics ------------------------------------------------------------------------------------
def test_exports():
    assert pagedlib.BlockManager is BlockManager and pagedlib.OutOfBlocks is OutOfBlocks


def test_allocate_without_caching_returns_zero_and_gives_whole_blocks():
    bm = BlockManager(10, 4)
    assert bm.allocate("a", range(9)) == 0
    assert len(bm.block_table("a")) == 3 and bm.num_free_blocks == 7
    assert all(bm.ref_count(b) == 1 for b in bm.block_table("a"))


def test_slot_formula():
    bm = BlockManager(10, 4)
    bm.allocate("x", [7])
    bm.allocate("a", range(6))
    table = bm.block_table("a")
    for i in range(6):
        assert bm.slot("a", i) == table[i // 4] * 4 + i % 4
    assert bm.slot("a", 5) == table[1] * 4 + 1
    with pytest.raises(IndexError):
        bm.slot("a", 6)


def test_append_grows_one_block_when_the_last_is_full():
    bm = BlockManager(4, 2)
    bm.allocate("a", [1, 2])
    assert bm.append("a") == [] and len(bm.block_table("a")) == 2
    assert bm.append("a") == [] and len(bm.block_table("a")) == 2
    bm.append("a")
    assert len(bm.block_table("a")) == 3 and bm.num_tokens("a") == 5


def test_free_returns_blocks_and_block_table_is_a_copy():
    bm = BlockManager(4, 2)
    bm.allocate("a", [1, 2, 3])
    bm.block_table("a").append(99)
    assert len(bm.block_table("a")) == 2
    bm.free("a")
    assert bm.num_free_blocks == 4 and "a" not in bm and len(bm) == 0


def test_constructor_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_blocks"):
        BlockManager(0, 16)
    with pytest.raises(ValueError, match="block_size"):
        BlockManager(4, 0)


# ---- bad input ---------------------------------------------------------------------------------
def test_out_of_blocks_on_allocate_changes_nothing():
    bm = BlockManager(3, 4)
    bm.allocate("a", range(5))
    before = state(bm)
    with pytest.raises(OutOfBlocks, match="need 2 free blocks but only 1") as err:
        bm.allocate("b", range(8))
    assert err.value.needed == 2 and err.value.free == 1
    assert state(bm) == before and "b" not in bm


def test_try_allocate_answers_none_where_allocate_raises():
    """The scheduler's admission asks try_allocate: None and no change when the blocks are not
    free (vLLM's allocate_slots answers a waiting request so), the same result as allocate when
    they are; allocate's message counts the blocks with the cache hits and the first chunk."""
    bm = BlockManager(4, 4, enable_prefix_caching=True)
    assert bm.allocate("a", range(9)) == 0                    # 3 blocks, 2 of them cached
    before = state(bm)
    assert bm.try_allocate("b", list(range(8)) + [50, 51, 52, 53, 54]) is None   # 2 hits + 2 new
    assert state(bm) == before and "b" not in bm
    with pytest.raises(OutOfBlocks, match="13 tokens need 2 free blocks but only 1") as err:
        bm.allocate("b", list(range(8)) + [50, 51, 52, 53, 54])
    assert (err.value.needed, err.value.free) == (2, 1) and state(bm) == before
    # the first chunk fits although the whole prompt does not, unless the whole must fit
    prompt = list(range(8)) + [50, 51, 52, 53, 54]
    assert bm.try_allocate("b", prompt, commit=False, num_new_tokens=4,
                           full_sequence_must_fit=True) is None and state(bm) == before
    with pytest.raises(OutOfBlocks, match="all 13 tokens"):
        bm.allocate("b", prompt, commit=False, num_new_tokens=4, full_sequence_must_fit=True)
    assert bm.try_allocate("b", prompt, commit=False, num_new_tokens=4) == 8
    assert bm.block_table("b")[:2] == bm.block_table("a")[:2] and bm.num_free_blocks == 0


def test_out_of_blocks_on_append_and_copy_on_write_changes_nothing():
    bm = BlockManager(2, 2)
    bm.allocate("a", [1, 2, 3])
    bm.fork("a", "b")                          # block 1 is shared and half full
    before = state(bm)
    with pytest.raises(OutOfBlocks):
        bm.append("a")                         # would need a copy, but nothing is free
    assert state(bm) == before
    bm2 = BlockManager(1, 2)
    bm2.allocate("a", [1, 2])
    before = state(bm2)
    with pytest.raises(OutOfBlocks, match="free or preempt"):
        bm2.append("a")
    assert state(bm2) == before


@pytest.mark.parametrize("caching", [False, True])
def test_id_errors(caching):
    bm = BlockManager(8, 2, enable_prefix_caching=caching)
    bm.allocate("a", [1, 2, 3])
    bm.allocate("b", [4])
    before = state(bm)
    with pytest.raises(ValueError, match="already has blocks"):
        bm.allocate("a", [1])
    with pytest.raises(ValueError, match="child_id already exists"):
        bm.fork("a", "b")
    with pytest.raises(ValueError, match="empty"):
        bm.allocate("c", [])
    for op in (lambda: bm.free("zz"), lambda: bm.append("zz"), lambda: bm.block_table("zz"),
               lambda: bm.fork("zz", "c"), lambda: bm.num_tokens("zz")):
        with pytest.raises(KeyError, match="no live sequence"):
            op()
    for bad in (8, -1, "0", True):
        with pytest.raises(ValueError, match="block_id"):
            bm.ref_count(bad)
        with pytest.raises(ValueError, match="block_id"):
            bm.is_cached(bad)
    assert state(bm) == before


def test_bad_token_ids_with_caching_change_nothing():
    bm = BlockManager(8, 2, enable_prefix_caching=True, prefix_caching_hash="blake2")
    bm.allocate("a", [1])
    before = state(bm)
    with pytest.raises(ValueError, match="token ids"):
        bm.allocate("b", [1, "x", 3])
    bm.append("a")
    before = state(bm)
    with pytest.raises(ValueError, match="token ids"):
        bm.commit("a", 2, [1, 2 ** 70])
    assert state(bm) == before


# ---- sharing -----------------------------------------------------------------------------------
def test_fork_shares_every_block_and_free_releases_references():
    bm = BlockManager(8, 4)
    bm.allocate("p", range(6))
    bm.fork("p", "c")
    assert bm.block_table("c") == bm.block_table("p")
    assert all(bm.ref_count(b) == 2 for b in bm.block_table("p"))
    bm.free("p")
    assert all(bm.ref_count(b) == 1 for b in bm.block_table("c")) and bm.num_free_blocks == 6


def test_copy_on_write_only_for_a_shared_partly_filled_last_block():
    bm = BlockManager(8, 4)
    bm.allocate("p", range(6))                 # blocks [0, 1]; block 1 holds 2 of 4 tokens
    bm.fork("p", "c")
    copies = bm.append("c")
    assert copies == [(1, 2)] and bm.block_table("c") == [0, 2] and bm.block_table("p") == [0, 1]
    assert bm.ref_count(1) == 1 and bm.ref_count(2) == 1 and bm.ref_count(0) == 2
    assert bm.append("p") == []                # the parent is now the only owner of block 1
    assert bm.stats()["copies"] == 1


def test_full_shared_blocks_stay_shared():
    bm = BlockManager(8, 4)
    bm.allocate("p", range(8))                 # two full blocks
    bm.fork("p", "c")
    assert bm.append("c") == [] and bm.append("p") == []
    assert bm.block_table("c")[:2] == bm.block_table("p")[:2]
    assert bm.block_table("c")[2] != bm.block_table("p")[2]


# ---- prefix caching ----------------------------------------------------------------------------
def test_prefix_hit_is_capped_before_the_last_token():
    bm = BlockManager(16, 4, enable_prefix_caching=True)
    assert bm.allocate("a", range(9)) == 0
    assert bm.allocate("b", range(9)) == 8     # two full blocks shared, token 8 recomputed
    assert bm.block_table("b")[:2] == bm.block_table("a")[:2]
    assert bm.allocate("c", range(8)) == 4     # 8 tokens: the second block holds the last token
    assert bm.allocate("d", range(3)) == 0     # shorter than a block: never cached
    assert bm.stats()["hit_tokens"] == 12


def test_prefix_hash_is_chained():
    bm = BlockManager(16, 2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4, 5])
    assert bm.allocate("b", [9, 9, 3, 4, 5]) == 0  # same second block after a different first one
    assert bm.allocate("c", [1, 2, 3, 9, 5]) == 2  # only the first block matches


def test_freed_blocks_stay_cached_until_reused():
    bm = BlockManager(4, 2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4, 5])
    table = bm.block_table("a")
    bm.free("a")
    assert bm.num_free_blocks == 4 and bm.num_cached_blocks == 2
    assert bm.allocate("b", [1, 2, 3, 4, 6]) == 4 and bm.block_table("b")[:2] == table[:2]


def test_blocks_without_content_are_reused_before_cached_ones_and_tail_before_prefix():
    bm = BlockManager(4, 2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4])             # blocks 0, 1, both cached
    bm.free("a")
    bm.allocate("x", [7])                      # takes an empty block, not a cached one
    assert bm.num_cached_blocks == 2
    bm.allocate("y", [8])                      # the last empty block
    bm.allocate("w", [9])                      # now the least recently used cached block: the tail
    assert bm.num_cached_blocks == 1 and bm.is_cached(0) and not bm.is_cached(1)
    assert bm.stats()["evictions"] == 1
    bm.free("x")
    assert bm.allocate("z", [1, 2, 3]) == 2    # the prefix block survived
    assert bm.block_table("z")[0] == 0


def test_blocks_filled_by_append_enter_the_cache():
    bm = BlockManager(8, 2, enable_prefix_caching=True)
    bm.allocate("a", [1])
    for _ in range(3):
        bm.append("a")
    assert bm.num_cached_blocks == 0           # slots only: their K/V is not written yet
    bm.commit("a", 3, [1, 2, 3])
    assert bm.num_cached_blocks == 1
    bm.commit("a", 4, [1, 2, 3, 4])
    assert bm.num_cached_blocks == 2
    assert bm.allocate("b", [1, 2, 3, 4, 5]) == 4
    assert bm.block_table("b")[:2] == bm.block_table("a")


def test_hash_collision_does_not_hand_out_wrong_tokens():
    bm = BlockManager(8, 2, enable_prefix_caching=True, prefix_caching_hash=lambda parent, tokens: b"same")
    bm.allocate("a", [1, 2, 3])
    assert bm.allocate("b", [5, 6, 3]) == 0    # same name, other tokens: a miss
    assert bm.allocate("c", [1, 2, 3]) == 2


def test_no_caching_means_no_hits():
    bm = BlockManager(8, 2)
    bm.allocate("a", [1, 2, 3])
    assert bm.allocate("b", [1, 2, 3]) == 0 and bm.num_cached_blocks == 0


def test_can_allocate_and_can_append_agree_with_the_operations():
    bm = BlockManager(3, 2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4])
    assert bm.can_allocate([1, 2, 3]) and not bm.can_allocate([5, 6, 7, 8, 9])
    bm.allocate("b", [1, 2, 3])                # hit on block 0, one new block
    assert bm.num_free_blocks == 0 and not bm.can_append("a") and bm.can_append("b")
    assert not bm.can_allocate([])             # allocate refuses an empty prompt


# ---- the state machine -------------------------------------------------------------------------
PREFIXES = [(), (1, 2, 3), (1, 2, 3, 4, 5), (0, 0, 0, 0)]


class ShadowKV(RuleBasedStateMachine):
    """Random allocate / append / fork / free against a shadow copy of the KV storage.

    A token's "K/V" in the shadow is its whole prefix (a tuple), so a block shared or reused with the
    wrong prefix reads back wrong.
    """
    caching = False

    def __init__(self):
        super().__init__()
        self.bs = 2
        self.bm = BlockManager(9, self.bs, enable_prefix_caching=self.caching)
        self.kv = [None] * (9 * self.bs)       # slot -> prefix tuple written there
        self.seqs: dict[int, list[int]] = {}
        self.next_id = 0

    def write(self, seq_id, position):
        tokens = self.seqs[seq_id]
        self.kv[self.bm.slot(seq_id, position)] = tuple(tokens[:position + 1])

    def pick(self, data):
        return data.draw(st.sampled_from(sorted(self.seqs)))

    @rule(prefix=st.sampled_from(PREFIXES), suffix=st.lists(st.integers(0, 2), max_size=5))
    def allocate(self, prefix, suffix):
        prompt = list(prefix) + suffix
        if not prompt:
            return
        sid, before, free = self.next_id, state(self.bm), self.bm.num_free_blocks
        self.next_id += 1
        try:
            n_cached = self.bm.allocate(sid, prompt)
        except OutOfBlocks:
            assert state(self.bm) == before
            if not self.caching:
                assert pagedlib.blocks_for(len(prompt), self.bs) > free
            return
        assert n_cached % self.bs == 0 and 0 <= n_cached <= len(prompt) - 1
        assert self.caching or n_cached == 0
        self.seqs[sid] = prompt
        for i in range(n_cached):              # cached tokens must already hold the right K/V
            assert self.kv[self.bm.slot(sid, i)] == tuple(prompt[:i + 1])
        for i in range(n_cached, len(prompt)):
            self.write(sid, i)

    @rule(data=st.data(), token=st.integers(0, 2))
    def append(self, data, token):
        if not self.seqs:
            return
        sid = self.pick(data)
        before, free = state(self.bm), self.bm.num_free_blocks
        try:
            copies = self.bm.append(sid)
        except OutOfBlocks:
            assert state(self.bm) == before and free == 0
            return
        for src, dst in copies:
            self.kv[dst * self.bs:(dst + 1) * self.bs] = self.kv[src * self.bs:(src + 1) * self.bs]
        self.seqs[sid].append(token)
        self.write(sid, len(self.seqs[sid]) - 1)
        self.bm.commit(sid, len(self.seqs[sid]), self.seqs[sid])   # written: a block it completes may now be hit

    @rule(data=st.data())
    def fork(self, data):
        if not self.seqs:
            return
        parent = self.pick(data)
        self.bm.fork(parent, self.next_id)
        self.seqs[self.next_id] = list(self.seqs[parent])
        self.next_id += 1

    @rule(data=st.data())
    def free(self, data):
        if not self.seqs:
            return
        sid = self.pick(data)
        self.bm.free(sid)
        del self.seqs[sid]

    @rule(data=st.data())
    def bad_ids_change_nothing(self, data):
        before = state(self.bm)
        try:
            self.bm.append(self.next_id + 100)
        except KeyError:
            pass
        else:
            raise AssertionError("append on an unknown id must raise KeyError")
        if self.seqs:
            sid = self.pick(data)
            try:
                self.bm.allocate(sid, [1])
            except ValueError:
                pass
            else:
                raise AssertionError("allocate on a live id must raise ValueError")
        assert state(self.bm) == before

    @invariant()
    def every_sequence_reads_back_its_own_tokens(self):
        for sid, tokens in self.seqs.items():
            table = self.bm.block_table(sid)
            assert len(table) == pagedlib.blocks_for(len(tokens), self.bs)
            got = [self.kv[table[i // self.bs] * self.bs + i % self.bs] for i in range(len(tokens))]
            assert got == [tuple(tokens[:i + 1]) for i in range(len(tokens))]

    @invariant()
    def ref_counts_equal_table_membership(self):
        holders = [0] * self.bm.num_blocks
        for sid in self.seqs:
            for b in self.bm.block_table(sid):
                holders[b] += 1
        assert holders == [self.bm.ref_count(b) for b in range(self.bm.num_blocks)]
        referenced = sum(1 for h in holders if h)
        assert self.bm.num_free_blocks + referenced == self.bm.num_blocks
        assert sorted(self.bm.seq_ids) == sorted(self.seqs)


class ShadowKVWithPrefixCaching(ShadowKV):
    caching = True


SETTINGS = settings(max_examples=120, stateful_step_count=40, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
TestShadowKV = ShadowKV.TestCase
TestShadowKV.settings = SETTINGS
TestShadowKVWithPrefixCaching = ShadowKVWithPrefixCaching.TestCase
TestShadowKVWithPrefixCaching.settings = SETTINGS


# ---- speed -------------------------------------------------------------------------------------
def test_allocate_and_free_do_not_scan_the_pool():
    """The same work in a pool 1,000x larger must not be much slower (a scan would be ~1,000x)."""
    import time

    def best_seconds(num_blocks):
        bm = BlockManager(num_blocks, 16)
        prompt = list(range(256))
        times = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(20):
                for s in range(8):
                    bm.allocate(s, prompt)
                for s in range(8):
                    bm.free(s)
            times.append(time.perf_counter() - start)
        return min(times)

    assert best_seconds(1_000_000) < 10 * best_seconds(1_000)


def test_memory_benchmark_runs_and_prints_the_reproduce_command(capsys):
    from pagedlib.bench.__main__ import main
    args = ["memory", "--pools", "256,4096", "--rounds", "2", "--repeat", "1", "--live", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "blocks/s" in out and "us/block" in out and "tokens/s" in out
    assert "reproduce: python -m pagedlib.bench memory --pools 256,4096" in out


def test_the_comparison_with_nano_vllm_skips_with_a_message_without_its_checkout(capsys, tmp_path):
    from pagedlib.bench.__main__ import main
    assert main(["memory", "--against", "nano-vllm", str(tmp_path)]) == 0
    assert "skipped the comparison with nano-vllm: no nanovllm/engine/block_manager.py" in capsys.readouterr().out


def test_the_serving_trace_runs_on_pagedlib_alone():
    from pagedlib.bench.serving_trace import make_trace, pool_size, run_pagedlib
    prompts, events = make_trace(num_requests=40, running=8)
    assert {e[0] for e in events} == {"admit", "decode", "free"}
    assert sum(e[0] == "admit" for e in events) == sum(e[0] == "free" for e in events) == 40
    assert run_pagedlib(prompts, events, pool_size(prompts, 16, running=8), 16) > 0


# ---- commit: only blocks whose K/V exists can be hit ---------------------------------------------
def test_blocks_are_hit_only_once_committed():
    bm = BlockManager(16, 4, enable_prefix_caching=True)
    bm.allocate("a", range(9), commit=False)   # slots only: a chunked prefill commits as it goes
    assert bm.allocate("b", range(9), commit=False) == 0 and bm.num_cached_blocks == 0
    bm.commit("a", 5, range(9))                          # a chunk of 5 tokens computed: block 0 is full
    assert bm.num_cached_blocks == 1 and bm.allocate("c", range(9), commit=False) == 4
    bm.commit("a", 5, range(9))                          # committing again changes nothing
    bm.commit("a", 9, range(9))
    assert bm.num_cached_blocks == 2 and bm.allocate("d", range(9)) == 8


def test_commit_checks_its_range_and_is_a_no_op_without_caching():
    bm = BlockManager(8, 2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3], commit=False)
    with pytest.raises(ValueError, match=r"num_tokens must be in \[0, 3\]"):
        bm.commit("a", 4, [1, 2, 3, 4])
    with pytest.raises(KeyError, match="commit"):
        bm.commit("zz", 1)
    plain = BlockManager(8, 2)
    plain.allocate("a", [1, 2, 3])
    plain.commit("a", 3)
    assert plain.num_cached_blocks == 0


def test_a_fork_inherits_what_its_parent_committed():
    bm = BlockManager(8, 2, enable_prefix_caching=True)
    bm.allocate("p", [1, 2, 3])                # commits its full block 0
    bm.fork("p", "c")
    bm.append("c")                             # copy-on-write of block 1, then it fills
    bm.commit("c", 4, [1, 2, 3, 4])
    assert bm.num_cached_blocks == 2
    assert bm.allocate("x", [1, 2, 3, 4, 5]) == 4 and bm.block_table("x")[:2] == bm.block_table("c")


@pytest.mark.parametrize("name, value", [("num_blocks", True), ("block_size", 0), ("num_blocks", 2.0)])
def test_sizes_must_be_positive_integers(name, value):
    kwargs = {"num_blocks": 4, "block_size": 4, name: value}
    with pytest.raises(ValueError, match=f"{name} must be a positive integer; got {value!r}"):
        BlockManager(**kwargs)


# ---- what a prefix-cache hit must match (issue 24, finding 4) ------------------------------------
def parent_blind(parent, tokens):
    """A name that forgets the prefix: every block with the same tokens collides."""
    return bytes(str(tuple(tokens)), "ascii")


def test_a_colliding_name_cannot_hand_out_a_block_computed_after_another_prefix():
    """Failed on the old code (it checked only the block's own tokens): P got S's second block."""
    bm = BlockManager(16, 4, enable_prefix_caching=True, prefix_caching_hash=parent_blind)
    bm.allocate("Q", [1, 2, 3, 4, 0])                              # caches the block [1, 2, 3, 4]
    bm.allocate("S", [9, 9, 9, 9, 5, 6, 7, 8, 0])                  # [5, 6, 7, 8] after another prefix
    s_second = bm.block_table("S")[1]
    assert bm.allocate("P", [1, 2, 3, 4, 5, 6, 7, 8, 1]) == 4     # Q's block; not S's second one
    assert bm.block_table("P")[0] == bm.block_table("Q")[0] and s_second not in bm.block_table("P")
    assert bm.allocate("S2", [9, 9, 9, 9, 5, 6, 7, 8, 3]) == 8    # the genuine prefix still hits


@pytest.mark.parametrize("algo", ["builtin", "sha256", "blake2"])
def test_every_hash_finds_the_same_hits(algo):
    bm = BlockManager(16, 2, enable_prefix_caching=True, prefix_caching_hash=algo)
    bm.allocate("a", [1, 2, 3, 4, 5])
    assert bm.allocate("b", [9, 9, 3, 4, 5]) == 0 and bm.allocate("c", [1, 2, 3, 9, 5]) == 2
    assert bm.allocate("d", [1, 2, 3, 4, 7]) == 4


def test_an_unknown_hash_is_refused():
    with pytest.raises(ValueError, match="prefix_caching_hash must be one of .* or a function"):
        BlockManager(4, 2, enable_prefix_caching=True, prefix_caching_hash="md5")


def test_a_cache_salt_keeps_tenants_apart():
    bm = BlockManager(16, 2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4, 5], cache_salt="tenant-1")
    assert bm.allocate("b", [1, 2, 3, 4, 5], cache_salt="tenant-2") == 0
    assert bm.allocate("c", [1, 2, 3, 4, 5]) == 0                  # no salt is a tenant of its own
    assert bm.allocate("d", [1, 2, 3, 4, 5], cache_salt="tenant-1") == 4
    assert bm.num_cached_tokens([1, 2, 3, 4, 5], cache_salt="tenant-1") == 4


def test_the_null_block_is_never_handed_out():
    bm = BlockManager(4, 2, null_block=True)
    assert bm.num_free_blocks == 3 and bm.num_usable_blocks == 3
    bm.allocate("a", range(6))
    assert 0 not in bm.block_table("a") and bm.num_free_blocks == 0 and bm.num_used_blocks == 3
    with pytest.raises(OutOfBlocks):
        bm.append("a")
    bm.free("a")
    assert bm.num_free_blocks == 3 and bm.ref_count(0) == 0


def test_a_block_id_is_an_integer_in_range():
    """validation.as_int decides what a block id is: numpy integers count; a bool, a float or an id
    out of range is a ValueError that names the argument (a negative id would wrap around)."""
    import numpy as np
    bm = BlockManager(4, 2)
    assert bm.ref_count(np.int64(3)) == 0
    for bad in (True, 1.0, -1, 4, "1"):
        with pytest.raises(ValueError, match=r"block_id must be an int in \[0, 4\)"):
            bm.ref_count(bad)


def test_allocate_can_take_blocks_for_a_first_chunk_only_and_grow_later():
    bm = BlockManager(20, 16)
    bm.allocate("a", [0] * 200, commit=False, num_new_tokens=63)   # vLLM's allocate_slots for a chunk
    assert len(bm.block_table("a")) == 4 and bm.num_tokens("a") == 63
    assert bm.num_blocks_to_allocate("a", 127) == 4 and bm.allocate_slots("a", 127) == []
    assert len(bm.block_table("a")) == 8 and bm.num_tokens("a") == 127
    before = state(bm)
    assert bm.num_blocks_to_allocate("a", 360) == 15 and bm.num_free_blocks == 12
    assert bm.allocate_slots("a", 360) is None                      # vLLM's answer: None, nothing changed
    assert state(bm) == before


def test_uncommit_drops_what_a_failed_step_registered():
    bm = BlockManager(16, 2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3, 4, 5], commit=False)
    bm.commit("a", 2, [1, 2, 3, 4, 5])                             # written in an earlier step
    bm.commit("a", 5, [1, 2, 3, 4, 5])                             # this step's, never written
    bm.uncommit("a", 2)
    assert bm.num_cached_tokens([1, 2, 3, 4, 9]) == 2
    bm.commit("a", 5, [1, 2, 3, 4, 5])                             # the retry registers them again
    assert bm.num_cached_tokens([1, 2, 3, 4, 9]) == 4


def test_append_takes_no_token_and_the_old_form_warns():
    """The block manager keeps no tokens: append(seq_id) makes room; append(seq_id, token), the old
    form, still makes room and says the argument is going."""
    bm, old = BlockManager(4, 2), BlockManager(4, 2)
    for m in (bm, old):
        m.allocate("a", [1, 2])
    assert bm.append("a") == []
    with pytest.warns(DeprecationWarning, match=r"call append\(seq_id\)"):
        assert old.append("a", 3) == []
    assert state(bm) == state(old)
