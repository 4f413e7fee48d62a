"""Every course figure readable on a phone: text at least PHONE_TEXT_PX CSS px when shown 360 px wide.

The plot tests call ``check_open_figures()`` before closing each test's figures, so every figure a
plot test draws is measured: the smallest text's size in points, the figure's dpi and its displayed
width in CSS px (``pagedlib.plots.style.phone_text_px``).
"""
import matplotlib.pyplot as plt

from pagedlib.plots.style import PHONE_TEXT_PX, PHONE_WIDTH, phone_text_px


def unreadable_figures() -> list[str]:
    """The open figures whose smallest text is under PHONE_TEXT_PX at PHONE_WIDTH, described."""
    out = []
    for num in plt.get_fignums():
        fig = plt.figure(num)
        px, text = phone_text_px(fig)
        if px < PHONE_TEXT_PX:
            title = next((ax.get_title() for ax in fig.axes if ax.get_title()), "")
            out.append(f"{title!r}: {text!r} is {px:.1f} px at {PHONE_WIDTH} px wide "
                       f"(figure {fig.get_figwidth():.1f} in wide); draw it narrower, stack its "
                       f"panels or raise the font size")
    return out


def check_open_figures() -> None:
    bad = unreadable_figures()
    plt.close("all")
    assert not bad, f"text too small on a phone (under {PHONE_TEXT_PX} px):\n" + "\n".join(bad)


def legends_over_axes(fig) -> list[str]:
    """The legends of ``fig`` (its own and its axes') drawn over an axes' plotting area, each named by
    its first entry: a legend there can hide a bar, a line or a tick label (one sat on chapter 4b's
    "128 / 128" labels); under the figure (``pagedlib.plots.style.legend_below``) it hides nothing."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [leg.get_texts()[0].get_text() for leg in legends
            if any(leg.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
                   for ax in fig.axes)]
