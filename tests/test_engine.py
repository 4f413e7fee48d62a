"""pagedlib.engine.llm: LLM generates exactly what transformers generates, whatever the memory does.

The reference for every request is ``transformers``' greedy ``generate`` on that request alone (fp32,
on the CPU). The engines run on ``pagedlib.runtime.DEVICE`` with models built in fp32 there too
(``from_hf`` would default to fp16 on a GPU), so equal tokens stay a fair demand on a GPU.
"""
import functools

import pytest
import torch
import transformers  # pinned in requirements.txt: a missing one fails, never skips

from pagedlib import DEVICE, GPT2, LLM, SamplingParams
from pagedlib.engine.baseline import ReserveMaxLLM, hf_static_generate

transformers.logging.set_verbosity_error()


CONFIGS = {"h4v300": dict(n_head=4, vocab_size=300), "h2v100": dict(n_head=2, vocab_size=100)}


@functools.lru_cache(maxsize=None)
def tiny_hf(name="h4v300", n_layer=2):
    """A random-initialised small GPT2LMHeadModel (fp32, eager attention), built once per config."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=n_layer, n_embd=64, n_positions=128, attn_implementation="eager",
                                     initializer_range=0.2,  # larger weights: outputs depend on every K/V
                                     **CONFIGS[name])
    return transformers.GPT2LMHeadModel(config).eval()


@functools.lru_cache(maxsize=None)
def reference(name, prompt, max_new_tokens, n_layer=2):
    """transformers' greedy generate for one request alone."""
    with torch.no_grad():
        ids = torch.tensor([prompt])                          # an explicit mask: token 0 is not padding
        out = tiny_hf(name, n_layer).generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                              do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def random_prompts(num, vocab, lo=1, hi=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (num,), generator=g).tolist()
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]


def paged(name="h4v300", n_layer=2, backend="torch"):
    """The tiny model as a pagedlib GPT2 on the runtime's device, in fp32 (the reference's dtype)."""
    return GPT2.from_hf(tiny_hf(name, n_layer), backend=backend, dtype=torch.float32, device=DEVICE)


def engine(name="h4v300", backend="torch", num_usable_blocks=64, block_size=16, n_layer=2, **kwargs):
    return LLM(paged(name, n_layer, backend), num_usable_blocks, block_size, **kwargs)


def assert_matches_transformers(llm, name, prompts, max_new_tokens, n_layer=2):
    outs = llm.generate(prompts, max_new_tokens=max_new_tokens, use_tqdm=False)
    for i, (prompt, out) in enumerate(zip(prompts, outs)):
        assert out == reference(name, tuple(prompt), max_new_tokens, n_layer), f"request {i} differs"
    return outs


# ---- equality with transformers -------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_ample_memory_matches_transformers(name):
    llm = engine(name, num_usable_blocks=64, max_num_seqs=8)
    prompts = random_prompts(8, CONFIGS[name]["vocab_size"])
    assert_matches_transformers(llm, name, prompts, 12)
    m = llm.metrics
    assert m["preemptions"] == 0 and m["tokens_generated"] == 8 * 12
    assert llm.block_manager.num_used_blocks == 0           # everything freed at the end


def test_memory_pressure_preempts_and_still_matches():
    llm = engine(num_usable_blocks=16, block_size=4, max_num_seqs=8)   # 64 slots for 8 requests of up to 55 tokens
    prompts = random_prompts(8, 300)
    assert_matches_transformers(llm, "h4v300", prompts, 16)
    assert llm.metrics["preemptions"] > 0
    assert llm.metrics["peak_blocks_used"] == 16


@pytest.mark.parametrize("block_size", [1, 8, 16])
def test_block_sizes_match_transformers(block_size):
    llm = engine("h2v100", num_usable_blocks=400 // block_size, block_size=block_size, max_num_seqs=6)
    prompts = random_prompts(6, 100, seed=block_size)
    assert_matches_transformers(llm, "h2v100", prompts, 10)


def test_prefix_caching_hits_and_matches():
    g = torch.Generator().manual_seed(5)
    system = torch.randint(0, 300, (20,), generator=g).tolist()        # a shared 20-token prefix
    prompts = [system + torch.randint(0, 300, (n,), generator=g).tolist() for n in (3, 7, 1, 12)]
    llm = engine(num_usable_blocks=48, block_size=4, max_num_seqs=2, enable_prefix_caching=True)
    assert_matches_transformers(llm, "h4v300", prompts, 8)
    assert llm.metrics["prefix_hit_tokens"] >= 3 * 20             # later requests reuse the 5 full blocks
    computed = llm.metrics["prompt_tokens_computed"]
    assert computed < sum(map(len, prompts))
    # a second call still finds the prefix (freed blocks keep their content)
    assert_matches_transformers(llm, "h4v300", prompts[:1], 8)
    assert llm.metrics["prefix_hit_tokens"] == 20


def test_prefix_caching_off_computes_every_prompt_token():
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9]] * 3
    llm = engine(num_usable_blocks=32, block_size=4, max_num_seqs=1)
    assert_matches_transformers(llm, "h4v300", prompts, 4)
    assert llm.metrics["prefix_hit_tokens"] == 0 and llm.metrics["prompt_tokens_computed"] == 27


