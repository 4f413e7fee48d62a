"""pagedlib.models.llama and pagedlib.models.loading: the Llama family served by the engine gives transformers' tokens.

The reference for every request is ``transformers``' greedy ``generate`` on that request alone (fp32,
on the CPU). The models are random-initialised with ``initializer_range=0.1`` (not the usual 0.02): logits
are then spread out (std about 1), so greedy decoding has no near-ties that rounding could break,
and the output depends on every cached K/V row (checked below by corrupting one row at a time).
Measured on these configs: at 0.02-0.05 logits bunch within 0.05 of each other; from 0.3 up,
attention saturates to its best key and swapping a cached row for another one changes the logits
by under 1e-5 (at 0.5, not at all), so a test could no longer see a wrong row.
"""
import functools

import pytest
import torch
import transformers  # pinned in requirements.txt: a missing one fails, never skips

import pagedlib
from pagedlib import DEVICE, LLM, Llama, from_hf
from pagedlib.attention.metadata import PagedBatch
from pagedlib.models.layers import PagedModel
from pagedlib.models.llama import LlamaConfig, rope_frequencies

transformers.logging.set_verbosity_error()

INIT = 0.1
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
# name -> (transformers class, config): GQA 8/2 and 4/1, MHA 4/4, tied and untied heads, Qwen2 biases
CONFIGS = {
    "gqa8_2": ("llama", dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2)),
    "gqa4_1_tied": ("llama", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1,
                                  tie_word_embeddings=True)),
    "mha4_4": ("llama", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4)),
    "mha4_4_tied_llama3": ("llama", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                         tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE)),
    "qwen2_4_2": ("qwen2", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2)),
    "qwen2_4_2_tied": ("qwen2", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                     tie_word_embeddings=True)),
}
VOCAB = 300


def hf_config(kind, layers=2, **fields):
    cls = transformers.LlamaConfig if kind == "llama" else transformers.Qwen2Config
    fields = dict(dict(vocab_size=VOCAB, intermediate_size=96, num_hidden_layers=layers,
                       max_position_embeddings=128, initializer_range=INIT), **fields)
    return cls(**fields)


