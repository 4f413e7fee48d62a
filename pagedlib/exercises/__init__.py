"""Self-checking exercises: ``.check(answer)``, ``.hint(n)``, ``.solution()``.

Every chapter has a module here (``ch02``, ``ch04``, ...) that defines its exercises; in a notebook::

    from pagedlib.exercises import ch02 as ex
    my_waste = ...          # your answer here
    ex.waste.check(my_waste)

``check`` never raises. It shows, and returns, a :class:`Result` whose ``state`` is one of

- ``"correct"``, with one line on why it is right (the exercise's ``why``);
- ``"incorrect"``, with a one-line message that says what is wrong without giving the answer away:
  a targeted one for the common mistakes (``mistakes``; a float or a string where an int is asked;
  a tensor where a number is asked), else the exercise's ``diagnose``, else a pointer to the hints;
- ``"not attempted"``: the answer is ``...`` or ``None``, or a function that still raises
  ``NotImplementedError`` (the starter code is untouched); the message says what to do, on Colab too.

An answer is read before it is judged, by value, not by type (:func:`normalise`): numpy scalars and
arrays are the numbers and lists they hold, a Fraction is a float where a float is asked (an int
where an int is asked and it is whole). A number written as text, alone ("10", "37.6%") or as an item
of a pair or list (``("C", "3")``), is named with the type expected. What follows "... is not right."
is a sentence (:func:`sentence`); the site's checker (_static/exercises.js) does the same.

An exercise's answer is either a value or a function. A function is called on every test case and
compared with the reference; one that raises, returns the wrong type or runs too long is incorrect,
with a message that names the input it failed on. A checker never shows a traceback or a multi-line
tensor: values are shortened to one line, and a checker that fails on an odd answer says so plainly.
Where an exercise says "do not call spec.kv_bytes" (the answer itself), the function gets inputs
without that helper (``learner_args``, :func:`hide_helpers`), and a call to it is named.

Help comes in rungs: ``.hint()`` (1, the concept), ``.hint(2)`` (the approach), ``.hint(3)`` (almost
the code), then ``.solution()``. The course's site shows the same question, hints and solution in
collapsed dropdowns under each exercise (``help_html``; scripts/sync_notebooks.py writes them into
the notebooks from this registry). ``registry()`` returns every exercise.
"""
from __future__ import annotations

import contextlib
import copy
import html
import importlib
import inspect
import io
import math
import pkgutil
import re
import signal
import textwrap
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..output import display_or_print
from ..validation import as_int
from .answers import (OTHERWISE, Above, AllOf, AnyItem, AtLeast, Below, Context, FirstWrong, Item,
                      LengthNot, Not, NotAnInt, NotMultipleOf, OneOf, Rule, values_equal)

CORRECT, INCORRECT, NOT_ATTEMPTED = "correct", "incorrect", "not attempted"

_REGISTRY: dict[str, "Exercise"] = {}

# What each hint gives, gentlest first; an exercise has at least three (tests/test_exercises.py).
HINT_RUNGS = ("the concept", "the approach", "almost the code")
MIN_HINTS = len(HINT_RUNGS)
# Appended to every "Not attempted yet": the site shows the stored starter cells, which cannot run.
RUN_IT_YOURSELF = ("(Reading this on the website? Open the chapter in Colab with the badge at the top "
                   "of the page, then run the cells.)")

# What a wrong answer that no listed mistake explains gets: in a notebook, and on the website (whose
# exercise box has a Hint button, and no `.hint()` to call); otherwise the two verdicts are the same.
TRY_A_HINT = "Try `.hint()`."
SITE_TRY_A_HINT = "Press Hint for a clue."

_COLOURS = {CORRECT: "#1a7f37", INCORRECT: "#cf222e", NOT_ATTEMPTED: "#6e7781"}
_ICONS = {CORRECT: "Correct", INCORRECT: "Incorrect", NOT_ATTEMPTED: "Not attempted yet"}


