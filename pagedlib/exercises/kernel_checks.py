"""Checking a learner's Triton kernel against a PyTorch reference (the kernel exercises of chapter 8).

A :class:`KernelExercise` is an :class:`~pagedlib.exercises.Exercise` whose answer is a ``@triton.jit``
kernel with the signature its starter code gives. ``check(kernel)`` launches the kernel (through the
Triton interpreter on a CPU) on each :class:`KernelCase`: small shapes with ragged lengths, NaN in every
cache slot that no sequence owns, and a sequence of one block + 1 token. For the first case that fails it
says which case and how: the kernel raised (with the kernel's line that raised), an element of the
output was never written, the kernel wrote outside its output, a NaN leaked in from an unowned slot,
or the first wrong element with its index and both values. It never prints a whole tensor. A kernel
whose body still has the starter's ``raise NotImplementedError`` is "not attempted".

Each exercise lists its common mistakes as data: ``mistakes``, pairs of (a kernel with exactly that
one mistake, the message for it), most made with :func:`variant` (the reference kernel with one piece
of its source replaced). A kernel whose wrong output equals a mistake's output on the failing case
gets that mistake's message. Under the interpreter a masked ``tl.load`` without ``other=`` reads NaN
in its masked lanes (on a GPU they hold whatever is in memory), so a kernel that relies on them fails
here as it would there. A failure that a known version problem or the import order explains says so,
with the fix (``pagedlib.runtime``).

Inputs are copied before every launch, and each floating-point input and the output sit inside a
larger buffer with guard rows before and after: a kernel that reads a block id of -1 (an unused
block-table entry) gets NaN from the guard rather than memory it does not own, and a store outside
the output is caught.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import itertools
import linecache
import re
import textwrap
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import triton

from .. import runtime
from . import CORRECT, INCORRECT, NOT_ATTEMPTED, Exercise, Timeout, _call_with_timeout

__all__ = ["KernelCase", "KernelExercise", "new_output", "describe_cache", "variant", "forbidden_load_message"]

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


_VARIANTS = itertools.count()


def variant(kernel: Any, old: str, new: str) -> Any:
    """A copy of the ``@triton.jit`` ``kernel`` with the text ``old`` of its source (which must occur
    exactly once) replaced by ``new``: the reference with exactly one mistake, for ``mistakes``."""
    fn = kernel.fn if _is_kernel(kernel) else kernel
    source = textwrap.dedent(inspect.getsource(fn))
    if source.count(old) != 1:
        raise ValueError(f"variant of {fn.__name__}: {old!r} must occur exactly once in its source; "
                         f"it occurs {source.count(old)} times")
    name = f"{fn.__name__}_mistake_{next(_VARIANTS)}"
    source = source.replace(old, new).replace(f"def {fn.__name__}(", f"def {name}(", 1)
    filename = f"<pagedlib mistake {name}>"
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)   # Triton reads the source back
    namespace = dict(fn.__globals__)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the course's own kernel source
    return namespace[name]


@dataclass
class LoadWatch:
    """What :func:`poisoned_masked_loads` watches for: a ``tl.load`` lane (not masked off) that reads
    one of ``forbidden`` (the byte addresses of the NaN a case's inputs hold: cache slots no
    sequence owns, and the guard rows around every input). ``kernel`` is the learner's function, whose
    line the first such load is reported at; ``found`` is filled in: (line, had a mask, lanes)."""

    forbidden: Any                               # sorted numpy array of uint64 addresses
    kernel: Callable
    found: tuple[str, bool, int] | None = None


def forbidden_addresses(inputs: dict[str, Any]) -> Any:
    """The byte addresses of every NaN in the floating-point tensors of ``inputs`` (guarded copies:
    their buffers' guard rows included): what no load of a correct kernel reads."""
    import numpy as np
    found = []
    for value in inputs.values():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            buf = value._base if value._base is not None else value
            idx = torch.isnan(buf.reshape(-1)).nonzero().flatten().numpy().astype(np.uint64)
            found.append(np.uint64(buf.data_ptr()) + idx * np.uint64(buf.element_size()))
    return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.uint64)


def _kernel_line_now(kernel: Callable) -> str:
    """'line 12: `k = tl.load(key_cache + ptrs)`': the line of ``kernel`` running now (its innermost
    frame on the stack), or 'a tl.load' when none is."""
    import sys
    code = getattr(kernel, "__code__", None)
    frame = sys._getframe()
    while frame is not None:
        if code is not None and frame.f_code.co_filename == code.co_filename \
                and frame.f_code.co_name == code.co_name:
            text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return f"line {frame.f_lineno}: `{text}`" if text else f"line {frame.f_lineno}"
        frame = frame.f_back
    return "a tl.load"