def hf_model(config):
    """A random transformers model; its biases (Qwen2's q/k/v) random too, not the zeros transformers
    starts them at, so a model that dropped them would be seen."""
    torch.manual_seed(0)
    cls = transformers.LlamaForCausalLM if config.model_type == "llama" else transformers.Qwen2ForCausalLM
    model = cls(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.normal_(0, INIT)
    return model


@functools.lru_cache(maxsize=None)
def tiny_hf(name, layers=2):
    """The named random-initialised transformers model (fp32), built once."""
    kind, fields = CONFIGS[name]
    return hf_model(hf_config(kind, layers, **fields))


@functools.lru_cache(maxsize=None)
def reference(name, prompt, max_new_tokens, layers=2):
    """transformers' greedy generate for one request alone."""
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = tiny_hf(name, layers).generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                             max_new_tokens=max_new_tokens, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def paged(name, backend="torch", layers=2):
    return from_hf(tiny_hf(name, layers), backend=backend, dtype=torch.float32, device=DEVICE)


def random_prompts(num, lo=1, hi=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist()
            for n in torch.randint(lo, hi, (num,), generator=g).tolist()]


def assert_matches_transformers(llm, name, prompts, max_new_tokens, layers=2):
    outs = llm.generate(prompts, max_new_tokens=max_new_tokens, use_tqdm=False)
    for i, (prompt, out) in enumerate(zip(prompts, outs)):
        assert out == reference(name, tuple(prompt), max_new_tokens, layers), f"request {i} differs"


# ---- the engine gives transformers' tokens ------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_ample_memory_matches_transformers(name):
    model = paged(name)
    assert isinstance(model, Llama) and isinstance(model, PagedModel)
    assert (model.lm_head is None) == CONFIGS[name][1].get("tie_word_embeddings", False)
    llm = LLM(model, num_usable_blocks=64, block_size=16, max_num_seqs=6)
    assert_matches_transformers(llm, name, random_prompts(6), 10)
    assert llm.metrics["preemptions"] == 0


@pytest.mark.parametrize("name", ["gqa8_2", "qwen2_4_2"])
def test_memory_pressure_preempts_and_still_matches(name):
    llm = LLM(paged(name), num_usable_blocks=14, block_size=4, max_num_seqs=6)   # 56 slots for 6 requests
    assert_matches_transformers(llm, name, random_prompts(6, seed=2), 14)
    assert llm.metrics["preemptions"] > 0


@pytest.mark.parametrize("name", ["gqa4_1_tied", "qwen2_4_2"])
def test_prefix_caching_hits_and_matches(name):
    g = torch.Generator().manual_seed(5)
    system = torch.randint(0, VOCAB, (13,), generator=g).tolist()        # 3 full blocks of 4 shared
    prompts = [system + torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (3, 7, 1, 12)]
    llm = LLM(paged(name), num_usable_blocks=40, block_size=4, max_num_seqs=2, enable_prefix_caching=True)
    assert_matches_transformers(llm, name, prompts, 8)
    assert llm.metrics["prefix_hit_tokens"] >= 3 * 12


@pytest.mark.parametrize("budget", [3, 16])
@pytest.mark.parametrize("name", ["gqa8_2", "qwen2_4_2"])
def test_a_token_budget_chunks_prompts_and_still_matches(name, budget):
    """Prompts longer than the budget are prefilled in chunks, mixed with decodes, under preemption."""
    llm = LLM(paged(name), num_usable_blocks=20, block_size=4, max_num_seqs=4, max_num_batched_tokens=budget,
              enable_prefix_caching=True)
    assert_matches_transformers(llm, name, random_prompts(5, lo=10, hi=40, seed=3), 10)
    history = llm.metrics["history"]
    assert all(row["prefill_tokens"] + row["decode_tokens"] <= budget for row in history)
    assert any(row["prefill_tokens"] and row["decode_tokens"] for row in history)   # mixed steps


def test_triton_backend_end_to_end_gqa():
    """The Triton kernels (through the interpreter on a CPU) serve a GQA model: the decode kernel
    reads one KV head for its group of 4 query heads; prefill, a cached prefix and preemption too."""
    name = "gqa8_2"
    llm = LLM(paged(name, "triton", layers=1), num_usable_blocks=4, block_size=4, max_num_seqs=2,
              enable_prefix_caching=True)
    prompts = [[5, 3, 9, 1, 4, 7], [5, 3, 9, 1, 8]]          # one shared full block; 11 + 10 tokens > 16 slots
    assert_matches_transformers(llm, name, prompts, 5, layers=1)
    assert llm.metrics["preemptions"] > 0 and llm.metrics["prefix_hit_tokens"] >= 4


# ---- every cached row matters -------------------------------------------------------------------
def prefill_then_decode(model, tokens, kv, corrupt=None):
    """Logits of the last token after prefilling tokens[:-1] into blocks [3, 0, 2] (block_size 4), with
    ``corrupt(kv)`` applied to the cache in between."""
    table = torch.tensor([[3, 0, 2]], dtype=torch.int32, device=DEVICE)
    slot = lambda i: int(table[0, i // 4]) * 4 + i % 4
    n = len(tokens) - 1

    def batch(first, last, is_decode):
        return PagedBatch(torch.tensor(tokens[first:last], device=DEVICE),
                          torch.arange(first, last, device=DEVICE),
                          torch.tensor([slot(i) for i in range(first, last)], device=DEVICE), table,
                          torch.tensor([last], dtype=torch.int32, device=DEVICE),
                          torch.tensor([0, last - first], dtype=torch.int32, device=DEVICE), is_decode)
    model(batch(0, n, False), kv)
    if corrupt is not None:
        corrupt(kv)
    return model(batch(n, n + 1, True), kv)[0]


@pytest.mark.parametrize("name", ["gqa8_2", "qwen2_4_2"])
@pytest.mark.parametrize("which", [0, 1], ids=["key", "value"])
def test_corrupting_any_one_cached_row_changes_the_output(which, name):
    """A K or V row replaced by its neighbour's (what a wrong slot would read) changes the next
    token's logits, for every cached position in every layer."""
    model = paged(name)
    tokens = [7, 1, 250, 33, 4, 96, 12, 180, 5, 61]
    kv = model.make_kv_cache(num_blocks=4, block_size=4)
    clean = prefill_then_decode(model, tokens, kv)
    torch.testing.assert_close(clean.cpu(), tiny_hf(name)(torch.tensor([tokens])).logits[0, -1].detach(),
                               atol=1e-4, rtol=1e-4)
    slots = [[3, 0, 2][i // 4] * 4 + i % 4 for i in range(len(tokens) - 1)]
    for layer in range(2):
        for position, slot in enumerate(slots):
            other = slots[(position + 1) % len(slots)]

            def corrupt(cache, layer=layer, slot=slot, other=other):
                rows = cache.layers[layer][which].flatten(0, 1)     # [num_slots, num_kv_heads, head_dim]
                rows[slot] = rows[other]
            kv = model.make_kv_cache(num_blocks=4, block_size=4)
            changed = prefill_then_decode(model, tokens, kv, corrupt)
            assert (changed - clean).abs().max() > 1e-2, f"layer {layer}, position {position} had no effect"


# ---- RoPE, shapes and what is refused ------------------------------------------------------------
def test_llama3_rope_matches_transformers_frequencies():
    hf = tiny_hf("mha4_4_tied_llama3")
    mine = rope_frequencies(pagedlib.models.llama.config_from_hf(hf.config))
    theirs = hf.model.rotary_emb.inv_freq
    assert torch.equal(mine, theirs)
    default = rope_frequencies(LlamaConfig(head_dim=16, rope_theta=500000.0))
    assert not torch.equal(mine, default)                   # the scaling really changed some of them


@pytest.mark.parametrize("head_dim, hidden", [(16, 32), (128, 256), (32, 128)])
def test_head_dim_range_matches_transformers_logits(head_dim, hidden):
    """head_dim 16 and 128 (the ends of the range), and one set apart from hidden_size / num_heads."""
    config = hf_config("llama", layers=1, hidden_size=hidden, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=head_dim)
    hf = hf_model(config)
    model = from_hf(hf, backend="torch", dtype=torch.float32, device=DEVICE)
    tokens = [3, 1, 4, 1, 5, 9, 2]
    kv = model.make_kv_cache(num_blocks=4, block_size=4)
    got = prefill_then_decode(model, tokens, kv)
    torch.testing.assert_close(got.cpu(), hf(torch.tensor([tokens])).logits[0, -1].detach(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fields, match", [
    (dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
     r"rope_type 'linear' .* supports \['default', 'llama3'\]"),
    (dict(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0}), "rope_type 'yarn'"),
    (dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=4), "head_dim 8 is not supported.*16 to 128"),
    (dict(hidden_size=512, num_attention_heads=2, num_key_value_heads=2), "head_dim 256 is not supported"),
    (dict(hidden_act="gelu"), "hidden_act 'gelu'"),
])
def test_unsupported_llama_settings_are_refused_by_name(fields, match):
    fields = dict(dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2), **fields)
    with pytest.raises(ValueError, match=match):
        from_hf(hf_model(hf_config("llama", layers=1, **fields)))


def test_qwen2_sliding_window_is_refused():
    hf = hf_model(hf_config("qwen2", layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                            use_sliding_window=True, sliding_window=8, max_window_layers=0))
    with pytest.raises(ValueError, match="sliding_window 8 is not supported"):
        from_hf(hf)


def test_unsupported_architecture_is_refused_with_the_supported_list():
    torch.manual_seed(0)
    neox = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64))
    with pytest.raises(ValueError, match=r"model_type 'gpt_neox'.*supported: GPT2LMHeadModel \(gpt2\), "
                                         r"LlamaForCausalLM \(llama\), Qwen2ForCausalLM \(qwen2\)"):
        from_hf(neox)
    with pytest.raises(ValueError, match="must be a LlamaForCausalLM"):
        from_hf(tiny_hf("mha4_4").model)                      # the body without its head
    with pytest.raises(ValueError, match="not a Llama-family model"):
        Llama.from_hf(transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2)))


