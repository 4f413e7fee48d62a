"""Prefill attention over pages: a chunk of new tokens per sequence (chapter 9).

Prefix caching and chunked prefill both leave a sequence with ``cached`` tokens already in the
cache and a chunk of ``n`` new tokens to attend (their K/V written just before this kernel runs).
New token ``i`` sits at position ``cached + i`` and sees every token of its sequence at or before
that position: the cached prefix and the chunk up to itself. All of them are read through the
block table, so a shared prefix is read from the same pages by every sequence that shares it.

One program per (sequence, query head, tile of ``TILE_M`` new tokens). It reuses the decode
kernel's inner loop, ``attend_tiles``, with a query position per row: decode is the special case
of a chunk of one token. Keys past the tile's last position are never loaded.
"""
import triton
import triton.language as tl

from .decode import attend_tiles, normalise


@triton.jit
def prefill_kernel(out, query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale,
                   stride_qt, stride_qh, stride_ot, stride_oh,
                   stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bt,
                   GROUP: tl.constexpr, TILE_M: tl.constexpr,
                   BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                   HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """out[new tokens of seq, head] = causal attention over the sequence's cached tokens.

    Grid: (num_seqs, num_heads, cdiv(longest chunk, TILE_M)). query and out are
    [num_tokens, num_heads, head_dim]; sequence s owns rows query_start_loc[s] : query_start_loc[s+1].
    """
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    m_tile = tl.program_id(2)
    kv_head = head // GROUP

    first_row = tl.load(query_start_loc + seq).to(tl.int64)
    chunk_len = tl.load(query_start_loc + seq + 1) - tl.load(query_start_loc + seq)
    seq_len = tl.load(seq_lens + seq)
    cached = seq_len - chunk_len                                   # tokens before the chunk

    i = m_tile * TILE_M + tl.arange(0, TILE_M)                     # [TILE_M] index in the chunk
    row_ok = i < chunk_len                                         # the last tile is ragged
    q_pos = cached + i                                             # [TILE_M] position in the sequence
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    q_mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
    q = tl.load(query + (first_row + i)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=q_mask, other=0.0)                            # [TILE_M, HEAD_DIM_PAD]

    # keys 0 .. (last position in this tile); a tile past the chunk's end reads nothing
    end = tl.minimum(cached + (m_tile + 1) * TILE_M, seq_len)
    end = tl.where(m_tile * TILE_M < chunk_len, end, 0)

    acc, m_i, l_i = attend_tiles(q, q_pos, 0, end, block_tables + seq * stride_bt,
                                 key_cache, value_cache, stride_kb, stride_kt, stride_vb, stride_vt,
                                 kv_head * stride_kh, kv_head * stride_vh, scale,
                                 BLOCK_SIZE, TILE, HEAD_DIM, HEAD_DIM_PAD, DOT_PRECISION)

    result = normalise(acc, l_i)                                   # [TILE_M, HEAD_DIM_PAD]
    tl.store(out + (first_row + i)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             result.to(out.dtype.element_ty), mask=q_mask)
