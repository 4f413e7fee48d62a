"""The PyTorch reference (pagedlib.attention.reference) against attention written independently with SDPA.

Every kernel test trusts paged_attention_ref, so it is checked here against torch's
scaled_dot_product_attention over a contiguous copy of the same tokens, built without the page table.
Tensors live on ``pagedlib.runtime.DEVICE``, so the same tests run on the CPU and on a CUDA GPU.
"""
import pytest
import torch
import torch.nn.functional as F

import pagedlib  # (sets the runtime first)
from pagedlib.attention.inputs import random_paged_inputs
from pagedlib.attention.reference import gather_kv, paged_attention_ref, paged_prefill_ref
from pagedlib.attention.torch_backend import paged_attention_torch, paged_prefill_torch, write_kv_torch

DEVICE = pagedlib.runtime.DEVICE


def sdpa(q, k, v, scale, causal_from=None):
    """q [n_q, heads, dim], k/v [n_k, kv_heads, dim] -> [n_q, heads, dim] with torch SDPA in fp64."""
    group = q.shape[1] // k.shape[1]
    q, k, v = (t.double().transpose(0, 1) for t in (q, k.repeat_interleave(group, 1),
                                                    v.repeat_interleave(group, 1)))
    mask = None
    if causal_from is not None:
        q_pos = causal_from + torch.arange(q.shape[1], device=q.device)
        mask = torch.arange(k.shape[1], device=q.device)[None, :] <= q_pos[:, None]   # [n_q, n_k]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).transpose(0, 1)


def test_gather_kv_returns_the_tokens_written_through_the_table():
    block_size, seq_len = 4, 10
    cache = torch.full((6, block_size, 1, 2), float("nan"), device=DEVICE)
    table = torch.tensor([5, 0, 3], dtype=torch.int32, device=DEVICE)
    tokens = torch.arange(seq_len * 2, dtype=torch.float32, device=DEVICE).view(seq_len, 1, 2)
    for t in range(seq_len):
        cache[table[t // block_size], t % block_size] = tokens[t]
    assert torch.equal(gather_kv(cache, table, seq_len), tokens)


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1), (6, 3)])
@pytest.mark.parametrize("block_size", [1, 8, 16])
def test_decode_reference_matches_sdpa_on_contiguous_kv(heads, block_size):
    num_heads, num_kv_heads = heads
    lens = [1, block_size, block_size + 1, 37]
    x = random_paged_inputs(lens, num_heads, num_kv_heads, 32, block_size, shared_blocks=True, seed=3)
    out = paged_attention_ref(*x.args())
    assert out.shape == x.query.shape and out.dtype == x.query.dtype
    for s, n in enumerate(lens):
        k = gather_kv(x.key_cache, x.block_tables[s], n)
        v = gather_kv(x.value_cache, x.block_tables[s], n)
        want = sdpa(x.query[s:s + 1], k, v, 32 ** -0.5)[0]
        torch.testing.assert_close(out[s].double(), want, atol=1e-5, rtol=1e-5)


def test_decode_reference_ignores_nan_in_slots_no_sequence_owns():
    x = random_paged_inputs([3, 5], 2, 1, 16, 4)
    assert x.key_cache.isnan().any()          # the builder really leaves NaN behind
    assert torch.isfinite(paged_attention_ref(*x.args())).all()


def test_decode_reference_does_not_depend_on_where_pages_live():
    x = random_paged_inputs([9, 20], 4, 2, 16, 4, seed=1)
    perm = torch.randperm(x.key_cache.shape[0]).to(DEVICE)      # move every block elsewhere
    new_id = torch.empty_like(perm)
    new_id[perm] = torch.arange(len(perm), device=DEVICE)
    table = torch.where(x.block_tables >= 0, new_id[x.block_tables.long().clamp(min=0)],
                        -1).to(torch.int32)
    moved = paged_attention_ref(x.query, x.key_cache[perm], x.value_cache[perm], table, x.seq_lens)
    torch.testing.assert_close(moved, paged_attention_ref(*x.args()), atol=0, rtol=0)


def test_decode_reference_default_scale_is_inverse_sqrt_head_dim():
    x = random_paged_inputs([7], 2, 2, 64, 8)
    torch.testing.assert_close(paged_attention_ref(*x.args()), paged_attention_ref(*x.args(), scale=0.125))
    assert not torch.allclose(paged_attention_ref(*x.args()), paged_attention_ref(*x.args(), scale=1.0))


