"""The null block (issue 24, finding 3): block 0 is never handed out, every padded block-table entry of
an engine batch names it, and the kernels and the references read padding without harm.

The test failed on the old code: block 0 went to the first sequence, so a padded entry named a block
someone owned. Here block 0 holds NaN (as does every slot nobody owns): a kernel or reference that
let a padded entry leak into a result would return NaN.
"""
import torch

import pagedlib
from pagedlib import BlockManager, SamplingParams
from pagedlib.attention.reference import paged_attention_ref, paged_prefill_ref
from pagedlib.attention.torch_backend import paged_attention_torch, paged_prefill_torch
from pagedlib.attention.triton_backend import paged_attention, paged_prefill
from pagedlib.engine.batch import build_batch
from pagedlib.engine.scheduler import SeqState

DEVICE = pagedlib.runtime.DEVICE
BLOCK_SIZE, HEADS, KV_HEADS, HEAD_DIM = 4, 4, 2, 16


def engine_batch(chunks):
    """An engine batch over sequences of different lengths (so most tables are padded), each bringing
    its last ``chunks[i]`` tokens, and a cache whose unowned slots (block 0's included) hold NaN."""
    lens = [13, 1, 6, 9]
    bm = BlockManager(12, BLOCK_SIZE, null_block=True)
    seqs = []
    for i, n in enumerate(lens):
        seq = SeqState(seq_id=i, request_id=i, prompt=list(range(n)), params=SamplingParams())
        bm.allocate(i, seq.prompt)
        seq.num_computed_tokens = n
        seqs.append(seq)
    batch = build_batch(seqs, chunks, bm, DEVICE)
    gen = torch.Generator().manual_seed(0)
    shape = (bm.num_blocks, BLOCK_SIZE, KV_HEADS, HEAD_DIM)
    key, value = torch.full(shape, float("nan")), torch.full(shape, float("nan"))
    for i, n in enumerate(lens):
        for pos in range(n):
            b, o = divmod(bm.slot(i, pos), BLOCK_SIZE)
            key[b, o], value[b, o] = torch.randn(2, KV_HEADS, HEAD_DIM, generator=gen)
    query = torch.randn(sum(chunks), HEADS, HEAD_DIM, generator=gen).to(DEVICE)
    return bm, batch, key.to(DEVICE), value.to(DEVICE), query


def test_padding_names_the_null_block_which_nobody_owns():
    bm, batch, *_ = engine_batch([1, 1, 1, 1])
    tables = batch.block_tables.tolist()
    assert bm.null_block == 0 and bm.ref_count(0) == 0
    for s, table in enumerate(tables):
        assert table[:len(bm.block_table(s))] == bm.block_table(s)
        assert all(b == 0 for b in table[len(bm.block_table(s)):])
    assert sum(b == 0 for row in tables for b in row) == 4 * 4 - sum(len(bm.block_table(s)) for s in range(4))
    assert 0 not in {b for s in range(4) for b in bm.block_table(s)}


def test_decode_kernel_and_references_read_padding_without_harm():
    _, batch, key, value, query = engine_batch([1, 1, 1, 1])
    args = (query, key, value, batch.block_tables, batch.seq_lens)
    want = paged_attention_ref(*args)
    assert torch.isfinite(want).all()
    for got in (paged_attention(*args, num_splits=1), paged_attention(*args, num_splits=2),
                paged_attention_torch(*args)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_prefill_kernel_and_references_read_padding_without_harm():
    _, batch, key, value, query = engine_batch([5, 1, 6, 2])
    args = (query, key, value, batch.block_tables, batch.seq_lens, batch.query_start_loc)
    want = paged_prefill_ref(*args)
    assert torch.isfinite(want).all()
    for got in (paged_prefill(*args, max_query_len=6), paged_prefill_torch(*args, max_query_len=6)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
