"""Chapter 10 exercises: the slots of one mixed step; which request the scheduler preempts; how
many steps a workload takes; and chapter 10b's: the padding rows of a CUDA graph.

All follow the scheduler of :mod:`pagedlib.engine.scheduler` (first come, first served, admission on demand,
preemption of the newest running request by recompute). The notebook checks the answers against
pagedlib's own scheduler and engine, so the references here are the ones the code really produces.
"""
from __future__ import annotations

from . import AllOf, AnyItem, Exercise, Item, LengthNot, Not, NotAnInt

# ---- exercise 1: the slots of one mixed step ---------------------------------------------------

# The chapter's hand-built step: A decodes its token at position 6, B (just admitted) computes the
# first 5 of its 10 prompt tokens. The tables are what the block manager hands out in the notebook.
MIXED_STEP = {"block_size": 4, "tables": {"A": [2, 3], "B": [1, 0, 4]},
              "positions": {"A": [6], "B": [0, 1, 2, 3, 4]}}


def _slots(step: dict) -> list[int]:
    bs = step["block_size"]
    return [step["tables"][name][pos // bs] * bs + pos % bs
            for name in ("A", "B") for pos in step["positions"][name]]


_POSITIONS = [p for name in ("A", "B") for p in MIXED_STEP["positions"][name]]
_B_FIRST = MIXED_STEP["tables"]["B"][0] * MIXED_STEP["block_size"]
_SLOT_MISTAKES = [
    (AnyItem(NotAnInt()), "Answer a list of ints, one slot per token of the batch."),
    (LengthNot(len(_POSITIONS)), f"The batch has {len(_POSITIONS)} tokens (A's one decode token, then B's "
                                 "chunk of 5): give one slot for each, in batch order."),
    (_POSITIONS, "Those are the positions. A slot is where the token's K/V goes in the cache: "
                 "block_table[position // block_size] * block_size + position % block_size."),
    (AllOf(*[Item(1 + i, _B_FIRST + p) for i, p in enumerate(MIXED_STEP["positions"]["B"])]),
     "B's slots run on from its first block, but position 4 is in B's second block, and a block "
     "table need not be contiguous: look its block up."),
    (Item(0, Not(_slots(MIXED_STEP)[0])), "A's slot is wrong: its token at position 6 goes to the block "
                                          "at index 6 // 4 of A's table, at offset 6 % 4."),
]

mixed_slots = Exercise(
    "ch10.mixed_slots",
    "Block size 4. A has computed 6 tokens and decodes its 7th (position 6) in this step; its block "
    "table is [2, 3]. B was just admitted with a 10-token prompt and computes positions 0 to 4 in this "
    "step; its block table is [1, 0, 4]. The batch holds A's token first, then B's five. Predict its "
    "`slot_mapping`: the cache slot of each of the 6 tokens, as a list of ints.",
    _slots(MIXED_STEP),
    mistakes=_SLOT_MISTAKES,
    hints=["A slot is one row of the cache: block id times block size plus the offset inside the "
           "block. The block id comes from the sequence's own block table, never from its position "
           "alone.",
           "For each token: which entry of its sequence's table holds its position (position // 4), "
           "and where inside that block (position % 4)?",
           "slot = table[pos // 4] * 4 + pos % 4 with A's table for A's token and B's for B's: "
           "A at 6 is table [2, 3] entry 1, offset 2."],
    wrong=[[6, 0, 1, 2, 3, 4], [14, 4, 5, 6, 7, 8], [15, 4, 5, 6, 7, 0], [14, 4, 5, 6, 7]],
    explanation="Each token's slot is its own sequence's block at position // 4, times 4, plus "
                "position % 4, so B's fifth token lands in block 0 though its first four are in block 1.",
)


# ---- exercise 2: who is preempted, and when ----------------------------------------------------

PREEMPT_SCENARIO = {"num_blocks": 5, "block_size": 4,
                    "requests": {"A": (7, 8), "B": (4, 8), "C": (2, 8)}}   # name: (prompt, output tokens)

preempted = ("C", 3)


_PREEMPT_MISTAKES = [
    (LengthNot(2), "Answer with a pair (name, step), for example (\"B\", 4)."),
    (Item(0, "A"), "A is the one that runs out of room, but the scheduler does not preempt whoever asks: "
                   "it protects the requests that have waited longest."),
    (Item(0, "B"), "B does need a block first, but in that step one is still free. Find the first step "
                   "where some request needs a block and none is left."),
    (Item(0, preempted[0]), "Right request, wrong step. Count the tokens each request holds at the start "
                            "of every step (its prompt plus the tokens generated so far) and find when "
                            "one crosses into a new block while no block is free."),
]

preempted = Exercise(
    "ch10.preempted",
    "A cache of 5 blocks of 4 tokens, `max_num_seqs` large, no token budget. Requests A (7-token prompt), B (4) and C (2) "
    "arrive together, in that order, each to generate 8 tokens. Step 1 admits all three. Which request is "
    "preempted first, and in which step? Answer a pair (name, step).",
    preempted,
    ignore_case=True,
    mistakes=_PREEMPT_MISTAKES,
    hints=["Preemption frees the newest running request's blocks, whoever asked for one. In each "
           "step every running request first needs room for the token it sampled last.",
           "Step 1 admits A, B and C: count the blocks their prompts take and what is left; then "
           "follow each request's token count step by step.",
           "A request holding n tokens needs a new block when n is a multiple of 4. After step 1 A, B, C "
           "hold 7, 4, 2 tokens; each adds one in step 2 and one in step 3. Which crosses a block edge "
           "when no block is left, and who is the newest then?"],
    wrong=[("A", 3), ("B", 2), ("C", 2), ("B", 6)],
    explanation=("B's 5th token takes the last free block in step 2, so when A's 9th token needs a "
                 "block in step 3 the newest request, C, gives up its own."),
)


# ---- exercise 3: how many steps ------------------------------------------------------------------

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
    "at most `max_num_seqs` run at once, blocks never run out and there is no token budget (each "
    "prompt is computed whole in its first step). How many engine steps does the workload take?",
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
    explanation="Each wave of max_num_seqs requests runs output_len steps (its prefill step already "
                "samples the first token), and the next wave starts only when it is done.",
)


