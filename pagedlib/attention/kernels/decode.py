"""Decode attention through a page table, in one pass (chapter 8).

At decode time each sequence has one new query token per head, and must read *all* of its cached
K/V: the work is reading memory, so the kernel is built to read every K/V byte once.

- One program per (sequence, KV head). With grouped-query attention, ``GROUP = num_heads //
  num_kv_heads`` query heads share that KV head, so the program loads all of them as the rows of
  one ``[GROUP_PAD, HEAD_DIM_PAD]`` tile and every K/V row it reads serves the whole group.
- It walks the sequence ``TILE`` tokens at a time. Token ``t`` lives in block
  ``block_tables[seq, t // BLOCK_SIZE]`` at offset ``t % BLOCK_SIZE``: the page table is one extra
  load per token, and tiles need not line up with pages.
- An online softmax keeps a running max ``m``, sum ``l`` and unnormalised output ``acc`` in fp32,
  so scores are never stored and the sequence can be any length.
- Masks on every ragged edge: tokens past ``seq_len`` (those slots may hold NaN), padded query rows,
  padded head dimensions (head_dim 80 is padded to 128). A masked load never touches memory.
"""
import triton
import triton.language as tl


@triton.jit
def load_group_queries(query, seq, kv_head, stride_qs, stride_qh,
                       GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
                       HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    """The new token's query rows of the ``GROUP`` heads that share ``kv_head`` (GQA), as one tile.

    Returns ``q [GROUP_PAD, HEAD_DIM_PAD]`` (padded rows and dims are 0), the rows' query heads
    ``heads [GROUP_PAD]`` and ``q_mask [GROUP_PAD, HEAD_DIM_PAD]``, which also masks the output.
    """
    rows = tl.arange(0, GROUP_PAD)                                 # [GROUP_PAD] rows of the group
    heads = kv_head * GROUP + rows                                 # their query heads
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    q_mask = (rows < GROUP)[:, None] & (offs_d < HEAD_DIM)[None, :]
    q = tl.load(query + seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :],
                mask=q_mask, other=0.0)                            # [GROUP_PAD, HEAD_DIM_PAD]
    return q, heads, q_mask


@triton.jit
def normalise(acc, l_i):
    """The softmax's last step, ``acc / l`` per row; a row that saw no token (``l = 0``) stays 0."""
    return acc / tl.where(l_i > 0, l_i, 1.0)[:, None]


def main_loop_end(start: int, end: int, first_pos: int, tile: int) -> int:
    """Where ``attend_tiles``'s unmasked main loop stops (``CAUSAL_SPLIT``), computed on the host
    (chapter 9 counts with it; keep it in step with the kernel): after the whole ``tile``-token
    tiles from ``start`` that end at or before the earliest row's position ``first_pos`` (inclusive)
    and ``end``."""
    seen_by_all = min(first_pos + 1, end)
    return start + max(seen_by_all - start, 0) // tile * tile


