"""Chapter 4's figures: the block table as arrows, and the animation of a paged pool."""
import matplotlib

matplotlib.use("Agg")
import pytest

from pagedlib.plots import PoolFrame, animate_pool, animation_html, plot_block_table_arrows  # noqa: E402


pytestmark = pytest.mark.usefixtures("close_figures")   # tests/conftest.py


def _arrows(ax):
    return [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]


def test_plot_block_table_arrows_draws_one_arrow_per_table_entry():
    tables = {"b": [1, 3], "c": [4, 5, 0, 2]}
    fig = plot_block_table_arrows(tables, {"b": 7, "c": 13}, num_blocks=6, block_size=4)
    ax = fig.axes[0]
    assert len(_arrows(ax)) == 6
    # each arrow ends at the physical page the table names: c's third logical page is page 0
    ends = sorted(round(a.xy[1], 3) for a in _arrows(ax))
    assert len(set(ends)) == 6                       # six different physical pages
    assert "6 of 6 pages" in ax.get_title().replace("\n", " ") and fig.legends


def test_plot_block_table_arrows_refuses_inconsistent_tables():
    with pytest.raises(ValueError, match="num_blocks"):
        plot_block_table_arrows({"a": [0, 9]}, {"a": 5}, num_blocks=6, block_size=4)
    with pytest.raises(ValueError, match=r"lengths\['a'\] = 9 tokens need 3 pages"):
        plot_block_table_arrows({"a": [0, 1]}, {"a": 9}, num_blocks=6, block_size=4)
    with pytest.raises(ValueError, match="tables is empty"):
        plot_block_table_arrows({}, {}, num_blocks=6, block_size=4)


def _frames():
    return [PoolFrame(0, ["a", None, None, None], [3, 0, 0, 0], ["a"], [], "a joins"),
            PoolFrame(1, ["a", "a", "b", None], [4, 1, 2, 0], ["a", "b"], [], "b joins"),
            PoolFrame(2, [None, None, "b", None], [0, 0, 3, 0], ["b"], [], "a finishes")]


def test_animate_pool_has_a_frame_per_step_and_draws_the_pages():
    anim = animate_pool(_frames(), block_size=4, columns=4)
    anim._func(1)
    ax = anim._fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("a") == 2 and labels.count("b") == 1
    assert any("free pages: 1" in t for t in labels) and "b joins" in labels
    html = animation_html(anim, alt="pages of a and b")
    assert 'alt="pages of a and b"' in html and html.count("data:image/svg+xml") == 3
    assert len(html) < 1_500_000


def test_animation_html_checks_alt_and_size():
    with pytest.raises(ValueError, match="alt"):
        animation_html(animate_pool(_frames(), block_size=4), alt="")
    with pytest.raises(ValueError, match="max_bytes"):
        animation_html(animate_pool(_frames(), block_size=4), alt="x", max_bytes=100)
    with pytest.raises(ValueError, match="one owner and one fill"):
        animate_pool([PoolFrame(0, ["a"], [1, 2])], block_size=4)
