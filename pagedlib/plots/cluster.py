"""Figures of chapter 13: routing across replicas, simulated (:mod:`pagedlib.sim.router`)."""
from __future__ import annotations

import matplotlib.pyplot as plt

from ..sim.router import POLICIES
from .style import COLORS, FIGURE_WIDTH, fit

__all__ = ["router_figure"]

_STYLE = {"round_robin": ("round robin", COLORS["padding"], "o"),
          "least_loaded": ("least loaded", COLORS["other"], "s"),
          "prefix_aware": ("prefix-aware", COLORS["kv"], "^")}


def router_figure(rates, results: dict):
    """TTFT p99 (log scale) and prefix-cache hit rate against the rate of new chats, one line per
    policy. ``results[policy]`` is a list of :class:`~pagedlib.sim.router.RouterResult`, one per rate."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 6.4), sharex=True)
    for policy in POLICIES:
        label, colour, marker = _STYLE[policy]
        runs = results[policy]
        top.plot(rates, [r.ttft_p(99) for r in runs], marker=marker, color=colour, label=label)
        bottom.plot(rates, [100 * r.hit_rate for r in runs], marker=marker, color=colour, label=label)
    top.set_yscale("log")
    top.set_ylabel("TTFT p99 (s, log)")
    top.set_title("Routing chats over 4 replicas")
    top.legend(loc="upper left")
    bottom.set_ylabel("prompt tokens cached (%)")
    bottom.set_ylim(0, 100)
    bottom.set_xlabel("new chats per second")
    fit(fig).tight_layout()
    return fig
