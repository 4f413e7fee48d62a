"""Input checks shared by the paged-attention reference and the Triton kernels.

A learner's mistake (an int64 block table, a query with the wrong number of heads, a sequence
longer than its block table) must become a ``ValueError`` that names the argument, the expected
shape or dtype and what was given, never a Triton crash or a silently wrong answer.

Two kinds of checks:

- *shape checks* look only at shapes, dtypes and devices: free, always done;
- *value checks* look inside the integer tensors (every ``seq_len`` >= 1 and within its block
  table, every block id inside the cache, every slot in range). On a GPU they cost a few tiny
  kernels and one synchronisation, so hot loops may skip them with ``validate=False``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import runtime
from ..validation import cdiv

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
CACHE_LAYOUT = "[num_blocks, block_size, num_kv_heads, head_dim]"


@dataclass(frozen=True)
class CacheDims:
    """The sizes of one layer's paged KV cache ``[num_blocks, block_size, num_kv_heads, head_dim]``."""

    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _tensor(name: str, t) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    return t


def check_devices(**tensors: torch.Tensor) -> None:
    """All tensors on one device."""
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"all tensors must be on the same device; got {listed}. "
                         f"Move them with .to(pagedlib.DEVICE) ({runtime.DEVICE} here).")


def check_cache(key_cache, value_cache) -> CacheDims:
    """key_cache and value_cache: one float dtype and shape [num_blocks, block_size, num_kv_heads, head_dim]."""
    _tensor("key_cache", key_cache)
    _tensor("value_cache", value_cache)
    if key_cache.ndim != 4:
        raise ValueError(f"key_cache must have shape {CACHE_LAYOUT}; got {key_cache.ndim}-D {_shape(key_cache)}")
    if value_cache.shape != key_cache.shape:
        raise ValueError(f"value_cache must have the shape of key_cache, {_shape(key_cache)} "
                         f"{CACHE_LAYOUT}; got {_shape(value_cache)}")
    if key_cache.dtype not in FLOAT_DTYPES:
        raise ValueError(f"key_cache must be float16, bfloat16 or float32; got {_dtype(key_cache.dtype)}")
    if value_cache.dtype != key_cache.dtype:
        raise ValueError(f"value_cache must have the dtype of key_cache ({_dtype(key_cache.dtype)}); "
                         f"got {_dtype(value_cache.dtype)}")
    if min(key_cache.shape) < 1:
        raise ValueError(f"key_cache must have no empty dimension {CACHE_LAYOUT}; got {_shape(key_cache)}")
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension (head_dim); "
                             "allocate it with torch.zeros(...) rather than as a transposed view")
    dims = CacheDims(*key_cache.shape)
    if dims.head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head_dim (the last dimension of key_cache) must be at most {MAX_HEAD_DIM}; "
                         f"got {dims.head_dim}")
    runtime.check_dtype(key_cache.dtype)
    return dims


def check_query(query, key_cache: torch.Tensor, dims: CacheDims, rows: str) -> int:
    """query [rows, num_heads, head_dim], the cache's dtype and head_dim; returns num_heads."""
    _tensor("query", query)
    layout = f"[{rows}, num_heads, head_dim]"
    if query.ndim != 3:
        raise ValueError(f"query must have shape {layout}; got {query.ndim}-D {_shape(query)}")
    if query.dtype != key_cache.dtype:
        raise ValueError(f"query must have the dtype of key_cache ({_dtype(key_cache.dtype)}); got "
                         f"{_dtype(query.dtype)}. Convert one of them, e.g. query.to({key_cache.dtype})")
    num_heads, head_dim = query.shape[1], query.shape[2]
    if head_dim != dims.head_dim:
        raise ValueError(f"query's head_dim (last dimension, {head_dim}) must equal the cache's head_dim "
                         f"({dims.head_dim}); query is {_shape(query)}, key_cache is {_shape(key_cache)}")
    if num_heads < 1 or num_heads % dims.num_kv_heads != 0:
        raise ValueError(f"query's num_heads ({num_heads}) must be a positive multiple of the cache's "
                         f"num_kv_heads ({dims.num_kv_heads}): each KV head serves "
                         "num_heads // num_kv_heads query heads (GQA)")
    return num_heads


