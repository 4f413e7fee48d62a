"""Where pagedlib runs: a CUDA GPU with compiled Triton, or the CPU with the Triton interpreter.

This is the one place that decides. Importing it (``import pagedlib`` does) sets
``TRITON_INTERPRET=1`` when no CUDA device is present, *before* any ``@triton.jit`` kernel of
pagedlib is defined, so the same notebook cells run on a Colab GPU and on a laptop CPU.

- ``DEVICE``: ``torch.device("cuda")`` or ``torch.device("cpu")``; tensors for the kernels live here.
- ``DTYPE``: the default floating dtype: fp16 on a GPU, fp32 on the CPU.
- ``INTERPRET``: True when Triton kernels run through the interpreter.
- ``env_report()``: a short text about Python, torch, triton and the device; ``print_env()`` prints it
  with warnings about known traps.
"""
from __future__ import annotations

import os
import platform
import sys
import warnings

import torch

HAS_CUDA: bool = torch.cuda.is_available()

if not HAS_CUDA and os.environ.get("TRITON_INTERPRET") != "1":
    # Must happen before any @triton.jit runs: Triton reads the variable when a kernel is decorated.
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRET: bool = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE: torch.device = torch.device("cuda" if HAS_CUDA and not INTERPRET else "cpu")
DTYPE: torch.dtype = torch.float16 if DEVICE.type == "cuda" else torch.float32


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
    """Python, torch and triton versions and the device, one per line."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    device = gpu_name() if DEVICE.type == "cuda" else "CPU, Triton interpreter"
    return "\n".join([
        f"Python  {platform.python_version()}",
        f"torch   {torch.__version__}",
        f"triton  {triton_version}",
        f"device  {device}",
        f"dtype   {str(DTYPE).replace('torch.', '')} (pagedlib default)",
    ])


def print_env() -> None:
    """Print the environment report, then a warning for each known trap."""
    print(env_report())
    for trap in traps():
        if DEVICE.type == "cpu" and "bf16" in trap:
            continue  # only worth a warning if someone asks for bf16; check_dtype says so then
        warnings.warn(trap, stacklevel=2)
