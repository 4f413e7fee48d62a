"""Attention through a page table in plain PyTorch (chapter 5): the reference for every kernel.

A sequence's K/V rows are scattered over the cache's blocks; its block table says where. Token
``t`` of sequence ``s`` lives in block ``block_tables[s, t // block_size]`` at offset
``t % block_size``. Gather those rows back into a contiguous ``[seq_len, num_kv_heads, head_dim]``
tensor and the rest is ordinary attention, computed here in fp32 one sequence at a time: slow,
short and obviously right. The Triton kernels of ``pagedlib.attention`` are tested against it.

The same attention for a whole batch at once, the PyTorch backend of ``pagedlib.model`` on a CPU:

- :func:`paged_attention_batched_ref` (decode) gathers every page the batch reads into one flat
  tensor, scores each sequence's query against its pages, and merges the pages' partial softmaxes
  per sequence (a running max and sum, as split-K does), with no Python loop over sequences;
- :func:`paged_prefill_batched_ref` sends the one-token chunks (decode rows of a mixed batch) there,
  and runs each longer chunk through one causal SDPA: a chunk is already a big matrix product, so
  the loop over those costs little, while padding all chunks to the longest would multiply the work.

:func:`write_kv_ref` is ``write_kv`` as an index assignment, for the same backend.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from . import runtime
from .attention_checks import check_decode, check_prefill, check_scale


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first ``seq_len`` rows of one sequence, gathered through its block table row.

    ``cache`` is ``[num_blocks, block_size, num_kv_heads, head_dim]``; returns
    ``[seq_len, num_kv_heads, head_dim]``.
    """
    block_size = cache.shape[1]
    num_pages = -(-seq_len // block_size)                          # ceil(seq_len / block_size)
    pages = cache[block_table[:num_pages].long()]                  # [num_pages, block_size, kv_heads, dim]
    return pages.flatten(0, 1)[:seq_len]                           # [seq_len, kv_heads, dim]


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


def write_kv_ref(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                 value_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """``write_kv`` in plain PyTorch: the same contract (key, value ``[num_tokens, num_kv_heads,
    head_dim]``, one slot per token, slot -1 skips), done by index assignment into the cache viewed
    as ``[num_blocks * block_size, num_kv_heads, head_dim]``."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep]
    key_cache.view(-1, *key_cache.shape[2:])[slots] = key[keep]        # [num_slots, kv_heads, head_dim]
    value_cache.view(-1, *value_cache.shape[2:])[slots] = value[keep]


def batch_pages(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int):
    """Every page a batch reads, flattened: ``(seq_of_page, block_ids, last_page, tail_len)``.

    ``seq_of_page [num_pages]`` is the sequence each page belongs to and ``block_ids [num_pages]``
    its block in the cache, sequence 0's pages first; ``last_page [num_seqs]`` indexes each
    sequence's last page and ``tail_len [num_seqs]`` counts its tokens there (1 to block_size): the
    only partly filled page of a sequence is its last.
    """
    lens = seq_lens.long()
    pages = (lens + block_size - 1) // block_size                          # [num_seqs]
    seq_of_page = torch.repeat_interleave(torch.arange(len(lens), device=lens.device), pages)  # [num_pages]
    last_page = pages.cumsum(0) - 1                                        # [num_seqs]
    page_in_seq = torch.arange(len(seq_of_page), device=lens.device) - (last_page + 1 - pages)[seq_of_page]
    block_ids = block_tables[seq_of_page, page_in_seq].long()              # [num_pages]
    return seq_of_page, block_ids, last_page, lens - (pages - 1) * block_size


def paged_attention_batched_ref(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                                block_tables: torch.Tensor, seq_lens: torch.Tensor,
                                scale: float | None = None, *, validate: bool = True) -> torch.Tensor:
    """:func:`paged_attention_ref` for the whole batch at once (same arguments, same result).

    Every page the batch reads is gathered once, ``[num_pages, block_size, num_kv_heads, head_dim]``,
    and scored against its sequence's query heads. A sequence's softmax then runs over all its pages
    through their maxima and sums, merged per sequence (``scatter_reduce`` and ``index_add``), as
    split-K merges its splits: no sequence is padded to the longest, and the only loop is over KV
    heads. ``validate=False`` skips the value checks (as the kernels do).
    """
    dims, num_heads = check_decode(query, key_cache, value_cache, block_tables, seq_lens, validate)
    scale = check_scale(scale, dims.head_dim)
    num_seqs, kv_heads, group = query.shape[0], dims.num_kv_heads, num_heads // dims.num_kv_heads
    if num_seqs == 0:
        return torch.empty_like(query)
    seq_of_page, block_ids, last_page, tail_len = batch_pages(block_tables, seq_lens, dims.block_size)
    k = key_cache.index_select(0, block_ids).float()                       # [pages, block, kv_heads, dim]
    v = value_cache.index_select(0, block_ids).float()
    # slots past a sequence's end (only in its last page) may hold anything, NaN included: their
    # scores become -inf below and their values 0 here (0 * NaN would still be NaN)
    tail = torch.arange(dims.block_size, device=query.device)[None, :] >= tail_len[:, None]  # [seqs, block]
    v[last_page] = v[last_page].masked_fill(tail[..., None, None], 0)
    q = (query.float() * scale).view(num_seqs, kv_heads, group, dims.head_dim)[seq_of_page]  # [pages, kv, group, dim]
    # one batched matmul per KV head: its group of query heads against every page's keys
    scores = torch.stack([torch.bmm(q[:, h], k[:, :, h].transpose(1, 2)) for h in range(kv_heads)],
                         dim=1)                                            # [pages, kv_heads, group, block]
    scores[last_page] = scores[last_page].masked_fill(tail[:, None, None, :], float("-inf"))
    page_max = scores.amax(dim=-1)                                         # [pages, kv_heads, group]
    seq_max = page_max.new_full((num_seqs, kv_heads, group), float("-inf")).scatter_reduce_(
        0, seq_of_page[:, None, None].expand_as(page_max), page_max, "amax")   # [seqs, kv_heads, group]
    probs = (scores - seq_max[seq_of_page][..., None]).exp_()              # [pages, kv_heads, group, block]
    total = probs.new_zeros(num_seqs, kv_heads, group).index_add_(0, seq_of_page, probs.sum(-1))
    page_out = torch.stack([torch.bmm(probs[:, h], v[:, :, h]) for h in range(kv_heads)],
                           dim=1)                                          # [pages, kv_heads, group, dim]
    out = page_out.new_zeros(num_seqs, kv_heads, group, dims.head_dim).index_add_(0, seq_of_page, page_out)
    return (out / total[..., None]).view(num_seqs, num_heads, dims.head_dim).to(query.dtype)


def paged_prefill_batched_ref(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                              block_tables: torch.Tensor, seq_lens: torch.Tensor,
                              query_start_loc: torch.Tensor, scale: float | None = None, *,
                              max_query_len: int | None = None, validate: bool = True) -> torch.Tensor:
    """:func:`paged_prefill_ref` for a whole batch, decode rows included (same arguments and result).

    The sequences that bring one token (the decode rows of a mixed batch) go through
    :func:`paged_attention_batched_ref` together; each longer chunk attends over its gathered K/V
    with one causal SDPA in fp32. ``max_query_len`` is accepted for the kernel's signature; this
    function does not need it.
    """
    dims, num_heads = check_prefill(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                                    validate)
    scale = check_scale(scale, dims.head_dim)
    out = torch.empty_like(query)                                          # [num_tokens, num_heads, dim]
    chunk = query_start_loc[1:] - query_start_loc[:-1]                     # [num_seqs]
    single = (chunk == 1).nonzero().flatten()                              # sequences with one new token
    if len(single):
        rows = query_start_loc[single].long()                              # their query rows
        out[rows] = paged_attention_batched_ref(query[rows], key_cache, value_cache, block_tables[single],
                                                seq_lens[single], scale, validate=False)
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    for s in (chunk > 1).nonzero().flatten().tolist():                     # the longer chunks
        first, last = starts[s], starts[s + 1]
        k = gather_kv(key_cache, block_tables[s], lens[s]).float()         # [seq_len, kv_heads, dim]
        v = gather_kv(value_cache, block_tables[s], lens[s]).float()
        q = query[first:last].float()                                      # [chunk, heads, dim]
        cached = lens[s] - (last - first)                                  # tokens before the chunk
        visible = (torch.arange(lens[s], device=q.device)[None, :]
                   <= cached + torch.arange(last - first, device=q.device)[:, None])   # [chunk, seq_len]
        out[first:last] = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=visible, scale=scale,
            enable_gqa=True).transpose(0, 1).to(query.dtype)               # [chunk, heads, dim]
    return out


@dataclass
class PagedInputs:
    """A random paged KV cache and a decode query: the arguments of ``paged_attention``."""

    query: torch.Tensor          # [num_seqs, num_heads, head_dim]
    key_cache: torch.Tensor      # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor    # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor   # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor       # [num_seqs] int32

    def args(self) -> tuple[torch.Tensor, ...]:
        return self.query, self.key_cache, self.value_cache, self.block_tables, self.seq_lens


def random_paged_inputs(seq_lens: list[int], num_heads: int, num_kv_heads: int, head_dim: int,
                        block_size: int, *, dtype: torch.dtype = torch.float32, device=None,
                        num_blocks: int | None = None, shared_blocks: bool = False,
                        max_blocks: int | None = None, seed: int = 0) -> PagedInputs:
    """Random decode inputs with each sequence's pages scattered over the cache.

    Block ids are drawn at random from ``num_blocks`` (default: twice the pages needed); with
    ``shared_blocks=True`` they are drawn with replacement, so sequences may share blocks (as
    prefix sharing does) and one table may name a block twice. Every cache slot that no sequence
    owns holds NaN, so a kernel that reads past a sequence's end gives NaN, not a plausible number.
    ``max_blocks`` pads the block table with extra columns (filled with -1, never read). The tensors
    go to ``device`` (default: the runtime's, where the kernels run).
    """
    gen = torch.Generator().manual_seed(seed)
    pages = [-(-n // block_size) for n in seq_lens]                       # pages per sequence
    num_blocks = num_blocks or max(1, 2 * sum(pages))
    max_blocks = max_blocks or max(pages, default=1)
    block_tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
    if shared_blocks:
        ids = torch.randint(num_blocks, (sum(pages),), generator=gen)
    else:
        ids = torch.randperm(num_blocks, generator=gen)[:sum(pages)]
    owned = torch.zeros(num_blocks, block_size, dtype=torch.bool)        # slots some sequence owns
    first = 0
    for s, (n, p) in enumerate(zip(seq_lens, pages)):
        block_tables[s, :p] = ids[first:first + p].to(torch.int32)
        first += p
        for j in range(p):
            owned[block_tables[s, j], :min(block_size, n - j * block_size)] = True
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.full(shape, float("nan"))
    value_cache = torch.full(shape, float("nan"))
    count = int(owned.sum())
    key_cache[owned] = torch.randn(count, num_kv_heads, head_dim, generator=gen)
    value_cache[owned] = torch.randn(count, num_kv_heads, head_dim, generator=gen)
    query = torch.randn(len(seq_lens), num_heads, head_dim, generator=gen)
    to = dict(device=device or runtime.DEVICE)
    return PagedInputs(query.to(dtype=dtype, **to), key_cache.to(dtype=dtype, **to),
                       value_cache.to(dtype=dtype, **to), block_tables.to(**to),
                       torch.tensor(seq_lens, dtype=torch.int32, device=to["device"]))
