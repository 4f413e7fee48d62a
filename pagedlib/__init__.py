"""pagedlib: the library of the course *Paged attention from scratch*.

The package follows the course's parts; a folder per part, a module per idea:

==============================  =================================================  =========
module                          idea                                               chapters
==============================  =================================================  =========
``runtime``                     GPU (compiled Triton) or CPU (Triton interpreter),  0
                                and the torch / triton / numpy combinations
``claims``                      claims that say which setting changed when they     every
                                fail
``facts``                       facts about production engines, each written once   every
                                with its source, version and date
``validation``                  what counts as an integer argument; ``cdiv``        -
``lazy``                        submodules loaded on first use                      -
``output``                      HTML in a notebook, text elsewhere; ``show_table``  every
``memory.capacity``             KV bytes per token, reserve-max vs paged plans,     1, 2, 4, 12
                                GPUs
``memory.allocators``           the naive contiguous allocators and their waste     2, 3
``memory.block_manager``        blocks, block tables, ref counts, copy-on-write,    4, 6, 7
                                prefix caching
``attention.reference``         attention through a page table in plain PyTorch     5
``attention.inputs``            random paged inputs (NaN in unowned slots)          5, 8, 9
``attention.checks``            the input checks shared by references and kernels   5, 8
``attention.kernels``           the Triton kernels, and ``kernels.launch``: every   8, 9
                                number they are launched with
``attention.triton_backend``    the kernels' launchers and the Triton backend       8, 9, 10
``attention.torch_backend``     the whole batch in PyTorch (the CPU backend)        10
``attention.metadata``          ``PagedBatch``: what one forward pass's attention   10
                                needs (the engine builds it)
``attention.backend``           the backend interface and the choice of one         10
``models.layers``               KV cache, paged attention layer, model protocol     10
``models.gpt2``                 GPT-2 on the paged cache                            10
``models.llama``                the Llama family (RMSNorm, RoPE, GQA, SwiGLU;       10
                                Qwen2)
``models.loading``              ``from_hf`` / ``from_pretrained`` by architecture   10
``models.smollm2``              a real chat model without the internet (SmolLM2-    7, 10, 11
                                135M-Instruct from the package index)
``engine.scheduler``            continuous batching: token budget, chunked          10, 11
                                prefill, preemption
``engine.batch``                ``build_batch``: one step's tokens as one flat      10
                                ``PagedBatch``
``engine.sampling``             ``SamplingParams``, greedy and sampled tokens       10
``engine.metrics``              the engine's records: steps and requests            10, 11
``engine.llm``                  ``LLM``: a small serving engine                     10, 11
``engine.baseline``             reserve-max engine, transformers' static batching   10
``sim``                         the paper's memory and latency results, simulated   11, 12
``bench``                       ``python -m pagedlib.bench memory|attention|        8-12
                                kernels|engine``: measurements against real peers
``plots``                       the course's figures                                every
``widgets``                     the course's interactive controls                   0, 4
``exercises``                   self-checking exercises, one module per chapter     every
==============================  =================================================  =========

``import pagedlib`` is cheap: it picks the runtime (setting ``TRITON_INTERPRET=1`` on a machine
without CUDA) and loads every other module on first use.
"""
from __future__ import annotations

from .lazy import lazy_submodules

try:
    from . import runtime
    from .runtime import DEVICE, DTYPE, env_report, print_env
except ModuleNotFoundError as error:
    # Without torch (the site's in-browser checkers, on Pyodide) the pure-Python modules still
    # import; reading a name of the runtime raises this same error.
    if error.name != "torch":
        raise
    _NO_TORCH = {"DEVICE": "runtime", "DTYPE": "runtime", "env_report": "runtime", "print_env": "runtime"}
else:
    _NO_TORCH = {}

__version__ = "0.1.0"

# public name -> module that defines it (imported on first use)
_EXPORTS = {
    # memory
    "blocks_for": "memory.capacity", "reserve_max_plan": "memory.capacity", "paged_plan": "memory.capacity",
    "Plan": "memory.capacity", "ModelSpec": "memory.capacity", "MODELS": "memory.capacity",
    "GPUS": "memory.capacity", "blocks_for_gpu": "memory.capacity", "requests_that_fit": "memory.capacity",
    "ReserveMaxAllocator": "memory.allocators", "FirstFitAllocator": "memory.allocators",
    "BlockManager": "memory.block_manager", "OutOfBlocks": "memory.block_manager",
    # attention
    "paged_attention_ref": "attention.reference", "paged_prefill_ref": "attention.reference",
    "paged_attention_by_page": "attention.page_by_page",
    "paged_attention": "attention.triton_backend", "paged_prefill": "attention.triton_backend",
    "write_kv": "attention.triton_backend", "paged_attention_varlen": "attention.triton_backend",
    "PagedBatch": "attention.metadata",
    # models
    "KVCache": "models.layers", "PagedModel": "models.layers", "GPT2": "models.gpt2", "Llama": "models.llama",
    "from_hf": "models.loading", "from_pretrained": "models.loading",
    "load_smollm2": "models.smollm2",
    # engine
    "Scheduler": "engine.scheduler", "LLM": "engine.llm",
    "SamplingParams": "engine.sampling", "ReserveMaxLLM": "engine.baseline",
    # claims
    "claim": "claims",
}
_SUBMODULES = {"runtime", "claims", "facts", "validation", "output", "memory", "attention", "models", "engine",
               "sim", "plots", "widgets", "exercises", "bench"}

__all__ = ["DEVICE", "DTYPE", "env_report", "print_env", "runtime", *_EXPORTS]

__getattr__, __dir__ = lazy_submodules(__name__, _SUBMODULES, exports={**_EXPORTS, **_NO_TORCH})
