"""Tests for pagedlib.sim: workloads, the four policies on hand-made workloads (exact answers),
invariants on random ones, and the comparison with the PagedAttention paper's Figures 2 and 13."""
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pagedlib
from pagedlib.sim import FIGURE2, FIGURE13, KV_SLOTS, POLICIES, Workload, reservation_size, simulate

# --- workloads ------------------------------------------------------------------------------------


def test_sim_is_reachable_from_pagedlib():
    assert pagedlib.sim.Workload is Workload
    assert {"Workload", "simulate", "latency", "compare_with_paper"} <= set(dir(pagedlib.sim))


def test_sim_imports_without_numpy_until_a_numpy_module_is_read():
    """The site's in-browser Python has no numpy: chapter 3's checkers need only the Orca policies."""
    code = ("import sys; sys.modules['numpy'] = None\n"
            "from pagedlib.sim import POLICIES, next_pow2, reservation_size\n"
            "print(reservation_size('pow2', 100, 300, 2048), next_pow2(612), POLICIES[-1])\n"
            "try:\n    from pagedlib.sim import Workload\n"
            "except ModuleNotFoundError as e:\n    print(e.name)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert run.stdout.split() == ["612", "1024", "paged", "numpy"], run.stderr


def test_workload_is_reproducible_and_seeded():
    a, b, c = Workload.sharegpt(500, seed=3), Workload.sharegpt(500, seed=3), Workload.sharegpt(500, seed=4)
    assert np.array_equal(a.prompt_lens, b.prompt_lens) and np.array_equal(a.output_lens, b.output_lens)
    assert not np.array_equal(a.prompt_lens, c.prompt_lens)
    assert len(a) == 500 and a.prompt_lens.dtype == np.int64


@pytest.mark.parametrize("dataset, mean_in, mean_out", [("sharegpt", 161.31, 337.99),
                                                       ("alpaca", 19.31, 58.45)])
def test_workload_lengths_follow_the_paper(dataset, mean_in, mean_out):
    w = Workload.from_dataset(dataset, 50_000, seed=0)
    assert w.prompt_lens.min() >= 1 and w.output_lens.min() >= 1
    assert w.total_lens.max() <= 2048                  # the paper's filter
    assert w.prompt_lens.mean() == pytest.approx(mean_in, rel=0.02)
    assert w.output_lens.mean() == pytest.approx(mean_out, rel=0.02)


def test_workload_respects_a_smaller_max_len():
    w = Workload.sharegpt(2000, seed=0, max_len=512)
    assert w.total_lens.max() <= 512


def test_workload_rejects_a_max_len_no_request_fits_instead_of_looping():
    # Alpaca's shortest prompt is 6 tokens: with max_len 6 the redraws could never succeed
    with pytest.raises(ValueError, match="max_len must be at least 7 tokens"):
        Workload.alpaca(3, max_len=6)
    w = Workload.alpaca(3, max_len=7)
    assert w.prompt_lens.tolist() == [6, 6, 6] and w.output_lens.tolist() == [1, 1, 1]


def test_arrivals():
    w = Workload([1] * 4000, [1] * 4000)
    assert not w.arrival_times(None).any()
    t = w.arrival_times(2.0, seed=1)
    assert np.all(np.diff(t) > 0) and np.mean(np.diff(t)) == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError, match="request_rate must be > 0"):
        w.arrival_times(0)


def test_workload_rejects_bad_lengths():
    with pytest.raises(ValueError, match="same length"):
        Workload([1, 2], [3])
    with pytest.raises(ValueError, match=">= 1 token"):
        Workload([0, 2], [3, 3])
    with pytest.raises(ValueError, match="dataset must be one of"):
        Workload.from_dataset("wikipedia", 3)


# --- policies by hand -----------------------------------------------------------------------------


def test_reservation_sizes():
    assert reservation_size("max", 100, 100, 2048) == 2048
    assert reservation_size("pow2", 100, 100, 2048) == 100 + 128
    assert reservation_size("pow2", 100, 128, 2048) == 100 + 128
    assert reservation_size("pow2", 2000, 40, 2048) == 2048      # 2000 + 64 capped at max_len
    assert reservation_size("oracle", 100, 100, 2048) == 200
    with pytest.raises(ValueError, match="policy must be one of"):
        reservation_size("min", 1, 1, 2048)


def test_max_by_hand():
    # 64 slots / max_len 16 = 4 reservations; 5 requests of 2 + 3 tokens; the 5th waits for a slot.
    r = simulate(Workload([2] * 5, [3] * 5), "max", kv_slots=64, max_len=16)
    assert r.finish_steps.tolist() == [2, 2, 2, 2, 5]
    assert r.steps == 4                                # steps 0-3: until the 5th is admitted
    # tokens per step 12, 16, 20, 3; slots per step 64; 4 steps
    assert r.token_frac == 51 / 256
    assert r.reservation_frac == (8 + 4 + 0 + 2) / 256
    assert r.internal_frac == (3 * 44 + 11) / 256
    assert r.rounding_frac == 0 and r.free_frac == 48 / 256
    assert r.avg_batch == 13 / 4


