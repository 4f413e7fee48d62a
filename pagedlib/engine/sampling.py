"""How the engine picks each next token: :class:`SamplingParams` and :func:`sample_token` (chapter 10).

Greedy rows (``temperature=0``) are picked together by one ``argmax`` over the step's logits
(:func:`sample_rows`), so a step waits for the GPU once; the others draw from their own generator.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple

import torch

from ..validation import as_int, positive_int

__all__ = ["SamplingParams", "sample_token", "sample_rows"]


@dataclass(frozen=True)
class SamplingParams:
    """How to generate for one request.

    ``temperature=0`` is greedy (argmax); above 0 the next token is drawn from the softmax of
    ``logits / temperature``, restricted to the ``top_k`` most likely tokens (0: no limit) and to the
    smallest set whose probability reaches ``top_p``. ``seed`` makes sampling reproducible: sample
    ``j`` of a request draws from its own generator seeded with ``seed + j`` (``None``: a seed drawn
    from torch's global generator). ``n`` samples share the prompt's blocks. Generation stops after
    ``max_new_tokens`` tokens, or after ``eos_token_id`` or any of ``stop_token_ids`` (kept in the
    output), or once the decoded output contains one of the ``stop`` strings (vLLM's fields; ``stop``
    needs an engine with a tokenizer: the tokens that complete the string are kept, the text returned
    ends just before it, as vLLM's does).
    """

    max_new_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1
    eos_token_id: int | None = None
    stop: Tuple[str, ...] = ()
    stop_token_ids: Tuple[int, ...] = ()

    def __post_init__(self):
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        try:
            stop, stop_ids = tuple(stop), tuple(self.stop_token_ids)
        except TypeError:
            raise ValueError(f"stop must be a list of strings and stop_token_ids a list of token ids; got "
                             f"stop={self.stop!r}, stop_token_ids={self.stop_token_ids!r}") from None
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a list of non-empty strings; got {self.stop!r}")
        if not all(as_int(t) is not None and t >= 0 for t in stop_ids):
            raise ValueError(f"stop_token_ids must be a list of token ids (integers >= 0); got {self.stop_token_ids!r}")
        object.__setattr__(self, "stop", stop)                   # frozen: normalised once, here
        object.__setattr__(self, "stop_token_ids", stop_ids)
        positive_int("max_new_tokens", self.max_new_tokens)
        positive_int("n (samples per prompt)", self.n)
        checks = [
            (self.temperature >= 0, f"temperature must be >= 0 (0 means greedy); got {self.temperature}"),
            (as_int(self.top_k) is not None and self.top_k >= 0,
             f"top_k must be an integer >= 0 (0 means no limit); got {self.top_k!r}"),
            (0 < self.top_p <= 1, f"top_p must be in (0, 1]; got {self.top_p}"),
            (self.seed is None or as_int(self.seed) is not None, f"seed must be an integer or None; got {self.seed!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """Pick the next token from one sequence's ``logits [vocab_size]`` (fp32) by ``params``."""
    if params.greedy:
        return int(logits.argmax())
    logits = logits.cpu() / params.temperature                   # [vocab_size]
    if params.top_k:
        kth_best = torch.topk(logits, min(params.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    if params.top_p < 1:
        probs, order = logits.softmax(-1).sort(descending=True)
        before = probs.cumsum(-1) - probs                        # probability of the better tokens
        drop = order[before >= params.top_p]                     # the nucleus is already full without them
        logits = logits.index_fill(0, drop, float("-inf"))
    probs = logits.softmax(-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def sample_rows(logits: torch.Tensor, rows: Sequence[int], params: Sequence[SamplingParams],
                generators: Sequence[torch.Generator | None]) -> list[int]:
    """The next token for each of ``rows`` of ``logits [num_seqs, vocab_size]``, row ``rows[i]``
    sampled by ``params[i]`` (a row may appear more than once: forked samples share their prompt's
    logits). All greedy rows come from one ``argmax``: one wait for the GPU per step, not per row."""
    if not rows:
        return []
    if rows == list(range(logits.shape[0])):                     # every row once, in order (no forks)
        picked = logits
    else:
        picked = logits.index_select(0, torch.tensor(rows, device=logits.device))   # [len(rows), vocab_size]
    best = picked.argmax(-1).tolist()                            # [len(rows)]
    return [best[i] if p.greedy else sample_token(picked[i], p, g)
            for i, (p, g) in enumerate(zip(params, generators))]