@dataclass
class Result:
    """The outcome of ``Exercise.check``: ``state`` and a ``message`` for the learner."""

    exercise: str
    state: str
    message: str = ""
    _shown: bool = field(default=False, repr=False, compare=False)

    @property
    def correct(self) -> bool:
        return self.state == CORRECT

    def __str__(self) -> str:
        text = f"{_ICONS[self.state]} ({self.exercise})"
        return f"{text}: {self.message}" if self.message else text

    def _repr_html_(self) -> str:
        colour = _COLOURS[self.state]
        msg = f" {_inline_html(self.message)}" if self.message else ""
        return (f'<div style="border-left:4px solid {colour};padding:4px 10px;margin:4px 0">'
                f'<b style="color:{colour}">{_ICONS[self.state]}</b> '
                f'<code style="color:inherit;background:none">{html.escape(self.exercise)}</code>{msg}</div>')

    def _ipython_display_(self) -> None:
        # check() shows the result once; when the same object is also a cell's last value,
        # Jupyter would show it a second time: skip that.
        if self._shown:
            return
        self._shown = True
        _show(self)


_TEXT_ONLY = False  # set while help_html collects what .solution() shows


def _show(obj) -> None:
    """Display ``obj`` as HTML in a notebook (with a plain-text twin), as text elsewhere."""
    if _TEXT_ONLY:
        print(obj)
    else:
        display_or_print(obj, str(obj))


class HiddenHelper(AttributeError):
    """A learner's function used a helper that computes the exercise's own answer.

    An exercise that says "do not call ``spec.kv_bytes``" hands the learner's function inputs whose
    such helpers raise this (its ``learner_args``); the check shows its message as the verdict."""


def hide_helpers(obj: Any, names: Sequence[str], message: str) -> Any:
    """A copy of the dataclass ``obj`` whose attributes ``names`` raise :class:`HiddenHelper` with
    ``message`` ("{name}" in it is replaced by the attribute used). Its ``replace`` copies stay so."""
    import dataclasses

    def hidden(name):
        def fail(self):
            raise HiddenHelper(message.format(name=name))
        return property(fail)

    blind = type(type(obj).__name__, (type(obj),), {n: hidden(n) for n in names})
    blind.__qualname__ = type(obj).__qualname__
    return blind(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init})


class Timeout(BaseException):
    """An answer function ran longer than the exercise allows.

    A ``BaseException`` (like ``KeyboardInterrupt``), so that an ``except Exception`` inside the
    learner's loop cannot swallow it and keep the loop running.
    """


def _call_with_timeout(fn: Callable, args: tuple, seconds: float):
    """Call ``fn(*args)``; raise :class:`Timeout` if it runs longer than ``seconds``."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def on_alarm(signum, frame):
            raise Timeout()
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    box: dict[str, Any] = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - reported to the learner
            box["error"] = exc
    worker = threading.Thread(target=run, daemon=True)
    try:
        worker.start()
    except RuntimeError:     # no threads (Pyodide, in the site's browser runner, which keeps the time)
        return fn(*args)
    worker.join(seconds)
    if worker.is_alive():
        raise Timeout()
    if "error" in box:
        raise box["error"]
    return box["value"]


def default_compare(answer: Any, expected: Any, rel: float = 1e-6, abs_: float = 1e-9) -> bool:
    """Equality, with a tolerance for floats and element-wise for lists, tuples, dicts and tensors."""
    try:
        import torch
        if isinstance(expected, torch.Tensor):
            return (isinstance(answer, torch.Tensor) and answer.shape == expected.shape
                    and torch.allclose(answer.double(), expected.double(), rtol=1e-4, atol=1e-5,
                                       equal_nan=True))
    except ImportError:
        pass
    if isinstance(expected, bool) or isinstance(answer, bool):
        return type(answer) is type(expected) and answer == expected
    if isinstance(expected, (int, float)) and isinstance(answer, (int, float)):
        return math.isclose(answer, expected, rel_tol=rel, abs_tol=abs_)
    if isinstance(expected, (list, tuple)) and isinstance(answer, (list, tuple)):
        return len(answer) == len(expected) and all(
            default_compare(a, e, rel, abs_) for a, e in zip(answer, expected))
    if isinstance(expected, dict) and isinstance(answer, dict):
        return answer.keys() == expected.keys() and all(
            default_compare(answer[k], expected[k], rel, abs_) for k in expected)
    try:
        return bool(answer == expected)
    except Exception:  # noqa: BLE001 - an odd object is simply not equal
        return False


def _type_name(value: Any) -> str:
    return type(value).__name__


def _a(noun: str) -> str:
    """``noun`` with its indefinite article: "an int", "a float", "an Exercise"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _one_line(text: str, limit: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any, limit: int = 80) -> str:
    """A one-line description of ``value``: its repr, shortened; a tensor by its values when it has
    at most 8 in one row, else by dtype and shape (never a multi-line tensor repr)."""
    if _is_tensor(value):
        if value.dim() <= 1 and value.numel() <= 8:
            values = [round(v, 4) if isinstance(v, float) else v for v in value.flatten().tolist()]
            return f"tensor({values if value.dim() else values[0]})"
        return f"a {str(value.dtype).replace('torch.', '')} tensor of shape {list(value.shape)}"
    if isinstance(value, (list, tuple)) and any(_is_tensor(v) for v in value):
        inner = ", ".join(_short(v, limit) for v in value)
        text = f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
        return _one_line(text, 2 * limit)
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an object whose repr fails is still described
        text = f"<{_type_name(value)}>"
    return _one_line(text, limit)


