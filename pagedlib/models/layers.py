"""What every paged model shares (chapter 10): the KV cache, the paged attention layer, and the small
protocol the engine relies on.

A model in ``pagedlib`` (GPT-2 in ``gpt2.py``, the Llama family in ``llama.py``) differs from the
others only in what it computes *around* attention: embeddings, norms, positions, the MLP. Where
K/V live and how attention reads them is the same for all, and lives here:

- :class:`~pagedlib.attention.metadata.PagedBatch` (the engine builds it): one forward pass, the new tokens
  of every scheduled sequence flattened, with the slot each token's K/V goes to;
- :class:`KVCache`: per layer, a key and a value cache ``[num_blocks, block_size, num_kv_heads,
  head_dim]`` whose block ids are the block manager's;
- the attention backend (:mod:`pagedlib.attention.backend`): write, decode and prefill through
  ``"triton"`` (the course's kernels) or ``"torch"`` (PyTorch for the whole batch), chosen once per model;
- :class:`PagedAttention`: write the new tokens' K/V, then attend: the backend's ``decode`` when
  every sequence brings one token, its ``prefill`` otherwise (chunks of any length, one-token chunks
  included, so a batch may mix prefill chunks and decode rows). The Triton backend serves both with
  one launch of ``paged_attention_varlen``; the torch backend sends one-token rows to its sparse
  decode and each longer chunk to SDPA;
- :class:`PagedModel`: what :class:`pagedlib.LLM` needs of a model, and :class:`PagedLM`, the base
  class that gives a model all of it but its layers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from torch import nn

from ..attention.backend import DEFAULT_BACKEND, AttentionBackend, make_backends

if TYPE_CHECKING:
    from ..attention.metadata import PagedBatch


@dataclass(frozen=True)
class KVShape:
    """The shape of a model's paged cache: ``num_layers`` caches of ``num_kv_heads x head_dim`` rows."""

    num_layers: int
    num_kv_heads: int
    head_dim: int


class KVCache:
    """The paged K/V storage of a model: for each layer, a key and a value cache of
    ``[num_blocks, block_size, num_kv_heads, head_dim]``. Block ids are the block manager's."""

    def __init__(self, shape: KVShape, num_blocks: int, block_size: int,
                 dtype: torch.dtype, device: torch.device):
        size = (num_blocks, block_size, shape.num_kv_heads, shape.head_dim)
        # [num_blocks, block_size, num_kv_heads, head_dim], one K and one V per layer
        self.layers = [(torch.zeros(size, dtype=dtype, device=device),
                        torch.zeros(size, dtype=dtype, device=device)) for _ in range(shape.num_layers)]
        self.num_blocks, self.block_size = num_blocks, block_size

    def copy_block(self, src: int, dst: int) -> None:
        """Copy one block's K/V in every layer (copy-on-write before a shared block is written)."""
        for key_cache, value_cache in self.layers:
            key_cache[dst] = key_cache[src]
            value_cache[dst] = value_cache[src]

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.layers)


class PagedAttention(nn.Module):
    """Attention of a batch's new tokens over the paged cache: no weights, only the cache traffic.

    Takes ``q [num_tokens, num_heads, head_dim]`` and ``k``, ``v [num_tokens, num_kv_heads,
    head_dim]`` (positions already applied, so K is cached rotated where a model uses RoPE), writes
    K/V to their slots, then attends; returns ``[num_tokens, num_heads, head_dim]``.
    """

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                cache: tuple[torch.Tensor, torch.Tensor], batch: PagedBatch, backend: AttentionBackend) -> torch.Tensor:
        key_cache, value_cache = cache
        backend.write_kv(k, v, key_cache, value_cache, batch)     # the new tokens join the cache
        if batch.is_decode:   # one query per sequence: num_tokens == num_seqs
            return backend.decode(q, key_cache, value_cache, batch)
        # a causal chunk per sequence (one token for a decode row), over its cached prefix and itself
        return backend.prefill(q, key_cache, value_cache, batch)


@runtime_checkable
class PagedModel(Protocol):
    """What :class:`pagedlib.LLM` needs of a model: its context length and vocabulary size (to check
    requests), device and dtype, a paged cache of its shape, and ``model(batch, kv_cache)``
    returning the logits of each sequence's last token, ``[num_seqs, vocab_size]``."""

    context_length: int
    vocab_size: int
    kv_shape: KVShape

    @property
    def device(self) -> torch.device: ...

    def make_kv_cache(self, num_blocks: int, block_size: int) -> KVCache: ...

    def __call__(self, batch: PagedBatch, kv_cache: KVCache) -> torch.Tensor: ...


class PagedLM(nn.Module):
    """Base class of the paged models: the backend (chosen once, validated in the first layer only),
    device, dtype, the cache, the parameter count and the output head. A subclass passes its config,
    context length, vocabulary size and KV shape to ``__init__``, then builds its layers and defines
    ``forward``."""

    def __init__(self, config, backend: str | None, *, context_length: int, vocab_size: int,
                 kv_shape: KVShape):
        super().__init__()
        self.config = config
        self.context_length, self.vocab_size, self.kv_shape = context_length, vocab_size, kv_shape
        self.backend = backend or DEFAULT_BACKEND

    @property
    def backend(self) -> str:
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        self._backends = make_backends(name)        # refuses an unknown name before changing anything
        self._backend = name

    def layer_backends(self, batch: PagedBatch):
        """The backend of each layer in turn: the checked one first, the trusted one after (every
        layer the trusted one for a batch the engine built, ``batch.trusted``)."""
        checked, trusted = self._backends
        yield trusted if batch.trusted else checked
        while True:
            yield trusted

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def make_kv_cache(self, num_blocks: int, block_size: int) -> KVCache:
        """An empty paged cache of ``num_blocks`` blocks of ``block_size`` tokens, on the model's
        device and in its dtype."""
        return KVCache(self.kv_shape, num_blocks, block_size, self.dtype, self.device)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def describe(self) -> str:
        """One line: the model's class, its cache shape, vocabulary, context and size."""
        kv = self.kv_shape
        return (f"{type(self).__name__}, {kv.num_layers} layers, {kv.num_kv_heads} KV heads x {kv.head_dim} "
                f"per layer, vocab {self.vocab_size}, context {self.context_length}, "
                f"{self.num_parameters() / 1e6:.2f} M parameters")

    @staticmethod
    def last_logits(x: torch.Tensor, batch: PagedBatch, norm: nn.Module, head: torch.Tensor) -> torch.Tensor:
        """The fp32 logits of each sequence's last token from the final hidden states ``x
        [num_tokens, hidden]``: only those rows go through the final norm and the head."""
        last = x if batch.is_decode else x[batch.query_start_loc[1:].long() - 1]   # [num_seqs, hidden]
        return (norm(last) @ head.T).float()                     # [num_seqs, vocab_size]
