"""Figures of chapters 5-7: each draws what its data says, with a title, a legend and readable fonts."""
import matplotlib

matplotlib.use("Agg")
import pytest
from pagedlib.plots.style import FIGURE_WIDTH  # noqa: E402

import pagedlib  # noqa: E402
from pagedlib import plots  # noqa: E402
from pagedlib.plots.style import COLORS  # noqa: E402
from figures import legends_over_axes  # noqa: E402


pytestmark = pytest.mark.usefixtures("close_figures")   # tests/conftest.py


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def patches_of(fig, colour) -> list:
    rgb = matplotlib.colors.to_rgba(colour)[:3]
    return [p for ax in fig.axes for p in ax.patches if p.get_facecolor()[:3] == rgb and p.get_fill()]


def readable(fig) -> bool:
    """A legend, every label, legend entry and visible tick label at 10 pt or more, at most
    FIGURE_WIDTH wide (so readable on a phone: tests/figures.py measures it)."""
    fig.canvas.draw()
    sizes = [t.get_fontsize() for ax in fig.axes for t in ax.texts]
    sizes += [t.get_fontsize() for leg in fig.legends for t in leg.get_texts()]
    sizes += [t.get_fontsize() for ax in fig.axes
              for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_visible() and t.get_text()]
    sizes += [ax.xaxis.label.get_fontsize() for ax in fig.axes if ax.get_xlabel()]
    return bool(fig.legends) and min(sizes) >= 10 and fig.get_figwidth() <= FIGURE_WIDTH + 0.01


def overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of text labels whose drawn boxes overlap (each label once, in display pixels)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for ax in fig.axes for t in ax.texts
             if t.get_text().strip()]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if box_a.overlaps(box_b)]


def forked(n_children=3, tokens=10, block_size=4):
    bm = pagedlib.BlockManager(num_blocks=12, block_size=block_size)
    bm.allocate("s0", list(range(tokens)))
    for i in range(1, n_children + 1):
        bm.fork("s0", f"s{i}")
    return bm


def test_page_mapping_labels_every_used_block_with_its_owner():
    fig = plots.plot_page_mapping([[10, 9], [1, 6, 4], [11]], [6, 11, 3], 12, 4)
    labels = texts(fig)
    assert {"s0\np0", "s0\np1", "s1\np0", "s1\np1", "s1\np2", "s2\np0"} <= set(labels)
    assert "p1\n→9" in labels and "p2\n→4" in labels
    assert overlapping_texts(fig) == []          # two-digit block ids included
    assert len(patches_of(fig, COLORS["free"])) == 12 - 6
    assert fig.axes[0].get_title().replace("\n", " ") and readable(fig)


def test_page_mapping_refuses_a_block_outside_the_pool():
    with pytest.raises(ValueError, match=r"tables\[0\]\[1\] = 12"):
        plots.plot_page_mapping([[0, 12]], [5], 12, 4)
    with pytest.raises(ValueError, match="one entry per sequence"):
        plots.plot_page_mapping([[0]], [5, 3], 12, 4)


def test_shared_tables_draw_a_shared_block_once_across_its_rows():
    bm = forked()
    fig = plots.plot_shared_tables(bm, ["s0", "s1", "s2", "s3"])
    green = patches_of(fig, COLORS["shared"])
    assert len(green) == 3                              # blocks 0, 1, 2: one box each, 4 rows tall
    assert all(p.get_height() > 3 for p in green)
    assert sum(label.endswith("×4") for label in texts(fig)) == 3
    for seq in ("s1", "s2", "s3", "s0"):
        bm.append(seq)                                  # block 2 is copied three times
    fig = plots.plot_shared_tables(bm, ["s0", "s1", "s2", "s3"])
    assert len(patches_of(fig, COLORS["shared"])) == 2
    assert len(patches_of(fig, COLORS["kv"])) == 4      # s0's block 2 and the three copies
    assert "6 physical blocks" in fig.axes[0].get_title().replace("\n", " ") and readable(fig)


def test_shared_tables_refuse_no_sequences():
    with pytest.raises(ValueError, match="seq_ids is empty"):
        plots.plot_shared_tables(pagedlib.BlockManager(4, 4), [])


def beam_run(parents, prompt_len=6, block_size=4):
    bm = pagedlib.BlockManager(num_blocks=64, block_size=block_size)
    bm.allocate("p", list(range(prompt_len)))
    beams = ["p"]
    for t, step in enumerate(parents, 1):
        new = [f"{t}.{j}" for j in range(len(step))]
        for p, child in zip(step, new):
            bm.fork(beams[p], child)
        for old in beams:
            bm.free(old)
        for child in new:
            bm.append(child)
        beams = new
    return bm, beams


