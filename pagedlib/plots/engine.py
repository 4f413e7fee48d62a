"""Figures of the serving engine (chapter 10): what the scheduler did, step by step.

Both functions read ``LLM.metrics`` (its per-step ``history``) and return a matplotlib Figure.
"""
from __future__ import annotations

import matplotlib.pyplot as plt

from .style import COLORS

__all__ = ["scheduler_timeline", "compare_timelines"]


def _series(metrics: dict, key: str) -> list:
    return [h[key] for h in metrics["history"]]


def scheduler_timeline(metrics: dict, title: str = "What the scheduler did, step by step"):
    """Running and waiting requests (top) and KV blocks in use (bottom) at every engine step,
    with the steps that preempted marked."""
    steps = _series(metrics, "step")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    top.step(steps, _series(metrics, "running"), where="post", color=COLORS["kv"], label="running")
    top.step(steps, _series(metrics, "waiting"), where="post", color=COLORS["tail"], label="waiting")
    preempt = [(s, r) for s, r, p in zip(steps, _series(metrics, "running"), _series(metrics, "preempted")) if p]
    if preempt:
        top.scatter(*zip(*preempt), marker="v", color=COLORS["padding"], zorder=3, label="a preemption")
    top.set_ylabel("sequences")
    top.set_title(title)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")

    used, logical = _series(metrics, "blocks_used"), _series(metrics, "logical_blocks")
    bottom.fill_between(steps, used, step="post", color=COLORS["kv"], alpha=0.6, label="blocks in use")
    if any(lg > u for lg, u in zip(logical, used)):
        bottom.step(steps, logical, where="post", color=COLORS["shared"], linestyle="--",
                    label="blocks without sharing")
    bottom.axhline(metrics["num_blocks"], color=COLORS["external"], linestyle=":", label="cache size")
    bottom.set_ylabel(f"KV blocks ({metrics['block_size']} tokens each)")
    bottom.set_xlabel("engine step")
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    return fig


def compare_timelines(runs: dict[str, dict], title: str = "Requests running at once, same KV budget"):
    """Running requests per step for several engines (name -> metrics) on the same workload, and
    the KV blocks each had in use."""
    colours = [COLORS["kv"], COLORS["padding"], COLORS["shared"], COLORS["other"]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5))
    for (name, m), colour in zip(runs.items(), colours):
        top.step(_series(m, "step"), _series(m, "running"), where="post", color=colour, label=name)
        bottom.step(_series(m, "step"), _series(m, "blocks_used"), where="post", color=colour,
                    label=f"{name}: in use")
        if "reserved_blocks" in m["history"][0]:
            bottom.step(_series(m, "step"), _series(m, "reserved_blocks"), where="post", color=colour,
                        linestyle="--", label=f"{name}: reserved")
    first = next(iter(runs.values()))
    bottom.axhline(first["num_blocks"], color=COLORS["external"], linestyle=":", label="cache size")
    top.set_title(title)
    top.set_ylabel("running sequences")
    top.set_xlabel("engine step")
    bottom.set_ylabel(f"KV blocks ({first['block_size']} tokens each)")
    bottom.set_xlabel("engine step")
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    fig.tight_layout()
    return fig
