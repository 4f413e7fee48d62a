"""pagedlib.engine.llm under every arrival order: the one-pass step, the token budget, chunked prefill,
prefix caching that never reads unwritten K/V, n > 1 seats and reservations, a failing step.

The model is a random GPT-2 with large weights (``initializer_range=0.3``), so that every cached K/V
row moves the next token (:func:`test_a_corrupted_cache_row_changes_the_output` checks that), and the
reference for every request is ``transformers``' greedy ``generate`` on that request alone.
"""
import collections
import functools

import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, settings, strategies as st

from pagedlib import DEVICE, GPT2, LLM, SamplingParams
from pagedlib.engine.baseline import ReserveMaxLLM
from pagedlib.memory.capacity import blocks_for, reserve_max_slots

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
        assert step < 2000, "the engine made no progress in 2000 steps"
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
    llm = LLM(paged_model(), num_usable_blocks=32, block_size=4, max_num_seqs=4, enable_prefix_caching=True)
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
    llm = LLM(paged_model(), num_usable_blocks=64, block_size=4, max_num_seqs=4)
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
    llm = ReserveMaxLLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_seqs=8, max_len=16)
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=3, n=3)
    reserved = []

    def check(llm):
        reserved.append(llm.scheduler.reserved_blocks)
        assert llm.scheduler.reserved_blocks <= 16
        assert llm.block_manager.num_used_blocks <= llm.scheduler.reserved_blocks

    run_with_arrivals(llm, [(0, tokens(6, 1), params), (0, tokens(5, 2), params)], check)
    assert max(reserved) == 12 and reserved[-1] == 0 and llm.metrics["preemptions"] == 0
    assert all(h["reserved_blocks"] <= 16 for h in llm.metrics["history"])


