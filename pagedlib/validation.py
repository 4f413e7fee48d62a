"""The one check of a count argument, shared by every module that takes one.

``True`` is an ``int`` to Python (``True == 1``), so ``isinstance(value, int)`` alone would accept
``max_num_seqs=True``; :func:`positive_int` refuses it like any other non-integer.
"""
from __future__ import annotations

import operator

__all__ = ["positive_int"]


def positive_int(name: str, value, what: str = "") -> int:
    """``value`` as an ``int`` if it is an integer >= 1 (not a ``bool``); else a ``ValueError`` that
    names the argument: ``"num_blocks must be a positive integer; got 0"``. ``what`` adds the unit
    (``"slots"``) to the message."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < 1:
        unit = f" number of {what}" if what else ""
        raise ValueError(f"{name} must be a positive integer{unit}; got {value!r}")
    return number