@contextlib.contextmanager
def poisoned_masked_loads(watch: LoadWatch | None = None):
    """Inside this block, a masked floating-point ``tl.load`` without ``other=`` reads NaN in its
    masked lanes under the Triton interpreter (it reads 0 otherwise; on a GPU they are undefined).
    With ``watch``, the first load whose lanes read a forbidden address is recorded in it, with
    whether the load had a mask: a kernel must not read those rows even when a later ``tl.where``
    throws the values away (on a GPU they are another sequence's, or past the cache)."""
    try:
        import numpy as np
        from triton.runtime import interpreter
        builder = interpreter.InterpreterBuilder
        original, original_load = builder.create_masked_load, builder.create_load
    except (ImportError, AttributeError):
        yield
        return

    def check(ptrs, mask, had_mask):
        if watch is None or watch.found is not None or not len(watch.forbidden):
            return
        try:
            lanes = np.asarray(ptrs.data).astype(np.uint64)
            active = np.broadcast_to(np.asarray(mask.data, dtype=bool), lanes.shape) if had_mask else True
            bad = np.isin(lanes, watch.forbidden) & active
            if bad.any():
                watch.found = (_kernel_line_now(watch.kernel), had_mask, int(bad.sum()))
        except Exception:  # noqa: BLE001 - an interpreter this does not know: no watch
            pass

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        check(ptrs, mask, True)
        if other is None:
            try:
                dtype_tt = ptrs.get_element_ty()
                dtype_np = interpreter._get_np_dtype(dtype_tt)
                if np.issubdtype(dtype_np, np.floating):
                    other = interpreter.TensorHandle(np.full(ptrs.data.shape, np.nan, dtype=dtype_np),
                                                     dtype_tt)
            except Exception:  # noqa: BLE001 - an interpreter this does not know: no poison
                pass
        return original(self, ptrs, mask, other, *args, **kwargs)

    def create_load(self, ptr, *args, **kwargs):
        check(ptr, None, False)
        mask = interpreter.TensorHandle(np.ones_like(ptr.data, dtype=bool), interpreter.tl.int1)
        return original(self, ptr, mask, None, *args, **kwargs)

    builder.create_masked_load = create_masked_load
    builder.create_load = create_load
    try:
        yield
    finally:
        builder.create_masked_load = original
        builder.create_load = original_load


def forbidden_load_message(found: tuple[str, bool, int]) -> str:
    """What a load of rows no sequence owns means, for a load with or without a mask."""
    line, had_mask, lanes = found
    if had_mask:
        return (f"`{line}` reads {lanes} elements no sequence owns (NaN here; on a GPU another "
                "sequence's rows, or memory past the cache): its mask lets rows past the end of the "
                "sequence through. Build it from each row's token position, `< seq_len`.")
    return (f"`{line}` loads without a mask, so it reads {lanes} elements no sequence owns (NaN "
            "here; on a GPU another sequence's rows, or memory past the cache), even if a later "
            "tl.where discards them: those rows must not be read at all. Give the load "
            "`mask=valid[:, None], other=0.0`.")