# ---- the equivalence tests can fail ------------------------------------------------------------------
@pytest.mark.parametrize("position", range(8))
def test_a_corrupted_cache_row_changes_the_output(position):
    """Overwrite the cached K and V of one prompt token after the prefill: the output must change, so
    the token-for-token tests below would see a stale or misplaced K/V row."""
    prompt = tokens(8, seed=1)
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4)
    request = llm.add_request(prompt, SamplingParams(max_new_tokens=8))
    llm.step()                                                     # prefill: the prompt's K/V is cached
    block, offset = llm.block_manager.block_table(0)[position // 4], position % 4
    g = torch.Generator().manual_seed(position)
    for cache in llm.kv_cache.layers[0]:                           # layer 0's K and V
        cache[block, offset] = 3 * torch.randn(cache.shape[2:], generator=g)   # [n_head, head_dim]
    while llm.scheduler.has_unfinished():
        llm.step()
    assert llm.pop_result(request) != reference(tuple(prompt), 8)


# ---- arrivals between steps, token budgets, preemption ------------------------------------------------
def checked_every_step(budget, max_num_seqs):
    """A per-step check of the engine's invariants (seats, blocks, the token budget)."""
    def check(llm):
        sched, bm, last = llm.scheduler, llm.block_manager, llm.metrics["history"][-1]
        assert len(sched.running) <= max_num_seqs and sched.num_seats <= max_num_seqs
        assert sched.num_seats == sum(s.num_samples for s in sched.running)
        assert bm.num_used_blocks <= llm.num_usable_blocks and bm.ref_count(0) == 0   # the null block stays unowned
        if sched.admission == "guaranteed":
            assert bm.num_used_blocks <= sched.reserved_blocks <= llm.num_usable_blocks
        assert last["prefill_tokens"] + last["decode_tokens"] <= (budget or float("inf"))
        assert all(0 <= s.num_computed_tokens <= len(s) for s in sched.running)
    return check


@pytest.mark.parametrize("budget", [None, 3])
@pytest.mark.parametrize("delay", range(11))
def test_chat_turns_arriving_at_every_delay_match_transformers(delay, budget):
    """The chat pattern: B = A's prompt + A's first ``delay`` outputs + 1 token, added after ``delay``
    steps, prefix caching on, blocks of 4: every arrival step relative to A's blocks filling."""
    a_prompt = tokens(8, seed=1)
    a_out = reference(tuple(a_prompt), 12)
    b_prompt = a_prompt + a_out[:delay] + [7]
    llm = LLM(paged_model(), num_usable_blocks=32, block_size=4, max_num_seqs=4, enable_prefix_caching=True,
              max_num_batched_tokens=budget)
    arrivals = [(0, a_prompt, SamplingParams(max_new_tokens=12)), (delay, b_prompt, SamplingParams(max_new_tokens=6))]
    outs = run_with_arrivals(llm, arrivals, checked_every_step(budget, 4))
    assert outs == [a_out, reference(tuple(b_prompt), 6)]


BUDGETS = [1, 3, 7, 16, None]


@pytest.mark.parametrize("budget", BUDGETS)
def test_token_budgets_chunk_long_prompts_and_match_transformers(budget):
    prompts = [tokens(n, seed=10 + n) for n in (21, 9, 30, 17)]       # every prompt longer than 7
    llm = LLM(paged_model(), num_usable_blocks=64, block_size=4, max_num_seqs=4, max_num_batched_tokens=budget)
    arrivals = [(step, p, SamplingParams(max_new_tokens=5)) for step, p in zip((0, 0, 2, 5), prompts)]
    outs = run_with_arrivals(llm, arrivals, checked_every_step(budget, 4))
    assert outs == [reference(tuple(p), 5) for p in prompts]
    history = llm.metrics["history"]
    assert sum(h["prefill_tokens"] for h in history) == sum(map(len, prompts))   # each prompt once
    if budget is not None and budget < 21:                     # the 21-token prompt took several steps
        assert max(h["prefill_tokens"] for h in history) <= budget
        assert llm.metrics["steps"] >= 21 // budget


@pytest.mark.parametrize("budget", BUDGETS)
def test_preemption_under_every_budget_matches_transformers(budget):
    """8 blocks of 4 for requests of up to 29 tokens, one of them with n = 2 greedy samples (under a
    budget of 1 the oldest decode takes the token every step, so the two samples are what compete)."""
    prompts = [tokens(n, seed=20 + n) for n in (14, 9, 19, 6, 11)]
    params = [SamplingParams(max_new_tokens=11, n=2) if len(p) == 19 else SamplingParams(max_new_tokens=10)
              for p in prompts]                                    # 19 + 11: 8 blocks, all of them
    llm = LLM(paged_model(), num_usable_blocks=8, block_size=4, max_num_seqs=5, max_num_batched_tokens=budget)
    arrivals = list(zip((0, 0, 1, 1, 3), prompts, params))
    outs = run_with_arrivals(llm, arrivals, checked_every_step(budget, 5))
    refs = [reference(tuple(p), q.max_new_tokens) for p, q in zip(prompts, params)]
    assert outs == [[r] * 2 if len(p) == 19 else r for p, r in zip(prompts, refs)]
    assert llm.metrics["preemptions"] > 0
    assert llm.block_manager.num_used_blocks == 0


def test_prefix_hits_only_blocks_a_chunked_prefill_has_computed():
    """A prompt prefilled in chunks of 4 commits only the blocks its chunks have covered, so nothing
    can hit a block before its K/V is computed; a twin request arriving mid-prefill waits for the
    budget, then hits every full block but the one holding its last token."""
    prompt = tokens(20, seed=3)
    llm = LLM(paged_model(), num_usable_blocks=32, block_size=4, max_num_seqs=4, enable_prefix_caching=True,
              max_num_batched_tokens=4)
    first = llm.add_request(prompt, SamplingParams(max_new_tokens=4))
    llm.step()
    assert llm.block_manager.num_cached_blocks == 1
    llm.step()                                                     # 8 of 20 prompt tokens computed
    assert llm.block_manager.num_cached_blocks == 2
    twin = llm.add_request(prompt, SamplingParams(max_new_tokens=4))
    while llm.scheduler.has_unfinished():
        llm.step()
    assert llm.pop_result(first) == llm.pop_result(twin) == reference(tuple(prompt), 4)
    assert [r["num_cached_tokens"] for r in llm.metrics["requests"]] == [0, 16]


# ---- n > 1 -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("budget", [None, 2, 5])
def test_greedy_samples_share_seats_and_match_transformers(budget):
    """Greedy n = 3 and n = 2 requests under a budget: every sample equals transformers' output, and
    seats (the engine) and reservations (reserve-max) are checked every step."""
    prompts = [tokens(9, seed=4), tokens(6, seed=5), tokens(13, seed=6)]
    params = [SamplingParams(max_new_tokens=6, n=n) for n in (3, 2, 1)]
    arrivals = list(zip((0, 1, 1), prompts, params))
    for llm in (LLM(paged_model(), num_usable_blocks=24, block_size=4, max_num_seqs=5, max_num_batched_tokens=budget),
                ReserveMaxLLM(paged_model(), num_usable_blocks=24, block_size=4, max_num_seqs=5, max_len=20,
                              max_num_batched_tokens=budget)):
        check = checked_every_step(budget, 5)
        reserved = isinstance(llm, ReserveMaxLLM)

        def check_all(llm):
            check(llm)
            if reserved:
                assert llm.block_manager.num_used_blocks <= llm.scheduler.reserved_blocks <= 24 - 24 % 5
        outs = run_with_arrivals(llm, arrivals, check_all)
        refs = [reference(tuple(p), 6) for p in prompts]
        assert outs == [[refs[0]] * 3, [refs[1]] * 2, refs[2]]


# ---- a failing step, bad arguments ---------------------------------------------------------------
@pytest.mark.parametrize("error", [RuntimeError("CUDA out of memory (simulated)"), KeyboardInterrupt()])
@pytest.mark.parametrize("failing_step", [0, 1, 3])
def test_a_step_that_raises_is_undone_and_the_engine_goes_on(monkeypatch, error, failing_step):
    """Failed on the old code (the engine refused all further work after any failed step). A model
    error or a Ctrl-C in the middle of a step: the step is undone before the exception propagates, the
    next step() goes on, and every output is still transformers'. Prefix caching is on, and the second
    request shares the first's prompt, so a block registered by the failed step would be hit if it were
    not dropped."""
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_batched_tokens=5, enable_prefix_caching=True)
    prompt = tokens(10, seed=1)
    first = llm.add_request(prompt, SamplingParams(max_new_tokens=4))
    for _ in range(failing_step):
        llm.step()
    second = llm.add_request(prompt[:9] + [3], SamplingParams(max_new_tokens=4))
    forward = GPT2.__call__

    def broken(self, batch, kv_cache):
        raise error
    monkeypatch.setattr(GPT2, "__call__", broken)
    with pytest.raises(type(error)):
        llm.step()
    monkeypatch.setattr(GPT2, "__call__", forward)
    assert all(s.num_computed_tokens == 0 for s in llm.scheduler.waiting) and not llm.scheduler.running
    while llm.scheduler.has_unfinished():
        llm.step()
    assert llm.pop_result(first) == reference(tuple(prompt), 4)
    assert llm.pop_result(second) == reference(tuple(prompt[:9] + [3]), 4)
    assert llm.block_manager.num_used_blocks == 0


