"""Write new K/V rows into their cache slots (chapter 8).

Before attention runs, each new token's key and value rows go to the slot the block manager gave
it: ``slot = block_id * block_size + offset``, so block ``slot // block_size``, row ``slot %
block_size``. One program per token copies all of its KV heads; a slot of -1 (a padding token)
writes nothing.
"""
import triton
import triton.language as tl


@triton.jit
def write_kv_kernel(key, value, key_cache, value_cache, slot_mapping,
                    stride_kt, stride_kh, stride_vt, stride_vh,
                    stride_ckb, stride_ckt, stride_ckh, stride_cvb, stride_cvt, stride_cvh,
                    NUM_KV_HEADS: tl.constexpr, HEADS_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    """key_cache[slot] = key[token]; value_cache[slot] = value[token] for one token.

    Grid: (num_tokens,). key, value [num_tokens, num_kv_heads, head_dim]; slot_mapping [num_tokens].
    """
    token = tl.program_id(0).to(tl.int64)
    heads = tl.arange(0, HEADS_PAD)                                # [HEADS_PAD]
    offs_d = tl.arange(0, HEAD_DIM_PAD)                            # [HEAD_DIM_PAD]
    # the token's slot, repeated for each head row: [HEADS_PAD] (a tensor, so the mask below
    # broadcasts cleanly; the interpreter mishandles a scalar `&` a tensor)
    slot = tl.load(slot_mapping + token + heads * 0).to(tl.int64)
    block = slot // BLOCK_SIZE                                     # which page
    offset = slot % BLOCK_SIZE                                     # which row of the page
    row_ok = (heads < NUM_KV_HEADS) & (slot >= 0)                  # slot -1: a padding token, skip
    mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]          # [HEADS_PAD, HEAD_DIM_PAD]

    k = tl.load(key + token * stride_kt + heads[:, None] * stride_kh + offs_d[None, :], mask=mask)
    v = tl.load(value + token * stride_vt + heads[:, None] * stride_vh + offs_d[None, :], mask=mask)
    tl.store(key_cache + (block * stride_ckb + offset * stride_ckt)[:, None] + heads[:, None] * stride_ckh
             + offs_d[None, :], k, mask=mask)                      # [HEADS_PAD, HEAD_DIM_PAD]
    tl.store(value_cache + (block * stride_cvb + offset * stride_cvt)[:, None] + heads[:, None] * stride_cvh
             + offs_d[None, :], v, mask=mask)
