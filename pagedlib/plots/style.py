"""How the course's figures look: a colour-blind-safe palette (Okabe-Ito), readable font sizes, 2x PNGs.

``use_course_style()`` (called when ``pagedlib.plots`` is imported) sets matplotlib's defaults for
every figure of the course, the learner's own included: font sizes that stay readable when a figure
is shown at the width of the site's column (about 780 px) or of a phone (about 360 px), and, in a
notebook, PNGs rendered at twice their display size (``retina``), so they are sharp on high-density
screens and on the site. A figure made at the default size, 5.2 x 3.5 inches, is shown 520 px wide:
on a phone, 360 px wide, its smallest text (10 pt) is still 9.6 px tall. A figure of two panels
stacks them (one above the other) rather than setting them side by side.
"""
from __future__ import annotations

from ..output import in_notebook

COLORS = {
    "kv": "#0072B2",          # real K/V tokens (blue)
    "tail": "#E69F00",        # the unused tail of the last page (orange)
    "padding": "#D55E00",     # reserved but unused slots (vermillion, also hatched)
    "free": "#F0F0F0",        # free pool space (light grey)
    "external": "#999999",    # free but unusable holes (grey)
    "shared": "#009E73",      # pages shared by several sequences (green)
    "other": "#CC79A7",       # anything else (purple)
    "accent": "#56B4E9",      # a second series (sky blue)
}
PADDING_HATCH = "///"         # padding is hatched as well as coloured, so it survives greyscale

DISPLAY_DPI = 100             # CSS pixels per inch of a figure: 7.5 in is shown 750 px wide
PIXEL_RATIO = 2               # PNGs hold this many pixels per CSS pixel (retina)
# Font sizes in points. At 100 px per inch a 13 pt label is 18.1 px on a desktop; text drawn
# smaller than SMALLEST_FONT is hard to read once a phone shrinks the figure to 360 px.
SMALLEST_FONT = 10
FIGURE_WIDTH = 5.2            # inches: the widest a course figure is drawn (520 CSS px)
# On a phone a figure is shown PHONE_WIDTH CSS px wide (or its own width, if narrower); its text must
# then be at least PHONE_TEXT_PX CSS px tall. A text of s pt in a figure W CSS px wide is
# s * DISPLAY_DPI / 72 * PHONE_WIDTH / W px there: 10 pt text needs a figure at most 617 px wide.
PHONE_WIDTH = 360
PHONE_TEXT_PX = 9
RC_PARAMS = {
    "figure.figsize": (FIGURE_WIDTH, 3.5),
    "figure.dpi": DISPLAY_DPI,
    "savefig.dpi": DISPLAY_DPI * PIXEL_RATIO,
    # A course figure is about 531 CSS px wide (1,063 px at 2x): on a 360 px phone its text is shown
    # at 360/531 = 0.68 of its size, so 12 pt ticks are 11.3 px there and 13 pt labels 12.2 px.
    "font.size": 13,
    "axes.titlesize": 13,
    "axes.labelsize": 13,
    "xtick.labelsize": 12,
    "ytick.labelsize": 12,
    "legend.fontsize": 12,
    "legend.title_fontsize": 12,
    "figure.titlesize": 14,
}


