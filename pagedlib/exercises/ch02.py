"""Chapter 2 exercises: the waste of a reserve-max KV cache, what part of it is internal
fragmentation, and how the maximum sets the capacity.

Reference solutions are plain functions (or values); each name is then rebound to its Exercise, so
a notebook calls ``ex.reserve_max_waste.check(my_function)``.
"""
from . import AtLeast, Exercise


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
    hints=["Waste is the share of reserved slots that hold no K/V.",
           "Reserved: every request gets max_len slots. Holding K/V: the sum of the lengths.",
           "1 - sum(lengths) / (len(lengths) * max_len)"],
    wrong=[lambda lengths, max_len: sum(lengths) / (len(lengths) * max_len),
           lambda lengths, max_len: 1 - sum(lengths) / (len(lengths) * max(lengths))],
    explanation="The reservation is max_len per request whatever its length, so the waste is one "
                "minus the written share.",
)


def split_unused(length_now: int, final_length: int, max_len: int) -> tuple[int, int]:
    """The unused slots of one reserve-max reservation, split as the PagedAttention paper does:
    ``(reservation, internal_fragmentation)``. Reservation: slots the request will still write
    before it finishes (``final_length - length_now``); internal fragmentation: slots past its final
    length, never written (``max_len - final_length``)."""
    return final_length - length_now, max_len - final_length


def _diagnose_split(answer, expected, args):
    length_now, final_length, max_len = args
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        return "return two numbers: (reservation, internal_fragmentation)."
    reservation, internal = expected
    if tuple(answer) == (internal, reservation) and reservation != internal:
        return "the two parts are swapped: reservation comes first."
    if tuple(answer) == (0, max_len - length_now) and reservation:
        return ("not every unused slot is internal fragmentation: the request still writes "
                "final_length - length_now of them as it decodes.")
    if sum(answer) != max_len - length_now:
        return "the two parts together must be every unused slot of the reservation (max_len - length_now)."
    return None


split_unused = Exercise(
    "ch02.split_unused",
    "A request holds `length_now` tokens in a reserve-max slot of `max_len`; it will finish at "
    "`final_length` tokens. Return (reservation, internal_fragmentation): its unused slots that it will "
    "still write, and those it never will.",
    split_unused,
    cases=[(512, 600, 2048), (37, 37, 2048), (1900, 1950, 2048), (4, 20, 2048), (1, 2048, 2048),
           (100, 900, 1024), (2048, 2048, 2048)],
    diagnose=_diagnose_split,
    hints=["Draw the slot: written tokens, then the tokens still to come, then what lies past the end.",
           "Reservation ends where the request will end (final_length); internal fragmentation runs "
           "from there to max_len.",
           "(final_length - length_now, max_len - final_length)"],
    wrong=[lambda now, final, m: (0, m - now), lambda now, final, m: (m - final, final - now),
           lambda now, final, m: (final - now, m - now)],
    explanation="Slots up to the final length are written eventually (reservation); only those past it "
                "are never written (internal fragmentation).",
)

# Predict: the same pool of 40,960 slots, but the server now allows 4,096-token sequences.
predict_capacity = 40_960 // 4096


# no digits of the answer in these messages: the contract tests check that none reveals it
_CAPACITY_MISTAKES = [
    (40_960 // 2048, "that is the capacity at a maximum of 2,048; each reservation is now twice as long."),
    (AtLeast(40), "a longer maximum makes every reservation longer, so FEWER requests fit, not more."),
    (40_960 * 5 // 2581, "that packs the requests by their real lengths; a reserve-max cache reserves "
                         "the maximum."),
]

predict_capacity = Exercise(
    "ch02.predict_capacity",
    "Predict: the server raises its maximum sequence length from 2,048 to 4,096 tokens. How many "
    "requests fit the 40,960-slot pool now (the same requests, still reserve-max)?",
    predict_capacity,
    mistakes=_CAPACITY_MISTAKES,
    hints=["Does the answer depend on how long the requests really are?",
           "Each request now reserves 4,096 slots, whatever it holds.",
           "40_960 // 4096"],
    wrong=[20, 40, 79],
    explanation="Capacity is the pool divided by the maximum: doubling the maximum halves it, "
                "whatever the requests really hold.",
)
