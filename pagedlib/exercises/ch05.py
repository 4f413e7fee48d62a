"""Chapter 5 exercises: slots, gathering K/V through a block table, merging two pages' partial softmax,
FlashInfer's CSR page table, vLLM's legacy cache layout.

Convention (see ``ch00``): each reference solution is a plain function, then the same name is rebound
to the Exercise built from it, so a notebook calls ``ex.slot_of.check(...)``.
"""
from __future__ import annotations

import math

try:
    import torch
except ModuleNotFoundError:   # the site's in-browser Python (Pyodide): the checkers of lists and
    torch = None              # numbers load; the two tensor exercises need torch and are left out

from . import AnyItem, Exercise, Item, LengthNot, Not, default_compare


def slot_of(block_table: tuple, token: int, block_size: int) -> int:
    """The cache slot of token ``token`` of a sequence: its page's id times block_size, plus its offset."""
    return block_table[token // block_size] * block_size + token % block_size


slot_of = Exercise(
    "ch05.slot_of",
    "A sequence's pages are `block_table` (physical block ids, in order). In which slot of the cache "
    "(`slot = block_id * block_size + offset`) does its token number `token` (counting from 0) live?",
    slot_of,
    cases=[((7,), 0, 4), ((7,), 3, 4), ((7, 2), 4, 4), ((7, 2), 6, 4), ((3, 0, 5), 9, 4),
           ((5, 1, 8), 47, 16), ((5, 1, 8), 16, 16), ((0, 1, 2), 2, 1), ((9, 4), 5, 4)],
    hints=["A slot numbers the cache's token rows from 0: block b's rows are slots b * block_size to "
           "b * block_size + block_size - 1. The block table says which block holds a logical page.",
           "First find the token's logical page (`token // block_size`) and its offset inside that page "
           "(`token % block_size`); the block table turns the logical page into a physical block.",
           "`block_table[token // block_size] * block_size + token % block_size`."],
    wrong=[lambda bt, t, bs: bt[t // bs] + t % bs,
           lambda bt, t, bs: t // bs * bs + t % bs],
    diagnose=lambda got, want, args: _diagnose_slot(got, *args),
    mistakes=[(lambda bt, t, bs: bt[t // bs] * bs + t // bs,
               "The offset inside the page is `token % block_size`; `token // block_size` is the "
               "logical page.")],
    explanation="The block table replaces the logical page by its physical block; the offset inside "
                "the page does not change.",
)


def _diagnose_slot(got, block_table, token, block_size) -> str | None:
    page, offset = token // block_size, token % block_size
    if got == page * block_size + offset:
        return "That is the token's position in a contiguous cache: look its page up in block_table."
    if got == block_table[page] + offset:
        return "A block id counts blocks, not slots: multiply it by block_size first."
    return None


def gather_keys(key_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first ``seq_len`` key rows of a sequence, ``[seq_len, num_kv_heads, head_dim]``, in order."""
    block_size = key_cache.shape[1]
    seq_blocks = (seq_len + block_size - 1) // block_size
    blocks = key_cache[block_table[:seq_blocks].long()]  # [seq_blocks, block_size, num_kv_heads, head_dim]
    return blocks.flatten(0, 1)[:seq_len]               # [seq_len, num_kv_heads, head_dim]


def _gather_cases() -> list[tuple]:
    """Pages of 4 tokens (as in the chapter), then pages of 8: the block size is the cache's."""
    gen = torch.Generator().manual_seed(5)
    cache = torch.randn(8, 4, 2, 3, generator=gen)         # [num_blocks, block_size=4, kv_heads, dim]
    table = torch.tensor([6, 1, 3, 0], dtype=torch.int32)  # [max_blocks]
    cache8 = torch.randn(5, 8, 1, 2, generator=gen)        # [num_blocks, block_size=8, kv_heads, dim]
    table8 = torch.tensor([4, 0, 2], dtype=torch.int32)
    return ([(cache, table, n) for n in (1, 4, 5, 11, 16)]
            + [(cache, torch.tensor([2], dtype=torch.int32), 3)]
            + [(cache8, table8, n) for n in (3, 9, 24)])


if torch is not None:
    gather_keys = Exercise(
        "ch05.gather_keys",
        "Return the first `seq_len` keys of a sequence as one contiguous tensor `[seq_len, num_kv_heads, "
        "head_dim]`, reading them from `key_cache [num_blocks, block_size, num_kv_heads, head_dim]` through "
        "the sequence's `block_table` (an int32 tensor of block ids).",
        gather_keys,
        cases=_gather_cases(),
        hints=["Attention needs the sequence's keys in token order, wherever its pages sit; only the first "
               "`ceil(seq_len / block_size)` entries of the block table belong to it.",
               "Token t is in block `block_table[t // block_size]` at row `t % block_size`. A loop over the "
               "tokens with `torch.stack` works; so does gathering whole pages at once.",
               "`block_size = key_cache.shape[1]`, `seq_blocks = ceil(seq_len / block_size)`. Whole blocks: "
               "`blocks = key_cache[block_table[:seq_blocks].long()]` is `[seq_blocks, block_size, kv_heads, "
               "dim]`; `blocks.flatten(0, 1)[:seq_len]` puts them end to end and drops the unused tail of the "
               "last block."],
        wrong=[lambda cache, table, n: cache.flatten(0, 1)[:n],
               lambda cache, table, n: cache[table.long()].flatten(0, 1)],
        diagnose=lambda got, want, args: _diagnose_gather(got, want, args[0].shape[1]),
        explanation="Indexing the cache with the used block ids puts the pages in logical order; flattening "
                    "them and cutting at seq_len drops the unused tail of the last page.",
    )


def _diagnose_gather(got, want, block_size: int) -> str | None:
    if not isinstance(got, torch.Tensor):
        return None
    if block_size != 4 and got.shape[1:] == want.shape[1:]:
        return (f"this cache has pages of {block_size} tokens: take the block size from "
                "key_cache.shape[1], not from the chapter's BLOCK_SIZE.")
    if got.shape[1:] == want.shape[1:] and got.shape[0] > want.shape[0]:
        return (f"{got.shape[0]} rows where the sequence has {want.shape[0]} tokens: cut off the "
                "unused tail of the last page (and the padding entries of the table).")
    if got.shape != want.shape:
        return (f"expected shape {list(want.shape)} ([seq_len, num_kv_heads, head_dim]); "
                f"got {list(got.shape)}.")
    return "Right shape, wrong rows: read the pages in the order the block table gives them."


def block_table_to_csr(block_tables: tuple, seq_lens: tuple, block_size: int) -> tuple:
    """FlashInfer's page table ``(indptr, indices, last_page_len)`` from padded block tables."""
    indptr, indices, last_page_len = [0], [], []
    for row, n in zip(block_tables, seq_lens):
        pages = (n + block_size - 1) // block_size
        indices += list(row[:pages])                      # only the pages the sequence uses
        indptr.append(indptr[-1] + pages)
        last_page_len.append(n - (pages - 1) * block_size)  # 1 .. block_size
    return indptr, indices, last_page_len


def _as_lists(answer):
    """Tensors and tuples in an answer become plain lists, so either kind is accepted."""
    if torch is not None and isinstance(answer, torch.Tensor):
        return answer.tolist()
    if isinstance(answer, (list, tuple)):
        return [_as_lists(a) for a in answer]
    return answer


def _compare_csr(answer, expected) -> bool:
    return default_compare(_as_lists(answer), _as_lists(expected))


block_table_to_csr = Exercise(
    "ch05.block_table_to_csr",
    "Convert padded block tables (one row per sequence, `seq_lens[s]` tokens each) to FlashInfer's CSR "
    "page table: return `(indptr, indices, last_page_len)` as three lists.",
    block_table_to_csr,
    cases=[(((3, 0), (5, 1), (2, 0)), (5, 8, 1), 4),
           (((7, 2, 9),), (9,), 4),
           (((4, 0, 0), (1, 2, 3), (6, 0, 0)), (16, 48, 17), 16),
           (((0,), (1,), (2,)), (1, 1, 1), 1)],
    compare=_compare_csr,
    diagnose=lambda got, want, args: _diagnose_csr(_as_lists(got), want, args[2]),
    explanation="indices drops the padding, indptr marks where each sequence's pages start, and "
                "last_page_len is 1 to block_size, so a length is block_size * (pages - 1) + last_page_len.",
    hints=["CSR stores a ragged table as one flat list plus offsets: no padding, and one more offset "
           "than there are rows.",
           "`indices` lists every sequence's used pages end to end (leave the padding out); `indptr[s]` "
           "and `indptr[s + 1]` say where sequence s's pages start and stop, so `indptr` starts at 0 and "
           "has one more entry than there are sequences.",
           "A sequence of n tokens uses `pages = ceil(n / block_size)` pages; its last page holds "
           "`n - (pages - 1) * block_size` tokens, between 1 and block_size (never 0): `indices += "
           "row[:pages]`, `indptr.append(indptr[-1] + pages)`, `last_page_len.append(n - (pages - 1) * "
           "block_size)`."],
    wrong=[lambda bt, lens, p: ([0] + [sum(-(-n // p) for n in lens[:i + 1]) for i in range(len(lens))],
                                [b for row, n in zip(bt, lens) for b in row[:-(-n // p)]],
                                [n % p for n in lens]),
           lambda bt, lens, p: ([0] + [len(row) * (i + 1) for i, row in enumerate(bt)],
                                [b for row in bt for b in row],
                                [n - (-(-n // p) - 1) * p for n in lens])],
)


def _diagnose_csr(got, want, block_size: int) -> str | None:
    """Name the usual CSR mistakes: a 0 for a full last page, padding left in, indptr not from 0."""
    if not (isinstance(got, list) and len(got) == 3 and all(isinstance(g, list) for g in got)):
        return "return three lists: (indptr, indices, last_page_len)."
    indptr, indices, last = got
    if len(last) == len(want[2]) and any(g == 0 and w == block_size for g, w in zip(last, want[2])):
        return ("last_page_len has a 0 where the last page is full: `n % block_size` is 0 for a full "
                "page, but a full last page holds block_size tokens (last_page_len is 1 to block_size).")
    if len(indices) > len(want[1]):
        return "indices is longer than the pages in use: leave the padding entries of each row out."
    if len(indptr) != len(want[0]) or (indptr and indptr[0] != 0):
        return "indptr starts at 0 and has one more entry than there are sequences."
    return None


# ---- a prediction: the CSR arrays of a batch ----------------------------------------------------

PREDICT_SEQ_LENS = (8, 5, 12, 1)     # tokens of four sequences
PREDICT_BLOCK_SIZE = 4


def _predicted_csr() -> tuple[list[int], list[int]]:
    indptr, _, last = block_table_to_csr.reference([(0,) * 3] * len(PREDICT_SEQ_LENS), PREDICT_SEQ_LENS,
                                         PREDICT_BLOCK_SIZE)
    return indptr, last


_PREDICT_CSR_MISTAKES = [
    (LengthNot(2), "give a pair: (indptr, last_page_len), two lists."),
    (Item(1, AnyItem(0)), "a last_page_len of 0? `n % block_size` is 0 for a full page, but a full last "
                          "page holds block_size tokens."),
    (Item(0, LengthNot(len(PREDICT_SEQ_LENS) + 1)),
     f"indptr starts at 0 and has {len(PREDICT_SEQ_LENS) + 1} entries: one more than the sequences."),
    (Item(0, Item(0, Not(0))),
     f"indptr starts at 0 and has {len(PREDICT_SEQ_LENS) + 1} entries: one more than the sequences."),
    (Item(0, Item(-1, sum(PREDICT_SEQ_LENS))), "indptr counts pages, not tokens."),
]

predict_csr = Exercise(
    "ch05.predict_csr",
    f"Four sequences of {', '.join(map(str, PREDICT_SEQ_LENS))} tokens, pages of {PREDICT_BLOCK_SIZE} "
    "tokens. Before running any code, write down FlashInfer's `indptr` and `last_page_len` for them: "
    "answer `(indptr, last_page_len)`.",
    _predicted_csr(),
    mistakes=_PREDICT_CSR_MISTAKES,
    hints=["indptr is a running total of pages, starting at 0; last_page_len says how full each "
           "sequence's last page is.",
           "Count each sequence's pages, ceil(n / 4), then add them up one by one for indptr.",
           "A sequence of n tokens: pages = ceil(n / 4); last_page_len = n - 4 * (pages - 1), which is 4 "
           "(not 0) when n is a multiple of 4."],
    wrong=[([0, 2, 4, 7, 8], [0, 1, 0, 1]), ([2, 4, 7, 8], [4, 1, 4, 1]), ([0, 8, 13, 25, 26], [4, 1, 4, 1])],
    explanation="Pages 2, 2, 3, 1 give indptr 0, 2, 4, 7, 8; the 8- and 12-token sequences end on full "
                "pages, so their last_page_len is 4.",
)


# ---- attention page by page -----------------------------------------------------------------------

def merge_partials(a: tuple, b: tuple) -> tuple:
    """Two pages' partial softmax ``(m, l, acc)`` (one head, values of one number) merged into one."""
    m_a, l_a, acc_a = a
    m_b, l_b, acc_b = b
    m = max(m_a, m_b)
    alpha, beta = math.exp(m_a - m), math.exp(m_b - m)     # move both sums onto the larger max
    return m, l_a * alpha + l_b * beta, acc_a * alpha + acc_b * beta


def _partial(scores: list[float], values: list[float]) -> tuple[float, float, float]:
    m = max(scores)
    weights = [math.exp(s - m) for s in scores]
    return m, sum(weights), sum(w * v for w, v in zip(weights, values))


_MERGE_CASES = [
    (_partial([1.0, 2.0], [3.0, -1.0]), _partial([0.5, 4.0], [2.0, 5.0])),    # b brings the larger max
    (_partial([6.0, -2.0, 1.0], [1.0, 0.0, 2.0]), _partial([3.0], [7.0])),     # a holds it
    (_partial([2.5, 2.5], [1.0, 3.0]), _partial([2.5, 1.0], [-4.0, 0.5])),     # equal maxima
    (_partial([-30.0, -31.0], [2.0, 1.0]), _partial([12.0, 10.0], [0.5, 9.0])),  # far apart
    ((float("-inf"), 0.0, 0.0), _partial([0.3, 0.7], [1.0, 2.0])),             # a: no token yet
]


def _diagnose_merge(got, want, args) -> str | None:
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = args
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return "Return three numbers: (m, l, acc)."
    if not math.isclose(got[0], want[0]):
        return "The merged max m is the larger of the two pages' maxima."
    if math.isclose(got[1], l_a + l_b) and not math.isclose(l_a + l_b, want[1]):
        return ("Each page's l was summed against its own max: multiply each by exp(its max - "
                "the new max) before adding.")
    if math.isclose(got[1], want[1]) and not math.isclose(got[2], want[2]):
        return "The sum l is right; acc needs the same rescale factors as l."
    return None


merge_partials = Exercise(
    "ch05.merge_partials",
    "Two pages of one sequence, each already reduced to its partial softmax `(m, l, acc)`: m the "
    "page's largest score, l the sum of exp(score - m), acc the sum of exp(score - m) * value (values "
    "of one number). Return the partial `(m, l, acc)` of both pages together, so that acc / l is the "
    "softmax average over all their tokens.",
    merge_partials,
    cases=_MERGE_CASES,
    diagnose=_diagnose_merge,
    hints=["Both sums are taken against a max. Sums against different maxima cannot be added: first "
           "move each onto the same max, the larger one, so that no exp() overflows.",
           "A sum of exp(s - m_a), multiplied by exp(m_a - m), is the sum of exp(s - m): the same "
           "tokens against the new max m. Do that to both pages' l and acc, then add.",
           "`m = max(m_a, m_b)`, `alpha = exp(m_a - m)`, `beta = exp(m_b - m)`, then "
           "`(m, l_a * alpha + l_b * beta, acc_a * alpha + acc_b * beta)`."],
    wrong=[lambda a, b: (max(a[0], b[0]), a[1] + b[1], a[2] + b[2])],
    mistakes=[(lambda a, b: (max(a[0], b[0]),
                             a[1] * math.exp(max(a[0], b[0]) - a[0]) + b[1] * math.exp(max(a[0], b[0]) - b[0]),
                             a[2] * math.exp(max(a[0], b[0]) - a[0]) + b[2] * math.exp(max(a[0], b[0]) - b[0])),
               "The rescale factor is exp(old max - new max), at most 1: the sums shrink when the max "
               "grows."),
              (lambda a, b: (max(a[0], b[0]), a[1] + b[1], a[2] + b[2]),
               "Each page's sums were taken against its own max: multiply each by exp(its max - the "
               "new max) before adding.")],
    why="Both pages' sums now stand against one max, so acc / l is the softmax over all their tokens.",
    explanation="A sum of exp(s - m_a) times exp(m_a - m) is the same sum of exp(s - m): rescaling moves "
                "each page's sums onto the common max. The kernel of chapter 8 does this after every "
                "tile, and its split-K version merges splits exactly so.",
)


# ---- vLLM's legacy cache layout -------------------------------------------------------------------

def legacy_key_to_nhd(key_cache_legacy: torch.Tensor) -> torch.Tensor:
    """vLLM's legacy key cache ``[num_blocks, num_kv_heads, head_dim // x, block_size, x]`` in this
    course's layout ``[num_blocks, block_size, num_kv_heads, head_dim]``."""
    num_blocks, kv_heads, dim_over_x, block_size, x = key_cache_legacy.shape
    nhd = key_cache_legacy.permute(0, 3, 1, 2, 4)     # [num_blocks, block_size, kv_heads, dim/x, x]
    return nhd.reshape(num_blocks, block_size, kv_heads, dim_over_x * x)


def _legacy_cases() -> list[tuple]:
    gen = torch.Generator().manual_seed(7)
    shapes = [(3, 2, 2, 4, 4), (2, 1, 4, 8, 4), (5, 3, 1, 2, 8), (1, 4, 2, 16, 8)]
    return [(torch.randn(*shape, generator=gen),) for shape in shapes]


def _diagnose_legacy(got, want, args) -> str | None:
    (legacy,) = args
    if not isinstance(got, torch.Tensor):
        return "return a tensor."
    if got.shape != want.shape:
        return (f"expected shape {list(want.shape)} ([num_blocks, block_size, num_kv_heads, "
                f"head_dim]); got {list(got.shape)}.")
    if torch.equal(got, legacy.reshape(want.shape)):
        return ("a reshape alone keeps the elements in their memory order: move the block_size "
                "axis next to num_blocks with a permute first.")
    return ("Right shape, wrong order: keep each element's (block, slot, head) and rebuild head_dim "
            "as (head_dim // x) * x, the x axis fastest.")


if torch is not None:
    legacy_key_to_nhd = Exercise(
        "ch05.legacy_key_to_nhd",
        "vLLM's legacy CUDA kernel stored keys as `[num_blocks, num_kv_heads, head_dim // x, block_size, "
        "x]`. Convert such a key cache to this course's layout `[num_blocks, block_size, num_kv_heads, "
        "head_dim]`.",
        legacy_key_to_nhd,
        cases=_legacy_cases(),
        diagnose=_diagnose_legacy,
        hints=["The same numbers, another order: the slot axis (block_size) must come right after the "
               "block axis, and head_dim is split in two axes, head_dim // x then x.",
               "Reorder the axes with `permute` to [num_blocks, block_size, num_kv_heads, head_dim // x, x], "
               "then merge the last two with `reshape`.",
               "`key_cache_legacy.permute(0, 3, 1, 2, 4).reshape(num_blocks, block_size, num_kv_heads, "
               "head_dim)`."],
        wrong=[lambda c: c.reshape(c.shape[0], c.shape[3], c.shape[1], c.shape[2] * c.shape[4]),
               lambda c: c.permute(0, 3, 1, 4, 2).reshape(c.shape[0], c.shape[3], c.shape[1],
                                                          c.shape[2] * c.shape[4])],
        explanation="Element (block, slot, head, d) sits at [block, head, d // x, slot, d % x] in the "
                    "legacy layout; the permute puts slot before head and the reshape joins d // x and d % x.",
    )

