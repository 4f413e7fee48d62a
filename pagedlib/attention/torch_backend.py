"""The attention backend for a CPU (chapter 10): a whole batch at once in PyTorch, no loop over
decode rows.

- :func:`paged_attention_torch` (decode) treats the block tables as a sparse attention
  pattern over the cache's rows and runs the batch's attention as three sparse whole-batch steps
  (scores at the pattern's entries, a softmax per row, a weighted sum of value rows), reading the
  cache in place;
- :func:`paged_prefill_torch` sends the one-token chunks (decode rows of a mixed batch) there,
  and runs each longer chunk through one causal SDPA: a chunk is already a big matrix product, so
  the loop over those costs little, while padding all chunks to the longest would multiply the work;
- :func:`write_kv_torch` is ``write_kv`` as an index copy.

:class:`TorchBackend` puts the three behind the interface every backend has (``write_kv``,
``decode``, ``prefill`` of a :class:`~pagedlib.attention.metadata.PagedBatch`). Each is checked against the
one-sequence-at-a-time lesson of :mod:`pagedlib.attention.reference`.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch.nn import functional as F

from .checks import CacheDims, check_decode, check_prefill, check_scale, check_write
from .reference import gather_kv

if TYPE_CHECKING:
    from .metadata import PagedBatch


@functools.cache
def _spend_sparse_beta_warning() -> None:
    """torch warns once per process that sparse CSR tensors are "in beta" (the calls used here are
    stable): spend that warning once, silently, before the first pattern is built."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        torch.sparse_csr_tensor(torch.zeros(2, dtype=torch.long), torch.zeros(1, dtype=torch.long),
                                torch.zeros(1), size=(1, 1), check_invariants=False)


# A softmax weight below exp(-80), about 1.8e-35, changes no fp32 sum; clamping the exponent there keeps
# exp off the CPU's slow path for results near underflow (denormals: about 100x slower, measured).
EXP_FLOOR = -80.0


def write_kv_torch(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                   value_cache: torch.Tensor, slot_mapping: torch.Tensor, *, may_skip: bool = True) -> None:
    """``write_kv`` in plain PyTorch: the same contract (key, value ``[num_tokens, num_kv_heads,
    head_dim]``, one slot per token, slot -1 skips), done by ``index_copy_`` into the cache viewed
    as ``[num_blocks * block_size, num_kv_heads, head_dim]``. ``may_skip=False`` promises no slot is
    -1 (the engine's batches), which saves looking for them."""
    slots = slot_mapping.long()
    if may_skip and bool((slots < 0).any()):       # drop the skipped tokens (the engine never sends any)
        keep = slots >= 0
        slots, key, value = slots[keep], key[keep], value[keep]
    key_cache.view(-1, *key_cache.shape[2:]).index_copy_(0, slots, key)       # [num_slots, kv_heads, dim]
    value_cache.view(-1, *value_cache.shape[2:]).index_copy_(0, slots, value)


@dataclass(frozen=True)
class DecodePattern:
    """Which cache rows each query head of a decode batch reads, as a CSR sparse pattern.

    Row ``s * num_heads + h`` (query head ``h`` of sequence ``s``: the order of ``query [num_seqs,
    num_heads, head_dim]`` read row by row) holds ``seq_lens[s]`` entries, ``crow[r] : crow[r + 1]``
    of ``columns``: the rows of the cache (viewed as ``[num_blocks * block_size * num_kv_heads,
    head_dim]``) of that sequence's tokens, for head ``h``'s KV head. A sequence's heads sit side
    by side, so the K/V rows one head of a group reads are still in the CPU's cache when the next
    head of the group reads them (1.6x faster than head-major order at 32 sequences, measured).
    """

    crow: torch.Tensor       # [num_seqs * num_heads + 1] int32
    columns: torch.Tensor    # [num_heads * total_tokens] int32 (cache rows < 2**31)
    row_len: torch.Tensor    # [num_seqs * num_heads] int32
    _sparse: dict = field(default_factory=dict, repr=False, compare=False)

    def sparse(self, num_cache_rows: int) -> torch.Tensor:
        """The pattern as a sparse CSR matrix ``[num_seqs * num_heads, num_cache_rows]`` (its values
        are placeholders: ``sampled_addmm`` with ``beta=0`` reads only where the entries are), built
        once and reused by every layer."""
        if num_cache_rows not in self._sparse:
            _spend_sparse_beta_warning()
            self._sparse[num_cache_rows] = torch.sparse_csr_tensor(
                self.crow, self.columns, torch.zeros(self.columns.shape, device=self.columns.device),
                size=(len(self.row_len), num_cache_rows), check_invariants=False)
        return self._sparse[num_cache_rows]


