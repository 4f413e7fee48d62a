"""Checking a learner's Triton kernel against a PyTorch reference (the kernel exercises of chapter 8).

A :class:`KernelExercise` is an :class:`~pagedlib.exercises.Exercise` whose answer is a ``@triton.jit``
kernel with the signature its starter code gives. ``check(kernel)`` launches the kernel (through the
Triton interpreter on a CPU) on each :class:`KernelCase`: small shapes with ragged lengths, NaN in every
cache slot that no sequence owns, and a sequence of one block + 1 token. For the first case that fails it
says which case and how: the kernel raised, an element of the output was never written, the kernel
wrote outside its output, a NaN leaked in from an unowned slot, or the first wrong element with its
index and both values. It never prints a whole tensor. A kernel whose body still has the starter's
``raise NotImplementedError`` is "not attempted".

Inputs are copied before every launch, and each floating-point input and the output sit inside a
larger buffer with guard rows before and after: a kernel that reads a block id of -1 (an unused
block-table entry) gets NaN from the guard rather than memory it does not own, and a store outside
the output is caught.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import triton

from .. import runtime
from . import CORRECT, INCORRECT, NOT_ATTEMPTED, Exercise, Timeout, _call_with_timeout

__all__ = ["KernelCase", "KernelExercise", "new_output", "describe_cache"]

NAN_CAUSE = "Here every cache slot no sequence owns holds NaN: some tl.load read one."
UNWRITTEN = -12288.0     # what an output holds before the kernel runs (exact in fp16 and fp32)
GUARD_ROWS = 2           # rows of dim 0 of guard before and after each guarded tensor


@dataclass
class KernelCase:
    """One launch of a kernel exercise: its inputs, the reference output and a label in words."""

    label: str                                   # e.g. "seq_len 10, page 2, kv_head 1"
    inputs: dict[str, Any]                       # the launcher's keyword arguments
    expected: torch.Tensor                       # the PyTorch reference's output
    meta: dict[str, Any] = field(default_factory=dict)   # extra facts a diagnosis may use


def describe_cache(cache: torch.Tensor) -> str:
    """A cache's shape in words: '6 blocks x 4 tokens x 2 K/V heads x 16 dims'."""
    b, t, h, d = cache.shape
    return f"{b} blocks x {t} tokens x {h} K/V heads x {d} dims"


def _guarded(t: torch.Tensor, fill: float) -> torch.Tensor:
    """A contiguous copy of ``t`` inside a buffer with ``GUARD_ROWS`` rows of ``fill`` on each side."""
    row = t[0].numel() if t.dim() > 0 and t.shape[0] > 0 else 1
    pad = GUARD_ROWS * row
    buf = torch.full((t.numel() + 2 * pad,), fill, dtype=t.dtype, device=t.device)
    view = buf[pad:pad + t.numel()].view(t.shape)
    view.copy_(t)
    return view


def new_output(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An output tensor for a kernel exercise's launcher: filled with ``UNWRITTEN``, with guards."""
    return _guarded(torch.full(tuple(shape), UNWRITTEN, dtype=dtype, device=device), UNWRITTEN)


def _copy_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """Fresh inputs for one launch: float tensors guarded by NaN rows, other tensors cloned."""
    out = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor):
            value = _guarded(value, float("nan")) if value.is_floating_point() else value.clone()
        out[name] = value
    return out


def _is_kernel(obj: Any) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    return isinstance(obj, (JITFunction, InterpretedFunction))


def raises_not_implemented(fn: Callable) -> bool:
    """True if the source of ``fn`` still has a ``raise NotImplementedError`` (the starter's marker)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def _root_cause(exc: BaseException) -> BaseException:
    """The learner's own error inside the interpreter's wrapper (InterpreterError wraps it)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _one_line(exc: BaseException, limit: int = 240) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    text = lines[-1] if lines else ""
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _advice(exc: BaseException) -> str:
    """A hint for the errors a first kernel commonly raises, or ''."""
    text = str(exc)
    if isinstance(exc, TypeError) and "argument" in text:
        return " Keep the starter's signature: the checker passes exactly those arguments."
    if "power of 2" in text or "power of two" in text:
        return " Every tl.arange length must be a power of two (use the BLOCK_SIZE and HEAD_DIM given)."
    return ""


