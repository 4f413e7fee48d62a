"""Chapter 4 exercises: pages, block tables and capacity.

Convention (see ``ch00``): each reference solution is a plain function, then the same name is rebound
to the Exercise built from it, so a notebook calls ``ex.pages_for.check(...)``.
"""
from . import Exercise


def pages_for(n_tokens: int, page_size: int) -> int:
    """Whole pages of ``page_size`` tokens needed to hold ``n_tokens`` tokens."""
    return (n_tokens + page_size - 1) // page_size


pages_for = Exercise(
    "ch04.pages_for",
    "How many whole pages of `page_size` tokens does a sequence of `n_tokens` tokens need?",
    pages_for,
    cases=[(512, 16), (37, 16), (1900, 16), (128, 16), (4, 16), (0, 16), (1, 1), (16, 16), (17, 16),
           (2048, 2048), (2049, 2048), (5, 3)],
    hints=["A partly filled last page is still a whole page: 17 tokens in pages of 16 need 2 pages.",
           "That is a division rounded up: `(n_tokens + page_size - 1) // page_size`. "
           "Check that 0 tokens need 0 pages."],
    wrong=[lambda n, p: n // p, lambda n, p: n // p + 1],
)


def append_token(block_table: tuple, num_tokens: int, free_pages: tuple, page_size: int) -> list:
    """The block table after one more token: a new page only when every held page is full."""
    if num_tokens % page_size == 0:              # 0 tokens, or the last page is exactly full
        return list(block_table) + [free_pages[0]]
    return list(block_table)


append_token = Exercise(
    "ch04.append_token",
    "A sequence holds `num_tokens` tokens in the pages of `block_table` (a tuple of page ids). One more "
    "token arrives. Return its block table afterwards as a new list, taking the first page of "
    "`free_pages` if, and only if, it needs a new page.",
    append_token,
    cases=[((), 0, (7, 2, 9), 4), ((7,), 1, (2, 9), 4), ((7,), 3, (2, 9), 4), ((7,), 4, (2, 9), 4),
           ((7, 2), 5, (9,), 4), ((7, 2), 8, (9, 11), 4), ((5,), 15, (3,), 16), ((5,), 16, (3,), 16),
           ((4, 0, 8), 33, (1,), 16), ((1, 2, 3), 3, (4,), 1)],
    hints=["A page of `page_size` slots is full after tokens number page_size, 2 * page_size, ... "
           "A new page is needed only when the token arrives and all held pages are full.",
           "The held pages are full when `num_tokens % page_size == 0` (this includes an empty sequence, "
           "which holds no page). Then return `list(block_table) + [free_pages[0]]`; otherwise "
           "`list(block_table)`."],
    wrong=[lambda bt, n, free, p: list(bt) + [free[0]] if (n + 1) % p == 0 else list(bt),
           lambda bt, n, free, p: list(bt) + [free[0]] if n % p == 0 and n > 0 else list(bt),
           lambda bt, n, free, p: list(bt) + [free[0]]],
)


def capacity_at(lengths: tuple, page_size: int, pool_slots: int) -> int:
    """Requests of this mix that fit a pool of ``pool_slots`` token slots with pages of ``page_size``."""
    allocated = sum((n + page_size - 1) // page_size * page_size for n in lengths)
    return pool_slots * len(lengths) // allocated


capacity_at = Exercise(
    "ch04.capacity_at",
    "With pages of `page_size` tokens, how many requests of the mix `lengths` fit a pool of "
    "`pool_slots` token slots? (pool slots divided by the average slots allocated per request, "
    "rounded down)",
    capacity_at,
    cases=[((512, 37, 1900, 128, 4), 16, 40_960), ((512, 37, 1900, 128, 4), 256, 40_960),
           ((512, 37, 1900, 128, 4), 2048, 40_960), ((512, 37, 1900, 128, 4), 1, 40_960),
           ((100, 100, 100), 64, 10_000), ((1, 2, 3), 8, 1000), ((33,), 16, 480)],
    hints=["Each request allocates whole pages: `pages_for(length, page_size) * page_size` slots. "
           "Add them up for the mix.",
           "The mix of `len(lengths)` requests takes `allocated` slots, so the pool holds "
           "`pool_slots * len(lengths) // allocated` requests of that mix (integers only, no float "
           "rounding)."],
    wrong=[lambda lengths, p, pool: pool * len(lengths) // sum(lengths),
           lambda lengths, p, pool: pool // p,
           lambda lengths, p, pool: round(pool * len(lengths) / sum(-(-n // p) * p for n in lengths))],
)
