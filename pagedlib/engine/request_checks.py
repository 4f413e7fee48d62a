"""What the engine checks before it accepts a request (chapter 10): every refusal says what was wrong
and how to fix it, before anything in the engine changes.

:func:`sampling_params_for` turns ``generate``'s arguments into one :class:`SamplingParams` per prompt;
:func:`check_request` refuses a prompt that could never run: not token ids, empty, outside the
vocabulary, longer than the model's context or the whole cache, or more samples than seats.
"""
from __future__ import annotations

from typing import Sequence

from .sampling import SamplingParams
from ..validation import as_int, cdiv

__all__ = ["sampling_params_for", "check_request"]


def sampling_params_for(prompts, sampling_params, kwargs: dict) -> list[SamplingParams]:
    """One :class:`SamplingParams` per prompt, from one for all, one per prompt, or keyword fields."""
    if not isinstance(prompts, (list, tuple)) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty list of prompts, each a list of token ids; "
                         f"got {type(prompts).__name__} {prompts!r:.60}")
    if sampling_params is not None and kwargs:
        raise ValueError(f"pass either sampling_params or its fields as keywords, not both; got both "
                         f"and {sorted(kwargs)}")
    if sampling_params is None:
        sampling_params = SamplingParams(**kwargs)
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * len(prompts)
    if len(sampling_params) != len(prompts):
        raise ValueError(f"sampling_params must be one SamplingParams or one per prompt; got "
                         f"{len(sampling_params)} for {len(prompts)} prompts")
    return list(sampling_params)


def check_request(index: int, prompt: Sequence[int], params: SamplingParams, *, vocab_size: int,
                  context_length: int, block_size: int, num_usable_blocks: int,
                  max_num_seqs: int) -> list[int]:
    """Refuse, with a ``ValueError`` saying why, a request that cannot run; return its token ids.

    ``num_usable_blocks``: the blocks the cache can hand out (the null block not counted).
    """
    where = f"prompts[{index}]"
    try:
        tokens = [as_int(t) for t in prompt]
    except TypeError:          # not a sequence
        tokens = [None]
    if None in tokens:
        raise ValueError(f"{where} must be a list of integer token ids; got {prompt!r:.60}")
    if not tokens:
        raise ValueError(f"{where} is empty: a request needs at least one prompt token to start from.")
    bad = [t for t in tokens if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"{where} has token id {bad[0]}, outside the model's vocabulary "
                         f"[0, {vocab_size}): tokenize with the model's own tokenizer.")
    if params.eos_token_id is not None and not 0 <= params.eos_token_id < vocab_size:
        raise ValueError(f"eos_token_id {params.eos_token_id} is outside the vocabulary [0, {vocab_size}).")
    total = len(tokens) + params.max_new_tokens
    if total > context_length:
        raise ValueError(f"{where}: {len(tokens)} prompt tokens + max_new_tokens {params.max_new_tokens} = "
                         f"{total} exceeds the model's context of {context_length} tokens (context_length); "
                         "shorten the prompt or lower max_new_tokens.")
    need = cdiv(total, block_size)
    if need > num_usable_blocks:
        raise ValueError(f"{where}: {total} tokens need {need} blocks of {block_size}, but the whole "
                         f"cache has {num_usable_blocks} blocks to hand out, so it could never run; give LLM more "
                         "num_usable_blocks or lower max_new_tokens.")
    if params.n > max_num_seqs:
        raise ValueError(f"n = {params.n} samples cannot run at once with max_num_seqs = "
                         f"{max_num_seqs}; raise max_num_seqs or lower n.")
    return tokens
