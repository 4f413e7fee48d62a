"""The Triton kernels (pagedlib.attention.triton_backend) against the PyTorch reference, over a grid of shapes.

On the CPU the kernels run through the Triton interpreter, which is slow, so the grid is built to
cover every value of every axis without multiplying all of them:

- the cheap axes in full: dtype x (num_heads, num_kv_heads) x num_splits;
- head_dim x block_size x dtype in full, with the head layouts and split counts cycled through;
- a 2,000+ token sequence in a few cases; shared and duplicate block ids; empty splits.

Every cache slot no sequence owns holds NaN (random_paged_inputs), so reading past a sequence's end
fails the test. Sequence lengths always include 1, exactly one block and one block plus one.

Tolerances (max abs and relative error against the fp32-softmax reference, cast to the dtype):
fp32 1e-5 / 1e-5; fp16 3e-3 / 3e-3 (the kernel feeds probabilities to P @ V in fp16, like every
fp16 flash-attention kernel; one fp16 ulp near 1.0 is 1e-3).

Every tensor is made on ``pagedlib.runtime.DEVICE``: the same file runs the interpreted kernels on the
CPU and the compiled ones on a CUDA GPU (scripts/gpu_check.sh). Random values are drawn on the CPU
from seeded generators and then moved, so both devices test the same numbers.
"""
import itertools

import pytest
import torch

import pagedlib
from pagedlib.attention.triton_backend import choose_num_splits, kv_tile, paged_attention, paged_prefill, write_kv
from pagedlib.attention.reference import gather_kv, paged_attention_ref, paged_prefill_ref
from pagedlib.attention.inputs import random_paged_inputs

DEVICE = pagedlib.runtime.DEVICE
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=3e-3, rtol=3e-3)}
DTYPES = [torch.float32, torch.float16]
HEADS = [(8, 8), (8, 2), (8, 1), (5, 1), (6, 3)]          # MHA, GQA 4:1, MQA, 5:1, 2:1
HEAD_DIMS = [64, 80, 128, 256]
BLOCK_SIZES = [8, 16, 32]
SPLITS = [None, 1, 3]
LONG = 2_085                                                # a 2,000+ token sequence, not a tile multiple


def lengths(block_size: int) -> list[int]:
    """The ragged edges: 1 token, exactly one block, one block plus one, a few pages and a bit."""
    return [1, block_size, block_size + 1, 3 * block_size + 5]


def check_decode(x, num_splits, dtype):
    out = paged_attention(*x.args(), num_splits=num_splits)
    assert out.shape == x.query.shape and out.dtype == dtype
    assert torch.isfinite(out).all(), "NaN from a cache slot past a sequence's end leaked into the output"
    torch.testing.assert_close(out, paged_attention_ref(*x.args()), **TOL[dtype])


