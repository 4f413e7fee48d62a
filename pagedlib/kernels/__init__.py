"""The Triton kernels of chapters 8 and 9, one idea per file.

- ``decode``: decode attention in one pass; one program per (sequence, KV head) serves the whole GQA
  group and walks the sequence's pages with an online softmax. Its inner loop, ``attend_tiles``,
  is reused by the other attention kernels.
- ``split_k``: flash-decoding; a sequence's tokens split into ranges attended in parallel, then a
  second kernel merges the partial results by their log-sum-exp.
- ``prefill``: causal attention for a chunk of new tokens per sequence over its cached prefix.
- ``write_kv``: scatter new K/V rows to their cache slots.

The kernels take raw tensors and trust their inputs; ``pagedlib.attention`` checks the inputs,
picks the block sizes and launches them.
"""
