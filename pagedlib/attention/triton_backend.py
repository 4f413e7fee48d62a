"""Paged attention with Triton (chapters 8 and 9): the public functions that check inputs and launch
kernels, and :class:`TritonBackend`, the engine's backend built on them.

- ``paged_attention``: decode, one new token per sequence; single pass or split-K (flash-decoding).
- ``paged_prefill``: causal attention for a chunk of new tokens per sequence over its cached prefix.
- ``write_kv``: scatter new K/V rows to their cache slots.
- ``paged_attention_varlen``: one launch for a mixed batch of decode rows and prefill chunks (the
  GQA group packed into one tile, split-K for sequences with few new tokens); the engine's kernel.

The kernels live in ``pagedlib.attention.kernels``, one per file. On a CUDA GPU they are compiled; on the CPU
they run through the Triton interpreter (``pagedlib.runtime``), slowly but exactly the same code.
Nothing here falls back to PyTorch: a case the kernels cannot run raises a ``ValueError`` instead.
Every function checks its inputs first (see ``pagedlib.attention.checks``); ``validate=False``
skips only the checks that read tensor values (a device synchronisation on a GPU), for hot loops
whose inputs are already known to be good.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .. import runtime
from .checks import CacheDims, check_decode, check_prefill, check_scale, check_write
from .kernels.decode import decode_kernel
from .kernels.launch import (MAX_SPLITS, MIN_DOT_ROWS, MIN_TILES_PER_SPLIT, LaunchConfig, auto_num_splits,
                             choose_num_splits, decode_meta, device_capability, kv_tile, launch_config, merge_meta,
                             num_sms, prefill_grid, prefill_meta, resident_programs, varlen_grid, varlen_merge_meta,
                             varlen_meta, write_meta)
from .kernels.prefill import prefill_kernel
from .kernels.split_k import merge_kernel, split_kernel
from .kernels.varlen import LOG2E, varlen_kernel, varlen_merge_kernel
from .kernels.write_kv import write_kv_kernel
from ..validation import as_int, cdiv

if TYPE_CHECKING:
    from .metadata import PagedBatch

# Every launch number (tiles, warps, MIN_DOT_ROWS, the split-K rule) is defined in
# pagedlib.attention.kernels.launch; the names below are re-exported for the chapters' imports.
__all__ = ["MIN_DOT_ROWS", "MAX_SPLITS", "MIN_TILES_PER_SPLIT", "LaunchConfig", "auto_num_splits", "decode_num_splits",
           "choose_num_splits", "kv_tile", "launch_config", "longest_chunk", "num_sms", "paged_attention",
           "paged_attention_varlen", "paged_prefill", "varlen_grid", "write_kv"]

def _check_num_splits(num_splits) -> None:
    if num_splits is not None and (as_int(num_splits) is None or num_splits < 1):
        raise ValueError(f"num_splits must be None (choose automatically) or an int >= 1; got {num_splits!r}")


def _cache_strides(key_cache: torch.Tensor, value_cache: torch.Tensor) -> tuple[int, ...]:
    # (block, token, head) strides of K then V; the head_dim stride is 1 (checked)
    return (*key_cache.stride()[:3], *value_cache.stride()[:3])


def _check_compiled_device(device: torch.device) -> None:
    if not runtime.INTERPRET and device.type != "cuda":
        raise ValueError(f"the Triton kernels are compiled for the GPU here, so the tensors must be on "
                         f"cuda; got {device}. Move them with .to(pagedlib.DEVICE).")


def _config(config: LaunchConfig | None, query: torch.Tensor, dims: CacheDims, num_heads: int) -> LaunchConfig:
    """``launch_config`` for these inputs on their device, or the caller's own ``config``, checked."""
    group = num_heads // dims.num_kv_heads
    if config is None:
        return launch_config(dims.head_dim, query.dtype, group, device_capability(query.device))
    if not isinstance(config, LaunchConfig) or (config.head_dim, config.group) != (dims.head_dim, group):
        raise ValueError(f"config must be a LaunchConfig for head_dim {dims.head_dim} and group {group} "
                         f"(from pagedlib.attention.kernels.launch.launch_config), or None to choose one; got {config!r}")
    return config