def check_int_vector(name: str, t, length: int, what: str, dtypes=(torch.int32,)) -> None:
    """A 1-D integer tensor of the given length."""
    _tensor(name, t)
    want = " or ".join(_dtype(d) for d in dtypes)
    if t.ndim == 1 and t.shape[0] != length and t.dtype in dtypes:
        raise ValueError(f"{name} must have shape [{what}] = [{length}]; got {_shape(t)}")
    if t.dtype not in dtypes or t.ndim != 1 or t.shape[0] != length:
        raise ValueError(f"{name} must be {want} of shape [{what}] = [{length}]; got {_dtype(t.dtype)} "
                         f"{_shape(t)}" + (f". Convert it with .to({dtypes[0]})"
                                           if t.dtype != dtypes[0] and not t.is_floating_point() else ""))


def check_block_tables(block_tables, seq_lens, num_seqs: int, source: str = "query.shape[0]") -> None:
    """block_tables int32 [num_seqs, max_blocks], seq_lens int32 [num_seqs]; ``source`` says where num_seqs came from."""
    _tensor("block_tables", block_tables)
    if block_tables.dtype != torch.int32 or block_tables.ndim != 2 or block_tables.shape[0] != num_seqs:
        fix = ". Convert it with .to(torch.int32)" if block_tables.dtype == torch.int64 else ""
        raise ValueError(f"block_tables must be int32 of shape [num_seqs, max_blocks] with num_seqs = "
                         f"{num_seqs} ({source}); got {_dtype(block_tables.dtype)} {_shape(block_tables)}{fix}")
    check_int_vector("seq_lens", seq_lens, num_seqs, "num_seqs")


def check_page_values(block_tables: torch.Tensor, seq_lens: torch.Tensor, dims: CacheDims) -> None:
    """Every seq_len >= 1 and within its block table; every block id a sequence uses inside the cache."""
    if seq_lens.numel() == 0:
        return
    capacity = block_tables.shape[1] * dims.block_size
    lens = seq_lens.long()
    short, long_ = lens.min().item(), lens.max().item()
    if short < 1:
        seq = int((lens < 1).nonzero()[0])
        raise ValueError(f"seq_lens must all be >= 1 (a sequence has at least one token); "
                         f"seq_lens[{seq}] = {int(lens[seq])}")
    if long_ > capacity:
        seq = int((lens > capacity).nonzero()[0])
        raise ValueError(f"seq_lens[{seq}] = {int(lens[seq])} is longer than its block table holds: "
                         f"block_tables has {block_tables.shape[1]} columns x block_size "
                         f"{dims.block_size} = {capacity} slots. Give the table more columns.")
    pages_used = cdiv(lens, dims.block_size)                              # [num_seqs]
    cols = torch.arange(block_tables.shape[1], device=block_tables.device)
    used = cols[None, :] < pages_used[:, None]                            # [num_seqs, max_blocks]
    bad = used & ((block_tables < 0) | (block_tables >= dims.num_blocks))
    if bad.any():
        seq, col = (int(i) for i in bad.nonzero()[0])
        raise ValueError(f"block_tables[{seq}, {col}] = {int(block_tables[seq, col])} is not a block of "
                         f"the cache: block ids must be in [0, num_blocks = {dims.num_blocks})")


def check_query_start_loc(query_start_loc, seq_lens: torch.Tensor, num_tokens: int) -> None:
    """query_start_loc: starts at 0, never decreases, ends at num_tokens; no chunk longer than its sequence."""
    starts = query_start_loc.long()
    if int(starts[0]) != 0 or int(starts[-1]) != num_tokens:
        raise ValueError(f"query_start_loc must start at 0 and end at num_tokens = {num_tokens} "
                         f"(query.shape[0]); got first {int(starts[0])}, last {int(starts[-1])}")
    chunk = starts[1:] - starts[:-1]                                      # [num_seqs]
    if (chunk < 0).any():
        seq = int((chunk < 0).nonzero()[0])
        raise ValueError(f"query_start_loc must never decrease; query_start_loc[{seq + 1}] = "
                         f"{int(starts[seq + 1])} < query_start_loc[{seq}] = {int(starts[seq])}")
    too_long = chunk > seq_lens.long()
    if too_long.any():
        seq = int(too_long.nonzero()[0])
        raise ValueError(f"sequence {seq} has {int(chunk[seq])} query tokens but seq_lens[{seq}] = "
                         f"{int(seq_lens[seq])}: seq_lens counts the cached prefix plus the new chunk, "
                         "so it must be at least the chunk's length")


