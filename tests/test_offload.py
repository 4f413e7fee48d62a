"""pagedlib.engine.offload: a CPU tier under a real engine's pool; a round trip returns the same K/V."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from pagedlib import LLM, SamplingParams
from pagedlib.engine.offload import HostTier

from tests import test_engine as gpt2

PARAMS = SamplingParams(max_new_tokens=5)


def test_evicted_blocks_come_back_from_the_host_with_the_same_kv_and_output():
    llm = LLM(gpt2.paged("h4v300"), num_usable_blocks=12, block_size=4, enable_prefix_caching=True)
    tier = HostTier(llm, capacity_blocks=64)
    a = list(range(1, 22))                                   # 21 tokens: 5 full blocks
    (out_a,) = llm.generate([a], PARAMS, use_tqdm=False)
    bm = llm.block_manager
    ids = [bm.block_table("probe") for _ in [bm.allocate("probe", a)]][0][:5]
    before = [(k[ids].clone(), v[ids].clone()) for k, v in llm.kv_cache.layers]
    bm.free("probe")
    others = gpt2.random_prompts(4, 300, lo=24, hi=36, seed=7)
    llm.generate(others, PARAMS, use_tqdm=False)             # evicts a's blocks into the tier
    assert bm.num_cached_tokens(a) < 20 and tier.bytes_out > 0
    loaded = tier.load(a)
    assert loaded > 0 and bm.num_cached_tokens(a) == 20
    ids = [bm.block_table("probe") for _ in [bm.allocate("probe", a)]][0][:5]
    for (k, v), (k0, v0) in zip(llm.kv_cache.layers, before):   # the round trip returns the same K/V
        assert torch.equal(k[ids], k0) and torch.equal(v[ids], v0)
    bm.free("probe")
    (again,) = llm.generate([a], PARAMS, use_tqdm=False)
    assert again == out_a == gpt2.reference("h4v300", tuple(a), 5)
    assert llm.metrics["prefix_hit_tokens"] == 20
    shape = llm.model.kv_shape                               # K and V, every layer, fp32
    assert tier.bytes_in == loaded * 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 4
    assert len(bm) == 0 and bm.num_used_blocks == 0


def test_a_tier_needs_prefix_caching():
    with pytest.raises(ValueError, match="enable_prefix_caching=True"):
        HostTier(LLM(gpt2.paged("h4v300"), num_usable_blocks=8, block_size=4), 4)


PREFIXES = gpt2.random_prompts(3, 300, lo=16, hi=17, seed=11)       # three shared 16-token prefixes
TAILS = gpt2.random_prompts(12, 300, lo=1, hi=13, seed=12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 11)), min_size=2, max_size=8),
       st.integers(10, 16), st.integers(1, 64))
def test_any_round_trip_through_the_tier_returns_the_stored_kv_and_the_same_output(
        requests, num_blocks, capacity):
    """Prompts that share prefixes, through a pool too small to keep them: whatever the tier copies
    back holds, in the engine's blocks, exactly the K/V it stored; the outputs are a tierless
    engine's; no block is left allocated."""
    model = gpt2.paged("h4v300")
    llm = LLM(model, num_usable_blocks=num_blocks, block_size=4, enable_prefix_caching=True)
    plain = LLM(model, num_usable_blocks=64, block_size=4)
    tier = HostTier(llm, capacity_blocks=capacity)
    bm = llm.block_manager
    for prefix, tail in requests:
        prompt = PREFIXES[prefix] + TAILS[tail]
        names = bm.block_names(prompt)
        first = bm.num_cached_tokens(prompt) // 4
        stored = [tier._blocks[n][1] for n in names[first:] if n in tier._blocks]
        loaded = tier.load(prompt)
        assert loaded % 4 == 0 and loaded // 4 <= len(stored)
        if loaded:
            bm.allocate("probe", prompt, commit=False)      # finds the cached blocks, caches no more
            ids = bm.block_table("probe")
            for i, block_id in enumerate(ids[first:first + loaded // 4]):
                for (k, v), (k0, v0) in zip(llm.kv_cache.layers, stored[i]):
                    assert torch.equal(k[block_id], k0) and torch.equal(v[block_id], v0)
            bm.free("probe")
        assert llm.generate([prompt], PARAMS, use_tqdm=False) == plain.generate(
            [prompt], PARAMS, use_tqdm=False)
        assert len(tier) <= capacity
    assert len(bm) == 0 and bm.num_used_blocks == 0
