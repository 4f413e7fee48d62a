"""Random paged inputs for tests, benchmarks and exercises: a cache whose unowned slots hold NaN."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import runtime
from ..validation import cdiv


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


def nan_caches(block_tables: torch.Tensor, seq_lens: list[int], num_blocks: int, block_size: int,
               num_kv_heads: int, head_dim: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A key and a value cache ``[num_blocks, block_size, num_kv_heads, head_dim]`` (CPU, fp32) whose
    slots hold random values where a sequence owns them (its first ``seq_lens[s]`` tokens through its
    ``block_tables`` row) and NaN everywhere else, so that a kernel reading past a sequence's end
    gives NaN, not a plausible number."""
    owned = torch.zeros(num_blocks, block_size, dtype=torch.bool)        # slots some sequence owns
    for s, n in enumerate(seq_lens):
        for j in range(cdiv(n, block_size)):
            owned[block_tables[s, j], :min(block_size, n - j * block_size)] = True
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.full(shape, float("nan"))
    value_cache = torch.full(shape, float("nan"))
    count = int(owned.sum())
    key_cache[owned] = torch.randn(count, num_kv_heads, head_dim, generator=gen)
    value_cache[owned] = torch.randn(count, num_kv_heads, head_dim, generator=gen)
    return key_cache, value_cache


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
    pages = [cdiv(n, block_size) for n in seq_lens]                       # pages per sequence
    num_blocks = num_blocks or max(1, 2 * sum(pages))
    max_blocks = max_blocks or max(pages, default=1)
    block_tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
    if shared_blocks:
        ids = torch.randint(num_blocks, (sum(pages),), generator=gen)
    else:
        ids = torch.randperm(num_blocks, generator=gen)[:sum(pages)]
    first = 0
    for s, p in enumerate(pages):
        block_tables[s, :p] = ids[first:first + p].to(torch.int32)
        first += p
    key_cache, value_cache = nan_caches(block_tables, seq_lens, num_blocks, block_size, num_kv_heads, head_dim,
                                        gen)
    query = torch.randn(len(seq_lens), num_heads, head_dim, generator=gen)
    to = dict(device=device or runtime.DEVICE)
    return PagedInputs(query.to(dtype=dtype, **to), key_cache.to(dtype=dtype, **to),
                       value_cache.to(dtype=dtype, **to), block_tables.to(**to),
                       torch.tensor(seq_lens, dtype=torch.int32, device=to["device"]))