@triton.jit
def attend_tile(acc, m_i, l_i, q, q_pos, tile_start, end, table_row, offs_t, offs_d, d_ok,
                key_cache, value_cache,
                stride_kb, stride_kt, stride_vb, stride_vt, kv_head_k, kv_head_v,
                scale,
                BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, DOT_PRECISION: tl.constexpr,
                MASKED: tl.constexpr, BASE2: tl.constexpr):
    """One step of ``attend_tiles``: tokens ``tile_start .. tile_start + TILE - 1`` folded into the
    running state ``(acc, m_i, l_i)``, which it returns.

    ``MASKED=True``: tokens at or past ``end`` are never loaded, and each row sees only keys at or
    before its own position; a row may see no key at all in the tile. ``MASKED=False`` (prefill's
    main loop): the caller promises every token of the tile is before ``end`` and visible to every
    row, so nothing is masked but padded head dimensions.
    """
    pos = tile_start + offs_t                                      # [TILE] token positions
    # the page table: which block holds each token (int64 so block * stride cannot overflow)
    if MASKED:
        t_ok = pos < end
        block = tl.load(table_row + pos // BLOCK_SIZE, mask=t_ok, other=0).to(tl.int64)
    else:
        block = tl.load(table_row + pos // BLOCK_SIZE).to(tl.int64)
    offset = (pos % BLOCK_SIZE).to(tl.int64)
    if MASKED:
        kv_mask = t_ok[:, None] & d_ok[None, :]                    # [TILE, HEAD_DIM_PAD]
    else:
        kv_mask = d_ok[None, :]                                    # [1, HEAD_DIM_PAD]: padded dims only
    k_ptrs = key_cache + (block * stride_kb + offset * stride_kt + kv_head_k)[:, None] + offs_d[None, :]
    if MASKED or HEAD_DIM != HEAD_DIM_PAD:
        k = tl.load(k_ptrs, mask=kv_mask, other=0.0)               # [TILE, HEAD_DIM_PAD]
    else:
        k = tl.load(k_ptrs)                                        # nothing to mask
    v_ptrs = value_cache + (block * stride_vb + offset * stride_vt + kv_head_v)[:, None] + offs_d[None, :]
    if MASKED or HEAD_DIM != HEAD_DIM_PAD:
        v = tl.load(v_ptrs, mask=kv_mask, other=0.0)               # [TILE, HEAD_DIM_PAD]
    else:
        v = tl.load(v_ptrs)

    if q.shape[0] >= 16:                                           # tl.dot: tensor cores from sm_80
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale   # [ROWS, TILE] fp32
    else:                                                          # fewer rows (CUDA cores): no padding
        scores = tl.sum(q.to(tl.float32)[:, None, :] * k.to(tl.float32)[None, :, :], axis=2) * scale
    if MASKED:
        visible = t_ok[None, :] & (pos[None, :] <= q_pos[:, None])               # [ROWS, TILE]
        scores = tl.where(visible, scores, float("-inf"))

    # online softmax: rescale what we have by exp(old max - new max), then add this tile
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))                # [ROWS]
    if MASKED:
        # a row that has seen no visible key yet keeps m = -inf, and exp(-inf - (-inf)) is NaN:
        # subtract 0 there instead (alpha and p are then exp(-inf) = 0, as they should be)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)      # [ROWS]
    else:
        m_safe = m_new                                             # every row saw a key: finite
    if BASE2:
        alpha = tl.exp2(m_i - m_safe)                              # [ROWS]
        p = tl.exp2(scores - m_safe[:, None])                      # [ROWS, TILE]
    else:
        alpha = tl.exp(m_i - m_safe)                               # [ROWS]
        p = tl.exp(scores - m_safe[:, None])                       # [ROWS, TILE]
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if q.shape[0] >= 16:
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    else:
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
    return acc, m_new, l_i


