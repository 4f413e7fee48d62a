"""Prefill on one engine, decode on another (chapter 13): K/V blocks handed over between two LLMs.

A prompt's prefill is compute-bound and its decode memory-bound; run on one engine, a long prefill
stalls every running decode for a step. Disaggregated serving runs them on different engines: the
*prefill engine* computes the prompt and the first token, then hands its K/V blocks to a *decode
engine*, which generates the rest. Here both are :class:`pagedlib.LLM` in one process, and the hand
over goes through nothing but the engines' public parts and their prefix caches (both engines
need ``enable_prefix_caching=True``):

1. :func:`prefill` runs the request on the prefill engine for one token. Its full blocks stay in
   that engine's prefix cache; a lookup (``block_manager.allocate`` of the prompt, then ``free``)
   gives their block ids, and their K/V is read out of ``llm.kv_cache``: a :class:`KVTransfer`
   (block ids, tokens, bytes, layout, the tensors);
2. :func:`receive` makes the decode engine allocate blocks of its own for those tokens, writes the
   K/V into them, and frees them: they stay in its prefix cache, committed under the prompt's
   names. The request added next hits them, as a request hits a prefix computed by an earlier one,
   and the engine computes only the prompt's tail (the tokens past the last full block, at least
   one: the prefix cache always leaves the last token to compute, since its logits are needed).

Only full blocks move (the tail of a partly filled block is recomputed: at most ``block_size``
tokens). A transferred block is an ordinary cached block: if the decode engine needed its memory
before the request was admitted it would be evicted, and its tokens recomputed (same output, work
lost); :func:`generate_disaggregated` admits each request right after its transfer.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch

from .sampling import SamplingParams

__all__ = ["KVTransfer", "prefill", "receive", "generate_disaggregated", "write_cached_blocks", "LAYOUT"]

LAYOUT = "per layer, K and V: [num_blocks, block_size, num_kv_heads, head_dim]"
_EXPORT, _IMPORT = ("disagg", "export"), ("disagg", "import")   # seq ids of the lookups


@dataclass
class KVTransfer:
    """What moves from the prefill engine to the decode engine for one request."""

    prompt: list[int]
    first_token: int                 # what the prefill engine sampled (the decode engine agrees)
    block_ids: list[int]             # in the prefill engine's pool, in prompt order
    block_size: int
    keys: list[torch.Tensor]         # per layer [num_blocks, block_size, num_kv_heads, head_dim]
    values: list[torch.Tensor]
    layout: str = LAYOUT

    @property
    def num_tokens(self) -> int:
        """Prompt tokens whose K/V moves: the full blocks'."""
        return len(self.block_ids) * self.block_size

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in zip(self.keys, self.values))


def _needs_prefix_cache(llm, role: str) -> None:
    if not llm.block_manager.enable_prefix_caching:
        raise ValueError(f"the {role} engine hands K/V over through its prefix cache: build it with "
                         "LLM(..., enable_prefix_caching=True)")


def prefill(llm, prompt: Sequence[int], params: SamplingParams | None = None) -> KVTransfer:
    """Run ``prompt`` on ``llm`` (the prefill engine) for its first token; return its K/V blocks."""
    _needs_prefix_cache(llm, "prefill")
    params = dataclasses.replace(params or SamplingParams(), max_new_tokens=1, n=1)
    (first,) = llm.generate([list(prompt)], params, use_tqdm=False)
    bm = llm.block_manager
    cached = bm.allocate(_EXPORT, list(prompt))         # a lookup: the hits are the prompt's blocks
    try:
        ids = bm.block_table(_EXPORT)[:cached // bm.block_size]
    finally:
        bm.free(_EXPORT)
    index = torch.tensor(ids, dtype=torch.long, device=llm.kv_cache.layers[0][0].device)
    keys = [k.index_select(0, index).clone() for k, _ in llm.kv_cache.layers]
    values = [v.index_select(0, index).clone() for _, v in llm.kv_cache.layers]
    return KVTransfer(list(prompt), first[0], ids, bm.block_size, keys, values)


def receive(llm, transfer: KVTransfer) -> list[int]:
    """Write ``transfer``'s K/V into blocks of ``llm`` (the decode engine), left in its prefix cache
    under the prompt's names; return the block ids it used."""
    _needs_prefix_cache(llm, "decode")
    bm, cache = llm.block_manager, llm.kv_cache
    if transfer.block_size != bm.block_size:
        raise ValueError(f"the transfer has blocks of {transfer.block_size} tokens and the decode engine "
                         f"{bm.block_size}: build both engines with the same block_size")
    if len(transfer.keys) != len(cache.layers) or (transfer.keys and transfer.keys[0].shape[1:]
                                                   != cache.layers[0][0].shape[1:]):
        raise ValueError("the transfer's K/V does not have the decode engine's shape (layers, "
                         f"{LAYOUT}): both engines must serve the same model")
    if not transfer.block_ids:
        return []
    return write_cached_blocks(llm, transfer.prompt[:transfer.num_tokens], transfer.keys, transfer.values)


def write_cached_blocks(llm, tokens: Sequence[int], keys: Sequence[torch.Tensor],
                        values: Sequence[torch.Tensor], first: int = 0) -> list[int]:
    """Make ``llm``'s prefix cache hold the full blocks of ``tokens``: blocks ``first, first + 1, ...``
    get the K/V ``keys`` / ``values`` (per layer ``[num_blocks, block_size, num_kv_heads, head_dim]``),
    the ones before ``first`` must be cached already. Returns the block ids of the whole prefix
    (the written ones are its last ``len(keys[0])``)."""
    bm, cache = llm.block_manager, llm.kv_cache
    bm.allocate(_IMPORT, list(tokens))                    # its own blocks, committed under the names
    try:
        ids = bm.block_table(_IMPORT)
        index = torch.tensor(ids[first:], dtype=torch.long, device=cache.layers[0][0].device)
        for (k, v), tk, tv in zip(cache.layers, keys, values):
            k.index_copy_(0, index, tk.to(k.device, k.dtype))
            v.index_copy_(0, index, tv.to(v.device, v.dtype))
    finally:
        bm.free(_IMPORT)                                  # freed, still cached: the request hits them
    return ids


def generate_disaggregated(prefill_llm, decode_llm, prompts: Sequence[Sequence[int]],
                           params: SamplingParams | None = None) -> tuple[list[list[int]], list[KVTransfer]]:
    """Each prompt prefilled on ``prefill_llm``, handed over, and decoded on ``decode_llm`` (one
    request at a time); return the outputs and the transfers."""
    params = params or SamplingParams()
    outputs, transfers = [], []
    for prompt in prompts:
        transfer = prefill(prefill_llm, prompt, params)
        receive(decode_llm, transfer)
        (out,) = decode_llm.generate([list(prompt)], params, use_tqdm=False)
        outputs.append(out)
        transfers.append(transfer)
    return outputs, transfers
