"""Chapter 9 exercises: merge two partial softmax results; predict, then write, the split-K rule.

Convention (see ``ch00``): each reference solution is a plain function, then the same name is rebound
to the Exercise built from it, so a notebook calls ``ex.merge_partials.check(...)``.
"""
import math

import torch

from ..attention.triton_backend import MAX_SPLITS, MIN_TOKENS_PER_SPLIT   # the rule of choose_num_splits: one definition
from . import AtLeast, Exercise


def merge_partials(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor,
                   lse2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge the attention of two disjoint token ranges, each given as (normalised output, log-sum-exp)."""
    lse = torch.logaddexp(lse1, lse2)                    # log(e^lse1 + e^lse2), without overflow
    return torch.exp(lse1 - lse) * o1 + torch.exp(lse2 - lse) * o2, lse


def _merge_cases() -> list[tuple]:
    gen = torch.Generator().manual_seed(8)

    def o():
        return torch.randn(4, generator=gen)             # [head_dim]
    return [(o(), torch.tensor(1.5), o(), torch.tensor(0.2)),
            (o(), torch.tensor(-3.0), o(), torch.tensor(2.0)),
            (o(), torch.tensor(0.7), torch.zeros(4), torch.tensor(float("-inf"))),     # an empty range
            (o(), torch.tensor(1000.0), o(), torch.tensor(999.0))]                      # huge scores


def _diagnose_merge(answer, expected, args) -> str | None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return "Return two things: the merged output and the merged log-sum-exp."
    out, lse = answer
    if not isinstance(out, torch.Tensor) or not isinstance(lse, torch.Tensor):
        return "Both results should be tensors."
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
           "`lse = torch.logaddexp(lse1, lse2)`; "
           "`o = torch.exp(lse1 - lse) * o1 + torch.exp(lse2 - lse) * o2`; return `(o, lse)`."],
    explanation="Each range's weight is its share exp(lse_r - lse) of the total softmax sum, so the "
                "merge is exact and can be repeated.",
    wrong=[lambda o1, l1, o2, l2: ((o1 + o2) / 2, torch.logaddexp(l1, l2)),
           lambda o1, l1, o2, l2: ((l1.exp() * o1 + l2.exp() * o2) / (l1.exp() + l2.exp()),
                                   (l1.exp() + l2.exp()).log()),
           lambda o1, l1, o2, l2: (torch.exp(l1 - torch.maximum(l1, l2)) * o1
                                   + torch.exp(l2 - torch.maximum(l1, l2)) * o2, torch.maximum(l1, l2))],
)


def num_splits(num_seqs: int, num_kv_heads: int, max_seq_len: int, sms: int) -> int:
    """Splits per sequence for split-K decode, by the rule of ``pagedlib.attention.triton_backend.choose_num_splits``."""
    programs = max(1, num_seqs * num_kv_heads)          # the single pass's grid
    if programs >= sms:
        return 1                                        # the GPU is already full
    wanted = math.ceil(2 * sms / programs)              # about two programs per multiprocessor
    useful = max(1, max_seq_len // MIN_TOKENS_PER_SPLIT)
    return max(1, min(wanted, useful, MAX_SPLITS))


def _diagnose_splits(answer, expected, args) -> str | None:
    num_seqs, num_kv_heads, max_seq_len, sms = args
    programs = max(1, num_seqs * num_kv_heads)
    if programs >= sms and answer != 1:
        return f"{programs} programs already fill {sms} SMs: no split (1)."
    if answer > MAX_SPLITS:
        return f"More than {MAX_SPLITS} splits: apply the cap of {MAX_SPLITS}."
    if answer > max(1, max_seq_len // MIN_TOKENS_PER_SPLIT):
        return (f"Each split must keep at least {MIN_TOKENS_PER_SPLIT} tokens of the longest "
                f"sequence: cap by max_seq_len // {MIN_TOKENS_PER_SPLIT}.")
    if programs < sms and answer == (2 * sms) // programs and answer < expected:
        return "Round the splits up (math.ceil), not down."
    return None


num_splits = Exercise(
    "ch09.num_splits",
    "The single-pass kernel launches `num_seqs * num_kv_heads` programs. If that is at least `sms`, "
    "return 1. Otherwise return enough splits for about two programs per multiprocessor "
    "(`ceil(2 * sms / programs)`), but no more than `max_seq_len // 256` (each split keeps at least 256 "
    "tokens of the longest sequence), no more than 32, and never fewer than 1.",
    num_splits,
    cases=[(1, 8, 32768, 132), (64, 8, 4096, 132), (4, 8, 2048, 108), (2, 8, 512, 40), (1, 1, 100, 40),
           (16, 8, 8192, 132), (5, 8, 16384, 40), (1, 8, 1024, 132), (3, 4, 65536, 108)],
    diagnose=lambda answer, expected, args: _diagnose_splits(answer, expected, args),
    hints=["Splitting pays only while SMs would sit idle, and only while each split keeps enough "
           "tokens to be worth a program. So: no split when the grid already fills the GPU; "
           "otherwise aim for two programs per SM, then cap.",
           "Work it out for one sequence with 8 K/V heads on 132 multiprocessors: 8 programs, so "
           "about 264 / 8 = 33 splits would give two programs per multiprocessor; then apply the "
           "cap by tokens and the cap of 32, and never go below 1.",
           "`programs = num_seqs * num_kv_heads`; `1` if `programs >= sms`; else "
           "`max(1, min(math.ceil(2 * sms / programs), max_seq_len // 256, 32))`."],
    explanation="Two programs per SM keep every SM busy while one waits on memory; the caps keep "
                "each split worth its merge.",
    wrong=[lambda n, h, L, sms: max(1, min(math.ceil(2 * sms / (n * h)), 32)),        # no token cap
           lambda n, h, L, sms: 1 if n >= sms else max(1, min(math.ceil(2 * sms / n), L // 256, 32)),
           lambda n, h, L, sms: max(1, min(math.ceil(2 * sms / (n * h)), L // 256))],  # no cap of 32
)

PREDICT_SETTING = dict(num_seqs=4, num_kv_heads=8, max_seq_len=8192, sms=40)   # a T4, batch 4


_PREDICT_MISTAKES = [
    (1, "4 sequences x 8 K/V heads give fewer programs than the T4's 40 SMs, so it splits."),
    (2, "Two programs per SM need 80 programs, 2.5 per (sequence, K/V head): round up."),
    (AtLeast(10), "Neither cap (by tokens, or the maximum) binds here: two programs per SM does."),
]

predict_splits = Exercise(
    "ch09.predict_splits",
    "Predict, before the table below prints it: how many splits does the rule choose for 4 "
    "sequences of Llama-3-8B (8 K/V heads) with block tables of 8,192 tokens on a T4 (40 SMs)?",
    num_splits.reference(**PREDICT_SETTING),
    mistakes=_PREDICT_MISTAKES,
    hints=["First count the single pass's programs and compare them with the SMs.",
           "32 programs on 40 SMs leave SMs idle; the rule aims for about two programs per SM, "
           "2 * 40 in all, then checks the two caps.",
           "ceil(80 / 32), then min with 8192 // 256 and 32."],
    wrong=[1, 2, 10, 5],
    explanation="32 programs leave 8 of 40 SMs idle; ceil(80 / 32) = 3 splits give 96 programs, and "
                "neither cap binds.",
)

__all__ = ["merge_partials", "num_splits", "predict_splits", "PREDICT_SETTING"]