def wrap(text: str, width_in: float = FIGURE_WIDTH, fontsize: float = 12) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``fontsize`` points (for titles)."""
    import textwrap

    chars = max(12, int(width_in * 72 / (0.62 * fontsize)))     # an average glyph: 0.62 em wide
    return "\n".join(textwrap.wrap(" ".join(text.split()), chars))


def log2_ticks(ax, sizes, most: int = 7) -> None:
    """A tick at each of ``sizes`` on ``ax``'s log2 x axis, labelled at no more than ``most`` of them
    (every other one, every third...), from the first: twelve page sizes from 1 to 2048 written side
    by side run into each other ("10242048") in a course figure."""
    sizes = list(sizes)
    step = -(-len(sizes) // most)
    ax.set_xticks(sizes, [str(p) if i % step == 0 else "" for i, p in enumerate(sizes)])


def legend_below(fig, handles, *, ncols: int = 2, fontsize: float = 10, **kwargs):
    """One legend under ``fig``'s axes (``loc="outside lower center"``), where it covers no data;
    returns it.

    The figure is given a constrained layout if it has none (the layout makes room for the legend).
    Called again on the same figure, as panels that share it are drawn, it keeps one legend: the
    entries before, then the new ones whose labels it did not have. Other keyword arguments go to
    ``fig.legend`` (``columnspacing=1`` keeps a wide legend inside the figure's width).
    """
    if fig.get_layout_engine() is None:
        fig.set_layout_engine("constrained")
    old = getattr(fig, "_course_legend", None)
    if old is not None:
        known = {h.get_label() for h in old[1]}
        handles = old[1] + [h for h in handles if h.get_label() not in known]
        old[0].remove()
    handles = list(handles)
    legend = fig.legend(handles=handles, loc="outside lower center", ncol=min(ncols, len(handles)),
                        fontsize=fontsize, frameon=False, **kwargs)
    fig._course_legend = (legend, handles)
    return legend


def fit(fig):
    """Wrap ``fig``'s titles, axis labels and suptitle to the figure's width; returns ``fig``.

    A title written as one line for a wide figure becomes two or three lines in a narrow one,
    instead of making the figure wider than FIGURE_WIDTH (and so smaller on a phone).
    """
    width = fig.get_figwidth()
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label]
    for t in texts:
        if t.get_text():
            t.set_text("\n".join(wrap(line, width, t.get_fontsize()) if line.strip() else line
                                 for line in t.get_text().split("\n")))
    return fig


def phone_text_px(fig, phone_width: int = PHONE_WIDTH) -> tuple[float, str]:
    """The height in CSS px of ``fig``'s smallest text when the figure is shown ``phone_width`` px
    wide (or at its own width, if narrower), and that text.

    The figure is measured as it is displayed: its tight bounding box (as a notebook and
    ``show`` save it, with 0.1 inch of padding) at ``fig.dpi`` CSS px per inch.
    """
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width_px = (fig.get_tightbbox(renderer).width + 0.2) * fig.dpi
    scale = min(1.0, phone_width / width_px)
    texts = [t for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_window_extent(renderer).width > 0]
    if not texts:
        return float("inf"), ""
    smallest = min(texts, key=lambda t: t.get_fontsize())
    return smallest.get_fontsize() * fig.dpi / 72 * scale, smallest.get_text()


def use_course_style() -> None:
    """Apply the course's matplotlib defaults; in IPython, also show inline figures as 2x PNGs.

    Safe to call more than once. Outside IPython (scripts, tests) only the defaults change.
    """
    import matplotlib as mpl

    mpl.rcParams.update(RC_PARAMS)
    if not in_notebook():
        return
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    from IPython import get_ipython
    # "retina": the PNG holds 2x the pixels and its metadata asks for the 1x size, which both
    # Jupyter and the site (myst-nb reads the width) honour.
    set_matplotlib_formats("retina")
    # ...and every figure a cell shows has its titles and labels wrapped to its width first (fit),
    # so a long title never widens a figure past FIGURE_WIDTH (and shrinks it on a phone).
    from matplotlib.figure import Figure

    png = get_ipython().display_formatter.formatters["image/png"]
    draw = png.lookup_by_type(Figure)
    if not getattr(draw, "_fits_first", False):
        def fitted(fig, draw=draw):
            return draw(fit(fig))
        fitted._fits_first = True
        png.for_type(Figure, fitted)


__all__ = ["COLORS", "PADDING_HATCH", "DISPLAY_DPI", "PIXEL_RATIO", "SMALLEST_FONT", "PHONE_WIDTH",
           "PHONE_TEXT_PX", "FIGURE_WIDTH", "RC_PARAMS", "phone_text_px", "use_course_style", "wrap", "fit",
           "log2_ticks", "legend_below"]
