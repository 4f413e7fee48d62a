"""Input checks shared by the paged-attention reference and kernels.

A learner's mistake (an int64 block table, a query with the wrong number of heads, a sequence
longer than its block table) must become a ``ValueError`` that names the argument, the expected
shape or dtype and what was given, never a Triton crash or a silently wrong answer.

Two kinds of checks:

- *shape checks* look only at shapes, dtypes and devices: free, always done;
- *value checks* look inside the integer tensors (every ``seq_len`` >= 1 and within its block
  table, every block id in the cache, every slot in range). On a GPU they cost a few tiny kernels
  and one synchronisation, so the fast paths may skip them with ``validate=False``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import runtime

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class CacheDims:
    """The sizes of one layer's paged KV cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``."""

    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _describe(t: torch.Tensor) -> str:
    return f"{_dtype(t.dtype)} {_shape(t)}"


def require_tensor(name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    """All tensors on one device, and (when kernels are compiled) that device is a GPU."""
    devices = {name: t.device for name, t in tensors.items()}
    first = next(iter(devices.values()))
    if any(d != first for d in devices.values()):
        listed = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"all tensors must be on the same device; got {listed}. "
                         f"Move them with .to(pagedlib.DEVICE) (here {runtime.DEVICE}).")
    return first


def check_cache(key_cache, value_cache) -> CacheDims:
    """key_cache and value_cache: the same float dtype and shape [num_blocks, block_size, num_kv_heads, head_dim]."""
    require_tensor("key_cache", key_cache)
    require_tensor("value_cache", value_cache)
    layout = "[num_blocks, block_size, num_kv_heads, head_dim]"
    if key_cache.ndim != 4:
        raise ValueError(f"key_cache must have shape {layout}; got {key_cache.ndim}-D {_shape(key_cache)}")
    if value_cache.shape != key_cache.shape:
        raise ValueError(f"value_cache must have the shape of key_cache {_shape(key_cache)} {layout}; "
                         f"got {_shape(value_cache)}")
    if key_cache.dtype not in FLOAT_DTYPES:
        raise ValueError(f"key_cache must be float16, bfloat16 or float32; got {_dtype(key_cache.dtype)}")
    if value_cache.dtype != key_cache.dtype:
        raise ValueError(f"value_cache must have the dtype of key_cache ({_dtype(key_cache.dtype)}); "
                         f"got {_dtype(value_cache.dtype)}")
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension (head_dim); "
                             "make it with torch.empty(...) or .contiguous() once, before filling it")
    dims = CacheDims(*key_cache.shape)
    if min(key_cache.shape) < 1:
        raise ValueError(f"key_cache must have no empty dimension; got {_shape(key_cache)} {layout}")
    if dims.head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head_dim (the last dimension of key_cache) must be at most {MAX_HEAD_DIM}; "
                         f"got {dims.head_dim}")
    runtime.check_dtype(key_cache.dtype)
    return dims


def check_query(query, dims: CacheDims, rows: str) -> int:
    """query [rows, num_heads, head_dim] with the cache's dtype and head_dim; returns num_heads."""
    require_tensor("query", query)
    layout = f"[{rows}, num_heads, head_dim]"
    if query.ndim != 3:
        raise ValueError(f"query must have shape {layout}; got {query.ndim}-D {_shape(query)}")
    if query.dtype not in FLOAT_DTYPES:
        raise ValueError(f"query must be a float tensor; got {_dtype(query.dtype)}")
    if query.dtype != CacheDtype.of(dims):
        pass  # dtype is compared with the cache by the caller (it has the cache tensor)
    num_heads, head_dim = query.shape[1], query.shape[2]
    if head_dim != dims.head_dim:
        raise ValueError(f"query's head_dim ({head_dim}, its last dimension) must equal the cache's "
                         f"head_dim ({dims.head_dim}); query is {_shape(query)}")
    if num_heads < 1 or num_heads % dims.num_kv_heads != 0:
        raise ValueError(f"query's num_heads ({num_heads}) must be a positive multiple of the cache's "
                         f"num_kv_heads ({dims.num_kv_heads}): each KV head serves num_heads // "
                         "num_kv_heads query heads (GQA)")
    return num_heads


class CacheDtype:  # placeholder namespace, see check_query
    @staticmethod
    def of(dims):
        return None
