"""pagedlib.models.gpt2: GPT-2 over the paged cache gives transformers' logits, whatever the layout.

The reference is transformers in fp32 on the CPU. The paged model runs on ``pagedlib.runtime.DEVICE``
(the Triton interpreter on the CPU, compiled kernels on a CUDA GPU) and, where it is compared with the
reference at fp32 tolerances, is built in fp32 on a GPU too (``from_hf`` would default to fp16 there).
The fp16 model is compared at fp16 tolerances (measured on the CPU: max error about 5e-4 on logits of
about 1, so 1e-2 leaves a margin and still catches a wrong K/V row, which is off by 0.1 or more).
"""
import pytest
import torch
import transformers  # pinned in requirements.txt: a missing one fails, never skips

import pagedlib
from pagedlib.attention import backend as model_mod
from pagedlib.attention.torch_backend import write_kv_torch
from pagedlib.attention.metadata import PagedBatch
from pagedlib.models.gpt2 import GPT2

transformers.logging.set_verbosity_error()

DEVICE = pagedlib.runtime.DEVICE
LOGIT_TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.float16: dict(atol=1e-2, rtol=1e-2)}


def tiny_hf(n_head=4, vocab=300, n_layer=2, n_embd=64, seed=0, **extra):
    """A random-initialised small GPT2LMHeadModel (fp32, eager attention)."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab,
                                     n_positions=128, attn_implementation="eager", **extra)
    return transformers.GPT2LMHeadModel(config).eval()


def hf_logits(hf, tokens):
    """transformers' logits for every position of one sequence: [len, vocab]."""
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0]


def paged(hf, backend="torch", dtype=torch.float32):
    """hf's weights in a paged GPT2 on the runtime's device, in fp32 unless asked (on a GPU too)."""
    return GPT2.from_hf(hf, backend=backend, dtype=dtype, device=DEVICE)


def assert_logits_close(got, want, dtype=torch.float32):
    """The paged model's logits (on DEVICE) against transformers' (fp32, CPU) at the tolerance of dtype."""
    torch.testing.assert_close(got.cpu(), want, **LOGIT_TOL[dtype])


def batch_for(chunks, tables, block_size, is_decode=False):
    """A PagedBatch on DEVICE: chunks[s] = (first_position, tokens) of sequence s, whose blocks are tables[s]."""
    ids, pos, slots, starts, lens = [], [], [], [0], []
    for (first, tokens), table in zip(chunks, tables):
        for i, t in enumerate(tokens, start=first):
            ids.append(t)
            pos.append(i)
            slots.append(table[i // block_size] * block_size + i % block_size)
        starts.append(starts[-1] + len(tokens))
        lens.append(first + len(tokens))
    width = max(len(t) for t in tables)
    table_rows = [t + [0] * (width - len(t)) for t in tables]
    return PagedBatch(torch.tensor(ids, device=DEVICE),                              # [num_tokens]
                      torch.tensor(pos, device=DEVICE),                              # [num_tokens]
                      torch.tensor(slots, device=DEVICE),                            # [num_tokens]
                      torch.tensor(table_rows, dtype=torch.int32, device=DEVICE),    # [num_seqs, max_blocks]
                      torch.tensor(lens, dtype=torch.int32, device=DEVICE),          # [num_seqs]
                      torch.tensor(starts, dtype=torch.int32, device=DEVICE),        # [num_seqs + 1]
                      is_decode)


@pytest.mark.parametrize("n_head, vocab", [(2, 100), (4, 500)])
def test_prefill_logits_match_transformers(n_head, vocab):
    hf = tiny_hf(n_head=n_head, vocab=vocab)
    model = paged(hf)
    tokens = torch.randint(0, vocab, (13,), generator=torch.Generator().manual_seed(1)).tolist()
    kv = model.make_kv_cache(num_blocks=8, block_size=4)
    logits = model(batch_for([(0, tokens)], [[6, 1, 3, 0]], 4), kv)
    assert logits.shape == (1, vocab)
    assert_logits_close(logits[0], hf_logits(hf, tokens)[-1])


def test_cached_prefix_chunk_then_decode_match_transformers():
    """Prefill 8 tokens, then the next 5 as a chunk over the cached prefix, then decode 3 one by one."""
    hf = tiny_hf()
    model = paged(hf)
    tokens = torch.randint(0, 300, (16,), generator=torch.Generator().manual_seed(2)).tolist()
    ref = hf_logits(hf, tokens)                                  # [16, vocab]
    table, kv = [5, 2, 7, 0], model.make_kv_cache(num_blocks=8, block_size=4)
    out = model(batch_for([(0, tokens[:8])], [table], 4), kv)
    assert_logits_close(out[0], ref[7])
    out = model(batch_for([(8, tokens[8:13])], [table], 4), kv)  # only the new tokens are computed
    assert_logits_close(out[0], ref[12])
    for i in range(13, 16):
        out = model(batch_for([(i, tokens[i:i + 1])], [table], 4, is_decode=True), kv)
        assert_logits_close(out[0], ref[i])


def test_batched_sequences_match_each_alone():
    hf = tiny_hf()
    model = paged(hf)
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, 300, (n,), generator=g).tolist() for n in (3, 9, 1)]
    tables = [[4], [0, 7, 2], [9]]                               # scattered blocks, block_size 4
    kv = model.make_kv_cache(num_blocks=10, block_size=4)
    out = model(batch_for([(0, s) for s in seqs], tables, 4), kv)
    for row, tokens in zip(out, seqs):
        assert_logits_close(row, hf_logits(hf, tokens)[-1])
    # one decode step for all three at once
    nxt = [s + [7] for s in seqs]
    out = model(batch_for([(len(s), [7]) for s in seqs], tables, 4, is_decode=True), kv)
    for row, tokens in zip(out, nxt):
        assert_logits_close(row, hf_logits(hf, tokens)[-1])


