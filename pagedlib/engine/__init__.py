"""The serving engine: which tokens run each step, as one flat batch, and what comes out.

==================  ========================================================  =========
module              idea                                                      chapters
==================  ========================================================  =========
``scheduler``       continuous batching: token budget, chunked prefill,       10, 11, 12
                    vLLM v1's, Sarathi-Serve's and vLLM v0's orders,
                    admission policies, preemption, undoing a failed step
``batch``           ``build_batch``: one step's tokens as one flat            10
                    ``PagedBatch`` (defined in ``pagedlib.attention.metadata``)
``sampling``        ``SamplingParams``, greedy and sampled next tokens        10
``request_checks``  the checks a request passes before it is queued          10
``metrics``         one recorder: steps and requests (TTFT, ITL, p50/p90/     10, 11
                    p99, goodput)
``llm``             ``LLM``: the loop that ties them together                 10, 11
``baseline``        reserve-max engine, transformers' static batching         10
==================  ========================================================  =========
"""
from ..lazy import lazy_submodules

__getattr__, __dir__ = lazy_submodules(__name__, ("scheduler", "batch", "sampling", "request_checks",
                                                  "metrics", "llm", "baseline"))
