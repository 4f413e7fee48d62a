"""The Triton kernels of chapters 8 and 9, one idea per file.

- ``decode``: decode attention in one pass; one program per (sequence, KV head) serves the whole GQA
  group and walks the sequence's pages with an online softmax. Its pieces are reused by the other
  attention kernels: ``load_group_queries`` (the GQA group's query rows), ``attend_tiles`` (the
  online softmax over a range of tokens) and ``normalise`` (its last step).
- ``split_k``: flash-decoding; a sequence's tokens split into ranges attended in parallel, then a
  second kernel merges the partial results by their log-sum-exp.
- ``prefill``: causal attention for a chunk of new tokens per sequence over its cached prefix.
- ``varlen``: one kernel for a whole mixed step (decode rows and prefill chunks): tokens x the GQA
  group packed into one tile, ``attend_tiles`` in base 2, split-K for sequences with few new
  tokens, and the merge of those splits.
- ``write_kv``: scatter new K/V rows to their cache slots.
- ``launch``: not a kernel: ``launch_config`` chooses the tile sizes, warps and pipeline stages for
  a head dim, dtype, GQA group and GPU, and the ``*_meta`` functions spell out each launch's arguments.

The kernels take raw tensors and trust their inputs; ``pagedlib.attention.triton_backend`` checks the inputs and
launches them with ``launch``'s choices.
"""
