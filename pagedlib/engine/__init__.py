"""The serving engine: which tokens run each step, as one flat batch, and what comes out.

==============  ========================================================  =========
module          idea                                                      chapters
==============  ========================================================  =========
``scheduler``   continuous batching: token budget, chunked prefill,       10, 11
                preemption
``batch``       one step's tokens as one flat ``PagedBatch``              10
``sampling``    ``SamplingParams``, greedy and sampled next tokens        10
``metrics``     the engine's records: steps and requests (TTFT, TPOT)     10, 11
``llm``         ``LLM``: the loop that ties them together                 10, 11
``baseline``    reserve-max engine, transformers' static batching         10
==============  ========================================================  =========
"""
from ..lazy import lazy_submodules

__getattr__, __dir__ = lazy_submodules(__name__, ("scheduler", "batch", "sampling", "metrics", "llm", "baseline"))
