"""Chapter 3 exercises: first fit, the external fragmentation of a pool snapshot, and the
reservation that even an allocator that knows the future (Orca Oracle) holds.

Reference solutions are plain functions (or values); each name is then rebound to its Exercise, so
a notebook calls ``ex.first_fit.check(my_function)``.
"""
from . import Above, Exercise


def first_fit(holes: list[tuple[int, int]], need: int) -> int | None:
    """Start of the first hole, in pool order, with room for `need` slots; None if no hole is big enough.

    `holes` lists the free ranges of a pool as (start, size), sorted by start.
    """
    for start, size in holes:
        if size >= need:
            return start
    return None


def _best_fit(holes, need):
    fits = [(size, start) for start, size in holes if size >= need]
    return min(fits)[1] if fits else None


def _strict_fit(holes, need):
    return next((start for start, size in holes if size > need), None)


def _diagnose_first_fit(answer, expected, args):
    holes, need = args
    if answer == _strict_fit(holes, need) and answer != expected:
        return "a hole of exactly `need` slots is large enough."
    if answer == _best_fit(holes, need) and answer != expected:
        return "that is the smallest hole that fits (best fit); first fit takes the first one in pool order."
    if answer is not None and all(answer != start for start, _ in holes):
        return "the answer should be the start of one of the holes."
    if isinstance(answer, int) and expected is not None and answer > expected:
        return "an earlier hole already has room for `need` slots."
    if answer is None and expected is not None:
        return "one of the holes is big enough: does a hole of exactly `need` slots count?"
    return None


first_fit = Exercise(
    "ch03.first_fit",
    "Given the free holes of a pool as (start, size) in pool order, where does first fit place a "
    "request of `need` slots? Return the start, or None if no hole is big enough.",
    first_fit,
    cases=[([(0, 512), (1280, 640), (2432, 768), (3968, 128)], 600),
           ([(0, 40), (100, 50), (200, 80)], 50),
           ([(0, 512), (1280, 640), (2432, 768), (3968, 128)], 1024),
           ([(0, 100), (300, 50), (900, 60)], 50),
           ([(10, 5)], 5),
           ([], 1),
           ([(0, 300), (500, 200), (800, 1000)], 150),
           ([(0, 10), (40, 20), (100, 30)], 25)],
    diagnose=_diagnose_first_fit,
    hints=["Walk the holes in the order given and stop at the first one that is large enough.",
           "A hole of exactly `need` slots is large enough; if the loop ends without a match, return None.",
           "for start, size in holes: if size >= need: return start  (then return None after the loop)"],
    wrong=[_best_fit, _strict_fit],
    explanation="First fit takes the earliest hole with room, which is fast but leaves small holes "
                "behind in the front of the pool.",
)


def external_fragmentation(snapshot: list[tuple[int, int, str | None]], need: int) -> int:
    """Free slots of a pool snapshot that a request of `need` slots cannot use.

    `snapshot` lists the pool's segments in order as (start, size, owner); owner None marks a free hole.
    A hole smaller than `need` is useless to the request: its slots count as external fragmentation.
    """
    return sum(size for _, size, owner in snapshot if owner is None and size < need)


def _diagnose_external(answer, expected, args):
    snapshot, need = args
    free = sum(size for _, size, owner in snapshot if owner is None)
    if answer == sum(size for _, size, owner in snapshot if owner is None and size <= need) != expected:
        return "a hole of exactly `need` slots is big enough, so it is not fragmentation."
    if answer == free and answer != expected:
        return "that is every free slot; count only the holes too small for the request."
    if answer == sum(size for _, size, owner in snapshot if owner is not None and size < need):
        return "free holes are the segments whose owner is None."
    return None


_SNAP = [(0, 512, None), (512, 768, "r2"), (1280, 640, None), (1920, 512, "r4"), (2432, 768, None),
         (3200, 768, "r6"), (3968, 128, None)]

