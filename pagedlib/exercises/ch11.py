"""Chapter 11 exercises: steps to a long prompt's first token under a token budget; one budgeted step.

Both follow :mod:`pagedlib.engine.scheduler` with ``max_num_batched_tokens``: each step schedules at most
``budget`` new tokens, the running requests' decode tokens first (one each, oldest first), then prefill
chunks in arrival order, a prompt that does not fit being cut into chunks over several steps. That is
``scheduling="decode_first"`` (Sarathi-Serve's stall-free batching); in vLLM v1's order
(``scheduling="vllm"``, the default) exercise 1 comes out the same, since the decoding requests are
older than the new prompt and v1 walks the running requests oldest first.
"""
from __future__ import annotations

from . import Exercise

# ---- exercise 1: predict the steps to the first token ----------------------------------------

PROMPT_LEN, NUM_DECODING, BUDGET = 1_000, 8, 256


def steps_to_first_token(prompt_len: int, num_decoding: int, budget: int) -> int:
    """Steps until a new prompt's first token, while ``num_decoding`` requests keep decoding."""
    per_step = budget - num_decoding                 # the decodes go first
    return -(-prompt_len // per_step)                # the last chunk's step samples the first token


_STEPS_MISTAKES = [
    (-(-PROMPT_LEN // BUDGET), f"That is the prompt over the whole budget: the {NUM_DECODING} decodes are "
                               "scheduled first, so less of each step is left for the prompt."),
    (steps_to_first_token(PROMPT_LEN, NUM_DECODING, BUDGET) + 1,
     "One too many: the step that computes the prompt's last chunk also samples its first token."),
    (1, "A step schedules at most the budget's tokens: the whole prompt cannot fit in one step."),
]

steps_to_first = Exercise(
    "ch11.steps_to_first",
    f"Budget {BUDGET} tokens per step, {NUM_DECODING} requests decoding (one token each, every step), "
    f"and a {PROMPT_LEN:,}-token prompt arrives alone in the queue. How many steps, counting the "
    "step it starts in, until that request samples its first token?",
    steps_to_first_token(PROMPT_LEN, NUM_DECODING, BUDGET),
    mistakes=_STEPS_MISTAKES,
    hints=["Decodes first: every step gives each running request its one token before any prompt gets "
           "a chunk.",
           f"So each step leaves {BUDGET} minus the decodes for the prompt; count the chunks it takes.",
           f"ceil({PROMPT_LEN} / ({BUDGET} - {NUM_DECODING})): the step of the last chunk samples."],
    wrong=[4, 6, 1],
    explanation="Each step has 256 - 8 = 248 tokens left for the prompt: 4 steps cover 992 tokens, the "
                "5th computes the last 8 and samples the first token.",
)

# ---- exercise 2: one budgeted step ------------------------------------------------------------


def plan_step(decoding: list[str], prefilling: list[tuple[str, int]], budget: int) -> list[tuple[str, int]]:
    """The tokens each request gets in one step: ``[(request, num_tokens), ...]`` in schedule order.

    ``decoding``: requests that decode (one token each), oldest first. ``prefilling``: ``(request,
    prompt tokens still to compute)`` in arrival order. Decodes first, then prefill chunks, never more
    than ``budget`` tokens in all; a request that gets nothing is left out.
    """
    plan, left = [], budget
    for request in decoding:
        if left == 0:
            break
        plan.append((request, 1))
        left -= 1
    for request, remaining in prefilling:
        if left == 0:
            break
        chunk = min(remaining, left)
        plan.append((request, chunk))
        left -= chunk
    return plan


def _prefill_first(decoding, prefilling, budget):
    plan, left = [], budget
    for request, remaining in prefilling:
        chunk = min(remaining, left)
        if chunk:
            plan.append((request, chunk))
            left -= chunk
    return plan + [(r, 1) for r in decoding[:left]]


def _no_chunking(decoding, prefilling, budget):
    plan, left = [], budget
    for request in decoding[:budget]:
        plan.append((request, 1))
        left -= 1
    for request, remaining in prefilling:
        if remaining <= left:                       # only whole prompts
            plan.append((request, remaining))
            left -= remaining
    return plan


def _decodes_ignore_budget(decoding, prefilling, budget):
    plan = [(r, 1) for r in decoding]
    left = max(0, budget - len(decoding))
    for request, remaining in prefilling:
        if left == 0:
            break
        plan.append((request, min(remaining, left)))
        left -= min(remaining, left)
    return plan


def _diagnose_plan(answer, expected, args) -> str | None:
    decoding, prefilling, budget = args
    if not isinstance(answer, list) or not all(isinstance(x, tuple) and len(x) == 2 for x in answer):
        return "Return a list of (request, num_tokens) tuples."
    total = sum(n for _, n in answer)
    if total > budget:
        return f"The plan schedules {total} tokens, over the budget of {budget}."
    if any(n == 0 for _, n in answer):
        return "Leave out a request that gets no tokens this step."
    if answer and decoding and answer[0][0] != decoding[0]:
        return "Decodes come first: a running request's next token is never delayed by a prompt."
    if total < min(budget, len(decoding) + sum(n for _, n in prefilling)):
        return "Tokens are left unused: a prompt that does not fit whole gets a chunk of what is left."
    return None


plan_step = Exercise(
    "ch11.plan_step",
    "Write plan_step(decoding, prefilling, budget): the (request, num_tokens) of one budgeted step.",
    plan_step,
    cases=[
        (["a", "b"], [("c", 10)], 8),                  # a chunk of c
        (["a", "b", "c"], [], 2),                       # more decodes than budget
        ([], [("x", 3), ("y", 5)], 6),                  # x whole, a chunk of y
        (["a"], [("x", 3), ("y", 5)], 100),             # everything fits
        (["a", "b"], [("x", 4)], 2),                    # no room for the prompt
        ([], [("x", 1000)], 256),
    ],
    diagnose=_diagnose_plan,
    hints=["Each step has a token budget: decode tokens are taken from it first, then prompt chunks, "
           "oldest first, until it is spent.",
           "Keep a counter of what is left of the budget; a decode takes 1, a prompt takes "
           "min(what it still needs, what is left).",
           "for r in decoding: stop at 0, else append (r, 1); then for r, n in prefilling: "
           "chunk = min(n, left); append (r, chunk); left -= chunk."],
    wrong=[_prefill_first, _no_chunking, _decodes_ignore_budget],
    explanation="Decodes first keeps every running request's time per output token steady; chunks let "
                "a long prompt fill what is left of each step instead of stalling everyone.",
)

# ---- exercise 3: guaranteed admission under a max_tokens cap -----------------------------------

POOL_BLOCKS, BLOCK_TOKENS, CAP_PROMPT, CAP = 4_096, 16, 500, 4_096


def guaranteed_concurrency(pool_blocks: int, block_size: int, prompt_len: int, max_new_tokens: int) -> int:
    """Requests that run at once under ``admission="guaranteed"`` (TensorRT-LLM's
    ``GUARANTEED_NO_EVICT``) when each holds the blocks of its prompt plus its whole cap."""
    per_request = -(-(prompt_len + max_new_tokens) // block_size)
    return pool_blocks // per_request


_CAP_MISTAKES = [
    (POOL_BLOCKS // (CAP // BLOCK_TOKENS),
     "That counts the cap alone: the blocks a request is promised also hold its prompt."),
    (POOL_BLOCKS // (CAP_PROMPT // BLOCK_TOKENS + 1),
     "That counts the prompt alone: guaranteed admission also holds blocks for every token the cap "
     "allows, generated or not."),
    (POOL_BLOCKS * BLOCK_TOKENS // CAP_PROMPT,
     "That is the on-demand answer at admission (prompts only, in tokens); guaranteed counts the cap too."),
]

guaranteed_requests = Exercise(
    "ch11.guaranteed_requests",
    f"A pool of {POOL_BLOCKS:,} blocks of {BLOCK_TOKENS} tokens; every request has a {CAP_PROMPT}-token "
    f"prompt and asks for max_tokens = {CAP:,}, though its reply ends (EOS) after about 300. Under "
    "admission=\"guaranteed\", how many requests run at once?",
    guaranteed_concurrency(POOL_BLOCKS, BLOCK_TOKENS, CAP_PROMPT, CAP),
    mistakes=_CAP_MISTAKES,
    hints=["Guaranteed admission promises each request every block it could ever need: its prompt plus "
           "max_tokens, whatever it will really generate.",
           f"Blocks per request: ceil(({CAP_PROMPT} + {CAP:,}) / {BLOCK_TOKENS}); then how many of those "
           "fit in the pool?",
           f"ceil({CAP_PROMPT + CAP} / {BLOCK_TOKENS}) = "
           f"{-(-(CAP_PROMPT + CAP) // BLOCK_TOKENS)} blocks each; {POOL_BLOCKS:,} // that."],
    wrong=[m for m, _ in _CAP_MISTAKES],
    explanation=f"Each request is promised ceil({CAP_PROMPT + CAP} / {BLOCK_TOKENS}) = "
                f"{-(-(CAP_PROMPT + CAP) // BLOCK_TOKENS)} blocks, so "
                f"{guaranteed_concurrency(POOL_BLOCKS, BLOCK_TOKENS, CAP_PROMPT, CAP)} fit, though their "
                "replies would need about 50 blocks each: the cap, not the reply, sets the batch.",
)
