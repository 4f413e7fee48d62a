"""pagedlib.sim.tiers and the block manager's eviction hook: a CPU tier under the GPU pool (ch. 13)."""
import pytest

from pagedlib.memory.block_manager import BlockManager
from pagedlib.memory.capacity import MODELS, PEAK_FP16_TFLOPS, SMOLLM2_135M
from pagedlib.sim.router import ChatWorkload, serve_chats
from pagedlib.sim.tiers import (LINK_BANDWIDTH_GBS, CpuTier, break_even_gbs, copy_s_per_token,
                                recompute_s_per_token)

BS = 4


def test_the_hook_sees_every_eviction_with_its_name_and_tokens():
    bm = BlockManager(3, BS, enable_prefix_caching=True)
    seen = []
    bm.on_evict = lambda b, name, tokens: seen.append((b, name, tokens))
    a = list(range(1, 9))                    # two full blocks
    bm.allocate("a", a)
    bm.free("a")                             # both stay cached, free
    names = bm.block_names(a)
    assert len(names) == 2 and bm.num_cached_tokens(a + [0]) == 8
    bm.allocate("b", [50, 51, 52, 53, 54, 55, 56, 57, 58])   # 3 blocks: evicts both of a's
    assert sorted(t for _, _, t in seen) == [(1, 2, 3, 4), (5, 6, 7, 8)]
    assert {n for _, n, _ in seen} == set(names)
    assert bm.num_evictions == 2


def test_no_hook_no_call_and_names_follow_the_salt():
    bm = BlockManager(4, BS, enable_prefix_caching=True)
    assert bm.on_evict is None
    assert bm.block_names(list(range(9))) != bm.block_names(list(range(9)), cache_salt="t")
    assert len(bm.block_names(list(range(7)))) == 1


def test_cpu_tier_round_trip_and_lru():
    bm = BlockManager(3, BS, enable_prefix_caching=True)
    tier = CpuTier(capacity_blocks=3).attach(bm)
    a = list(range(1, 10))
    bm.allocate("a", a)
    bm.free("a")
    bm.allocate("b", list(range(50, 59)))    # evicts a's two blocks into the tier
    assert tier.stored == 2 and len(tier) == 2
    names = bm.block_names(a)
    assert tier.match(names, a, 0, 2, BS) == 2 and tier.loaded == 2
    wrong = a[:4] + [99] + a[5:]              # same names asked with other tokens: no hit
    assert tier.match(names, wrong, 1, 2, BS) == 0
    for i in range(3):                        # three more blocks push the oldest out
        tier.store(("x", i), (i,) * BS)
    assert tier.dropped == 2 and len(tier) == 3
    with pytest.raises(ValueError, match="enable_prefix_caching=True"):
        CpuTier(2).attach(BlockManager(3, BS))


def test_break_even_is_bytes_over_recompute_time():
    spec = MODELS["llama-3-8b"]
    recompute = 2 * spec.num_params / (PEAK_FP16_TFLOPS["H100"] * 1e12 * 0.5)
    assert recompute_s_per_token() == pytest.approx(recompute)
    assert copy_s_per_token(link="PCIe 5 x16") == pytest.approx(spec.kv_bytes_per_token / 32e9)
    assert break_even_gbs() == pytest.approx(spec.kv_bytes_per_token / recompute / 1e9)
    assert 3 < break_even_gbs() < 5 < LINK_BANDWIDTH_GBS["PCIe 4 x16"]      # GQA: copying wins on PCIe 4
    with pytest.raises(ValueError, match="link must be one of"):
        copy_s_per_token(link="carrier pigeon")


def test_the_break_even_exercise_is_the_library_s_answer():
    """ch13.break_even computes in plain Python (for the site); its answer is break_even_gbs's."""
    from pagedlib.exercises import ch13
    assert ch13.break_even.reference == pytest.approx(break_even_gbs(SMOLLM2_135M, "H100"), abs=0.05)
    assert ch13._LLAMA_EVEN == pytest.approx(break_even_gbs("llama-3-8b", "H100"))
    assert SMOLLM2_135M.kv_bytes_per_token == 23_040
    # a small model has much K/V per FLOP: PCIe 5 reached at half its peak does not pay
    assert 0.5 * LINK_BANDWIDTH_GBS["PCIe 5 x16"] < break_even_gbs(SMOLLM2_135M, "H100")


def test_a_tier_turns_recomputed_prefixes_into_copies():
    """One replica whose GPU pool holds a few system prompts of many: without a tier the evicted
    ones are prefilled again; with one they come back as copies, and every prompt token is either
    hit on the GPU, copied back or prefilled (the last one always is)."""
    w = ChatWorkload.generate(num_users=24, turns=3, num_system_prompts=8, system_len=512,
                              chat_rate=0.5, seed=2)
    base = serve_chats(w, "round_robin", num_replicas=1, kv_slots=2048)
    tiered = serve_chats(w, "round_robin", num_replicas=1, kv_slots=2048, cpu_blocks=2048,
                         copy_s_per_token=1e-6)
    assert base.loaded_tokens == 0 and tiered.loaded_tokens > 0
    assert tiered.tier_hit_rate > 0.2
    assert tiered.prefill_tokens < base.prefill_tokens
    assert tiered.ttft_p(50) < base.ttft_p(50)
    first = tiered.hit_tokens + tiered.tier_tokens
    assert (first <= tiered.prompt_tokens - 1).all()