def decode_pattern(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int, num_heads: int,
                   num_kv_heads: int) -> DecodePattern:
    """The :class:`DecodePattern` of a batch (the same in every layer, so a model builds it once).

    Token ``t`` of sequence ``s`` sits in slot ``block_tables[s, t // block_size] * block_size + t %
    block_size``, and that slot's K/V for KV head ``j`` is cache row ``slot * num_kv_heads + j``.
    Two ways to list those rows in pattern order, the same result: lay the batch out as ``[num_seqs,
    num_heads, longest]`` and keep the tokens each sequence owns (fast when the sequences are of
    similar length), or number every entry directly (when padding to the longest would more than
    double the work, as with one long sequence among many short ones).
    """
    lens = seq_lens.int()
    row_len = lens.repeat_interleave(num_heads)                            # [num_seqs * num_heads]
    crow = torch.cat([row_len.new_zeros(1), row_len.cumsum(0, dtype=torch.int32)])
    longest, total = (int(lens.max()), int(lens.sum())) if len(lens) else (0, 0)
    if len(lens) * longest <= 2 * total:
        columns = _rows_padded(block_tables, lens, longest, block_size, num_heads, num_kv_heads)
    else:
        columns = _rows_direct(block_tables, crow, block_size, num_heads, num_kv_heads)
    return DecodePattern(crow, columns, row_len)


