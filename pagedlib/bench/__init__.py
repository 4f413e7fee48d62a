"""Benchmarks: ``python -m pagedlib.bench memory | attention | kernels | engine``.

Each prints a table and the command line that reproduces it. Interpreter (CPU) timings of Triton
kernels mean nothing, so the attention benchmark only checks correctness there.
"""
