"""Chapter 0 exercise: the size of a Triton grid.

Convention for every chapter module: the reference solution is written as a plain function, then the
same name is rebound to the Exercise built from it, so a notebook calls ``ex.num_programs.check(...)``.
"""
from . import Exercise


def num_programs(n: int, block: int) -> int:
    """Programs a 1-D grid needs so that programs of `block` elements cover `n` elements."""
    return (n + block - 1) // block


num_programs = Exercise(
    "ch00.num_programs",
    "A kernel handles `block` elements per program. How many programs cover `n` elements?",
    num_programs,
    cases=[(1, 1024), (1024, 1024), (1025, 1024), (98_432, 1024), (0, 256), (7, 2)],
    hints=["Every element needs a program, and the last program may be only partly full.",
           "That is a division rounded up: `(n + block - 1) // block`, also `triton.cdiv(n, block)`."],
    wrong=[lambda n, block: n // block, lambda n, block: n // block + 1],
)