def test_prefix_caching_under_pressure_matches():
    g = torch.Generator().manual_seed(6)
    system = torch.randint(0, 300, (12,), generator=g).tolist()
    prompts = [system + torch.randint(0, 300, (n,), generator=g).tolist() for n in (5, 9, 2, 14, 4, 8)]
    llm = engine(num_usable_blocks=20, block_size=4, max_num_seqs=6, enable_prefix_caching=True)
    assert_matches_transformers(llm, "h4v300", prompts, 14)
    assert llm.metrics["preemptions"] > 0 and llm.metrics["prefix_hit_tokens"] > 0


def test_triton_backend_end_to_end_with_preemption():
    """The Triton kernels (interpreter on a CPU) serve a tiny batch exactly like transformers, with
    a preemption and its recompute on the way."""
    llm = engine("h4v300", backend="triton", num_usable_blocks=4, block_size=4, n_layer=1, max_num_seqs=2)
    prompts = [[5, 3, 9, 1, 4, 7], [2, 8]]                    # K/V of 9 and 5 tokens: 5 blocks > 4
    assert_matches_transformers(llm, "h4v300", prompts, 4, n_layer=1)
    assert llm.metrics["preemptions"] > 0


def test_triton_backend_end_to_end_with_prefix_cache():
    """paged_prefill over a cached prefix, through the Triton kernels."""
    llm = engine("h2v100", backend="triton", num_usable_blocks=8, block_size=4, n_layer=1, max_num_seqs=1,
                 enable_prefix_caching=True)
    prompts = [[5, 3, 9, 1, 4, 7], [5, 3, 9, 1, 6]]           # one shared full block
    assert_matches_transformers(llm, "h2v100", prompts, 3, n_layer=1)
    assert llm.metrics["prefix_hit_tokens"] == 4


def test_engine_batches_carry_their_longest_chunk(monkeypatch):
    """The engine builds each batch on the host, so it tells the model the longest chunk (no GPU sync
    to find it): a prompt's uncached tokens in a prefill, 1 in a decode."""
    seen = []
    forward = GPT2.forward
    monkeypatch.setattr(GPT2, "forward", lambda self, batch, kv: seen.append(batch) or forward(self, batch, kv))
    llm = engine(num_usable_blocks=32, block_size=4, max_num_seqs=3, enable_prefix_caching=True)
    prompts = [[5, 3, 9, 1, 4, 7, 2], [5, 3, 9, 1, 6], [8, 8, 1]]   # the second reuses the first's block
    assert_matches_transformers(llm, "h4v300", prompts, 3)
    assert llm.metrics["prefix_hit_tokens"] > 0
    chunks = [torch.diff(b.query_start_loc).tolist() for b in seen]
    assert [b.max_query_len for b in seen] == [max(c) for c in chunks]
    assert all(b.max_query_len == 1 for b in seen if b.is_decode) and any(b.is_decode for b in seen)
    assert any(not b.is_decode and b.max_query_len > 1 for b in seen)


