"""The engine figures of chapters 10 and 11: one step's batch, and the token budget's trade-off."""
import matplotlib
import pytest

matplotlib.use("Agg")

from pagedlib.plots.engine import budget_latencies, mixed_step  # noqa: E402
from engine_scenarios import chapter10_mixed_step  # noqa: E402


pytestmark = pytest.mark.usefixtures("close_figures")   # tests/conftest.py


def test_mixed_step_draws_every_token_and_every_slot():
    batch, manager = chapter10_mixed_step()
    fig = mixed_step(batch, 5, 4, names=["A", "B"],
                     full_tables=[manager.block_table("A"), manager.block_table("B")])
    top, bottom = fig.axes
    assert len(top.patches) == 6                       # one box per token of the batch
    assert len(bottom.patches) == 5 * 4                # one cell per slot of the cache
    texts = [t.get_text() for t in top.texts]
    assert "B\npos 4\nslot 0" in texts and "A\npos 6\nslot 14" in texts
    assert "B: prefill chunk of 5" in texts and "A: decode row" in texts
    solid = [p for p in bottom.patches if p.get_alpha() == 1.0 and p.get_facecolor()[:3] != (1, 1, 1)
             and p.get_facecolor() != matplotlib.colors.to_rgba("#F0F0F0")]
    assert len(solid) == 6                             # the slots this step writes


def test_mixed_step_names_grey_only_when_a_slot_is_free():
    batch, manager = chapter10_mixed_step()
    tables = [manager.block_table("A"), manager.block_table("B")]

    def legend(num_blocks):
        fig = mixed_step(batch, num_blocks, 4, names=["A", "B"], full_tables=tables)
        text = " ".join(t.get_text() for t in fig.axes[1].texts if "KV cache" in t.get_text())
        return " ".join(text.split())                  # the legend is wrapped
    assert "grey" not in legend(5)                     # every slot held: nothing grey
    assert "grey = free" in legend(6)                  # block 5 is free


def test_mixed_step_refuses_wrong_names_and_a_too_small_cache():
    batch, _ = chapter10_mixed_step()
    with pytest.raises(ValueError, match="names"):
        mixed_step(batch, 5, 4, names=["A"])
    with pytest.raises(ValueError, match="num_blocks"):
        mixed_step(batch, 3, 4)                        # A writes slot 14


def test_budget_latencies_one_bar_per_budget():
    rows = [{"budget": 16, "steps_to_first": 40.0, "max_step_tokens": 16},
            {"budget": None, "steps_to_first": 1.0, "max_step_tokens": 405}]
    fig = budget_latencies(rows)
    left, right = fig.axes
    assert [b.get_height() for b in right.patches] == [16, 405]
    assert [t.get_text() for t in left.get_xticklabels()] == ["16", "none"]
    with pytest.raises(ValueError, match="max_step_tokens"):
        budget_latencies([{"budget": 16, "steps_to_first": 2.0}])


def _policy_rows():
    return [{"admission": a, "tokens_per_s": t, "preemptions": p, "peak_blocks": b, "ttft_p99_s": 2.0,
             "resumed_hit_tokens": 16 * p,
             "itl_p99_s": 0.04, "ttft_p50_s": 1.0, "ttft_p90_s": 1.5, "itl_p50_s": 0.03, "itl_p90_s": 0.035}
            for a, t, p, b in (("on_demand", 136, 106, 40), ("guaranteed", 80, 0, 36), ("estimated", 106, 4, 40))]


def test_admission_policies_draws_six_panels_of_three_bars():
    from pagedlib.plots.engine import admission_policies
    fig = admission_policies(_policy_rows(), num_blocks=40)
    assert len(fig.axes) == 6 and all(len(ax.patches) == 3 for ax in fig.axes)
    assert [p.get_height() for p in fig.axes[1].patches] == [106, 0, 4]
    assert fig.axes[2].lines[0].get_ydata()[0] == 40
    with pytest.raises(ValueError, match="rows must each have 'tokens_per_s'"):
        admission_policies([{"admission": "x"}], 40)


def test_latency_percentiles_groups_p50_p90_p99():
    from pagedlib.plots.engine import latency_percentiles
    rows = [dict(r, scheduling=r["admission"]) for r in _policy_rows()[:2]]
    fig = latency_percentiles(rows)
    ttft, itl, throughput = fig.axes
    assert len(ttft.patches) == len(itl.patches) == 6 and len(throughput.patches) == 2
    assert sorted(p.get_width() for p in itl.patches)[-1] == pytest.approx(40.0)    # ms, bars level


def _peer(model, requests, ratio, workload):
    setup = {"workload": workload} if workload == "equal" else {}
    return {"model": model, "requests": requests, "ratio": ratio, "setup": setup}


