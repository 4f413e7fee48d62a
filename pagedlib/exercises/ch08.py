"""Chapter 8 exercises: the decode kernel written by the learner, one Triton idea at a time.

(a) ``load_page``: one page of K for one K/V head, through the block table, with a mask;
(b) ``page_scores``: the scaled scores of one query against that page, -inf past the sequence's end;
(c) ``online_lse``: the online softmax over all of a sequence's pages (its running max and sum);
(d) ``decode``: the whole single-query decode kernel, one program per (sequence, query head), GQA;
(f) ``group_decode``: the library's decode, one program per (sequence, K/V head), the GQA group as
    the rows of one tile and both products as ``tl.dot``.
Then ``bug_lengths`` (predict which sequences a buggy kernel gets wrong) and ``fix_bug`` (fix it),
which the chapter places as exercise (e) before (f).

Each kernel exercise launches the learner's ``@triton.jit`` kernel on a few small cases and compares
it with PyTorch (see ``kernel_checks``). Convention (see ``ch00``): each reference kernel is defined
first, then the exercise is built from it, so a notebook calls ``ex.load_page.check(my_kernel)``.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from .. import runtime
from ..attention.reference import gather_kv, paged_attention_ref
from ..attention.inputs import random_paged_inputs
from . import AnyItem, Exercise, Not, OneOf
from .kernel_checks import KernelCase, KernelExercise, describe_cache, new_output, variant

DEVICE, DTYPE = runtime.DEVICE, runtime.DTYPE


# ---- (a) one page of K ---------------------------------------------------------------------------
@triton.jit
def load_page_kernel(out, key_cache, block_table, seq_len, page, kv_head,
                     stride_block, stride_token, stride_head,
                     BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)                  # [BLOCK_SIZE] rows of the page
    dims = tl.arange(0, HEAD_DIM)                       # [HEAD_DIM]
    block = tl.load(block_table + page)                 # 1. the page's physical block
    valid = page * BLOCK_SIZE + offsets < seq_len       # 2. rows holding tokens
    rows = block * stride_block + offsets * stride_token + kv_head * stride_head  # 3.
    ptrs = rows[:, None] + dims[None, :]
    keys = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0)
    tl.store(out + offsets[:, None] * HEAD_DIM + dims[None, :], keys)


def _launch_load_page(kernel, key_cache, block_table, seq_len, page, kv_head):
    block_size, head_dim = key_cache.shape[1], key_cache.shape[3]
    out = new_output((block_size, head_dim), key_cache.dtype, key_cache.device)  # [block_size, head_dim]
    kernel[(1,)](out, key_cache, block_table, seq_len, page, kv_head, *key_cache.stride()[:3],
                 BLOCK_SIZE=block_size, HEAD_DIM=head_dim)
    return out


def _page_rows(key_cache, block_table, seq_len, page, kv_head) -> torch.Tensor:
    """The reference for (a): the page's key rows of one K/V head, rows past seq_len zero."""
    block_size = key_cache.shape[1]
    rows = key_cache[int(block_table[page]), :, kv_head].clone()      # [block_size, head_dim]
    used = max(0, min(block_size, seq_len - page * block_size))
    rows[used:] = 0.0
    return rows


# one cache for (a) and (b): sequence 0 has 10 tokens (3 pages of 4, the last with 2 rows),
# sequence 1 has 5 (one block + 1: its second page holds a single token); unowned slots hold NaN
_PAGES = random_paged_inputs([10, 5], num_heads=2, num_kv_heads=2, head_dim=16, block_size=4,
                             dtype=DTYPE, device=DEVICE, seed=7)
_PAGE_CHOICES = [(0, 0, 0), (0, 2, 1), (1, 1, 0), (1, 0, 1), (0, 1, 1)]   # (seq, page, kv_head)


def _page_case(seq: int, page: int, kv_head: int, query: bool) -> KernelCase:
    n = int(_PAGES.seq_lens[seq])
    inputs = dict(key_cache=_PAGES.key_cache, block_table=_PAGES.block_tables[seq], seq_len=n,
                  page=page, kv_head=kv_head)
    rows = _page_rows(_PAGES.key_cache, _PAGES.block_tables[seq], n, page, kv_head)
    label = (f"seq_len {n}, page {page}, kv_head {kv_head}; cache "
             f"{describe_cache(_PAGES.key_cache)}, block table {_PAGES.block_tables[seq].tolist()}")
    if not query:
        return KernelCase(label, inputs, rows, meta=dict(seq=seq))
    q = _PAGES.query[seq, kv_head]                                      # [head_dim]
    scale = q.shape[0] ** -0.5
    used = max(0, min(4, n - page * 4))
    scores = rows.float() @ q.float() * scale                           # [block_size]
    scores[used:] = float("-inf")
    return KernelCase(label, dict(query=q, scale=scale, **inputs), scores,
                      meta=dict(seq=seq, rows=rows, q=q, scale=scale, used=used))