def test_kv_goes_only_to_the_given_slots():
    model = paged(tiny_hf())
    kv = model.make_kv_cache(num_blocks=6, block_size=4)
    model(batch_for([(0, [1, 2, 3, 4, 5])], [[3, 1]], 4), kv)
    for key_cache, value_cache in kv.layers:
        written = key_cache.flatten(0, 1).abs().sum(dim=(1, 2)) != 0          # [num_slots]
        assert written.nonzero().flatten().tolist() == [4, 12, 13, 14, 15]   # block 3 rows 0-3, block 1 row 0
        assert torch.equal(written, value_cache.flatten(0, 1).abs().sum(dim=(1, 2)) != 0)


def test_both_backends_write_with_the_same_contract():
    """write_kv_torch mirrors the Triton write_kv, slot -1 skipping included."""
    key, value = torch.randn(3, 2, 16, device=DEVICE), torch.randn(3, 2, 16, device=DEVICE)
    slots = torch.tensor([5, -1, 0], device=DEVICE)
    caches = [(torch.zeros(2, 4, 2, 16, device=DEVICE), torch.zeros(2, 4, 2, 16, device=DEVICE))
              for _ in range(2)]
    write_kv_torch(key, value, *caches[0], slots)
    pagedlib.write_kv(key, value, *caches[1], slots)
    assert torch.equal(caches[0][0], caches[1][0]) and torch.equal(caches[0][1], caches[1][1])
    assert torch.equal(caches[0][0].view(-1, 2, 16)[5], key[0])


def test_triton_backend_matches_torch_backend():
    hf = tiny_hf(n_layer=1)
    tokens = [3, 1, 4, 1, 5, 9, 2]
    outs = []
    for backend in ("triton", "torch"):
        model = paged(hf, backend)
        kv = model.make_kv_cache(num_blocks=4, block_size=4)
        prefill = model(batch_for([(0, tokens[:6])], [[2, 0]], 4), kv)
        decode = model(batch_for([(6, tokens[6:])], [[2, 0]], 4, is_decode=True), kv)
        outs.append((prefill, decode))
    for a, b in zip(*outs):
        torch.testing.assert_close(a, b, **LOGIT_TOL[torch.float32])
    assert_logits_close(outs[0][1][0], hf_logits(hf, tokens)[-1])


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_each_dtype_matches_transformers_within_its_tolerance(dtype, backend):
    """fp16 is from_hf's default on a GPU (Colab's T4): prefill, a chunk over the cached prefix, decode."""
    hf = tiny_hf(n_layer=1)
    model = paged(hf, backend, dtype)
    assert model.dtype == dtype and model.device.type == DEVICE.type
    tokens = [3, 1, 4, 1, 5, 9, 2, 6, 5]
    ref = hf_logits(hf, tokens)                                  # [9, vocab]
    table, kv = [2, 0, 3], model.make_kv_cache(num_blocks=4, block_size=4)
    assert_logits_close(model(batch_for([(0, tokens[:5])], [table], 4), kv)[0], ref[4], dtype)
    assert_logits_close(model(batch_for([(5, tokens[5:8])], [table], 4), kv)[0], ref[7], dtype)
    assert_logits_close(model(batch_for([(8, tokens[8:])], [table], 4, is_decode=True), kv)[0], ref[8], dtype)