# ---- exercise 4 (chapter 10b): the padding of a CUDA graph -------------------------------------------

def _graph_padding(rows: int = 250) -> int:
    """The padding rows of a step of ``rows`` (8 to 256) under vLLM's default capture sizes: below 256
    they are the multiples of 8, and 256 itself is captured (the rule itself, for every size:
    ``pagedlib.sim.cuda_graphs``; its test checks the two agree). Plain Python, for the site."""
    return -rows % 8


graph_padding = Exercise(
    "ch10.graph_padding",
    "vLLM captures CUDA graphs for the batch sizes 1, 2, 4, every multiple of 8 below 256, then every "
    "multiple of 16 from 256 up to 512 (`max_num_seqs` 256). A decode step of 250 requests runs in "
    "the smallest captured graph that holds it. How many padding rows does that graph compute? An "
    "integer.",
    _graph_padding(),
    mistakes=[(2, "248 is the multiple of 8 nearest to 250, but it is too small: a step is padded UP "
                  "to a size that holds all its rows."),
              (0, "250 is not a captured size: the sizes below it go up in steps of 8."),
              (256, "That is the size the step runs at; the question asks how many of its rows are "
                    "padding."),
              (22, "272 holds 250, but so does a smaller captured size: the coarser sizes start right "
                   "where the steps of 8 end.")],
    hints=["A graph replays fixed shapes: the step's rows are padded up to the smallest captured "
           "size that is at least as large.",
           "List the captured sizes around 250: multiples of 8 up to 248, then 256, 272, ...",
           "250 runs at 256: the padding is 256 - 250."],
    wrong=[2, 0, 256, 22],
    explanation="The step runs in the graph of 256 rows, so 6 of them are padding; below 256 the "
                "sizes are 8 apart, so a decode step never pads more than 7 rows there (3 rows below 8).",
)