def _diagnose_page(got: torch.Tensor, case: KernelCase) -> str | None:
    cache, page, h = case.inputs["key_cache"], case.inputs["page"], case.inputs["kv_head"]
    unpaged = cache[page, :, h].nan_to_num(0.0)                         # block number `page`
    if torch.isnan(unpaged).sum() == 0 and torch.allclose(got.float(), unpaged.float()):
        return "These are the rows of block number `page`: look the page up in block_table first."
    if torch.isnan(got).any():
        return "Give tl.load a mask, `mask=valid[:, None]`, and `other=0.0` for the masked rows."
    return None


_load_page_unmasked = variant(          # no mask: reads the NaN slots past the end
    load_page_kernel, "keys = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0)",
    "keys = tl.load(key_cache + ptrs)")


_load_page_no_table = variant(          # the logical page used as a block: no block table
    load_page_kernel, "rows = block * stride_block", "rows = page * stride_block")


load_page = KernelExercise(
    "ch08.load_page",
    "Fill in the kernel: one program loads logical page `page` of a sequence (its key rows for K/V "
    "head `kv_head`) from `key_cache [num_blocks, block_size, num_kv_heads, head_dim]` through the "
    "sequence's `block_table`, with rows past `seq_len` loaded as 0, and stores them to "
    "`out [BLOCK_SIZE, HEAD_DIM]` (row-major).",
    load_page_kernel,
    launch=_launch_load_page,
    cases=[_page_case(s, p, h, query=False) for s, p, h in _PAGE_CHOICES],
    diagnose=_diagnose_page,
    mistakes=[
        (variant(load_page_kernel, " + kv_head * stride_head", ""),
         "These are the rows of K/V head 0 whatever `kv_head` is: a token's row holds every K/V "
         "head, so add `kv_head * stride_head` to each row's pointer."),
    ],
    hints=["A page is a logical thing: the block table says which physical block holds it, and only "
           "the rows before `seq_len` hold tokens. The other rows must not even be read.",
           "Three steps: load the block id (`tl.load(block_table + page)`); build the mask from each "
           "row's position `page * BLOCK_SIZE + offsets`; build one pointer per row and per dim from "
           "the three strides, then `tl.load(..., mask=..., other=0.0)`.",
           "`rows = block * stride_block + offsets * stride_token + kv_head * stride_head`, then "
           "`tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0)`."],
    wrong=[_load_page_unmasked, _load_page_no_table],
    explanation="The block table turns the logical page into a block; the mask keeps every load "
                "inside the tokens the sequence owns.",
)


# ---- (b) the scores of one page ------------------------------------------------------------------
@triton.jit
def page_scores_kernel(out, query, key_cache, block_table, seq_len, page, kv_head,
                       scale, stride_block, stride_token, stride_head,
                       BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)                  # [BLOCK_SIZE]
    dims = tl.arange(0, HEAD_DIM)                       # [HEAD_DIM]
    q = tl.load(query + dims).to(tl.float32)            # [HEAD_DIM] one query head
    block = tl.load(block_table + page)
    valid = page * BLOCK_SIZE + offsets < seq_len
    rows = block * stride_block + offsets * stride_token + kv_head * stride_head
    ptrs = rows[:, None] + dims[None, :]
    k = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0)
    s = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * scale        # [BLOCK_SIZE]
    tl.store(out + offsets, tl.where(valid, s, float("-inf")))


def _launch_page_scores(kernel, query, key_cache, block_table, seq_len, page, kv_head, scale):
    block_size, head_dim = key_cache.shape[1], key_cache.shape[3]
    out = new_output((block_size,), torch.float32, key_cache.device)   # [BLOCK_SIZE] fp32
    kernel[(1,)](out, query, key_cache, block_table, seq_len, page, kv_head, scale,
                 *key_cache.stride()[:3], BLOCK_SIZE=block_size, HEAD_DIM=head_dim)
    return out


def _diagnose_scores(got: torch.Tensor, case: KernelCase) -> str | None:
    used = case.meta["used"]
    want = case.expected
    if used < len(want) and torch.isfinite(got[used:]).all() and (got[used:] == 0).all():
        return ("The rows past seq_len are 0; make them -inf (`tl.where(valid, s, float('-inf'))`): "
                "exp(-inf) = 0 gives them no weight in a softmax, exp(0) = 1 would.")
    if torch.allclose(got[:used].float(), want[:used].float() / case.meta["scale"], atol=1e-3):
        return "The scores are not scaled: multiply q . k by `scale` (1 / sqrt(head_dim))."
    return None


_scores_zero_past_end = variant(        # 0 past the end, not -inf
    page_scores_kernel, 'tl.where(valid, s, float("-inf"))', "s")


_scores_unscaled = variant(page_scores_kernel, "axis=1) * scale", "axis=1)")   # forgot * scale


page_scores = KernelExercise(
    "ch08.page_scores",
    "Fill in the kernel: for one query head's vector `query [HEAD_DIM]`, store to `out [BLOCK_SIZE]` "
    "(fp32) the scores `scale * (query . k)` of the key rows of logical page `page` (K/V head "
    "`kv_head`), and -inf for the rows past `seq_len`.",
    page_scores_kernel,
    launch=_launch_page_scores,
    cases=[_page_case(s, p, h, query=True) for s, p, h in _PAGE_CHOICES],
    diagnose=_diagnose_scores,
    hints=["A score is a dot product of the query with one key row, times 1 / sqrt(head_dim). Rows "
           "that are not tokens of the sequence get -inf, so that a softmax gives them weight 0.",
           "Load the page as in exercise (a), load `q` as a `[HEAD_DIM]` vector, multiply it against "
           "every row (broadcast `q[None, :]`) and sum along the dims; then choose with `tl.where`.",
           "`s = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * scale` and "
           "`tl.store(out + offsets, tl.where(valid, s, float('-inf')))`."],
    wrong=[_scores_zero_past_end, _scores_unscaled],
    explanation="One dot product per row, scaled; -inf past the end, so a softmax gives those rows 0.",
)