def check_scale(scale, head_dim: int) -> float:
    """None -> head_dim ** -0.5; otherwise a finite number."""
    if scale is None:
        return head_dim ** -0.5
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise ValueError(f"scale must be a number or None (for head_dim ** -0.5); got {scale!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"scale must be finite; got {value}")
    return value


def check_decode(query, key_cache, value_cache, block_tables, seq_lens, validate: bool = True) -> tuple[CacheDims, int]:
    """All checks of a decode call; returns the cache sizes and num_heads."""
    dims = check_cache(key_cache, value_cache)
    num_heads = check_query(query, key_cache, dims, "num_seqs")
    check_block_tables(block_tables, seq_lens, query.shape[0])
    check_devices(query=query, key_cache=key_cache, value_cache=value_cache,
                  block_tables=block_tables, seq_lens=seq_lens)
    if validate:
        check_page_values(block_tables, seq_lens, dims)
    return dims, num_heads


def check_prefill(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                  validate: bool = True) -> tuple[CacheDims, int]:
    """All checks of a prefill call; returns the cache sizes and num_heads."""
    dims = check_cache(key_cache, value_cache)
    num_heads = check_query(query, key_cache, dims, "num_tokens")
    _tensor("block_tables", block_tables)
    num_seqs = block_tables.shape[0] if block_tables.ndim == 2 else -1
    check_block_tables(block_tables, seq_lens, num_seqs, "block_tables.shape[0]")
    check_int_vector("query_start_loc", query_start_loc, num_seqs + 1, "num_seqs + 1")
    check_devices(query=query, key_cache=key_cache, value_cache=value_cache, block_tables=block_tables,
                  seq_lens=seq_lens, query_start_loc=query_start_loc)
    if validate:
        check_page_values(block_tables, seq_lens, dims)
        check_query_start_loc(query_start_loc, seq_lens, query.shape[0])
    return dims, num_heads


def check_write(key, value, key_cache, value_cache, slot_mapping, validate: bool = True) -> CacheDims:
    """All checks of a write_kv call; returns the cache sizes."""
    dims = check_cache(key_cache, value_cache)
    layout = "[num_tokens, num_kv_heads, head_dim]"
    for name, t in (("key", key), ("value", value)):
        _tensor(name, t)
        want = [t.shape[0] if t.ndim == 3 else "num_tokens", dims.num_kv_heads, dims.head_dim]
        if t.ndim != 3 or list(t.shape[1:]) != want[1:]:
            raise ValueError(f"{name} must have shape {layout} = [num_tokens, {dims.num_kv_heads}, "
                             f"{dims.head_dim}] to match the cache {_shape(key_cache)}; got {_shape(t)}")
        if t.dtype != key_cache.dtype:
            raise ValueError(f"{name} must have the dtype of key_cache ({_dtype(key_cache.dtype)}); "
                             f"got {_dtype(t.dtype)}")
    if value.shape != key.shape:
        raise ValueError(f"value must have the shape of key {_shape(key)}; got {_shape(value)}")
    check_int_vector("slot_mapping", slot_mapping, key.shape[0], "num_tokens", (torch.int64, torch.int32))
    check_devices(key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                  slot_mapping=slot_mapping)
    if validate and slot_mapping.numel():
        num_slots = dims.num_blocks * dims.block_size
        slots = slot_mapping.long()
        bad = (slots < -1) | (slots >= num_slots)
        if bad.any():
            tok = int(bad.nonzero()[0])
            raise ValueError(f"slot_mapping[{tok}] = {int(slots[tok])} is not a slot of the cache: slots "
                             f"must be -1 (skip) or in [0, num_blocks * block_size = {num_slots})")
        kept = slots[slots >= 0]
        if kept.numel() != torch.unique(kept).numel():
            values, counts = torch.unique(kept, return_counts=True)
            raise ValueError(f"slot_mapping writes slot {int(values[counts > 1][0])} more than once: "
                             "two tokens cannot share a cache slot")
    return dims
