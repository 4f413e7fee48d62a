"""Decode attention one page at a time (chapter 5): the paper's block-wise attention with an online
softmax, the loop chapter 8's kernel starts from.

The gather reference (``reference.paged_attention_ref``) copies a sequence's K/V out of its pages
into one contiguous tensor and then attends: exactly the copy a paged kernel avoids. Here each page
is read where it lies, and only what a kernel would keep in registers is carried from page to page,
for each query head:

- ``m``: the largest score seen so far (the running max);
- ``l``: the sum of ``exp(score - m)`` over the tokens seen so far;
- ``acc``: the sum of ``exp(score - m) * v`` over the same tokens, ``[head_dim]``.

When a page brings a score above ``m``, the sums so far were taken against a max that is now too
small; multiplying them by ``alpha = exp(m_old - m_new)`` moves them onto the new max (the rescale).
After the last page, ``acc / l`` is the softmax-weighted average of the values: the same output as
the gather reference, up to the order of the sums. vLLM's PagedAttention paper (Kwon et al., SOSP
2023, Eq. 4) writes attention block by block the same way, with the sum over all blocks in the
denominator; the online softmax (Milakov and Gimelshein, 2018) lets that sum be carried along.
"""
from __future__ import annotations

import torch

from ..validation import cdiv
from .checks import check_decode, check_scale

Partial = tuple[torch.Tensor, torch.Tensor, torch.Tensor]   # (m [heads], l [heads], acc [heads, dim])


def empty_partial(num_heads: int, head_dim: int, device=None) -> Partial:
    """The state before any page: max -inf, sums 0 (merging it with any partial changes nothing)."""
    return (torch.full((num_heads,), float("-inf"), device=device),
            torch.zeros(num_heads, device=device), torch.zeros(num_heads, head_dim, device=device))


def page_partial(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> Partial:
    """One page's partial softmax for one query: q ``[heads, dim]``; k, v ``[n, kv_heads, dim]``, the
    page's ``n`` written rows (1 to block_size). In fp32; returns ``(m, l, acc)`` against the page's
    own max."""
    group = q.shape[0] // k.shape[1]                               # query heads per K/V head
    k = k.float().repeat_interleave(group, dim=1)                  # [n, heads, dim]
    v = v.float().repeat_interleave(group, dim=1)                  # [n, heads, dim]
    scores = torch.einsum("hd,nhd->hn", q.float(), k) * scale      # [heads, n]
    m = scores.amax(dim=-1)                                        # [heads]
    p = torch.exp(scores - m[:, None])                             # [heads, n], each at most 1
    return m, p.sum(dim=-1), torch.einsum("hn,nhd->hd", p, v)


def merge_partials(a: Partial, b: Partial) -> Partial:
    """The partial of the tokens of ``a`` and of ``b`` together: both sums moved onto the larger max.

    Merging is associative and commutative (up to rounding), so pages may be merged in any order
    or grouping: page by page here, split by split in chapter 8's split-K kernel.
    """
    m_a, l_a, acc_a = a
    m_b, l_b, acc_b = b
    m = torch.maximum(m_a, m_b)                                    # [heads]
    m_safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)   # two empty partials: no NaN
    alpha, beta = torch.exp(m_a - m_safe), torch.exp(m_b - m_safe)  # the rescale factors
    return m, l_a * alpha + l_b * beta, acc_a * alpha[:, None] + acc_b * beta[:, None]


def paged_attention_by_page(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                            block_tables: torch.Tensor, seq_lens: torch.Tensor,
                            scale: float | None = None) -> torch.Tensor:
    """Decode attention through a page table, one page at a time, with an online softmax.

    Same arguments and result as ``paged_attention_ref``: ``query [num_seqs, num_heads, head_dim]``,
    caches ``[num_blocks, block_size, num_kv_heads, head_dim]``, ``block_tables [num_seqs,
    max_blocks]``, ``seq_lens [num_seqs]``. Page ``p`` of sequence ``s`` is read from block
    ``block_tables[s, p]``, its first ``min(block_size, seq_len - p * block_size)`` rows only: no
    K/V is copied into a contiguous tensor and no slot past ``seq_lens`` is read. Softmax in fp32;
    returns the query's dtype.
    """
    dims, _ = check_decode(query, key_cache, value_cache, block_tables, seq_lens)
    scale = check_scale(scale, dims.head_dim)
    block_size = key_cache.shape[1]
    out = torch.empty_like(query)                                  # [num_seqs, num_heads, head_dim]
    for s, seq_len in enumerate(seq_lens.tolist()):
        state = empty_partial(query.shape[1], query.shape[2], query.device)
        for page in range(cdiv(seq_len, block_size)):
            block = int(block_tables[s, page])
            rows = min(block_size, seq_len - page * block_size)    # the last page may be part-full
            k, v = key_cache[block, :rows], value_cache[block, :rows]  # [rows, kv_heads, dim]
            state = merge_partials(state, page_partial(query[s], k, v, scale))
        m, l, acc = state
        out[s] = (acc / l[:, None]).to(query.dtype)
    return out