def test_triton_backend_checks_the_batch_in_the_first_layer_only(monkeypatch):
    """The value checks cost a GPU sync per call: one layer checks the batch, the others trust it."""
    from pagedlib.attention import checks as attention_checks
    model = GPT2.from_hf(tiny_hf(n_layer=3), backend="triton")
    kv = model.make_kv_cache(num_blocks=4, block_size=4)
    calls = []
    real = attention_checks.check_page_values
    monkeypatch.setattr(attention_checks, "check_page_values", lambda *a: calls.append(1) or real(*a))
    model(batch_for([(0, [3, 1, 4, 1, 5])], [[2, 0]], 4), kv)
    model(batch_for([(5, [9])], [[2, 0]], 4, is_decode=True), kv)
    assert len(calls) == 2                                      # one prefill and one decode, not 3 layers each
    with pytest.raises(ValueError, match="not a slot of the cache"):
        model(batch_for([(6, [2])], [[2, 7]], 4, is_decode=True), kv)   # block 7 of a 4-block cache

@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_batch_the_engine_built_is_trusted_and_a_hand_built_one_is_checked(monkeypatch, backend):
    """build_batch takes its tables from the block manager, so no layer re-checks their values; a
    PagedBatch made by hand is checked in the first layer, so a wrong block id is still refused."""
    from pagedlib import LLM
    from pagedlib.attention import checks as attention_checks
    from pagedlib.engine import batch as engine_batch
    model = GPT2.from_hf(tiny_hf(n_layer=2), backend=backend)
    built = []
    real_build = engine_batch.build_batch
    monkeypatch.setattr("pagedlib.engine.llm.build_batch",
                        lambda *a: built.append(real_build(*a)) or built[-1])
    calls = []
    real = attention_checks.check_page_values
    monkeypatch.setattr(attention_checks, "check_page_values", lambda *a: calls.append(1) or real(*a))
    LLM(model, 8, 4).generate([[3, 1, 4, 1, 5]], max_new_tokens=3, use_tqdm=False)
    assert built and all(b.trusted for b in built) and calls == []
    kv = model.make_kv_cache(num_blocks=4, block_size=4)
    hand = batch_for([(6, [2])], [[2, 7]], 4, is_decode=True)     # block 7 of a 4-block cache
    assert not hand.trusted
    with pytest.raises(ValueError, match="not a slot of the cache|not a block of the cache"):
        model(hand, kv)


def test_triton_backend_sizes_its_grid_from_shapes_alone(monkeypatch):
    """The backend's one kernel (paged_attention_varlen) sizes its grid from the tensors' shapes: no
    layer reads the chunk lengths back (a GPU sync), whether or not the batch knows max_query_len."""
    from pagedlib.attention import triton_backend as attention
    model = paged(tiny_hf(n_layer=3), "triton")
    kv = model.make_kv_cache(num_blocks=4, block_size=4)
    batch = batch_for([(0, [3, 1, 4, 1, 5]), (0, [9, 2])], [[2, 0], [1]], 4)

    def no_sync(starts):
        raise AssertionError("the backend read the longest chunk back from the device")

    monkeypatch.setattr(attention, "longest_chunk", no_sync)
    batch.max_query_len = None
    want = model(batch, kv)
    batch.max_query_len = 5
    assert torch.equal(model(batch, kv), want)                  # the same K/V rewritten, the same logits