def test_a_failure_that_cannot_be_undone_is_engine_failed(monkeypatch):
    from pagedlib.engine.llm import EngineFailed
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4)
    llm.add_request(tokens(6, seed=1), SamplingParams(max_new_tokens=4))

    def broken(self, batch, kv_cache):
        raise RuntimeError("CUDA out of memory (simulated)")
    monkeypatch.setattr(GPT2, "__call__", broken)
    monkeypatch.setattr(llm.scheduler, "undo", lambda plan: 1 / 0)
    with pytest.raises(EngineFailed, match="undoing it failed too"):
        llm.step()
    monkeypatch.undo()
    for attempt in (llm.step, lambda: llm.add_request([1, 2]), lambda: llm.generate([[1, 2]], use_tqdm=False)):
        with pytest.raises(EngineFailed, match="undoing a failed step"):
            attempt()


def test_pop_result_of_an_unfinished_request_is_an_error_and_the_request_goes_on():
    """Failed on the old code (it returned the partial output and the next step died with a KeyError)."""
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4)
    prompt = tokens(6, seed=1)
    request = llm.add_request(prompt, SamplingParams(max_new_tokens=4))
    llm.step()
    with pytest.raises(ValueError, match="has not finished yet"):
        llm.pop_result(request)
    while llm.scheduler.has_unfinished():
        llm.step()
    assert llm.pop_result(request) == reference(tuple(prompt), 4)
    with pytest.raises(KeyError, match="no such request"):
        llm.pop_result(request)


@pytest.mark.parametrize("name, value", [("max_num_seqs", True), ("max_num_seqs", 0), ("num_usable_blocks", True),
                                         ("block_size", 2.0), ("max_num_batched_tokens", 0),
                                         ("max_num_batched_tokens", True), ("max_num_batched_tokens", 1.5)])
