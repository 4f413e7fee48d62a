"""pagedlib: the library of the course *Paged attention from scratch*.

Modules, in the order the course teaches them:

=====================  ======================================================  =========
module                 idea                                                    chapters
=====================  ======================================================  =========
``runtime``            GPU (compiled Triton) or CPU (Triton interpreter), and  0
                       the torch / triton / numpy combinations that work
``claims``             claims that say which setting changed when they fail    every
``capacity``           KV bytes per token, reserve-max vs paged plans, GPUs    1, 2, 4, 12
``allocators``         the naive contiguous allocators and their waste         2, 3
``block_manager``      pages, block tables, ref counts, copy-on-write,         4, 6, 7
                       prefix caching
``attention_ref``      attention through a page table in plain PyTorch         5, 10
``attention_checks``   the input checks shared by the reference and kernels    5, 8
``attention``          the Triton kernels' launchers: decode, split-K,         8, 9
                       prefill, write
``kernels``            the Triton kernels themselves, and ``kernels.launch``:  8, 9
                       tiles, warps and stages per GPU
``layers``             what every paged model shares: batch, KV cache,         10
                       backend, the paged attention layer, the model protocol
``model``              GPT-2 on the paged cache                                10
``llama``              the Llama family (RMSNorm, RoPE, GQA, SwiGLU; Qwen2)    10
``models``             ``from_hf`` / ``from_pretrained`` by architecture       10
``smollm2``            a real chat model without the internet (SmolLM2-135M-   7, 10, 11
                       Instruct from the package index), converted once
``scheduler``          continuous batching: token budget, chunked prefill,     10, 11
                       preemption
``batching``           one step's tokens as one flat batch (the model runner)  10
``sampling``           ``SamplingParams``, greedy and sampled next tokens      10
``metrics``            the engine's records: steps and requests (TTFT, TPOT)   10, 11
``engine``             ``LLM``: a small serving engine                         10, 11
``baseline``           reserve-max engine, transformers' static batching       10
``validation``         the one check of count arguments (bool refused)         -
``sim``                the paper's memory and latency results, simulated       11, 12
``bench``              ``python -m pagedlib.bench memory|attention|kernels|    8-12
                       engine``: measurements against real peers
``plots``              the course's figures                                    every
``widgets``            the course's interactive controls                       0, 4
``exercises``          self-checking exercises, one module per chapter         every
=====================  ======================================================  =========

``import pagedlib`` is cheap: it picks the runtime (setting ``TRITON_INTERPRET=1`` on a machine
without CUDA) and loads every other module on first use.
"""
from __future__ import annotations

import importlib

from . import runtime
from .runtime import DEVICE, DTYPE, env_report, print_env

__version__ = "0.1.0"

# public name -> module that defines it (imported on first use)
_EXPORTS = {
    # capacity
    "pages_for": "capacity", "reserve_max_plan": "capacity", "paged_plan": "capacity",
    "Plan": "capacity", "ModelSpec": "capacity", "MODELS": "capacity", "GPUS": "capacity",
    "blocks_for_gpu": "capacity",
    # allocators
    "ReserveMaxAllocator": "allocators", "FirstFitAllocator": "allocators",
    # block manager
    "BlockManager": "block_manager", "OutOfBlocks": "block_manager",
    # attention
    "paged_attention_ref": "attention_ref", "paged_prefill_ref": "attention_ref",
    "paged_attention": "attention", "paged_prefill": "attention", "write_kv": "attention",
    # engine
    "PagedBatch": "layers", "KVCache": "layers", "PagedModel": "layers",
    "GPT2": "model", "Llama": "llama", "from_hf": "models", "from_pretrained": "models",
    "load_smollm2": "smollm2",
    "Scheduler": "scheduler", "LLM": "engine", "SamplingParams": "sampling",
    "ReserveMaxLLM": "baseline",
    # claims
    "claim": "claims",
}
_SUBMODULES = {"runtime", "claims", "capacity", "allocators", "block_manager", "attention_ref", "attention",
               "layers", "model", "llama", "models", "smollm2", "scheduler", "batching", "sampling", "metrics", "engine",
               "baseline", "validation", "sim", "plots", "widgets", "exercises", "bench"}

__all__ = ["DEVICE", "DTYPE", "env_report", "print_env", "runtime", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'pagedlib' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | _SUBMODULES)
