"""Chapter 7 exercises: the hit count of a prompt mix under prefix caching."""
from __future__ import annotations

from . import AllOf, Exercise, FirstWrong, Item, LengthNot, NotMultipleOf

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


_WHY = {   # what each prompt of the mix tests, for a targeted message when its count is wrong
    2: "an exact repeat still recomputes its last prompt token, so its last block cannot be a hit",
    3: "a prefix of earlier prompts hits its full blocks, at most (len - 1) // 4 of them",
    4: "a prompt shorter than one block has no full block, so nothing to find",
    5: "shifted by one token, every block holds other tokens after another prefix: no name matches",
    6: "hits run over every leading full block an earlier prompt had, up to (len - 1) // 4 blocks",
}


_EXPECTED_HITS = prefix_cache_hits(PROMPT_MIX, BLOCK_SIZE)
_HIT_MISTAKES = [
    (LengthNot(len(PROMPT_MIX)), f"give one number per prompt: {len(PROMPT_MIX)} numbers, in the order "
                                 "of PROMPT_MIX."),
    ([e // BLOCK_SIZE for e in _EXPECTED_HITS], "Those look like counts of blocks: the question asks "
                                                "for tokens."),
    # the first prompt whose count is wrong gets the message
    *[(AllOf(FirstWrong(i), Item(i, NotMultipleOf(BLOCK_SIZE))),
       f"prompt {i + 1}: hits come in whole blocks of {BLOCK_SIZE} tokens; a block that only partly "
       "matches is never a hit.") for i in range(len(PROMPT_MIX))],
    (FirstWrong(0), "prompt 1: the cache starts empty."),
    *[(FirstWrong(i), f"prompt {i + 1} is off: "
                      f"{_WHY.get(i, 'compare with the blocks earlier prompts left')}.")
      for i in range(1, len(PROMPT_MIX))],
]

hit_count = Exercise(
    "ch07.hit_count",
    "Block size 4, prefix caching on, the prompts of PROMPT_MIX allocated one after another (nothing "
    "evicted). How many prompt tokens does each prompt get from the cache? Answer a list of seven "
    "numbers, one per prompt.",
    prefix_cache_hits(PROMPT_MIX, BLOCK_SIZE),
    mistakes=_HIT_MISTAKES,
    hints=["Only full blocks of 4 tokens are cached, and a block's name depends on every token "
           "before it, so hits always start at the first block and stop at the first miss.",
           "A prompt never gets its last token from the cache: at most (len - 1) // 4 blocks hit. "
           "Go prompt by prompt, writing down which full blocks the cache holds after each one.",
           "Prompt 1 finds an empty cache; prompt 2 shares 10 tokens with it, so 2 full blocks; "
           "prompt 3 repeats prompt 1 but must recompute its last token."],
    wrong=[[0, 8, 12, 4, 0, 0, 12], [0, 2, 2, 1, 0, 0, 3], [0, 8, 8, 4, 0, 8, 12],
           [0, 8, 8, 4, 3, 0, 12], [0, 10, 11, 5, 2, 0, 14]],
    explanation="Per prompt: 0, 8, 8 (the repeat recomputes its last block), 4, 0 (shorter than a "
                "block), 0 (shifted: every block name differs), 12.",
)


# ---- exercise 2: which prefix survives eviction ---------------------------------------------------

EVICT_POOL_BLOCKS, EVICT_BLOCK_SIZE = 8, 4
EVICT_REQUESTS = {"A": list(range(100, 113)), "B": list(range(200, 213)), "C": list(range(300, 316))}


def evict_replay() -> dict[str, int]:
    """A and B (13 tokens) run and finish, C (16 tokens) runs, then A comes back: tokens each hits."""
    from ..memory.block_manager import BlockManager
    bm = BlockManager(EVICT_POOL_BLOCKS, EVICT_BLOCK_SIZE, enable_prefix_caching=True)
    hits = {}
    for name, free_after in (("A", True), ("B", True), ("C", False)):
        hits[name] = bm.allocate(name, EVICT_REQUESTS[name])
        if free_after:
            bm.free(name)
    hits["A again"] = bm.allocate("A again", EVICT_REQUESTS["A"])
    return hits


_FULL = (len(EVICT_REQUESTS["A"]) - 1) // EVICT_BLOCK_SIZE * EVICT_BLOCK_SIZE
_EVICT_MISTAKES = [
    (_FULL, "Not all of A's cached blocks can have survived: C needed more blocks than the empty ones "
            "left, so cached blocks were evicted. Whose, and which end of A first?"),
    (_FULL - EVICT_BLOCK_SIZE, "C evicted two cached blocks, not one: which two were the least recently "
                               "used?"),
    (0, "A's blocks were freed tail first, so its tail is the least recently used end: does C's "
        "eviction reach A's first block?"),
    (NotMultipleOf(EVICT_BLOCK_SIZE), "hits come in whole blocks: a block that only partly matches is "
                                      "never a hit."),
]

evicted_prefix = Exercise(
    "ch07.evicted_prefix",
    "A pool of 8 blocks of 4 tokens, prefix caching on. A and B (13 tokens each) run and finish; "
    "then C (16 tokens, nothing in common) runs; then A comes back. How many of A's tokens hit "
    "the cache the second time?",
    evict_replay()["A again"],
    mistakes=_EVICT_MISTAKES,
    hints=["A freed block keeps its name until the pool hands it out again; this manager hands out "
           "empty blocks first, then cached ones, least recently used first.",
           "Count the empty blocks C can take, then how many cached ones it must evict, and in which "
           "order a finished request's blocks were freed.",
           "A's and B's partly filled last blocks have no name, so they are empty again; C evicts two "
           "cached blocks, and A's tail was freed before its head."],
    wrong=[0, 12, 8],
    explanation="C takes the two empty blocks and evicts A2 and A1 (A was freed tail first, so its "
                "tail is least recently used); A0 survives: 4 tokens hit.",
)