# ---- (c) the online softmax over all pages: the log-sum-exp ------------------------------------
@triton.jit
def online_lse_kernel(out, query, key_cache, block_tables, seq_lens, kv_head, scale,
                      stride_qs, stride_kb, stride_kt, stride_kh, stride_bt,
                      BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    seq = tl.program_id(0)                              # one program per sequence
    seq_len = tl.load(seq_lens + seq)
    offsets = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(query + seq * stride_qs + dims).to(tl.float32)        # [HEAD_DIM]
    m = float("-inf")                                   # running max of the scores
    l = 0.0                                             # running sum of exp(score - m)
    for page in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_tables + seq * stride_bt + page)
        valid = page * BLOCK_SIZE + offsets < seq_len
        rows = block * stride_kb + offsets * stride_kt + kv_head * stride_kh
        ptrs = rows[:, None] + dims[None, :]
        k = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0)
        s = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * scale
        s = tl.where(valid, s, float("-inf"))                        # [BLOCK_SIZE]
        m_new = tl.maximum(m, tl.max(s, axis=0))
        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(s - m_new), axis=0)   # onto new max
        m = m_new
    tl.store(out + seq, m + tl.log(l))                  # log(sum of exp(score))


def _launch_online_lse(kernel, query, key_cache, block_tables, seq_lens, kv_head):
    num_seqs, head_dim = query.shape
    out = new_output((num_seqs,), torch.float32, query.device)        # [num_seqs] fp32
    kernel[(num_seqs,)](out, query, key_cache, block_tables, seq_lens, kv_head, head_dim ** -0.5,
                        query.stride(0), *key_cache.stride()[:3], block_tables.stride(0),
                        BLOCK_SIZE=key_cache.shape[1], HEAD_DIM=head_dim)
    return out


def _very_negative(x):
    """The inputs ``x`` with every score far below 0 (about -250): positive queries against negative
    keys (the slots no sequence owns keep their NaN). A softmax whose running max starts at 0.0
    instead of -inf then sums exp(-250) = 0 in fp32."""
    query = ((x.query.float().abs() + 1.0) * 10.0).to(x.query.dtype)           # [seqs, heads, dim]
    keys = x.key_cache.float()
    keys = torch.where(torch.isnan(keys), keys, -(keys.abs() + 3.0)).to(x.key_cache.dtype)
    return dataclasses.replace(x, query=query, key_cache=keys)


def _lse_case(lengths: list[int], block_size: int, kv_head: int, seed: int, boost: float = 1.0,
              negative: bool = False):
    x = random_paged_inputs(lengths, num_heads=2, num_kv_heads=2, head_dim=16,
                            block_size=block_size, dtype=DTYPE, device=DEVICE, seed=seed)
    if negative:
        x = _very_negative(x)
    q = (x.query[:, kv_head].float() * boost).to(DTYPE)               # [num_seqs, head_dim]
    scale = q.shape[1] ** -0.5
    lse, first_page = [], []
    for s, n in enumerate(lengths):
        k = gather_kv(x.key_cache, x.block_tables[s], n)[:, kv_head].float()   # [n, head_dim]
        scores = k @ q[s].float() * scale                                       # [n]
        lse.append(torch.logsumexp(scores, dim=0))
        first_page.append(torch.logsumexp(scores[:block_size], dim=0))
    label = (f"{len(lengths)} sequences of {', '.join(map(str, lengths))} tokens, pages of "
             f"{block_size}, kv_head {kv_head}" + (", scores in the hundreds" if boost > 1 else "")
             + (", every score near -250" if negative else ""))
    return KernelCase(label, dict(query=q, key_cache=x.key_cache, block_tables=x.block_tables,
                                  seq_lens=x.seq_lens, kv_head=kv_head),
                      torch.stack(lse), meta=dict(first_page=torch.stack(first_page)))


def _diagnose_lse(got: torch.Tensor, case: KernelCase) -> str | None:
    if torch.isinf(got).any() and torch.isfinite(case.expected).all():
        return ("An inf: exp overflowed on large scores. Subtract the running max before exponentiating "
                "(exp(s - m)), and add it back at the end: lse = m + log(l).")
    if torch.allclose(got.float(), case.meta["first_page"].float(), atol=1e-3):
        return "That is the log-sum-exp of the first page only: loop over all tl.cdiv(seq_len, BLOCK_SIZE)."
    return None


_lse_no_rescale = variant(              # the old sum not moved onto m_new
    online_lse_kernel, "l = l * tl.exp(m - m_new) +", "l = l +")