# ---- sampling ----------------------------------------------------------------------------------
def test_parallel_sampling_shares_the_prompt_and_is_reproducible():
    prompt = list(range(10, 30))                              # 20 tokens: 2 full blocks + 1 partial (8)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=11, n=3)
    llm = engine(num_usable_blocks=32, block_size=8, max_num_seqs=4)
    request = llm.add_request(prompt, params)
    llm.step()                                                # prefill once, fork into 3 samples
    tables = [llm.block_manager.block_table(s.seq_id) for s in llm.scheduler.running]
    assert len(tables) == 3 and tables[0] == tables[1] == tables[2]
    assert all(llm.block_manager.ref_count(b) == 3 for b in tables[0])
    assert llm.block_manager.num_used_blocks == 3             # not 9
    while llm.scheduler.has_unfinished():
        llm.step()
    samples = llm.pop_result(request)
    assert llm.metrics["peak_blocks_saved_by_sharing"] == 6   # 9 logical blocks held in 3 physical
    assert len(samples) == 3 and all(len(s) == 6 for s in samples)
    assert len({tuple(s) for s in samples}) > 1               # the samples differ
    again = engine(num_usable_blocks=32, block_size=8, max_num_seqs=4).generate([prompt], params, use_tqdm=False)
    assert again == [samples]                                 # same seed, same samples
    for j in range(3):                                        # sample j is reproducible from seed + j alone
        one = SamplingParams(max_new_tokens=6, temperature=1.0, seed=11 + j)
        assert llm.generate([prompt], one, use_tqdm=False) == [samples[j]]


def test_forked_samples_read_their_prompt_after_copy_on_write():
    """Greedy n=3: every sample must equal transformers' output, so the shared, partly filled last
    prompt block must be copied (with its K/V) before each sample writes its own token into it."""
    prompt = list(range(40, 61))                              # 21 tokens: the last block holds 5 of 8
    llm = engine(num_usable_blocks=32, block_size=8, max_num_seqs=4)
    samples = llm.generate([prompt], max_new_tokens=10, n=3, use_tqdm=False)[0]
    assert samples == [reference("h4v300", tuple(prompt), 10)] * 3


def test_sampling_filters():
    prompts = random_prompts(3, 300, seed=9)
    llm = engine()
    greedy = llm.generate(prompts, max_new_tokens=5, use_tqdm=False)
    assert llm.generate(prompts, max_new_tokens=5, temperature=2.0, top_k=1, seed=0, use_tqdm=False) == greedy
    assert llm.generate(prompts, max_new_tokens=5, temperature=2.0, top_p=1e-6, seed=0, use_tqdm=False) == greedy
    hot = llm.generate(prompts, max_new_tokens=5, temperature=5.0, seed=1, use_tqdm=False)
    assert hot != greedy and hot == llm.generate(prompts, max_new_tokens=5, temperature=5.0, seed=1, use_tqdm=False)
    torch.manual_seed(3)
    a = llm.generate(prompts, max_new_tokens=5, temperature=1.0, use_tqdm=False)   # seed=None: from torch's RNG
    torch.manual_seed(3)
    assert llm.generate(prompts, max_new_tokens=5, temperature=1.0, use_tqdm=False) == a


def test_top_k_keeps_only_the_k_best():
    from pagedlib.engine.llm import sample_token
    logits = torch.tensor([0.0, 5.0, 4.0, -1.0, 4.5])
    params = SamplingParams(temperature=100.0, top_k=2)
    drawn = {sample_token(logits, params, torch.Generator().manual_seed(s)) for s in range(200)}
    assert drawn == {1, 4}
    params = SamplingParams(temperature=1.0, top_p=0.7)      # p = .50, .30, .18, ...: the top 2 reach 0.7
    drawn = {sample_token(logits, params, torch.Generator().manual_seed(s)) for s in range(300)}
    assert drawn == {1, 4}


def test_top_p_keeps_a_token_only_while_the_better_ones_fall_short_of_p():
    """At the boundary: when the better tokens' probability equals top_p exactly, the nucleus is full
    without the next token, so it is never drawn (``>=``; ``>`` would draw it a quarter of the time)."""
    from pagedlib.engine.llm import sample_token
    logits = torch.tensor([0.4, 0.3, 0.3]).log()                    # probabilities about .4, .3, .3
    probs = logits.softmax(-1).sort(descending=True).values
    boundary = float((probs.cumsum(-1) - probs)[2])                 # the two best, as sample_token sums them
    params = SamplingParams(temperature=1.0, top_p=boundary)
    drawn = {sample_token(logits, params, torch.Generator().manual_seed(s)) for s in range(300)}
    assert drawn == {0, 1} or drawn == {0, 2}
    wider = SamplingParams(temperature=1.0, top_p=min(1.0, boundary + 1e-3))
    assert len({sample_token(logits, wider, torch.Generator().manual_seed(s)) for s in range(300)}) == 3