def test_oracle_counts_the_buddy_rounding_as_external():
    # reservation 3 + 2 = 5 slots, buddy block 8: two fit in 16 slots, 3 slots of rounding each
    r = simulate(Workload([3, 3, 3], [2, 2, 2]), "oracle", kv_slots=16, max_len=16)
    assert r.finish_steps.tolist() == [1, 1, 3]
    assert r.steps == 3 and r.internal_frac == 0      # steps 0-2: the 3rd is admitted at step 2
    assert r.token_frac == (8 + 10 + 4) / 48
    assert r.rounding_frac == (6 + 6 + 3) / 48 and r.free_frac == 8 / 48


def test_pow2_rounds_the_output_up():
    # 3 + pow2(3) = 7 reserved, 1 of it never used (internal), block 8 (1 slot of rounding)
    r = simulate(Workload([3, 3, 3], [3, 3, 3]), "pow2", kv_slots=16, max_len=16)
    assert r.steps == 4                                # 2, 2, 2 then 1 request running
    assert r.internal_frac == 7 / 64 and r.rounding_frac == 7 / 64


def test_paged_preempts_the_newest_and_recomputes_it():
    # 2 blocks of 4 slots. Step 0: A (4 + 3) and B (3 + 2) take a block each for their prompts. Step
    # 1: A's fifth token needs a second block, none is free: B, the newest, is preempted (nobody is
    # admitted in that step). A finishes at step 2, B is recomputed at step 3 (prompt + its token).
    r = simulate(Workload([4, 3], [3, 2]), "paged", kv_slots=8, block_size=4)
    assert r.preemptions == 1
    assert r.finish_steps.tolist() == [2, 3]
    assert r.generated.tolist() == [3, 2]
    assert r.steps == 1                                # from step 1 on, all have been admitted
    # step 0: 7 tokens of K/V in 8 slots; B's last slot is for its own next token
    assert r.token_frac == 7 / 8 and r.reservation_frac == 1 / 8 and r.free_frac == 0


def test_paged_blocks_follow_the_computed_tokens():
    # a sampled token takes a slot only when the next step computes it: with one token to generate,
    # two 4-token prompts fill the pool and finish without a block more; with two, the first one's
    # second token needs a block and the newest is preempted for it
    r = simulate(Workload([4, 4], [1, 1]), "paged", kv_slots=8, block_size=4)
    assert r.preemptions == 0 and r.finish_steps.tolist() == [0, 0]
    r = simulate(Workload([4, 4], [2, 2]), "paged", kv_slots=8, block_size=4)
    assert r.preemptions == 1 and r.finish_steps.tolist() == [1, 2]


def test_paged_tail_of_last_page_that_is_never_filled_is_internal():
    # 2 + 2 tokens, 3 of them with K/V (the last sampled one is never fed back), in one 8-slot block:
    # 5 slots are never used; 2 others wait, so steps are measured
    r = simulate(Workload([2] * 3, [2] * 3), "paged", kv_slots=8, block_size=8)
    assert r.finish_steps.tolist() == [1, 3, 5]
    # steps 0-4 measured (the 3rd request is admitted at step 4); K/V 2, 3, 2, 3, 2 of 8 slots
    assert r.steps == 5 and r.token_frac == 12 / 40
    assert r.reservation_frac == 3 / 40 and r.internal_frac == 25 / 40


def test_bad_arguments_say_what_to_fix():
    w = Workload([100], [100])
    with pytest.raises(ValueError, match="policy must be one of"):
        simulate(w, "lifo")
    with pytest.raises(ValueError, match="max_len=128"):
        simulate(w, "oracle", max_len=128)
    with pytest.raises(ValueError, match="raise kv_slots"):
        simulate(w, "paged", kv_slots=64)
    with pytest.raises(ValueError, match="only policy 'paged' runs"):
        simulate(w, "oracle", scheduling="prefill_first")
    with pytest.raises(ValueError, match="scheduling must be one of"):
        simulate(w, "paged", scheduling="lifo")
    with pytest.raises(ValueError, match="lower max_len"):
        simulate(w, "max", kv_slots=1000, max_len=2048)
    for name, value in (("kv_slots", 0), ("block_size", 0), ("max_len", -1), ("kv_slots", 1.5e4)):
        with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
            simulate(w, "oracle", **{name: value})


# --- invariants -----------------------------------------------------------------------------------


