"""Imports flow one way: engine -> models -> attention -> memory, and nothing in pagedlib imports upward.

Every module of ``pagedlib`` is parsed (``ast``, nothing is imported), and every import of another part of
the package is checked against the layers below, imports under ``if TYPE_CHECKING:`` included (a
type-level cycle is still a cycle for the reader). A module may import its own part and the parts on
lower layers; an import of a part on its own layer or above fails with the line that makes it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pagedlib"

# part of pagedlib -> its layer; a part imports only its own layer's modules and the layers below.
LAYERS = {
    "runtime": 0, "validation": 0, "lazy": 0, "output": 0,      # the foundation
    "facts": 0,                                                  # sourced facts about the engines: data
    "memory": 1,
    "attention": 2,
    "models": 3,
    "engine": 4,
    "sim": 5,                                                    # the simulator runs the engine's scheduler
    "plots": 6,
    "widgets": 7, "exercises": 7, "bench": 7, "claims": 7,      # the teaching surface, on top
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of a ``pagedlib`` module in ``path``; ``from X import y`` names
    ``X.y`` when ``y`` is itself a module."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.append((node.lineno, full if is_module(full) else target))
    return [(line, mod) for line, mod in found if mod == "pagedlib" or mod.startswith("pagedlib.")]


def part(module: str) -> str | None:
    """The part of the package a module belongs to (``pagedlib.engine.llm`` -> ``engine``); None for
    the package's own ``__init__``, which loads every part on first use."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def upward_imports(path: Path) -> list[str]:
    source = part(module_name(path))
    if source is None:
        return []
    wrong = []
    for line, target_module in imported_modules(path):
        target = part(target_module)
        if target is None:
            wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports the package root "
                         f"{target_module!r}; import the module that defines the name")
            continue
        if target == source:
            continue
        if target not in LAYERS:
            wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: part {target!r} has no layer in "
                         f"tests/test_imports.py's LAYERS; add it")
        elif LAYERS[target] >= LAYERS[source]:
            wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {source} (layer {LAYERS[source]}) "
                         f"imports {target_module} (layer {LAYERS[target]})")
    return wrong


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_part_has_a_layer():
    parts = {part(module_name(path)) for path in MODULES} - {None}
    assert parts <= set(LAYERS), f"parts without a layer: {sorted(parts - set(LAYERS))}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_upward_import(path):
    wrong = upward_imports(path)
    assert not wrong, "imports run upward (engine -> models -> attention -> memory):\n" + "\n".join(wrong)


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The check itself can fail: a type-only import of the engine from attention is caught."""
    fake = tmp_path / "pagedlib"
    (fake / "attention").mkdir(parents=True)
    (fake / "engine").mkdir()
    for init in (fake / "__init__.py", fake / "attention" / "__init__.py", fake / "engine" / "__init__.py"):
        init.write_text("")
    (fake / "engine" / "batch.py").write_text("")
    bad = fake / "attention" / "backend.py"
    bad.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..engine.batch import X\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert upward_imports(bad) == ["pagedlib/attention/backend.py:3: attention (layer 2) imports "
                                   "pagedlib.engine.batch (layer 4)"]
