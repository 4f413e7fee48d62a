"""Chapter 7's radix-tree figure: one panel per trace, one line per design, the data as given, readable
on a phone (the close_figures fixture measures every figure a test draws)."""
import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from pagedlib.plots import plot_prefix_hit_rates  # noqa: E402
from pagedlib.plots.style import FIGURE_WIDTH  # noqa: E402

pytestmark = pytest.mark.usefixtures("close_figures")   # tests/conftest.py


def test_one_panel_per_trace_one_line_per_design_in_percent():
    pools = [512, 1024, 2048]
    rates = {"chat": {"hash chain": [0.1, 0.2, 0.3], "tree": [0.2, 0.3, 0.4]},
             "few-shot": {"hash chain": [0.5, 0.5, 0.5], "tree": [0.6, 0.6, 0.6]}}
    fig = plot_prefix_hit_rates(rates, pools)
    assert [ax.get_title() for ax in fig.axes] == ["chat", "few-shot"]
    top = fig.axes[0]
    assert [line.get_label() for line in top.lines] == ["hash chain", "tree"]
    assert list(top.lines[1].get_ydata()) == pytest.approx([20, 30, 40])
    assert list(top.lines[0].get_xdata()) == pools
    assert len(fig.legends) == 1 and "%" in top.get_ylabel()      # one legend, under the panels
    assert "token slots" in fig.axes[-1].get_xlabel()
    assert fig.get_figwidth() <= FIGURE_WIDTH