@settings(max_examples=40, derandomize=True, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=25),
       policy=st.sampled_from(POLICIES), kv_slots=st.integers(128, 400),
       block_size=st.sampled_from([1, 4, 16]), rate=st.sampled_from([None, 5.0, 500.0]))
def test_invariants(lengths, policy, kv_slots, block_size, rate):
    w = Workload(*zip(*lengths))
    r = simulate(w, policy, kv_slots=kv_slots, block_size=block_size, max_len=128,
                 request_rate=rate)
    shares = [r.token_frac, r.reservation_frac, r.internal_frac, r.rounding_frac, r.free_frac]
    assert all(s >= 0 for s in shares)
    assert sum(shares) == pytest.approx(1.0)
    assert r.peak_held <= kv_slots                     # nothing exceeds the pool
    assert np.array_equal(r.generated, w.output_lens)  # every request finishes its whole output
    assert (r.finish_steps >= 0).all() and r.finish_steps.max() == r.total_steps - 1
    if policy == "oracle":
        assert r.internal_frac == 0
    if policy != "paged":
        assert r.preemptions == 0


# --- the paper ------------------------------------------------------------------------------------


def test_max_holds_exactly_seven_requests_leaving_8_85_percent():
    r = simulate(Workload.sharegpt(300, seed=0), "max")
    assert KV_SLOTS == 15_728 and KV_SLOTS // 2048 == 7
    assert r.avg_batch == 7.0
    assert r.free_frac == pytest.approx(1392 / 15_728, abs=1e-12)   # 8.85%
    assert r.rounding_frac == 0


@pytest.fixture(scope="module")
def saturated():
    w = Workload.sharegpt(2000, seed=0)
    return {p: simulate(w, p) for p in POLICIES}


@pytest.mark.parametrize("policy", POLICIES)
def test_figure2_within_the_points_the_simulator_claims(saturated, policy):
    """pagedlib.sim's docstring: every share within 2.2 points of the paper's (seed 0)."""
    sim, paper = saturated[policy].shares(), FIGURE2[policy]
    for part in ("token", "reservation", "internal", "external"):
        assert 100 * sim[part] == pytest.approx(paper[part], abs=2.2), part


@pytest.fixture(scope="module")
def at_2_per_second():
    """The Figure 13 runs, timed: (results by policy, CPU seconds by policy)."""
    w = Workload.sharegpt(2000, seed=0)
    results, seconds = {}, {}
    for p in POLICIES:
        start = time.process_time()
        results[p] = simulate(w, p, request_rate=2.0)
        seconds[p] = time.process_time() - start
    return results, seconds


def test_figure13_batch_sizes_at_2_requests_per_second(at_2_per_second):
    batch = {p: r.avg_batch for p, r in at_2_per_second[0].items()}
    paper = FIGURE13[("sharegpt", 2.0)]
    assert batch["max"] == pytest.approx(7.0, abs=0.01)   # under 7 only while the first arrive
    assert batch["pow2"] == pytest.approx(paper["pow2"], rel=0.05)
    assert batch["oracle"] == pytest.approx(paper["oracle"], rel=0.05)
    # known gap: the simulated paged batch is 9% above the paper's 30.42 (see pagedlib/sim/__init__)
    assert batch["paged"] == pytest.approx(paper["paged"], rel=0.10)
    assert batch["max"] < batch["pow2"] < batch["oracle"] < batch["paged"] / 2   # as in the paper


def test_the_simulation_grows_linearly_with_the_requests(at_2_per_second):
    """8x the requests (over 8x the time: the same rate) costs about 8x the CPU time, far from the
    64x of a step that walked every request ever seen."""
    few = Workload.sharegpt(250, seed=0)
    for policy in POLICIES:
        start = time.process_time()
        simulate(few, policy, request_rate=2.0)
        small = max(time.process_time() - start, 1e-3)
        assert at_2_per_second[1][policy] < 20 * small, (policy, at_2_per_second[1][policy], small)


# --- figures --------------------------------------------------------------------------------------


