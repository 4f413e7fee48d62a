"""What an engine step spends around its forward pass (chapter 10b): a bar per profiled run
(:class:`pagedlib.bench.step_profile.StepProfile`), its phases as shares of the run's time, and the
time ideal overlap of CPU work with the forward pass would leave."""
from __future__ import annotations

import matplotlib.pyplot as plt

from .style import COLORS, FIGURE_WIDTH, fit, wrap

__all__ = ["step_phases"]

_PHASE_STYLE = {   # phase: (label, colour)
    "schedule": ("schedule", COLORS["tail"]),
    "build": ("build the batch", COLORS["other"]),
    "forward": ("forward pass", COLORS["kv"]),
    "finish": ("sample and retire", COLORS["padding"]),
}


def step_phases(profiles: dict, title: str = "Where an engine step's time goes"):
    """One horizontal bar per run in ``profiles`` (name -> StepProfile): the share of its time in each
    phase, stacked, and a black tick where the run would end with ideal overlap (each step costing
    the longer of its forward pass and its CPU work)."""
    names = list(profiles)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 2.4 + 0.6 * len(names)), layout="constrained")
    for row, name in enumerate(names):
        prof = profiles[name]
        sec = prof.seconds()
        left = 0.0
        for phase, (label, color) in _PHASE_STYLE.items():
            share = 100 * sec[phase] / sec["total"]
            ax.barh(row, share, left=left, color=color, label=label if row == 0 else None)
            left += share
        at = 100 * prof.overlapped_seconds / sec["total"]
        ax.plot([at, at], [row - 0.45, row + 0.45], color="black", linewidth=2.5,
                label="with ideal overlap" if row == 0 else None)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the run's time (%)")
    ax.set_title(wrap(title, fontsize=12), fontsize=12)
    fig.legend(loc="outside lower center", ncol=2, fontsize=10, frameon=False)
    return fit(fig)
