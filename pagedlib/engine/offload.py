"""A CPU tier for a real engine (chapter 13): evicted blocks' K/V copied to host memory, and back.

:class:`HostTier` attaches to a :class:`pagedlib.LLM` with prefix caching through the block
manager's eviction hook (``BlockManager.on_evict``): just before a cached block is reused, its K/V
(every layer) is copied into host memory under the block's hash-chain name. :meth:`HostTier.load`
is called before a request is added: the prompt's full blocks past what the GPU still caches are
looked up in the tier, and the ones found (in a row) are written back into blocks of the engine,
left in its prefix cache (:func:`pagedlib.engine.disagg.write_cached_blocks`), so the request hits
them instead of recomputing them. ``bytes_in`` and ``bytes_out`` count the copies.

The simulator's version of the same tier, at scale and on a modelled clock, is
:class:`pagedlib.sim.tiers.CpuTier`.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Sequence

import torch

from ..validation import positive_int
from .disagg import write_cached_blocks

__all__ = ["HostTier"]


class HostTier:
    """Up to ``capacity_blocks`` evicted blocks of ``llm``'s cache, in CPU memory, LRU out first."""

    def __init__(self, llm, capacity_blocks: int):
        if not llm.block_manager.enable_prefix_caching:
            raise ValueError("a host tier keeps evicted prefix-cache blocks: build the LLM with "
                             "enable_prefix_caching=True")
        self.llm, self.capacity_blocks = llm, positive_int("capacity_blocks", capacity_blocks, "blocks")
        # name -> (token ids, [(K, V) per layer], each [block_size, num_kv_heads, head_dim] on the CPU)
        self._blocks: OrderedDict[Hashable, tuple[tuple, list[tuple[torch.Tensor, torch.Tensor]]]] = OrderedDict()
        self.bytes_out = self.bytes_in = 0
        llm.block_manager.on_evict = self._store

    def _store(self, block_id: int, name: Hashable, tokens: tuple) -> None:
        kv = [(k[block_id].to("cpu", copy=True), v[block_id].to("cpu", copy=True))
              for k, v in self.llm.kv_cache.layers]
        self._blocks[name] = (tokens, kv)
        self._blocks.move_to_end(name)
        self.bytes_out += sum(k.nbytes + v.nbytes for k, v in kv)
        if len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def load(self, prompt: Sequence[int]) -> int:
        """Copy back the prompt's blocks the tier holds past the GPU's hit; return the tokens loaded."""
        bm = self.llm.block_manager
        bs = bm.block_size
        names = bm.block_names(prompt)[:(len(prompt) - 1) // bs]   # the last token is always computed
        first = bm.num_cached_tokens(prompt) // bs
        found = []
        for i in range(first, len(names)):
            entry = self._blocks.get(names[i])
            if entry is None or entry[0] != tuple(prompt[i * bs:(i + 1) * bs]):
                break
            self._blocks.move_to_end(names[i])
            found.append(entry[1])
        if not found:
            return 0
        layers = len(found[0])
        keys = [torch.stack([blk[layer][0] for blk in found]) for layer in range(layers)]
        values = [torch.stack([blk[layer][1] for blk in found]) for layer in range(layers)]
        write_cached_blocks(self.llm, prompt[:(first + len(found)) * bs], keys, values, first)
        self.bytes_in += sum(k.nbytes + v.nbytes for k, v in zip(keys, values))
        return len(found) * bs

    def __len__(self) -> int:
        return len(self._blocks)
