"""The declarative form of a value exercise: its answer, its tolerance and its table of mistakes.

A value exercise (the answer is a number, a list, a pair...) is checked by the same rules in the
notebook (``Exercise.check``) and on the course's website (``_static/exercises.js``, which reads
:func:`answer_spec`'s JSON, written into the page by the build). Nothing is typed twice: the answer,
the tolerance and every message live in the exercise's definition in ``chNN.py``.

Equality: numbers within ``tolerance`` (absolute; the default is ``math.isclose`` with a relative
1e-6), lists and tuples element by element (a list equals a tuple), ``unordered=True`` compares
sorted lists, ``ignore_case=True`` compares strings without case or surrounding spaces.

``mistakes`` is a list of ``(matcher, message)``, first match wins; one line each::

    mistakes=[(78, "that is the capacity with 16-token pages ..."),    # this exact wrong answer
              (Above(78), "bigger pages never fit MORE requests ..."),   # any answer above 78
              (Item(1, Above(2)), "Too many copies ..."),                # the pair's 2nd item > 2
              (OTHERWISE, "start with the weights ...")]                 # anything else

A matcher is a value (equal under the exercise's equality) or one of the rules below. Each rule is a
small class with ``matches`` here and the same test in JavaScript (``RULES`` in exercises.js); the
browser tests check that both give every message the same way.
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any

from ..validation import as_int

__all__ = ["Rule", "Above", "Below", "AtLeast", "NotMultipleOf", "LengthNot", "Item", "AnyItem",
           "OneOf", "AllOf", "Not", "FirstWrong", "NotAnInt", "OTHERWISE", "values_equal", "to_json_value",
           "answer_spec"]


class Rule:
    """A matcher for a family of wrong answers (not a value): ``matches(answer, ctx)``.

    A rule is declared by its ``op`` (its name in exercises.js), its ``fields`` (the constructor's
    arguments, in order, which are also its repr and, with ``op``, its JSON) and ``matches``."""

    op = ""
    fields: tuple[str, ...] = ()

    def __init__(self, *args):
        if len(args) != len(self.fields):
            raise TypeError(f"{type(self).__name__}({', '.join(self.fields)}) takes {len(self.fields)} "
                            f"argument(s); got {len(args)}")
        for name, value in zip(self.fields, args):
            setattr(self, name, value)

    def matches(self, answer: Any, ctx: "Context") -> bool:
        raise NotImplementedError

    def to_json(self) -> dict:
        return {"op": self.op, **{name: _json_arg(getattr(self, name)) for name in self.fields}}

    def __repr__(self) -> str:
        args = ", ".join(repr(getattr(self, name)) for name in self.fields)
        return f"{type(self).__name__}({args})"


def _json_arg(value):
    if isinstance(value, Rule):
        return value.to_json()
    if isinstance(value, (list, tuple)) and all(isinstance(v, Rule) for v in value) and value:
        return [v.to_json() for v in value]
    return to_json_value(value)


def _is_number(x) -> bool:
    """A real number, numpy's included; never a bool."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


class _Compare(Rule):
    """A number that stands in ``relation`` to ``value``."""
    fields = ("value",)
    relation = staticmethod(operator.gt)

    def matches(self, answer, ctx):
        return _is_number(answer) and self.relation(answer, self.value)


class Above(_Compare):
    """A number greater than ``value``."""
    op, relation = "above", staticmethod(operator.gt)


class Below(_Compare):
    """A number less than ``value``."""
    op, relation = "below", staticmethod(operator.lt)


class AtLeast(_Compare):
    """A number greater than or equal to ``value``."""
    op, relation = "at_least", staticmethod(operator.ge)


class NotMultipleOf(Rule):
    """An int that is not a multiple of ``n``; for a list, any of its items."""
    op, fields = "not_multiple_of", ("n",)

    def matches(self, answer, ctx):
        if isinstance(answer, (list, tuple)):
            return any(self.matches(a, ctx) for a in answer)
        return _is_number(answer) and answer % self.n != 0


class LengthNot(Rule):
    """A list or tuple whose length is not ``n``."""
    op, fields = "length_not", ("n",)

    def matches(self, answer, ctx):
        return isinstance(answer, (list, tuple)) and len(answer) != self.n


class Item(Rule):
    """A list or tuple whose item ``index`` (negative counts from the end) matches ``matcher``."""
    op, fields = "item", ("index", "matcher")

    def matches(self, answer, ctx):
        if not isinstance(answer, (list, tuple)) or not -len(answer) <= self.index < len(answer):
            return False
        return _match(self.matcher, answer[self.index], ctx.inner())


class AnyItem(Rule):
    """A list or tuple with at least one item that matches ``matcher``."""
    op, fields = "any_item", ("matcher",)

    def matches(self, answer, ctx):
        return isinstance(answer, (list, tuple)) and any(_match(self.matcher, a, ctx.inner())
                                                         for a in answer)