def test_lead_by_requests_draws_a_line_per_model_and_workload():
    from pagedlib.plots.engine import lead_by_requests
    equal = [_peer(m, n, r, "equal") for m in ("gpt2", "llama") for n, r in ((1, 1.2), (8, 2.1), (64, 3.3))]
    mixes = [_peer("gpt2", 16, 1.6, "sharegpt"), _peer("gpt2", 32, 2.4, "sharegpt")]
    fig = lead_by_requests(equal, mixes)
    ax, = fig.axes
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1 and ln.get_linestyle() != "--"]
    assert len(lines) == 3                              # two models decoding together, one mix
    assert list(lines[0].get_xdata()) == [1, 8, 64] and list(lines[0].get_ydata()) == [1.2, 2.1, 3.3]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "8", "16", "32", "64"]
    assert any(ln.get_linestyle() == "--" and list(ln.get_ydata()) == [2.0, 2.0] for ln in ax.get_lines())


def test_caps_sweep_draws_a_line_per_policy_with_the_exact_cap_first():
    from pagedlib.plots.engine import caps_sweep
    rows = [{"cap": c, "admission": a, "tokens_per_s": t, "goodput": t / 100, "itl_p99_s": 0.1}
            for c in (None, 2048, 4096) for a, t in (("on_demand", 480), ("guaranteed", 400 if c is None
                                                                               else 2e5 / c))]
    fig = caps_sweep(rows)
    assert len(fig.axes) == 3 and all(len(ax.lines) == 2 for ax in fig.axes)
    assert list(fig.axes[0].lines[1].get_ydata()) == [400, 2e5 / 2048, 2e5 / 4096]
    assert [t.get_text() for t in fig.axes[2].get_xticklabels()] == ["= reply", "2,048", "4,096"]
    with pytest.raises(ValueError, match="rows must each have"):
        caps_sweep([{"admission": "x"}])


def _chapter_11_figures():
    """Each of chapter 11's engine figures, drawn from rows shaped like the chapter's."""
    from pagedlib.plots.engine import admission_policies, caps_sweep, latency_percentiles, step_tokens
    whole = [(4, 600)] + [(4, 0)] * 7
    budgeted = [(4, 124)] * 4 + [(4, 104)] + [(4, 0)] * 3
    orders = [dict(r, scheduling=s) for r, s in zip(
        [{"tokens_per_s": t, "ttft_p50_s": a, "ttft_p90_s": b, "ttft_p99_s": c,
          "itl_p50_s": 0.0337, "itl_p90_s": 0.0431, "itl_p99_s": 0.0433}
         for t, a, b, c in ((145, 0.231, 0.290, 0.398), (155, 0.046, 0.815, 0.966),
                            (155, 0.046, 0.815, 0.966))],
        ("vllm, no threshold", "vllm", "decode_first"))]
    caps = [{"cap": c, "admission": a, "tokens_per_s": t, "goodput": t / 600, "itl_p99_s": 0.2}
            for c in (None, 2048, 4096, 8192)
            for a, t in (("on_demand", 480), ("guaranteed", 4e5 / (c or 1000)), ("estimated", 400))]
    return {
        "step_tokens": step_tokens({"whole prompt in one step": whole,
                                    "budget of 128 tokens a step": budgeted}),
        "budget_latencies": budget_latencies(
            [{"budget": b, "steps_to_first": s, "max_step_tokens": m}
             for b, s, m in ((16, 40.3, 16), (64, 6.0, 64), (256, 1.7, 256), (None, 1.0, 405))]),
        "latency_percentiles": latency_percentiles(orders, title="One workload, budget 64: vLLM "
                                                   "v1's order and Sarathi-Serve's"),
        "admission_policies": admission_policies(
            [dict(r, resumed_hit_tokens=h, ttft_p99_s=s, itl_p99_s=i) for r, h, s, i in zip(
                _policy_rows(), (1984, 0, 192), (35.7, 69.0, 51.6), (0.3118, 0.0369, 0.0425))], 40),
        "caps_sweep": caps_sweep(caps),
    }


def test_chapter_11_figures_are_legible_on_a_phone():
    """Text of 12 pt or more, written level, none over another, legends below the panels."""
    from figures import phone_problems, rotated_texts

    for name, fig in _chapter_11_figures().items():
        assert phone_problems(fig) == [], name
        assert rotated_texts(fig) == [], name


def test_step_tokens_writes_the_decode_tokens_on_every_bar():
    """The 4 decode tokens of a step are too few to see beside a 600-token prompt: each bar says
    them, and one legend below serves both panels."""
    from pagedlib.plots import COLORS
    from pagedlib.plots.engine import step_tokens
    fig = step_tokens({"whole": [(4, 600), (4, 0)], "budget": [(4, 124), (4, 0)]})
    top, bottom = fig.axes
    blue = matplotlib.colors.to_rgba(COLORS["kv"])
    for ax, prompt in ((top, "600"), (bottom, "124")):
        decode = [t.get_text() for t in ax.texts if matplotlib.colors.to_rgba(t.get_color()) == blue]
        prefill = [t.get_text() for t in ax.texts if matplotlib.colors.to_rgba(t.get_color()) != blue]
        assert decode == ["4", "4"] and prefill == [prompt]
    assert len(fig.legends) == 1 and not top.get_legend() and not bottom.get_legend()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "decode tokens, one per running request", "prefill tokens of the new prompt"]
    with pytest.raises(ValueError, match="panels"):
        step_tokens({})
