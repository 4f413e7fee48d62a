"""What one forward pass's attention needs: :class:`PagedBatch`, the per-step metadata (chapter 10).

The engine builds one every step (:func:`pagedlib.engine.batch.build_batch`); the models pass it down
to every attention layer, and the backends read it. It lives with attention, as vLLM's attention
backends define their own metadata classes, so that imports run one way: engine -> models -> attention.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["PagedBatch"]


@dataclass
class PagedBatch:
    """One forward pass over the paged cache: the new tokens of ``num_seqs`` sequences, flattened.

    Sequence ``s`` owns rows ``query_start_loc[s]:query_start_loc[s+1]`` of ``input_ids``; they are
    its *last* tokens, so its K/V before them must already be in the cache. ``is_decode`` says every
    sequence brings exactly one token (then a layer calls its backend's ``decode``, else ``prefill``).
    ``max_query_len``, if the builder knows it, is the longest chunk, so that a kernel that sizes its
    grid with it (``paged_prefill``) need not read ``query_start_loc`` back from the GPU.
    """

    input_ids: torch.Tensor        # [num_tokens] int64
    positions: torch.Tensor        # [num_tokens] int64, each token's index in its sequence
    slot_mapping: torch.Tensor     # [num_tokens] int64, slot = block_id * block_size + offset
    block_tables: torch.Tensor     # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor         # [num_seqs] int32, tokens in the cache after this step
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    is_decode: bool
    max_query_len: int | None = None   # the most new tokens of any sequence (host int), or None: unknown
    # made by build_batch from the block manager's tables: the backends skip the checks of its values
    trusted: bool = False
    # what a backend derives from the batch alone, built in the first layer and reused by the others
    derived: dict = field(default_factory=dict, repr=False, compare=False)
