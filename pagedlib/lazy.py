"""Submodules loaded on first use, so that ``import pagedlib`` stays cheap (PEP 562)."""
from __future__ import annotations

import importlib


def lazy_submodules(package: str, names: tuple[str, ...]):
    """``__getattr__`` and ``__dir__`` for ``package`` that import ``package.<name>`` when first read."""
    def __getattr__(name: str):
        if name in names:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(names) | set(vars(importlib.import_module(package))))

    return __getattr__, __dir__
