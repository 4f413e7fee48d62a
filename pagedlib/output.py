"""How results are shown: HTML in a notebook and on the site, text elsewhere (every chapter).

:func:`display_or_print` is the one place that asks whether a notebook is running: it displays an
object's HTML there, and prints its text in a script, a terminal or a test. Claims, exercises,
figures and tables all show themselves through it.

A printed table of aligned columns breaks apart when a phone wraps its lines. ``show_table`` shows
the same rows as an HTML ``<table>`` (which the site styles with its theme and lets scroll inside its
own box) and keeps an aligned plain-text version for terminals, scripts and nbval::

    from pagedlib.output import show_table      # also pagedlib.plots.show_table
    show_table([["gpt2", 12, 36], ["llama-2-7b", 32, 512]], ["model", "layers", "KiB/token"])

Cells are shown as given: a string as is, an int with thousands separators, a float with
``floatfmt`` (or pass strings you formatted yourself). Numbers are right-aligned, text left-aligned.
"""
from __future__ import annotations

import html
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Column", "Columns", "TableView", "display_or_print", "format_value", "in_notebook",
           "show_table"]

NOT_MEASURED = "n/a"


def format_value(fmt: str, value) -> str:
    """``value`` through the ``str.format`` template ``fmt``; a NaN (a value not measured) as "n/a",
    never as "nan" or "nanx"."""
    if isinstance(value, numbers.Real) and value != value:
        return NOT_MEASURED
    return fmt.format(value)


def in_notebook() -> bool:
    """True in IPython (Jupyter, Colab), where rich (HTML) output is shown."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def display_or_print(obj, text: str | None = None) -> bool:
    """Show ``obj`` in a notebook (its ``_repr_html_``, with ``text`` as the plain-text twin when
    given); elsewhere print ``text`` (nothing when it is None). Returns True when it was displayed."""
    if in_notebook():
        from IPython.display import display
        if text is None:
            display(obj)
        else:
            display({"text/html": obj._repr_html_(), "text/plain": text}, raw=True)
        return True
    if text is not None:
        print(text)
    return False


def _cell(value, floatfmt: str) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{value:,}"
    if isinstance(value, numbers.Real):
        return format(value, floatfmt)
    return str(value)


NOT_A_NUMBER = {"none", "-", "n/a", "nan", "inf"}   # placeholders in a column of numbers


def _numeric(text: str) -> bool:
    """A cell that reads as a number (12, 1,024, -2.4%, ~1.0, 0.036 s, 2.1x): right-aligned."""
    head = text.strip().split(" ")[0].rstrip("%x").lstrip("~$")
    if head.lower() in NOT_A_NUMBER:
        return True
    return bool(head) and head.lstrip("+-").replace(",", "").replace(".", "", 1).isdigit()


class TableView:
    """Rows under headers, displayed as an HTML table and as aligned text (``repr``)."""

    def __init__(self, rows: Sequence[Sequence], headers: Sequence[str], *, caption: str = "",
                 floatfmt: str = ".2f"):
        self.headers = [str(h) for h in headers]
        self.rows = [[_cell(v, floatfmt) for v in row] for row in rows]
        for i, row in enumerate(self.rows):
            if len(row) != len(self.headers):
                raise ValueError(f"row {i} has {len(row)} cells but there are {len(self.headers)} "
                                 f"headers ({self.headers}); give every row one cell per header")
        self.caption = " ".join(caption.split())
        columns = list(zip(*self.rows)) if self.rows else [()] * len(self.headers)
        # a column is numeric when every non-empty cell in it is a number or a placeholder ("none")
        self.numeric = [any(_numeric(c) and c.strip().lower() not in NOT_A_NUMBER for c in col)
                        and all(_numeric(c) for c in col if c.strip()) for col in columns]

    def _repr_html_(self) -> str:
        def row_html(cells, tag):
            return "<tr>" + "".join(
                f'<{tag}{" class=num" if num else ""}>{html.escape(c)}</{tag}>'
                for c, num in zip(cells, self.numeric)) + "</tr>"
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        body = "".join(row_html(r, "td") for r in self.rows)
        return (f'<div class="pagedlib-table"><table>{caption}<thead>{row_html(self.headers, "th")}'
                f"</thead><tbody>{body}</tbody></table></div>")

    def text(self) -> str:
        """The table as aligned text: one line per row, columns two spaces apart."""
        widths = [max([len(h), *(len(r[j]) for r in self.rows)]) for j, h in enumerate(self.headers)]

        def line(cells):
            return "  ".join(c.rjust(w) if num else c.ljust(w)
                             for c, w, num in zip(cells, widths, self.numeric)).rstrip()
        lines = [line(self.headers), *(line(r) for r in self.rows)]
        return "\n".join(lines + ([self.caption] if self.caption else []))

    def __repr__(self) -> str:
        return self.text()


def show_table(rows: Sequence[Sequence], headers: Sequence[str], *, caption: str = "",
               floatfmt: str = ".2f") -> None:
    """Display ``rows`` under ``headers`` as a table (HTML in a notebook, aligned text in a script).

    ``caption`` is a sentence shown under the table (what its columns mean). Returns None, so a
    last-line call is not shown twice.
    """
    view = TableView(rows, headers, caption=caption, floatfmt=floatfmt)
    display_or_print(view, view.text())


@dataclass(frozen=True)
class Column:
    """One column of :class:`Columns`: the row's ``key``, its ``header``, its ``width`` and ``fmt``, a
    ``str.format`` template of one value (``"{:.1f}"``, ``"{:.0%}"``, ``"{:.2f}x"``); text columns
    (``left=True``) are left-aligned, numbers right-aligned, as in :meth:`TableView.text`."""
    key: str
    header: str
    width: int
    fmt: str = "{}"
    left: bool = False

    def cell(self, text: str) -> str:
        return text.ljust(self.width) if self.left else text.rjust(self.width)


class Columns:
    """A text table printed a row at a time, as a benchmark measures its rows (a :class:`TableView`
    needs them all first): ``print(table.header())``, then ``print(table.line(row))`` for each row
    (a dict of the columns' keys; a missing key prints empty, a NaN "n/a")."""

    def __init__(self, *columns: Column):
        self.columns = columns

    def header(self) -> str:
        return " ".join(c.cell(c.header) for c in self.columns).rstrip()

    def line(self, row: Mapping) -> str:
        return " ".join(c.cell(format_value(c.fmt, row[c.key]) if c.key in row else "")
                        for c in self.columns).rstrip()
