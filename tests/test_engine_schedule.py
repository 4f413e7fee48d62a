"""pagedlib.engine under every arrival order: the one-pass step, the token budget, chunked prefill,
prefix caching that never reads unwritten K/V, n > 1 seats and reservations, a failing step.

The model is a random GPT-2 with large weights (``initializer_range=0.3``), so that every cached K/V
row moves the next token (:func:`test_a_corrupted_cache_row_changes_the_output` checks that), and the
reference for every request is ``transformers``' greedy ``generate`` on that request alone.
"""
import functools

import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, settings, strategies as st

from pagedlib import DEVICE, GPT2, LLM, SamplingParams
from pagedlib.baseline import ReserveMaxLLM

transformers.logging.set_verbosity_error()

VOCAB = 100


@functools.lru_cache(maxsize=None)
def hf_model(n_layer: int = 2):
    """A random GPT2LMHeadModel, 2 layers, n_embd 64, 4 heads, vocabulary 100, large weights."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=n_layer, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=96,
                                     attn_implementation="eager", initializer_range=0.3)
    return transformers.GPT2LMHeadModel(config).eval()


@functools.lru_cache(maxsize=None)
def reference(prompt: tuple, max_new_tokens: int, n_layer: int = 2) -> list[int]:
    """transformers' greedy generate for one request alone."""
    ids = torch.tensor([prompt])                                   # [1, prompt_len]
    with torch.no_grad():
        out = hf_model(n_layer).generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                         max_new_tokens=max_new_tokens, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


@functools.lru_cache(maxsize=None)
def paged_model(backend: str = "torch", n_layer: int = 2) -> GPT2:
    return GPT2.from_hf(hf_model(n_layer), backend=backend, dtype=torch.float32, device=DEVICE)


def tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def run_with_arrivals(llm: LLM, arrivals: list[tuple[int, list[int], SamplingParams]], check=None) -> list:
    """Add each (step, prompt, params) before that step; run to the end; the results in that order.
    ``check(llm, plan_seqs)`` runs after every step."""
    ids, step, pending = {}, 0, sorted(range(len(arrivals)), key=lambda i: arrivals[i][0])
    while pending or llm.scheduler.has_unfinished():
        while pending and arrivals[pending[0]][0] <= step:
            i = pending.pop(0)
            ids[i] = llm.add_request(arrivals[i][1], arrivals[i][2])
        llm.step()
        step += 1
        if check:
            check(llm)
    return [llm.pop_result(ids[i]) for i in range(len(arrivals))]


# ---- the three bugs ---------------------------------------------------------------------------------
def test_a_prefix_hit_never_reads_kv_that_is_not_written_yet():
    """Bug 1 (a chat's next turn): B's prompt is A's prompt + A's first 4 outputs + 1 token. B arrives
    in the step whose decode token fills A's third block; its prefix hit must not read that block's
    last slot before A's K/V is in it."""
    a_prompt = tokens(8, seed=1)
    a_out = reference(tuple(a_prompt), 8)
    b_prompt = a_prompt + a_out[:4] + [7]
    llm = LLM(paged_model(), num_blocks=32, block_size=4, max_num_seqs=4, enable_prefix_caching=True)
    a = llm.add_request(a_prompt, SamplingParams(max_new_tokens=8))
    for _ in range(4):
        llm.step()
    b = llm.add_request(b_prompt, SamplingParams(max_new_tokens=8))
    while llm.scheduler.has_unfinished():
        llm.step()
    assert llm.pop_result(a) == a_out
    assert llm.pop_result(b) == reference(tuple(b_prompt), 8)
    assert llm.metrics["prefix_hit_tokens"] > 0                   # B did hit A's blocks


def test_max_num_seqs_counts_every_sample_from_admission():
    """Bug 2: two requests of n = 3 with max_num_seqs = 4: never more than 4 sequences (or seats)."""
    llm = LLM(paged_model(), num_blocks=64, block_size=4, max_num_seqs=4)
    params = SamplingParams(max_new_tokens=5, temperature=1.0, seed=3, n=3)
    seen = []

    def check(llm):
        seen.append(len(llm.scheduler.running))
        assert len(llm.scheduler.running) <= 4
        assert sum(s.num_samples for s in llm.scheduler.running) <= 4

    outs = run_with_arrivals(llm, [(0, tokens(6, 1), params), (0, tokens(5, 2), params)], check)
    assert max(seen) == 3 and [len(o) for o in outs] == [3, 3]


def test_reserve_max_reserves_for_every_sample_from_admission():
    """Bug 3: reserve-max with two n = 3 requests must never reserve more than the cache (16 blocks)."""
    llm = ReserveMaxLLM(paged_model(), num_blocks=16, block_size=4, max_num_seqs=8, max_len=16)
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=3, n=3)
    reserved = []

    def check(llm):
        reserved.append(llm.scheduler.reserved_blocks)
        assert llm.scheduler.reserved_blocks <= 16
        assert llm.block_manager.num_used_blocks <= llm.scheduler.reserved_blocks

    run_with_arrivals(llm, [(0, tokens(6, 1), params), (0, tokens(5, 2), params)], check)
    assert max(reserved) == 12 and reserved[-1] == 0 and llm.metrics["preemptions"] == 0
    assert all(h["reserved_blocks"] <= 16 for h in llm.metrics["history"])
