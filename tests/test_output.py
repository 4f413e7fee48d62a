"""pagedlib.output: HTML in a notebook, text elsewhere; show_table's HTML table and aligned text."""
import pytest

from pagedlib.output import TableView, display_or_print, show_table

ROWS = [["gpt2", 12, 36], ["llama-2-7b", 32, 512], ["opt-13b", 40, 800.5]]
HEADERS = ["model", "layers", "KiB/token"]


def test_html_is_a_table_with_a_header_row_numbers_right_aligned_and_escaped():
    page = TableView(ROWS + [["<b>", 1, 2]], HEADERS, caption="What <each> column is.")._repr_html_()
    assert page.startswith('<div class="pagedlib-table"><table>') and page.count("<tr>") == 5
    assert "<th>model</th><th class=num>layers</th>" in page
    assert "<td>llama-2-7b</td><td class=num>32</td><td class=num>512</td>" in page
    assert "<td>&lt;b&gt;</td>" in page and "<caption>What &lt;each&gt; column is.</caption>" in page


def test_text_is_aligned_columns_for_a_terminal():
    text = TableView(ROWS, HEADERS, floatfmt=".1f").text().splitlines()
    assert text == ["model       layers  KiB/token",
                    "gpt2            12         36",
                    "llama-2-7b      32        512",
                    "opt-13b         40      800.5"]
    assert TableView([["r1", "1,900", "92.8%"]], ["request", "length", "used"]).text() == \
        "request  length   used\nr1        1,900  92.8%"


def test_a_row_of_the_wrong_length_says_which():
    with pytest.raises(ValueError, match="row 1 has 2 cells but there are 3 headers"):
        TableView([["a", 1, 2], ["b", 1]], HEADERS)


def test_show_table_prints_text_outside_a_notebook(capsys):
    assert show_table(ROWS[:1], HEADERS) is None
    assert capsys.readouterr().out == "model  layers  KiB/token\ngpt2       12         36\n"


def test_placeholders_and_approximate_values_stay_in_a_numeric_column():
    view = TableView([["none", "~1.0", "n/a"], ["16", "2.5", "n/a"]], ["budget", "paper", "x"])
    assert view.numeric == [True, True, False]
    assert view.text().splitlines() == ["budget  paper  x", "  none   ~1.0  n/a", "    16    2.5  n/a"]


def test_display_or_print_prints_the_text_twin_outside_a_notebook(capsys, monkeypatch):
    import IPython
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)   # another test may have left a shell
    view = TableView(ROWS[:1], HEADERS)
    assert display_or_print(view, "the text") is False and capsys.readouterr().out == "the text\n"
    assert display_or_print(view) is False and capsys.readouterr().out == ""     # a figure: nothing


def test_display_or_print_displays_html_with_its_text_twin_in_a_notebook(monkeypatch):
    """In IPython the HTML goes out with the given text as text/plain (what nbval compares)."""
    import IPython
    import IPython.display
    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    view = TableView(ROWS[:1], HEADERS)
    assert display_or_print(view, view.text()) is True
    assert shown == [({"text/html": view._repr_html_(), "text/plain": view.text()}, True)]
    assert display_or_print(view) is True and shown[-1] == (view, False)


def test_columns_print_a_table_a_row_at_a_time():
    """A benchmark's rows, printed as measured: the header and each line align, numbers to the right
    and text to the left, each value through its column's template; a key a row lacks prints empty, a NaN n/a."""
    from pagedlib.output import Column, Columns
    table = Columns(Column("name", "config", 8, left=True), Column("us", "us", 7, "{:.1f}"),
                    Column("vs", "vs", 6, "{:.2f}x"), Column("error", "", 0, left=True))
    assert table.header() == "config        us     vs"
    assert table.line(dict(name="chosen", us=12.345, vs=1.5)) == "chosen      12.3  1.50x"
    assert table.line(dict(name="tile 128", us=float("nan"), vs=float("nan"), error="no room")) == (
        "tile 128     n/a    n/a no room")
    assert len({len(table.header()), len(table.line(dict(name="a", us=1.0, vs=1.0)))}) == 1
