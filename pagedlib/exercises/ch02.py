"""Chapter 2 exercises: the waste and the capacity of a reserve-max KV cache.

Reference solutions are plain functions; each name is then rebound to its Exercise, so a notebook
calls ``ex.reserve_max_waste.check(my_function)``.
"""
from . import Exercise


def reserve_max_waste(lengths: list[int], max_len: int) -> float:
    """Fraction of the reserved slots that hold no K/V when every request reserves `max_len` slots."""
    return 1 - sum(lengths) / (len(lengths) * max_len)


def _diagnose_waste(answer, expected, args):
    if abs(answer - (1 - expected)) < 1e-9:
        return "that is the fraction in use; the waste is the rest."
    if abs(answer - 100 * expected) < 1e-6:
        return "give a fraction between 0 and 1, not a percentage."
    lengths, max_len = args
    if abs(answer - (1 - sum(lengths) / (len(lengths) * max(lengths)))) < 1e-9 and max(lengths) != max_len:
        return "every slot is max_len long, whatever the longest request turns out to be."
    return None


reserve_max_waste = Exercise(
    "ch02.reserve_max_waste",
    "Every request reserves `max_len` slots. What fraction of the reserved slots is wasted?",
    reserve_max_waste,
    cases=[([512, 37, 1900, 128, 4], 2048), ([2048], 2048), ([1, 1, 1], 1024), ([100, 300], 512),
           ([4096, 10, 999, 1], 4096), ([7], 8)],
    diagnose=_diagnose_waste,
    hints=["Waste is 1 - (slots holding K/V) / (slots reserved).",
           "Reserved: every request gets max_len slots. Holding K/V: the sum of the lengths.",
           "1 - sum(lengths) / (len(lengths) * max_len)"],
    wrong=[lambda lengths, max_len: sum(lengths) / (len(lengths) * max_len),
           lambda lengths, max_len: 1 - sum(lengths) / (len(lengths) * max(lengths))],
)


def pool_capacity(pool_slots: int, lengths: list[int], max_len: int) -> int:
    """How many requests like `lengths` a pool of `pool_slots` slots holds when each reserves `max_len`."""
    return pool_slots // max_len


def _diagnose_capacity(answer, expected, args):
    pool_slots, lengths, max_len = args
    if answer == pool_slots * len(lengths) // sum(lengths) and answer != expected:
        return ("that packs the requests by their real lengths; a reserve-max cache does not know them "
                "and reserves max_len for each.")
    if answer == expected + 1:
        return "round down: a request needs a whole slot."
    return None


pool_capacity = Exercise(
    "ch02.pool_capacity",
    "A pool of `pool_slots` token slots; each request reserves `max_len`. How many requests like "
    "`lengths` fit at once?",
    pool_capacity,
    cases=[(40_960, [512, 37, 1900, 128, 4], 2048), (40_960, [4, 4, 4], 2048), (10_000, [100], 1024),
           (2047, [1], 2048), (15_700, [161, 338], 2048), (65_536, [300, 700, 2000], 4096)],
    diagnose=_diagnose_capacity,
    hints=["Does the answer depend on how long the requests really are?",
           "Each request takes exactly max_len slots, so count how many whole max_len slots the pool has.",
           "pool_slots // max_len"],
    wrong=[lambda pool_slots, lengths, max_len: pool_slots * len(lengths) // sum(lengths),
           lambda pool_slots, lengths, max_len: round(pool_slots / max_len + 0.5)],
)