def _rows_padded(block_tables, lens, longest: int, block_size: int, num_heads: int,
                 num_kv_heads: int) -> torch.Tensor:
    """The pattern's columns through a ``[num_seqs, num_heads, longest]`` layout, padding dropped."""
    token = torch.arange(longest, dtype=torch.int32, device=lens.device)  # [longest]
    page = block_tables[:, token // block_size].int()                     # [num_seqs, longest]
    slots = page * block_size + token % block_size                         # [num_seqs, longest]
    kv_head = torch.arange(num_heads, dtype=torch.int32, device=lens.device) // (num_heads // num_kv_heads)
    rows = slots[:, None, :] * num_kv_heads + kv_head[None, :, None]      # [num_seqs, num_heads, longest]
    owned = (token[None, :] < lens[:, None])[:, None, :].expand_as(rows)  # False past each one's end
    return rows.masked_select(owned)


def _rows_direct(block_tables, crow, block_size: int, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """The pattern's columns entry by entry: entry ``e`` of row ``r = s * num_heads + h`` is token
    ``e - crow[r]`` of sequence ``s``, for head ``h``'s KV head (memory in proportion to the entries)."""
    num_rows, entries = len(crow) - 1, int(crow[-1])
    row = torch.repeat_interleave(torch.arange(num_rows, dtype=torch.int32, device=crow.device), crow.diff(),
                                  output_size=entries)                     # [entries] each entry's row
    seq, head = row // num_heads, row % num_heads
    token = torch.arange(entries, dtype=torch.int32, device=crow.device) - crow[row]   # its token index
    slots = block_tables[seq, token // block_size].int() * block_size + token % block_size
    return slots * num_kv_heads + head // (num_heads // num_kv_heads)


def paged_attention_torch(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                          block_tables: torch.Tensor, seq_lens: torch.Tensor,
                          scale: float | None = None, *, validate: bool = True,
                          pattern: DecodePattern | None = None) -> torch.Tensor:
    """:func:`paged_attention_ref` for the whole batch at once (same arguments, same result).

    Decode attention through block tables *is* sparse attention: view the cache as one matrix of
    rows (``[num_blocks * block_size * num_kv_heads, head_dim]``); query head ``h`` of sequence ``s``
    may look only at the rows its block table names, one per token, for its KV head. That pattern
    is a sparse matrix ``[num_seqs * num_heads, cache rows]`` in CSR form, built without a loop;
    then three whole-batch steps: the scores at exactly those entries (``sampled_addmm``, reading
    the cache in place, no gather), a softmax within each row (exponents floored at
    :data:`EXP_FLOOR`), and the probability-weighted sum of the value rows (``embedding_bag``: a
    weighted bag of rows). No sequence is padded, no slot outside a sequence is ever read (NaN
    there cannot leak). Computed in fp32; from a half-precision cache, only the rows the batch
    reads are converted. ``pattern`` is :func:`decode_pattern` of these block tables, if the caller
    kept it from an earlier layer. ``validate=False`` skips the value checks (as the kernels do);
    with a ``pattern`` too, it skips every check (the layer that built the pattern checked the same
    batch).
    """
    if validate or pattern is None:
        dims, num_heads = check_decode(query, key_cache, value_cache, block_tables, seq_lens, validate)
    else:
        dims, num_heads = CacheDims(*key_cache.shape), query.shape[1]
    scale = check_scale(scale, dims.head_dim)
    num_seqs = query.shape[0]
    if num_seqs == 0:
        return torch.empty_like(query)
    if pattern is None:
        pattern = decode_pattern(block_tables, seq_lens, dims.block_size, num_heads, dims.num_kv_heads)
    crow, columns, row_len = pattern.crow, pattern.columns, pattern.row_len
    cache_rows = dims.num_blocks * dims.block_size * dims.num_kv_heads
    if cache_rows >= 2**31:
        raise ValueError(f"the cache holds {cache_rows:,} rows of "
                         "head_dim; this backend numbers them with int32 (at most 2**31 - 1): use fewer "
                         "blocks or the triton backend")
    k_rows = key_cache.reshape(-1, dims.head_dim)                          # [cache rows, head_dim]
    v_rows = value_cache.reshape(-1, dims.head_dim)
    if k_rows.dtype != torch.float32:   # half precision: convert the rows this batch reads, not the cache
        k_rows, v_rows = k_rows[columns].float(), v_rows[columns].float()  # [entries, head_dim]
        columns = torch.arange(len(columns), dtype=columns.dtype, device=columns.device)
        pattern = DecodePattern(crow, columns, row_len)                    # over the converted rows
    q = query.float().reshape(-1, dims.head_dim)                          # [num_seqs * num_heads, dim]
    sparse = pattern.sparse(k_rows.shape[0])                               # built once, kept by every layer
    scores = torch.sparse.sampled_addmm(sparse, q, k_rows.T, beta=0.0, alpha=scale).values()    # [entries]
    row_max = torch.segment_reduce(scores, "max", lengths=row_len)         # [rows]
    shifted = scores - row_max.repeat_interleave(row_len, output_size=len(scores))   # <= 0
    probs = shifted.clamp_(min=EXP_FLOOR).exp_()
    total = torch.segment_reduce(probs, "sum", lengths=row_len)            # [rows]
    out = F.embedding_bag(columns, v_rows, crow[:-1], mode="sum", per_sample_weights=probs)  # [rows, dim]
    out = out / total[:, None]
    return out.view(num_seqs, num_heads, dims.head_dim).to(query.dtype)


def paged_prefill_torch(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                        block_tables: torch.Tensor, seq_lens: torch.Tensor,
                        query_start_loc: torch.Tensor, scale: float | None = None, *,
                        max_query_len: int | None = None, validate: bool = True,
                        derived: dict | None = None) -> torch.Tensor:
    """:func:`paged_prefill_ref` for a whole batch, decode rows included (same arguments and result).

    The sequences that bring one token (the decode rows of a mixed batch) go through
    :func:`paged_attention_torch` together; each longer chunk attends over its gathered K/V
    with one causal SDPA in fp32. ``max_query_len`` is accepted for the kernel's signature; this
    function does not need it. ``derived``, a dict kept with the batch, holds what the first layer
    works out about the one-token rows (which they are, their decode pattern) for the others.
    """
    dims, num_heads = check_prefill(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                                    validate)
    scale = check_scale(scale, dims.head_dim)
    out = torch.empty_like(query)                                          # [num_tokens, num_heads, dim]
    derived = {} if derived is None else derived
    if "single" not in derived:
        chunk = query_start_loc[1:] - query_start_loc[:-1]                 # [num_seqs]
        single = (chunk == 1).nonzero().flatten()                          # sequences with one new token
        derived["single"] = (single, query_start_loc[single].long(), block_tables[single], seq_lens[single],
                           (chunk > 1).nonzero().flatten().tolist())
    single, rows, single_tables, single_lens, longer = derived["single"]
    if len(single):                                                        # rows: their query rows
        if "single_pattern" not in derived:
            derived["single_pattern"] = decode_pattern(single_tables, single_lens, dims.block_size, num_heads,
                                                     dims.num_kv_heads)
        out[rows] = paged_attention_torch(query[rows], key_cache, value_cache, single_tables,
                                          single_lens, scale, validate=False,
                                          pattern=derived["single_pattern"])
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    for s in longer:                                                       # the longer chunks
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


@dataclass(frozen=True)
class TorchBackend:
    """Attention in PyTorch for a whole batch: the default on a CPU. ``validate`` checks tensor values
    (the first layer does; the others see the same batch and skip it)."""

    validate: bool = True

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 batch: PagedBatch) -> None:
        if not batch.trusted:       # a batch made by hand: its slots are checked first (in the first layer)
            check_write(k, v, key_cache, value_cache, batch.slot_mapping, self.validate)
        # the engine's batch names a real slot for every token: no -1 to look for
        write_kv_torch(k, v, key_cache, value_cache, batch.slot_mapping, may_skip=not batch.trusted)

    def decode(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               batch: PagedBatch) -> torch.Tensor:
        if "decode_pattern" not in batch.derived:     # the same for every layer: build it once per batch
            batch.derived["decode_pattern"] = decode_pattern(batch.block_tables, batch.seq_lens,
                                                           key_cache.shape[1], q.shape[1], key_cache.shape[2])
        return paged_attention_torch(q, key_cache, value_cache, batch.block_tables, batch.seq_lens,
                                     validate=self.validate, pattern=batch.derived["decode_pattern"])

    def prefill(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                batch: PagedBatch) -> torch.Tensor:
        return paged_prefill_torch(q, key_cache, value_cache, batch.block_tables, batch.seq_lens,
                                   batch.query_start_loc, max_query_len=batch.max_query_len,
                                   validate=self.validate, derived=batch.derived)