def test_count_arguments_refuse_bools_and_non_integers(name, value):
    kwargs = dict(num_usable_blocks=8, block_size=4, max_num_seqs=4, max_num_batched_tokens=None)
    kwargs[name] = value
    with pytest.raises(ValueError, match=f"{name} must be a positive integer; got {value!r}"):
        LLM(paged_model(), **kwargs)


# ---- per-request metrics -------------------------------------------------------------------------------
def test_per_request_metrics_in_prompt_order():
    prompts = [tokens(12, seed=7), tokens(12, seed=7)[:8] + [1, 2, 3], tokens(5, seed=8)]
    llm = LLM(paged_model(), num_usable_blocks=12, block_size=4, max_num_seqs=3, enable_prefix_caching=True,
              max_num_batched_tokens=6)
    outs = llm.generate(prompts, [SamplingParams(max_new_tokens=n) for n in (8, 1, 20)], use_tqdm=False)
    requests = llm.metrics["requests"]
    assert [r["prompt_tokens"] for r in requests] == [12, 11, 5]
    assert [r["output_tokens"] for r in requests] == [len(o) for o in outs] == [8, 1, 20]
    assert requests[1]["num_cached_tokens"] == 8                 # A's first two blocks
    assert requests[0]["num_cached_tokens"] == requests[2]["num_cached_tokens"] == 0
    assert all(r["ttft_s"] > 0 for r in requests) and requests[1]["tpot_s"] == 0.0
    assert requests[0]["ttft_s"] < requests[2]["ttft_s"]          # the budget made the third wait
    assert requests[2]["tpot_s"] > 0
    assert sum(r["num_preemptions"] for r in requests) == llm.metrics["preemptions"]
    assert llm.metrics.requests[0].ttft_s == requests[0]["ttft_s"]   # a dataclass, read either way


def assert_ref_counts_match_the_tables(bm) -> None:
    """Every block's ref count is the number of live block tables holding it (a block freed twice, or
    leaked, breaks this), and a free block is free exactly once."""
    held = collections.Counter(b for s in bm.seq_ids for b in bm.block_table(s))
    assert all(bm.ref_count(b) == held[b] for b in range(bm.num_blocks))
    free = bm.free_block_ids()
    assert len(free) == len(set(free)) == bm.num_free_blocks and not any(held[b] for b in free)


# ---- random workloads --------------------------------------------------------------------------------
BASE = tokens(24, seed=99)          # prompts are prefixes of one text (so prefix caching has hits) ...


@functools.lru_cache(maxsize=None)
def greedy_reference(prompt: tuple) -> list[int]:
    return reference(prompt, 8)      # greedy is prefix-stable: cut to each request's max_new_tokens


request_strategy = st.tuples(st.integers(1, 24), st.booleans(), st.integers(1, 8), st.sampled_from([1, 1, 2]),
                             st.integers(0, 6))   # (prompt length, own last token?, max_new_tokens, n, arrival)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(request_strategy, min_size=1, max_size=6),
       budget=st.sampled_from([1, 2, 3, 5, 8, None]), num_blocks=st.integers(8, 30),
       block_size=st.sampled_from([1, 2, 4]), max_num_seqs=st.integers(2, 5), prefix=st.booleans(),
       reserve=st.booleans(), scheduling=st.sampled_from(["vllm", "decode_first", "prefill_first"]),
       admission=st.sampled_from(["on_demand", "guaranteed", "estimated"]), threshold=st.sampled_from([0, 0, 3]))
