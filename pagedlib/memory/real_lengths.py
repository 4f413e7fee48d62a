"""Real request lengths: the ShareGPT and Alpaca length distributions the course ships.

``pagedlib/data/sharegpt_lengths.csv`` and ``alpaca_lengths.csv`` hold the histograms of the
PagedAttention paper's Figure 11 (prompt and output lengths, in tokens; the data folder's README says
how the bars were read). :func:`draw_requests` draws (prompt, output) pairs from them, the one way
every chapter gets real lengths (chapters 2 and 4 here; chapter 12's ``pagedlib.sim.Workload``).
:func:`running_lengths` takes snapshots of a busy server: requests caught at a random point of their
reply, as chapter 2's five requests were.

Pure Python and numpy (no torch): Part I's chapters use it.
"""
from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..validation import nonnegative_int, positive_int

__all__ = ["DATA_DIR", "DATASETS", "histogram", "shortest_length", "sample_lengths", "draw_requests",
           "running_lengths"]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DATASETS = ("sharegpt", "alpaca")


@lru_cache(maxsize=None)
def histogram(dataset: str, series: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bin_lo, bin_hi, probability of each bin) of ``series`` ("input" or "output") of ``dataset``."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}; got {dataset!r}")
    if series not in ("input", "output"):
        raise ValueError(f"series must be 'input' or 'output'; got {series!r}")
    with open(DATA_DIR / f"{dataset}_lengths.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["series"] == series]
    lo = np.array([float(r["bin_lo"]) for r in rows])                       # [num_bins]
    hi = np.array([float(r["bin_hi"]) for r in rows])                       # [num_bins]
    mass = np.array([float(r["density"]) for r in rows]) * (hi - lo)        # [num_bins]
    return lo, hi, mass / mass.sum()


def shortest_length(dataset: str, series: str) -> int:
    """The shortest length :func:`sample_lengths` can draw from this histogram (its lowest bin, rounded)."""
    lo, _, prob = histogram(dataset, series)
    return max(1, int(np.rint(lo[prob > 0].min())))


def sample_lengths(dataset: str, series: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths (int64, >= 1 token) drawn from one histogram of the paper's Figure 11: a bar
    with probability equal to its area, then a point uniformly inside it, rounded to a token."""
    lo, hi, prob = histogram(dataset, series)
    bins = rng.choice(len(prob), size=n, p=prob)                            # [n]
    points = rng.uniform(lo[bins], hi[bins])                                # [n]
    return np.maximum(1, np.rint(points)).astype(np.int64)


def draw_requests(dataset: str, num_requests: int, seed: int = 0,
                  max_len: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """``(prompt_lens, output_lens)``, two int64 arrays of ``num_requests`` requests with
    ``prompt + output <= max_len``, drawn from ``dataset``'s histograms ("sharegpt" or "alpaca").

    Prompt and output are drawn independently (the histograms are marginals). The paper's benchmark
    dropped requests longer than ``max_len``, so in its data a long prompt comes with a short output;
    to keep that (and the prompt histogram), a too-long output is drawn again for the same prompt.
    """
    nonnegative_int("num_requests", num_requests, "requests")
    histogram(dataset, "input")               # validates the dataset name
    min_output = shortest_length(dataset, "output")
    shortest = shortest_length(dataset, "input") + min_output
    if max_len < shortest:                    # the redraws below would never end
        raise ValueError(f"max_len must be at least {shortest} tokens, the shortest {dataset} "
                         f"request (prompt + output) the histograms can give; got {max_len}")
    rng = np.random.default_rng(seed)
    prompt = sample_lengths(dataset, "input", num_requests, rng)               # [num_requests]
    too_long = prompt > max_len - min_output  # no room left for even the shortest output
    while too_long.any():
        prompt[too_long] = sample_lengths(dataset, "input", int(too_long.sum()), rng)
        too_long = prompt > max_len - min_output
    output = sample_lengths(dataset, "output", num_requests, rng)              # [num_requests]
    too_long = prompt + output > max_len
    while too_long.any():                     # draw those outputs again, keeping the prompts
        output[too_long] = sample_lengths(dataset, "output", int(too_long.sum()), rng)
        too_long = prompt + output > max_len
    return prompt, output


def running_lengths(prompt_lens, output_lens, num_snapshots: int, batch: int,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Snapshots of a busy server: ``(now, final)``, two int64 arrays ``[num_snapshots, batch]``.

    Each snapshot is ``batch`` requests picked at random from the given ones, each caught after a
    random number of its reply's tokens (1 to all of them, uniformly): ``now`` is its length at that
    moment (prompt + tokens so far), ``final`` its length when it finishes (prompt + output).
    """
    prompt = np.asarray(prompt_lens, dtype=np.int64)                        # [num_requests]
    output = np.asarray(output_lens, dtype=np.int64)                        # [num_requests]
    positive_int("num_snapshots", num_snapshots, "snapshots")
    positive_int("batch", batch, "requests")
    if prompt.shape != output.shape or prompt.size == 0:
        raise ValueError(f"prompt_lens and output_lens must be two non-empty arrays of one length; "
                         f"got {prompt.size} and {output.size}")
    rng = np.random.default_rng(seed)
    picked = rng.integers(0, prompt.size, size=(num_snapshots, batch))      # [num_snapshots, batch]
    written = rng.integers(1, output[picked] + 1)                           # [num_snapshots, batch]
    return prompt[picked] + written, prompt[picked] + output[picked]
