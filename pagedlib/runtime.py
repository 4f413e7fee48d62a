"""Where pagedlib runs: a CUDA GPU with compiled Triton, or the CPU with the Triton interpreter.

This is the one place that decides. Importing it (``import pagedlib`` does) sets
``TRITON_INTERPRET=1`` when no CUDA device is present, *before* any ``@triton.jit`` kernel of
pagedlib is defined, so the same notebook cells run on a Colab GPU and on a laptop CPU. It then
checks the torch / triton / numpy versions against ``RULES``, the known-bad combinations: one that
gives wrong results with no error is refused (``UnsupportedVersions``, with the one pip command
that fixes it) before any kernel can run; one that fails loudly gets a ``VersionWarning`` with the fix.

- ``DEVICE``: ``torch.device("cuda")`` or ``torch.device("cpu")``; tensors for the kernels live here.
- ``DTYPE``: the default floating dtype: fp16 on a GPU, fp32 on the CPU.
- ``INTERPRET``: True when Triton kernels run through the interpreter.
- ``problems()``: the rules this machine's versions break; ``env_report()``: Python, torch, triton,
  numpy, the device and that verdict; ``print_env()`` prints it, with warnings about known traps.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import functools
import sys
import warnings
from dataclasses import dataclass
from typing import Callable, TypeVar

import torch
from packaging.version import InvalidVersion, Version

HAS_CUDA: bool = torch.cuda.is_available()

if not HAS_CUDA and os.environ.get("TRITON_INTERPRET") != "1":
    # Must happen before any @triton.jit runs: Triton reads the variable when a kernel is decorated,
    # its own helpers (tl.sum, tl.max, ...) included, which it decorates when it is imported: see
    # import_order_problem() for what happens when triton was imported first.
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRET: bool = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE: torch.device = torch.device("cuda" if HAS_CUDA and not INTERPRET else "cpu")
DTYPE: torch.dtype = torch.float16 if DEVICE.type == "cuda" else torch.float32

# ---- known-bad version combinations ----------------------------------------------------------
# Measured by `make drift` (noxfile.py, scripts/drift_check.py): for each cell, a nox venv with
# torch 2.13.0 (CPU), the cell's triton and numpy and a non-editable `pip install` of pagedlib, run
# from outside the checkout: the kernel and engine tests (255, through the interpreter), the
# ahead-of-time compile test (sm_75, sm_80, sm_90) and the two kernel notebooks. The README's
# "Tested combinations" section has the matrix, its command and its times.
IGNORE_RULES_VAR = "PAGEDLIB_IGNORE_VERSION_RULES"  # "1": a refusal becomes a warning (the drift check)
RESTART = "then restart Python (on Colab: Runtime > Restart session) and run the setup cell again"


@dataclass(frozen=True)
class Rule:
    """A torch/triton/numpy combination known to break pagedlib: where it applies, what goes wrong,
    the one pip command that fixes it, and how that was measured. Version bounds are half-open:
    ``triton=((3, 2), (3, 7))`` means 3.2 <= triton < 3.7; ``None`` leaves a side open."""
    refuse: bool                                   # wrong results with no error: refuse to run
    triton: tuple[tuple[int, ...] | None, tuple[int, ...] | None]
    numpy: tuple[tuple[int, ...] | None, tuple[int, ...] | None]
    where: str                                     # "interpreter" or "sm_75" (a T4 GPU)
    problem: str
    fix: str
    measured: str
    signature: str = ""                            # text of the error it raises, if it fails loudly


RULES: tuple[Rule, ...] = (
    Rule(refuse=True, triton=((3, 0), (3, 2)), numpy=((2, 0), None), where="interpreter",
         problem="the Triton interpreter of triton 3.0 and 3.1 gives wrong results with numpy 2, "
                 "without an error (kernel stores never land, NaN leaks into outputs)",
         fix='pip install "numpy<2"',
         measured="drift check, 2026-12-01: triton 3.0.0 and 3.1.0 with numpy 2.3.5 (refusal "
                  "bypassed): 103 of the 255 kernel and engine tests fail on wrong values, none "
                  "raises; triton 3.1.0 with numpy 1.26.4: all 255 pass"),
    Rule(refuse=False, triton=((3, 2), (3, 7)), numpy=((2, 4), None), where="interpreter",
         problem="the Triton interpreter of triton 3.2 to 3.6 fails with numpy 2.4 on a loop bound "
                 "loaded from memory: InterpreterError: TypeError('only 0-dimensional arrays can be "
                 "converted to Python scalars')",
         fix='pip install "numpy<2.4"',
         measured="drift check, 2026-12-01: triton 3.5.1 and 3.6.0 with numpy 2.4.6: 101 of 255 "
                  "tests fail with that error; triton 3.2.0 to 3.6.0 with numpy 2.3.5, and 3.7.1, "
                  "3.8.0, 3.9.0 with numpy 2.4.6: all 255 pass",
         signature="only 0-dimensional arrays can be converted to Python scalars"),
    Rule(refuse=False, triton=((3, 3), (3, 4)), numpy=(None, None), where="sm_75",
         problem="triton 3.3 cannot compile pagedlib's fp16 decode, split-K and prefill kernels for "
                 "a compute capability 7.5 GPU (a T4): 'Unsupported conversion from f16 to f16' "
                 "(an upstream triton bug)",
         fix='pip install "triton>=3.4"',
         measured="drift check, 2026-12-01, compiling ahead of time: triton 3.3.1 fails on "
                  "decode, split-K and prefill for sm_75 and compiles all five kernels for sm_80 and "
                  "sm_90; every other triton measured (3.0.0 to 3.9.0) compiles them all for sm_75",
         signature="Unsupported conversion from f16 to f16"),
)


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string (PEP 440, read by ``packaging``): ``"3.7.1+git1a2b"``
    -> ``(3, 7, 1)``."""
    try:
        return Version(version).release
    except InvalidVersion:
        raise ValueError(f"version must start with digits like '3.7.1'; got {version!r}") from None