def test_random_workloads_keep_the_invariants_and_match_transformers(requests, budget, num_blocks, block_size,
                                                                     max_num_seqs, prefix, reserve, scheduling,
                                                                     admission, threshold):
    """Random prompts (sharing prefixes), lengths, n, arrival steps, budgets, cache sizes, scheduling
    orders and admission policies, on the paged engine or reserve-max: every step keeps running <=
    max_num_seqs, blocks used (and reserved) <= num_blocks, the token budget, never frees a block
    twice; every greedy output is transformers'."""
    if reserve:
        llm = ReserveMaxLLM(paged_model(), num_blocks, block_size, max_num_seqs, max_len=32,
                            max_num_batched_tokens=budget)
        if blocks_for(reserve_max_slots(1, 32), block_size) > num_blocks:   # one reservation never fits
            return
    else:
        llm = LLM(paged_model(), num_blocks, block_size, max_num_seqs, enable_prefix_caching=prefix,
                  max_num_batched_tokens=budget, scheduling=scheduling, admission=admission,
                  long_prefill_token_threshold=threshold)
    bm = llm.block_manager
    arrivals = []
    for length, own_last, max_new, n, step in requests:
        prompt = BASE[:length - 1] + [(BASE[length - 1] + 1) % VOCAB if own_last else BASE[length - 1]]
        params = SamplingParams(max_new_tokens=max_new, n=min(n, max_num_seqs))
        try:
            llm.check_request(0, prompt, params)
        except ValueError:                          # can never fit this cache: refused, as the engine does
            continue
        arrivals.append((step, prompt, params))
    check = checked_every_step(budget, max_num_seqs)

    def check_all(llm):
        check(llm)
        assert_ref_counts_match_the_tables(bm)
        if reserve:
            assert bm.num_used_blocks <= llm.scheduler.reserved_blocks <= num_blocks
    outs = run_with_arrivals(llm, arrivals, check_all)
    for (_, prompt, params), out in zip(arrivals, outs):
        ref = greedy_reference(tuple(prompt))[:params.max_new_tokens]
        assert out == ([ref] * params.n if params.n > 1 else ref)
    assert bm.num_used_blocks == 0 and not llm.scheduler.has_unfinished()
    if reserve or admission == "guaranteed":
        assert llm.metrics["preemptions"] == 0      # reservations hold: they never preempt


def test_reserve_max_refuses_a_request_whose_n_reservations_never_fit():
    llm = ReserveMaxLLM(paged_model(), num_usable_blocks=8, block_size=4, max_num_seqs=4, max_len=32)
    with pytest.raises(ValueError, match="n = 2 reservations of max_len = 32 tokens need more than the whole cache"):
        llm.generate([[1, 2]], max_new_tokens=2, n=2, use_tqdm=False)
    assert llm.generate([[1, 2]], max_new_tokens=2, use_tqdm=False) == [reference((1, 2), 2)]


# ---- the Triton kernels (through the interpreter on a CPU: a few small cases) -------------------------
@pytest.mark.slow
@pytest.mark.parametrize("budget", [None, 3])
def test_triton_backend_chat_turn_and_chunked_prefill(budget):
    """The bug-1 arrival pattern on the Triton kernels, one layer: a mixed batch (A's decode, B's
    prefill chunk over A's cached blocks) in one forward pass, whole prompts or chunks of 3."""
    a_prompt = tokens(8, seed=1)
    a_out = reference(tuple(a_prompt), 6, n_layer=1)
    b_prompt = a_prompt + a_out[:4] + [7]
    llm = LLM(paged_model("triton", n_layer=1), num_usable_blocks=16, block_size=4, max_num_seqs=2,
              enable_prefix_caching=True, max_num_batched_tokens=budget)
    arrivals = [(0, a_prompt, SamplingParams(max_new_tokens=6)), (4, b_prompt, SamplingParams(max_new_tokens=3))]
    outs = run_with_arrivals(llm, arrivals, checked_every_step(budget, 2))
    assert outs == [a_out, reference(tuple(b_prompt), 3, n_layer=1)]
    assert llm.metrics["prefix_hit_tokens"] > 0
    assert any(h["prefill_tokens"] and h["decode_tokens"] for h in llm.metrics["history"])   # mixed steps


def test_metrics_are_typed_records_read_by_key_too():
    llm = LLM(paged_model(), num_usable_blocks=16, block_size=4, max_num_batched_tokens=4)
    llm.generate([tokens(9, seed=2)], max_new_tokens=3, use_tqdm=False)
    m = llm.metrics
    assert m["steps"] == m.steps == len(m["history"]) and "history" in m and "nope" not in m
    assert [h["prefill_tokens"] for h in m["history"]] == [4, 4, 1, 0, 0]   # 9 prompt tokens in chunks of 4
    assert [h.decode_tokens for h in m.history] == [0, 0, 0, 1, 1]   # the first token came with the prefill
    assert "reserved_blocks" not in m["history"][0]
    with pytest.raises(KeyError, match="no field 'nope'"):
        m["nope"]
    reserve = ReserveMaxLLM(paged_model(), num_usable_blocks=16, block_size=4, max_len=16)
    reserve.generate([[1, 2]], max_new_tokens=2, use_tqdm=False)
    assert reserve.metrics["history"][0]["reserved_blocks"] == 4


