"""Attention through a page table in plain PyTorch (chapter 5): the reference for every kernel.

A sequence's K/V rows are scattered over the cache's blocks; its block table says where. Token
``t`` of sequence ``s`` lives in block ``block_tables[s, t // block_size]`` at offset
``t % block_size``. Gather those rows back into a contiguous ``[seq_len, num_kv_heads, head_dim]``
tensor and the rest is ordinary attention, computed here in fp32 one sequence at a time: slow,
short and obviously right. The Triton kernels (``pagedlib.attention.triton_backend``) and the batched
PyTorch backend (``pagedlib.attention.torch_backend``) are tested against it.
"""
from __future__ import annotations

import torch

from ..validation import cdiv
from .checks import check_decode, check_prefill, check_scale


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first ``seq_len`` rows of one sequence, gathered through its block table row.

    ``cache`` is ``[num_blocks, block_size, num_kv_heads, head_dim]``; returns
    ``[seq_len, num_kv_heads, head_dim]``.
    """
    block_size = cache.shape[1]
    seq_blocks = cdiv(seq_len, block_size)                         # ceil(seq_len / block_size)
    blocks = cache[block_table[:seq_blocks].long()]                # [seq_blocks, block_size, kv_heads, dim]
    return blocks.flatten(0, 1)[:seq_len]                          # [seq_len, kv_heads, dim]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal_from: int | None) -> torch.Tensor:
    """fp32 softmax attention of q [n_q, heads, dim] over k, v [n_k, kv_heads, dim].

    With ``causal_from = c``, query row i sits at position c + i and sees keys 0 .. c + i.
    """
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)                  # [n_k, heads, dim]
    v = v.float().repeat_interleave(group, dim=1)                  # [n_k, heads, dim]
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale    # [heads, n_q, n_k]
    if causal_from is not None:
        q_pos = causal_from + torch.arange(q.shape[0], device=q.device)
        k_pos = torch.arange(k.shape[0], device=q.device)
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    probs = scores.softmax(dim=-1)                                 # [heads, n_q, n_k]
    return torch.einsum("hqk,khd->qhd", probs, v)                  # [n_q, heads, dim]


def paged_attention_ref(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                        block_tables: torch.Tensor, seq_lens: torch.Tensor,
                        scale: float | None = None) -> torch.Tensor:
    """Decode attention through a page table, in plain PyTorch.

    ``query [num_seqs, num_heads, head_dim]`` holds one new token per sequence; it attends to the
    first ``seq_lens[s]`` cached tokens of sequence ``s`` (its own K/V already written), found through
    ``block_tables [num_seqs, max_blocks]`` in the caches ``[num_blocks, block_size, num_kv_heads,
    head_dim]``. ``scale`` defaults to ``head_dim ** -0.5``. Returns ``[num_seqs, num_heads,
    head_dim]`` in the query's dtype; softmax in fp32.
    """
    dims, _ = check_decode(query, key_cache, value_cache, block_tables, seq_lens)
    scale = check_scale(scale, dims.head_dim)
    out = torch.empty_like(query)                                  # [num_seqs, num_heads, head_dim]
    for s, seq_len in enumerate(seq_lens.tolist()):
        k = gather_kv(key_cache, block_tables[s], seq_len)         # [seq_len, kv_heads, dim]
        v = gather_kv(value_cache, block_tables[s], seq_len)
        out[s] = _attend(query[s:s + 1], k, v, scale, causal_from=None)[0].to(query.dtype)
    return out


def paged_prefill_ref(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                      block_tables: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                      scale: float | None = None) -> torch.Tensor:
    """Causal attention for a chunk of new tokens per sequence, through a page table, in plain PyTorch.

    Sequence ``s`` owns query rows ``query_start_loc[s] : query_start_loc[s + 1]`` of ``query
    [num_tokens, num_heads, head_dim]``: its last ``n`` tokens, whose K/V are already in the cache.
    Its first ``seq_lens[s] - n`` tokens are the cached prefix. Each new token attends to every
    token of its sequence up to and including itself. Returns ``[num_tokens, num_heads, head_dim]``
    in the query's dtype; softmax in fp32.
    """
    dims, _ = check_prefill(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc)
    scale = check_scale(scale, dims.head_dim)
    out = torch.empty_like(query)                                  # [num_tokens, num_heads, head_dim]
    starts = query_start_loc.tolist()
    for s, seq_len in enumerate(seq_lens.tolist()):
        first, last = starts[s], starts[s + 1]
        if first == last:
            continue                                               # no new tokens for this sequence
        k = gather_kv(key_cache, block_tables[s], seq_len)         # [seq_len, kv_heads, dim]
        v = gather_kv(value_cache, block_tables[s], seq_len)
        cached = seq_len - (last - first)                          # tokens before the chunk
        out[first:last] = _attend(query[first:last], k, v, scale, causal_from=cached).to(query.dtype)
    return out


def online_softmax_steps(scores, values, tile: int) -> list[dict]:
    """The online softmax of chapter 8, tile by tile: what the kernel holds after each tile.

    ``scores`` are one query's scores ``[T]``, ``values`` the value of each token (``[T]``, one number
    each, or ``[T, head_dim]``). Each step reads ``tile`` scores and returns a dict: ``start`` and
    ``end`` (the tokens read), ``tile_max``, ``m`` (the running max after the tile), ``alpha``
    (``exp(m_old - m)``, what the sums so far were rescaled by), ``l`` and ``acc`` (the running sums)
    and ``out = acc / l``, the softmax average of the values read so far; after the last tile it is
    ``softmax(scores) @ values``. In float64; the site's stepper (_static/steppers.js) computes the
    same numbers, and tests/test_exercise_boxes.py compares them in a browser.
    """
    s_all = torch.as_tensor(scores, dtype=torch.float64)
    v_all = torch.as_tensor(values, dtype=torch.float64)
    if tile < 1:
        raise ValueError(f"tile must be at least 1; got {tile}")
    m = torch.tensor(float("-inf"), dtype=torch.float64)     # running max
    l = torch.tensor(0.0, dtype=torch.float64)                # running sum of exp(score - m)
    acc = torch.zeros(v_all.shape[1:], dtype=torch.float64)   # running sum of exp(score - m) * v
    steps = []
    for start in range(0, len(s_all), tile):
        s, v = s_all[start:start + tile], v_all[start:start + tile]
        m_new = torch.maximum(m, s.max())
        alpha = torch.exp(m - m_new)                          # moves the old sums onto the new max
        p = torch.exp(s - m_new)                              # this tile's weights
        l = l * alpha + p.sum()
        acc = acc * alpha + p @ v
        m = m_new
        steps.append({"start": start, "end": start + len(s), "tile_max": s.max().item(), "m": m.item(),
                      "alpha": alpha.item(), "l": l.item(), "acc": acc.tolist(), "out": (acc / l).tolist()})
    return steps
