"""pagedlib: the library of the course *Paged attention from scratch*.

Modules, in the order the course teaches them:

=================  ==========================================================  =========
module             idea                                                        chapters
=================  ==========================================================  =========
``runtime``        GPU (compiled Triton) or CPU (Triton interpreter)           0
``capacity``       KV bytes per token, reserve-max vs paged plans, capacity     1, 2, 4
``allocators``     the naive contiguous allocators and their fragmentation      2, 3
``block_manager``  pages, block tables, ref counts, copy-on-write, prefixes      4, 6
``attention_ref``  attention through a page table in plain PyTorch              5
``attention``      the Triton kernels: decode, split-K, prefill, write           7, 8
``model``          GPT-2 whose attention reads K/V through the paged cache      9
``scheduler``      continuous batching: token budget, chunks, preemption       10, 11
``batching``       one step's tokens as one flat batch (the model runner)      10
``sampling``       ``SamplingParams``, greedy and sampled next tokens          10
``metrics``        the engine's records: steps and requests (TTFT, TPOT)       10, 11
``engine``         ``LLM``: a small serving engine                             10
``baseline``       reserve-max engine, transformers' static batching           10
``validation``     the one check of count arguments (bool refused)
``sim``            the PagedAttention paper's memory results, simulated         10
``plots``          the course's figures
``widgets``        the course's interactive controls
``exercises``      self-checking exercises for every chapter
=================  ==========================================================  =========

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
    "GPT2": "model", "Scheduler": "scheduler", "LLM": "engine", "SamplingParams": "sampling",
    "ReserveMaxLLM": "baseline",
    # claims
    "claim": "claims",
}
_SUBMODULES = {"runtime", "claims", "capacity", "allocators", "block_manager", "attention_ref", "attention",
               "model", "scheduler", "batching", "sampling", "metrics", "engine", "baseline", "validation",
               "sim", "plots", "widgets", "exercises", "bench"}

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
