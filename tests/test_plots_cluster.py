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
