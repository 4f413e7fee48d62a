"""Figures of the kernel chapters (7 and 8): how close the paged decode kernel gets to the memory's speed."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib.pyplot as plt

from .style import COLORS

__all__ = ["kernel_bandwidth", "read_bench_csv"]

_BATCH_COLOURS = [COLORS["kv"], COLORS["tail"], COLORS["shared"], COLORS["other"], COLORS["accent"],
                  COLORS["padding"]]


def read_bench_csv(path: str | Path) -> list[dict]:
    """The rows written by ``python -m pagedlib.bench attention``, with numbers parsed."""
    with Path(path).open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def kernel_bandwidth(rows: list[dict], peak_gbs: float | None = None, gpu: str | None = None,
                     block_size: int | None = None):
    """Achieved memory bandwidth of paged decode (solid) and contiguous SDPA (dashed) vs context length.

    ``rows`` are benchmark rows (dicts with batch, context, block_size, paged_gbs, sdpa_gbs), e.g.
    from :func:`read_bench_csv`; one line per batch size, for one ``block_size`` (default: the
    smallest in the rows). ``peak_gbs`` draws the GPU's peak bandwidth as a ceiling.
    """
    block_size = block_size or min(r["block_size"] for r in rows)
    rows = [r for r in rows if r["block_size"] == block_size]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for colour, batch in zip(_BATCH_COLOURS * 4, sorted({r["batch"] for r in rows})):
        mine = sorted((r for r in rows if r["batch"] == batch), key=lambda r: r["context"])
        ctx = [r["context"] for r in mine]
        ax.plot(ctx, [r["paged_gbs"] for r in mine], "o-", color=colour, label=f"paged, batch {int(batch)}")
        ax.plot(ctx, [r["sdpa_gbs"] for r in mine], "s--", color=colour, alpha=0.6,
                label=f"SDPA contiguous, batch {int(batch)}")
    if peak_gbs:
        for level, text in ((1.0, "peak"), (0.7, "70% of peak (target)")):
            ax.axhline(level * peak_gbs, color=COLORS["external"], lw=1, ls="-" if level == 1 else ":")
            ax.text(0.01, level * peak_gbs, text, va="bottom", color=COLORS["external"],
                    transform=ax.get_yaxis_transform())            # x in axes fraction, y in GB/s
        ax.set_ylim(0, peak_gbs * 1.1)
    contexts = sorted({r["context"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(contexts, [str(int(c)) for c in contexts])
    ax.minorticks_off()
    ax.set_xlabel("context length (tokens per sequence)")
    ax.set_ylabel("achieved bandwidth (GB/s)")
    where = f" on {gpu}" if gpu else ""
    ax.set_title(f"Decode attention{where}: paged kernel vs contiguous SDPA\n"
                 f"(bytes of K, V, query and output per second; block size {int(block_size)})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
