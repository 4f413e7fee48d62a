"""Claims that hold for the course's settings and say so when a learner changes them (every chapter).

Every number in the course's prose is computed in a cell and checked. A plain ``assert`` would stop a
learner who changes a seed, a page size or a model and re-runs, with a bare ``AssertionError`` in the
middle of a lesson. :func:`claim` checks the same condition, but tells the two cases apart:

- with the chapter's own settings, a claim that fails is a bug: it raises :class:`ClaimFailed` (an
  ``AssertionError``), so the notebook tests (nbval) fail;
- with settings the learner changed, it shows a short note that names the claim, the settings it was
  made for and what changed, and lets the notebook go on::

      claim(waste == 0.748, "74.8% of the reserved slots are wasted",
            settings={"lengths": lengths}, defaults={"lengths": [512, 37, 1900, 128, 4]})
"""
from __future__ import annotations

import html
from typing import Any, Mapping

from .output import display_or_print

__all__ = ["claim", "ClaimFailed"]


class ClaimFailed(AssertionError):
    """A claim of the course failed with the chapter's own settings: the text or the code is wrong."""


def _changed(settings: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The settings whose value differs from the chapter's: name -> (chapter's value, learner's value)."""
    missing = object()
    return {name: (defaults.get(name, missing), value) for name, value in settings.items()
            if defaults.get(name, missing) != value}


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ClaimNote(str):
    """The note shown when a claim does not hold for changed settings (HTML in a notebook)."""

    def _repr_html_(self) -> str:
        return ('<div style="border-left:4px solid #9a6700;padding:4px 10px;margin:4px 0">'
                f"{html.escape(str(self))}</div>")


def claim(holds: bool, text: str, *, settings: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
    """Check one claim of the prose; return whether it holds.

    ``holds`` is the checked condition, ``text`` the claim in words (as the prose states it),
    ``settings`` the values of the knobs the claim depends on as the cell sees them, ``defaults`` the
    chapter's values of the same knobs. A claim that fails with the chapter's settings raises
    :class:`ClaimFailed`; with changed settings it shows a note and returns ``False``.
    """
    if not isinstance(text, str) or not text:
        raise ValueError("text must say the claim in words, e.g. '74.8% of the slots are wasted'")
    unknown = set(settings) - set(defaults)
    if unknown:
        raise ValueError(f"settings {sorted(unknown)} have no default: give defaults for every setting")
    if holds:
        return True
    changed = _changed(settings, defaults)
    if not changed:
        raise ClaimFailed(f"the course claims: {text}; but with the chapter's own settings it does not "
                          "hold. This is a bug in the chapter: please report it.")
    what = "; ".join(f"{name} = {_short(new)} (the chapter uses {_short(old)})"
                     for name, (old, new) in changed.items())
    note = ClaimNote(f"Note: the claim \"{text}\" holds for the chapter's settings, not for yours: {what}. "
                     "That is expected when you explore; restore the settings to see it hold again.")
    display_or_print(note, str(note))
    return False