@runtime.known_failures
def paged_attention(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                    block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float | None = None, *,
                    num_splits: int | None = None, validate: bool = True,
                    config: LaunchConfig | None = None) -> torch.Tensor:
    """Decode attention through a page table with a Triton kernel.

    ``query [num_seqs, num_heads, head_dim]``: one new token per sequence, attending to the first
    ``seq_lens[s]`` tokens of sequence ``s`` (its own K/V already written with ``write_kv``), found
    through ``block_tables [num_seqs, max_blocks]`` (int32) in ``key_cache`` / ``value_cache
    [num_blocks, block_size, num_kv_heads, head_dim]``. ``scale`` defaults to ``head_dim ** -0.5``.
    ``num_splits=1`` runs the single-pass kernel, ``k > 1`` splits each sequence into ``k`` ranges
    (split-K), ``None`` picks from the batch, the table length and the GPU. ``config`` overrides
    the tiles, warps and stages that ``launch_config`` would choose (for tuning experiments).
    Returns ``[num_seqs, num_heads, head_dim]`` in the query's dtype.
    """
    dims, num_heads = check_decode(query, key_cache, value_cache, block_tables, seq_lens, validate)
    scale = check_scale(scale, dims.head_dim)
    _check_num_splits(num_splits)
    _check_compiled_device(query.device)
    cfg = _config(config, query, dims, num_heads)
    num_seqs = query.shape[0]
    out = torch.empty_like(query, memory_format=torch.contiguous_format)   # [num_seqs, num_heads, head_dim]
    if num_seqs == 0:
        return out
    if num_splits is None:                   # the rule of paged_attention_varlen: one new token per sequence
        num_splits = decode_num_splits(query, key_cache, block_tables, config=cfg)
    query = query if query.stride(-1) == 1 else query.contiguous()
    block_tables = block_tables.contiguous()
    # the arguments decode_kernel and split_kernel share, after their outputs
    inputs = (query, key_cache, value_cache, block_tables, seq_lens, scale)
    strides = (query.stride(0), query.stride(1))
    cache_strides = (*_cache_strides(key_cache, value_cache), block_tables.stride(0))
    meta = decode_meta(cfg, dims.block_size)
    if num_splits == 1:
        decode_kernel[(num_seqs, dims.num_kv_heads)](out, *inputs, *strides, out.stride(0), out.stride(1),
                                                     *cache_strides, **meta)
        return out
    partial_out = torch.empty(num_seqs, num_heads, num_splits, cfg.head_dim,
                              dtype=torch.float32, device=query.device)   # [num_seqs, num_heads, splits, dim]
    partial_lse = torch.empty(num_seqs, num_heads, num_splits,
                              dtype=torch.float32, device=query.device)   # [num_seqs, num_heads, splits]
    split_kernel[(num_seqs, dims.num_kv_heads, num_splits)](partial_out, partial_lse, *inputs, num_splits,
                                                            *strides, *cache_strides, **meta)
    merge_kernel[(num_seqs, num_heads)](out, partial_out, partial_lse, num_splits, out.stride(0), out.stride(1),
                                        **merge_meta(cfg, num_splits))
    return out