external_fragmentation = Exercise(
    "ch03.external_fragmentation",
    "In a pool snapshot of (start, size, owner) segments, how many free slots sit in holes too small "
    "for a request of `need` slots?",
    external_fragmentation,
    cases=[(_SNAP, 1024), (_SNAP, 600), (_SNAP, 768), (_SNAP, 100),
           ([(0, 64, "a"), (64, 64, None), (128, 64, "b")], 64),
           ([(0, 10, None), (10, 20, "x"), (30, 5, None), (35, 40, None)], 30),
           ([(0, 4096, "only")], 1)],
    diagnose=_diagnose_external,
    hints=["Look only at the free segments (owner None). Which of them could hold the request?",
           "A free hole with size >= need is usable; add up the sizes of the others.",
           "sum(size for start, size, owner in snapshot if owner is None and size < need)"],
    wrong=[lambda snapshot, need: sum(s for _, s, o in snapshot if o is None),
           lambda snapshot, need: sum(s for _, s, o in snapshot if o is None and s <= need)],
    explanation="Free slots only count as usable when one hole alone is big enough; the rest is "
                "external fragmentation for that request.",
)

# Predict: Orca (Oracle) reserves a request's exact final length, here a 100-token prompt plus 300
# output tokens. A decode step starts after t = 0, 1, ..., 299 output tokens are written.
_PROMPT, _OUTPUT = 100, 300
oracle_reservation = sum(_OUTPUT - t for t in range(_OUTPUT)) / _OUTPUT / (_PROMPT + _OUTPUT)


_ORACLE_MISTAKES = [
    (_OUTPUT / (_PROMPT + _OUTPUT), "that is the share at the first step only; it shrinks as the request "
                                    "writes: average it."),
    (0.5, "half of the OUTPUT is still to come on average; divide by all 400 slots it holds instead."),
    (0, "Oracle has no internal fragmentation, but until the last token is written part of its exact "
        "range is still empty: reservation."),
    (Above(1), "give a fraction between 0 and 1, not a percentage."),
]

oracle_reservation = Exercise(
    "ch03.oracle_reservation",
    "An allocator that knows the future (Orca Oracle) sets aside exactly 400 slots for a request with a "
    "100-token prompt that will write 300 tokens. Averaged over its 300 decode steps, what fraction of "
    "those 400 slots is reservation: empty, waiting for a token the request will still write? (a "
    "fraction, two decimals are enough)",
    oracle_reservation,
    tolerance=0.005,
    mistakes=_ORACLE_MISTAKES,
    hints=["At each step the request holds all 400 slots, but only the prompt and the tokens "
           "written so far hold K/V; the rest is reservation.",
           "After t output tokens, 300 - t slots are still empty; average that over t = 0 .. 299.",
           "sum(300 - t for t in range(300)) / 300 / 400"],
    wrong=[0.75, 0.5, 0],
    explanation="The range is held from the first step, but filled only at the last: on average "
                "about half the output's slots are reservation, empty.",
)


# Predict: Orca (Pow2) on a buddy allocator, the same request (100-token prompt, 300 output tokens).
def _pow2_buddy_block() -> tuple[int, int]:
    from ..sim import next_pow2, reservation_size
    size = reservation_size("pow2", _PROMPT, _OUTPUT, 2048)   # the prompt + the output rounded up
    return size, next_pow2(size)                              # the buddy rounds the range up too


pow2_buddy_block = Exercise(
    "ch03.pow2_buddy_block",
    "Orca (Pow2) sets aside the prompt plus the output length rounded up to a power of two; its buddy "
    "allocator then hands out the smallest power-of-two block that holds that range. For a 100-token "
    "prompt and a 300-token output (maximum length 2,048): answer `(range, block)` in slots.",
    _pow2_buddy_block(),
    mistakes=[((_OUTPUT + _PROMPT, 512), "That is Oracle's range: Pow2 rounds the output up to a power "
                                          "of two first."),
              ((512, 512), "The prompt's slots come on top of the rounded output."),
              ((512, 1024), "The range holds the prompt too: 100 plus the rounded output."),
              ((612, 612), "The buddy allocator only hands out blocks of a power-of-two size: round the "
                           "range up once more.")],
    hints=["Two roundings happen one after the other: the policy rounds the output, then the allocator "
           "rounds the whole range.",
           "Range = 100 + (300 rounded up to a power of two); block = that range rounded up to a power "
           "of two.",
           "100 + 512 = 612 slots; the smallest power of two at least 612 is 1,024."],
    wrong=[(612, 612), (400, 512), (512, 1024)],   # each one named in mistakes
    why="612 slots set aside, 1,024 taken: 624 of them will never hold a token.",
    explanation="The request writes 400 slots of a 1,024-slot block: 212 are internal fragmentation "
                "(Pow2's over-reservation) and 412 the buddy's rounding, which the paper's Figure 2 "
                "counts with external fragmentation.",
)
