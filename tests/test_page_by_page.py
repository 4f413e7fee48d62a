"""Attention page by page (pagedlib.attention.page_by_page) against the gather reference.

Every cache slot no sequence owns holds NaN (random_paged_inputs), so a loop that reads past a
sequence's end, or a whole last page, gives NaN instead of a plausible number.
"""
import pytest
import torch

from pagedlib import paged_attention_by_page, paged_attention_ref
from pagedlib.attention.inputs import random_paged_inputs
from pagedlib.attention.page_by_page import empty_partial, merge_partials, page_partial

HEADS = [(4, 4), (4, 2), (6, 1)]                       # MHA, GQA 2:1, MQA


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("heads", HEADS)
def test_page_by_page_equals_the_gather_reference(block_size, heads):
    lens = [1, block_size, block_size + 1, 5 * block_size + 3, 77]
    x = random_paged_inputs(lens, *heads, 8, block_size, device="cpu", seed=block_size)
    assert x.key_cache.isnan().any()                   # the unowned slots are poisoned
    out = paged_attention_by_page(*x.args())
    assert torch.isfinite(out).all(), "a slot past a sequence's end was read"
    torch.testing.assert_close(out, paged_attention_ref(*x.args()), atol=1e-5, rtol=1e-5)


def test_shared_blocks_scale_and_large_scores():
    x = random_paged_inputs([9, 30, 4], 4, 2, 8, 4, device="cpu", shared_blocks=True, seed=3)
    x.query.mul_(40)                                   # scores of hundreds: exp() would overflow
    out = paged_attention_by_page(*x.args(), scale=0.7)
    torch.testing.assert_close(out, paged_attention_ref(*x.args(), scale=0.7), atol=1e-5, rtol=1e-5)


def test_merge_equals_the_softmax_of_both_pages_in_any_order():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, generator=gen)
    k, v = torch.randn(7, 2, 4, generator=gen), torch.randn(7, 2, 4, generator=gen)
    k[5:] *= 10                                        # the second page holds the larger scores
    a, b = page_partial(q, k[:5], v[:5], 0.5), page_partial(q, k[5:], v[5:], 0.5)
    weights = (torch.einsum("hd,nhd->hn", q, k) * 0.5).softmax(-1)
    want = torch.einsum("hn,nhd->hd", weights, v)
    for _m, l, acc in (merge_partials(a, b), merge_partials(b, a),
                      merge_partials(merge_partials(empty_partial(2, 4), a), b)):
        torch.testing.assert_close(acc / l[:, None], want)
    m, l, acc = merge_partials(empty_partial(2, 4), empty_partial(2, 4))
    assert torch.isinf(m).all() and not l.any() and not acc.isnan().any()


def test_without_the_rescale_the_pages_disagree():
    """The check above can fail: adding the pages' sums as they are, each against its own max, is wrong."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, generator=gen)
    k, v = torch.randn(8, 2, 4, generator=gen), torch.randn(8, 2, 4, generator=gen)
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = page_partial(q, k[:4], v[:4], 1.0), page_partial(q, k[4:], v[4:], 1.0)
    m, l, acc = merge_partials((m_a, l_a, acc_a), (m_b, l_b, acc_b))
    assert not torch.allclose((acc_a + acc_b) / (l_a + l_b)[:, None], acc / l[:, None], atol=1e-3)
