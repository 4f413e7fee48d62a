"""Prefill's packed query tiles and the causal split of ``attend_tiles`` (chapter 9).

- The tile rule (``launch.prefill_rows``, ``prefill_meta``, ``prefill_grid``): new tokens x the GQA
  group packed into one tile of at least 64 rows where ``tl.dot`` runs on tensor cores (what Hopper's
  ``wgmma`` takes), 16 where it runs as fused multiply-adds (a T4, fp32).
- The loop (``CAUSAL_SPLIT``, prefill only): a main loop that masks nothing, over the key tiles every
  row of the tile sees, then the diagonal tiles, masked. Checked by watching the interpreted kernel's
  calls of ``attend_tile``: no unmasked tile holds a key past the end or hidden from a row, every
  masked one does; decode, split-K and the varlen kernel keep their one masked loop.
- Both against the PyTorch reference on a grid of chunk and prefix lengths at the tiles' edges, for
  the interpreter's tiles and a T4's, in fp32 and fp16 (the varlen kernel, which shares the packed
  query tile, too).
"""
import inspect
import itertools

import pytest
import torch

import pagedlib
from pagedlib.attention.inputs import random_paged_inputs
from pagedlib.attention.kernels import decode, launch
from pagedlib.attention.kernels.launch import INTERPRETER, launch_config
from pagedlib.attention.kernels.prefill import prefill_tiles
from pagedlib.attention.reference import paged_attention_ref, paged_prefill_ref
from pagedlib.attention.triton_backend import paged_attention, paged_attention_varlen, paged_prefill

DEVICE = pagedlib.runtime.DEVICE
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=3e-3, rtol=3e-3)}
T4, A100, H100 = (7, 5), (8, 0), (9, 0)
GROUPS = [1, 2, 4, 5, 8, 16, 32, 64, 128]


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