_lse_naive = variant(                   # no running max: exp overflows
    online_lse_kernel,
    "m_new = tl.maximum(m, tl.max(s, axis=0))\n"
    "        l = l * tl.exp(m - m_new) + tl.sum(tl.exp(s - m_new), axis=0)   # onto new max\n"
    "        m = m_new\n"
    "    tl.store(out + seq, m + tl.log(l))",
    "l = l + tl.sum(tl.exp(s), axis=0)\n"
    "    tl.store(out + seq, tl.log(l))")


online_lse = KernelExercise(
    "ch08.online_lse",
    "Fill in the kernel: one program per sequence walks all its pages and stores to `out[seq]` (fp32) "
    "the log-sum-exp of its scores, log(sum of exp(scale * q . k)) over its `seq_len` tokens "
    "(K/V head `kv_head`; its query is `query[seq]`, where `query` is `[num_seqs, head_dim]`), with the "
    "online softmax's running max `m` and sum `l`.",
    online_lse_kernel,
    launch=_launch_online_lse,
    cases=[_lse_case([1, 4, 5, 11], 4, kv_head=1, seed=20),
           _lse_case([9, 17, 8], 8, kv_head=0, seed=21),
           _lse_case([6, 13], 4, kv_head=1, seed=22, boost=100.0),
           _lse_case([3, 10], 4, kv_head=0, seed=23, negative=True)],
    diagnose=_diagnose_lse,
    mistakes=[
        (variant(online_lse_kernel, "l = l * tl.exp(m - m_new) +", "l = l +"),
         "`l` was not moved onto the new max: when a page raises m, the sum so far was measured "
         "against the old max, so multiply it by exp(m - m_new) before adding the page's terms."),
        (variant(online_lse_kernel, "m + tl.log(l))", "tl.log(l))"),
         "That is log(l), the log-sum-exp measured from the running max: l sums exp(score - m), so "
         "add m back at the end."),
        (variant(online_lse_kernel, 'm = float("-inf")', "m = 0.0"),
         "The running max started at 0.0: when every score is far below 0 (here about -250), "
         "exp(score - 0) underflows to 0, l stays 0 and log(l) is -inf. Start m at float('-inf'), "
         "so the first page's max becomes m."),
    ],
    hints=["Keep two numbers while you walk the pages: the largest score so far, m, and the sum of "
           "exp(score - m) so far, l. When a page raises the max, the old sum was measured against the "
           "old max and must be moved onto the new one. At the end, log-sum-exp = m + log(l).",
           "Loop `for page in range(0, tl.cdiv(seq_len, BLOCK_SIZE))`; in it, the scores of exercise (b) "
           "(with -inf past the end); then `m_new = tl.maximum(m, tl.max(s, axis=0))` and update l.",
           "`l = l * tl.exp(m - m_new) + tl.sum(tl.exp(s - m_new), axis=0)`, `m = m_new`; after the "
           "loop `tl.store(out + seq, m + tl.log(l))`. Start from `m = float('-inf')`, `l = 0.0`."],
    wrong=[_lse_no_rescale, _lse_naive],
    explanation="Rescaling l by exp(m - m_new) keeps one sum over every page, measured against the "
                "largest score, so nothing overflows.",
)


# ---- (d) the whole decode kernel -----------------------------------------------------------------
@triton.jit
def decode_kernel(out, query, key_cache, value_cache, block_tables, seq_lens, scale,
                  stride_qs, stride_qh, stride_kb, stride_kt, stride_kh, stride_bt,
                  BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
                  GROUP: tl.constexpr):
    seq, head = tl.program_id(0), tl.program_id(1)      # (sequence, query head)
    kv_head = head // GROUP                             # GQA: GROUP heads share one
    seq_len = tl.load(seq_lens + seq)
    offsets = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(query + seq * stride_qs + head * stride_qh + dims).to(tl.float32)
    m = float("-inf")
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)        # sum of exp(score - m) * value
    for page in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_tables + seq * stride_bt + page)
        valid = page * BLOCK_SIZE + offsets < seq_len
        rows = block * stride_kb + offsets * stride_kt + kv_head * stride_kh
        ptrs = rows[:, None] + dims[None, :]
        k = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0)
        v = tl.load(value_cache + ptrs, mask=valid[:, None], other=0.0)
        s = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * scale
        s = tl.where(valid, s, float("-inf"))                        # [BLOCK_SIZE]
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)                       # moves old sums to the new max
        p = tl.exp(s - m_new)                           # [BLOCK_SIZE]
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)   # [HEAD_DIM]
        m = m_new
    tl.store(out + seq * stride_qs + head * stride_qh + dims, acc / l)