def masked_loads_without_other(fn: Callable) -> list[str]:
    """The source lines of ``fn`` with a ``tl.load(..., mask=...)`` that gives no ``other``."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return []
    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load"):
            keywords = {k.arg for k in node.keywords}
            has_mask = "mask" in keywords or len(node.args) >= 2
            has_other = "other" in keywords or len(node.args) >= 3
            if has_mask and not has_other:
                found.append(lines[node.lineno - 1].strip())
    return found


def kernel_line(exc: BaseException, fn: Callable) -> str | None:
    """The line of the kernel ``fn`` where ``exc`` (or the error it wraps) was raised:
    "line 12: `s = tl.where(valid, s, 0.0)`", or None when no frame of the kernel is in it."""
    name, filename = fn.__name__, getattr(getattr(fn, "__code__", None), "co_filename", None)
    found = None
    seen = exc
    for _ in range(8):
        if seen is None:
            break
        tb = seen.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_name == name and code.co_filename == filename:
                found = (filename, tb.tb_lineno)
            tb = tb.tb_next
        seen = seen.__cause__ or seen.__context__
    if found is None:
        return None
    text = linecache.getline(*found).strip()
    return f"line {found[1]}: `{text}`" if text else f"line {found[1]}"


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


def _advice(exc: BaseException, line: str | None = None) -> str:
    """A hint for the errors a first kernel commonly raises (``line``: the kernel's line that
    raised, as :func:`kernel_line` gives it), or ''."""
    text = str(exc)
    code = line or ""
    if re.search(r"\b(math|numpy|np)\.", code):
        return (" Python's `math` (or NumPy) works on plain numbers, not on a kernel's values: "
                "inside a kernel use Triton's own, `tl.exp`, `tl.log`, `tl.maximum`.")
    if "out of bounds" in text and "axis" in text and ("tl.max(" in code or "tl.min(" in code):
        return (" `tl.max(x, axis)` reduces ONE tensor along an axis: its second argument is the "
                "axis. The larger of two values is `tl.maximum(a, b)`.")
    if isinstance(exc, TypeError) and "argument" in text:
        return " Keep the starter's signature: the checker passes exactly those arguments."
    if "power of 2" in text or "power of two" in text:
        return " Every tl.arange length must be a power of two (use the BLOCK_SIZE and HEAD_DIM given)."
    if "incompatible dimensions" in text or "make_shape_compatible" in text or "broadcast" in text:
        return (" Two tensors of different shapes met on that line; a reduction over the wrong axis "
                "makes one: of a [BLOCK_SIZE, HEAD_DIM] tile, `tl.sum(x, axis=1)` gives one value per "
                "row ([BLOCK_SIZE]), `axis=0` one per dim ([HEAD_DIM]).")
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


def _nan_count(x) -> int:
    """NaN elements of an output (a tensor, or a dict of named tensors)."""
    if isinstance(x, dict):
        return sum(_nan_count(v) for v in x.values())
    return int(torch.isnan(x).sum())


def same_output(a, b) -> bool:
    """True if two kernels' outputs agree: the same shape, NaN, inf and unwritten elements, and
    values within the dtype's tolerance (a dict of named outputs: every one of them)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same_output(a[k], b[k]) for k in a))
    if a.shape != b.shape:
        return False
    x, y = a.detach().double().cpu(), b.detach().double().cpu()
    tol = _tolerance(a.dtype)
    return bool(torch.isclose(x, y, rtol=tol, atol=tol, equal_nan=True).all())