@triton.jit
def attend_tiles(q, q_pos, start, end, table_row,
                 key_cache, value_cache,
                 stride_kb, stride_kt, stride_vb, stride_vt, kv_head_k, kv_head_v,
                 scale,
                 BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                 HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, DOT_PRECISION: tl.constexpr,
                 BASE2: tl.constexpr = False, CAUSAL_SPLIT: tl.constexpr = False):
    """Attend query rows to tokens ``start .. end - 1`` of one sequence with an online softmax.

    q [ROWS, HEAD_DIM_PAD] query rows; q_pos [ROWS] the position of each row's token (a row sees
    keys at positions <= its own: causal). ``table_row`` points at the sequence's block table row;
    ``kv_head_k`` / ``kv_head_v`` are the KV head's offsets inside a cache row. Returns the fp32
    running state: unnormalised output acc [ROWS, HEAD_DIM_PAD], max m_i [ROWS], sum l_i [ROWS].
    A row that sees no key keeps m_i = -inf and l_i = 0.

    It walks ``TILE``-token tiles, one ``attend_tile`` each, masked. ``CAUSAL_SPLIT`` (the prefill
    kernel) splits the walk in two: a main loop, unmasked, over the whole tiles every row sees (they
    end at or before the earliest row's position and before ``end``: ``main_loop_end``), then the
    diagonal, masked: the tiles left, where the causal mask bites or the sequence ends. Decode,
    split-K and the varlen kernel leave it off: their rows see nearly every key anyway, and the one
    masked loop keeps their registers as they were (the resource table: no spill).

    With 16 rows or more the two products are ``tl.dot`` (tensor-core ``mma`` from sm_80 on, in fp16
    and bf16). With fewer (a decode group left unpadded where dots run on CUDA cores: a T4, or fp32,
    ``launch.launch_config``), they are a broadcast multiply and a sum: the same fused multiply-adds
    tl.dot lowers to there, for the real rows only.

    ``BASE2`` (chapter 9's varlen kernel): the softmax in base 2, ``exp2`` instead of ``exp``, with
    ``log2(e)`` folded into ``scale`` by the caller; m_i is then a base-2 maximum. Both switches are
    compile-time: the kernels that leave them off compile exactly as they would without them.
    """
    acc = tl.zeros(q.shape, dtype=tl.float32)                      # [ROWS, HEAD_DIM_PAD]
    m_i = tl.full([q.shape[0]], float("-inf"), dtype=tl.float32)   # [ROWS]
    l_i = tl.zeros([q.shape[0]], dtype=tl.float32)                 # [ROWS]
    offs_t = tl.arange(0, TILE)                                    # [TILE]
    offs_d = tl.arange(0, HEAD_DIM_PAD)                            # [HEAD_DIM_PAD]
    d_ok = offs_d < HEAD_DIM
    masked_from = start
    if CAUSAL_SPLIT:
        # the main loop ends where a key would be hidden from the earliest row, or past the end
        seen_by_all = tl.minimum(tl.min(q_pos, axis=0) + 1, end)
        masked_from = start + tl.maximum(seen_by_all - start, 0) // TILE * TILE
        for tile_start in range(start, masked_from, TILE):
            acc, m_i, l_i = attend_tile(acc, m_i, l_i, q, q_pos, tile_start, end, table_row, offs_t, offs_d, d_ok,
                                        key_cache, value_cache, stride_kb, stride_kt, stride_vb, stride_vt,
                                        kv_head_k, kv_head_v, scale, BLOCK_SIZE, TILE, HEAD_DIM,
                                        HEAD_DIM_PAD, DOT_PRECISION, MASKED=False, BASE2=BASE2)
    for tile_start in range(masked_from, end, TILE):
        acc, m_i, l_i = attend_tile(acc, m_i, l_i, q, q_pos, tile_start, end, table_row, offs_t, offs_d, d_ok,
                                    key_cache, value_cache, stride_kb, stride_kt, stride_vb, stride_vt,
                                    kv_head_k, kv_head_v, scale, BLOCK_SIZE, TILE, HEAD_DIM,
                                    HEAD_DIM_PAD, DOT_PRECISION, MASKED=True, BASE2=BASE2)
    return acc, m_i, l_i


@triton.jit
def decode_kernel(out, query, key_cache, value_cache, block_tables, seq_lens, scale,
                  stride_qs, stride_qh, stride_os, stride_oh,
                  stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bt,
                  GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                  HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """out[seq, heads of kv_head] = softmax(q K^T * scale) V over the sequence's cached tokens.

    Grid: (num_seqs, num_kv_heads). query and out are [num_seqs, num_heads, head_dim].
    """
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1).to(tl.int64)
    seq_len = tl.load(seq_lens + seq)

    q, heads, q_mask = load_group_queries(query, seq, kv_head, stride_qs, stride_qh,
                                          GROUP, GROUP_PAD, HEAD_DIM, HEAD_DIM_PAD)
    q_pos = tl.full([GROUP_PAD], 0, tl.int32) + seq_len - 1       # the new token is the last one

    acc, m_i, l_i = attend_tiles(q, q_pos, 0, seq_len, block_tables + seq * stride_bt,
                                 key_cache, value_cache, stride_kb, stride_kt, stride_vb, stride_vt,
                                 kv_head * stride_kh, kv_head * stride_vh, scale,
                                 BLOCK_SIZE, TILE, HEAD_DIM, HEAD_DIM_PAD, DOT_PRECISION)

    result = normalise(acc, l_i)                                   # [GROUP_PAD, HEAD_DIM_PAD]
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    tl.store(out + seq * stride_os + heads[:, None] * stride_oh + offs_d[None, :],
             result.to(out.dtype.element_ty), mask=q_mask)