def _launch_decode(kernel, query, key_cache, value_cache, block_tables, seq_lens):
    num_seqs, num_heads, head_dim = query.shape
    out = new_output(query.shape, query.dtype, query.device)   # [num_seqs, num_heads, head_dim]
    kernel[(num_seqs, num_heads)](out, query, key_cache, value_cache, block_tables, seq_lens,
                                  head_dim ** -0.5, query.stride(0), query.stride(1),
                                  *key_cache.stride()[:3], block_tables.stride(0),
                                  BLOCK_SIZE=key_cache.shape[1], HEAD_DIM=head_dim,
                                  GROUP=num_heads // key_cache.shape[2])
    return out


def _attend_heads(inputs: dict, kv_of_head: list[int]) -> torch.Tensor:
    """Decode attention in PyTorch where query head h reads K/V head kv_of_head[h]."""
    q, kc, vc = inputs["query"], inputs["key_cache"], inputs["value_cache"]
    outs = []
    for s, n in enumerate(inputs["seq_lens"].tolist()):
        k = gather_kv(kc, inputs["block_tables"][s], n).float()[:, kv_of_head]   # [n, heads, dim]
        v = gather_kv(vc, inputs["block_tables"][s], n).float()[:, kv_of_head]
        scores = torch.einsum("hd,nhd->hn", q[s].float(), k) * q.shape[-1] ** -0.5
        outs.append(torch.einsum("hn,nhd->hd", scores.softmax(dim=-1), v))      # [heads, dim]
    return torch.stack(outs)                                                    # [seqs, heads, dim]


def _decode_case(lengths: list[int], num_heads: int, num_kv_heads: int, block_size: int,
                 seed: int, shared: bool = False, negative: bool = False) -> KernelCase:
    x = random_paged_inputs(lengths, num_heads=num_heads, num_kv_heads=num_kv_heads, head_dim=16,
                            block_size=block_size, dtype=DTYPE, device=DEVICE, seed=seed,
                            shared_blocks=shared)
    if negative:
        x = _very_negative(x)
    label = (f"{len(lengths)} sequences of {', '.join(map(str, lengths))} tokens, pages of "
             f"{block_size}, {num_heads} query heads, {num_kv_heads} K/V head"
             + ("s" if num_kv_heads > 1 else "")
             + (", blocks shared between sequences" if shared else "")
             + (", every score near -250" if negative else ""))
    inputs = dict(zip(["query", "key_cache", "value_cache", "block_tables", "seq_lens"], x.args()))
    group = num_heads // num_kv_heads
    meta = dict(group=group, lengths=lengths)
    if group > 1:
        meta["interleaved"] = _attend_heads(inputs, [h % num_kv_heads for h in range(num_heads)])
    by_remainder = [h % group for h in range(num_heads)]          # `head % GROUP`: a slip
    if by_remainder != [h // group for h in range(num_heads)] and max(by_remainder) < num_kv_heads:
        meta["remainder"] = _attend_heads(inputs, by_remainder)
    return KernelCase(label, inputs, paged_attention_ref(*x.args()), meta=meta)


_DECODE_CASES = [_decode_case([1, 4, 5, 11], 2, 2, 4, seed=30),
                 _decode_case([9, 3, 16, 17], 4, 2, 8, seed=31),
                 _decode_case([5, 13], 4, 1, 4, seed=32, shared=True),
                 _decode_case([2, 7], 2, 1, 4, seed=34, negative=True)]


def _diagnose_decode(got: torch.Tensor, case: KernelCase) -> str | None:
    remainder = case.meta.get("remainder")
    if remainder is not None and torch.allclose(got.float(), remainder, atol=1e-3):
        return (f"Query head h read K/V head h % GROUP (GROUP = {case.meta['group']} here): the "
                "remainder is h's place inside its group, not the group. The GROUP consecutive query "
                "heads of a group share one K/V head: which group is h in?")
    interleaved = case.meta.get("interleaved")
    if interleaved is not None and torch.allclose(got.float(), interleaved, atol=1e-3):
        return (f"Query head h read K/V head h % num_kv_heads; with groups of {case.meta['group']}, "
                "consecutive query heads share a K/V head: `kv_head = head // GROUP`.")
    return None


_decode_first_page = variant(           # the first page only
    decode_kernel, "for page in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):", "for page in range(0, 1):")


_decode_no_rescale = variant(decode_kernel, "acc = acc * alpha +", "acc = acc +")   # acc not rescaled


_decode_wrong_group = variant(          # interleaved heads: not GQA's order
    decode_kernel, "kv_head = head // GROUP", "kv_head = head % (tl.num_programs(1) // GROUP)")


decode = KernelExercise(
    "ch08.decode",
    "Fill in the decode kernel: the program (seq, head) of the grid (num_seqs, num_heads) computes "
    "softmax(scale * q K^T) V for query head `head` of sequence `seq` over its `seq_len` cached tokens, "
    "found page by page through `block_tables`, and stores it to `out[seq, head]` (same strides as "
    "`query`; `value_cache` has the strides of `key_cache`). `GROUP` query heads share each K/V head.",
    decode_kernel,
    launch=_launch_decode,
    cases=_DECODE_CASES,
    diagnose=_diagnose_decode,
    mistakes=[
        (_decode_first_page,
         "That attends to the first page only: walk every page of the sequence, "
         "`for page in range(0, tl.cdiv(seq_len, BLOCK_SIZE))`, with the online softmax across them."),
        (variant(decode_kernel, "kv_head = head // GROUP", "kv_head = head"),
         "Query head h read K/V head h: with GROUP query heads per K/V head, there are fewer K/V "
         "heads than query heads, so the later heads read other tokens' rows. Each group of GROUP "
         "consecutive query heads shares one K/V head: `head // GROUP`."),
        (variant(decode_kernel, "l = l * alpha +", "l = l +"),
         "`l` was not rescaled: when a page raises m, the sum so far was measured against the old "
         "max; multiply it by alpha = exp(m - m_new) before adding the page's sum, as for acc."),
        (variant(decode_kernel, "acc = acc * alpha +", "acc = acc +"),
         "`acc` was not rescaled: when a page raises m, the weighted sum so far was measured against "
         "the old max; multiply it by alpha, the same factor as l, before adding the page's rows."),
        (variant(decode_kernel, "dims, acc / l)", "dims, acc)"),
         "The output is acc, not acc / l: the weights exp(score - m) sum to l, not to 1, so divide "
         "by l at the end."),
        (variant(decode_kernel, 'm = float("-inf")', "m = 0.0"),
         "The running max started at 0.0: when every score is far below 0 (here about -250), "
         "exp(score - 0) underflows to 0, l stays 0 and acc / l is 0 / 0 = NaN. Start m at "
         "float('-inf'), so the first page's max becomes m."),
        (variant(decode_kernel, "v = tl.load(value_cache + ptrs, mask=valid[:, None], other=0.0)",
                 "v = tl.load(value_cache + ptrs)"),
         "V is loaded without the mask: rows past the end hold NaN here (whatever is in memory on a "
         "GPU), and p = 0 times NaN is NaN. Load V with the same mask as K."),
        (variant(decode_kernel, "valid = page * BLOCK_SIZE + offsets < seq_len", "valid = offsets < seq_len"),
         "The mask is wrong on pages after the first: it lets rows past the end of the sequence "
         "through. Which token of the sequence is row `offsets` of page `page`?"),
    ],
    hints=["It is exercise (c) with values: besides m and l, keep acc, the sum of exp(score - m) times "
           "each value row. Whenever m rises, acc is rescaled by the same factor as l. The output is "
           "acc / l. With GQA, consecutive query heads share a K/V head.",
           "`kv_head = head // GROUP`; load V with the same row pointers and mask as K; per page: "
           "`m_new`, `alpha = tl.exp(m - m_new)`, `p = tl.exp(s - m_new)`, then update l and acc.",
           "`acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)` with "
           "`acc = tl.zeros([HEAD_DIM], dtype=tl.float32)` before the loop; after it "
           "`tl.store(out + seq * stride_qs + head * stride_qh + dims, acc / l)`."],
    wrong=[_decode_first_page, _decode_no_rescale, _decode_wrong_group],
    explanation="One pass over the block table, an online softmax rescaling both l and acc: every K/V "
                "row is read once and no score is stored.",
)


# ---- (f) the group in one tile, with tl.dot: the library's decode ------------------------------------
@triton.jit
def group_decode_kernel(out, query, key_cache, value_cache, block_tables, seq_lens, scale,
                        stride_qs, stride_qh, stride_kb, stride_kt, stride_kh, stride_bt,
                        BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
                        GROUP: tl.constexpr, GROUP_PAD: tl.constexpr):
    seq, kv_head = tl.program_id(0), tl.program_id(1)   # (sequence, K/V head)
    seq_len = tl.load(seq_lens + seq)
    rows = tl.arange(0, GROUP_PAD)                      # [GROUP_PAD] one row per query head
    heads = kv_head * GROUP + rows                      # the group's query heads
    row_ok = rows < GROUP                               # padded rows: not heads of the group
    offsets = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    q_ptrs = query + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)        # [GROUP_PAD, HEAD_DIM]
    m = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    l = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)
    for page in range(0, tl.cdiv(seq_len, BLOCK_SIZE)):
        block = tl.load(block_tables + seq * stride_bt + page)
        valid = page * BLOCK_SIZE + offsets < seq_len           # [BLOCK_SIZE]
        kv_rows = block * stride_kb + offsets * stride_kt + kv_head * stride_kh
        ptrs = kv_rows[:, None] + dims[None, :]
        k = tl.load(key_cache + ptrs, mask=valid[:, None], other=0.0)   # [BLOCK_SIZE, HEAD_DIM]
        v = tl.load(value_cache + ptrs, mask=valid[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale                      # [GROUP_PAD, BLOCK_SIZE]
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))                # [GROUP_PAD] one max per row
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)   # [GROUP_PAD, HEAD_DIM]
        m = m_new
    o = acc / l[:, None]
    tl.store(out + seq * stride_qs + heads[:, None] * stride_qh + dims[None, :], o,
             mask=row_ok[:, None])