# ---- the tile rule -------------------------------------------------------------------------------
@pytest.mark.parametrize("capability", [T4, A100, (8, 6), H100, INTERPRETER], ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_prefill_packs_the_group_into_tiles_that_feed_the_tensor_cores(capability, dtype):
    tensor_cores = launch.uses_tensor_cores(dtype, capability)
    for group, head_dim in itertools.product(GROUPS, [64, 80, 128, 256]):
        cfg = launch_config(head_dim, dtype, group, capability)
        rows, tile_q = cfg.prefill_rows, cfg.prefill_tile_q
        case = f"group {group}, head_dim {head_dim}: {rows} rows, {tile_q} tokens"
        assert is_power_of_two(rows) and rows >= group, case                 # tl.arange; the whole group
        assert tile_q >= 1 and tile_q * group <= rows, case                    # whole tokens x the group
        if tensor_cores:                                                       # 64 rows: wgmma on Hopper
            assert rows >= launch.PREFILL_ROWS == 64 and tile_q * group >= rows // 2, case
        else:                                                                  # FMA: 16 rows, as decode's
            assert rows == max(launch.MIN_DOT_ROWS, triton_pow2(group)) == launch.pad_group(group), case
        meta = launch.prefill_meta(cfg, 16)
        assert (meta["TILE_M"], meta["TILE_Q"], meta["GROUP"]) == (rows, tile_q, group), case
        # warps by the accumulator: 4 for [64, 64] on tensor cores, 8 for more; the 16-row fp32 tile
        # takes the varlen kernel's warps (one rule for the same tile)
        per_four = launch.FOUR_WARP_MMA_ACC if tensor_cores else launch.FOUR_WARP_ACC
        general = 4 if rows * cfg.head_dim_pad <= per_four else 8
        assert meta["num_warps"] == (launch.fp32_tile_warps(cfg, rows) or general), case
        if not tensor_cores:                                                   # the same tile as varlen
            assert meta["num_warps"] == launch.varlen_meta(cfg, 16)["num_warps"], case
        # the grid covers every new token of the longest chunk, with one spare tile at most
        for longest in (1, tile_q, tile_q + 1, 2048):
            seqs, kv_heads, tiles = launch.prefill_grid(longest, 3, 8, cfg)
            assert (seqs, kv_heads) == (3, 8) and tiles * tile_q >= longest > (tiles - 1) * tile_q, case


def triton_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def test_on_an_h100_a_k_v_tile_serves_64_rows_not_32():
    """Llama-3-8B (group 4): 16 new tokens x 4 heads; before, 32 tokens of one head."""
    cfg = launch_config(128, torch.float16, 4, H100)
    assert (cfg.prefill_rows, cfg.prefill_tile_q, cfg.prefill_warps) == (64, 16, 8)
    assert launch_config(128, torch.float16, 4, T4).prefill_rows == 16               # FMA on a T4
    assert launch_config(128, torch.float32, 4, H100).prefill_rows == 16             # fp32: ieee, no mma


# ---- the main loop and the diagonal ------------------------------------------------------------------
def value(x) -> int:
    """A scalar of the interpreter (tensor, constexpr or int) as an int."""
    if hasattr(x, "handle"):
        return int(x.handle.data.reshape(-1)[0])
    return int(getattr(x, "value", x))


@pytest.fixture
def tiles_seen(monkeypatch):
    """Every call of ``attend_tile`` the interpreted kernels make: (masked, tile start, end, earliest
    row's position, TILE)."""
    if DEVICE.type == "cuda":
        pytest.skip("watches the interpreter's calls")
    seen = []
    original = decode.attend_tile
    params = list(inspect.signature(original.fn).parameters)

    def spy(*args, **kwargs):
        arg = dict(zip(params, args)) | kwargs
        seen.append((value(arg["MASKED"]), value(arg["tile_start"]), value(arg["end"]),
                     int(arg["q_pos"].handle.data.min()), value(arg["TILE"])))
        return original(*args, **kwargs)
    monkeypatch.setattr(decode, "attend_tile", spy)
    return seen


def assert_masks_only_where_the_mask_bites(seen):
    assert seen
    for masked, start, end, first_pos, tile in seen:
        whole = start + tile <= min(end, first_pos + 1)        # every key before the end, seen by every row
        assert masked != whole, (masked, start, end, first_pos, tile)


@pytest.mark.parametrize("capability", [INTERPRETER, T4], ids=["interp", "t4"])
def test_prefill_masks_only_the_diagonal_tiles(tiles_seen, capability):
    chunks, cached = [130, 5, 64, 1], [0, 640, 63, 1200]
    x, query, starts = prefill_inputs(chunks, cached, (8, 2), 64, 16, torch.float32, seed=4)
    cfg = launch_config(64, torch.float32, 4, capability)
    paged_prefill(query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts, config=cfg)
    assert_masks_only_where_the_mask_bites(tiles_seen)
    masked = sum(m for m, *_ in tiles_seen)
    assert masked < len(tiles_seen) // 2                       # most tiles pay for no mask
    # a program's diagonal: its tokens' span of keys, at most one tile more
    programs = sum(-(-c // cfg.prefill_tile_q) for c in chunks) * 2
    assert masked <= programs * (-(-cfg.prefill_tile_q // cfg.tile) + 1)
    # the host's count (chapter 9's) is the kernel's: 2 KV heads
    counts = [prefill_tiles(c, p, cfg.prefill_tile_q, cfg.tile) for c, p in zip(chunks, cached)]
    assert (len(tiles_seen) - masked, masked) == tuple(2 * sum(k) for k in zip(*counts))


def test_decode_split_k_and_varlen_keep_one_masked_loop(tiles_seen):
    """Only prefill splits its walk (``CAUSAL_SPLIT``): the decode, split-K and varlen kernels mask
    every tile, as before, so they compile as before (0 spills in the resource table)."""
    x = random_paged_inputs([1, 64, 65, 200], 8, 2, 64, 16, dtype=torch.float32, seed=2)
    for num_splits in (1, 3):
        paged_attention(*x.args(), num_splits=num_splits)
    chunks, cached = [1, 40, 3, 1], [100, 70, 0, 64]
    x, query, starts = prefill_inputs(chunks, cached, (8, 2), 64, 16, torch.float32, seed=6)
    for num_splits in (1, 3):
        paged_attention_varlen(query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts,
                               num_splits=num_splits)
    assert tiles_seen and all(masked for masked, *_ in tiles_seen)


# ---- against the reference: chunks and prefixes at the tiles' edges -------------------------------
def prefill_inputs(chunks, cached, heads, head_dim, block_size, dtype, seed):
    x = random_paged_inputs([c + p for c, p in zip(chunks, cached)], *heads, head_dim, block_size,
                            dtype=dtype, seed=seed)
    starts = torch.tensor([0, *itertools.accumulate(chunks)], dtype=torch.int32, device=DEVICE)
    query = torch.randn(sum(chunks), heads[0], head_dim, generator=torch.Generator().manual_seed(seed))
    return x, query.to(DEVICE, dtype), starts


EDGES = [([64, 1, 65], [0, 63, 64]), ([63, 130], [65, 1]), ([17, 16], [127, 128]), ([0, 200, 2], [5, 0, 191])]
HEADS = [(8, 8), (8, 2), (8, 1), (5, 1)]


@pytest.mark.parametrize("capability", [INTERPRETER, T4], ids=["interp", "t4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("case", range(len(EDGES)))
def test_prefill_and_varlen_match_the_reference_at_the_tiles_edges(case, dtype, capability):
    chunks, cached = EDGES[case]
    heads = HEADS[case]
    head_dim = (64, 80)[case % 2]
    x, query, starts = prefill_inputs(chunks, cached, heads, head_dim, 16, dtype, seed=10 + case)
    cfg = launch_config(head_dim, dtype, heads[0] // heads[1], capability)
    args = (query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
    want = paged_prefill_ref(*args)
    got = paged_prefill(*args, config=cfg)
    assert torch.isfinite(got).all(), "NaN from a slot past a sequence's end"
    torch.testing.assert_close(got, want, **TOL[dtype])
    torch.testing.assert_close(paged_attention_varlen(*args, config=cfg), want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_decode_at_whole_tiles_matches_the_reference(dtype):
    """Sequences of whole tiles have no diagonal at all: the main loop alone must be right."""
    x = random_paged_inputs([64, 128, 16, 63], 8, 2, 64, 16, dtype=dtype, seed=8)
    torch.testing.assert_close(paged_attention(*x.args(), num_splits=1), paged_attention_ref(*x.args()), **TOL[dtype])
    torch.testing.assert_close(paged_attention(*x.args(), num_splits=3), paged_attention_ref(*x.args()), **TOL[dtype])