@dataclass(frozen=True)
class Versions:
    """The versions and device the rules look at (``triton``/``numpy`` None when not installed)."""
    torch: str
    triton: str | None
    numpy: str | None
    interpret: bool
    capability: tuple[int, int] | None             # the GPU's compute capability; None on the CPU


def _version_of(name: str) -> str | None:
    """The version of a package as Python will use it: the loaded module's if it is imported
    (a `pip install` in a running notebook changes nothing until a restart), else the installed one."""
    module = sys.modules.get(name)
    if module is not None and hasattr(module, "__version__"):
        return str(module.__version__)
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def current_versions() -> Versions:
    """This process's versions and device."""
    capability = torch.cuda.get_device_capability(0) if DEVICE.type == "cuda" else None
    return Versions(torch=torch.__version__, triton=_version_of("triton"), numpy=_version_of("numpy"),
                    interpret=INTERPRET, capability=capability)


def _within(version: str | None, bounds: tuple[tuple[int, ...] | None, tuple[int, ...] | None]) -> bool:
    low, high = bounds
    if version is None:
        return low is None and high is None         # a rule on a missing package never applies
    ours = release(version)
    return (low is None or ours >= low) and (high is None or ours < high)


def applies(rule: Rule, versions: Versions) -> bool:
    """True when `versions` fall under `rule`."""
    where = versions.interpret if rule.where == "interpreter" else (
        not versions.interpret and versions.capability == (7, 5))
    return where and versions.triton is not None and _within(versions.triton, rule.triton) \
        and _within(versions.numpy, rule.numpy)


def explain(rule: Rule, versions: Versions) -> str:
    """The message a learner reads: the versions, what goes wrong, and the fix."""
    mix = f"triton {versions.triton}" + (f" with numpy {versions.numpy}" if rule.numpy != (None, None)
                                          else " on a GPU of compute capability 7.5")
    return f"{mix}: {rule.problem}. Fix: `{rule.fix}`, {RESTART}."


def problems(versions: Versions | None = None) -> list[Rule]:
    """The rules that `versions` (default: this process's) break, refusals first."""
    versions = versions or current_versions()
    return sorted((r for r in RULES if applies(r, versions)), key=lambda r: not r.refuse)


