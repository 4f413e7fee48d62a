"""Part I, KV-cache memory: how much a token costs, the naive allocators and their waste, and the
block manager (blocks, block tables, ref counts, copy-on-write, prefix caching).

=================  =========================================================  =========
module             idea                                                       chapters
=================  =========================================================  =========
``capacity``       KV bytes per token, reserve-max vs paged plans, GPUs       1, 2, 4, 12
``allocators``     the naive contiguous allocators and their waste            2, 3
``block_manager``  blocks, block tables, ref counts, copy-on-write, prefixes  4, 6, 7
``radix_cache``    a radix tree of cached prefixes, LRU leaf eviction         7
=================  =========================================================  =========
"""
from ..lazy import lazy_submodules

__getattr__, __dir__ = lazy_submodules(__name__, ("capacity", "allocators", "block_manager", "radix_cache"))