def test_a_request_no_policy_would_ever_admit_is_an_error_not_a_hang():
    llm = LLM(paged_model(), num_usable_blocks=8, block_size=4)
    llm.scheduler.can_admit = lambda seq: False                   # a broken admission rule
    with pytest.raises(RuntimeError, match="request 0 cannot be admitted even into an empty cache"):
        llm.generate([[1, 2, 3]], max_new_tokens=2, use_tqdm=False)


# ---- resumed prefixes, tenants, latency as engines report it ---------------------------------------------
def test_a_preempted_request_resumes_on_its_cached_blocks_and_the_saving_is_counted():
    prompts = [tokens(12, seed=s) for s in range(3)]
    llm = LLM(paged_model(), num_usable_blocks=10, block_size=4, enable_prefix_caching=True)
    outs = llm.generate(prompts, max_new_tokens=12, use_tqdm=False)
    assert outs == [reference(tuple(p), 12) for p in prompts]
    m = llm.metrics
    assert m["preemptions"] > 0 and m["resumed_hit_tokens"] > 0
    assert m["resumed_hit_tokens"] <= m["prefix_hit_tokens"] and m["resumed_hit_tokens"] % 4 == 0
    plain = LLM(paged_model(), num_usable_blocks=10, block_size=4)
    assert plain.generate(prompts, max_new_tokens=12, use_tqdm=False) == outs
    assert plain.metrics["resumed_hit_tokens"] == 0
    assert m["prompt_tokens_computed"] + m["resumed_hit_tokens"] <= plain.metrics["prompt_tokens_computed"]


def test_a_cache_salt_keeps_requests_from_sharing_blocks():
    prompt = tokens(13, seed=4)
    llm = LLM(paged_model(), num_usable_blocks=32, block_size=4, enable_prefix_caching=True)
    for salt, hits in [("alice", 0), ("bob", 0), ("alice", 12), (None, 0)]:
        request = llm.add_request(prompt, SamplingParams(max_new_tokens=2), cache_salt=salt)
        while llm.scheduler.has_unfinished():
            llm.step()
        assert llm.pop_result(request) == reference(tuple(prompt), 2)
        assert llm.metrics["requests"][-1]["num_cached_tokens"] == hits


def test_latency_percentiles_and_goodput():
    llm = LLM(paged_model(), num_usable_blocks=32, block_size=4, max_num_batched_tokens=8)
    llm.generate([tokens(10, seed=s) for s in range(4)], max_new_tokens=5, use_tqdm=False)
    m = llm.metrics
    requests = m["requests"]
    assert all(len(r["itl_s"]) == 4 and r["tpot_s"] == pytest.approx(sum(r["itl_s"]) / 4) for r in requests)
    ttft = sorted(r["ttft_s"] for r in requests)
    assert ttft[0] <= m["ttft_p50_s"] <= m["ttft_p90_s"] <= m["ttft_p99_s"] <= ttft[-1]
    assert 0 < m["itl_p50_s"] <= m["itl_p99_s"]
    assert m.goodput(ttft_slo_s=1e9, tpot_slo_s=1e9) == pytest.approx(4 / m["elapsed_s"])
    assert m.goodput(ttft_slo_s=0.0, tpot_slo_s=1e9) == 0.0 and m.slo_attainment(1e9, 1e9) == 1.0
    assert m.met_slo(1e9, 1e9) == 4 and m.met_slo(ttft_slo_s=0.0, tpot_slo_s=1e9) == 0


def test_reset_metrics_changes_nothing_in_the_engine():
    llm = LLM(paged_model(), num_usable_blocks=10, block_size=4)
    llm.generate([tokens(12, seed=s) for s in range(3)], max_new_tokens=12, use_tqdm=False)
    before = (llm.scheduler.num_preemptions, llm.block_manager.hit_tokens)
    assert before[0] > 0
    llm.reset_metrics()
    assert (llm.scheduler.num_preemptions, llm.block_manager.hit_tokens) == before
    assert llm.metrics["preemptions"] == 0
