"""Chapter 13 exercises: the bytes a prefill engine hands to its decode engine; which replica a
prefix-aware router picks.

Reference solutions are plain functions or values; each name is then rebound to its Exercise, so a
notebook calls ``ex.pick_replica.check(my_function)``.
"""
from __future__ import annotations

from ..memory.capacity import MODELS
from . import Above, Below, Exercise

# ---- exercise 1: the K/V a 4K-token Llama-3-8B prefill hands over ----------------------------------

PROMPT_TOKENS = 4096
_LLAMA3_8B = MODELS["llama-3-8b"]     # 32 layers, 8 K/V heads of 128, fp16


def _transfer_bytes(tokens: int = PROMPT_TOKENS) -> int:
    spec = _LLAMA3_8B
    return 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes * tokens


transfer_bytes = Exercise(
    "ch13.transfer_bytes",
    f"A prefill engine computes a {PROMPT_TOKENS:,}-token prompt of Llama-3-8B (32 layers, 8 K/V "
    "heads of 128 elements, fp16) and hands the prompt's K/V to a decode engine. How many bytes "
    "move? An integer.",
    _transfer_bytes(),
    mistakes=[(_transfer_bytes() // 2, "Half: every token has a key AND a value vector in every layer."),
              (_transfer_bytes() * 4, "Llama-3-8B has 32 query heads but only 8 K/V heads (GQA): only "
                                      "the K/V heads are cached."),
              (Below(10**6), "Far too small: count every layer, both K and V, every token, 2 bytes "
                             "per element."),
              (Above(10**11), "Far too big: one token of Llama-3-8B holds 128 KiB of K/V.")],
    hints=["First the bytes of one token's K/V, then times the tokens.",
           "One token: 2 (K and V) x 32 layers x 8 K/V heads x 128 elements x 2 bytes.",
           f"2 * 32 * 8 * 128 * 2 * {PROMPT_TOKENS}"],
    wrong=[_transfer_bytes() // 2, _transfer_bytes() * 4, 0],
    explanation="128 KiB per token times 4,096 tokens is 512 MiB per request, a fifth of a second "
                "over a 25 GB/s link: why disaggregated engines move K/V over the fastest link they "
                "have (RDMA, NVLink).",
)


# ---- exercise 2: which replica the prefix-aware router picks ---------------------------------------


def pick_replica(cached: list[int], loads: list[int], load_cost: int) -> int:
    """The replica with the highest cached tokens - load_cost x load; on a tie the least loaded,
    then the lowest index (pagedlib.sim.router.route's "prefix_aware" rule)."""
    best = None
    for i, (c, load) in enumerate(zip(cached, loads)):
        key = (c - load_cost * load, -load, -i)
        if best is None or key > best[0]:
            best = (key, i)
    return best[1]


def _diagnose_pick(answer, expected, args):
    cached, loads, load_cost = args
    if not isinstance(answer, int) or not 0 <= answer < len(cached):
        return f"Return a replica's index, from 0 to {len(cached) - 1}."
    if answer == max(range(len(cached)), key=lambda i: (cached[i], -i)) != expected:
        return "That is the longest cached prefix alone: each waiting request costs load_cost tokens."
    if answer == min(range(len(cached)), key=lambda i: (loads[i], i)) != expected:
        return "That is the least loaded replica alone: a cached token saves one token of prefill."
    score = [c - load_cost * load for c, load in zip(cached, loads)]
    if score[answer] == score[expected]:
        return "That ties on the score; a tie goes to the least loaded replica, then the lowest index."
    return None


pick_replica = Exercise(
    "ch13.pick_replica",
    "A prefix-aware router knows, for each replica, how many leading tokens of the prompt it caches "
    "(`cached`) and how many requests it has unfinished (`loads`). Each unfinished request costs "
    "`load_cost` tokens. Return the index of the replica with the highest `cached - load_cost * load`; "
    "on a tie the least loaded, then the lowest index.",
    pick_replica,
    cases=[([0, 2048, 1024], [0, 0, 0], 256),
           ([0, 2048, 1024], [0, 9, 1], 256),          # the warm replica is too busy
           ([512, 512, 0], [3, 1, 0], 256),             # 512 - 768 < 512 - 256 = 256 > 0
           ([0, 0, 0, 0], [2, 1, 1, 3], 100),           # no cache anywhere: least loaded
           ([256, 0], [1, 0], 256),                     # a tie on the score: the less loaded
           ([4096, 4096], [2, 2], 1),                   # a full tie: the lower index
           ([1000], [50], 256)],
    diagnose=_diagnose_pick,
    hints=["Give every replica one number, the tokens it would save minus what its queue costs, and "
           "take the largest.",
           "score[i] = cached[i] - load_cost * loads[i]; break ties by the smaller load, then the "
           "smaller index: compare tuples (score, -load, -index).",
           "max(range(len(cached)), key=lambda i: (cached[i] - load_cost * loads[i], -loads[i], -i))"],
    wrong=[lambda c, l, k: max(range(len(c)), key=lambda i: (c[i], -i)),
           lambda c, l, k: min(range(len(c)), key=lambda i: (l[i], i)),
           lambda c, l, k: max(range(len(c)), key=lambda i: (c[i] - k * l[i], i))],
    explanation="A cached token is a token of prefill saved; a request ahead in line is time lost. "
                "Weighing the two in one unit keeps a warm replica from becoming a hot spot.",
)