def test_stops_at_eos():
    prompts = random_prompts(2, 300, seed=4)
    full = [reference("h4v300", tuple(p), 10) for p in prompts]
    eos = full[0][3]
    outs = engine().generate(prompts, max_new_tokens=10, eos_token_id=eos, use_tqdm=False)
    for out, ref in zip(outs, full):
        cut = ref.index(eos) + 1 if eos in ref else len(ref)
        assert out == ref[:cut]
    assert outs[0][-1] == eos and len(outs[0]) <= 4


# ---- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("prompts, kwargs, match", [
    ([[1, 2], []], {}, r"prompts\[2\] is empty"),
    ([[1, 300]], {}, r"token id 300, outside the model's vocabulary \[0, 300\)"),
    ([[-1, 2]], {}, r"token id -1"),
    ([[1.5]], {}, r"integer token ids"),
    ([[1, True]], {}, r"integer token ids"),
    ([list(range(100))], {"max_new_tokens": 29}, r"129 exceeds the model's context of 128"),
    ([list(range(60))], {"max_new_tokens": 10}, r"need 5 blocks of 16, but the whole cache has 4"),
    ([[1]], {"n": 5}, r"max_num_seqs = 4"),
    ([[1]], {"max_new_tokens": 0}, r"max_new_tokens must be a positive integer"),
    ([[1]], {"temperature": -1.0}, r"temperature must be >= 0"),
    ([[1]], {"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ([[1]], {"eos_token_id": 999}, r"eos_token_id 999 is outside"),
    ([], {}, r"non-empty list"),
])
def test_bad_input_is_refused_before_any_work(prompts, kwargs, match):
    llm = engine(num_usable_blocks=4, max_num_seqs=4)
    with pytest.raises(ValueError, match=match):
        llm.generate([[7, 7]] + prompts if prompts else prompts, use_tqdm=False, **kwargs)
    assert llm.metrics["steps"] == 0 or not prompts
    assert not llm.scheduler.has_unfinished() and llm.block_manager.num_used_blocks == 0
    assert llm.generate([[1, 2, 3]], max_new_tokens=4, use_tqdm=False) == [reference("h4v300", (1, 2, 3), 4)]


def test_engine_arguments_are_checked():
    model = GPT2.from_hf(tiny_hf())
    with pytest.raises(ValueError, match="num_usable_blocks must be a positive integer"):
        LLM(model, 0)
    with pytest.raises(TypeError, match="num_usable_blocks"):
        LLM(model)
    with pytest.raises(TypeError, match="num_usable_blocks only"):
        LLM(model, 8, num_blocks=8)
    with pytest.raises(ValueError, match="block_size"):
        LLM(model, 8, block_size=0)
    with pytest.raises(TypeError, match="GPT2.from_hf"):
        LLM(tiny_hf(), 8)
    with pytest.raises(ValueError, match="one SamplingParams or one per prompt"):
        LLM(model, 8).generate([[1], [2]], [SamplingParams()], use_tqdm=False)


def test_num_blocks_means_the_pool_null_block_included_and_the_engine_asks_for_usable_blocks():
    """One meaning per name: ``num_blocks`` is a pool's size, block ids ``[0, num_blocks)`` with the null
    block (the manager's, the KV cache's, vLLM's ``num_gpu_blocks``); the engine takes the blocks requests
    can hold, ``num_usable_blocks``, and builds a pool of one more."""
    llm = LLM(GPT2.from_hf(tiny_hf()), num_usable_blocks=8, block_size=4)
    assert llm.num_usable_blocks == llm.block_manager.num_usable_blocks == 8
    assert llm.block_manager.num_blocks == llm.kv_cache.num_blocks == 9
    assert llm.metrics["num_usable_blocks"] == 8
    with pytest.warns(DeprecationWarning, match="num_usable_blocks"):
        assert llm.metrics["num_blocks"] == 8                               # the old key still reads it
    for cls in (LLM, ReserveMaxLLM):
        with pytest.warns(DeprecationWarning, match="num_usable_blocks"):
            old = cls(GPT2.from_hf(tiny_hf()), num_blocks=8, block_size=4)   # the old name still works
        assert old.num_usable_blocks == 8 and old.block_manager.num_blocks == 9
        with pytest.warns(DeprecationWarning, match="num_usable_blocks"):
            assert old.num_blocks == 8


