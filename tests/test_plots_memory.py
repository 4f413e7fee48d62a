"""Memory figures: each returns a Figure with a title, labelled axes and a legend, and draws the data."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest

import pagedlib  # noqa: E402
from pagedlib import plots  # noqa: E402
from pagedlib.memory.allocators import FirstFitAllocator, fragmenting_events  # noqa: E402
from pagedlib.memory.capacity import GPUS  # noqa: E402
from pagedlib.plots.style import COLORS  # noqa: E402
from figures import legends_over_axes  # noqa: E402

SEED = [512, 37, 1900, 128, 4]


pytestmark = pytest.mark.usefixtures("close_figures")   # tests/conftest.py


def labelled(fig):
    ax = fig.axes[0]
    title = ax.get_title() or (fig._suptitle.get_text() if fig._suptitle else "")
    has_legend = bool(fig.legends) or any(a.get_legend() for a in fig.axes)
    return title and ax.get_xlabel() and has_legend


def bar_widths(ax, colour):
    rgba = matplotlib.colors.to_rgba(colour)
    return [p.get_width() for p in ax.patches if p.get_facecolor()[:3] == rgba[:3]]


def test_plot_rows_draws_kv_tail_and_padding():
    fig = plots.plot_rows(pagedlib.paged_plan(SEED, 16), pool_slots=40_960)
    ax = fig.axes[0]
    assert labelled(fig) and "78 requests" in ax.get_title().replace("\n", " ") and "1.0%" in ax.get_title().replace("\n", " ")
    assert sorted(bar_widths(ax, COLORS["kv"])) == sorted(SEED)
    assert sorted(bar_widths(ax, COLORS["tail"])) == [4, 11, 12]
    fig = plots.plot_rows(pagedlib.reserve_max_plan(SEED, 2048))
    ax = fig.axes[0]
    padding = [p for p in ax.patches if p.get_hatch()]
    assert sorted(p.get_width() for p in padding) == sorted(2048 - n for n in SEED)
    assert "74.8%" in ax.get_title().replace("\n", " ")


def test_plot_rows_into_existing_axes():
    fig, ax = plt.subplots()
    assert plots.plot_rows(pagedlib.paged_plan(SEED, 64), ax=ax) is fig and fig.legends
    fig, ax = plt.subplots()                       # the landing picture writes its own legend
    plots.plot_rows(pagedlib.paged_plan(SEED, 64), ax=ax, legend=False)
    assert not fig.legends and ax.get_legend() is None


def test_panels_of_rows_share_one_legend_under_them():
    fig, axes = plt.subplots(3, 1, figsize=(5.2, 8.4), layout="constrained")   # chapter 4b's figure
    for ax, page in zip(axes, [16, 64, 256]):
        plots.plot_rows(pagedlib.paged_plan(SEED, page), width=2048, pool_slots=40_960, ax=ax)
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "real K/V", "unused tail of the last page", "free (not allocated)"]
    assert legends_over_axes(fig) == []
    fig, ax = plt.subplots()                       # no layout of its own: given one for the legend
    plots.plot_rows(pagedlib.paged_plan(SEED, 16), ax=ax)
    assert legends_over_axes(fig) == []


def test_plot_pool_timeline_marks_the_refusal():
    a = FirstFitAllocator(4096)
    a.replay(fragmenting_events())
    fig = plots.plot_pool_timeline(a)
    ax = fig.axes[0]
    assert labelled(fig) and "1 refusal" in ax.get_title().replace("\n", " ")
    assert any("r7 refused" in t.get_text().replace("\n", " ") for t in ax.texts)
    assert len(ax.get_yticks()) == len(a.history)
    assert sum(bar_widths(ax, COLORS["external"])) == 2048      # the unusable holes at r7's arrival
    with pytest.raises(ValueError, match="replay"):
        plots.plot_pool_timeline(FirstFitAllocator(10))


def test_plot_waste_vs_block_size():
    fig = plots.plot_waste_vs_block_size(SEED, (1, 16, 256), max_len=2048, pool_slots=40_960)
    ax = fig.axes[0]
    assert labelled(fig) and "page size" in ax.get_xlabel()
    y = ax.lines[0].get_ydata()
    assert y[0] == 0 and round(y[1], 1) == 1.0 and y[2] > y[1]
    assert round(ax.lines[1].get_ydata()[0], 1) == 74.8
    assert [t.get_text() for t in ax.texts] == ["79", "78", "61"]


def test_plot_waste_vs_block_size_page_sizes_stay_readable():
    """Chapter 4b's twelve page sizes, 1 to 2048: the x labels do not run into each other."""
    sizes = [2 ** k for k in range(12)]
    fig = plots.plot_waste_vs_block_size(SEED, sizes, max_len=2048, pool_slots=40_960)
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    shown = sorted((t for t in ax.get_xticklabels() if t.get_text()),
                   key=lambda t: t.get_window_extent(renderer).x0)
    boxes = [t.get_window_extent(renderer) for t in shown]
    space = 0.5 * shown[0].get_fontsize() * fig.dpi / 72          # half an em between two labels
    gaps = [b.x0 - a.x1 for a, b in zip(boxes, boxes[1:])]
    assert min(gaps) >= space, list(zip([t.get_text() for t in shown[1:]], gaps))
    assert "16" in [t.get_text() for t in shown] and len(ax.get_xticks()) == 12   # every size ticked


