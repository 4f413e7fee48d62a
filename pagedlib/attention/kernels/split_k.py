"""Split-K decode attention, a.k.a. flash-decoding (chapter 9).

With a small batch the single-pass kernel launches only ``num_seqs * num_kv_heads`` programs: too
few to keep a GPU's streaming multiprocessors busy while each walks a long sequence alone. So split
each sequence's tokens into ``num_splits`` ranges and give each range its own program:

1. ``split_kernel`` runs the same online softmax as the single pass (``attend_tiles``) over its
   range and stores the range's normalised output and its log-sum-exp ``lse = m + log(l)``.
2. ``merge_kernel`` combines the ranges: softmax over all tokens equals the ranges' outputs
   weighted by ``exp(lse_i - max lse)``, normalised. A range past the end of a short sequence
   is empty (``lse = -inf``) and gets weight 0; a sequence with no token at all (``seq_len`` 0)
   gets 0, as from the single pass.
"""
import math

import triton
import triton.language as tl

from .decode import attend_tiles, load_group_queries, normalise


def split_bounds(key_tiles: int, num_splits: int) -> list[int]:
    """Where the splits of ``key_tiles`` tiles begin, in tiles, and where the last ends: split ``s``
    holds tiles ``bounds[s] .. bounds[s + 1] - 1``. Balanced: every split holds ``key_tiles //
    num_splits`` tiles, the first ``key_tiles % num_splits`` one more, so none is empty while there
    are at least as many tiles as splits (with fewer, the last splits are the empty ones). The kernels compute the same line, and
    ``launch.choose_num_splits`` counts on it (a split holds at least ``key_tiles // num_splits``)."""
    fewest, more = divmod(key_tiles, num_splits)
    return [s * fewest + min(s, more) for s in range(num_splits + 1)]


def split_ranges(seq_len: int, num_splits: int, tile: int) -> list[tuple[int, int]]:
    """The token ranges ``[start, end)`` that ``split_kernel`` gives each split, computed on the host
    (the figures of chapter 9 draw them): the sequence's ``cdiv(seq_len, tile)`` tiles shared out
    evenly (``split_bounds``), so a split is empty only when the sequence has fewer tiles than
    splits. Keep it in step with the three lines of the kernel below."""
    bounds = split_bounds(math.ceil(seq_len / tile), num_splits)
    return [(min(a * tile, seq_len), min(b * tile, seq_len)) for a, b in zip(bounds, bounds[1:])]


@triton.jit
def split_kernel(partial_out, partial_lse, query, key_cache, value_cache, block_tables, seq_lens,
                 scale, num_splits,
                 stride_qs, stride_qh,
                 stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bt,
                 GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
                 BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                 HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Attention of one GQA group over one range of one sequence's tokens.

    Grid: (num_seqs, num_kv_heads, num_splits). Writes partial_out [num_seqs, num_heads,
    num_splits, HEAD_DIM] (the real head dim: no padded column goes to memory) and partial_lse
    [num_seqs, num_heads, num_splits], both fp32.
    """
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens + seq)

    # this split's token range: the sequence's tiles shared out evenly (split_ranges, on the host)
    tiles = tl.cdiv(seq_len, TILE)
    fewest = tiles // num_splits                                   # each split's tiles; the first
    more = tiles - fewest * num_splits                             # `more` splits hold one more
    start = (split * fewest + tl.minimum(split, more)) * TILE
    end = tl.minimum(start + (fewest + (split < more).to(tl.int32)) * TILE, seq_len)   # start == end: empty

    q, heads, _ = load_group_queries(query, seq, kv_head, stride_qs, stride_qh,
                                     GROUP, GROUP_PAD, HEAD_DIM, HEAD_DIM_PAD)
    q_pos = tl.full([GROUP_PAD], 0, tl.int32) + seq_len - 1       # the new token is the last one

    acc, m_i, l_i = attend_tiles(q, q_pos, start, end, block_tables + seq * stride_bt,
                                 key_cache, value_cache, stride_kb, stride_kt, stride_vb, stride_vt,
                                 kv_head * stride_kh, kv_head * stride_vh, scale,
                                 BLOCK_SIZE, TILE, HEAD_DIM, HEAD_DIM_PAD, DOT_PRECISION)

    result = normalise(acc, l_i)                                   # [GROUP_PAD, HEAD_DIM_PAD]; 0 if empty
    has_tokens = l_i > 0                                           # [GROUP_PAD]; False for an empty split
    lse = tl.where(has_tokens, m_i + tl.log(tl.where(has_tokens, l_i, 1.0)), float("-inf"))

    row_ok = tl.arange(0, GROUP_PAD) < GROUP                       # [GROUP_PAD] the group's real heads
    row = (seq * GROUP * tl.num_programs(1) + heads) * num_splits + split          # [GROUP_PAD]
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    tl.store(partial_out + row[:, None] * HEAD_DIM + offs_d[None, :], result,
             mask=row_ok[:, None] & (offs_d < HEAD_DIM)[None, :])
    tl.store(partial_lse + row, lse, mask=row_ok)


@triton.jit
def merge_kernel(out, partial_out, partial_lse, num_splits, stride_os, stride_oh,
                 SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    """out[seq, head] = sum_i w_i * partial_out_i with w = softmax(lse) over the splits.

    Grid: (num_seqs, num_heads).
    """
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    row = seq * tl.num_programs(1) + head                          # (seq, head) row of the partials

    splits = tl.arange(0, SPLITS_PAD)                              # [SPLITS_PAD]
    offs_d = tl.arange(0, HEAD_DIM_PAD)                            # [HEAD_DIM_PAD]
    split_ok = splits < num_splits
    d_ok = offs_d < HEAD_DIM
    lse = tl.load(partial_lse + row * num_splits + splits, mask=split_ok, other=float("-inf"))
    top = tl.max(lse, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)                 # no split saw a key (seq_len 0): weights all 0
    weight = tl.exp(lse - top)                                     # [SPLITS_PAD]; empty splits get 0
    total = tl.sum(weight, axis=0)
    weight = weight / tl.where(total > 0, total, 1.0)              # all 0: the output is 0, as the single pass's
    parts = tl.load(partial_out + (row * num_splits + splits)[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=split_ok[:, None] & d_ok[None, :], other=0.0)   # [SPLITS_PAD, HEAD_DIM_PAD]
    result = tl.sum(weight[:, None] * parts, axis=0)               # [HEAD_DIM_PAD]
    tl.store(out + seq * stride_os + head * stride_oh + offs_d, result.to(out.dtype.element_ty), mask=d_ok)
