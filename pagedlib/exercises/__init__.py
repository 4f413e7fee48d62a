"""Self-checking exercises: ``.check(answer)``, ``.hint(n)``, ``.solution()``.

Every chapter has a module here (``ch02``, ``ch04``, ...) that defines its exercises; in a notebook::

    from pagedlib.exercises import ch02 as ex
    my_waste = ...          # your answer here
    ex.waste.check(my_waste)

``check`` never raises. It shows, and returns, a :class:`Result` whose ``state`` is one of

- ``"correct"``;
- ``"incorrect"``, with a message that says what is wrong without giving the answer away;
- ``"not attempted"``: the answer is ``...`` or ``None``, or a function that still raises
  ``NotImplementedError`` (the starter code is untouched).

An exercise's answer is either a value or a function. A function is called on every test case and
compared with the reference; one that raises, returns the wrong type or runs too long is incorrect,
with a message that names the input it failed on. ``registry()`` returns every exercise.
"""
from __future__ import annotations

import copy
import html
import importlib
import inspect
import math
import pkgutil
import signal
import textwrap
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

CORRECT, INCORRECT, NOT_ATTEMPTED = "correct", "incorrect", "not attempted"

_REGISTRY: dict[str, "Exercise"] = {}

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
        msg = f" {html.escape(self.message)}" if self.message else ""
        return (f'<div style="border-left:4px solid {colour};padding:4px 10px;margin:4px 0">'
                f'<b style="color:{colour}">{_ICONS[self.state]}</b> '
                f'<code>{html.escape(self.exercise)}</code>{msg}</div>')

    def _ipython_display_(self) -> None:
        # check() shows the result once; when the same object is also a cell's last value,
        # Jupyter would show it a second time: skip that.
        if self._shown:
            return
        self._shown = True
        _show(self)