def decode_num_splits(query: torch.Tensor, key_cache: torch.Tensor, block_tables: torch.Tensor,
                      config: LaunchConfig | None = None) -> int:
    """The split count ``paged_attention(..., num_splits=None)`` picks for these decode arguments
    (``auto_num_splits`` on their shapes, this GPU's SMs and the kernel's occupancy)."""
    num_seqs, num_heads, head_dim = query.shape
    _, block_size, num_kv_heads, _ = key_cache.shape
    cfg = config or launch_config(head_dim, query.dtype, num_heads // num_kv_heads, device_capability(query.device))
    return auto_num_splits(num_seqs, num_seqs, num_kv_heads, cfg, block_tables.shape[1] * block_size,
                           num_sms(query.device), resident_programs(cfg, query.dtype, device_capability(query.device)))


def longest_chunk(query_start_loc: torch.Tensor) -> int:
    """The most new tokens any sequence brings: the longest ``query_start_loc[s + 1] - query_start_loc[s]``.

    Reads the value back to the host, which on a GPU waits for every queued kernel (a synchronisation).
    """
    if query_start_loc.numel() < 2:
        return 0
    return int((query_start_loc[1:] - query_start_loc[:-1]).max())


def _check_max_query_len(max_query_len, query_start_loc: torch.Tensor, num_tokens: int, validate: bool) -> None:
    """None, or an int bound on the longest chunk: checked against shapes always, against values if validate."""
    if max_query_len is None:
        return
    num_seqs = query_start_loc.shape[0] - 1
    if as_int(max_query_len) is None or max_query_len < 0:
        raise ValueError(f"max_query_len must be None (computed from query_start_loc) or an int >= 0; "
                         f"got {max_query_len!r}")
    at_least = cdiv(num_tokens, num_seqs) if num_seqs > 0 else 0    # some chunk holds ceil(tokens / seqs)
    if max_query_len < at_least:
        raise ValueError(f"max_query_len = {max_query_len} is too small: {num_tokens} tokens (query.shape[0]) "
                         f"over {num_seqs} sequences put at least {at_least} in one chunk. Pass the longest "
                         "chunk's length, or None to compute it from query_start_loc.")
    if max_query_len > num_tokens:
        raise ValueError(f"max_query_len = {max_query_len} exceeds num_tokens = {num_tokens} (query.shape[0]): "
                         "no chunk can be longer than all the new tokens together.")
    if validate:
        longest = longest_chunk(query_start_loc)
        if max_query_len < longest:
            raise ValueError(f"max_query_len = {max_query_len} is smaller than the longest chunk in "
                             f"query_start_loc ({longest} new tokens), so its last tokens would get no "
                             "output. Pass the longest chunk's length, or None to compute it.")


@runtime.known_failures
def paged_prefill(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                  block_tables: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                  scale: float | None = None, *, max_query_len: int | None = None,
                  validate: bool = True, config: LaunchConfig | None = None) -> torch.Tensor:
    """Causal attention for a chunk of new tokens per sequence, through a page table, with a Triton kernel.

    Sequence ``s`` owns rows ``query_start_loc[s] : query_start_loc[s + 1]`` (int32, ``[num_seqs +
    1]``) of ``query [num_tokens, num_heads, head_dim]``: its last tokens, whose K/V are already in
    the cache. ``seq_lens[s]`` counts the cached prefix plus the chunk. Each new token attends to
    every token of its sequence up to and including itself. Returns ``[num_tokens, num_heads,
    head_dim]`` in the query's dtype.

    The grid needs the longest chunk. ``max_query_len=None`` reads it from ``query_start_loc`` (one
    GPU synchronisation per call); a caller that knows it (the engine built the batch on the host)
    passes it instead. A larger value (up to ``num_tokens``) only launches programs that exit at
    once; a smaller one would leave tokens without output, so it is refused: always where the shapes
    show it, and against the real longest chunk when ``validate=True``. ``config`` overrides the
    launch configuration, as in ``paged_attention``.
    """
    dims, num_heads = check_prefill(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                                    validate)
    scale = check_scale(scale, dims.head_dim)
    _check_max_query_len(max_query_len, query_start_loc, query.shape[0], validate)
    _check_compiled_device(query.device)
    cfg = _config(config, query, dims, num_heads)
    out = torch.empty_like(query, memory_format=torch.contiguous_format)   # [num_tokens, num_heads, head_dim]
    num_seqs = block_tables.shape[0]
    if num_seqs == 0 or query.shape[0] == 0:
        return out
    if max_query_len is None:
        max_query_len = longest_chunk(query_start_loc)                   # one device sync
    query = query if query.stride(-1) == 1 else query.contiguous()
    block_tables = block_tables.contiguous()
    grid = prefill_grid(max_query_len, num_seqs, dims.num_kv_heads, cfg)
    prefill_kernel[grid](out, query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale,
                         query.stride(0), query.stride(1), out.stride(0), out.stride(1),
                         *_cache_strides(key_cache, value_cache), block_tables.stride(0),
                         **prefill_meta(cfg, dims.block_size))
    return out


@runtime.known_failures
def paged_attention_varlen(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                           scale: float | None = None, *, num_splits: int | None = None,
                           validate: bool = True, config: LaunchConfig | None = None) -> torch.Tensor:
    """Causal paged attention for a mixed batch (decode rows and prefill chunks) in one kernel launch.

    ``query [total_q, num_heads, head_dim]`` (fp16 or fp32; bf16 too on a GPU); sequence ``s``'s new tokens are rows
    ``query_start_loc[s] : query_start_loc[s + 1]`` (int32 ``[num_seqs + 1]``), its last positions:
    ``seq_lens[s]`` (int32) counts its tokens in the cache, these new ones included (their K/V
    written first with ``write_kv``), found through ``block_tables [num_seqs, max_blocks]`` (int32)
    in ``key_cache`` / ``value_cache [num_blocks, block_size, num_kv_heads, head_dim]``. A decode row
    is a sequence with one new token. ``scale`` defaults to ``head_dim ** -0.5``.

    The grid is computed from shapes alone (``varlen_grid``), so nothing is read back to the host
    unless ``validate=True`` checks the values (the engine passes ``validate=False``). Sequences with
    at most ``config.split_q`` new tokens have their keys split into ``num_splits`` ranges merged by
    log-sum-exp; ``None`` chooses from the shapes and the GPU (``auto_num_splits``, the rule of
    ``paged_attention`` too), a fixed count
    makes each sequence's output independent of the batch it runs in. Returns ``[total_q, num_heads,
    head_dim]`` in the query's dtype.
    """
    dims, num_heads = check_prefill(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc,
                                    validate)
    scale = check_scale(scale, dims.head_dim)
    _check_num_splits(num_splits)
    _check_compiled_device(query.device)
    cfg = _config(config, query, dims, num_heads)
    out = torch.empty_like(query, memory_format=torch.contiguous_format)   # [total_q, num_heads, head_dim]
    total_q, num_seqs = query.shape[0], block_tables.shape[0]
    if num_seqs == 0 or total_q == 0:
        return out
    if num_splits is None:
        num_splits = auto_num_splits(total_q, num_seqs, dims.num_kv_heads, cfg,
                                     block_tables.shape[1] * dims.block_size, num_sms(query.device),
                                     resident_programs(cfg, query.dtype, device_capability(query.device)))
    query = query if query.stride(-1) == 1 else query.contiguous()
    block_tables = block_tables.contiguous()
    if num_splits > 1:
        rows = num_seqs * cfg.split_q
        partial_out = torch.empty(rows, num_heads, num_splits, cfg.head_dim,
                                  dtype=torch.float32, device=query.device)
        partial_lse = torch.empty(rows, num_heads, num_splits, dtype=torch.float32, device=query.device)
    else:
        partial_out = partial_lse = out                                  # never written: no sequence splits
    grid = varlen_grid(total_q, num_seqs, dims.num_kv_heads, cfg, num_splits)
    varlen_kernel[grid](out, partial_out, partial_lse, query, key_cache, value_cache, block_tables, seq_lens,
                        query_start_loc, scale * LOG2E, num_seqs, num_splits,
                        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
                        *_cache_strides(key_cache, value_cache), block_tables.stride(0),
                        **varlen_meta(cfg, dims.block_size))
    if num_splits > 1:
        varlen_merge_kernel[(num_seqs, num_heads)](
            out, partial_out, partial_lse, query_start_loc, num_splits, out.stride(0), out.stride(1),
            **varlen_merge_meta(cfg, num_splits))
    return out


@runtime.known_failures
def write_kv(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
             slot_mapping: torch.Tensor, *, validate: bool = True) -> None:
    """Write each token's K/V rows into its cache slot, in place, with a Triton kernel.

    ``key``, ``value [num_tokens, num_kv_heads, head_dim]`` (views with a row stride are fine, e.g.
    slices of a fused QKV projection); ``slot_mapping [num_tokens]`` (int64 or int32) holds each
    token's ``slot = block_id * block_size + offset`` in ``key_cache`` / ``value_cache
    [num_blocks, block_size, num_kv_heads, head_dim]``; a slot of -1 skips its token.
    """
    dims = check_write(key, value, key_cache, value_cache, slot_mapping, validate)
    _check_compiled_device(key.device)
    num_tokens = key.shape[0]
    if num_tokens == 0:
        return
    key = key if key.stride(-1) == 1 else key.contiguous()
    value = value if value.stride(-1) == 1 else value.contiguous()
    slot_mapping = slot_mapping.contiguous()
    write_kv_kernel[(num_tokens,)](key, value, key_cache, value_cache, slot_mapping,
                                   key.stride(0), key.stride(1), value.stride(0), value.stride(1),
                                   *_cache_strides(key_cache, value_cache),
                                   **write_meta(dims.head_dim, dims.num_kv_heads, dims.block_size))


@dataclass(frozen=True)
class TritonBackend:
    """The course's kernels behind the backend interface: ``write_kv``, then one launch of
    ``paged_attention_varlen`` for every step, decode-only or mixed (decode rows and prefill chunks
    together), as production engines serve a step. ``validate=False`` skips the checks that read
    tensor values, so the hot path never waits on the GPU. The chapter 8 and 9 kernels
    (``paged_attention``, ``paged_prefill``) stay the course's steps towards it."""

    validate: bool = True

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 batch: PagedBatch) -> None:
        write_kv(k, v, key_cache, value_cache, batch.slot_mapping, validate=self.validate)

    def attend(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               batch: PagedBatch) -> torch.Tensor:
        """Every step's attention: one varlen launch over the batch's new tokens."""
        return paged_attention_varlen(q, key_cache, value_cache, batch.block_tables, batch.seq_lens,
                                      batch.query_start_loc, validate=self.validate)

    def decode(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               batch: PagedBatch) -> torch.Tensor:
        return self.attend(q, key_cache, value_cache, batch)

    def prefill(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                batch: PagedBatch) -> torch.Tensor:
        return self.attend(q, key_cache, value_cache, batch)
