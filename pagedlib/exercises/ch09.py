"""Chapter 9 exercises: merge two partial softmax results; predict, then write, the split-K rule; then
write split-K in Triton: (a) one split's partial max, sum and output, (b) the merge of the partials.

Convention (see ``ch00``): each reference solution is a plain function, then the same name is rebound
to the Exercise built from it, so a notebook calls ``ex.merge_partials.check(...)``.
"""
import math

import torch
import triton
import triton.language as tl

from .. import runtime
from ..attention.inputs import random_paged_inputs
from ..attention.reference import gather_kv
from ..validation import cdiv
from ..attention.kernels.launch import (FULL_WAVE, MAX_SPLITS, MIN_TILES_PER_SPLIT,  # the rule of choose_num_splits:
                                       WAVE_SLACK)                                  # one definition
from . import Exercise
from .kernel_checks import KernelCase, KernelExercise, describe_cache, new_output, variant

DEVICE, DTYPE = runtime.DEVICE, runtime.DTYPE


def merge_partials(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor,
                   lse2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge the attention of two disjoint token ranges, each given as (normalised output, log-sum-exp)."""
    lse = torch.logaddexp(lse1, lse2)                    # log(e^lse1 + e^lse2), without overflow
    # both ranges empty: lse = -inf, and exp(-inf - (-inf)) would be NaN: subtract 0 instead (weights 0)
    safe = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)
    return torch.exp(lse1 - safe) * o1 + torch.exp(lse2 - safe) * o2, lse


def _merge_cases() -> list[tuple]:
    gen = torch.Generator().manual_seed(8)

    def o():
        return torch.randn(4, generator=gen)             # [head_dim]
    return [(o(), torch.tensor(1.5), o(), torch.tensor(0.2)),
            (o(), torch.tensor(-3.0), o(), torch.tensor(2.0)),
            (o(), torch.tensor(0.7), torch.zeros(4), torch.tensor(float("-inf"))),     # an empty range
            (torch.zeros(4), torch.tensor(float("-inf")), torch.zeros(4), torch.tensor(float("-inf"))),  # both
            (o(), torch.tensor(1000.0), o(), torch.tensor(999.0))]                      # huge scores


def _finite(lse: torch.Tensor) -> torch.Tensor:
    """``lse``, with -inf (two empty ranges) replaced by 0: what the mistakes below subtract, so that
    an answer that gives NaN there meets the diagnosis that says so, not another mistake's message."""
    return torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)


def _diagnose_merge(answer, expected, args) -> str | None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return "Return two things: the merged output and the merged log-sum-exp."
    out, lse = answer
    if not isinstance(out, torch.Tensor) or not isinstance(lse, torch.Tensor):
        return "Both results should be tensors."
    if (torch.isnan(out).any() or torch.isnan(lse).any()) and args[1] == args[3] == float("-inf"):
        return ("NaN for two empty ranges (both lse = -inf): the merged lse is -inf too, and "
                "exp(-inf - (-inf)) is NaN. Subtract 0 where the merged lse is -inf (torch.where): "
                "the weights are then 0 and the output 0, as an empty range's.")
    if torch.isnan(out).any() or torch.isnan(lse).any():
        return "NaN: exp(lse) overflows for large scores; subtract the larger lse before exponentiating."
    if torch.allclose(lse.double(), expected[1].double(), atol=1e-5) and out.shape == expected[0].shape:
        return "The log-sum-exp is right; the output's weights are not."
    return None


