"""The course's interactive controls (ipywidgets). Python callbacks need a live kernel; on the static
site a widget shows the state it was saved in.
"""
from __future__ import annotations

from typing import Sequence

from .capacity import Plan, next_pow2, paged_plan, reserve_max_plan

__all__ = ["page_size_summary", "page_size_explorer"]

PAGE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TABLE_ENTRY_BYTES = 4  # one int32 block id per page in a block table


def page_size_summary(lengths: Sequence[int], page_size: int, pool_slots: int = 40_960,
                      max_len: int | None = None) -> str:
    """One line on a paged layout: waste, block-table entries, and capacity against reserve-max.

    ``max_len`` (default: the next power of two at or above the longest request) sizes the
    reserve-max baseline that the capacity is compared with.
    """
    plan = paged_plan(lengths, page_size)
    base = reserve_max_plan(lengths, max_len or _default_max_len(lengths))
    ratio = plan.capacity(pool_slots) / max(base.capacity(pool_slots), 1)
    return (f"page size {page_size:>3}: waste {plan.waste:5.1%} | block tables {plan.num_pages:,} entries "
            f"({plan.num_pages * TABLE_ENTRY_BYTES:,} bytes) | {plan.capacity(pool_slots)} requests fit "
            f"{pool_slots:,} slots ({ratio:.1f}x reserve-max's {base.capacity(pool_slots)})")


def page_size_explorer(lengths: Sequence[int], pool_slots: int = 40_960, *, start: int = 16,
                       max_len: int | None = None, page_sizes: Sequence[int] = PAGE_SIZES):
    """A page-size slider (plus a reserve-max / paged switch) over the rows picture of ``lengths``.

    Moving the slider redraws one row per request (:func:`pagedlib.plots.plot_rows`) and prints the
    waste, the size of the block tables and how many requests of this mix fit ``pool_slots`` slots.
    Returns the widget box (display it, or make it a cell's last expression).
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    from .plots.memory import plot_rows

    if start not in page_sizes:
        raise ValueError(f"start must be one of page_sizes {list(page_sizes)}; got {start!r}")
    max_len = max_len or _default_max_len(lengths)
    reserve_max_plan(lengths, max_len)  # validates lengths and max_len before any widget exists
    layout = widgets.ToggleButtons(options=["reserve max", "paged"], value="paged", description="layout")
    slider = widgets.SelectionSlider(options=list(page_sizes), value=start, description="page size",
                                     continuous_update=False)
    out = widgets.Output()

    def draw(_=None) -> None:
        paged = layout.value == "paged"
        slider.disabled = not paged
        plan: Plan = paged_plan(lengths, slider.value) if paged else reserve_max_plan(lengths, max_len)
        # Replace the Output widget's contents directly (not `with out:`), so the figure and text
        # land in the widget even where no widget front end is attached (nbval, scripts).
        out.outputs = ()
        fig = plot_rows(plan, width=max_len, pool_slots=pool_slots)
        out.append_display_data(fig)
        plt.close(fig)
        if paged:
            out.append_stdout(page_size_summary(lengths, slider.value, pool_slots, max_len) + "\n")
        else:
            out.append_stdout(f"reserve max ({max_len:,} per request): waste {plan.waste:.1%} | "
                              f"{plan.capacity(pool_slots)} requests fit {pool_slots:,} slots\n")

    layout.observe(draw, names="value")
    slider.observe(draw, names="value")
    draw()
    return widgets.VBox([layout, slider, out])


def _default_max_len(lengths: Sequence[int]) -> int:
    """The reserve-max baseline's slot: the longest request rounded up to a power of two (at least 1)."""
    return next_pow2(max(max(lengths, default=1), 1))