# ---- decode --------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_splits", SPLITS, ids=lambda s: f"splits{s}")
@pytest.mark.parametrize("heads", HEADS, ids=lambda h: f"heads{h[0]}:{h[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_heads_x_splits(dtype, heads, num_splits):
    x = random_paged_inputs(lengths(16), *heads, 64, 16, dtype=dtype, seed=hash(heads) % 1000)
    check_decode(x, num_splits, dtype)


HEAD_DIM_GRID = list(itertools.product(DTYPES, HEAD_DIMS, BLOCK_SIZES))


@pytest.mark.parametrize("case", range(len(HEAD_DIM_GRID)))
def test_decode_head_dim_x_block_size(case):
    dtype, head_dim, block_size = HEAD_DIM_GRID[case]
    heads = HEADS[case % len(HEADS)]
    num_splits = [1, 2, None][case % 3]
    x = random_paged_inputs(lengths(block_size), *heads, head_dim, block_size, dtype=dtype, seed=case)
    check_decode(x, num_splits, dtype)


@pytest.mark.parametrize("head_dim,block_size", [(96, 64), (112, 128), (64, 128)])
def test_decode_other_supported_sizes(head_dim, block_size):
    """The rest of the supported range: head_dim 96 and 112, pages of 64 and 128 tokens (> one tile)."""
    x = random_paged_inputs(lengths(block_size), 8, 2, head_dim, block_size, seed=head_dim + block_size)
    check_decode(x, 2 if block_size == 128 else 1, torch.float32)


@pytest.mark.parametrize("num_splits", [1, 4], ids=lambda s: f"splits{s}")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_decode_long_sequence(dtype, num_splits):
    x = random_paged_inputs([1, 17, LONG], 8, 2, 128, 16, dtype=dtype, seed=7)
    check_decode(x, num_splits, dtype)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_shared_and_duplicate_block_ids(num_splits):
    # ids drawn with replacement from few blocks: sequences share pages, a table names a page twice
    x = random_paged_inputs([40, 33, 8, 1, 47], 6, 3, 64, 8, num_blocks=7, shared_blocks=True, seed=11)
    table = x.block_tables[x.block_tables >= 0]
    assert table.numel() > torch.unique(table).numel()        # duplicates really are there
    check_decode(x, num_splits, torch.float32)


def test_decode_more_splits_than_tokens_leaves_empty_splits_harmless():
    x = random_paged_inputs([1, 2, 70], 4, 2, 64, 8, seed=4)
    check_decode(x, 16, torch.float32)                        # most splits of every sequence are empty


def test_decode_padded_block_table_columns_are_never_read():
    # 50 table columns, the unused ones -1: reading one would fault or give garbage
    x = random_paged_inputs([3, 20], 4, 1, 64, 8, max_blocks=50, seed=6)
    check_decode(x, 1, torch.float32)


def test_decode_accepts_a_strided_query_and_explicit_scale():
    x = random_paged_inputs([5, 30], 4, 2, 64, 16, seed=8)
    fused = torch.randn(2, 3, 4, 64, device=DEVICE)           # [num_seqs, q|k|v, num_heads, head_dim]
    query = fused[:, 0]                                       # a view with a row stride
    out = paged_attention(query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, 0.3, num_splits=2)
    ref = paged_attention_ref(query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, 0.3)
    torch.testing.assert_close(out, ref, **TOL[torch.float32])


def test_decode_does_not_change_its_inputs():
    x = random_paged_inputs([9, 17], 8, 2, 64, 8, seed=9)
    before = [t.clone() for t in x.args()]
    paged_attention(*x.args(), num_splits=2)
    for a, b in zip(before, x.args()):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))


def test_decode_with_no_sequences_returns_an_empty_result():
    x = random_paged_inputs([4], 2, 2, 64, 8)
    out = paged_attention(x.query[:0], x.key_cache, x.value_cache, x.block_tables[:0], x.seq_lens[:0])
    assert out.shape == (0, 2, 64)