class UnsupportedVersions(RuntimeError):
    """These versions give wrong results with no error; ``fix`` is the pip command that mends them."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


class VersionWarning(UserWarning):
    """These versions fail loudly in part of the course; the message has the fix."""


def check_versions(versions: Versions | None = None) -> None:
    """Raise ``UnsupportedVersions`` for a combination that gives wrong results silently, warn (with
    the fix) for one that fails loudly. Runs on import; ``PAGEDLIB_IGNORE_VERSION_RULES=1`` turns the
    refusal into a warning, to reproduce the failure on purpose."""
    versions = versions or current_versions()
    for rule in problems(versions):
        message = explain(rule, versions)
        if rule.refuse and os.environ.get(IGNORE_RULES_VAR) != "1":
            raise UnsupportedVersions(f"pagedlib refuses to run: {message}", rule.fix)
        warnings.warn(message, VersionWarning, stacklevel=2)


IMPORT_ORDER_FIX = ("Fix: restart Python (on Colab: Runtime > Restart session) and run `import pagedlib` "
                    "before anything imports triton, or run `os.environ['TRITON_INTERPRET'] = '1'` "
                    "before `import triton`.")


def import_order_problem() -> str | None:
    """The message for triton imported before ``TRITON_INTERPRET`` was set on a machine without CUDA,
    or None. Then triton's own helpers (``tl.sum``, ``tl.max``, ...) are GPU functions while the
    kernels run in the interpreter, so every kernel that calls them fails."""
    if not INTERPRET or "triton" not in sys.modules:
        return None
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:
        return None
    helper = getattr(tl, "sum", None)
    if not isinstance(helper, JITFunction) or isinstance(helper, InterpretedFunction):
        return None
    return ("triton was imported before TRITON_INTERPRET was set (this machine has no CUDA GPU), so "
            "triton's own helpers (tl.sum, tl.max, ...) were made for a GPU: every kernel that calls "
            "them fails with \"Cannot call @triton.jit'd outside of the scope of a kernel\". "
            + IMPORT_ORDER_FIX)


def verdict(versions: Versions | None = None) -> str:
    """One line per problem ("refused: ...", "warning: ...", or "broken: ..." when triton was imported
    too early), or "ok" with the versions."""
    versions = versions or current_versions()
    found = problems(versions)
    lines = [("refused: " if r.refuse else "warning: ") + explain(r, versions) for r in found]
    order = import_order_problem() if versions.interpret else None
    if order is not None:
        lines.insert(0, "broken: " + order)
    if not lines:
        return f"ok: triton {versions.triton} and numpy {versions.numpy}: no known problem"
    return "\n".join(lines)


class KnownVersionFailure(RuntimeError):
    """A kernel launch failed the way a rule of ``RULES`` says these versions fail; the message
    has the rule's fix (``fix``)."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


def known_failure(exc: BaseException, versions: Versions | None = None) -> KnownVersionFailure | None:
    """If ``exc`` (or an error it wraps) is the error a broken rule of these versions raises, a
    ``KnownVersionFailure`` that says so with the fix; else None."""
    versions = versions or current_versions()
    chain, seen = [], exc
    while seen is not None and len(chain) < 16:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    text = " ".join(f"{e!s} {e!r}" for e in chain)
    for rule in problems(versions):
        if rule.signature and rule.signature in text:
            return KnownVersionFailure(f"this failure is a known problem of these versions: "
                                       f"{explain(rule, versions)}", rule.fix)
    if "Cannot call @triton.jit'd outside of the scope of a kernel" in text:
        order = import_order_problem()
        if order is not None:
            return KnownVersionFailure(order, IMPORT_ORDER_FIX)
    return None


F = TypeVar("F", bound=Callable)


def known_failures(launcher: F) -> F:
    """Decorate a kernel launcher: an error that a known version problem explains is re-raised as a
    ``KnownVersionFailure`` with the fix (the original error as its cause); any other passes as is."""
    @functools.wraps(launcher)
    def wrapper(*args, **kwargs):
        try:
            return launcher(*args, **kwargs)
        except Exception as exc:
            known = known_failure(exc)
            if known is None:
                raise
            raise known from exc
    return wrapper  # type: ignore[return-value]