GROUP_DIM = 16          # head_dim, page size and padded group of (f): tl.dot takes 16 or more a side


def _launch_group_decode(kernel, query, key_cache, value_cache, block_tables, seq_lens):
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    out = new_output(query.shape, query.dtype, query.device)   # [num_seqs, num_heads, head_dim]
    kernel[(num_seqs, num_kv_heads)](out, query, key_cache, value_cache, block_tables, seq_lens,
                                     head_dim ** -0.5, query.stride(0), query.stride(1),
                                     *key_cache.stride()[:3], block_tables.stride(0),
                                     BLOCK_SIZE=key_cache.shape[1], HEAD_DIM=head_dim, GROUP=group,
                                     GROUP_PAD=max(GROUP_DIM, triton.next_power_of_2(group)))
    return out


_GROUP_CASES = [_decode_case([1, 16, 17, 40], 4, 1, GROUP_DIM, seed=40),
                _decode_case([5, 33], 6, 2, GROUP_DIM, seed=41),
                _decode_case([20, 9, 31], 2, 2, GROUP_DIM, seed=42, shared=True),
                _decode_case([31, 2], 8, 2, GROUP_DIM, seed=43, negative=True)]

_group_alpha_by_column = variant(group_decode_kernel, "acc = acc * alpha[:, None] +", "acc = acc * alpha +")

