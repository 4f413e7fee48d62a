"""Chapter 0 exercises: the size of a Triton grid, and the lanes its last program masks off.

Convention for every chapter module: the reference solution is written as a plain function (or a
value), then the same name is rebound to the Exercise built from it, so a notebook calls
``ex.num_programs.check(...)``.
"""
from . import Exercise


def num_programs(n: int, tile: int) -> int:
    """Programs a 1-D grid needs so that programs of `tile` elements cover `n` elements."""
    return (n + tile - 1) // tile


def _elements(count: int) -> str:
    return f"{count} element" if count == 1 else f"{count} elements"


def _diagnose_programs(answer, expected, args):
    n, tile = args
    if answer == n // tile and n % tile:
        return ("integer division rounds down and forgets the partly full last program: "
                f"the {_elements(n % tile)} past the last full tile need a program too.")
    if answer == n // tile + 1 and n % tile == 0:
        return f"{n} is a multiple of {tile}: every program is full, none is left over."
    return None


num_programs = Exercise(
    "ch00.num_programs",
    "A kernel handles `tile` elements per program. How many programs cover `n` elements?",
    num_programs,
    cases=[(1, 1024), (1024, 1024), (1025, 1024), (98_432, 1024), (0, 256), (7, 2)],
    diagnose=_diagnose_programs,
    hints=["Every element needs a program, and the last program may be only partly full.",
           "Divide n by tile and round UP; check n = 0 (no programs) and n = tile (one).",
           "`(n + tile - 1) // tile`, which is also what `triton.cdiv(n, tile)` computes."],
    wrong=[lambda n, tile: n // tile, lambda n, tile: n // tile + 1],
    explanation="Rounding up gives the partly full last program its own program; masks switch off "
                "its extra lanes.",
)

# Predict: n = 1,500 elements on programs of TILE = 256 lanes.
_N, _TILE = 1500, 256
masked_lanes = -_N % _TILE           # 6 programs x 256 lanes = 1,536 lanes for 1,500 elements


_PROGRAMS = -(-_N // _TILE)
_MASKED_MISTAKES = [
    (_N % _TILE, "that is how many lanes of the last program are ACTIVE; the question asks for the rest."),
    (_PROGRAMS, "that is the number of programs; count the lanes past the end of the data instead."),
    (_PROGRAMS * _TILE, "that is every lane of the grid; subtract the lanes that hold an element."),
    (_N, "that is the lanes that hold an element; count the lanes past the end instead."),
]

masked_lanes = Exercise(
    "ch00.masked_lanes",
    "Predict before you run anything: with n = 1,500 elements and TILE = 256, how many lanes of "
    "the grid are masked off (switched off because they are past the end of the data)?",
    masked_lanes,
    mistakes=_MASKED_MISTAKES,
    hints=["First count the programs: enough tiles of 256 to cover 1,500 elements.",
           "The grid has programs x 256 lanes; 1,500 of them hold an element.",
           "programs = ceil(1500 / 256); masked = programs * 256 - 1500."],
    wrong=[220, 6, 1500],
    explanation="Six programs of 256 give 1,536 lanes for 1,500 elements; only the last program "
                "has masked lanes.",
)
