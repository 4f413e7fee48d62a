"""Where a model's attention runs: one interface, two backends (chapter 10).

Every backend writes a batch's new K/V to their slots and attends over the paged cache:
``write_kv(k, v, key_cache, value_cache, batch)``, ``decode(q, key_cache, value_cache, batch)`` (one
new token per sequence) and ``prefill(q, key_cache, value_cache, batch)`` (a causal chunk per sequence,
decode rows included). :class:`~pagedlib.attention.triton_backend.TritonBackend` runs the course's
kernels (compiled on a GPU, interpreted on a CPU); :class:`~pagedlib.attention.torch_backend.TorchBackend`
runs the whole batch in PyTorch, the default on a CPU.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from .. import runtime

if TYPE_CHECKING:
    from .metadata import PagedBatch

BACKENDS = ("triton", "torch")
# Compiled kernels on a GPU; on a CPU the interpreter is correct but slow, so PyTorch is the default
# there (pass backend="triton" to run the kernels through the interpreter anyway).
DEFAULT_BACKEND = "triton" if runtime.DEVICE.type == "cuda" else "torch"


class AttentionBackend(Protocol):
    """What a paged attention layer asks of a backend. ``validate`` checks tensor values (the first
    layer does; the others see the same batch and skip it)."""

    validate: bool

    def write_kv(self, k: torch.Tensor, v: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                 batch: PagedBatch) -> None: ...

    def decode(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               batch: PagedBatch) -> torch.Tensor: ...

    def prefill(self, q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
                batch: PagedBatch) -> torch.Tensor: ...


def make_backends(name: str) -> tuple[AttentionBackend, AttentionBackend]:
    """(checked, trusted) backends of ``name`` (one of :data:`BACKENDS`)."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {name!r}.")
    if name == "triton":
        from .triton_backend import TritonBackend as cls
    else:
        from .torch_backend import TorchBackend as cls
    return cls(validate=True), cls(validate=False)