group_decode = KernelExercise(
    "ch08.group_decode",
    "Fill in the decode kernel the library uses: the program (seq, kv_head) of the grid (num_seqs, "
    "num_kv_heads) loads the `GROUP` query heads that share `kv_head` as the rows of one "
    "`[GROUP_PAD, HEAD_DIM]` tile (`GROUP_PAD` >= 16 rows, padded rows masked), walks the pages with "
    "an online softmax per row, computes the scores and the weighted values with `tl.dot`, and "
    "stores each real row to `out[seq, head]`.",
    group_decode_kernel,
    launch=_launch_group_decode,
    cases=_GROUP_CASES,
    diagnose=_diagnose_decode,
    mistakes=[
        (variant(group_decode_kernel, "heads = kv_head * GROUP + rows", "heads = kv_head + rows"),
         "The rows are heads kv_head, kv_head + 1, ...: the group of K/V head kv_head is the GROUP "
         "consecutive query heads that start at kv_head * GROUP."),
        (_group_alpha_by_column,
         "`acc * alpha` rescaled the columns of acc, not its rows: alpha holds one factor per row "
         "(per query head), so broadcast it as a column, `alpha[:, None]`. Here GROUP_PAD and HEAD_DIM "
         "are both 16, so the shapes matched and nothing raised."),
        (variant(group_decode_kernel, "p = tl.exp(s - m_new[:, None])", "p = tl.exp(s - m_new)"),
         "`s - m_new` subtracted a row's max from each column: m_new holds one max per row, so "
         "broadcast it as a column, `m_new[:, None]` (GROUP_PAD and BLOCK_SIZE are both 16 here, so "
         "the shapes matched)."),
        (decode_kernel,
         "That is exercise (d)'s kernel, one program per query head; here the grid is (num_seqs, "
         "num_kv_heads), so only the first num_kv_heads heads got a program. Program (seq, kv_head) "
         "owns the GROUP query heads of its K/V head, one row each."),
        (variant(group_decode_kernel, "o = acc / l[:, None]", "o = acc / l"),
         "`acc / l` divided each column by a row's sum: l holds one sum per row, so divide by "
         "`l[:, None]`."),
        (variant(group_decode_kernel, '        s = tl.where(valid[None, :], s, float("-inf"))\n', ""),
         "Keys past the end of the sequence were scored: they load as 0, so their score is 0, not "
         "-inf, and they take weight in the softmax. `tl.where(valid[None, :], s, float('-inf'))`."),
    ],
    hints=["It is exercise (d) for GROUP query heads at once: the heads that share a K/V head become "
           "the rows of one query tile, so every K/V row loaded serves them all. Each row keeps its own "
           "m and l (vectors of GROUP_PAD), and acc is a [GROUP_PAD, HEAD_DIM] tile. tl.dot wants 16 "
           "rows or more, so the group is padded to GROUP_PAD rows that are masked on load and store.",
           "`heads = kv_head * GROUP + rows` with `rows = tl.arange(0, GROUP_PAD)`, `row_ok = rows < "
           "GROUP`; per page `s = tl.dot(q, tl.trans(k)) * scale` ([GROUP_PAD, BLOCK_SIZE]); reduce "
           "each row with `axis=1`; every per-row vector (m_new, alpha, l) meets a tile as a column, "
           "`[:, None]`.",
           "`m_new = tl.maximum(m, tl.max(s, axis=1))`, `p = tl.exp(s - m_new[:, None])`, `acc = acc * "
           "alpha[:, None] + tl.dot(p.to(v.dtype), v)`; at the end store `acc / l[:, None]` with "
           "`mask=row_ok[:, None]`."],
    wrong=[_group_alpha_by_column, decode_kernel],
    explanation="One program per K/V head loads each K/V row once for the whole group; both products "
                "are tl.dot (tensor-core mma on an A100 or H100, FMAs on a T4).",
)


