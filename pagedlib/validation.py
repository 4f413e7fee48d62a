"""The one check of a count argument, and the one ceiling division, shared by every module.

``True`` is an ``int`` to Python (``True == 1``), so ``isinstance(value, int)`` alone would accept
``max_num_seqs=True``; :func:`positive_int` refuses it like any other non-integer.
"""
from __future__ import annotations

import operator

__all__ = ["as_int", "cdiv", "nonnegative_int", "positive_int"]


def cdiv(a, b):
    """``ceil(a / b)`` for integers (or integer tensors) with ``b > 0``: the blocks that ``a`` tokens
    fill when a block holds ``b``."""
    return -(-a // b)


def as_int(value) -> int | None:
    """``value`` as a Python ``int`` if it is an integer (numpy integers too, ``bool`` not), else ``None``:
    the one place that decides what counts as an integer argument."""
    try:
        return None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        return None


def nonnegative_int(name: str, value, what: str = "") -> int:
    """``value`` as an ``int`` if it is an integer >= 0 (not a ``bool``); else a ``ValueError`` that
    names the argument, like :func:`positive_int`."""
    return _int_at_least(0, "non-negative", name, value, what)


def positive_int(name: str, value, what: str = "") -> int:
    """``value`` as an ``int`` if it is an integer >= 1 (not a ``bool``); else a ``ValueError`` that
    names the argument: ``"num_blocks must be a positive integer; got 0"``. ``what`` adds the unit
    (``"slots"``) to the message."""
    return _int_at_least(1, "positive", name, value, what)


def _int_at_least(low: int, kind: str, name: str, value, what: str) -> int:
    number = as_int(value)
    if number is None or number < low:
        unit = f" number of {what}" if what else ""
        raise ValueError(f"{name} must be a {kind} integer{unit}; got {value!r}")
    return number