def test_from_hf_picks_gpt2_by_architecture():
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50,
                                                              n_positions=64))
    model = from_hf(hf, backend="torch", dtype=torch.float32)
    assert isinstance(model, pagedlib.GPT2) and model.context_length == 64 and model.vocab_size == 50


def test_llama_shape_and_parameter_count():
    hf = tiny_hf("gqa8_2")
    model = paged("gqa8_2")
    assert (model.kv_shape.num_layers, model.kv_shape.num_kv_heads, model.kv_shape.head_dim) == (2, 2, 16)
    assert model.context_length == 128 and model.vocab_size == VOCAB
    assert model.num_parameters() == sum(p.numel() for p in hf.parameters())
    kv = model.make_kv_cache(num_blocks=3, block_size=4)
    assert kv.layers[0][0].shape == (3, 4, 2, 16)           # [num_blocks, block_size, num_kv_heads, head_dim]


@pytest.mark.slow
def test_bench_against_transformers_quick(capsys):
    """The comparison with transformers' continuous batching runs both models and finds the same tokens."""
    from pagedlib.bench.__main__ import main
    assert main(["engine", "--against", "transformers", "--quick", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("same tokens from both engines (last run): 12/12 requests") == 2   # --quick: 12
    assert "gpt2: GPT2" in out and "llama: Llama" in out and out.count("CPU time") == 2
    assert "reproduce: python -m pagedlib.bench engine --against transformers --quick" in out
