"""Show a figure with alt text and a caption, the same in Jupyter, on Colab and on the course's site.

A notebook cell that ends with a Figure shows a bare PNG. ``show(fig, alt=..., caption=...)`` shows
it as an HTML ``<figure>``: a 2x PNG (sharp on high-density screens) drawn at its 1x size, alt text
that says what the figure shows (for screen readers, and in place of a picture that does not load),
and a caption under it::

    from pagedlib.plots import plot_rows, show
    show(plot_rows(plan), alt="Five rows, one per request: ...", caption="Reserve-max wastes ...")

For a cell whose figure stays a plain output, the site reads the same two things from the cell's
metadata instead (myst-nb): ``{"mystnb": {"image": {"alt": "..."}, "figure": {"caption": "..."}}}``.
"""
from __future__ import annotations

import base64
import html
import io

from ..output import display_or_print
from .style import PIXEL_RATIO

__all__ = ["FigureView", "SMALLEST_TEXT_KEY", "figure_html", "png_2x", "png_metadata", "show"]

# A course PNG says how tall its smallest text is, in image pixels (a tEXt chunk): the site's phone
# test (tests/test_site_phone.py) reads it to measure that text as the browser shows the figure.
SMALLEST_TEXT_KEY = "pagedlib:smallest-text-px"


def png_metadata(fig, dpi: float) -> dict:
    """The metadata of ``fig`` saved at ``dpi``: no "Software" line, and the height in image pixels
    of its smallest visible text (SMALLEST_TEXT_KEY)."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_window_extent(renderer).width > 0]
    meta = {"Software": None}
    if sizes:
        meta[SMALLEST_TEXT_KEY] = f"{min(sizes) * dpi / 72:.1f}"
    return meta


def png_2x(fig) -> tuple[bytes, int, int]:
    """``fig`` as a PNG with PIXEL_RATIO pixels per CSS pixel; returns (png, css_width, css_height)."""
    buffer = io.BytesIO()
    dpi = fig.dpi * PIXEL_RATIO
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", metadata=png_metadata(fig, dpi))
    png = buffer.getvalue()
    # the PNG's IHDR chunk holds its size in pixels: bytes 16-24, big-endian
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    return png, width // PIXEL_RATIO, height // PIXEL_RATIO


def _check_alt(alt: str) -> str:
    text = " ".join(str(alt).split())
    if len(text) < 10:
        raise ValueError(f"alt must say what the figure shows in a sentence (10+ characters); "
                         f"got {alt!r}")
    return text


def figure_html(fig, *, alt: str, caption: str = "", caption_html: str = "") -> str:
    """The HTML ``<figure>`` for ``fig``: an inline 2x PNG with ``alt``, and a caption if given.

    ``caption`` is plain text (escaped); ``caption_html`` is appended as is (for a link).
    """
    png, width, height = png_2x(fig)
    data = base64.b64encode(png).decode("ascii")
    parts = [f'<figure class="pagedlib-figure" style="margin:0.5em 0 1em">'
             f'<img src="data:image/png;base64,{data}" alt="{html.escape(_check_alt(alt))}" '
             f'width="{width}" height="{height}" style="max-width:100%;height:auto">']
    if caption or caption_html:
        text = html.escape(" ".join(caption.split()))
        parts.append(f"<figcaption>{text}{' ' if text and caption_html else ''}{caption_html}"
                     f"</figcaption>")
    parts.append("</figure>")
    return "".join(parts)


class FigureView:
    """A figure that displays as HTML (with alt text and caption) and as plain text elsewhere."""

    def __init__(self, fig, *, alt: str, caption: str = ""):
        self.alt = _check_alt(alt)
        self.caption = caption
        self.html = figure_html(fig, alt=alt, caption=caption)

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"[Figure: {self.alt}]" + (f" {self.caption}" if self.caption else "")


def show(fig, *, alt: str, caption: str = "") -> None:
    """Display ``fig`` with ``alt`` text and an optional ``caption``, then close it.

    In a notebook the figure is shown at once (a cell may call ``show`` more than once; it returns
    None, so a last-line call is not shown twice); in a script or a test nothing is displayed.
    """
    import matplotlib.pyplot as plt

    view = FigureView(fig, alt=alt, caption=caption)
    plt.close(fig)
    display_or_print(view)