def test_figure12_knees_close_together_write_no_text_over_text():
    """Chapter 11's knees (0.50, 0.56 and 0.81 req/s) are close: their numbers, written beside the
    dotted lines, fell over each other. Every text of the figure stands clear of every other."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text
    from pagedlib import plots

    rates = np.round(np.arange(0.25, 3.01, 0.25), 2)
    curves = {p: np.where(rates <= k, 0.04, 0.04 + (rates - k)) for p, k in
              (("max", 0.5), ("pow2", 0.56), ("oracle", 0.81), ("paged", 1.74))}
    knees = {"max": 0.50, "pow2": 0.56, "oracle": 0.81, "paged": 1.74}
    fig = plots.paper_figure12(rates, curves, knees)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    shown_ticks = ([t for t in ax.get_xticklabels() if x0 <= t.get_position()[0] <= x1]
                   + [t for t in ax.get_yticklabels() if y0 <= t.get_position()[1] <= y1])
    ticks = set(ax.get_xticklabels() + ax.get_yticklabels())      # those outside the view are not drawn
    texts = [t for t in fig.findobj(Text) if t not in ticks] + shown_ticks
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts
             if t.get_visible() and t.get_text().strip()]
    clashes = [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1:]
               if box.overlaps(other)]
    assert clashes == []
    labels = [t.get_text() for t in (fig.legends[0].get_texts() if fig.legends else [])]
    assert any("0.56" in label for label in labels), labels      # each knee's rate is still given
    plt.close(fig)


def test_figure12_is_legible_on_a_phone():
    """Chapter 11's Figure 6: its legend (the knees) and ticks are 12 pt or more, at least
    LEGIBLE_TEXT_PX when shown 360 px wide, below the plot and clear of every other text."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from figures import phone_problems
    from pagedlib import plots

    rates = np.round(np.arange(0.25, 3.01, 0.25), 2)
    knees = {"max": 0.50, "pow2": 0.56, "oracle": 0.81, "paged": 1.74}
    curves = {p: np.where(rates <= k, 0.04, 0.04 + (rates - k)) for p, k in knees.items()}
    fig = plots.paper_figure12(rates, curves, knees)
    assert phone_problems(fig) == []
    plt.close(fig)


def test_figures_have_titles_labels_and_legends():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pagedlib import plots

    from pagedlib.plots.style import PHONE_TEXT_PX, phone_text_px

    w = Workload.sharegpt(150, seed=0)
    rates = np.array([0.25, 0.5, 1.0])
    curves = {p: np.array([0.03, 0.05, 0.4]) for p in ("max", "pow2", "oracle", "paged")}
    figs = [plots.paper_figure2(workload=w), plots.paper_figure13(workload=w),
            plots.sim_waste_vs_block_size(block_sizes=(16, 64), workload=w),
            plots.paper_figure12(rates, curves, {p: 0.5 for p in curves})]
    for fig in figs:
        ax = fig.axes[0]
        assert ax.get_title() and ax.get_ylabel()
        assert fig.legends or ax.get_legend()
        assert phone_text_px(fig)[0] >= PHONE_TEXT_PX, (ax.get_title(), phone_text_px(fig))
        plt.close(fig)
    assert figs[2].axes[0].get_xlabel() == "page size (tokens per block)"
    runs = {b: simulate(w, "paged", block_size=b) for b in (16, 64)}   # runs already made
    fig = plots.sim_waste_vs_block_size(results=runs)
    bars = [p.get_height() for p in fig.axes[0].patches[:2]]           # token shares, one per size
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["16", "64"]
    assert bars == pytest.approx([100 * runs[16].token_frac, 100 * runs[64].token_frac])
    plt.close(fig)


def test_chapter_12_figure_labels_and_legends_are_legible_on_a_phone():
    """Fig. 2's "sim" / "paper" labels and both figures' legends at the course's legend size (12 pt:
    11.2 CSS px on a 360 px phone; 10 pt was 9.3 px), the in-bar shares a point less, and no legend
    wider than the figure (a wider figure is shown smaller on a phone)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pagedlib import plots
    from pagedlib.plots.style import FIGURE_WIDTH, RC_PARAMS, phone_text_px

    w = Workload.sharegpt(150, seed=0)
    size = RC_PARAMS["legend.fontsize"]
    for fig in (plots.paper_figure2(workload=w),
                plots.sim_waste_vs_block_size(block_sizes=(1, 16, 256), workload=w)):
        assert len(fig.legends) == 1
        assert {t.get_fontsize() for t in fig.legends[0].get_texts()} == {size}
        assert phone_text_px(fig)[0] >= 10, phone_text_px(fig)
        fig.canvas.draw()
        assert fig.get_tightbbox().width <= FIGURE_WIDTH
        labels = [t for t in fig.axes[0].texts if t.get_text() in ("sim", "paper")]
        assert all(t.get_fontsize() == size for t in labels)
        plt.close(fig)
    assert len(labels) == 0           # the last figure has none; the first had them:
    fig2 = plots.paper_figure2(workload=w)
    assert len([t for t in fig2.axes[0].texts if t.get_text() in ("sim", "paper")]) == 8
    plt.close(fig2)


def test_prefill_first_scheduling_more_than_doubles_the_alpaca_batch():
    w = Workload.alpaca(400, seed=0)
    mixed = simulate(w, "paged", request_rate=30.0).avg_batch
    v0 = simulate(w, "paged", request_rate=30.0, scheduling="prefill_first").avg_batch
    assert v0 > 1.5 * mixed