class KernelExercise(Exercise):
    """An exercise whose answer is a ``@triton.jit`` kernel, checked by launching it on each case.

    ``reference`` is the solution kernel; ``launch(kernel, **case.inputs)`` launches a kernel with the
    exercise's signature and returns its output (made with :func:`new_output`); ``cases`` are
    :class:`KernelCase` objects. ``mistakes`` pairs kernels with exactly one common mistake (see
    :func:`variant`) with the message for it: a failing kernel whose output on the failing case equals
    a mistake's gets that message. Else ``diagnose(got, case)`` may add a targeted sentence.
    ``wrong`` holds more wrong kernels; with the mistakes' kernels, the contract tests use them to
    prove ``check`` says "incorrect".
    The reference is stored as the kernel's Python function, so ``solution()`` can show its source.
    """

    message_limit = 800      # the case's label, what is wrong and the diagnosis, all of them

    def __init__(self, name: str, question: str, reference: Any, *,
                 launch: Callable[..., torch.Tensor], cases: Sequence[KernelCase],
                 diagnose: Callable[[torch.Tensor, KernelCase], str | None] | None = None,
                 mistakes: Sequence[tuple[Any, str]] = (),
                 hints: Sequence[str] = (), wrong: Sequence[Any] = (), explanation: str = "",
                 timeout: float = 30.0, diagnosis_names_nan_cause: bool = False):
        if not _is_kernel(reference):
            raise ValueError(f"exercise {name!r}: reference must be a @triton.jit kernel")
        self.kernel = reference
        self.launch = launch
        self.kernel_cases = list(cases)
        self.kernel_diagnose = diagnose
        for kernel, _ in mistakes:
            if not _is_kernel(kernel):
                raise ValueError(f"exercise {name!r}: each of mistakes must be (@triton.jit kernel, "
                                 f"message); got {kernel!r}")
        # a kernel that computes NaN without reading a cache (0 / 0, inf / inf): its diagnosis says
        # why, in place of the usual "some tl.load read one"
        self.diagnosis_names_nan_cause = diagnosis_names_nan_cause
        super().__init__(name, question, reference.fn, cases=[(c,) for c in self.kernel_cases],
                         hints=hints, wrong=wrong, mistakes=mistakes, explanation=explanation,
                         timeout=timeout)

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
                                         "cannot run here. " + runtime.IMPORT_ORDER_FIX)
            return answer, None
        try:
            return triton.jit(answer), None      # a kernel body written without @triton.jit
        except Exception as exc:  # noqa: BLE001 - reported to the learner
            return None, (INCORRECT, f"expected a @triton.jit kernel; this function cannot be made into "
                                     f"one ({_one_line(exc)}).")

    def _run(self, kernel: Any, case: KernelCase, watch: list | None = None) -> torch.Tensor:
        """Launch ``kernel`` on fresh copies of ``case``'s inputs, masked lanes poisoned. With
        ``watch`` (a list), the first load of an element no sequence owns is appended to it
        (``forbidden_load_message`` says what it means)."""
        inputs = _copy_inputs(case.inputs)
        load_watch = None
        if watch is not None:
            load_watch = LoadWatch(forbidden_addresses(inputs), kernel.fn if _is_kernel(kernel) else kernel)
        with warnings.catch_warnings(), poisoned_masked_loads(load_watch):
            warnings.simplefilter("ignore", RuntimeWarning)   # the interpreter's NumPy warns on overflow
            got = _call_with_timeout(lambda: self.launch(kernel, **inputs), (), self.timeout)
        if load_watch is not None and load_watch.found is not None:
            watch.append(load_watch.found)
        return got

    def _mistake_for(self, got: torch.Tensor, case: KernelCase) -> str | None:
        """The message of the first listed mistake whose output on ``case`` equals ``got``."""
        for kernel, message in self.mistakes:
            try:
                if same_output(got, self._run(kernel, case)):
                    return message
            except BaseException:  # noqa: BLE001 - a mistake that cannot run is simply no match
                continue
        return None

    def _unguarded_load(self, kernel: Any, got: torch.Tensor, case: KernelCase) -> str | None:
        """The line of a masked tl.load without ``other=`` whose poisoned lanes made ``got``'s NaN
        (the kernel run again with masked lanes reading 0 has no NaN there), or None."""
        lines = masked_loads_without_other(kernel.fn) if _nan_count(got) else []
        if not lines:
            return None
        inputs = _copy_inputs(case.inputs)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                clean = _call_with_timeout(lambda: self.launch(kernel, **inputs), (), self.timeout)
        except BaseException:  # noqa: BLE001 - then the missing other= is not the only problem
            return None
        return lines[0] if _nan_count(clean) < _nan_count(got) else None

    def _judge_function(self, answer: Any) -> tuple[str, str]:
        kernel, verdict = self._as_kernel(answer)
        if verdict is not None:
            return verdict
        fn = kernel.fn
        n = len(self.kernel_cases)
        for i, case in enumerate(self.kernel_cases, 1):
            where = f"case {i} of {n} ({case.label}; {_shapes(case.expected)})"
            bad_loads: list = []
            try:
                got = self._run(kernel, case, bad_loads)
            except Timeout:
                return INCORRECT, (f"{where}: the kernel ran for more than {self.timeout:g} s: is there a "
                                   "loop that never ends?")
            except Exception as exc:  # noqa: BLE001 - reported to the learner
                known = runtime.known_failure(exc)
                if known is not None:
                    return INCORRECT, f"{where}: the kernel failed, and not because of its code: {known}"
                cause = _root_cause(exc)
                if isinstance(cause, NotImplementedError):
                    return NOT_ATTEMPTED, "the kernel still raises NotImplementedError: write its body."
                line = kernel_line(exc, fn)
                at = f" at {line}" if line else ""
                return INCORRECT, (f"{where}: the kernel raised {_one_line(cause)}{at}."
                                   f"{_advice(cause, line)}")
            problem = compare_outputs(got, case.expected)
            if problem is None and bad_loads:
                return INCORRECT, (f"{where}: the output is right, but "
                                   + forbidden_load_message(bad_loads[0]))
            if problem is None:
                continue
            unguarded = self._unguarded_load(kernel, got, case)
            if unguarded is not None:
                return INCORRECT, (f"{where}: {problem.replace(' ' + NAN_CAUSE, '')} `{unguarded}` is a "
                                   "masked tl.load without `other=`: its masked lanes are undefined (on "
                                   "a GPU they hold whatever is in memory; the checker fills them with "
                                   "NaN). Give it `other=0.0`.")
            mistake = self._mistake_for(got, case)
            if mistake is not None:
                return INCORRECT, f"{where}: {problem.replace(' ' + NAN_CAUSE, '')} {mistake}"
            if bad_loads and bad_loads[0][1]:                  # a mask, but one that lets rows through
                return INCORRECT, (f"{where}: {problem.replace(' ' + NAN_CAUSE, '')} "
                                   + forbidden_load_message(bad_loads[0]))
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
