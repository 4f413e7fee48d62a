"""How the course's figures look: a colour-blind-safe palette (Okabe-Ito), readable font sizes, 2x PNGs.

``use_course_style()`` (called when ``pagedlib.plots`` is imported) sets matplotlib's defaults for
every figure of the course, the learner's own included: font sizes that stay readable when a figure
is shown at the width of the site's column (about 780 px) or of a phone (about 360 px), and, in a
notebook, PNGs rendered at twice their display size (``retina``), so they are sharp on high-density
screens and on the site. A figure made at the default size, 7.5 x 4.2 inches, is shown 750 px wide.
"""
from __future__ import annotations

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
# Font sizes in points. At 100 px per inch a 12 pt label is 16.7 px on a desktop; text drawn
# smaller than SMALLEST_FONT is hard to read once a phone shrinks the figure to half its width.
SMALLEST_FONT = 9
RC_PARAMS = {
    "figure.figsize": (7.5, 4.2),
    "figure.dpi": DISPLAY_DPI,
    "savefig.dpi": DISPLAY_DPI * PIXEL_RATIO,
    "font.size": 12,
    "axes.titlesize": 13,
    "axes.labelsize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 11,
    "legend.title_fontsize": 11,
    "figure.titlesize": 14,
}


def use_course_style() -> None:
    """Apply the course's matplotlib defaults; in IPython, also show inline figures as 2x PNGs.

    Safe to call more than once. Outside IPython (scripts, tests) only the defaults change.
    """
    import matplotlib as mpl

    mpl.rcParams.update(RC_PARAMS)
    try:
        from IPython import get_ipython
        if get_ipython() is None:
            return
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    # "retina": the PNG holds 2x the pixels and its metadata asks for the 1x size, which both
    # Jupyter and the site (myst-nb reads the width) honour.
    set_matplotlib_formats("retina")


__all__ = ["COLORS", "PADDING_HATCH", "DISPLAY_DPI", "PIXEL_RATIO", "SMALLEST_FONT", "RC_PARAMS",
           "use_course_style"]
