"""Chapter 10 exercises: which request the scheduler preempts; how many steps a workload takes.

Both follow the scheduler of :mod:`pagedlib.scheduler` (first come, first served, admission on demand,
preemption of the newest running request by recompute). The notebook checks the answers against
pagedlib's own scheduler and engine, so the references here are the ones the code really produces.
"""
from __future__ import annotations

from . import Exercise

# ---- exercise 1: who is preempted, and when ----------------------------------------------------

PREEMPT_SCENARIO = {"num_blocks": 5, "block_size": 4,
                    "requests": {"A": (7, 8), "B": (4, 8), "C": (2, 8)}}   # name: (prompt, output tokens)

preempted = ("C", 3)


def _diagnose_preempted(answer, expected) -> str | None:
    if not isinstance(answer, (list, tuple)) or len(answer) != 2:
        return "Answer with a pair (name, step), for example (\"B\", 4)."
    name, step = answer
    name = str(name).strip().upper()
    if name == "A":
        return ("A is the one that runs out of room, but the scheduler does not preempt whoever asks: "
                "it protects the requests that have waited longest.")
    if name == "B":
        return ("B does need a block first, but in that step one is still free. Find the first step "
                "where some request needs a block and none is left.")
    if name == expected[0] and step != expected[1]:
        return ("Right request, wrong step. Count the tokens each request holds at the start of every "
                "step (its prompt plus the tokens generated so far) and find when one crosses into a "
                "new block while no block is free.")
    return None


def _compare_preempted(answer, expected) -> bool:
    return (isinstance(answer, (list, tuple)) and len(answer) == 2
            and str(answer[0]).strip().upper() == expected[0]
            and not isinstance(answer[1], bool) and answer[1] == expected[1])


preempted = Exercise(
    "ch10.preempted",
    "A cache of 5 blocks of 4 tokens, `max_num_seqs` large. Requests A (7-token prompt), B (4) and C (2) "
    "arrive together, in that order, each to generate 8 tokens. Step 1 admits all three. Which request is "
    "preempted first, and in which step? Answer a pair (name, step).",
    preempted,
    compare=_compare_preempted,
    diagnose=_diagnose_preempted,
    hints=["Step 1 admits A, B and C: how many blocks do their prompts take, and how many are left? "
           "In each later step every running request first needs room for the token it sampled last.",
           "A request holding n tokens needs a new block when n is a multiple of 4. After step 1 A, B, C "
           "hold 7, 4, 2 tokens and each has one sampled token to add in step 2; in step 3 they add another.",
           "When a block is needed and none is free, the scheduler preempts the newest running request "
           "(the last admitted), even if another request is the one asking."],
    wrong=[("A", 3), ("B", 2), ("C", 2), ("B", 6)],
    explanation=("Step 1: A takes 2 blocks, B 1, C 1: one block is left. Step 2: B's 5th token needs a "
                 "block and takes the last one. Step 3: A's 9th token needs a block, none is free, so the "
                 "newest request, C, is preempted; its block goes to A. C waits at the front of the line "
                 "and is recomputed (prompt + its one generated token) when blocks free up."),
)


# ---- exercise 2: how many steps ------------------------------------------------------------------

def num_steps(num_requests: int, output_len: int, max_num_seqs: int) -> int:
    """Engine steps for ``num_requests`` requests that each generate ``output_len`` tokens, at most
    ``max_num_seqs`` at once, with a cache large enough for all of them."""
    waves = -(-num_requests // max_num_seqs)     # they all finish together, then the next wave starts
    return waves * output_len                    # the prefill step already yields the first token


def _diagnose_steps(answer, expected, args) -> str | None:
    n, out, k = args
    waves = -(-n // k)
    if answer == waves * (out + 1):
        return ("One step too many per wave: the step that computes a prompt (prefill) also samples the "
                "request's first token.")
    if answer == n * out // k or answer == n * out / k:
        return "A wave that is only partly full still takes as many steps as a full one."
    if answer == n * out:
        return "That is one request at a time: the requests of a wave run in the same steps."
    return None


num_steps = Exercise(
    "ch10.num_steps",
    "`num_requests` requests arrive together; each generates exactly `output_len` tokens (no end token), "
    "at most `max_num_seqs` run at once and blocks never run out. How many engine steps does the "
    "workload take?",
    num_steps,
    cases=[(5, 6, 2), (1, 1, 1), (4, 10, 4), (4, 10, 8), (7, 3, 3), (12, 20, 5), (3, 1, 1), (100, 16, 32)],
    diagnose=_diagnose_steps,
    hints=["Every running request gets exactly one new token per step, and the step that admits a "
           "request (its prefill) already produces its first token.",
           "With equal outputs, the first `max_num_seqs` requests finish in the same step; the next ones "
           "are admitted in the step after. How many such waves are there?",
           "Waves: `ceil(num_requests / max_num_seqs)`, each `output_len` steps long."],
    wrong=[lambda n, out, k: -(-n // k) * (out + 1), lambda n, out, k: n * out // k,
           lambda n, out, k: n * out],
)