def test_beam_tree_colours_the_lines_of_the_final_beams_and_greys_the_dead():
    parents = [[0, 0], [0, 0], [1, 1]]   # step 2: beam 0 of step 2 dies; both finals descend from 1
    bm, beams = beam_run(parents)
    fig = plots.plot_beam_tree(parents, bm, beams, prompt_len=6)
    top = fig.axes[0]
    grey = matplotlib.colors.to_rgba(COLORS["external"])[:3]
    blue = matplotlib.colors.to_rgba(COLORS["kv"])[:3]
    edges = [ln for ln in top.lines if ln.get_linestyle() == "-"]   # not the dotted boundaries
    colours = [matplotlib.colors.to_rgba(ln.get_color())[:3] for ln in edges]
    assert len(edges) == 6 and colours.count(grey) == 2 and colours.count(blue) == 4
    assert len(fig.axes) == 2 and readable(fig)
    assert ["beam 0", "beam 1"] == [t for t in texts(fig) if t.startswith("beam ")]
    assert len(fig.legends) == 1 and not top.get_legend()            # one legend, under both panels
    assert [t.get_text() for t in fig.legends[0].get_texts()][:2] == [
        "on the line of a final beam", "dropped (its blocks are freed)"]
    assert legends_over_axes(fig) == []


def test_beam_tree_refuses_parents_that_would_cross():
    bm, beams = beam_run([[0, 0], [1, 0]])
    with pytest.raises(ValueError, match=r"parents\[1\] = \[1, 0\] must be sorted"):
        plots.plot_beam_tree([[0, 0], [1, 0]], bm, beams, prompt_len=6)
    with pytest.raises(ValueError, match="outside 0..0"):
        plots.plot_beam_tree([[1, 1]], bm, beams, prompt_len=6)


def test_hash_chains_mark_names_seen_before():
    system = [7, 7, 3, 9, 1, 4, 4, 2]
    prompts = {"A": system + [11], "B": system + [21, 22, 23, 24], "C": [0] + system}
    fig = plots.plot_hash_chains(prompts, 4)
    assert len(patches_of(fig, COLORS["shared"])) == 2       # B's first two blocks
    assert len(patches_of(fig, COLORS["kv"])) == 2 + 1 + 2   # A's 2, B's third, C's 2
    assert texts(fig).count("no name") == 2 and readable(fig)


def test_pool_snapshots_show_each_state():
    bm = pagedlib.BlockManager(num_blocks=4, block_size=2, enable_prefix_caching=True)
    bm.allocate("a", [1, 2, 3])
    used = plots.pool_states(bm)
    bm.free("a")
    freed = plots.pool_states(bm)
    assert used == ["in use", "in use", "empty", "empty"] and freed == ["cached", "empty", "empty", "empty"]
    fig = plots.plot_pool_snapshots([("a", used, ["a0", "a1", "", ""]), ("free", freed, ["a0", "a1", "", ""])])
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["a", "free"]
    assert "a1" in texts(fig) and texts(fig).count("a0") == 2 and readable(fig)
    with pytest.raises(ValueError, match="unknown state"):
        plots.plot_pool_snapshots([("x", ["busy"] * 4, [""] * 4)])


def test_beam_tree_edges_never_cross():
    parents = [[0, 0, 0], [0, 1, 1], [0, 0, 2], [1, 2, 2]]
    bm, beams = beam_run(parents)
    top = plots.plot_beam_tree(parents, bm, beams, prompt_len=6).axes[0]
    edges = [ln.get_xydata() for ln in top.lines if ln.get_linestyle() == "-"]
    by_step: dict[float, list] = {}
    for (_, y0), (x1, y1) in edges:
        by_step.setdefault(x1, []).append((y0, y1))
    assert len(by_step) == len(parents)
    for pairs in by_step.values():
        for a in pairs:
            for b in pairs:
                assert (a[0] - b[0]) * (a[1] - b[1]) >= 0   # same order at both ends: no crossing