# ---- find the bug ------------------------------------------------------------------------------
# Chapter 8 shows this kernel's source as a listing: its lines stay within 48 characters, the width
# a phone shows at full size (tests/test_kernel_checks.py).
@triton.jit
def buggy_decode(out, query, key_cache,
                 value_cache, block_tables,
                 seq_lens, scale,
                 stride_qs, stride_qh,
                 stride_kb, stride_kt,
                 stride_kh, stride_bt,
                 BLOCK_SIZE: tl.constexpr,
                 HEAD_DIM: tl.constexpr,
                 GROUP: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    kv_head = head // GROUP
    seq_len = tl.load(seq_lens + seq)
    offsets = tl.arange(0, BLOCK_SIZE)
    dims = tl.arange(0, HEAD_DIM)
    here = seq * stride_qs + head * stride_qh
    q = tl.load(query + here + dims)
    q = q.to(tl.float32)
    table = block_tables + seq * stride_bt
    m = float("-inf")
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    pages = tl.cdiv(seq_len, BLOCK_SIZE)
    for page in range(0, pages):
        block = tl.load(table + page)
        valid = offsets < seq_len
        rows = (block * stride_kb
                + offsets * stride_kt
                + kv_head * stride_kh)
        ptrs = rows[:, None] + dims[None, :]
        mask = valid[:, None]
        k = tl.load(key_cache + ptrs,
                    mask=mask, other=0.0)
        v = tl.load(value_cache + ptrs,
                    mask=mask, other=0.0)
        qk = q[None, :] * k.to(tl.float32)
        s = tl.sum(qk, axis=1) * scale
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        pv = p[:, None] * v.to(tl.float32)
        acc = acc * alpha + tl.sum(pv, axis=0)
        m = m_new
    tl.store(out + here + dims, acc / l)


BUG_LENGTHS = [3, 8, 9, 16, 17, 24]     # the sequences of the prediction, pages of BUG_BLOCK_SIZE
BUG_BLOCK_SIZE = 8


def bug_lengths() -> list[int]:
    """The lengths in BUG_LENGTHS whose output ``buggy_decode`` gets wrong (pages of 8)."""
    # the mask compares a row's offset inside its page with seq_len, so on a page after the first
    # every row counts as a token; that reads past the end unless the last page is full
    return [n for n in BUG_LENGTHS if n > BUG_BLOCK_SIZE and n % BUG_BLOCK_SIZE != 0]


_BUG_MISTAKES = [
    ([9], "9 is one of them, but not the only length whose last page, after the first, is partly empty."),
    ([17], "17 is one of them, but not the only length whose last page, after the first, is partly "
           "empty."),
    (AnyItem(Not(OneOf(*BUG_LENGTHS))), f"Choose among the lengths {BUG_LENGTHS}."),
    (AnyItem(OneOf(3, 8)), "A sequence of one page is computed right: on page 0, `offsets < seq_len` is "
                           "the right mask."),
    (AnyItem(OneOf(16, 24)), "When the last page is full, every row the buggy mask lets through is a "
                             "real token of the sequence."),
]

bug_lengths = Exercise(
    "ch08.bug_lengths",
    f"Predict, before running it: for sequences of {BUG_LENGTHS} tokens in pages of "
    f"{BUG_BLOCK_SIZE}, which lengths does `buggy_decode` get wrong? Answer with a list of lengths.",
    bug_lengths(),
    unordered=True,
    mistakes=_BUG_MISTAKES,
    hints=["Read the mask line and ask, for a page after the first, which of its rows it lets through.",
           "On page 1 of a 9-token sequence, `offsets` runs 0 to 7, all below 9: every row counts as a "
           "token, but only one of them is. Which lengths have a page after the first that is not full?",
           "Wrong: the lengths above 8 that are not a multiple of 8."],
    wrong=[[3, 9, 17], [16, 24], [9, 16, 17, 24]],
    explanation="The mask forgets the page's start, so only a partial page after the first reads past "
                "the end: lengths 9 and 17.",
)


_fix_off_by_one = variant(              # one row too many
    decode_kernel, "valid = page * BLOCK_SIZE + offsets < seq_len", "valid = page * BLOCK_SIZE + offsets <= seq_len")


def _bug_case() -> KernelCase:
    """The prediction's sequences, as one decode case."""
    return _decode_case(BUG_LENGTHS, 2, 1, BUG_BLOCK_SIZE, seed=33)


fix_bug = KernelExercise(
    "ch08.fix_bug",
    "`buggy_decode` has one wrong line. Copy it into the cell, fix the bug, and check the fixed kernel "
    "(same signature and grid as exercise (d)).",
    decode_kernel,
    launch=_launch_decode,
    cases=[_bug_case(), *_DECODE_CASES],
    diagnose=_diagnose_decode,
    mistakes=[
        (buggy_decode, "This is what `buggy_decode` computes: the wrong line is still there. The "
                       "NaN comes from rows that no sequence owns; which line decides the rows read?"),
        (_fix_off_by_one, "Close: one row too many still counts as a token. A sequence of `seq_len` "
                          "tokens has positions 0 to seq_len - 1."),
    ],
    hints=["The outputs that go wrong are NaN, and NaN only lives in cache slots no sequence owns: some "
           "load reads rows it should have masked.",
           "Look at the line that builds `valid`: for a row of page `page`, which token position is it?",
           "`valid = page * BLOCK_SIZE + offsets < seq_len`."],
    wrong=[buggy_decode, _fix_off_by_one],
    explanation="A row's token position is page * BLOCK_SIZE + offset; the mask must compare that, not "
                "the offset, with seq_len.",
)

__all__ = ["load_page", "page_scores", "online_lse", "decode", "group_decode", "bug_lengths", "fix_bug",
           "buggy_decode", "BUG_LENGTHS", "BUG_BLOCK_SIZE"]