check_versions()  # on import: pagedlib's kernels are defined after this module, so none has run yet
if import_order_problem() is not None:
    warnings.warn(import_order_problem(), VersionWarning, stacklevel=2)


def gpu_name() -> str | None:
    """The CUDA device's name, or None on the CPU."""
    return torch.cuda.get_device_name(0) if DEVICE.type == "cuda" else None


def supports_bf16() -> bool:
    """True where bf16 kernels give correct results: a GPU of compute capability 8.0 (Ampere) or newer."""
    if DEVICE.type != "cuda":
        return False  # the interpreter computes bf16 silently wrong
    return torch.cuda.get_device_capability(0)[0] >= 8


def check_dtype(dtype: torch.dtype) -> None:
    """Raise a ValueError, with the fix, for a dtype the current device cannot run correctly."""
    if dtype == torch.bfloat16 and not supports_bf16():
        where = "the Triton interpreter (CPU)" if DEVICE.type == "cpu" else f"this GPU ({gpu_name()})"
        fix = "torch.float32" if DEVICE.type == "cpu" else "torch.float16"
        raise ValueError(f"bfloat16 is not supported on {where}; use {fix} instead "
                         f"(pagedlib.runtime.DTYPE is {DTYPE}).")


def kernel_is_interpreted(kernel) -> bool:
    """True if a ``@triton.jit`` kernel object was defined while the interpreter was on."""
    from triton.runtime.interpreter import InterpretedFunction
    return isinstance(kernel, InterpretedFunction)


def traps() -> list[str]:
    """Known problems with this environment, each with its fix (an empty list when all is well)."""
    found = []
    order = import_order_problem()
    if order is not None:
        found.append(order)
    if DEVICE.type == "cuda" and not supports_bf16():
        found.append(f"{gpu_name()} has no bf16: use torch.float16 (pagedlib's default here).")
    if DEVICE.type == "cpu":
        found.append("bf16 is silently wrong in the Triton interpreter: use torch.float32 on the CPU.")
    late = [name for name, kern in _loaded_kernels() if kernel_is_interpreted(kern) != INTERPRET]
    if late:
        found.append("these kernels were defined before TRITON_INTERPRET was set, so they will fail with "
                     f"'0 active drivers': {', '.join(late)}. Fix: restart the kernel and "
                     "`import pagedlib` (or set os.environ['TRITON_INTERPRET'] = '1') before importing "
                     "any Triton code.")
    return found


def _loaded_kernels():
    """(name, kernel) for every Triton kernel already defined in pagedlib's loaded modules."""
    try:
        from triton.runtime.jit import JITFunction
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return []
    kinds = (JITFunction, InterpretedFunction)
    out = []
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith("pagedlib"):
            continue
        for attr, obj in vars(mod).items():
            if isinstance(obj, kinds):
                out.append((f"{mod_name}.{attr}", obj))
    return out


def env_report() -> str:
    """Python, torch, triton and numpy versions, the device, and the verdict on them, one per line."""
    versions = current_versions()
    device = gpu_name() if DEVICE.type == "cuda" else "CPU, Triton interpreter"
    lines = [
        f"Python  {platform.python_version()}",
        f"torch   {versions.torch}",
        f"triton  {versions.triton or 'not installed'}",
        f"numpy   {versions.numpy or 'not installed'}",
        f"device  {device}",
        f"dtype   {str(DTYPE).replace('torch.', '')} (pagedlib default)",
    ]
    return "\n".join(lines + [f"verdict {line}" for line in verdict(versions).splitlines()])


def print_env() -> None:
    """Print the environment report (ending with the verdict on the versions), then a warning for
    each known trap."""
    print(env_report())
    for trap in traps():
        if DEVICE.type == "cpu" and "bf16" in trap:
            continue  # only worth a warning if someone asks for bf16; check_dtype says so then
        warnings.warn(trap, stacklevel=2)