def _is_tensor(value: Any) -> bool:
    return type(value).__name__ == "Tensor" and type(value).__module__.startswith("torch")


def _expected_kind(expected: Any) -> tuple[type, ...]:
    """The types an answer may have when the reference answer is ``expected``."""
    if isinstance(expected, bool):
        return (bool,)
    if isinstance(expected, int):
        return (int,)
    if isinstance(expected, float):
        return (int, float)
    if isinstance(expected, (list, tuple)):
        return (list, tuple)
    return (type(expected),)


class Exercise:
    """One self-checking exercise.

    ``reference`` is the solution: a value, or a function that the learner's function is compared
    with on each of ``cases`` (a list of argument tuples). ``compare(answer, expected)`` decides
    equality (default: :func:`default_compare`). ``diagnose(answer, expected, args)`` may return a
    message that explains a wrong answer without giving the right one away. ``mistakes`` lists common
    wrong answers, each ``(answer, message)`` (a value, or a function for a function exercise): an
    answer that matches one gets its message. ``wrong`` holds at least one wrong answer (with the
    mistakes' answers, what the contract tests use to prove that ``check`` can say "incorrect").
    ``hints`` climb :data:`HINT_RUNGS` (the concept, the approach, almost the code); ``why`` is the
    one line shown with "Correct" (why it is right, or what it means); ``explanation`` follows the
    solution. ``learner_args(args)`` turns a case's arguments into those the learner's function gets
    (the reference and the mistakes get the case itself): for instance a spec whose helper that
    computes the answer is hidden (:func:`hide_helpers`), so that "do not call it" holds.
    """

    message_limit = 400      # characters of a message shown; never cut what the learner must see

    def __init__(self, name: str, question: str, reference: Any, *,
                 cases: Sequence[tuple] | None = None,
                 compare: Callable[[Any, Any], bool] | None = None,
                 diagnose: Callable[..., str | None] | None = None,
                 hints: Sequence[str] = (),
                 wrong: Sequence[Any] = (),
                 mistakes: Sequence[tuple[Any, str]] = (),
                 why: str = "",
                 explanation: str = "",
                 timeout: float = 5.0,
                 tolerance: float | None = None,
                 unordered: bool = False,
                 ignore_case: bool = False,
                 learner_args: Callable[[tuple], tuple] | None = None):
        if callable(reference) and not cases:
            raise ValueError(f"exercise {name!r}: a function exercise needs test cases")
        if not wrong and not mistakes:
            raise ValueError(f"exercise {name!r}: give at least one wrong answer for the contract tests")
        if "\n" in why:
            raise ValueError(f"exercise {name!r}: why must be one line; got {why!r}")
        if compare is not None and (tolerance is not None or unordered or ignore_case):
            raise ValueError(f"exercise {name!r}: give compare or tolerance/unordered/ignore_case, not both")
        for entry in mistakes:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], str)):
                raise ValueError(f"exercise {name!r}: each of mistakes must be (answer, message); "
                                 f"got {entry!r}")
        self.name = name
        self.question = question
        self.reference = reference
        self.cases = [tuple(c) for c in (cases or [])]
        self.tolerance = tolerance
        self.unordered = unordered
        self.ignore_case = ignore_case
        if compare is None and not callable(reference) and _plain(reference):
            # a value exercise compares by its declarative rules, which the website shares
            compare = self._declared_equal
        self.compare = compare or default_compare
        self.diagnose = diagnose
        self.hints = list(hints)
        self.mistakes = list(mistakes)
        # rules (Above(78), OTHERWISE...) describe families of answers; only values are answers
        self.wrong = list(wrong) + [answer for answer, _ in self.mistakes if not isinstance(answer, Rule)]
        # "why" is the one line shown with Correct; a one-line explanation serves as both
        self.why = why or (explanation if explanation and "\n" not in explanation else "")
        self.explanation = explanation
        self.timeout = timeout
        self.learner_args = learner_args
        _REGISTRY[name] = self

    @property
    def is_function(self) -> bool:
        return callable(self.reference)

    def context(self, expected: Any = None) -> Context:
        """How this exercise compares values (tolerance, order, case), around ``expected``."""
        return Context(self.reference if expected is None else expected, self.tolerance,
                       self.unordered, self.ignore_case)

    def _declared_equal(self, answer: Any, expected: Any) -> bool:
        try:
            import torch
            if isinstance(answer, torch.Tensor):
                return False
        except ImportError:
            pass
        return values_equal(answer, expected, self.context(expected))

    @property
    def is_declarative(self) -> bool:
        """A value exercise checked by its answer, tolerance and mistakes alone (no diagnose, no
        compare function): the website can check it too (answers.answer_spec)."""
        return (not self.is_function and self.diagnose is None
                and self.compare == self._declared_equal)

    def __repr__(self) -> str:
        return f"<Exercise {self.name}: {self.question}>"

    # ---- checking -------------------------------------------------------------------------
    def check(self, answer: Any) -> Result:
        """Check ``answer``; show and return a :class:`Result`. Never raises."""
        try:
            state, message = self._judge(answer)
        except Exception:  # noqa: BLE001 - check must never crash a notebook
            state, message = INCORRECT, (
                f"the checker could not compare {_short(answer, 60)} with the solution: is it the "
                f"type and shape the question asks for?")
        if state == CORRECT and not message:
            message = self.why
        elif state == NOT_ATTEMPTED:
            message = f"{message} {RUN_IT_YOURSELF}".strip()
        result = Result(self.name, state, _one_line(message, self.message_limit))
        result._ipython_display_()
        return result

    def _judge(self, answer: Any) -> tuple[str, str]:
        if answer is ...:
            return NOT_ATTEMPTED, "Replace the `...` with your answer, then run the cell."
        if answer is None:
            return NOT_ATTEMPTED, ("Your answer is None: put your answer in its place, then run the "
                                   "cell. (A function that prints instead of returning gives None too.)")
        if self.is_function:
            return self._judge_function(answer)
        return self._judge_value(answer, self.reference, None)

    def _describe_input(self, args: tuple) -> str:
        """The arguments of a case in one line, each shortened on its own, so that a long list never
        hides a short argument after it: "snapshot=[(0, 512, None), ...], need=768"."""
        try:
            names = list(inspect.signature(self.reference).parameters)
        except (TypeError, ValueError):
            names = []
        if len(args) == 1:
            return _short(args[0])
        budget = max(24, 120 // max(1, len(args)))
        parts = [_short(a, budget) for a in args]
        if len(names) == len(args):
            parts = [f"{n}={p}" for n, p in zip(names, parts)]
        return "(" + ", ".join(parts) + ")"

    def _judge_value(self, answer: Any, expected: Any, args: tuple | None) -> tuple[str, str]:
        where = "" if args is None else f" for input {self._describe_input(args)}"
        what = "your answer is" if args is None else "the function returned"
        answer = normalise(answer, expected)
        kinds = _expected_kind(expected)
        if not isinstance(answer, kinds) and not self._compatible_number(answer, expected):
            return INCORRECT, _wrong_type(answer, kinds, what, where)
        slip = _wrong_item_type(answer, expected)
        if slip:
            return INCORRECT, f"{what} {_short(answer)}{where}: {slip}"
        try:
            right = self.compare(answer, expected)
        except Exception:  # noqa: BLE001 - a checker never leaks its own error
            right = False
        if right:
            return CORRECT, ""
        if args is not None:
            base = f"returned {_short(answer)}{where}, which is not right."
        else:
            base = f"{_short(answer)} is not right."
        message = self._mistake_message(answer, args, expected) or self._diagnosis(answer, expected, args)
        message = sentence(message or TRY_A_HINT)
        room = self.message_limit - len(message) - 1       # what is wrong is never cut: the rest is
        if len(base) > room:
            base = _one_line(base, max(40, room))
        return INCORRECT, f"{base} {message}"

    def _mistake_message(self, answer: Any, args: tuple | None, expected: Any = None) -> str | None:
        """The message of the first listed mistake that ``answer`` matches (on input ``args``)."""
        for mistake, message in self.mistakes:
            try:
                if isinstance(mistake, Rule):
                    if mistake.matches(answer, self.context(expected)):
                        return message
                    continue
                if args is not None and callable(mistake):
                    wrong = _call_with_timeout(mistake, copy.deepcopy(args), self.timeout)
                else:
                    wrong = mistake
                if self.compare(answer, wrong):
                    return message
            except BaseException:  # noqa: BLE001 - a broken mistake entry is simply no match
                continue
        return None

    def _diagnosis(self, answer: Any, expected: Any, args: tuple | None) -> str | None:
        if self.diagnose is None:
            return None
        try:
            message = self.diagnose(answer, expected, args) if args is not None \
                else self.diagnose(answer, expected)
        except Exception:  # noqa: BLE001 - a diagnose that fails on an odd answer says nothing
            return None
        return _one_line(message, 300) if message else None

    @staticmethod
    def _compatible_number(answer: Any, expected: Any) -> bool:
        """numpy scalars count as numbers: an integer type where an int is asked, any real where
        a float is asked. A Python float is never an int, even 4.0 (see :func:`_wrong_type`)."""
        import numbers
        if isinstance(expected, bool) or isinstance(answer, bool) or not isinstance(expected, (int, float)):
            return False
        if isinstance(expected, int):
            return as_int(answer) is not None
        return isinstance(answer, numbers.Real)

    def _judge_function(self, answer: Any) -> tuple[str, str]:
        if not callable(answer):
            return INCORRECT, f"expected a function, got a {_type_name(answer)}."
        library = _library_function(answer)
        if library:
            return INCORRECT, (f"that is pagedlib's own `{library}`, the answer itself: write your "
                               "own function (the library's version comes after the exercise).")
        for args in self.cases:
            # each call gets its own copy of the inputs: an answer that changes them in place
            # must not change the test cases (or the reference's result) for later checks
            expected = self.reference(*copy.deepcopy(args))
            given = copy.deepcopy(args)
            if self.learner_args is not None:
                given = tuple(self.learner_args(given))
            try:
                got = _call_with_timeout(answer, given, self.timeout)
            except NotImplementedError:
                return NOT_ATTEMPTED, "the function still raises NotImplementedError: fill in its body."
            except HiddenHelper as exc:
                return INCORRECT, f"{exc}"
            except Timeout:
                return INCORRECT, (f"the function ran for more than {self.timeout:g} s on input "
                                   f"{self._describe_input(args)}: is there a loop that never ends?")
            except Exception as exc:  # noqa: BLE001 - reported to the learner
                return INCORRECT, (f"the function raised {type(exc).__name__}: {_one_line(exc, 120)} "
                                   f"on input {self._describe_input(args)}.")
            state, message = self._judge_value(got, expected, args)
            if state != CORRECT:
                return state, message
        return CORRECT, ""

    # ---- help -----------------------------------------------------------------------------
    def hint_title(self, n: int) -> str:
        """"Hint 2 of 3 (the approach)": hint ``n``'s place on the ladder of :data:`HINT_RUNGS`."""
        total = len(self.hints)
        rung = HINT_RUNGS[0] if n == 1 else HINT_RUNGS[-1] if n == total else HINT_RUNGS[1]
        return f"Hint {n} of {total} ({rung})" if total >= MIN_HINTS else f"Hint {n} of {total}"

    def hint(self, n: int = 1) -> None:
        """Show hint number ``n``: 1 is the concept, 2 the approach, 3 almost the code."""
        if not self.hints:
            _show(_Text(f"No hints for {self.name}: try `.solution()`."))
        elif not isinstance(n, int) or not 1 <= n <= len(self.hints):
            _show(_Text(f"{self.name} has hints 1 to {len(self.hints)}; hint({n!r}) does not exist."))
        else:
            more = f" Next: .hint({n + 1})." if n < len(self.hints) else " Next: .solution()."
            _show(_Text(f"{self.hint_title(n)}: {self.hints[n - 1]}{more}"))

    def solution_code(self) -> str:
        """The solution's Python: the reference function's source, or the answer's repr. The site
        shows it highlighted, with the explanation as prose below it."""
        if self.is_function:
            return textwrap.dedent(inspect.getsource(self.reference)).rstrip("\n")
        return repr(self.reference)

    def solution_text(self) -> str:
        """The solution as ``.solution()`` shows it (a subclass may override either)."""
        body = self.solution_code() + ("\n" if self.is_function else "")   # a blank line after code
        text = f"Solution to {self.name}:\n{body}"
        if self.explanation:
            text += f"\n{self.explanation}"
        return text

    def solution(self) -> None:
        """Show the solution."""
        _show(_Text(self.solution_text()))

    def help_html(self) -> str:
        """The question, each hint and the solution as collapsed HTML ``<details>`` dropdowns.

        This is what the site (and Jupyter, in a markdown cell) shows under the exercise; it is
        made from this registry, so it always matches ``.hint(n)`` and ``.solution()``.
        """
        parts = [f'<div class="pagedlib-exercise-help" data-exercise="{html.escape(self.name)}">',
                 f"<p><strong>Exercise <code>{html.escape(self.name)}</code>.</strong> "
                 f"{_inline_html(self.question)}</p>"]
        for n, text in enumerate(self.hints, 1):
            parts.append(f'<details class="pagedlib-help"><summary>{html.escape(self.hint_title(n))}'
                         f"</summary>\n<p>{_inline_html(text)}</p>\n</details>")
        # No blank line anywhere: in Markdown (Jupyter's and the site's) a blank line ends a raw
        # HTML block, so an empty line of the solution's code holds a no-break space instead.
        solution = "\n".join(line if line.strip() else "&nbsp;"
                             for line in html.escape(_shown_text(self.solution)).split("\n"))
        parts.append(f'<details class="pagedlib-help"><summary>Solution</summary>\n'
                     f"<pre>{solution}</pre>\n</details>")
        parts.append("</div>")
        return "\n".join(parts)


def _library_function(answer: Any) -> str | None:
    """``module.name`` when ``answer`` is one of pagedlib's own functions (not an exercise's),
    handed in as the answer; else None."""
    module = getattr(answer, "__module__", None) or ""
    if module.startswith("pagedlib.") and not module.startswith(f"{__name__}"):
        return f"{module}.{getattr(answer, '__qualname__', getattr(answer, '__name__', '?'))}"
    return None


def normalise(answer: Any, expected: Any) -> Any:
    """``answer`` as the plain Python value it stands for, judged by value, not by type: numpy
    scalars and arrays become Python numbers and lists, a Fraction becomes a float where a float is
    asked (an int where an int is asked and it is whole), item by item inside lists and tuples.
    Anything else (a str, a tensor, a Fraction that is not whole where an int is asked) is left as
    it is, for the type check to name."""
    import numbers
    if type(answer).__module__ == "numpy" and hasattr(answer, "tolist") and not _is_tensor(expected):
        answer = answer.tolist()                 # ndarray -> (nested) list, numpy scalar -> number
    if isinstance(answer, numbers.Rational) and not isinstance(answer, (int, bool)) \
            and not isinstance(expected, bool):
        if isinstance(expected, float):
            return float(answer)
        if isinstance(expected, int) and answer.denominator == 1:
            return int(answer)
        return answer
    if isinstance(answer, (list, tuple)):
        items = expected if isinstance(expected, (list, tuple)) and len(expected) == len(answer) \
            else [None] * len(answer)
        return type(answer)(normalise(a, e) for a, e in zip(answer, items))
    return answer


def sentence(text: str) -> str:
    """``text`` as a sentence: its first letter a capital (it follows "... is not right.")."""
    return text[:1].upper() + text[1:] if text[:1].islower() else text


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _wrong_item_type(answer: Any, expected: Any, path: str = "") -> str | None:
    """The first item of a list or tuple written as text where the answer has a number there:
    ``("C", "3")`` for ``("C", 3)``. None when every item has a number's place right."""
    if not (isinstance(answer, (list, tuple)) and isinstance(expected, (list, tuple))
            and len(answer) == len(expected)):
        return None
    for i, (a, e) in enumerate(zip(answer, expected)):
        where = f"{path}[{i}]"
        if _is_number(e) and isinstance(a, str):
            want = "an int" if isinstance(e, int) else "a number"
            return (f"item {where} is the text {_short(a, 40)}, a str; expected {want} there: "
                    f"write the number itself, without quotes.")
        inner = _wrong_item_type(a, e, where)
        if inner:
            return inner
    return None


def _plain(value: Any) -> bool:
    """A value the website can hold too: numbers, str, bool, None, and lists and tuples of them."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return type(value) in (bool, int, float, str, type(None))
    return type(value) in (list, tuple) and all(_plain(v) for v in value)


def _wrong_type(answer: Any, kinds: tuple[type, ...], what: str, where: str) -> str:
    """The message for an answer of the wrong type, targeted at the common slips.

    ``what`` starts the sentence ("your answer is", "the function returned"), ``where`` names the
    input (or is empty)."""
    want = " or ".join(_a(k.__name__) for k in kinds)
    got = _type_name(answer)
    number_asked = any(k in (int, float) for k in kinds)
    if int in kinds and float not in kinds and isinstance(answer, float):
        return (f"{what} {_short(answer)}{where}, a float; expected an int. `/` always gives a "
                f"float: use `//` (which rounds down) or round the result yourself.")
    if answer is None:
        return (f"{what} None{where}; expected {want}. Does the function `return` its result? One "
                f"without `return` (or one that prints it) gives None.")
    if number_asked and isinstance(answer, str) and answer.strip().endswith("%"):
        share = " (a share as a fraction: 25% is 0.25)" if float in kinds else ""
        percent = _percent(answer)
        if float in kinds and percent is not None:
            share = f" (a share as a fraction: write {percent / 100!r})"
        return (f"{what} the text {_short(answer)}{where}, a str; expected {want}: "
                f"write the number itself, without quotes or a % sign{share}.")
    if number_asked and isinstance(answer, str):
        return (f"{what} the text {_short(answer)}{where}, a str; expected {want}: "
                f"write the number itself, without quotes.")
    if number_asked and _is_tensor(answer):
        return (f"{what} {_short(answer)}{where}, a tensor; expected {want}: "
                f"`.item()` turns a one-element tensor into a Python number.")
    return f"{what} {_short(answer)}{where}, {_a(got)}; expected {want}."


def _percent(text: str) -> float | None:
    """The number before the % of a text such as "37.6%" (or None): the site's checker reads the
    same (_static/exercises.js, percentOf)."""
    m = re.fullmatch(r"\s*([-+]?(?:\d+\.?\d*|\.\d+))\s*%\s*", text)
    return float(m.group(1)) if m else None


def _inline_html(text: str) -> str:
    """Escape ``text`` for HTML, with `code` spans and **bold** as in the notebooks' markdown."""
    out = html.escape(" ".join(text.split()), quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def _shown_text(show: Callable[[], None]) -> str:
    """What ``show()`` (``.solution``) prints outside IPython, as text."""
    global _TEXT_ONLY
    buffer = io.StringIO()
    _TEXT_ONLY = True
    try:
        with contextlib.redirect_stdout(buffer):
            show()
    finally:
        _TEXT_ONLY = False
    return buffer.getvalue().rstrip("\n")


class _Text(str):
    """Plain text that displays as preformatted HTML in a notebook."""

    def _repr_html_(self) -> str:
        return f"<pre style='white-space:pre-wrap'>{html.escape(str(self))}</pre>"


def registry() -> dict[str, Exercise]:
    """Every exercise of every chapter, by name (imports each chapter's module)."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("ch"):
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(sorted(_REGISTRY.items()))


__all__ = ["Exercise", "Result", "registry", "HiddenHelper", "hide_helpers", "default_compare", "normalise", "sentence", "CORRECT", "INCORRECT",
           "NOT_ATTEMPTED", "HINT_RUNGS", "MIN_HINTS", "Rule", "Above", "Below", "AtLeast",
           "NotMultipleOf", "LengthNot", "Item", "AnyItem", "OneOf", "AllOf", "Not", "FirstWrong", "NotAnInt",
           "OTHERWISE"]