def test_backend_choice():
    model = GPT2.from_hf(tiny_hf(n_layer=1))
    assert model.backend == model_mod.DEFAULT_BACKEND
    assert model_mod.DEFAULT_BACKEND == ("triton" if pagedlib.DEVICE.type == "cuda" else "torch")
    model.backend = "triton"
    assert model.backend == "triton"
    with pytest.raises(ValueError, match="backend must be one of"):
        model.backend = "cuda"
    assert model.backend == "triton"                             # a refused value changes nothing


def test_from_hf_copies_shape_and_refuses_unsupported_configs():
    hf = tiny_hf(n_head=2, vocab=100)
    model = GPT2.from_hf(hf)
    cfg = model.config
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.vocab_size, cfg.n_positions) == (2, 2, 64, 100, 128)
    assert model.num_parameters() == sum(p.numel() for n, p in hf.named_parameters() if "lm_head" not in n)
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        GPT2.from_hf(tiny_hf(scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(ValueError, match="activation_function"):
        GPT2.from_hf(tiny_hf(activation_function="silu"))


def test_copy_block_copies_every_layer():
    model = GPT2.from_hf(tiny_hf(), backend="torch")           # the runtime's dtype: fp16 on a GPU
    kv = model.make_kv_cache(num_blocks=3, block_size=2)
    model(batch_for([(0, [1, 2])], [[0]], 2), kv)
    kv.copy_block(0, 2)
    for key_cache, value_cache in kv.layers:
        assert torch.equal(key_cache[2], key_cache[0]) and key_cache[2].abs().sum() > 0
        assert torch.equal(value_cache[2], value_cache[0])


def test_backend_is_chosen_once_and_the_decode_pattern_built_once_per_batch(monkeypatch):
    """Choosing a backend happens when it is set, not per layer per forward; the torch backend's
    sparse decode pattern depends only on the batch, so three layers build it once (for the decode
    rows of a mixed batch too)."""
    from pagedlib.attention import torch_backend
    from pagedlib.models import layers
    model = paged(tiny_hf(n_layer=3), "torch")
    kv = model.make_kv_cache(num_blocks=4, block_size=4)
    chosen, built = [], []
    monkeypatch.setattr(layers, "make_backends", lambda name: chosen.append(name))
    real = torch_backend.decode_pattern
    monkeypatch.setattr(torch_backend, "decode_pattern", lambda *a: built.append(1) or real(*a))
    model(batch_for([(0, [3, 1, 4, 1, 5])], [[2, 0]], 4), kv)
    model(batch_for([(5, [9])], [[2, 0]], 4, is_decode=True), kv)
    model(batch_for([(6, [2])], [[2, 0]], 4, is_decode=True), kv)
    assert chosen == [] and len(built) == 2                    # one per decode batch, not one per layer
    model(batch_for([(7, [5]), (0, [1, 2, 3])], [[2, 0], [3]], 4), kv)   # a decode row next to a prompt
    assert len(built) == 3                                     # the decode row's pattern, once too


def test_model_meets_the_engine_protocol():
    from pagedlib.models.layers import PagedModel
    model = paged(tiny_hf())
    assert isinstance(model, PagedModel)
    assert (model.context_length, model.vocab_size) == (128, 300)
    assert (model.kv_shape.num_layers, model.kv_shape.num_kv_heads, model.kv_shape.head_dim) == (2, 4, 16)
    assert [type(layer).__name__ for layer in model.layers] == ["GPT2Layer", "GPT2Layer"]


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_mixed_batch_of_a_prefill_chunk_and_decode_rows_matches_transformers(backend):
    """A decode row is a prefill chunk of one token: one forward pass may carry both kinds."""
    hf = tiny_hf(n_layer=1)
    model = paged(hf, backend)
    kv = model.make_kv_cache(num_blocks=8, block_size=4)
    a, b, c = [3, 1, 4, 1, 5, 9, 2], [2, 7, 1, 8, 2], [6, 6]
    model(batch_for([(0, b[:-1]), (0, c[:-1])], [[5, 1], [7]], 4), kv)       # b and c are cached
    out = model(batch_for([(0, a), (4, b[-1:]), (1, c[-1:])], [[2, 0], [5, 1], [7]], 4), kv)
    for row, tokens in zip(out, (a, b, c)):
        assert_logits_close(row, hf_logits(hf, tokens)[-1])
