"""Chapter 8 exercises: the masked load of one page in Triton; the online-softmax update.

Convention (see ``ch00``): each reference solution is a plain function, then the same name is rebound
to the Exercise built from it, so a notebook calls ``ex.load_page.check(...)``.
"""
import inspect
import textwrap

import torch
import triton
import triton.language as tl

from .. import runtime
from . import Exercise


@triton.jit
def load_page_kernel(out, key_cache, block_table, seq_len, page, kv_head,
                     stride_block, stride_token, stride_head,
                     BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """out [BLOCK_SIZE, HEAD_DIM] = the key rows of logical page ``page``; rows past seq_len are 0."""
    offsets = tl.arange(0, BLOCK_SIZE)                  # [BLOCK_SIZE] rows of the page
    dims = tl.arange(0, HEAD_DIM)                       # [HEAD_DIM]
    block = tl.load(block_table + page)                 # 1. the physical block of this page
    valid = page * BLOCK_SIZE + offsets < seq_len       # 2. rows that hold tokens of the sequence
    rows = block * stride_block + offsets * stride_token + kv_head * stride_head   # 3. their pointers
    keys = tl.load(key_cache + rows[:, None] + dims[None, :], mask=valid[:, None], other=0.0)
    tl.store(out + offsets[:, None] * HEAD_DIM + dims[None, :], keys)


def load_page(key_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int, page: int,
              kv_head: int) -> torch.Tensor:
    """Launch ``load_page_kernel`` on one program: page ``page`` of a sequence, ``[block_size, head_dim]``."""
    block_size, head_dim = key_cache.shape[1], key_cache.shape[3]
    out = torch.empty(block_size, head_dim, dtype=key_cache.dtype, device=key_cache.device)
    load_page_kernel[(1,)](out, key_cache, block_table, seq_len, page, kv_head, *key_cache.stride()[:3],
                           BLOCK_SIZE=block_size, HEAD_DIM=head_dim)
    return out


def _page_cases() -> list[tuple]:
    """A small cache of 6 blocks x 4 tokens x 2 KV heads x 16 dims; slots no sequence owns hold NaN."""
    gen = torch.Generator().manual_seed(7)
    cache = torch.full((6, 4, 2, 16), float("nan"))            # [num_blocks, block_size, kv_heads, head_dim]
    table = torch.tensor([4, 1, 3], dtype=torch.int32)         # a sequence of 10 tokens: pages in blocks 4, 1, 3
    for page, block in enumerate(table.tolist()):
        rows = min(4, 10 - 4 * page)
        cache[block, :rows] = torch.randn(rows, 2, 16, generator=gen)
    cache, table = cache.to(runtime.DEVICE), table.to(runtime.DEVICE)
    return [(cache, table, 10, 0, 0), (cache, table, 10, 1, 1), (cache, table, 10, 2, 0),
            (cache, table, 10, 2, 1), (cache, table, 9, 2, 0)]


def _diagnose_page(answer, expected, args) -> str | None:
    if not isinstance(answer, torch.Tensor) or answer.shape != expected.shape:
        return None
    if torch.isnan(answer).any():
        return ("The result holds NaN: rows past seq_len were read from slots nobody wrote. "
                "Mask them in tl.load (mask=..., other=0.0).")
    cache, table, seq_len, page, kv_head = args
    if torch.allclose(answer.cpu(), cache[page, :, kv_head].nan_to_num(0.0).cpu()):
        return "These are the rows of block number `page`: look the page up in block_table first."
    return None


load_page = Exercise(
    "ch08.load_page",
    "Fill in `load_page_kernel`: one program loads logical page `page` of a sequence (its key rows for "
    "KV head `kv_head`) from `key_cache [num_blocks, block_size, num_kv_heads, head_dim]` through the "
    "sequence's `block_table`, with rows past `seq_len` loaded as 0, and stores them to `out "
    "[block_size, head_dim]`.",
    load_page,
    cases=_page_cases(),
    diagnose=_diagnose_page,
    hints=["Three steps: `block = tl.load(block_table + page)`; the mask says which of the page's rows "
           "are tokens of the sequence (position `page * BLOCK_SIZE + offsets` below `seq_len`); the "
           "pointer of row `r` is `key_cache + block * stride_block + r * stride_token + kv_head * "
           "stride_head`, plus `dims` along the row.",
           "`keys = tl.load(key_cache + rows[:, None] + dims[None, :], mask=valid[:, None], other=0.0)` "
           "with `rows = block * stride_block + offsets * stride_token + kv_head * stride_head`."],
    wrong=[lambda cache, table, n, page, h: cache[table[page].long(), :, h].clone(),   # no mask: NaN
           lambda cache, table, n, page, h: cache[page, :, h].nan_to_num(0.0)],       # no block table
    explanation="The kernel:\n" + textwrap.dedent(inspect.getsource(load_page_kernel.fn)),
)


def online_update(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor, scores: torch.Tensor,
                  values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one tile (``scores [n]``, ``values [n, head_dim]``) into the running (max, sum, output)."""
    m_new = torch.maximum(m, scores.max())              # the largest score seen so far
    alpha = torch.exp(m - m_new)                        # rescales everything summed under the old max
    p = torch.exp(scores - m_new)                       # [n] this tile's weights, unnormalised
    return m_new, l * alpha + p.sum(), acc * alpha + p @ values


def _update_cases() -> list[tuple]:
    gen = torch.Generator().manual_seed(11)
    start = (torch.tensor(float("-inf")), torch.tensor(0.0), torch.zeros(4))
    mid = (torch.tensor(2.5), torch.tensor(3.0), torch.randn(4, generator=gen))
    return [(*start, torch.randn(5, generator=gen), torch.randn(5, 4, generator=gen)),     # the first tile
            (*mid, torch.randn(3, generator=gen) + 4.0, torch.randn(3, 4, generator=gen)),  # a new max
            (*mid, torch.randn(6, generator=gen) - 3.0, torch.randn(6, 4, generator=gen)),  # max unchanged
            (torch.tensor(1.0), torch.tensor(1.0), torch.ones(4), torch.tensor([1.0]), torch.ones(1, 4))]


def _diagnose_update(answer, expected, args) -> str | None:
    if not isinstance(answer, (tuple, list)) or len(answer) != 3:
        return "Return three things: the new max, the new sum and the new output accumulator."
    names = ["the max m", "the sum l", "the accumulator acc"]
    for got, want, name in zip(answer, expected, names):
        if not (isinstance(got, torch.Tensor) and got.shape == want.shape
                and torch.allclose(got.double(), want.double(), rtol=1e-4, atol=1e-5)):
            return f"{name[0].upper()}{name[1:]} is off; the others may be fine."
    return None


online_update = Exercise(
    "ch08.online_update",
    "Fold one tile of scores and values into the running state of an online softmax: return the new "
    "(m, l, acc), where m is the largest score so far, l the sum of exp(score - m) and acc the sum of "
    "exp(score - m) * value, over every token seen so far.",
    online_update,
    cases=_update_cases(),
    diagnose=_diagnose_update,
    hints=["The new max is the larger of the old max and this tile's max. Everything summed so far was "
           "weighted by exp(score - old max); multiply it by exp(old max - new max) to move it onto the "
           "new max.",
           "`m_new = max(m, scores.max())`, `alpha = exp(m - m_new)`, `p = exp(scores - m_new)`; then "
           "`l * alpha + p.sum()` and `acc * alpha + p @ values`."],
    wrong=[lambda m, l, acc, s, v: (torch.maximum(m, s.max()), l + torch.exp(s - torch.maximum(m, s.max())).sum(),
                                    acc + torch.exp(s - torch.maximum(m, s.max())) @ v),          # no rescale
           lambda m, l, acc, s, v: (s.max(), l * torch.exp(m - s.max()) + torch.exp(s - s.max()).sum(),
                                    acc * torch.exp(m - s.max()) + torch.exp(s - s.max()) @ v)],  # max forgets
)

__all__ = ["load_page", "online_update"]
