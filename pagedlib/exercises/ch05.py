"""Chapter 5 exercises: slots, gathering K/V through a block table, FlashInfer's CSR page table.

Convention (see ``ch00``): each reference solution is a plain function, then the same name is rebound
to the Exercise built from it, so a notebook calls ``ex.slot_of.check(...)``.
"""
import torch

from . import Exercise, default_compare


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
    hints=["First find the token's logical page (`token // block_size`) and its offset inside that page "
           "(`token % block_size`). The block table turns the logical page into a physical block.",
           "`block_table[token // block_size] * block_size + token % block_size`."],
    wrong=[lambda bt, t, bs: bt[t // bs] + t % bs,
           lambda bt, t, bs: t // bs * bs + t % bs,
           lambda bt, t, bs: bt[t // bs] * bs + t // bs],
)


def gather_keys(key_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first ``seq_len`` key rows of a sequence, ``[seq_len, num_kv_heads, head_dim]``, in order."""
    block_size = key_cache.shape[1]
    num_pages = (seq_len + block_size - 1) // block_size
    pages = key_cache[block_table[:num_pages].long()]   # [num_pages, block_size, num_kv_heads, head_dim]
    return pages.flatten(0, 1)[:seq_len]                # [seq_len, num_kv_heads, head_dim]


def _gather_cases() -> list[tuple]:
    gen = torch.Generator().manual_seed(5)
    cache = torch.randn(8, 4, 2, 3, generator=gen)        # [num_blocks=8, block_size=4, kv_heads=2, dim=3]
    table = torch.tensor([6, 1, 3, 0], dtype=torch.int32)  # [max_blocks]
    return [(cache, table, n) for n in (1, 4, 5, 11, 16)] + [(cache, torch.tensor([2], dtype=torch.int32), 3)]


gather_keys = Exercise(
    "ch05.gather_keys",
    "Return the first `seq_len` keys of a sequence as one contiguous tensor `[seq_len, num_kv_heads, "
    "head_dim]`, reading them from `key_cache [num_blocks, block_size, num_kv_heads, head_dim]` through "
    "the sequence's `block_table` (an int32 tensor of block ids).",
    gather_keys,
    cases=_gather_cases(),
    hints=["Token t is in block `block_table[t // block_size]` at row `t % block_size`. A loop over the "
           "tokens with `torch.stack` works; so does gathering whole pages at once.",
           "Whole pages: `pages = key_cache[block_table[:num_pages].long()]` is `[num_pages, block_size, "
           "kv_heads, dim]`; `pages.flatten(0, 1)[:seq_len]` puts them end to end and drops the unused "
           "tail of the last page."],
    wrong=[lambda cache, table, n: cache.flatten(0, 1)[:n],
           lambda cache, table, n: cache[table.long()].flatten(0, 1)],
)


def block_table_to_csr(block_tables: tuple, seq_lens: tuple, page_size: int) -> tuple:
    """FlashInfer's page table ``(indptr, indices, last_page_len)`` from padded block tables."""
    indptr, indices, last_page_len = [0], [], []
    for row, n in zip(block_tables, seq_lens):
        pages = (n + page_size - 1) // page_size
        indices += list(row[:pages])                      # only the pages the sequence uses
        indptr.append(indptr[-1] + pages)
        last_page_len.append(n - (pages - 1) * page_size)  # 1 .. page_size
    return indptr, indices, last_page_len


def _as_lists(answer):
    """Tensors and tuples in an answer become plain lists, so either kind is accepted."""
    if isinstance(answer, torch.Tensor):
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
    hints=["`indices` lists every sequence's used pages end to end (leave the padding out); `indptr[s]` "
           "and `indptr[s + 1]` say where sequence s's pages start and stop, so `indptr` starts at 0 and "
           "has one more entry than there are sequences.",
           "A sequence of n tokens uses `pages = ceil(n / page_size)` pages; its last page holds "
           "`n - (pages - 1) * page_size` tokens, between 1 and page_size (never 0)."],
    wrong=[lambda bt, lens, p: ([0] + [sum(-(-n // p) for n in lens[:i + 1]) for i in range(len(lens))],
                                [b for row, n in zip(bt, lens) for b in row[:-(-n // p)]],
                                [n % p for n in lens]),
           lambda bt, lens, p: ([0] + [len(row) * (i + 1) for i, row in enumerate(bt)],
                                [b for row in bt for b in row],
                                [n - (-(-n // p) - 1) * p for n in lens])],
)
