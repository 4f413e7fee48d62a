"""Figures of the simulator chapters (11 and 12): the PagedAttention paper's results, simulated.

Each function takes the results of :func:`pagedlib.sim.simulate` (or runs the simulations itself when
given none) and draws them beside the paper's numbers.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..sim import FIGURE2, FIGURE13, POLICIES, POLICY_LABELS, SimResult, Workload, simulate
from .style import COLORS, PADDING_HATCH, FIGURE_WIDTH, RC_PARAMS, fit, legend_below

__all__ = ["paper_figure2", "paper_figure12", "paper_figure13", "sim_waste_vs_block_size"]

# the labels over the bars and the legends: the course's legend size (12 pt), 11.2 CSS px when a
# figure is shown 360 px wide on a phone (10 pt was 9.3 px, hard to read there); a point less
# inside a bar, where "96%" must fit its width
LABEL_FONT = RC_PARAMS["legend.fontsize"]

# the four states of Figure 2, bottom to top: (name, label, colour, hatch)
_PARTS = [("token", "token states", COLORS["kv"], None),
          ("reservation", "reservation", COLORS["tail"], None),   # slots for tokens still to come
          ("internal", "internal fragmentation", COLORS["padding"], PADDING_HATCH),
          ("external", "external fragmentation & free", COLORS["external"], None)]


def _saturated(workload: Workload | None) -> dict[str, SimResult]:
    workload = workload or Workload.sharegpt(2000, seed=0)
    return {p: simulate(workload, p) for p in POLICIES}


def _stack(ax, x: float, shares: dict[str, float], width: float, labelled: bool, alpha=1.0) -> None:
    """One stacked bar of percentages at ``x``; the token share is written on it."""
    bottom = 0.0
    for name, label, colour, hatch in _PARTS:
        ax.bar(x, shares[name], width, bottom=bottom, color=colour, hatch=hatch, alpha=alpha,
               edgecolor="white", linewidth=0.5, label=label if labelled else None)
        bottom += shares[name]
    ax.text(x, shares["token"] / 2, f"{shares['token']:.0f}%", ha="center", va="center",
            color="white", fontsize=LABEL_FONT - 1, fontweight="bold")   # inside a narrow bar


def paper_figure2(results: dict[str, SimResult] | None = None, workload: Workload | None = None):
    """The paper's Figure 2: where the K/V memory goes under each policy, simulated beside the paper.

    ``results`` maps policy -> :class:`SimResult` (default: 2,000 ShareGPT requests, saturated
    queue). Each policy gets two stacked bars, the simulation (left) and the paper (right, lighter).
    """
    results = results or _saturated(workload)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 5.4), layout="constrained")
    for i, policy in enumerate(results):
        sim = {k: 100 * v for k, v in results[policy].shares().items()}
        _stack(ax, i - 0.2, sim, 0.36, labelled=i == 0)
        _stack(ax, i + 0.2, FIGURE2[policy], 0.36, labelled=False, alpha=0.55)
        ax.text(i - 0.2, 101, "sim", ha="center", fontsize=LABEL_FONT)
        ax.text(i + 0.2, 101, "paper", ha="center", fontsize=LABEL_FONT)
    ax.set_xticks(range(len(results)), [POLICY_LABELS[p].replace(" (", "\n(") for p in results])
    ax.set_ylim(0, 108)
    ax.set_ylabel("share of the K/V pool (%, time average)")
    ax.set_title("Where the K/V memory goes (OPT-13B, 15.7K slots, ShareGPT):\nsimulated vs paper")
    legend_below(fig, ax.get_legend_handles_labels()[0], fontsize=LABEL_FONT)   # legible on a phone
    return fit(fig)


def paper_figure13(results: dict[str, SimResult] | None = None, workload: Workload | None = None,
                   dataset: str = "sharegpt", request_rate: float = 2.0):
    """The paper's Figure 13: average number of running requests per policy, simulated vs paper.

    ``results`` default: 2,000 requests of ``dataset`` arriving at ``request_rate`` per second.
    """
    if results is None:
        workload = workload or Workload.from_dataset(dataset, 2000, seed=0)
        results = {p: simulate(workload, p, request_rate=request_rate) for p in POLICIES}
    paper = FIGURE13.get((dataset, request_rate), {})
    x = np.arange(len(results))
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 4.5))
    bars = [("simulated", -0.2, [results[p].avg_batch for p in results], COLORS["kv"])]
    if paper:
        bars.append(("paper", 0.2, [paper[p] for p in results], COLORS["accent"]))
    for label, shift, values, colour in bars:
        ax.bar(x + shift, values, 0.38, color=colour, label=label)
        for xi, value in zip(x, values):
            ax.text(xi + shift, value, f"{value:.1f}", ha="center", va="bottom", fontsize=10)
    ax.set_xticks(x, [POLICY_LABELS[p].replace(" (", "\n(") for p in results])
    ax.set_ylabel("average running requests (batch size)")
    name = {"sharegpt": "ShareGPT", "alpaca": "Alpaca"}.get(dataset, dataset)
    ax.set_title(f"Batch size per policy (OPT-13B, {name}, {request_rate:g} requests/s)")
    ax.legend()
    fit(fig).tight_layout()
    return fig


def sim_waste_vs_block_size(block_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                            workload: Workload | None = None, kv_slots: int | None = None, *,
                            results: dict[int, SimResult] | None = None):
    """Paged policy: the pool's shares vs page size (saturated queue; default 1,000 ShareGPT requests).

    ``results`` maps page size -> :class:`SimResult` of runs already made (then ``block_sizes``,
    ``workload`` and ``kv_slots`` are not used). Small pages waste almost nothing; big ones let the
    unused tail of each request's last page (reserved for tokens to come, or never filled) creep
    back, and fewer requests fit.
    """
    if results is None:
        workload = workload or Workload.sharegpt(1000, seed=0)
        extra = {} if kv_slots is None else {"kv_slots": kv_slots}
        results = {b: simulate(workload, "paged", block_size=b, **extra) for b in block_sizes}
    block_sizes, runs = list(results), list(results.values())
    x = np.arange(len(block_sizes))
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 4.5), layout="constrained")
    bottom = np.zeros(len(runs))
    for name, label, colour, hatch in _PARTS:
        values = np.array([100 * r.shares()[name] for r in runs])
        ax.bar(x, values, 0.7, bottom=bottom, color=colour, hatch=hatch, edgecolor="white",
               linewidth=0.5, label=label)
        bottom += values
    batch_ax = ax.twinx()
    batch_ax.plot(x, [r.avg_batch for r in runs], "o-", color="black", label="average batch")
    batch_ax.set_ylabel("average running requests")
    batch_ax.set_ylim(0, 1.15 * max(r.avg_batch for r in runs))
    ax.set_xticks(x, [str(b) for b in block_sizes])
    ax.set_xlabel("page size (tokens per block)")
    ax.set_ylabel("share of the K/V pool (%, time average)")
    ax.set_ylim(0, 100)
    ax.set_title("Paged policy: waste and batch size vs page size (ShareGPT, saturated queue)")
    handles, more = ax.get_legend_handles_labels()[0], batch_ax.get_legend_handles_labels()[0]
    # two columns, what holds or will hold tokens, then the waste: the two long labels share one
    # column, so the legend is no wider than the figure
    legend_below(fig, [*handles[:2], *more, *handles[2:]], fontsize=LABEL_FONT)
    return fit(fig)


_POLICY_STYLE = {"max": (COLORS["padding"], "s"), "pow2": (COLORS["tail"], "^"),
                 "oracle": (COLORS["external"], "D"), "paged": (COLORS["kv"], "o")}


def paper_figure12(rates, curves: dict[str, np.ndarray], knees: dict[str, float] | None = None,
                   ylim: float = 1.0):
    """The paper's Figure 12 shape: normalised latency (s/token) against request rate, one line per
    policy (``curves`` maps policy -> latency at each of ``rates``), with each policy's sustainable
    rate (``knees``) marked by a dotted line and given in the legend (knees close together would
    write their numbers over each other beside the lines)."""
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 6.2), layout="constrained")
    for policy, latency in curves.items():
        colour, marker = _POLICY_STYLE[policy]
        label = POLICY_LABELS[policy]
        if knees and policy in knees:
            ax.axvline(knees[policy], color=colour, linestyle=":", linewidth=1.5)
            label += f": knee {knees[policy]:.2f}/s"
        ax.plot(rates, np.minimum(latency, ylim * 1.2), marker=marker, color=colour, label=label)
    ax.set_ylim(0, ylim)
    ax.set_xlabel("request rate (requests/s, Poisson arrivals)")
    ax.set_ylabel("normalised latency (s/token)")
    ax.set_title("Latency against load: OPT-13B, ShareGPT, simulated"
                 + ("\n(dotted: each policy's knee)" if knees else ""))
    # one column at 12 pt: two columns of "Orca (Oracle): knee 0.81/s" fit the figure's width only
    # at 10 pt, which a phone shows at about 9 px
    fig.legend(loc="outside lower center", ncol=1, fontsize=12, frameon=False)
    return fit(fig)