# ---- metrics, progress bar ---------------------------------------------------------------------
def test_metrics_and_history():
    llm = engine(num_usable_blocks=12, block_size=4, max_num_seqs=3)
    prompts = random_prompts(5, 300, seed=2)
    outs = llm.generate(prompts, max_new_tokens=6, use_tqdm=False)
    m = llm.metrics
    for key in ("preemptions", "peak_blocks_used", "prefix_hit_tokens", "steps", "tokens_generated",
                "peak_running", "elapsed_s", "tokens_per_s", "history"):
        assert key in m
    assert m["tokens_generated"] == sum(map(len, outs)) == 30
    assert len(m["history"]) == m["steps"] and m["history"][-1]["step"] == m["steps"]
    assert max(h["running"] for h in m["history"]) == m["peak_running"] <= 3
    assert max(h["blocks_used"] for h in m["history"]) == m["peak_blocks_used"] <= 12
    assert sum(h["preempted"] for h in m["history"]) == m["preemptions"]
    assert sum(h["decode_tokens"] for h in m["history"]) + len(prompts) + m["preemptions"] == 30


def test_progress_bar_counts_requests(capsys):
    engine().generate([[1, 2], [3], [4, 5, 6]], max_new_tokens=2, use_tqdm=True)
    err = capsys.readouterr().err
    assert "requests" in err and "3/3" in err


# ---- baselines ---------------------------------------------------------------------------------------
def test_reserve_max_admits_fewer_but_generates_the_same():
    prompts = random_prompts(8, 300, seed=8, hi=20)
    model = paged()
    paged_llm = LLM(model, num_usable_blocks=32, block_size=4, max_num_seqs=16)
    reserve = ReserveMaxLLM(model, num_usable_blocks=32, block_size=4, max_num_seqs=16, max_len=64)
    outs = paged_llm.generate(prompts, max_new_tokens=8, use_tqdm=False)
    assert reserve.generate(prompts, max_new_tokens=8, use_tqdm=False) == outs
    assert reserve.metrics["peak_running"] == 2               # 32 blocks / 16 reserved each
    assert paged_llm.metrics["peak_running"] >= 3 * reserve.metrics["peak_running"]
    assert reserve.metrics["preemptions"] == 0
    with pytest.raises(ValueError, match="max_len = 64"):
        reserve.generate([[1] * 60], max_new_tokens=8, use_tqdm=False)


def test_hf_static_batches_match_one_by_one():
    prompts = random_prompts(5, 300, seed=3, hi=12)
    outs, stats = hf_static_generate(tiny_hf(), prompts, [4, 6, 2, 6, 3], batch_size=2)
    assert [len(o) for o in outs] == [4, 6, 2, 6, 3] and stats["tokens_generated"] == 21
    for prompt, out in zip(prompts, outs):
        assert out == reference("h4v300", tuple(prompt), 6)[:len(out)]


# ---- benchmark and figures -----------------------------------------------------------------------------
def test_bench_engine_quick_prints_the_table_and_the_command(capsys):
    from pagedlib.bench.__main__ import main
    assert main(["engine", "--quick", "--no-hf"]) == 0
    out = capsys.readouterr().out
    assert "capacity, paged vs reserve-max" in out and "paged (LLM)" in out and "reserve-max" in out
    assert "outputs identical, paged vs reserve-max: 12/12" in out
    assert "TTFT p50/p90/p99" in out and "TPOT p50/p90/p99" in out and "token budget per step: none" in out
    assert "reproduce: python -m pagedlib.bench engine --quick --no-hf" in out


def test_scheduler_figures():
    import matplotlib
    matplotlib.use("Agg")
    from pagedlib import plots
    llm = engine(num_usable_blocks=10, block_size=4, max_num_seqs=4)
    llm.generate(random_prompts(6, 300, seed=4, hi=16), max_new_tokens=8, use_tqdm=False)
    assert llm.metrics["preemptions"] > 0
    fig = plots.scheduler_timeline(llm.metrics)
    top, bottom = fig.axes
    assert top.get_title() and top.get_ylabel() == "sequences" and "step" in bottom.get_xlabel()
    assert {t.get_text() for t in top.get_legend().get_texts()} == {"running", "waiting", "a preemption"}
    reserve = ReserveMaxLLM(llm.model, num_usable_blocks=10, block_size=4, max_num_seqs=4, max_len=24)
    reserve.generate(random_prompts(6, 300, seed=4, hi=16), max_new_tokens=8, use_tqdm=False)
    fig = plots.compare_timelines({"paged": llm.metrics, "reserve-max": reserve.metrics})
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"paged: in use", "reserve-max: reserved", "cache size"} <= labels
