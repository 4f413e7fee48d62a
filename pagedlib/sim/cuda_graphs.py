"""CUDA graphs' batch-size buckets (chapter 10b): a graph replays a recorded forward pass of fixed
shape, so an engine captures one per batch size in a list and pads each step up to the smallest
captured size that holds it. Plain Python (no torch), so the site's exercises can use it too::

    sizes = vllm_capture_sizes(256)          # [1, 2, 4, 8, 16, ..., 248, 256, 272, ..., 512]
    padded_size(250, sizes)                  # 256
    padding([250, 5, 600], sizes)            # (855, 9): 600 is larger than every size, no graph
"""
from __future__ import annotations

import bisect
from typing import Sequence

__all__ = ["vllm_capture_sizes", "padded_size", "padding"]

# vLLM's default CUDA-graph capture sizes (vllm/config/vllm.py, VllmConfig._set_cudagraph_sizes; see
# pagedlib.facts "vllm_cudagraph_sizes"): 1, 2, 4, every multiple of 8 below 256, then every multiple
# of 16 from 256 up to the largest size, min(2 x max_num_seqs, 512).
GRAPH_SMALL = (1, 2, 4)
GRAPH_STEP_BELOW_256, GRAPH_STEP_FROM_256 = 8, 16
GRAPH_MAX = 512


def vllm_capture_sizes(max_num_seqs: int = 256) -> list[int]:
    """vLLM's default CUDA-graph capture sizes for ``max_num_seqs`` (no speculative decoding):
    1, 2, 4, the multiples of 8 below 256, then the multiples of 16 up to min(2 x max_num_seqs, 512)."""
    largest = min(2 * max_num_seqs, GRAPH_MAX)
    sizes = list(GRAPH_SMALL) + list(range(8, 256, GRAPH_STEP_BELOW_256)) + \
        list(range(256, largest + 1, GRAPH_STEP_FROM_256))
    return [s for s in sizes if s <= largest]


def padded_size(rows: int, sizes: Sequence[int]) -> int | None:
    """The captured size a step of ``rows`` tokens runs at: the smallest size that holds it, or None
    when it is larger than every size (it then runs without a graph, unpadded)."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1; got {rows}")
    at = bisect.bisect_left(sorted(sizes), rows)
    return sorted(sizes)[at] if at < len(sizes) else None


def padding(batch_rows: Sequence[int], sizes: Sequence[int]) -> tuple[int, int]:
    """(useful rows, padding rows) over steps of ``batch_rows`` tokens each, under capture ``sizes``;
    a step larger than every size adds its rows and no padding."""
    useful = sum(batch_rows)
    padded = sum((padded_size(n, sizes) or n) - n for n in batch_rows)
    return useful, padded
