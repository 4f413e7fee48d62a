"""Chapter 4 exercises: blocks (pages), block tables, the last block, and capacity at a block size.

Convention (see ``ch00``): each reference solution is a plain function (or a value), then the same
name is rebound to the Exercise built from it, so a notebook calls ``ex.blocks_for.check(...)``.
"""
from . import Above, Exercise


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Whole blocks of ``block_size`` tokens needed to hold ``num_tokens`` tokens."""
    return (num_tokens + block_size - 1) // block_size


def _diagnose_pages(answer, expected, args):
    n, p = args
    if answer == n // p and n % p:
        return f"{n} tokens do not fill whole pages of {p}: the partly filled last page counts too."
    if answer == n // p + 1 and n % p == 0:
        return f"{n} tokens fill their pages exactly: no extra page is needed."
    if isinstance(answer, int) and answer == n:
        return "that counts tokens; the question asks for pages."
    return None


blocks_for = Exercise(
    "ch04.blocks_for",
    "How many whole pages of `block_size` tokens does a sequence of `num_tokens` tokens need?",
    blocks_for,
    cases=[(512, 16), (37, 16), (1900, 16), (128, 16), (4, 16), (0, 16), (1, 1), (16, 16), (17, 16),
           (2048, 2048), (2049, 2048), (5, 3)],
    diagnose=_diagnose_pages,
    hints=["A partly filled last page is still a whole page: 17 tokens in pages of 16 need 2 pages.",
           "That is a division rounded up. Check the edges: 0 tokens need 0 pages, 16 need 1.",
           "`(num_tokens + block_size - 1) // block_size`"],
    wrong=[lambda n, p: n // p, lambda n, p: n // p + 1],
    explanation="Every page but the last is full and the last holds the remainder, so the count is "
                "the length divided by the page size, rounded up.",
)


def append_token(block_table: tuple, num_tokens: int, free_blocks: tuple, block_size: int) -> list:
    """The block table after one more token: a new page only when every held page is full."""
    if num_tokens % block_size == 0:             # 0 tokens, or the last page is exactly full
        return list(block_table) + [free_blocks[0]]
    return list(block_table)


def _diagnose_append(answer, expected, args):
    block_table, num_tokens, free_blocks, block_size = args
    if len(answer) == len(expected) + 1:
        return (f"{num_tokens} tokens leave room on the last page (it holds {num_tokens % block_size} "
                f"of {block_size}): no new page yet.")
    if len(answer) + 1 == len(expected):
        return ("every held page is full (or there is none yet): this token needs a new page."
                if num_tokens else "an empty sequence holds no page: its first token needs one.")
    if list(answer[:len(block_table)]) != list(block_table):
        return "the pages already held must stay, in the same order; only append to the table."
    return None


append_token = Exercise(
    "ch04.append_token",
    "A sequence holds `num_tokens` tokens in the pages of `block_table` (a tuple of page ids). One more "
    "token arrives. Return its block table afterwards as a new list, taking the first page of "
    "`free_blocks` if, and only if, it needs a new page.",
    append_token,
    cases=[((), 0, (7, 2, 9), 4), ((7,), 1, (2, 9), 4), ((7,), 3, (2, 9), 4), ((7,), 4, (2, 9), 4),
           ((7, 2), 5, (9,), 4), ((7, 2), 8, (9, 11), 4), ((5,), 15, (3,), 16), ((5,), 16, (3,), 16),
           ((4, 0, 8), 33, (1,), 16), ((1, 2, 3), 3, (4,), 1)],
    diagnose=_diagnose_append,
    hints=["A page of `block_size` slots is full after tokens number block_size, 2 * block_size, ... "
           "A new page is needed only when the token arrives and all held pages are full.",
           "The held pages are full when `num_tokens % block_size == 0`; that includes an empty "
           "sequence, which holds no page at all.",
           "`list(block_table) + [free_blocks[0]]` if that holds, else `list(block_table)`."],
    wrong=[lambda bt, n, free, p: list(bt) + [free[0]] if (n + 1) % p == 0 else list(bt),
           lambda bt, n, free, p: list(bt) + [free[0]] if n % p == 0 and n > 0 else list(bt),
           lambda bt, n, free, p: list(bt) + [free[0]]],
    explanation="Token number n + 1 starts a new page exactly when n is a multiple of the page size: "
                "tokens 1, p + 1, 2p + 1, ...",
)


def last_page_len(num_tokens: int, block_size: int) -> int:
    """Tokens on the last page of a sequence of ``num_tokens >= 1`` tokens: 1 to ``block_size``
    (FlashInfer's ``kv_last_page_len``). A sequence that fills its pages exactly has a FULL last page."""
    return (num_tokens - 1) % block_size + 1


def _diagnose_last(answer, expected, args):
    n, p = args
    if answer == n % p and answer != expected:
        return (f"`n % block_size` is 0 when {n} tokens fill their pages exactly, but then the last "
                f"page is full: it holds {p} tokens, not 0. The answer runs from 1 to block_size.")
    if answer == p - n % p:
        return "that is the free tail of the last page; the question asks for the tokens on it."
    if answer == n // p:
        return "that counts full pages; the question asks for tokens on the last page."
    return None


last_page_len = Exercise(
    "ch04.last_page_len",
    "A sequence of `num_tokens` tokens (at least 1) sits in pages of `block_size`. How many tokens are on "
    "its last page? (FlashInfer calls this `kv_last_page_len`, between 1 and block_size.)",
    last_page_len,
    cases=[(37, 16), (512, 16), (1, 16), (16, 16), (17, 16), (1900, 16), (4, 16), (5, 1), (64, 32),
           (100, 7)],
    diagnose=_diagnose_last,
    hints=["Every page before the last is full; the last holds what is left, and at least one token.",
           "The remainder n % block_size is almost it, except when it is 0: then the last page is full.",
           "`(num_tokens - 1) % block_size + 1`, or "
           "`num_tokens - (blocks_for(num_tokens, block_size) - 1) * block_size`"],
    wrong=[lambda n, p: n % p, lambda n, p: p - n % p],
    explanation="kv_len = block_size * (seq_blocks - 1) + last_page_len holds only if a full last page "
                "counts block_size, never 0.",
)

# Predict: the five requests (512, 37, 1,900, 128, 4 tokens) with 256-token pages, 40,960-slot pool.
_LENGTHS, _POOL = (512, 37, 1900, 128, 4), 40_960


def capacity_at(lengths: tuple, block_size: int, pool_slots: int) -> int:
    """Requests of this mix that fit a pool of ``pool_slots`` token slots with pages of ``block_size``."""
    allocated = sum((n + block_size - 1) // block_size * block_size for n in lengths)
    return pool_slots * len(lengths) // allocated


_capacity_at = capacity_at      # the function: the name capacity_at becomes its Exercise below
predict_capacity = _capacity_at(_LENGTHS, 256, _POOL)



# (answer, message) for the near misses; no digits of the answer in these messages
def _whole_mixes(lengths: tuple, block_size: int, pool_slots: int) -> int:
    """Whole copies of the mix that fit (a near miss: capacity counts fractional copies too)."""
    return pool_slots // sum((n + block_size - 1) // block_size * block_size for n in lengths)


_MIX = len(_LENGTHS)
_PREDICT_MISTAKES = [
    (_whole_mixes(_LENGTHS, 256, _POOL) * _MIX,
     "That counts whole copies of the five-request mix only. Capacity counts requests at the mix's "
     "average cost, fractional copies included: the pool's slots times five, divided by the slots "
     "one copy of the mix holds, rounded down once at the end."),
    (_whole_mixes(_LENGTHS, 256, _POOL),
     "That is how many copies of the whole five-request mix fit; the question asks for requests, "
     "and each copy holds five of them."),
    (_whole_mixes(_LENGTHS, 16, _POOL) * _MIX,
     "That counts whole copies of the mix, with the chapter's 16-token pages: use 256-token pages, "
     "and count requests at the mix's average cost (fractional copies included)."),
    (_whole_mixes(_LENGTHS, 16, _POOL),
     "That is how many copies of the whole mix fit with 16-token pages; the question asks for "
     "requests, with 256-token pages."),
    (_capacity_at(_LENGTHS, 16, _POOL),
     "that is the capacity with 16-token pages, the chapter's number; with 256-token pages each "
     "request's last page is rounded up much further: round each length up to a multiple of 256."),
    (_POOL // 2048, "that is reserve-max; even 256-token pages are far smaller than a 2,048-token slot."),
    (_POOL // 256, "that counts pages in the pool, not requests: a request can hold several pages."),
    (_POOL * len(_LENGTHS) // sum(_LENGTHS),
     "that packs the real lengths with no rounding at all: each request holds whole 256-token pages."),
    (Above(_capacity_at(_LENGTHS, 16, _POOL)), "bigger pages never fit MORE requests: each request's last "
                                               "page only gets emptier."),
]


predict_capacity = Exercise(
    "ch04.predict_capacity",
    "Predict before the sweep: with 256-token pages instead of 16, how many requests of the five-request "
    "mix fit the 40,960-slot pool? (Capacity counts requests in the mix's proportions at its average "
    "cost: fractional copies of the mix count, as in the chapter's 78.)",
    predict_capacity,
    mistakes=_PREDICT_MISTAKES,
    hints=["Round each of the five lengths up to whole 256-token pages.",
           "512 -> 512, 37 -> 256, 1,900 -> 2,048, 128 -> 256, 4 -> 256 slots: add them up.",
           "40_960 * 5 // (512 + 256 + 2048 + 256 + 256)"],
    wrong=[79],
    explanation="The mix takes 3,328 slots at 256 per page instead of 2,608 at 16, so fewer copies of "
                "it fit; still three times reserve-max.",
)


def _diagnose_capacity(answer, expected, args):
    lengths, p, pool = args
    if answer == pool * len(lengths) // sum(lengths) and answer != expected:
        return "that packs the real lengths; each request holds whole pages, so round each one up first."
    if answer == pool // p:
        return "that counts the pool's pages, not requests of the mix."
    return None


capacity_at = Exercise(
    "ch04.capacity_at",
    "With pages of `block_size` tokens, how many requests of the mix `lengths` fit a pool of "
    "`pool_slots` token slots? (pool slots divided by the average slots allocated per request, "
    "rounded down)",
    capacity_at,
    cases=[((512, 37, 1900, 128, 4), 16, 40_960), ((512, 37, 1900, 128, 4), 256, 40_960),
           ((512, 37, 1900, 128, 4), 2048, 40_960), ((512, 37, 1900, 128, 4), 1, 40_960),
           ((100, 100, 100), 64, 10_000), ((1, 2, 3), 8, 1000), ((33,), 16, 480)],
    diagnose=_diagnose_capacity,
    mistakes=[
        (lambda lengths, p, pool: _whole_mixes(lengths, p, pool) * len(lengths),
         "that counts whole copies of the mix only; capacity counts requests at the mix's average "
         "cost, fractional copies included: multiply the pool by len(lengths) first, then divide "
         "once, rounding down."),
        (_whole_mixes,
         "that is how many copies of the whole mix fit; the question asks for requests: each copy "
         "holds len(lengths) of them."),
        (lambda lengths, p, pool: pool // (-(-max(lengths) // p) * p),
         "that sizes every request like the longest one, as reserve-max does; with pages each request "
         "holds only its own length rounded up, so divide by the mix's average, not its maximum."),
        (lambda lengths, p, pool: round(pool * len(lengths) / sum(-(-n // p) * p for n in lengths)),
         "that rounds to the nearest whole request; a request that does not fit completely does not "
         "fit: round down (`//`)."),
        (lambda lengths, p, pool: pool * len(lengths) // sum(-(-n // p) for n in lengths),
         "that divides by the number of pages the mix holds, not by their slots: multiply each "
         "request's pages by block_size."),
    ],
    hints=["Each request allocates whole pages, so its slots are its length rounded up to a multiple "
           "of block_size.",
           "Add the rounded-up slots over the mix (`allocated`). The pool holds "
           "`len(lengths)` requests per `allocated` slots.",
           "`pool_slots * len(lengths) // sum(blocks_for(n, block_size) * block_size for n in lengths)`"],
    wrong=[lambda lengths, p, pool: pool * len(lengths) // sum(lengths),
           lambda lengths, p, pool: pool // p],
    explanation="Integer arithmetic on whole pages: the mix costs its rounded-up slots, and the pool "
                "holds that many copies of the mix.",
)