def test_padded_vs_csr_shows_padding_and_offsets():
    fig = plots.plot_padded_vs_csr([[10, 9], [1, 6, 4], [11]], [6, 11, 3], 4)
    labels = texts(fig)
    assert labels.count("0") == 3 + 1                    # three padding entries, indptr's first 0
    assert {"2", "5", "6"} <= set(labels)                # the other offsets of indptr
    assert "last_page_len" in labels                    # the row's name, once
    numbers = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "last_page_len"]
    assert numbers == ["2", "3", "3"]
    assert overlapping_texts(fig) == []                  # a one-page sequence's label included
    assert "3 padding entries" in fig.axes[0].get_title().replace("\n", " ") and readable(fig)
    with pytest.raises(ValueError, match="without padding"):
        plots.plot_padded_vs_csr([[10, 9, 0]], [6], 4)


def test_padded_vs_csr_a_full_last_page_holds_block_size_tokens():
    fig = plots.plot_padded_vs_csr([[3, 5], [7]], [8, 1], 4)
    numbers = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "last_page_len"]
    assert numbers == ["4", "1"]


def _chapters_5_to_7_figures() -> dict:
    """The library figures of chapters 5, 6 and 7, drawn from the chapters' own data."""
    tables, lens = [[10, 9], [1, 6, 4], [11]], [6, 11, 3]
    samples = ["s0", "s1", "s2", "s3"]
    bm = forked()
    forked_fig = plots.plot_shared_tables(bm, samples, title="After fork: four samples, one copy "
                                          "of the prompt")
    for seq in ("s1", "s2", "s3", "s0"):
        bm.append(seq)
    parents = [[0, 0, 0, 0]] + ([[0, 0, 1, 2], [0, 1, 1, 3], [0, 0, 2, 3]] * 5)[:13]   # 14 steps
    beam_bm, beams = beam_run(parents, prompt_len=10)
    system = [7, 7, 3, 9, 1, 4, 4, 2]
    prompts = {"A": system + [11, 12, 13], "B": system + [21, 22, 23, 24, 25],
               "C": [0] + system + [11, 12, 13]}
    cache = pagedlib.BlockManager(num_blocks=16, block_size=4, enable_prefix_caching=True)
    for k, p in prompts.items():
        cache.allocate(k, p)
    pool = pagedlib.BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=True)
    pool.allocate("A", list(range(13)))
    states = plots.pool_states(pool)
    designs = ["hash chain, blocks of 16", "radix tree, pages of 16", "radix tree, pages of 1"]
    return {
        "ch5 page mapping": plots.plot_page_mapping(tables, lens, 12, 4),
        "ch5 padded vs CSR": plots.plot_padded_vs_csr(tables, lens, 4),
        "ch6 forked tables": forked_fig,
        "ch6 copied tables": plots.plot_shared_tables(bm, samples, title="Each sample wrote a "
                                                      "token: block 2 was copied 3 times"),
        "ch6 beam tree": plots.plot_beam_tree(parents, beam_bm, beams, prompt_len=10),
        "ch7 hash chains": plots.plot_hash_chains(prompts, 4),
        "ch7 cached tables": plots.plot_shared_tables(cache, list(prompts),
                                                      title="B found the system prompt's blocks"),
        "ch7 pool snapshots": plots.plot_pool_snapshots(
            [("allocate A: 0 cached", states, ["A0", "A1", "A2", "A3"] + [""] * 4)] * 7),
        "ch7 hit rates": plots.plot_prefix_hit_rates(
            {"multi-turn chat": dict(zip(designs, ([.3, .5, .6, .7, .7], [.3, .5, .6, .7, .8],
                                                   [.4, .6, .7, .8, .8]))),
             "few-shot prompts": dict(zip(designs, ([.5] * 5, [.6] * 5, [.7] * 5)))},
            [512, 1024, 2048, 4096, 8192]),
    }


def test_chapters_5_to_7_figures_are_legible_on_a_phone():
    """Text of LEGIBLE_TEXT_PX or more when shown 360 px wide, none over another, legends below."""
    from figures import phone_problems

    for name, fig in _chapters_5_to_7_figures().items():
        assert phone_problems(fig) == [], name


def test_a_figure_without_a_table_of_its_own_has_no_one_table_legend_entry():
    """Chapter 6's Fig. 1 (right after a fork) has only shared blocks: its legend lists no blue
    "held by one table" box; once a block is copied, the entry is there."""
    bm = forked()
    labels = [t.get_text() for t in plots.plot_shared_tables(bm).legends[0].get_texts()]
    assert "block held by one table" not in labels and "shared block (×ref count)" in labels
    bm.append("s1")
    labels = [t.get_text() for t in plots.plot_shared_tables(bm).legends[0].get_texts()]
    assert "block held by one table" in labels
