"""The course's interactive controls (ipywidgets), each with a static stand-in for the website.

A widget's Python callbacks need a live kernel (Jupyter, Colab). On the static site a stored widget
would look live and do nothing, so the site never shows one: every widget a notebook displays is
wrapped by :func:`with_fallback`, whose output carries, next to the widget, an HTML figure of the
widget's starting state with a caption that says where to run it. Jupyter and Colab show the live
widget (a widget view outranks HTML there, as for ipympl's figures); the site's config
(``nb_mime_priority_overrides`` in ``_config.yml``) drops the widget view, so it shows the figure.

The recipe, for a notebook cell that shows a widget::

    from pagedlib.widgets import with_fallback
    slider = widgets.IntSlider(...)            # the live control, as before
    ...
    with_fallback(box, static,                 # the cell's last expression
                  alt="What the starting picture shows, in a sentence.",
                  caption="What the reader would see move, in a sentence.")

``static`` is a matplotlib Figure (the widget's starting state) or a short text (for a widget that
prints, e.g. a table of its values at a few settings). Then re-execute the notebook. A course
function that builds a widget (``block_size_explorer``) wraps it itself. tests/test_site.py checks
that every stored widget output has its fallback and that no page of the built site shows a widget.
"""
from __future__ import annotations

import html
from typing import Any, Sequence

from .memory.capacity import Plan, next_pow2, paged_plan, reserve_max_plan

__all__ = ["block_size_summary", "block_size_explorer", "with_fallback", "WidgetWithFallback",
           "TRY_IT_HREF"]

# The Try-it page, relative to a chapter's page on the site (notebooks/NN_x.html).
TRY_IT_HREF = "../book/try-paging.html"
RUN_IT_HERE = ("On this website this is a still of an interactive control, which needs Python: open "
               "the chapter in Colab (the badge at the top of the page) or in Jupyter to use it.")


class WidgetWithFallback:
    """A widget that displays live in Jupyter and Colab and as a static HTML figure on the site.

    Attribute access goes to the widget (``.children``, ``.value``), so code that uses the widget
    keeps working; ``fallback_html`` is what the site shows.
    """

    def __init__(self, widget: Any, fallback_html: str):
        self.widget = widget
        self.fallback_html = fallback_html

    def __getattr__(self, name: str):
        if name.startswith("_"):   # display hooks (_ipython_display_, _repr_*_) stay this object's
            raise AttributeError(name)
        return getattr(self.__dict__["widget"], name)

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude))
        bundle["text/html"] = self.fallback_html
        return bundle


def with_fallback(widget: Any, static: Any, *, alt: str, caption: str,
                  try_it: bool = True) -> WidgetWithFallback:
    """Wrap ``widget`` with a static stand-in for the site: ``static`` (a Figure or a text).

    The caption is followed by where to run the live control and, with ``try_it``, a link to the
    site's in-browser Try-it page. A Figure is closed once drawn.
    """
    from .plots.display import figure_html

    link = (f' Or change the page size in your browser on the <a href="{TRY_IT_HREF}">Try it</a> '
            f'page.' if try_it else "")
    where = f"<em>{html.escape(RUN_IT_HERE)}</em>{link}"
    if isinstance(static, str):
        body = (f'<figure class="pagedlib-figure"><pre role="img" aria-label="{html.escape(alt)}" '
                f'style="white-space:pre-wrap">{html.escape(static)}</pre>'
                f"<figcaption>{html.escape(caption)} {where}</figcaption></figure>")
    else:
        import matplotlib.pyplot as plt

        body = figure_html(static, alt=alt, caption=caption, caption_html=where)
        plt.close(static)
    return WidgetWithFallback(widget, f'<div class="pagedlib-widget-fallback">{body}</div>')

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TABLE_ENTRY_BYTES = 4  # one int32 block id per page in a block table


def block_size_summary(lengths: Sequence[int], block_size: int, pool_slots: int = 40_960,
                       max_len: int | None = None) -> str:
    """One line on a paged layout: waste, block-table entries, and capacity against reserve-max.

    ``max_len`` (default: the next power of two at or above the longest request) sizes the
    reserve-max baseline that the capacity is compared with.
    """
    plan = paged_plan(lengths, block_size)
    base = reserve_max_plan(lengths, max_len or _default_max_len(lengths))
    ratio = plan.capacity(pool_slots) / max(base.capacity(pool_slots), 1)
    return (f"page size {block_size:>3}: waste {plan.waste:5.1%} | block tables {plan.num_blocks:,} entries "
            f"({plan.num_blocks * TABLE_ENTRY_BYTES:,} bytes) | {plan.capacity(pool_slots)} requests fit "
            f"{pool_slots:,} slots ({ratio:.1f}x reserve-max's {base.capacity(pool_slots)})")


def block_size_explorer(lengths: Sequence[int], pool_slots: int = 40_960, *, start: int = 16,
                        max_len: int | None = None, block_sizes: Sequence[int] = BLOCK_SIZES):
    """A page-size slider (plus a reserve-max / paged switch) over the rows picture of ``lengths``.

    Moving the slider redraws one row per request (:func:`pagedlib.plots.plot_rows`) and prints the
    waste, the size of the block tables and how many requests of this mix fit ``pool_slots`` slots.
    Returns the widget box with its static stand-in for the site (:func:`with_fallback`: the
    starting picture and line); display it, or make it a cell's last expression.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    from .plots.memory import plot_rows

    if start not in block_sizes:
        raise ValueError(f"start must be one of block_sizes {list(block_sizes)}; got {start!r}")
    max_len = max_len or _default_max_len(lengths)
    reserve_max_plan(lengths, max_len)  # validates lengths and max_len before any widget exists
    layout = widgets.ToggleButtons(options=["reserve max", "paged"], value="paged", description="layout")
    slider = widgets.SelectionSlider(options=list(block_sizes), value=start, description="page size",
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
            out.append_stdout(block_size_summary(lengths, slider.value, pool_slots, max_len) + "\n")
        else:
            out.append_stdout(f"reserve max ({max_len:,} per request): waste {plan.waste:.1%} | "
                              f"{plan.capacity(pool_slots)} requests fit {pool_slots:,} slots\n")

    layout.observe(draw, names="value")
    slider.observe(draw, names="value")
    draw()
    box = widgets.VBox([layout, slider, out])
    start_plan = paged_plan(lengths, start)
    return with_fallback(
        box, plot_rows(start_plan, width=max_len, pool_slots=pool_slots),
        alt=(f"{len(lengths)} rows, one per request, in pages of {start} tokens: each row is the "
             f"request's K/V in blue and at most one page's unused tail in orange."),
        caption=block_size_summary(lengths, start, pool_slots, max_len) + ".")


def _default_max_len(lengths: Sequence[int]) -> int:
    """The reserve-max baseline's slot: the longest request rounded up to a power of two (at least 1)."""
    return next_pow2(max(max(lengths, default=1), 1))