def _show(obj) -> None:
    """Display ``obj`` as HTML in a notebook (with a plain-text twin), as text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
        if get_ipython() is not None:
            display({"text/html": obj._repr_html_(), "text/plain": str(obj)}, raw=True)
            return
    except ImportError:
        pass
    print(obj)


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
    worker.start()
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


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
    message that explains a wrong answer without giving the right one away. ``wrong`` holds at least
    one wrong answer, which the contract tests use to prove that ``check`` can say "incorrect".
    """

    def __init__(self, name: str, question: str, reference: Any, *,
                 cases: Sequence[tuple] | None = None,
                 compare: Callable[[Any, Any], bool] | None = None,
                 diagnose: Callable[..., str | None] | None = None,
                 hints: Sequence[str] = (),
                 wrong: Sequence[Any] = (),
                 explanation: str = "",
                 timeout: float = 5.0):
        if callable(reference) and not cases:
            raise ValueError(f"exercise {name!r}: a function exercise needs test cases")
        if not wrong:
            raise ValueError(f"exercise {name!r}: give at least one wrong answer for the contract tests")
        self.name = name
        self.question = question
        self.reference = reference
        self.cases = [tuple(c) for c in (cases or [])]
        self.compare = compare or default_compare
        self.diagnose = diagnose
        self.hints = list(hints)
        self.wrong = list(wrong)
        self.explanation = explanation
        self.timeout = timeout
        _REGISTRY[name] = self

    @property
    def is_function(self) -> bool:
        return callable(self.reference)

    def __repr__(self) -> str:
        return f"<Exercise {self.name}: {self.question}>"

    # ---- checking -------------------------------------------------------------------------
    def check(self, answer: Any) -> Result:
        """Check ``answer``; show and return a :class:`Result`. Never raises."""
        try:
            state, message = self._judge(answer)
        except Exception as exc:  # noqa: BLE001 - check must never crash a notebook
            state, message = INCORRECT, f"checking the answer failed: {type(exc).__name__}: {exc}"
        result = Result(self.name, state, message)
        result._ipython_display_()
        return result

    def _judge(self, answer: Any) -> tuple[str, str]:
        if answer is ... or answer is None:
            return NOT_ATTEMPTED, "replace the `...` with your answer, then run the cell again."
        if self.is_function:
            return self._judge_function(answer)
        return self._judge_value(answer, self.reference, None)

    def _judge_value(self, answer: Any, expected: Any, args: tuple | None) -> tuple[str, str]:
        where = "" if args is None else f" for input {_short(args if len(args) != 1 else args[0])}"
        kinds = _expected_kind(expected)
        if not isinstance(answer, kinds) and not self._compatible_number(answer, expected):
            want = " or ".join(k.__name__ for k in kinds)
            return INCORRECT, f"the answer{where} is a {_type_name(answer)}; expected a {want}."
        if self.compare(answer, expected):
            return CORRECT, ""
        message = None
        if self.diagnose is not None:
            try:
                message = self.diagnose(answer, expected, args) if args is not None \
                    else self.diagnose(answer, expected)
            except Exception:  # noqa: BLE001
                message = None
        if args is not None:
            base = f"returned {_short(answer)}{where}, which is not right."
        else:
            base = f"{_short(answer)} is not right."
        return INCORRECT, f"{base} {message}" if message else f"{base} Try `.hint()`."

    @staticmethod
    def _compatible_number(answer: Any, expected: Any) -> bool:
        # numpy / torch scalars count as numbers
        try:
            import numbers
            return (isinstance(expected, (int, float)) and not isinstance(expected, bool)
                    and isinstance(answer, numbers.Number) and not isinstance(answer, bool)
                    and (isinstance(expected, float) or float(answer).is_integer()))
        except Exception:  # noqa: BLE001
            return False

    def _judge_function(self, answer: Any) -> tuple[str, str]:
        if not callable(answer):
            return INCORRECT, f"expected a function, got a {_type_name(answer)}."
        for args in self.cases:
            # each call gets its own copy of the inputs: an answer that changes them in place
            # must not change the test cases (or the reference's result) for later checks
            expected = self.reference(*copy.deepcopy(args))
            try:
                got = _call_with_timeout(answer, copy.deepcopy(args), self.timeout)
            except NotImplementedError:
                return NOT_ATTEMPTED, "the function still raises NotImplementedError: fill in its body."
            except Timeout:
                return INCORRECT, (f"the function ran for more than {self.timeout:g} s on input "
                                   f"{_short(args)}: is there a loop that never ends?")
            except Exception as exc:  # noqa: BLE001 - reported to the learner
                return INCORRECT, (f"the function raised {type(exc).__name__}: {exc} "
                                   f"on input {_short(args)}.")
            state, message = self._judge_value(got, expected, args)
            if state != CORRECT:
                return state, message
        return CORRECT, ""

    # ---- help -----------------------------------------------------------------------------
    def hint(self, n: int = 1) -> None:
        """Show hint number ``n`` (1 is gentlest)."""
        if not self.hints:
            _show(_Text(f"No hints for {self.name}: try `.solution()`."))
        elif not 1 <= n <= len(self.hints):
            _show(_Text(f"{self.name} has hints 1 to {len(self.hints)}; hint({n}) does not exist."))
        else:
            more = f" (hint {n} of {len(self.hints)})" if len(self.hints) > 1 else ""
            _show(_Text(f"Hint{more}: {self.hints[n - 1]}"))

    def solution(self) -> None:
        """Show the solution."""
        if self.is_function:
            body = textwrap.dedent(inspect.getsource(self.reference))
        else:
            body = repr(self.reference)
        text = f"Solution to {self.name}:\n{body}"
        if self.explanation:
            text += f"\n{self.explanation}"
        _show(_Text(text))


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


__all__ = ["Exercise", "Result", "registry", "default_compare", "CORRECT", "INCORRECT",
           "NOT_ATTEMPTED"]