def _index(flat: int, shape: Sequence[int], name: str = "out") -> str:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return name + "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


def _num(x: float) -> str:
    return f"{x:.4g}"


def compare_outputs(got, expected, name: str = "out") -> str | None:
    """None if ``got`` matches ``expected``; otherwise one sentence on the first thing that is wrong.

    A kernel with several outputs returns a dict of them, and its case's ``expected`` is a dict with
    the same names: each is compared in turn, and the sentence names the output.
    """
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"the launcher returned {type(got).__name__}, not the outputs {sorted(expected)}."
        for key, want in expected.items():
            problem = compare_outputs(got[key], want, key)
            if problem is not None:
                return problem
        return None
    if got.shape != expected.shape:
        return f"`{name}` has shape {list(got.shape)}, the reference {list(expected.shape)}."
    buf = got._base if got._base is not None else None
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    if buf is not None:
        pad = buf.numel() - got.numel()
        outside = torch.cat([buf[: pad // 2], buf[pad // 2 + got.numel():]]).double().cpu()
        if (outside != UNWRITTEN).any():
            return (f"the kernel stored values outside `{name}` (before its first or after its last "
                    "element): check the pointers and the mask of its tl.store.")
    total = e.numel()
    unwritten = (g == UNWRITTEN) & (e != UNWRITTEN)
    if unwritten.any():
        first = int(unwritten.flatten().nonzero()[0])
        return (f"{_index(first, e.shape, name)} was never written ({int(unwritten.sum())} of {total} "
                f"elements were not): the kernel must store every element of `{name}`.")
    leak = torch.isnan(g) & ~torch.isnan(e)
    if leak.any():
        first = int(leak.flatten().nonzero()[0])
        return (f"NaN leaked into the output: {_index(first, e.shape, name)} is nan where the reference has "
                f"{_num(e.flatten()[first].item())} ({int(leak.sum())} of {total} elements are NaN). "
                + NAN_CAUSE)
    bad = ~torch.isclose(g, e, rtol=_tolerance(got.dtype), atol=_tolerance(got.dtype), equal_nan=True)
    if bad.any():
        first = int(bad.flatten().nonzero()[0])
        return (f"first wrong element: {_index(first, e.shape, name)} = {_num(g.flatten()[first].item())} "
                f"where the reference has {_num(e.flatten()[first].item())} "
                f"({int(bad.sum())} of {total} elements are wrong).")
    return None


def _shapes(expected) -> str:
    """'out [4, 16]', or each output's name and shape for a kernel with several."""
    if isinstance(expected, dict):
        return ", ".join(f"{k} {list(v.shape)}" for k, v in expected.items())
    return f"out {list(expected.shape)}"


def _tolerance(dtype: torch.dtype) -> float:
    return 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


class KernelExercise(Exercise):
    """An exercise whose answer is a ``@triton.jit`` kernel, checked by launching it on each case.

    ``reference`` is the solution kernel; ``launch(kernel, **case.inputs)`` launches a kernel with the
    exercise's signature and returns its output (made with :func:`new_output`); ``cases`` are
    :class:`KernelCase` objects. ``diagnose(got, case)`` may add a targeted sentence to a failure.
    ``wrong`` holds wrong kernels, which the contract tests use to prove ``check`` says "incorrect".
    The reference is stored as the kernel's Python function, so ``solution()`` can show its source.
    """

    def __init__(self, name: str, question: str, reference: Any, *,
                 launch: Callable[..., torch.Tensor], cases: Sequence[KernelCase],
                 diagnose: Callable[[torch.Tensor, KernelCase], str | None] | None = None,
                 hints: Sequence[str] = (), wrong: Sequence[Any] = (), explanation: str = "",
                 timeout: float = 30.0, diagnosis_names_nan_cause: bool = False):
        if not _is_kernel(reference):
            raise ValueError(f"exercise {name!r}: reference must be a @triton.jit kernel")
        self.kernel = reference
        self.launch = launch
        self.kernel_cases = list(cases)
        self.kernel_diagnose = diagnose
        # a kernel that computes NaN without reading a cache (0 / 0, inf / inf): its diagnosis says
        # why, in place of the usual "some tl.load read one"
        self.diagnosis_names_nan_cause = diagnosis_names_nan_cause
        super().__init__(name, question, reference.fn, cases=[(c,) for c in self.kernel_cases],
                         hints=hints, wrong=wrong, explanation=explanation, timeout=timeout)

    def _as_kernel(self, answer: Any) -> tuple[Any, tuple[str, str] | None]:
        """(kernel to launch, None), or (None, (state, message)) when there is nothing to launch."""
        if not callable(answer):
            return None, (INCORRECT, f"expected a @triton.jit kernel, got a {type(answer).__name__}.")
        fn = answer.fn if _is_kernel(answer) else answer
        if raises_not_implemented(fn):
            return None, (NOT_ATTEMPTED, "the kernel still has `raise NotImplementedError`: delete that "
                                         "line, write the kernel's body, then run the cell again.")
        if _is_kernel(answer):
            if runtime.kernel_is_interpreted(answer) != runtime.INTERPRET:
                return None, (INCORRECT, "this kernel was defined before TRITON_INTERPRET was set, so it "
                                         "cannot run here: restart the notebook's kernel and run the "
                                         "setup cell (`import pagedlib`) before defining it.")
            return answer, None
        try:
            return triton.jit(answer), None      # a kernel body written without @triton.jit
        except Exception as exc:  # noqa: BLE001 - reported to the learner
            return None, (INCORRECT, f"expected a @triton.jit kernel; this function cannot be made into "
                                     f"one ({_one_line(exc)}).")

    def _judge_function(self, answer: Any) -> tuple[str, str]:
        kernel, verdict = self._as_kernel(answer)
        if verdict is not None:
            return verdict
        n = len(self.kernel_cases)
        for i, case in enumerate(self.kernel_cases, 1):
            where = f"case {i} of {n} ({case.label}; {_shapes(case.expected)})"
            try:
                inputs = _copy_inputs(case.inputs)
                with warnings.catch_warnings():      # the interpreter's NumPy warns on overflow
                    warnings.simplefilter("ignore", RuntimeWarning)
                    got = _call_with_timeout(lambda: self.launch(kernel, **inputs), (), self.timeout)
            except Timeout:
                return INCORRECT, (f"{where}: the kernel ran for more than {self.timeout:g} s: is there a "
                                   "loop that never ends?")
            except Exception as exc:  # noqa: BLE001 - reported to the learner
                cause = _root_cause(exc)
                if isinstance(cause, NotImplementedError):
                    return NOT_ATTEMPTED, "the kernel still raises NotImplementedError: write its body."
                return INCORRECT, f"{where}: the kernel raised {_one_line(cause)}.{_advice(cause)}"
            problem = compare_outputs(got, case.expected)
            if problem is None:
                continue
            extra = None
            if self.kernel_diagnose is not None:
                try:
                    extra = self.kernel_diagnose(got, case)
                except Exception:  # noqa: BLE001 - a diagnosis must never hide the verdict
                    extra = None
            if extra and self.diagnosis_names_nan_cause:
                problem = problem.replace(" " + NAN_CAUSE, "")
            message = f"{where}: {problem}"
            return INCORRECT, f"{message} {extra}" if extra else f"{message} Try `.hint()`."
        return CORRECT, ""
