"""The baselines the engine is compared with (chapters 10 and 12), on the same model and workload.

- :class:`ReserveMaxLLM`: the same engine loop and the same paged kernels, but the admission rule of
  pre-paging servers: a request is admitted only if ``max_len`` token slots can be *reserved* for it,
  whatever its real length. The reservation is never exceeded, so it never preempts, and it holds
  ``budget // max_len`` requests at most: the capacity that paging wins back.
- :func:`hf_static_generate`: ``transformers``' own ``generate`` over static batches: a batch's prompts
  are left-padded to its longest, and every request runs until the batch's longest output is done.
"""
from __future__ import annotations

import time
from typing import Sequence as Seq

import torch

from ..memory.capacity import blocks_for, reserve_max_slots
from .llm import LLM, SamplingParams
from ..models.layers import PagedModel
from .metrics import ReservedStepRecord
from .scheduler import Scheduler, SeqState


class ReserveMaxScheduler(Scheduler):
    """The ``guaranteed`` admission policy with every sequence's longest taken as its reserve-max
    slot (:func:`~pagedlib.memory.capacity.reserve_max_slots`: ``max_len``): a request is admitted
    only if ``max_len`` slots (whole blocks) can be reserved for each of its ``n`` samples. Every seat
    the running sequences hold (``num_seats``, counted from admission, before any fork) carries one
    reservation, so the reservations can never exceed the cache."""

    def __init__(self, block_manager, max_num_seqs: int, max_len: int, max_num_batched_tokens: int | None = None,
                 **kwargs):
        super().__init__(block_manager, max_num_seqs, max_num_batched_tokens, admission="guaranteed", **kwargs)
        self.max_len = max_len

    def _blocks_at_most(self, seq: SeqState) -> int:
        # n samples reserve n times: nothing is shared
        slots = reserve_max_slots(len(seq.prompt) + seq.max_new_tokens, self.max_len)
        return blocks_for(slots, self.block_manager.block_size)


class ReserveMaxLLM(LLM):
    """:class:`~pagedlib.LLM` with reserve-max admission: each running request holds ``max_len`` slots
    (default: the model's context). Same model, kernels and outputs; fewer requests at once."""

    def __init__(self, model: PagedModel, num_usable_blocks: int | None = None, block_size: int = 16,
                 max_num_seqs: int = 64, max_len: int | None = None, max_num_batched_tokens: int | None = None,
                 *, num_blocks: int | None = None):
        self.max_len = max_len or model.context_length
        super().__init__(model, num_usable_blocks, block_size, max_num_seqs, enable_prefix_caching=False,
                         max_num_batched_tokens=max_num_batched_tokens, num_blocks=num_blocks)

    def make_scheduler(self) -> Scheduler:
        return ReserveMaxScheduler(self.block_manager, self.max_num_seqs, self.max_len,
                                   self.max_num_batched_tokens)

    def step_record(self, **fields) -> ReservedStepRecord:
        return ReservedStepRecord(**fields, reserved_blocks=self.scheduler.reserved_blocks)

    def check_request(self, index: int, prompt, params: SamplingParams) -> list[int]:
        tokens = super().check_request(index, prompt, params)
        try:
            reserved = reserve_max_slots(len(tokens) + params.max_new_tokens, self.max_len)
        except ValueError:
            raise ValueError(f"prompts[{index}]: {len(tokens)} prompt tokens + max_new_tokens "
                             f"{params.max_new_tokens} exceed the reservation max_len = {self.max_len}; "
                             "raise max_len.") from None
        if params.n * blocks_for(reserved, self.block_size) > self.num_usable_blocks:
            raise ValueError(f"prompts[{index}]: n = {params.n} reservations of max_len = {self.max_len} tokens "
                             f"need more than the whole cache ({self.num_usable_blocks} blocks of {self.block_size}), "
                             "so it could never be admitted; raise num_usable_blocks or lower n or max_len.")
        return tokens


def hf_static_generate(hf_model, prompts: Seq[Seq[int]], max_new_tokens: int | Seq[int], batch_size: int,
                       pad_token_id: int = 0) -> tuple[list[list[int]], dict]:
    """Greedy generation with ``transformers``' ``generate`` in static batches of ``batch_size``.

    Each batch is left-padded to its longest prompt and runs for its largest ``max_new_tokens`` (so the
    model's context must hold both); each request's output is then cut to its own ``max_new_tokens``. Returns the outputs and a dict with
    ``tokens_generated`` (useful tokens), ``tokens_computed`` (including the padded and surplus ones),
    ``elapsed_s`` and ``tokens_per_s`` (useful tokens per second).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    budgets = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    device = next(hf_model.parameters()).device
    outputs, computed, start = [], 0, time.perf_counter()
    for first in range(0, len(prompts), batch_size):
        batch, want = prompts[first:first + batch_size], budgets[first:first + batch_size]
        width, steps = max(len(p) for p in batch), max(want)
        if width + steps > hf_model.config.n_positions:
            raise ValueError(f"a static batch (requests {first}..{first + len(batch) - 1}) spans {width} prompt + "
                             f"{steps} generated positions, more than the model's context "
                             f"n_positions = {hf_model.config.n_positions}: every request of a static batch runs "
                             "for the batch's longest output. Use a smaller batch_size or a longer context.")
        ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        with torch.inference_mode():                       # ids, mask: [batch, width], left-padded
            out = hf_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=steps,
                                    do_sample=False, pad_token_id=pad_token_id, eos_token_id=None)
        outputs += [row[width:width + n].tolist() for row, n in zip(out, want)]
        computed += len(batch) * (width + steps)
    elapsed = time.perf_counter() - start
    useful = sum(budgets)
    return outputs, {"tokens_generated": useful, "tokens_computed": computed, "elapsed_s": elapsed,
                     "tokens_per_s": useful / elapsed}