class _OfMany(Rule):
    """A rule whose one field is a list, given item by item: ``OneOf(3, 4)``,
    ``AllOf(Above(2), Below(5))``."""

    def __init__(self, *items):
        super().__init__(list(items))


class OneOf(_OfMany):
    """Equal to one of ``values``."""
    op, fields = "one_of", ("values",)

    def matches(self, answer, ctx):
        return any(values_equal(answer, v, ctx) for v in self.values)


class AllOf(_OfMany):
    """Matches every one of ``matchers``."""
    op, fields = "all_of", ("matchers",)

    def matches(self, answer, ctx):
        return all(_match(m, answer, ctx) for m in self.matchers)


class Not(Rule):
    """Does not match ``matcher``."""
    op, fields = "not", ("matcher",)

    def matches(self, answer, ctx):
        return not _match(self.matcher, answer, ctx)


class FirstWrong(Rule):
    """A list whose first item that differs from the answer's is item ``index``."""
    op, fields = "first_wrong", ("index",)

    def matches(self, answer, ctx):
        expected = ctx.expected
        if not isinstance(answer, (list, tuple)) or not isinstance(expected, (list, tuple)):
            return False
        inner = ctx.inner()
        for i in range(max(len(answer), len(expected))):
            if i >= len(answer) or i >= len(expected) or not values_equal(answer[i], expected[i], inner):
                return i == self.index
        return False


class NotAnInt(Rule):
    """Anything but an int (a float, a str, a bool...); with AnyItem, a list with such an item."""
    op = "not_an_int"

    def matches(self, answer, ctx):
        return as_int(answer) is None


class _Otherwise(Rule):
    """Every answer: the last entry of a table, for what no other entry caught."""
    op = "otherwise"

    def matches(self, answer, ctx):
        return True

    def __repr__(self):
        return "OTHERWISE"


OTHERWISE = _Otherwise()


class Context:
    """How values compare in one exercise: its tolerance and options, and its answer."""

    def __init__(self, expected=None, tolerance=None, unordered=False, ignore_case=False):
        self.expected = expected
        self.tolerance = tolerance
        self.unordered = unordered
        self.ignore_case = ignore_case

    def inner(self) -> "Context":
        """The context for the items of a list: no longer unordered at the top."""
        return Context(None, self.tolerance, False, self.ignore_case)


def _match(matcher, answer, ctx) -> bool:
    if isinstance(matcher, Rule):
        return matcher.matches(answer, ctx)
    return values_equal(answer, matcher, ctx)


def values_equal(answer: Any, expected: Any, ctx: Context) -> bool:
    """Equality of two plain values (numbers, str, bool, None, lists, tuples) under ``ctx``."""
    if isinstance(expected, bool) or isinstance(answer, bool):
        return type(answer) is type(expected) and answer == expected
    if _is_number(answer) and _is_number(expected):
        if ctx.tolerance is not None:
            return abs(answer - expected) <= ctx.tolerance
        return math.isclose(answer, expected, rel_tol=1e-6, abs_tol=1e-9)
    if isinstance(answer, str) and isinstance(expected, str):
        if ctx.ignore_case:
            return answer.strip().upper() == expected.strip().upper()
        return answer == expected
    if isinstance(answer, (list, tuple)) and isinstance(expected, (list, tuple)):
        if len(answer) != len(expected):
            return False
        if ctx.unordered:
            try:
                answer, expected = sorted(answer), sorted(expected)
            except TypeError:
                return False
        inner = ctx.inner()
        return all(values_equal(a, e, inner) for a, e in zip(answer, expected))
    if answer is None or expected is None:
        return answer is expected
    return False


# ---- the JSON the website reads ----------------------------------------------------------------
def to_json_value(value: Any):
    """A plain value tagged with its Python type, so that JavaScript keeps int/float/tuple apart."""
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, str):
        return {"str": value}
    if value is None:
        return {"none": None}
    if isinstance(value, tuple):
        return {"tuple": [to_json_value(v) for v in value]}
    if isinstance(value, list):
        return {"list": [to_json_value(v) for v in value]}
    raise TypeError(f"{value!r} ({type(value).__name__}) has no JSON form for the website")


def answer_spec(exercise) -> dict:
    """Everything the website needs to check ``exercise``'s answer as ``Exercise.check`` does."""
    from . import SITE_TRY_A_HINT
    return {"name": exercise.name,
            "expected": to_json_value(exercise.reference),
            "tolerance": exercise.tolerance,
            "unordered": exercise.unordered,
            "ignore_case": exercise.ignore_case,
            "mistakes": [[_json_arg(m) if isinstance(m, Rule) else {"op": "equals",
                                                                    "value": to_json_value(m)}, text]
                         for m, text in exercise.mistakes],
            "why": exercise.why,
            "fallback": SITE_TRY_A_HINT}