merge_partials = Exercise(
    "ch09.merge_partials",
    "Two splits attended to disjoint ranges of a sequence. Each returned its normalised output `o` "
    "[head_dim] and the log-sum-exp `lse` (a 0-d tensor) of its scores. Return the attention over both "
    "ranges together, and its log-sum-exp, as `(o, lse)`.",
    merge_partials,
    cases=_merge_cases(),
    diagnose=_diagnose_merge,
    hints=["exp(lse) is the sum of exp(score) over a range, so a range's share of the total weight is "
           "exp(lse1) / (exp(lse1) + exp(lse2)); the merged lse is the log of the summed weights.",
           "Compute the merged lse first, without exponentiating large numbers (subtract the larger "
           "lse, or use `torch.logaddexp`); then each range's weight is `exp(lse_r - lse)`.",
           "`lse = torch.logaddexp(lse1, lse2)`; `safe = torch.where(lse == float('-inf'), 0.0, lse)` "
           "(two empty ranges); `o = torch.exp(lse1 - safe) * o1 + torch.exp(lse2 - safe) * o2`; "
           "return `(o, lse)`."],
    explanation="Each range's weight is its share exp(lse_r - lse) of the total softmax sum, so the "
                "merge is exact and can be repeated.",
    mistakes=[
        (lambda o1, l1, o2, l2: ((o1 + o2) / 2, torch.logaddexp(l1, l2)),
         "The output averages the two ranges, as if they weighed the same: a range weighs its share "
         "of the total softmax sum, exp(lse_r - lse), which is a half only when lse1 = lse2."),
        (lambda o1, l1, o2, l2: ((o1 + o2) / 2, (l1 + l2) / 2),
         "That averages both the outputs and the log-sum-exps: the merged lse is the log of the summed "
         "weights, log(exp(lse1) + exp(lse2)), and each output counts by its share of them."),
        (lambda o1, l1, o2, l2: (o1 + o2, torch.logaddexp(l1, l2)),
         "The output adds the two normalised outputs: each is already divided by its own range's sum, "
         "so weigh each by its share exp(lse_r - lse) before adding."),
        (lambda o1, l1, o2, l2: (torch.exp(l1 - _finite(torch.maximum(l1, l2))) * o1
                                 + torch.exp(l2 - _finite(torch.maximum(l1, l2))) * o2, torch.maximum(l1, l2)),
         "Subtracting the larger lse avoids overflow, but the merged lse is not the larger one: it is "
         "log(exp(lse1) + exp(lse2)) (`torch.logaddexp`), and the weights are exp(lse_r - merged lse)."),
    ],
    wrong=[
           lambda o1, l1, o2, l2: ((l1.exp() * o1 + l2.exp() * o2) / (l1.exp() + l2.exp()),
                                   (l1.exp() + l2.exp()).log()),
           lambda o1, l1, o2, l2: (torch.exp(l1 - torch.maximum(l1, l2)) * o1
                                   + torch.exp(l2 - torch.maximum(l1, l2)) * o2, torch.maximum(l1, l2))],
)


