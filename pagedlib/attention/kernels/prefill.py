"""Prefill attention over pages: a chunk of new tokens per sequence (chapter 9).

Prefix caching and chunked prefill both leave a sequence with ``cached`` tokens already in the
cache and a chunk of ``n`` new tokens to attend (their K/V written just before this kernel runs).
New token ``i`` sits at position ``cached + i`` and sees every token of its sequence at or before
that position: the cached prefix and the chunk up to itself. All of them are read through the
block table, so a shared prefix is read from the same pages by every sequence that shares it.

One program per (sequence, KV head, tile of ``TILE_Q`` new tokens). Its query tile packs those
tokens x the ``GROUP`` query heads that share the KV head: ``TILE_M`` rows, row ``r`` is token
``r // GROUP`` of the tile and head ``r % GROUP`` of the group (``load_packed_queries``), so each
K/V tile it loads serves ``TILE_M`` rows, at least 64 on tensor cores (``launch.PREFILL_ROWS``:
what Hopper's ``wgmma`` takes). It reuses the decode kernel's inner loop, ``attend_tiles``, with a
query position per row: an unmasked main loop over the keys every row sees, then the few
diagonal tiles where the causal mask bites. Keys past the tile's last position are never loaded.
"""
import triton
import triton.language as tl

from .decode import attend_tiles, main_loop_end, normalise


def prefill_tiles(chunk: int, cached: int, tile_q: int, tile: int) -> tuple[int, int]:
    """The K/V tiles one KV head's programs of ``prefill_kernel`` walk for a chunk of ``chunk`` new
    tokens after ``cached`` ones, as ``(main, diagonal)``: unmasked ones and masked ones, computed
    on the host (``main_loop_end``; chapter 9 counts them)."""
    main = diagonal = 0
    for first in range(0, chunk, tile_q):                          # one program per tile_q new tokens
        end = cached + min(first + tile_q, chunk)                  # keys up to the tile's last token
        stop = main_loop_end(0, end, cached + first, tile)
        main += stop // tile
        diagonal += triton.cdiv(end - stop, tile)
    return main, diagonal


@triton.jit
def load_packed_queries(query, first_row, local_tile, chunk_len, cached, kv_head, stride_qt, stride_qh,
                        GROUP: tl.constexpr, TILE_M: tl.constexpr, TILE_Q: tl.constexpr,
                        HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    """The packed query tile of new tokens ``local_tile * TILE_Q ..`` of a chunk x the ``GROUP``
    heads of ``kv_head``: row ``r`` is token ``r // GROUP``, head ``r % GROUP``.

    Returns ``q [TILE_M, HEAD_DIM_PAD]`` (rows past the chunk or past ``TILE_Q * GROUP`` are 0),
    each row's index in the chunk ``tok``, its position in the sequence ``q_pos`` (after the
    ``cached`` tokens), its row of ``query`` ``token_row``, its query head ``heads`` and whether it
    is a real row ``row_ok`` (all ``[TILE_M]``), and ``q_mask [TILE_M, HEAD_DIM_PAD]``, which also
    masks the output.
    """
    rows = tl.arange(0, TILE_M)
    tok = local_tile * TILE_Q + rows // GROUP                      # [TILE_M] index in the chunk
    heads = kv_head * GROUP + rows % GROUP                         # [TILE_M] query head
    row_ok = (rows < TILE_Q * GROUP) & (tok < chunk_len)           # the last tile is ragged
    q_pos = cached + tok                                           # [TILE_M] position in the sequence
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    q_mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
    token_row = (first_row + tok).to(tl.int64)
    q = tl.load(query + token_row[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
                mask=q_mask, other=0.0)                            # [TILE_M, HEAD_DIM_PAD]
    return q, tok, q_pos, token_row, heads, row_ok, q_mask


@triton.jit
def prefill_kernel(out, query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale,
                   stride_qt, stride_qh, stride_ot, stride_oh,
                   stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bt,
                   GROUP: tl.constexpr, TILE_M: tl.constexpr, TILE_Q: tl.constexpr,
                   BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                   HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """out[new tokens of seq, heads of kv_head] = causal attention over the sequence's cached tokens.

    Grid: (num_seqs, num_kv_heads, cdiv(longest chunk, TILE_Q)). query and out are
    [num_tokens, num_heads, head_dim]; sequence s owns rows query_start_loc[s] : query_start_loc[s+1].
    """
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    m_tile = tl.program_id(2)

    first_row = tl.load(query_start_loc + seq)
    chunk_len = tl.load(query_start_loc + seq + 1) - first_row
    if m_tile * TILE_Q >= chunk_len:
        return                                                     # past this chunk's last tile
    seq_len = tl.load(seq_lens + seq)
    cached = seq_len - chunk_len                                   # tokens before the chunk

    q, _, q_pos, token_row, heads, _, q_mask = load_packed_queries(query, first_row, m_tile, chunk_len, cached,
                                                                   kv_head, stride_qt, stride_qh, GROUP, TILE_M,
                                                                   TILE_Q, HEAD_DIM, HEAD_DIM_PAD)

    # keys 0 .. (last position in this tile)
    end = tl.minimum(cached + (m_tile + 1) * TILE_Q, seq_len)
    acc, m_i, l_i = attend_tiles(q, q_pos, 0, end, block_tables + seq * stride_bt,
                                 key_cache, value_cache, stride_kb, stride_kt, stride_vb, stride_vt,
                                 kv_head * stride_kh, kv_head * stride_vh, scale,
                                 BLOCK_SIZE, TILE, HEAD_DIM, HEAD_DIM_PAD, DOT_PRECISION, CAUSAL_SPLIT=True)

    result = normalise(acc, l_i)                                   # [TILE_M, HEAD_DIM_PAD]
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    tl.store(out + token_row[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
             result.to(out.dtype.element_ty), mask=q_mask)