def test_plot_block_tables_highlights_shared_blocks():
    bm = pagedlib.BlockManager(8, 4, enable_prefix_caching=True)
    bm.allocate("a", range(6))
    bm.fork("a", "b")
    bm.append("b")
    fig = plots.plot_block_tables(bm)
    ax = fig.axes[0]
    assert labelled(fig) and "3 of 8 blocks" in ax.get_title().replace("\n", " ")
    assert any(t.get_text() == "×2" for t in ax.texts)            # block 0 is shared
    arrows = [c for c in ax.texts if hasattr(c, "arrow_patch") and c.arrow_patch is not None]
    assert len(arrows) == 4                                         # 2 logical blocks per sequence


def test_plot_kv_memory():
    fig = plots.plot_kv_memory("opt-13b", batch_sizes=(1, 2), seq_lens=(2048,), gpus=("A100-40GB",))
    left = fig.axes[0]
    assert "800 KiB" in fig._suptitle.get_text().replace("\n", " ") and left.get_ylabel() and left.get_legend()
    gib = left.lines[0].get_ydata()
    assert gib[0] == pytest.approx(2048 * 819_200 / 2**30) and gib[1] == pytest.approx(2 * gib[0])
    assert any(line.get_ydata()[0] == GPUS["A100-40GB"].memory_gib for line in left.lines[1:])
    assert GPUS["A100-40GB"].memory_gib < 40                     # usable, not as sold
    plt.close(fig)
    with pytest.raises(KeyError, match="pick one of"):
        plots.plot_kv_memory("gpt-5")


def test_block_size_summary_numbers():
    from pagedlib.widgets import block_size_summary
    line = block_size_summary(SEED, 16, 40_960, max_len=2048)
    assert "waste  1.0%" in line and "163 entries (652 bytes)" in line
    assert "78 requests fit 40,960 slots (3.9x reserve-max's 20)" in line
    with pytest.raises(ValueError, match="lengths must hold at least one"):
        block_size_summary([], 16)


def _widget_text(out) -> str:
    return "".join(o.get("text", "") for o in out.outputs if o.get("output_type") == "stream")


def test_block_size_explorer_redraws_on_slider_change(capsys):
    from pagedlib.widgets import block_size_explorer
    box = block_size_explorer(SEED, 40_960)
    layout, slider, out = box.children
    assert "page size  16" in _widget_text(out)
    assert sum(o["output_type"] == "display_data" for o in out.outputs) == 1  # one figure
    slider.value = 256
    assert "page size 256" in _widget_text(out) and "page size  16" not in _widget_text(out)
    layout.value = "reserve max"
    assert "waste 74.8%" in _widget_text(out) and slider.disabled
    assert capsys.readouterr().out == ""  # everything went into the widget, nothing leaked to the cell
    with pytest.raises(ValueError, match="start"):
        block_size_explorer(SEED, start=3)
    with pytest.raises(ValueError, match="lengths must hold at least one"):
        block_size_explorer([])


def test_plot_tp_vs_dp_attention_draws_both_counts_per_gpu():
    counts = {"H200": (23, 152), "B300": (85, 648)}
    fig = plots.plot_tp_vs_dp_attention(counts, seq_len=32_768, num_gpus=8)
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_ylabel() and ax.get_legend()
    assert "32K" in ax.get_title() and [t.get_text() for t in ax.get_xticklabels()] == ["H200", "B300"]
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == [23, 85, 152, 648]
    assert sorted(p.get_height() for p in ax.patches if p.get_hatch()) == [23, 85]   # TP: hatched


def test_plot_snapshot_distribution_draws_every_sample_and_mark():
    fig = plots.plot_snapshot_distribution({"a": [0.1, 0.2, 0.2], "b": [0.5, 0.6]},
                                           marks={"five": 0.3}, xlabel="waste (%)", title="t", bins=5)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "waste (%)" and fig.legends and ax.get_title() == "t"
    assert legends_over_axes(fig) == []                                 # the legend covers no bar
    assert sum(p.get_height() for p in ax.patches) == 5                 # every snapshot counted once
    assert [line.get_xdata()[0] for line in ax.get_lines()] == [30.0]   # the mark, in percent


def _chapter_2_to_4b_figures() -> dict:
    """The library's figures in chapters 2, 3, 4 and 4b, drawn as the chapters draw them."""
    from pagedlib.plots import plot_block_table_arrows

    timeline = FirstFitAllocator(4096)
    timeline.replay(fragmenting_events())
    return {
        "rows, paged": plots.plot_rows(pagedlib.paged_plan(SEED, 16), pool_slots=40_960),
        "rows, reserve-max": plots.plot_rows(pagedlib.reserve_max_plan(SEED, 2048),
                                             pool_slots=40_960),
        "pool timeline": plots.plot_pool_timeline(timeline),
        "waste vs page size": plots.plot_waste_vs_block_size(SEED, max_len=2048,
                                                             pool_slots=40_960),
        "snapshots": plots.plot_snapshot_distribution(
            {"ShareGPT, 20 requests a snapshot": [0.7, 0.75, 0.8, 0.8, 0.9]},
            marks={"the five requests": 0.748}, xlabel="reserved slots holding no K/V (%)",
            title="Reserve-max waste: 1,000 ShareGPT snapshots"),
        "block tables": plot_block_table_arrows({"a": [3, 0, 5], "b": [1, 4]},
                                                {"a": 11, "b": 5}, num_blocks=6, block_size=4),
    }


def test_chapters_2_to_4b_figures_are_legible_on_a_phone():
    """Text of 12 pt or more (LEGIBLE_TEXT_PX when shown 360 px wide), none over another, legends
    below the plot."""
    from figures import phone_problems

    for name, fig in _chapter_2_to_4b_figures().items():
        assert phone_problems(fig) == [], name
        plt.close(fig)
