"""Chapter 7 exercises: the hit count of a prompt mix under prefix caching."""
from __future__ import annotations

from . import Above, AllOf, Exercise, FirstWrong, Item, LengthNot, NotMultipleOf

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

def evict_replay_single_queue() -> dict[str, int]:
    """The same four requests as :func:`evict_replay` under vLLM v1's order: one LRU queue of every
    free block, cached or empty; a request's blocks go to its back tail first; a new block is taken
    from its head, and only then is its old name dropped (lazy eviction)."""
    from collections import deque
    size = EVICT_BLOCK_SIZE
    queue = deque(range(EVICT_POOL_BLOCKS))                # free blocks; the head is handed out next
    block_of: dict[tuple, int] = {}                        # a full block's name -> its block
    name_of: dict[int, tuple] = {}
    hits = {}
    script = [("A", "A", True), ("B", "B", True), ("C", "C", False), ("A again", "A", False)]
    for label, request, free_after in script:
        tokens = EVICT_REQUESTS[request]
        names = [tuple(tokens[:(i + 1) * size]) for i in range(len(tokens) // size)]  # full blocks
        found = []
        for name in names[:(len(tokens) - 1) // size]:     # a hit never covers the last token
            if name not in block_of:
                break
            found.append(block_of[name])
            queue.remove(block_of[name])
        table = list(found)
        for _ in range(-(-len(tokens) // size) - len(found)):
            block = queue.popleft()
            if block in name_of:
                del block_of[name_of.pop(block)]
            table.append(block)
        for block, name in zip(table, names):
            if name not in block_of:
                block_of[name], name_of[block] = block, name
        hits[label] = len(found) * size
        if free_after:
            queue.extend(reversed(table))
    return hits


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


evicted_prefix_v1 = Exercise(
    "ch07.evicted_prefix_v1",
    "The same pool and the same four requests (A and B run and finish, C runs, A comes back), under "
    "vLLM v1's order: one LRU queue of every free block, cached or empty, a finished request's "
    "blocks appended tail first, a new block always taken from the head. How many of A's tokens hit "
    "the cache the second time?",
    evict_replay_single_queue()["A again"],
    mistakes=[(evict_replay()["A again"],
               "That is this course's order, where C first takes the two empty blocks. In one queue "
               "there are no empty blocks to take first: C takes the four blocks at the head, the "
               "oldest free ones. Whose are they?"),
              ((len(EVICT_REQUESTS["A"]) - 1) // EVICT_BLOCK_SIZE * EVICT_BLOCK_SIZE,
               "C needs four blocks and takes them from the head of the queue, evicting what they "
               "held: not all of A's cached blocks can survive."),
              (NotMultipleOf(EVICT_BLOCK_SIZE),
               "hits come in whole blocks: a block that only partly matches is never a hit."),
              (Above(0), "C takes the four blocks at the head of the queue: which of A's blocks are "
                         "among them, given that A finished before B?")],
    hints=["In a single queue, the blocks freed earliest are handed out first, whether they hold "
           "cached K/V or not.",
           "Write the queue down: at the start 0 to 7. A takes four and gives them back tail first, "
           "to the back; then B. Which four blocks are at the head when C arrives?",
           "A finished before B, so A's four blocks (its tail first, then its head) are the head of "
           "the queue: C takes them all."],
    wrong=[8],
    explanation="A's four blocks were the oldest free blocks when C arrived, so C took them all, A's "
                "first block included: nothing of A survives, where two lists kept A's first block.",
)


# ---- exercise 4: the same prompts in a radix tree -------------------------------------------------

RADIX_PAGE_SIZE = 1                          # SGLang's default page: one token


def radix_hits(prompts: list[list[int]], page_size: int = RADIX_PAGE_SIZE) -> list[int]:
    """Cached tokens each prompt gets from :class:`~pagedlib.memory.radix_cache.RadixCache`, the
    prompts arriving one after another into a pool large enough that nothing is evicted."""
    from ..memory.radix_cache import RadixCache
    rc = RadixCache(num_pages=sum(len(p) for p in prompts), page_size=page_size)
    return [rc.allocate(i, p) for i, p in enumerate(prompts)]


_RADIX_HITS = radix_hits(PROMPT_MIX)
_RADIX_WHY = {
    1: "it shares the whole 10-token system prompt with prompt 1, to the token",
    2: "an exact repeat hits every token but its last, which is always computed for its logits",
    3: "it is the first 6 tokens of earlier prompts: all of them hit but its last",
    4: "shorter than a block, it still hits: a tree matches token by token (less its last token)",
    5: "shifted by one token, it starts with a token no edge from the root starts with",
    6: "it shares 12 tokens with prompts 1 and 3; its last three tokens were never sent before",
}
radix_hit_count = Exercise(
    "ch07.radix_hit_count",
    "The seven prompts of PROMPT_MIX again, allocated one after another into a radix tree with pages "
    "of one token (SGLang's default), nothing evicted. How many prompt tokens does each prompt get "
    "from the cache? Answer a list of seven numbers, one per prompt.",
    _RADIX_HITS,
    mistakes=[
        (LengthNot(len(PROMPT_MIX)), f"give one number per prompt: {len(PROMPT_MIX)} numbers, in the "
                                     "order of PROMPT_MIX."),
        (list(_EXPECTED_HITS), "Those are the hash chain's hits, in whole blocks of 4. The tree "
                               "compares tokens: a shared prefix that ends inside a block counts in "
                               "full."),
        (FirstWrong(0), "prompt 1: the tree starts empty."),
        *[(FirstWrong(i), f"prompt {i + 1} is off: {_RADIX_WHY[i]}.") for i in range(1, len(PROMPT_MIX))],
    ],
    hints=["A radix tree compares token ids, not block names: a prompt hits the longest prefix it "
           "shares with anything entered before, of any length, as long as it starts at the first "
           "token.",
           "For each prompt, find the earlier prompt with the longest common prefix, count the "
           "shared tokens, and cap at len - 1: the last prompt token is always computed.",
           "Prompt 2 shares 10 tokens with prompt 1; prompt 3 repeats prompt 1's 12 tokens, so 11 "
           "hit; prompt 4 (6 tokens) hits 5."],
    wrong=[list(_EXPECTED_HITS), [0, 10, 12, 6, 3, 0, 12], [0, 10, 11, 5, 2, 0, 14],
           [0, 10, 11, 5, 2, 1, 12], [0, 10, 11, 5, 0, 0, 12]],
    why="The tree hits every shared token but a prompt's last, wherever the shared prefix ends; "
        "the hash chain only whole blocks.",
    explanation="Per prompt: 0, 10 (the system prompt, to the token), 11 (a repeat, less its last "
                "token), 5, 2 (shorter than a block, and still a hit), 0 (shifted), 12. The hash "
                "chain's [0, 8, 8, 4, 0, 0, 12] loses every shared token that ends inside a block.",
)
