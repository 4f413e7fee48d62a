"""A second tier for the KV cache (chapter 13): blocks evicted from the GPU pool move to CPU memory.

Without it, a cached block the pool needs back is dropped (its K/V is overwritten) and a later
prompt with that prefix recomputes it. With it, the block manager's eviction hook
(:attr:`~pagedlib.memory.block_manager.BlockManager.on_evict`) hands the block to a
:class:`CpuTier` first, which keeps its name and tokens (and, in a real engine, a copy of its K/V)
in a larger, slower pool, least recently used out first. When a prompt's prefix runs past what
the GPU pool caches, the blocks that follow are looked up in the tier: each one found is copied
back over the link (PCIe, or NVLink-C2C on a Grace Hopper) instead of being prefilled.

When copying wins. Prefilling a token costs about ``2 x parameters`` FLOPs (the linear cost model
of :mod:`pagedlib.sim.timing`); copying it back costs its K/V bytes over the link. Copying is the
cheaper of the two when the link moves more than ``kv_bytes_per_token / recompute_s_per_token``
bytes per second: :func:`break_even_gbs`. A model with a small cache per parameter (GQA) is cheap
to copy and expensive to recompute, so the tier pays on any modern link; the attention's share of
prefill FLOPs (growing with the context) is left out, which only makes recomputing dearer.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable, Sequence

from ..memory.capacity import PEAK_FP16_TFLOPS, model_spec
from ..validation import positive_int

__all__ = ["CpuTier", "LINK_BANDWIDTH_GBS", "recompute_s_per_token", "copy_s_per_token",
           "break_even_gbs"]

# One direction of each link, GB/s (10^9 bytes/s), peak: PCIe 4.0 and 5.0 x16 (16 and 32 GT/s x 16
# lanes, 128b/130b encoding: 31.5 and 63 GB/s, rounded as the PCI-SIG quotes them); NVLink-C2C
# between Grace and Hopper: 900 GB/s both directions together. Sources, versions and dates:
# pagedlib.facts, "pcie_links" and "nvlink_c2c".
LINK_BANDWIDTH_GBS = {"PCIe 4 x16": 32, "PCIe 5 x16": 64, "NVLink-C2C": 450}
GB, TB = 10**9, 10**12


def recompute_s_per_token(model: str = "llama-3-8b", gpu: str = "H100", efficiency: float = 0.5) -> float:
    """Seconds to prefill one token: 2 x parameters FLOPs at ``efficiency`` of the GPU's fp16 peak."""
    spec = model_spec(model)
    if gpu not in PEAK_FP16_TFLOPS:
        raise ValueError(f"gpu must be one of {sorted(PEAK_FP16_TFLOPS)}; got {gpu!r}")
    return 2 * spec.num_params / (PEAK_FP16_TFLOPS[gpu] * TB * efficiency)


def copy_s_per_token(model: str = "llama-3-8b", link: str = "PCIe 5 x16", efficiency: float = 0.5) -> float:
    """Seconds to copy one token's K/V (every layer) over ``link`` at ``efficiency`` of its peak."""
    if link not in LINK_BANDWIDTH_GBS:
        raise ValueError(f"link must be one of {sorted(LINK_BANDWIDTH_GBS)}; got {link!r}")
    return model_spec(model).kv_bytes_per_token / (LINK_BANDWIDTH_GBS[link] * GB * efficiency)


def break_even_gbs(model: str = "llama-3-8b", gpu: str = "H100", efficiency: float = 0.5) -> float:
    """The link speed (GB/s, as reached) above which copying a token's K/V back beats prefilling it."""
    return model_spec(model).kv_bytes_per_token / recompute_s_per_token(model, gpu, efficiency) / GB


class CpuTier:
    """A pool of ``capacity_blocks`` blocks in CPU memory, least recently used out first.

    :meth:`attach` makes a block manager hand it every block it evicts (:meth:`store`);
    :meth:`match` counts how many blocks of a prompt, from a given block on, it holds in a row.
    ``stored``, ``loaded`` and ``dropped`` count blocks moved in, moved back, and pushed out."""

    def __init__(self, capacity_blocks: int):
        self.capacity_blocks = positive_int("capacity_blocks", capacity_blocks, "blocks")
        self._blocks: OrderedDict[Hashable, tuple] = OrderedDict()    # name -> token ids; LRU first
        self.stored = self.loaded = self.dropped = 0

    def attach(self, block_manager) -> "CpuTier":
        if not block_manager.enable_prefix_caching:
            raise ValueError("a CPU tier keeps evicted prefix-cache blocks: build the BlockManager "
                             "with enable_prefix_caching=True")
        block_manager.on_evict = lambda block_id, name, tokens: self.store(name, tokens)
        return self

    def store(self, name: Hashable, tokens: tuple) -> None:
        """Keep an evicted block (the GPU's copy is about to be overwritten)."""
        if name in self._blocks:
            self._blocks.move_to_end(name)
            return
        self._blocks[name] = tokens
        self.stored += 1
        if len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)
            self.dropped += 1

    def match(self, names: Sequence[Hashable], token_ids: Sequence[int], first: int, last: int,
              block_size: int) -> int:
        """How many blocks ``first, first + 1, ...`` (before ``last``) of a prompt the tier holds in
        a row, its tokens checked; each one found is counted as loaded back and made most recent."""
        n = 0
        for i in range(first, min(last, len(names))):
            tokens = self._blocks.get(names[i])
            if tokens is None or tokens != tuple(token_ids[i * block_size:(i + 1) * block_size]):
                break
            self._blocks.move_to_end(names[i])
            n += 1
        self.loaded += n
        return n

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, name: Hashable) -> bool:
        return name in self._blocks

