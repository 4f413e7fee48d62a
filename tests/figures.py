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


#: The figures of chapters 0-7 and 11-13 are held to more than PHONE_TEXT_PX: their smallest text is
#: 12 pt, at least 11 CSS px when shown 360 px wide, so that its capitals (about 0.73 of the font size)
#: stand 8 px tall. PHONE_TEXT_PX (9 px) leaves them at 6-7 px, which a reader of the 400 px site
#: called too small to read (the values on chapter 11's bars, its legends).
LEGIBLE_TEXT_PX = 11


def phone_problems(fig) -> list[str]:
    """What keeps ``fig`` from reading well on a phone, described (empty when none): its smallest
    text under LEGIBLE_TEXT_PX when shown 360 px wide, texts drawn over one another, legends over
    the data."""
    px, text = phone_text_px(fig)
    problems = [f"{text!r} is {px:.1f} px on a phone"] if px < LEGIBLE_TEXT_PX else []
    problems += [f"{a!r} over {b!r}" for a, b in overlapping_texts(fig)]
    return problems + [f"legend {name!r} over the data" for name in legends_over_axes(fig)]


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """The pairs of visible texts of ``fig`` (tick labels in view included) whose boxes overlap."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks, shown = set(), []
    for ax in fig.axes:
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        for t in ax.get_xticklabels():
            ticks.add(t)
            if x0 <= t.get_position()[0] <= x1:
                shown.append(t)
        for t in ax.get_yticklabels():
            ticks.add(t)
            if y0 <= t.get_position()[1] <= y1:
                shown.append(t)
    texts = [t for t in fig.findobj(Text) if t not in ticks] + shown
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts
             if t.get_visible() and t.get_text().strip()]
    return [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1:] if box.overlaps(other)]


def rotated_texts(fig) -> list[str]:
    """The visible texts of ``fig`` drawn at an angle (hard to read on a phone), axis labels apart."""
    from matplotlib.text import Text

    labels = {t for ax in fig.axes for t in (ax.xaxis.label, ax.yaxis.label)}
    return [t.get_text() for t in fig.findobj(Text)
            if t not in labels and t.get_visible() and t.get_text().strip() and t.get_rotation() % 180]
