"""pagedlib.plots.cluster: chapter 13's figures."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pagedlib.plots import itl_timeline  # noqa: E402
from pagedlib.sim.clocked import ClockedRun  # noqa: E402


def test_itl_timeline_plots_every_gap_at_its_time_with_the_p99():
    slow = ClockedRun([[1, 2, 3], [4, 5]], [0.0, 0.0], [[0.1, 0.2, 0.7], [0.3, 0.4]])
    fast = ClockedRun([[1, 2, 3]], [0.0], [[0.1, 0.15, 0.2]])
    fig = itl_timeline({"one engine": slow, "prefill + decode": fast})
    top, bottom = fig.axes
    xy = top.collections[0].get_offsets()
    assert np.allclose(sorted(map(tuple, xy)), sorted([(0.2, 100), (0.7, 500), (0.4, 100)]))
    assert top.get_yscale() == "log" and top.get_legend_handles_labels()[1][0] == "one engine"
    p99 = top.lines[0].get_ydata()[0]
    assert p99 == pytest.approx(np.percentile([100, 500, 100], 99))
    assert bottom.get_xlabel() == "modelled time (s)"
    with pytest.raises(ValueError, match="at least one"):
        itl_timeline({})


class _Run:
    def __init__(self, ttft, hit):
        self.ttft, self.hit_rate = ttft, hit

    def ttft_p(self, q):
        return self.ttft


@pytest.mark.usefixtures("close_figures")   # readable at 360 px (tests/conftest.py)
def test_router_figure_puts_its_legend_below_the_panels():
    from pagedlib.plots import router_figure
    from pagedlib.sim.router import POLICIES
    rates = [1, 2, 4]
    results = {p: [_Run(0.1 * (i + 1) * r, 0.2 * i) for r in rates] for i, p in enumerate(POLICIES)}
    fig = router_figure(rates, results)
    top, bottom = fig.axes
    assert top.get_legend() is None and len(fig.legends) == 1
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert legend.y1 <= bottom.get_tightbbox().y0 + 1        # below the lower panel, on no line
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["round robin", "least loaded",
                                                                 "prefix-aware"]


@pytest.mark.usefixtures("close_figures")
def test_router_figure_legend_is_legible_on_a_phone_and_no_wider_than_the_panels():
    """The legend at the course's legend size (12 pt: 11.2 CSS px on a 360 px phone; it was 10 pt,
    9.3 px), its three entries in one row that does not widen the figure."""
    from pagedlib.plots import router_figure
    from pagedlib.plots.style import FIGURE_WIDTH, RC_PARAMS, phone_text_px
    from pagedlib.sim.router import POLICIES
    rates = [0.5, 1, 2, 3]
    results = {p: [_Run(0.4 * (i + 1) * r, 0.3 * (i + 1)) for r in rates]
               for i, p in enumerate(POLICIES)}
    fig = router_figure(rates, results)
    texts = fig.legends[0].get_texts()
    assert {t.get_fontsize() for t in texts} == {RC_PARAMS["legend.fontsize"]}
    assert phone_text_px(fig)[0] >= 10, phone_text_px(fig)
    fig.canvas.draw()
    assert fig.get_tightbbox().width <= FIGURE_WIDTH
    rows = {round(t.get_window_extent().y0) for t in texts}
    assert len(rows) == 1
