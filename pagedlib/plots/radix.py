"""Figures of chapter 7's radix tree: hit rates of the hash chain and the radix tree by pool size."""
from __future__ import annotations

from typing import Mapping, Sequence

from .style import COLORS, FIGURE_WIDTH, fit, legend_below

__all__ = ["plot_prefix_hit_rates"]

# one colour and marker per design, in the order of pagedlib.sim.prefix_trace.DESIGNS
_STYLES = [(COLORS["padding"], "o", "-"), (COLORS["accent"], "s", "--"), (COLORS["shared"], "^", "-")]


def plot_prefix_hit_rates(hit_rates: Mapping[str, Mapping[str, Sequence[float]]], pools: Sequence[int],
                          title: str = "Prompt tokens found in the cache"):
    """One panel per trace (stacked), hit rate (%) against the pool's size in tokens, one line
    per design. ``hit_rates[trace][design]`` holds one rate (0 to 1) per pool of ``pools``."""
    import matplotlib.pyplot as plt

    n = len(hit_rates)
    fig, axes = plt.subplots(n, 1, figsize=(FIGURE_WIDTH, 2.6 * n + 1.2), sharex=True,
                             layout="constrained", squeeze=False)
    for ax, (trace, by_design) in zip(axes[:, 0], hit_rates.items()):
        for (design, rates), (color, marker, ls) in zip(by_design.items(), _STYLES):
            ax.plot(pools, [100 * r for r in rates], marker=marker, linestyle=ls, color=color,
                    label=design)
        ax.set_xscale("log", base=2)
        ax.set_title(trace)
        ax.set_ylabel("hit rate (%)")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xticks(list(pools), [f"{p:,}" for p in pools])
    axes[-1, 0].set_xlabel("KV pool (token slots)")
    legend_below(fig, axes[0, 0].get_lines(), ncols=1, fontsize=12)   # under both panels
    fig.suptitle(title)
    return fit(fig)
