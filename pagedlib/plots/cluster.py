"""Figures of chapter 13: routing across replicas, simulated (:mod:`pagedlib.sim.router`); inter-token
latency with and without prefill on another engine (:mod:`pagedlib.sim.disaggregated`)."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib import ticker
import numpy as np

from ..sim.router import POLICIES
from .style import COLORS, FIGURE_WIDTH, RC_PARAMS, fit, legend_below

__all__ = ["router_figure", "itl_timeline"]

_STYLE = {"round_robin": ("round robin", COLORS["padding"], "o"),
          "least_loaded": ("least loaded", COLORS["other"], "s"),
          "prefix_aware": ("prefix-aware", COLORS["kv"], "^")}


def router_figure(rates, results: dict):
    """TTFT p99 (log scale) and prefix-cache hit rate against the rate of new chats, one line per
    policy (its legend below the figure, clear of the lines). ``results[policy]`` is a list of
    :class:`~pagedlib.sim.router.RouterResult`, one per rate."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 6.8), sharex=True, layout="constrained")
    for policy in POLICIES:
        label, colour, marker = _STYLE[policy]
        runs = results[policy]
        top.plot(rates, [r.ttft_p(99) for r in runs], marker=marker, color=colour, label=label)
        bottom.plot(rates, [100 * r.hit_rate for r in runs], marker=marker, color=colour, label=label)
    top.set_yscale("log")
    top.set_ylabel("TTFT p99 (s, log)")
    top.set_title("Routing chats over 4 replicas")
    legend_below(fig, top.get_legend_handles_labels()[0], ncols=3,     # 11.2 px on a phone,
                 fontsize=RC_PARAMS["legend.fontsize"], columnspacing=1,   # no wider than
                 handlelength=1.6)                                         # the panels
    bottom.set_ylabel("prompt tokens cached (%)")
    bottom.set_ylim(0, 100)
    bottom.set_xlabel("new chats per second")
    return fit(fig)


def itl_timeline(runs: dict):
    """Every gap between two tokens of a request (ms, log scale) at the modelled time it ended, one
    panel per way of serving, stacked, with the p99 as a dashed line. ``runs``: a label -> a
    :class:`~pagedlib.sim.clocked.ClockedRun`."""
    if not runs:
        raise ValueError("runs must name at least one ClockedRun")
    fig, axes = plt.subplots(len(runs), 1, figsize=(FIGURE_WIDTH, 2.4 * len(runs) + 0.8),
                             sharex=True, sharey=True, squeeze=False)
    colours = [COLORS["padding"], COLORS["other"], COLORS["kv"], COLORS["shared"]]
    for k, (ax, (label, run)) in enumerate(zip(axes[:, 0], runs.items())):
        ends = np.concatenate([np.asarray(t[1:]) for t in run.token_times_s] + [np.zeros(0)])
        gaps = 1e3 * run.itl_s
        ax.scatter(ends, gaps, s=6, color=colours[k % len(colours)], label=label)
        p99 = float(np.percentile(gaps, 99)) if len(gaps) else 0.0
        ax.axhline(p99, color="black", linestyle="--", linewidth=1, label=f"p99 {p99:.0f} ms")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 3.0)))   # 30, 100, 300 ms
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_ylabel("gap (ms)")
        ax.legend(loc="upper right")
    axes[0, 0].set_title("Inter-token gaps: prompts stall the steps")
    axes[-1, 0].set_xlabel("modelled time (s)")
    fit(fig).tight_layout()
    return fig
