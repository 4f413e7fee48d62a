"""Chapter 7 exercises: the hit count of a prompt mix under prefix caching."""
from __future__ import annotations

from . import Exercise

# ---- exercise 1: the hit count of a prompt mix ------------------------------------------------

BLOCK_SIZE = 4
SYSTEM = list(range(1, 11))                  # a 10-token system prompt: tokens 1..10
PROMPT_MIX = [
    SYSTEM + [11, 12],                       # first: the cache is empty
    SYSTEM + [13, 14, 15],                   # same system prompt, another question
    SYSTEM + [11, 12],                       # an exact repeat of the first prompt
    SYSTEM[:6],                              # the first 6 tokens of the system prompt
    [1, 2, 3],                               # shorter than one block
    [0] + SYSTEM,                            # the system prompt shifted by one token
    SYSTEM + [11, 12, 16, 17, 18],           # the first prompt, continued
]


def prefix_cache_hits(prompts: list[list[int]], block_size: int) -> list[int]:
    """Cached tokens each prompt gets, prompts arriving one after another and nothing evicted.

    A full block hits if the same tokens, after the same prefix, were a full block of an earlier
    prompt; hits stop at the first miss and never reach the prompt's last token.
    """
    seen: set[tuple[int, ...]] = set()       # every full-block prefix of every earlier prompt
    hits = []
    for tokens in prompts:
        n_full = len(tokens) // block_size
        usable = (len(tokens) - 1) // block_size
        k = 0
        while k < usable and tuple(tokens[:(k + 1) * block_size]) in seen:
            k += 1
        hits.append(k * block_size)
        seen |= {tuple(tokens[:(i + 1) * block_size]) for i in range(n_full)}
    return hits


def _diagnose_hits(answer, expected) -> str | None:
    if answer == expected // BLOCK_SIZE:
        return "That looks like a count of blocks: the question asks for tokens."
    if answer % BLOCK_SIZE:
        return (f"Hits come in whole blocks of {BLOCK_SIZE} tokens: a block that only partly "
                "matches is never a hit.")
    if answer > expected:
        return ("Too many: can a prompt get *all* its tokens from the cache? And does a block hit "
                "when its tokens sit at a different position?")
    return "Too few: a prompt hits every leading full block that an earlier prompt also had."


hit_count = Exercise(
    "ch07.hit_count",
    "Block size 4, prefix caching on, the prompts of PROMPT_MIX allocated one after another (nothing "
    "evicted). How many prompt tokens are served from the cache in total?",
    sum(prefix_cache_hits(PROMPT_MIX, BLOCK_SIZE)),
    diagnose=_diagnose_hits,
    hints=["Only full blocks of 4 tokens are cached, and a block's name depends on every token "
           "before it, so hits always start at the first block.",
           "A prompt never gets its last token from the cache: at most (len - 1) // 4 blocks hit.",
           "Go prompt by prompt, writing down which full blocks the cache holds after each one."],
    wrong=[36, 8, 35],
    explanation="Per prompt: 0, 8, 8 (the repeat recomputes its last block), 4, 0 (shorter than a "
                "block), 0 (shifted: every block name differs), 12.",
)
