"""pagedlib.engine.disagg: prefill on one LLM, decode on another, outputs equal to one engine's (ch. 13).

The models are the small random transformers models of tests/test_engine.py (GPT-2) and
tests/test_llama.py (Llama, GQA), in fp32; the reference is transformers' greedy ``generate``.
"""
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from pagedlib import LLM, SamplingParams
from pagedlib.engine.disagg import LAYOUT, generate_disaggregated, prefill, receive

from tests import test_engine as gpt2
from tests import test_llama as llama

GREEDY = SamplingParams(max_new_tokens=6)


def engines(model_fn, num_usable_blocks=64, block_size=4):
    return (LLM(model_fn(), num_usable_blocks, block_size, enable_prefix_caching=True),
            LLM(model_fn(), num_usable_blocks, block_size, enable_prefix_caching=True))


MODELS = {
    "gpt2": (lambda: gpt2.paged("h4v300"), lambda p, n: gpt2.reference("h4v300", tuple(p), n), 300),
    "llama": (lambda: llama.paged("gqa8_2"), lambda p, n: llama.reference("gqa8_2", tuple(p), n), 300),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_disaggregated_equals_one_engine_and_transformers(name):
    model_fn, reference, vocab = MODELS[name]
    prompts = gpt2.random_prompts(5, vocab, lo=2, hi=30, seed=3) + [[7] * 13, [7] * 13 + [8, 9]]
    pre, dec = engines(model_fn)
    outs, transfers = generate_disaggregated(pre, dec, prompts, GREEDY)
    one = LLM(model_fn(), 64, 4).generate(prompts, GREEDY, use_tqdm=False)
    assert outs == one
    for prompt, out, t in zip(prompts, outs, transfers):
        assert out == reference(prompt, 6)
        assert t.first_token == out[0]
        assert t.num_tokens == (len(prompt) - 1) // 4 * 4


def test_the_transfer_says_what_moved_and_lands_in_the_prefix_cache():
    model_fn = MODELS["llama"][0]
    pre, dec = engines(model_fn, block_size=4)
    prompt = list(range(1, 19))                          # 18 tokens: 4 full blocks move, 2 recomputed
    t = prefill(pre, prompt, GREEDY)
    shape = pre.model.kv_shape
    assert len(t.block_ids) == 4 and t.num_tokens == 16 and t.layout == LAYOUT
    assert t.keys[0].shape == (4, 4, shape.num_kv_heads, shape.head_dim)
    assert t.nbytes == 2 * shape.num_layers * 16 * shape.num_kv_heads * shape.head_dim * 4   # fp32
    for layer, (k, v) in enumerate(pre.kv_cache.layers):  # the tensors are the prefill engine's blocks
        assert torch.equal(t.keys[layer], k[t.block_ids]) and torch.equal(t.values[layer], v[t.block_ids])
    ids = receive(dec, t)
    bm = dec.block_manager
    assert len(ids) == 4 and bm.num_cached_tokens(prompt) == 16
    for layer, (k, v) in enumerate(dec.kv_cache.layers):  # a round trip returns the same K/V
        assert torch.equal(k[ids], t.keys[layer]) and torch.equal(v[ids], t.values[layer])
    dec.generate([prompt], GREEDY, use_tqdm=False)
    assert dec.metrics["prefix_hit_tokens"] == 16
    assert dec.metrics["prompt_tokens_computed"] == 2


def test_both_block_managers_are_left_consistent():
    pre, dec = engines(MODELS["gpt2"][0], num_usable_blocks=12, block_size=4)
    prompts = gpt2.random_prompts(8, 300, lo=10, hi=30, seed=5)     # more than the pools hold at once
    generate_disaggregated(pre, dec, prompts, GREEDY)
    for llm in (pre, dec):
        bm = llm.block_manager
        assert len(bm) == 0 and bm.num_used_blocks == 0
        assert bm.num_free_blocks == bm.num_usable_blocks
        assert not llm.scheduler.has_unfinished()


def test_mismatched_engines_are_refused():
    pre, dec = engines(MODELS["gpt2"][0])
    t = prefill(pre, list(range(20)), GREEDY)
    with pytest.raises(ValueError, match="same block_size"):
        receive(LLM(MODELS["gpt2"][0](), 64, 8, enable_prefix_caching=True), t)
    with pytest.raises(ValueError, match="same model"):
        receive(LLM(MODELS["llama"][0](), 64, 4, enable_prefix_caching=True), t)
    with pytest.raises(ValueError, match="enable_prefix_caching=True"):
        prefill(LLM(MODELS["gpt2"][0](), 64, 4), [1, 2, 3])


@pytest.mark.slow
def test_disaggregated_smollm2_chats_equal_transformers_generate():
    """The real chat model: two engines in one process give transformers' greedy tokens (or, where fp32
    over different batch shapes breaks a near-tie the other way, the two tokens are that close)."""
    from pagedlib import from_hf
    from pagedlib.bench import chats
    from pagedlib.bench.peer import hf_generate_alone, tie_gap
    from pagedlib.models import smollm2

    hf, tokenizer = smollm2.load_smollm2_hf()
    prompts = [smollm2.chat_ids(tokenizer, chats.chat(q)) for q in chats.QUESTIONS[:3]]

    def engine():
        return LLM(from_hf(hf, dtype=torch.float32), 64, 16, enable_prefix_caching=True)

    params = SamplingParams(max_new_tokens=8)
    outs, transfers = generate_disaggregated(engine(), engine(), prompts, params)
    for prompt, out, t in zip(prompts, outs, transfers):
        assert t.num_tokens == (len(prompt) - 1) // 16 * 16 > 0
        want = hf_generate_alone(hf, prompt, 8)
        if out != want:
            at, gap = tie_gap(hf, prompt, out, want)
            assert gap < 1e-3, f"token {at} differs and is no near-tie ({gap:.1e} apart)"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 299), min_size=1, max_size=30), min_size=1, max_size=6),
       st.integers(12, 24), st.integers(12, 24))
def test_any_transfer_leaves_both_block_managers_consistent(prompts, pre_blocks, dec_blocks):
    """Whatever the prompts and the pools (some too small to keep one prompt cached while the
    next runs): the decode engine's outputs are one engine's, each transfer names distinct blocks, and
    afterwards neither engine holds a block: every block is free (or free and cached)."""
    model = MODELS["gpt2"][0]()
    pre = LLM(model, pre_blocks, 4, enable_prefix_caching=True)
    dec = LLM(model, dec_blocks, 4, enable_prefix_caching=True)
    outs, transfers = generate_disaggregated(pre, dec, prompts, GREEDY)
    assert outs == LLM(model, 64, 4).generate(prompts, GREEDY, use_tqdm=False)
    for prompt, t in zip(prompts, transfers):
        assert len(t.block_ids) == (len(prompt) - 1) // 4 and len(set(t.block_ids)) == len(t.block_ids)
    for llm in (pre, dec):
        bm = llm.block_manager
        assert len(bm) == 0 and bm.num_used_blocks == 0
        assert bm.num_free_blocks == bm.num_usable_blocks
        assert not llm.scheduler.has_unfinished()