# ---- choosing num_splits -------------------------------------------------------------------------
def test_num_splits_is_one_when_the_batch_fills_the_gpu():
    assert choose_num_splits(programs=64 * 8, key_tiles=8192 // 64, sms=132) == 1


def test_num_splits_grows_for_a_small_batch_of_long_sequences():
    few = choose_num_splits(programs=8, key_tiles=8192 // 64, sms=132)
    assert few == 14                                                  # 112 programs: one wave, 85% full


def test_num_splits_keeps_more_than_four_key_tiles_per_split():
    assert choose_num_splits(programs=1, key_tiles=9, sms=132) == 1        # 2 splits would hold 4 and 5
    assert choose_num_splits(programs=1, key_tiles=20, sms=132) == 4
    assert choose_num_splits(programs=1, key_tiles=10 ** 5, sms=132) == 28   # 28/32 of the best is within 85%


def test_kv_tile_shrinks_for_the_largest_head_dim():
    assert kv_tile(128) == 64 and kv_tile(80) == 64 and kv_tile(256) == 32


def test_kv_tile_halves_for_fp32_rows():
    assert kv_tile(64, torch.float32) == 64 and kv_tile(128, torch.float32) == 32
    assert kv_tile(256, torch.float32) == 16 and kv_tile(128, torch.bfloat16) == 64


@pytest.mark.slow
@pytest.mark.parametrize("capability", [(7, 5), (9, 0)], ids=["t4", "h100"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_gpus_launch_configuration_gives_the_same_results(dtype, capability):
    """launch_config picks other tiles for a T4 (16 tokens, 16 prefill rows) and for fp32 than the
    interpreter's default; run those configurations too, through decode, split-K and prefill."""
    from pagedlib.attention.kernels.launch import launch_config
    x = random_paged_inputs([1, 16, 17, 70], 8, 2, 80, 16, dtype=dtype, seed=21)
    config = launch_config(80, dtype, 4, capability)
    for num_splits in (1, 3):
        out = paged_attention(*x.args(), num_splits=num_splits, config=config)
        torch.testing.assert_close(out, paged_attention_ref(*x.args()), **TOL[dtype])
    starts = torch.tensor([0, 1, 17, 34, 54], dtype=torch.int32, device=DEVICE)   # chunks 1, 16, 17, 20
    query = torch.randn(54, 8, 80, generator=torch.Generator().manual_seed(21)).to(DEVICE, dtype)
    pargs = (query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
    torch.testing.assert_close(paged_prefill(*pargs, config=config), paged_prefill_ref(*pargs), **TOL[dtype])


# ---- prefill -------------------------------------------------------------------------------------
def prefill_case(chunks, cached, heads, head_dim, block_size, dtype, seed):
    lens = [c + p for c, p in zip(chunks, cached)]
    x = random_paged_inputs(lens, *heads, head_dim, block_size, dtype=dtype, seed=seed)
    starts = torch.tensor([0, *itertools.accumulate(chunks)], dtype=torch.int32, device=DEVICE)
    query = torch.randn(sum(chunks), heads[0], head_dim, generator=torch.Generator().manual_seed(seed))
    return query.to(DEVICE, dtype), x, starts                 # [num_tokens, num_heads, head_dim]


def check_prefill(query, x, starts, dtype):
    args = (query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
    out = paged_prefill(*args)
    assert out.shape == query.shape and out.dtype == dtype
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, paged_prefill_ref(*args), **TOL[dtype])
    return out


PREFILL_CHUNKS = {                                            # (new tokens, cached prefix) per sequence
    "one_token_no_prefix": ([1, 1], [0, 0]),
    "one_token_with_prefix": ([1, 1, 1], [16, 40, 7]),
    "many_tokens_no_prefix": ([40, 70, 16], [0, 0, 0]),       # 70 > 2 query tiles of 32
    "many_tokens_with_prefix": ([33, 5, 17], [16, 29, 80]),
    "mixed_with_empty_chunk": ([0, 12, 1], [9, 3, 30]),
}


@pytest.mark.parametrize("name", PREFILL_CHUNKS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_prefill_chunks(dtype, name):
    chunks, cached = PREFILL_CHUNKS[name]
    check_prefill(*prefill_case(chunks, cached, (8, 2), 64, 16, dtype, seed=len(name)), dtype)


PREFILL_SHAPES = [((5, 1), 80, 8), ((6, 3), 128, 32), ((8, 8), 256, 16), ((8, 1), 96, 16), ((4, 4), 112, 8)]


@pytest.mark.parametrize("case", range(len(PREFILL_SHAPES)))
def test_prefill_shapes(case):
    heads, head_dim, block_size = PREFILL_SHAPES[case]
    dtype = DTYPES[case % 2]
    check_prefill(*prefill_case([19, 1], [block_size + 1, 0], heads, head_dim, block_size, dtype, case), dtype)


def test_prefill_matches_causal_sdpa_on_gathered_kv():
    query, x, starts = prefill_case([24, 9], [0, 21], (4, 2), 64, 8, torch.float32, seed=3)
    out = check_prefill(query, x, starts, torch.float32)
    for s in range(2):
        n = int(x.seq_lens[s])
        rows = slice(int(starts[s]), int(starts[s + 1]))
        k = gather_kv(x.key_cache, x.block_tables[s], n).repeat_interleave(2, 1).transpose(0, 1)
        v = gather_kv(x.value_cache, x.block_tables[s], n).repeat_interleave(2, 1).transpose(0, 1)
        q = query[rows].transpose(0, 1)                       # [heads, chunk, dim]
        cached = n - q.shape[1]
        positions = cached + torch.arange(q.shape[1], device=DEVICE)           # [chunk]
        mask = torch.arange(n, device=DEVICE)[None, :] <= positions[:, None]  # [chunk, n]
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(0, 1)
        torch.testing.assert_close(out[rows], want, **TOL[torch.float32])


@pytest.mark.slow
def test_prefill_long_prefix():
    query, x, starts = prefill_case([3, 40], [LONG, 100], (8, 2), 128, 16, torch.float16, seed=12)
    check_prefill(query, x, starts, torch.float16)


def test_prefill_of_one_token_per_sequence_equals_decode():
    x = random_paged_inputs(lengths(16), 8, 2, 64, 16, seed=13)
    starts = torch.arange(5, dtype=torch.int32, device=DEVICE)
    prefill = paged_prefill(x.query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
    torch.testing.assert_close(prefill, paged_attention(*x.args(), num_splits=1), **TOL[torch.float32])


# ---- max_query_len: the longest chunk, given instead of read back from the device ------------------
def prefill_args(query, x, starts):
    return (query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)


@pytest.mark.slow
@pytest.mark.parametrize("extra", [0, 40], ids=["exact", "larger"])
def test_prefill_with_max_query_len_gives_identical_output(extra):
    """The true longest chunk (70 tokens: 3 query tiles) or a larger bound gives bit-identical output."""
    args = prefill_args(*prefill_case([40, 70, 0, 16], [0, 5, 9, 30], (8, 2), 64, 16, torch.float32, seed=5))
    want = paged_prefill(*args)
    for validate in (True, False):
        got = paged_prefill(*args, max_query_len=70 + extra, validate=validate)
        assert torch.equal(got, want)


def test_prefill_with_max_query_len_never_reads_the_chunk_lengths_back(monkeypatch):
    """Given max_query_len and validate=False, the call needs no device sync to size its grid."""
    args = prefill_args(*prefill_case([5, 33], [3, 0], (4, 2), 64, 8, torch.float32, seed=6))
    want = paged_prefill(*args)

    def no_sync(query_start_loc):
        raise AssertionError("longest_chunk read query_start_loc back to the host")
    monkeypatch.setattr(pagedlib.attention.triton_backend, "longest_chunk", no_sync)
    assert torch.equal(paged_prefill(*args, max_query_len=33, validate=False), want)
    with pytest.raises(AssertionError, match="read query_start_loc back"):
        paged_prefill(*args, validate=False)                  # without it, the grid needs the sync


def test_prefill_refuses_a_too_small_max_query_len_when_validating():
    args = prefill_args(*prefill_case([5, 33, 2], [3, 0, 1], (4, 2), 64, 8, torch.float32, seed=7))
    with pytest.raises(ValueError, match=r"max_query_len = 32 is smaller than the longest chunk .*\(33 new"):
        paged_prefill(*args, max_query_len=32)
    paged_prefill(*args, max_query_len=32, validate=False)    # the caller vouches: only shapes are checked


@pytest.mark.parametrize("bad,match", [
    (13, r"max_query_len = 13 is too small: 40 tokens .* over 3 sequences put at least 14"),
    (41, "max_query_len = 41 exceeds num_tokens = 40"),
    (-1, "an int >= 0"), (True, "an int >= 0"), (33.0, "an int >= 0"),
])
def test_prefill_refuses_a_max_query_len_the_shapes_rule_out_even_without_validate(bad, match):
    args = prefill_args(*prefill_case([5, 33, 2], [3, 0, 1], (4, 2), 64, 8, torch.float32, seed=7))
    with pytest.raises(ValueError, match=match):
        paged_prefill(*args, max_query_len=bad, validate=False)


# ---- write_kv ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("num_kv_heads,head_dim,block_size", [(2, 64, 16), (3, 80, 8), (1, 256, 32)])
def test_write_kv_puts_rows_in_their_slots_and_nothing_else(dtype, num_kv_heads, head_dim, block_size):
    num_blocks = 5
    key_cache = torch.full((num_blocks, block_size, num_kv_heads, head_dim), float("nan"), dtype=dtype,
                           device=DEVICE)
    value_cache = key_cache.clone()
    fused = torch.randn(7, 3, num_kv_heads, head_dim).to(DEVICE, dtype)   # [tokens, q|k|v, kv_heads, dim]
    key, value = fused[:, 1], fused[:, 2]                         # strided views, as from a QKV matmul
    slots = torch.tensor([3, -1, num_blocks * block_size - 1, block_size, 0, -1, 2 * block_size + 1],
                         device=DEVICE)
    write_kv(key, value, key_cache, value_cache, slots)

    kept = slots >= 0
    want_k = torch.full((num_blocks * block_size, num_kv_heads, head_dim), float("nan"), dtype=dtype,
                        device=DEVICE)
    want_v = want_k.clone()
    want_k[slots[kept]], want_v[slots[kept]] = key[kept], value[kept]
    flat = (num_blocks * block_size, num_kv_heads, head_dim)
    torch.testing.assert_close(key_cache.view(flat), want_k, equal_nan=True, atol=0, rtol=0)
    torch.testing.assert_close(value_cache.view(flat), want_v, equal_nan=True, atol=0, rtol=0)


def test_write_kv_accepts_int32_slots_and_an_empty_batch():
    key_cache = torch.zeros(2, 8, 1, 64, device=DEVICE)
    value_cache = torch.zeros_like(key_cache)
    key = torch.ones(2, 1, 64, device=DEVICE)
    write_kv(key, -key, key_cache, value_cache, torch.tensor([9, 2], dtype=torch.int32, device=DEVICE))
    assert key_cache[1, 1].eq(1).all() and value_cache[0, 2].eq(-1).all()
    write_kv(key[:0], key[:0], key_cache, value_cache, torch.zeros(0, dtype=torch.int64, device=DEVICE))
    assert key_cache.sum() == 2 * 64


def test_write_then_decode_equals_attention_over_the_tokens():
    """The whole decode path: write each token's K/V through write_kv, then attend through the table."""
    num_heads, num_kv_heads, head_dim, block_size = 6, 2, 64, 8
    lens = [1, 8, 9, 30]
    x = random_paged_inputs(lens, num_heads, num_kv_heads, head_dim, block_size, seed=21)
    key_cache = torch.full_like(x.key_cache, float("nan"))
    value_cache = torch.full_like(x.value_cache, float("nan"))
    gen = torch.Generator().manual_seed(0)
    keys = [torch.randn(n, num_kv_heads, head_dim, generator=gen).to(DEVICE) for n in lens]
    values = [torch.randn(n, num_kv_heads, head_dim, generator=gen).to(DEVICE) for n in lens]
    tokens = [torch.arange(n, device=DEVICE) for n in lens]    # each sequence's positions
    slots = [x.block_tables[s, t // block_size].long() * block_size + t % block_size
             for s, t in enumerate(tokens)]
    write_kv(torch.cat(keys), torch.cat(values), key_cache, value_cache, torch.cat(slots))
    out = paged_attention(x.query, key_cache, value_cache, x.block_tables, x.seq_lens)
    for s in range(len(lens)):
        k = keys[s].repeat_interleave(3, 1).transpose(0, 1)  # [heads, n, dim]
        v = values[s].repeat_interleave(3, 1).transpose(0, 1)
        want = torch.nn.functional.scaled_dot_product_attention(x.query[s][:, None], k, v)[:, 0]
        torch.testing.assert_close(out[s], want, **TOL[torch.float32])


class KernelCalled(Exception):
    pass


class Tripwire:
    """Stands in for a Triton kernel: launching it raises, so we can see which kernels a call uses."""

    def __getitem__(self, grid):
        raise KernelCalled


@pytest.mark.parametrize("kernel,call", [
    ("decode_kernel", lambda x: paged_attention(*x.args(), num_splits=1)),
    ("split_kernel", lambda x: paged_attention(*x.args(), num_splits=2)),
    ("prefill_kernel", lambda x: paged_prefill(*x.args(), torch.arange(3, dtype=torch.int32, device=DEVICE))),
    ("write_kv_kernel", lambda x: write_kv(x.key_cache[0], x.value_cache[0], x.key_cache, x.value_cache,
                                           torch.arange(x.key_cache.shape[1], device=DEVICE))),
])
def test_each_function_launches_its_triton_kernel(monkeypatch, kernel, call):
    """No silent fallback to PyTorch: with the kernel replaced by a tripwire, the call must hit it."""
    x = random_paged_inputs([3, 9], 4, 2, 64, 8)
    x.key_cache.nan_to_num_(0.0)
    x.value_cache.nan_to_num_(0.0)
    monkeypatch.setattr(pagedlib.attention.triton_backend, kernel, Tripwire())
    with pytest.raises(KernelCalled):
        call(x)


def test_the_kernels_match_the_runtime_choice():
    from pagedlib import runtime
    from pagedlib.attention.kernels import decode, prefill, split_k
    from pagedlib.attention.kernels import write_kv as write_kernel
    for kernel in (decode.decode_kernel, split_k.split_kernel, split_k.merge_kernel,
                   prefill.prefill_kernel, write_kernel.write_kv_kernel):
        assert runtime.kernel_is_interpreted(kernel) == runtime.INTERPRET


# ---- benchmark and its figure --------------------------------------------------------------------
def test_peak_bandwidth_table_matches_cuda_device_names():
    from pagedlib.bench.attention import peak_bandwidth_gbs
    assert peak_bandwidth_gbs("NVIDIA H200") == 4800
    assert peak_bandwidth_gbs("NVIDIA H100 80GB HBM3") == 3350
    assert peak_bandwidth_gbs("NVIDIA A100-SXM4-80GB") == 2039
    assert peak_bandwidth_gbs("NVIDIA A100-SXM4-40GB") == 1555
    assert peak_bandwidth_gbs("Tesla T4") == 320
    assert peak_bandwidth_gbs("NVIDIA L40S") is None           # not an L4
    assert peak_bandwidth_gbs(None) is None


def test_decode_bytes_counts_kv_query_and_output():
    from pagedlib.bench.attention import decode_bytes
    # 2 seqs x 10 tokens x 1 kv head x 4 dims, K and V, fp16; plus query and output 2 x 2 x 3 x 4
    assert decode_bytes(2, 10, 3, 1, 4, 2) == (2 * 2 * 10 * 4 + 2 * 2 * 3 * 4) * 2


def test_benchmark_targets_are_judged_on_large_rows_only():
    from pagedlib.bench.attention import targets
    rows = [dict(batch=1, context=512, paged_frac_peak=0.1, paged_vs_sdpa=0.5),
            dict(batch=32, context=2048, paged_frac_peak=0.75, paged_vs_sdpa=0.95)]
    assert all(line.endswith(" met") for line in targets(rows))
    rows[1]["paged_frac_peak"] = 0.6
    assert "NOT met" in targets(rows)[0]


def test_kernel_bandwidth_figure_has_title_labels_and_a_line_per_series():
    import matplotlib
    matplotlib.use("Agg")
    from pagedlib.plots import kernel_bandwidth
    rows = [dict(batch=b, context=c, block_size=16, paged_gbs=100.0 * b, sdpa_gbs=110.0 * b)
            for b in (1, 8) for c in (512, 2048)]
    fig = kernel_bandwidth(rows, peak_gbs=1000, gpu="test GPU")
    ax = fig.axes[0]
    assert "test GPU" in ax.get_title() and "GB/s" in ax.get_ylabel() and "context" in ax.get_xlabel()
    legend = ax.get_legend() or fig.legends[0]
    assert len(legend.get_texts()) == 4                       # paged and SDPA for two batch sizes


def test_benchmark_on_the_cpu_checks_correctness_and_reports_no_timings(capsys, monkeypatch):
    from pagedlib.bench import attention as bench
    if pagedlib.runtime.DEVICE.type == "cuda":
        pytest.skip("on a GPU the benchmark times the kernels")
    monkeypatch.setattr(bench, "CPU_CASES", [((4, 2), 80, 8, [1, 9, 40])])   # small, for CI
    assert bench.main([]) == 0
    printed = capsys.readouterr().out
    assert "Timings need a GPU" in printed and "all correct" in printed and " us" not in printed
