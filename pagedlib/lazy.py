"""Submodules and names loaded on first use, so that ``import pagedlib`` stays cheap (PEP 562)."""
from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping


def lazy_submodules(package: str, names: Iterable[str], exports: Mapping[str, str] | None = None):
    """``__getattr__`` and ``__dir__`` for ``package``: ``package.<name>`` for a name in ``names`` is
    imported when first read; a name in ``exports`` is read from the submodule it maps to
    (``{"LLM": "engine.llm"}``) and kept in the package, so it is imported once."""
    names, exports = frozenset(names), dict(exports or {})

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(f".{exports[name]}", package), name)
            setattr(importlib.import_module(package), name, value)
            return value
        if name in names:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(names | set(exports) | set(vars(importlib.import_module(package))))

    return __getattr__, __dir__