def num_splits(programs: int, key_tiles: int, sms: int, per_sm: int) -> int:
    """Splits per sequence for split-K decode, by the rule of ``launch.choose_num_splits``."""
    slots = sms * per_sm                                # one wave: every SM holds per_sm programs
    if programs >= FULL_WAVE * slots:
        return 1                                        # the single pass nearly fills a wave
    most = max(1, min(MAX_SPLITS, slots, key_tiles // MIN_TILES_PER_SPLIT))   # every split > 4 key tiles

    def efficiency(s):                                  # how full the waves of programs * s programs are
        waves = programs * s / slots
        return waves / math.ceil(waves)
    best = max(efficiency(s) for s in range(1, most + 1))
    return min(s for s in range(1, most + 1) if efficiency(s) >= WAVE_SLACK * best)


def _wave_efficiency(programs: int, slots: int) -> float:
    return programs / slots / math.ceil(programs / slots)


def _diagnose_splits(answer, expected, args) -> str | None:
    programs, key_tiles, sms, per_sm = args
    slots = sms * per_sm
    if not isinstance(answer, int) or answer < 1:
        return "Return a whole number of splits, at least 1."
    if programs >= FULL_WAVE * slots and answer != 1:
        return (f"{programs} programs fill at least {FULL_WAVE:.0%} of a wave of {sms} x {per_sm}: "
                "no split (1).")
    if answer > 1 and key_tiles // answer < MIN_TILES_PER_SPLIT:
        return (f"{answer} splits of {key_tiles} key tiles leave a split {key_tiles // answer} tiles: "
                f"keep s <= key_tiles // {MIN_TILES_PER_SPLIT}.")
    if answer > MAX_SPLITS:
        return f"More than {MAX_SPLITS} splits: cap at {MAX_SPLITS}."
    if answer > expected:
        return ("Those waves are full enough, but fewer splits are too (within 85% of the best): "
                "take the smallest such count.")
    if answer < expected:
        return (f"{programs * answer} programs in waves of {slots} fill "
                f"{_wave_efficiency(programs * answer, slots):.0%} of them: under 85% of the best.")
    return None


num_splits = Exercise(
    "ch09.num_splits",
    "The single pass launches `programs` programs; the longest sequence has `key_tiles` tiles of keys; "
    "the GPU has `sms` multiprocessors, each holding `per_sm` programs at once, so a wave is `slots = "
    "sms * per_sm` programs. Return 1 if `programs >= 0.8 * slots`. Otherwise, for each split count `s` "
    "from 1 to `min(32, slots, key_tiles // 5)` (at least 1: every split keeps 5 key tiles), the wave "
    "efficiency of `programs * s` programs is `waves / ceil(waves)` with `waves = programs * s / "
    "slots`; return the smallest `s` whose efficiency is at least 0.85 times the best.",
    num_splits,
    cases=[(8, 512, 132, 4), (512, 128, 132, 4), (24, 512, 40, 4), (16, 32, 40, 1), (1, 3, 40, 4),
           (128, 256, 132, 4), (64, 256, 132, 4), (420, 256, 132, 4), (40, 2048, 108, 1), (1, 100000, 132, 1),
           (3, 9, 132, 4), (12, 128, 16, 2), (256, 512, 132, 4)],
    diagnose=lambda answer, expected, args: _diagnose_splits(answer, expected, args),
    hints=["Splitting pays only while the GPU's seats would sit idle, and only while each split keeps "
           "enough key tiles to be worth a program. A GPU runs programs in waves of `sms * per_sm`: a "
           "last wave that is nearly empty wastes most of its time.",
           "Work it out for 24 programs on 40 SMs of 4 seats (waves of 160): 1 split fills 15% of a "
           "wave, 5 splits 75%, 6 splits 90%, 20 splits three waves exactly, 100%. The best is 100%, "
           "and 6 is the fewest within 85% of it.",
           "`slots = sms * per_sm`; `if programs >= 0.8 * slots: return 1`; `most = max(1, min(32, "
           "key_tiles // 5))`; `eff = lambda s: (programs * s / slots) / math.ceil(programs * s / "
           "slots)`; `best = max(eff(s) for s in range(1, most + 1))`; return the first `s` with "
           "`eff(s) >= 0.85 * best`."],
    explanation="A wave that is only partly full leaves seats idle for a whole program's time; among "
                "the split counts that fill their waves well, the fewest split least and merge least.",
    mistakes=[
        (lambda p, t, sms, k: num_splits_one_per_sm(p, t, sms),
         "Those are waves of one program per SM: an SM holds `per_sm` programs at once, so a wave is "
         "`sms * per_sm` programs."),
    ],
    wrong=[lambda p, t, sms, k: 1,
           lambda p, t, sms, k: max(1, min(32, t // 5))],
)


def num_splits_one_per_sm(programs: int, key_tiles: int, sms: int) -> int:
    """The rule with waves of one program per SM (FlashAttention-3's unit): a mistake above."""
    return num_splits.reference(programs, key_tiles, sms, 1)


PREDICT_SETTING = dict(programs=3 * 8, key_tiles=8192 // 16, sms=40, per_sm=4)   # a T4, batch 3


_PREDICT_MISTAKES = [
    (1, "24 programs are 15% of the T4's wave of 40 SMs x 4: it splits."),
    (3, "Waves of 40 are one program per SM: a T4's SM holds 4 of these programs at once, so a wave "
        "is 4 x 40."),
    (5, "5 splits make 120 programs: 75% of one wave, under 85% of the best."),
    (20, "20 splits fill their waves exactly (100%), but a smaller count comes within 85% of that: "
         "take the fewest."),
]

predict_splits = Exercise(
    "ch09.predict_splits",
    "Predict, before the table below prints it: how many splits does the rule choose for 3 "
    "sequences of Llama-3-8B (8 K/V heads) with block tables of 8,192 tokens (512 key tiles of 16) "
    "on a T4 (40 SMs, each holding 4 decode programs at once)?",
    num_splits.reference(**PREDICT_SETTING),
    mistakes=_PREDICT_MISTAKES,
    hints=["First count the single pass's programs and compare them with 80% of a wave of 40 x 4.",
           "24 programs in waves of 160: try 5, 6 and 7 splits and see how full their last wave is.",
           "Efficiencies: 5: 0.75, 6: 0.9, 7: 0.53 (a second wave), 20: 1.0. The smallest within 0.85 "
           "of 1.0."],
    wrong=[1, 3, 5, 20],
    explanation="24 programs use 15% of a wave of 160; 6 splits give 144 programs, one wave 90% full, "
                "close enough to the best (20 splits, 100%) to take the fewer splits.",
)




# ---- the learner writes split-K in Triton -----------------------------------------------------------
# (a) ``split_partial``: one program per split, over its range of one sequence's tokens, keeps the
#     online softmax's running max ``m``, sum ``l`` and output, and stores them (the output normalised);
# (b) ``merge_splits``: one program per (sequence, head) row merges the splits' partials into the
#     attention over every token. Both are checked like chapter 8's kernels (``kernel_checks``).
SPLIT_BLOCK = 4                     # tokens per page in these cases
SPLIT_DIM = 16                      # head_dim


@triton.jit
def split_partial_kernel(out, m_out, l_out, query, key_cache, value_cache, block_table, seq_len, share, scale,
                         stride_block, stride_token,
                         BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    split = tl.program_id(0)                            # one program per split
    start = split * share                               # this split's tokens: start .. end - 1
    end = tl.minimum(start + share, seq_len)            # start >= end: an empty split
    offsets = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(query + dims).to(tl.float32)            # [HEAD_DIM] the new token's query
    m = float("-inf")                                   # running max of the scores
    l = 0.0                                             # running sum of exp(score - m)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)        # running sum of exp(score - m) * v
    for page in range(start // BLOCK_SIZE, tl.cdiv(end, BLOCK_SIZE)):   # share is whole pages
        block = tl.load(block_table + page)
        valid = page * BLOCK_SIZE + offsets < end       # [BLOCK_SIZE] tokens of this split
        ptrs = (block * stride_block + offsets * stride_token)[:, None] + dims[None, :]
        k = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0).to(tl.float32)
        v = tl.load(value_cache + ptrs, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.where(valid, tl.sum(q[None, :] * k, axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)                       # moves the old sums onto the new max
        p = tl.exp(s - m_new)                           # [BLOCK_SIZE]
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(out + split * HEAD_DIM + dims, acc / tl.where(l > 0, l, 1.0))   # an empty split: 0, not 0 / 0
    tl.store(m_out + split, m)
    tl.store(l_out + split, l)


def split_share(seq_len: int, num_splits: int, block_size: int = SPLIT_BLOCK) -> int:
    """Tokens per split: an equal share of ``seq_len``, rounded up to whole pages."""
    return cdiv(cdiv(seq_len, num_splits), block_size) * block_size


def _launch_split_partial(kernel, query, key_cache, value_cache, block_table, seq_len, num_splits):
    block_size, head_dim = key_cache.shape[1], key_cache.shape[3]
    outs = dict(out=new_output((num_splits, head_dim), torch.float32, query.device),   # [splits, HEAD_DIM]
                m_out=new_output((num_splits,), torch.float32, query.device),          # [splits]
                l_out=new_output((num_splits,), torch.float32, query.device))          # [splits]
    kernel[(num_splits,)](outs["out"], outs["m_out"], outs["l_out"], query, key_cache, value_cache, block_table,
                          seq_len, split_share(seq_len, num_splits, block_size), head_dim ** -0.5,
                          *key_cache.stride()[:2], BLOCK_SIZE=block_size, HEAD_DIM=head_dim)
    return outs


def split_partials_ref(query, key_cache, value_cache, block_table, seq_len: int, num_splits: int) -> dict:
    """Each split's (normalised output, max, sum) in PyTorch: the reference of (a) and the input of (b)."""
    k = gather_kv(key_cache, block_table, seq_len)[:, 0].float()          # [seq_len, HEAD_DIM] (one K/V head)
    v = gather_kv(value_cache, block_table, seq_len)[:, 0].float()
    scores = k @ query.float() * query.shape[0] ** -0.5                  # [seq_len]
    share = split_share(seq_len, num_splits, key_cache.shape[1])
    out = torch.zeros(num_splits, query.shape[0])
    m = torch.full((num_splits,), float("-inf"))
    l = torch.zeros(num_splits)
    for s in range(num_splits):
        lo, hi = min(s * share, seq_len), min((s + 1) * share, seq_len)
        if lo == hi:
            continue                                                      # an empty split
        m[s] = scores[lo:hi].max()
        p = torch.exp(scores[lo:hi] - m[s])
        l[s] = p.sum()
        out[s] = p @ v[lo:hi] / l[s]
    device = query.device
    return dict(out=out.to(device), m_out=m.to(device), l_out=l.to(device))


# (seq_len, num_splits): ragged ranges, an empty split, a split of one token, a one-token sequence
_SPLIT_SETTINGS = [(10, 3), (5, 3), (9, 2), (1, 4), (23, 4)]


def _split_case(i: int, seq_len: int, num_splits: int, *, query_scale: float = 1.0) -> tuple:
    x = random_paged_inputs([seq_len, 3], num_heads=1, num_kv_heads=1, head_dim=SPLIT_DIM, block_size=SPLIT_BLOCK,
                            dtype=DTYPE, device=DEVICE, seed=90 + i)
    query = (x.query[0, 0].float() * query_scale).to(DTYPE)            # [HEAD_DIM]
    table = x.block_tables[0]
    return query, x.key_cache, x.value_cache, table, seq_len, num_splits


def _split_partial_case(i, seq_len, num_splits) -> KernelCase:
    query, kc, vc, table, n, s = _split_case(i, seq_len, num_splits)
    share = split_share(n, s)
    ranges = [(min(j * share, n), min((j + 1) * share, n)) for j in range(s)]
    label = (f"seq_len {n}, {s} splits of {share} tokens: ranges {ranges}; cache {describe_cache(kc)}, "
             f"block table {table.tolist()}")
    return KernelCase(label, dict(query=query, key_cache=kc, value_cache=vc, block_table=table, seq_len=n,
                                  num_splits=s),
                      split_partials_ref(query, kc, vc, table, n, s), meta=dict(ranges=ranges))


def _diagnose_split_partial(got, case: KernelCase) -> str | None:
    want = case.expected
    empty = [j for j, (lo, hi) in enumerate(case.meta["ranges"]) if lo == hi]
    for j in empty:
        if torch.isnan(got["out"][j]).any():
            return (f"Split {j} has no tokens, so its l is 0 and acc / l is 0 / 0 = NaN: divide by "
                    "`tl.where(l > 0, l, 1.0)`, so an empty split stores 0 (its weight in the merge is 0).")
    if len(want["m_out"]) > 1 and (got["m_out"] == got["m_out"][0]).all() and (got["l_out"] == got["l_out"][0]).all():
        return ("Every split stored the same m and l: each program must attend only its own range, from "
                "`start = split * share` to `end = tl.minimum(start + share, seq_len)`.")
    if torch.allclose(got["m_out"], want["m_out"]) and torch.allclose(got["l_out"], want["l_out"], rtol=1e-3):
        unnormalised = want["out"] * want["l_out"][:, None]
        if torch.allclose(got["out"], unnormalised, rtol=1e-3, atol=1e-3):
            return "`out` holds acc, not acc / l: store each split's normalised output."
    return None


_partial_unmasked = variant(            # no mask: reads the unowned (NaN) slots
    split_partial_kernel,
    "k = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0).to(tl.float32)\n"
    "        v = tl.load(value_cache + ptrs, mask=valid[:, None], other=0.0).to(tl.float32)",
    "k = tl.load(key_cache + ptrs).to(tl.float32)\n"
    "        v = tl.load(value_cache + ptrs).to(tl.float32)")


_partial_zero_over_zero = variant(      # an empty split: 0 / 0
    split_partial_kernel, "acc / tl.where(l > 0, l, 1.0))", "acc / l)")


_partial_whole_sequence = variant(      # every split walks every token
    split_partial_kernel, "end = tl.minimum(start + share, seq_len)", "start, end = 0, seq_len")


split_partial = KernelExercise(
    "ch09.split_partial",
    "Fill in the kernel: program `split` attends the new token's query `query [HEAD_DIM]` to the "
    "tokens `split * share .. min((split + 1) * share, seq_len) - 1` of one sequence (one K/V head; "
    "`share` is a whole number of pages), read through `block_table` from `key_cache` / `value_cache "
    "[num_blocks, BLOCK_SIZE, 1, HEAD_DIM]`. Store its running max `m` of the scores to `m_out[split]`, "
    "its sum `l` of exp(score - m) to `l_out[split]`, and its normalised output (sum of exp(score - m) "
    "* v, divided by l) to `out[split, :]`. A split past the sequence's end stores m = -inf, l = 0 and "
    "an output of 0.",
    split_partial_kernel,
    launch=_launch_split_partial,
    cases=[_split_partial_case(i, n, s) for i, (n, s) in enumerate(_SPLIT_SETTINGS)],
    diagnose=_diagnose_split_partial,
    mistakes=[(_partial_unmasked,
               "K and V are loaded without the mask: the rows past the end of the sequence hold NaN here "
               "(whatever is in memory on a GPU), and p = 0 times NaN is NaN. Load both with "
               "`mask=valid[:, None], other=0.0`.")],
    hints=["It is chapter 8's online softmax, over a range instead of the whole sequence: the range "
           "starts at a page boundary, so walk the pages from `start // BLOCK_SIZE` and mask the tokens "
           "at or past `end`. An empty split runs no page at all: its l stays 0.",
           "Per page: load the block id, build `valid = page * BLOCK_SIZE + offsets < end`, load K and V "
           "with `mask=valid[:, None], other=0.0`, score with `-inf` where not valid, then move m, l and "
           "acc onto the new max with `alpha = tl.exp(m - m_new)`.",
           "`l = l * alpha + tl.sum(p, axis=0)`; `acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)`; "
           "after the loop store `acc / tl.where(l > 0, l, 1.0)`, `m` and `l`."],
    wrong=[_partial_unmasked, _partial_zero_over_zero, _partial_whole_sequence],
    explanation="Each split is an independent online softmax over its range; (m, l, out) is all the "
                "merge needs, and an empty split is m = -inf, l = 0.",
    diagnosis_names_nan_cause=True,
)


# ---- (b) the merge of the splits ---------------------------------------------------------------------
@triton.jit
def merge_splits_kernel(out, partial_out, partial_m, partial_l, num_splits,
                        SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr):
    row = tl.program_id(0)                              # one program per (sequence, head) row
    splits = tl.arange(0, SPLITS_PAD)                   # [SPLITS_PAD], a power of two
    dims = tl.arange(0, HEAD_DIM)
    ok = splits < num_splits
    m = tl.load(partial_m + row * num_splits + splits, mask=ok, other=float("-inf"))   # [SPLITS_PAD]
    l = tl.load(partial_l + row * num_splits + splits, mask=ok, other=0.0)
    o = tl.load(partial_out + (row * num_splits + splits)[:, None] * HEAD_DIM + dims[None, :],
                mask=ok[:, None], other=0.0)            # [SPLITS_PAD, HEAD_DIM]
    m_all = tl.max(m, axis=0)                           # the largest score of the whole sequence
    w = l * tl.exp(m - m_all)                           # each split's sum, on the common max; empty: 0
    w = w / tl.sum(w, axis=0)
    tl.store(out + row * HEAD_DIM + dims, tl.sum(w[:, None] * o, axis=0))


def _launch_merge_splits(kernel, partial_out, partial_m, partial_l):
    rows, num_splits, head_dim = partial_out.shape
    out = new_output((rows, head_dim), torch.float32, partial_out.device)   # [rows, HEAD_DIM]
    kernel[(rows,)](out, partial_out, partial_m, partial_l, num_splits,
                    SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim)
    return out


def _merge_splits_case(settings: list[tuple[int, int]], num_splits: int, seed: int, query_scale: float = 1.0,
                       note: str = "") -> KernelCase:
    outs, ms, ls, full = [], [], [], []
    for i, (n, _) in enumerate(settings):
        query, kc, vc, table, n, s = _split_case(seed + i, n, num_splits, query_scale=query_scale)
        part = split_partials_ref(query, kc, vc, table, n, s)
        outs.append(part["out"])
        ms.append(part["m_out"])
        ls.append(part["l_out"])
        k = gather_kv(kc, table, n)[:, 0].float()
        v = gather_kv(vc, table, n)[:, 0].float()
        full.append(torch.softmax(k @ query.float() * SPLIT_DIM ** -0.5, 0) @ v)   # every token at once
    inputs = dict(partial_out=torch.stack(outs), partial_m=torch.stack(ms), partial_l=torch.stack(ls))
    lens = [n for n, _ in settings]
    label = f"{len(lens)} rows of seq_len {lens}, {num_splits} splits each{note}"
    return KernelCase(label, inputs, torch.stack(full).to(DEVICE), meta=dict(lens=lens))


def _diagnose_merge_splits(got, case: KernelCase) -> str | None:
    o, m, l = (case.inputs[k].cpu() for k in ("partial_out", "partial_m", "partial_l"))
    g = got.cpu()
    if torch.isnan(g).any() and (m > 80).any():
        return ("The scores here reach several hundred, so exp(m) overflows to inf: weigh each split by "
                "`l * tl.exp(m - m_all)` with `m_all` the largest m (the same number, without overflow).")
    if torch.isnan(g).any() and triton.next_power_of_2(m.shape[1]) != m.shape[1]:
        return (f"There are {m.shape[1]} splits but SPLITS_PAD = {triton.next_power_of_2(m.shape[1])} lanes: "
                "mask the loads with `splits < num_splits` (other=-inf for m, 0.0 for l and the outputs), "
                "or the last lanes read the next row's partials, or past the end.")
    if torch.allclose(g, o.mean(1), atol=1e-4):
        return "That is the plain average of the splits: weigh each by its share of the softmax sum."
    if torch.allclose(g, (l[..., None] * o).sum(1) / l.sum(1, keepdim=True), atol=1e-4):
        return ("The weights are the sums l, but each l is relative to its own split's max m: bring them "
                "onto one max first, `l * tl.exp(m - m_all)`.")
    return None


_merge_average = variant(               # ignores the weights
    merge_splits_kernel, "tl.sum(w[:, None] * o, axis=0))", "tl.sum(o, axis=0) / num_splits)")


_merge_own_max = variant(               # each l on its own max
    merge_splits_kernel, "w = l * tl.exp(m - m_all)", "w = l")


_merge_overflows = variant(             # exp(m) overflows for large m
    merge_splits_kernel, "w = l * tl.exp(m - m_all)", "w = l * tl.exp(m)")


_merge_unmasked = variant(              # past num_splits: the next row's splits
    merge_splits_kernel,
    'm = tl.load(partial_m + row * num_splits + splits, mask=ok, other=float("-inf"))   # [SPLITS_PAD]\n'
    "    l = tl.load(partial_l + row * num_splits + splits, mask=ok, other=0.0)\n"
    "    o = tl.load(partial_out + (row * num_splits + splits)[:, None] * HEAD_DIM + dims[None, :],\n"
    "                mask=ok[:, None], other=0.0)            # [SPLITS_PAD, HEAD_DIM]",
    "m = tl.load(partial_m + row * num_splits + splits)\n"
    "    l = tl.load(partial_l + row * num_splits + splits)\n"
    "    o = tl.load(partial_out + (row * num_splits + splits)[:, None] * HEAD_DIM + dims[None, :])")


merge_splits = KernelExercise(
    "ch09.merge_splits",
    "Fill in the kernel: program `row` merges the `num_splits` partial results of one (sequence, head) "
    "row, as exercise (a) stored them: outputs `partial_out [rows, num_splits, HEAD_DIM]` (each "
    "normalised over its split), maxima `partial_m [rows, num_splits]` and sums `partial_l [rows, "
    "num_splits]` (an empty split has m = -inf, l = 0). Store to `out [rows, HEAD_DIM]` the attention "
    "over all the row's tokens. `SPLITS_PAD` is `num_splits` rounded up to a power of two.",
    merge_splits_kernel,
    launch=_launch_merge_splits,
    cases=[_merge_splits_case([(10, 3), (23, 3), (5, 3)], 3, seed=120),
           _merge_splits_case([(23, 4), (9, 4)], 4, seed=130),
           _merge_splits_case([(40, 4), (17, 4)], 4, seed=140, query_scale=60.0, note="; scores in the hundreds")],
    diagnose=_diagnose_merge_splits,
    hints=["Softmax over all tokens weighs each split by its share of the total sum of exp(score). "
           "A split's l is that sum measured from its own max m, so the splits' sums must first be put "
           "on one common max before they can be compared.",
           "Load m, l (masked: `other=-inf` for m, `0.0` for l) and the outputs; take `m_all = tl.max(m, "
           "axis=0)`; a split's weight is `l * tl.exp(m - m_all)`, normalised by the weights' sum.",
           "`w = l * tl.exp(m - m_all)`; `w = w / tl.sum(w, axis=0)`; "
           "`tl.store(out + row * HEAD_DIM + dims, tl.sum(w[:, None] * o, axis=0))`."],
    wrong=[_merge_average, _merge_own_max, _merge_overflows, _merge_unmasked],
    explanation="exp(m - m_all) moves each split's sum onto one max; the weights are then each split's "
                "exact share of the softmax, so the merge equals attention over every token.",
    diagnosis_names_nan_cause=True,
)

__all__ = ["merge_partials", "num_splits", "predict_splits", "PREDICT_SETTING", "split_partial", "merge_splits",
           "split_partial_kernel", "merge_splits_kernel", "split_share"]