@pytest.mark.parametrize("chunks,cached", [([1, 1], [0, 9]), ([5, 12], [0, 0]), ([4, 7, 1], [3, 16, 2])])
def test_prefill_reference_matches_causal_sdpa(chunks, cached):
    lens = [c + p for c, p in zip(chunks, cached)]
    x = random_paged_inputs(lens, 4, 2, 16, 8, seed=5)
    starts = torch.tensor([0, *torch.tensor(chunks).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    query = torch.randn(sum(chunks), 4, 16, device=DEVICE)
    out = paged_prefill_ref(query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
    for s, n in enumerate(lens):
        k = gather_kv(x.key_cache, x.block_tables[s], n)
        v = gather_kv(x.value_cache, x.block_tables[s], n)
        rows = slice(int(starts[s]), int(starts[s + 1]))
        want = sdpa(query[rows], k, v, 0.25, causal_from=cached[s])
        torch.testing.assert_close(out[rows].double(), want, atol=1e-5, rtol=1e-5)


def test_prefill_of_one_token_is_decode():
    x = random_paged_inputs([6, 13], 4, 4, 16, 4, seed=2)
    starts = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    prefill = paged_prefill_ref(x.query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
    torch.testing.assert_close(prefill, paged_attention_ref(*x.args()))


def test_prefill_reference_skips_sequences_without_new_tokens():
    x = random_paged_inputs([6, 13], 2, 2, 16, 4)
    starts = torch.tensor([0, 0, 3], dtype=torch.int32, device=DEVICE)   # sequence 0 has no new tokens
    query = torch.randn(3, 2, 16, device=DEVICE)
    out = paged_prefill_ref(query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
    assert torch.isfinite(out).all()


def test_reference_half_precision_keeps_the_dtype():
    x = random_paged_inputs([5, 9], 4, 2, 16, 4, dtype=torch.float16)
    out = paged_attention_ref(*x.args())
    assert out.dtype == torch.float16
    x32 = random_paged_inputs([5, 9], 4, 2, 16, 4, dtype=torch.float32)
    torch.testing.assert_close(out.float(), paged_attention_ref(*x32.args()), atol=2e-3, rtol=2e-3)


# ---- the PyTorch backend's whole-batch functions against the per-sequence references --------------
BATCHED_CASES = [  # (seq_lens, num_heads, num_kv_heads, head_dim, block_size)
    ([1, 16, 17, 37, 5], 4, 4, 32, 16),
    ([9, 20, 3, 64], 8, 2, 16, 4),
    ([2, 33, 1], 6, 1, 64, 8),
    ([1], 4, 2, 128, 1),
    ([70, 5, 12, 1, 40, 19], 9, 3, 16, 16),
]


@pytest.mark.parametrize("lens, heads, kv_heads, head_dim, block_size", BATCHED_CASES)
@pytest.mark.parametrize("shared_blocks", [False, True])
def test_batched_decode_matches_per_sequence_reference(lens, heads, kv_heads, head_dim, block_size,
                                                       shared_blocks):
    x = random_paged_inputs(lens, heads, kv_heads, head_dim, block_size, shared_blocks=shared_blocks,
                            max_blocks=-(-max(lens) // block_size) + 2, seed=len(lens))
    assert x.key_cache.isnan().any() or shared_blocks      # unowned slots hold NaN
    out = paged_attention_torch(*x.args())
    assert out.shape == x.query.shape and out.dtype == x.query.dtype and torch.isfinite(out).all()
    torch.testing.assert_close(out, paged_attention_ref(*x.args()), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("spread", [30.0, 300.0])
def test_batched_decode_matches_when_scores_span_hundreds(spread):
    """Peaked softmaxes (scores hundreds apart, as a model with large weights gives): the exponent's
    floor (``EXP_FLOOR``) drops only weights that no fp32 sum can see. Scores this large carry fp32
    rounding of about 1e-5 in either reference, hence the tolerance."""
    x = random_paged_inputs([1, 16, 17, 37, 5, 200], 8, 2, 32, 16, seed=3)
    query = x.query * spread
    args = (query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens)
    torch.testing.assert_close(paged_attention_torch(*args), paged_attention_ref(*args), atol=3e-5,
                               rtol=1e-5)


@pytest.mark.parametrize("lens, heads, kv_heads, head_dim, block_size", BATCHED_CASES)
def test_batched_prefill_matches_per_sequence_reference(lens, heads, kv_heads, head_dim, block_size):
    """Chunks of every length in one batch: none, one token (a decode row of a mixed batch), part of
    the sequence over a cached prefix, the whole sequence."""
    x = random_paged_inputs(lens, heads, kv_heads, head_dim, block_size, seed=7)
    chunks = [[0, 1, n // 2, n][i % 4] if n > 1 else 1 for i, n in enumerate(lens)]
    starts = torch.tensor([0, *torch.tensor(chunks).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    query = torch.randn(sum(chunks), heads, head_dim, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    args = (query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
    out = paged_prefill_torch(*args)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, paged_prefill_ref(*args), atol=1e-6, rtol=1e-6)


def test_batched_decode_of_half_precision_keeps_the_dtype(monkeypatch):
    """An fp16 cache gives fp16 out, computed in fp32 from the rows the batch reads: the cache itself
    (here 16 times larger than what the batch reads) is never converted whole."""
    x = random_paged_inputs([5, 9, 30], 4, 2, 16, 4, dtype=torch.float16, num_blocks=12 * 16)
    converted, real = [], torch.Tensor.float
    monkeypatch.setattr(torch.Tensor, "float", lambda t: converted.append(t.numel()) or real(t))
    out = paged_attention_torch(*x.args())
    assert converted and max(converted) < x.key_cache.numel() // 4
    monkeypatch.undo()
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, paged_attention_ref(*x.args()), atol=1e-3, rtol=1e-3)


def test_torch_backend_functions_check_their_inputs():
    x = random_paged_inputs([5, 9], 4, 2, 16, 4)
    with pytest.raises(ValueError, match="block_tables must be int32"):
        paged_attention_torch(x.query, x.key_cache, x.value_cache, x.block_tables.long(), x.seq_lens)
    with pytest.raises(ValueError, match="longer than its block table"):
        paged_attention_torch(x.query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens * 4)
    starts = torch.tensor([0, 1, 3], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="query_start_loc must start at 0 and end at num_tokens = 2"):
        paged_prefill_torch(x.query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)


def test_write_kv_torch_writes_the_given_slots_and_skips_minus_one():
    cache = [torch.zeros(2, 4, 2, 8, device=DEVICE) for _ in range(2)]
    key, value = torch.randn(3, 2, 8, device=DEVICE), torch.randn(3, 2, 8, device=DEVICE)
    write_kv_torch(key, value, *cache, torch.tensor([5, -1, 0], device=DEVICE))
    assert torch.equal(cache[0].flatten(0, 1)[5], key[0]) and torch.equal(cache[1].flatten(0, 1)[0], value[2])
    assert int((cache[0].flatten(0, 1).abs().sum((1, 2)) != 0).sum()) == 2


def test_batched_decode_refuses_a_cache_too_big_for_int32_rows():
    """The pattern numbers cache rows with int32; a larger cache is refused, not wrapped around
    (an expanded view stands for the 2**31 rows: nothing that big is allocated)."""
    x = random_paged_inputs([5, 9], 4, 2, 16, 16)
    huge = x.key_cache[:1, :1, :1].expand(2**26, 16, 2, 16)          # 2**31 rows of head_dim
    with pytest.raises(ValueError, match="int32"):
        paged_attention_torch(x.query, huge, huge, x.block_tables, x.seq_lens, validate=False)


@pytest.mark.parametrize("lens", [[30, 31, 29, 32, 30], [300] + [2] * 40, [1], [7, 1, 1, 64]])
def test_both_ways_of_building_the_decode_pattern_agree(lens):
    """Similar lengths use the padded layout, one long sequence among short ones the direct numbering
    (padding would more than double the work); both give the same pattern and the same attention."""
    from pagedlib.attention import torch_backend as attention_ref
    x = random_paged_inputs(lens, 8, 2, 16, 4, seed=5)
    lens32 = x.seq_lens.int()
    crow = torch.cat([lens32.new_zeros(1), lens32.repeat_interleave(8).cumsum(0, dtype=torch.int32)])
    padded = attention_ref._rows_padded(x.block_tables, lens32, max(lens), 4, 8, 2)
    direct = attention_ref._rows_direct(x.block_tables, crow, 4, 8, 2)
    assert torch.equal(padded, direct) and padded.dtype == torch.int32
    torch.testing.assert_close(paged_attention_torch(*x.args()), paged_attention_ref(*x.args()),
                               atol=1e-6, rtol=1e-6)
