"""Figures of the serving engine (chapters 10 and 11): one step's flat batch, what the scheduler
did step by step, and what a token budget does to latency.

``mixed_step`` draws a :class:`~pagedlib.attention.metadata.PagedBatch`; the others read ``LLM.metrics`` (its
per-step ``history``) or tables measured from it. Each returns a matplotlib Figure.
"""
from __future__ import annotations

import matplotlib.pyplot as plt

from .style import COLORS, FIGURE_WIDTH, fit, legend_below, wrap

__all__ = ["scheduler_timeline", "compare_timelines", "mixed_step", "step_tokens", "budget_latencies",
           "latency_percentiles", "admission_policies", "caps_sweep", "lead_by_requests"]


def _series(metrics: dict, key: str) -> list:
    return [h[key] for h in metrics["history"]]


def scheduler_timeline(metrics: dict, title: str = "What the scheduler did, step by step"):
    """Running and waiting requests (top) and KV blocks in use (bottom) at every engine step,
    with the steps that preempted marked."""
    steps = _series(metrics, "step")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 5.5), sharex=True)
    top.step(steps, _series(metrics, "running"), where="post", color=COLORS["kv"], label="running")
    top.step(steps, _series(metrics, "waiting"), where="post", color=COLORS["tail"], label="waiting")
    preempt = [(s, r) for s, r, p in zip(steps, _series(metrics, "running"), _series(metrics, "preempted")) if p]
    if preempt:
        top.scatter(*zip(*preempt), marker="v", color=COLORS["padding"], zorder=3, label="a preemption")
    top.set_ylabel("sequences")
    top.set_title(title)
    top.legend(loc="best", fontsize=10)

    used, logical = _series(metrics, "blocks_used"), _series(metrics, "logical_blocks")
    bottom.fill_between(steps, used, step="post", color=COLORS["kv"], alpha=0.6, label="blocks in use")
    if any(lg > u for lg, u in zip(logical, used)):
        bottom.step(steps, logical, where="post", color=COLORS["shared"], linestyle="--",
                    label="blocks without sharing")
    bottom.axhline(metrics["num_usable_blocks"], color=COLORS["external"], linestyle=":", label="cache size")
    bottom.set_ylabel(f"KV blocks ({metrics['block_size']} tokens each)")
    bottom.set_xlabel("engine step")
    bottom.legend(loc="best", fontsize=10)
    fit(fig).tight_layout()
    return fig


def compare_timelines(runs: dict[str, dict], title: str = "Requests running at once, same KV budget"):
    """Running requests per step for several engines (name -> metrics) on the same workload, and
    the KV blocks each had in use (its legend below the figure, clear of the lines)."""
    colours = [COLORS["kv"], COLORS["padding"], COLORS["shared"], COLORS["other"]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 6.2), layout="constrained")
    for (name, m), colour in zip(runs.items(), colours):
        top.step(_series(m, "step"), _series(m, "running"), where="post", color=colour, label=name)
        bottom.step(_series(m, "step"), _series(m, "blocks_used"), where="post", color=colour,
                    label=f"{name}: in use")
        if "reserved_blocks" in m["history"][0]:
            bottom.step(_series(m, "step"), _series(m, "reserved_blocks"), where="post", color=colour,
                        linestyle="--", label=f"{name}: reserved")
    first = next(iter(runs.values()))
    bottom.axhline(first["num_usable_blocks"], color=COLORS["external"], linestyle=":", label="cache size")
    top.set_title(title)
    top.set_ylabel("running sequences")
    top.set_xlabel("engine step")
    bottom.set_ylabel(f"KV blocks ({first['block_size']} tokens each)")
    bottom.set_xlabel("engine step")
    top.legend(loc="best", fontsize=10)
    legend_below(fig, bottom.get_legend_handles_labels()[0])
    return fit(fig)



def mixed_step(batch, num_blocks: int, block_size: int, names: list[str] | None = None,
               full_tables: list[list[int]] | None = None, title: str = "One step: a flat batch and the cache slots it writes"):
    """One forward pass's :class:`~pagedlib.attention.metadata.PagedBatch` (top: its tokens in batch order, each
    with its sequence, position and slot) and the paged cache of ``num_blocks`` blocks of
    ``block_size`` slots (bottom: the slots holding K/V from earlier steps pale, the slots this step
    writes solid, free slots (if any) grey, a line from each token to its slot). ``names`` labels the
    sequences (default ``0, 1, ...``); ``full_tables``, the block manager's tables of the batch's
    sequences (unpadded), also outlines the slots they hold for tokens not computed yet."""
    starts = batch.query_start_loc.tolist()
    seq_lens, tables = batch.seq_lens.tolist(), batch.block_tables.tolist()
    slots, positions = batch.slot_mapping.tolist(), batch.positions.tolist()
    num_seqs = len(seq_lens)
    names = [str(i) for i in range(num_seqs)] if names is None else list(names)
    if len(names) != num_seqs:
        raise ValueError(f"names must name each of the batch's {num_seqs} sequences; got {len(names)}")
    if full_tables is not None and len(full_tables) != num_seqs:
        raise ValueError(f"full_tables must hold one block table per sequence ({num_seqs}); "
                         f"got {len(full_tables)}")
    if max(slots, default=-1) >= num_blocks * block_size:
        raise ValueError(f"the batch writes slot {max(slots)}, beyond num_blocks * block_size = "
                         f"{num_blocks * block_size}: pass the cache's num_blocks and block_size")
    colours = [COLORS["kv"], COLORS["tail"], COLORS["shared"], COLORS["other"], COLORS["accent"]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 4.6), height_ratios=[1, 1.2])

    owner = [s for s in range(num_seqs) for _ in range(starts[s], starts[s + 1])]
    for t, (s, pos, slot) in enumerate(zip(owner, positions, slots)):
        top.add_patch(plt.Rectangle((t, 0), 0.92, 1, color=colours[s % len(colours)]))
        top.text(t + 0.46, 0.5, f"{names[s]}\npos {pos}\nslot {slot}", ha="center", va="center",
                 fontsize=10, color="white")
    for s in range(num_seqs):
        n = starts[s + 1] - starts[s]
        kind = "decode row" if n == 1 else f"prefill chunk of {n}"
        top.text((starts[s] + starts[s + 1]) / 2 - 0.04, 1.1, f"{names[s]}: {kind}", ha="center",
                 fontsize=10)
    top.set_xlim(-0.1, max(len(slots), 1))
    top.set_ylim(0, 1.4)
    top.set_axis_off()
    top.set_title(title, fontsize=12)

    gap = 0.7                                            # between two blocks, in slots

    def x_of(slot: int) -> float:
        return (slot // block_size) * (block_size + gap) + slot % block_size

    written = set(slots)
    held, owned = {}, {}                                 # slot -> its sequence: holding K/V, or reserved
    for s in range(num_seqs):
        for pos in range(seq_lens[s]):
            held[tables[s][pos // block_size] * block_size + pos % block_size] = s
        for block in (full_tables[s] if full_tables is not None else []):
            owned.update({slot: s for slot in range(block * block_size, (block + 1) * block_size)})
    free_slots = 0                                       # named in the legend only if some are drawn
    for slot in range(num_blocks * block_size):
        face, edge, alpha = COLORS["free"], "#666666", 1.0
        free_slots += slot not in held and slot not in owned
        if slot in held:
            face, alpha = colours[held[slot] % len(colours)], 1.0 if slot in written else 0.35
        elif slot in owned:
            face, edge = "white", colours[owned[slot] % len(colours)]
        bottom.add_patch(plt.Rectangle((x_of(slot), 0), 0.92, 1, facecolor=face, alpha=alpha,
                                       edgecolor=edge, linewidth=1.2 if slot in owned else 0.5))
    for b in range(num_blocks):
        bottom.text(x_of(b * block_size) + block_size / 2 - 0.04, -0.12, f"block {b}", ha="center",
                    va="top", fontsize=10)
    bottom.text(x_of(num_blocks * block_size - 1) / 2, -0.55,
                wrap("KV cache: pale = K/V from earlier steps, solid = written by this step"
                     + (", outlined = held, not written yet" if full_tables is not None else "")
                     + (", grey = free" if free_slots else ""), FIGURE_WIDTH, 10),
                ha="center", va="top", fontsize=10)
    bottom.set_xlim(-0.1, x_of(num_blocks * block_size - 1) + 1)
    bottom.set_ylim(-1.4, 1.05)
    bottom.set_axis_off()
    fit(fig).tight_layout(h_pad=2.5)
    to_fig = fig.transFigure.inverted()
    for t, slot in enumerate(slots):                     # each token's line to the slot it writes
        x0, y0 = to_fig.transform(top.transData.transform((t + 0.46, 0)))
        x1, y1 = to_fig.transform(bottom.transData.transform((x_of(slot) + 0.46, 1)))
        fig.add_artist(plt.Line2D([x0, x1], [y0, y1], color="#444444", linewidth=0.8,
                                  transform=fig.transFigure))
    return fit(fig)


_DARK_TAIL = "#A16F00"         # COLORS["tail"] at 70%: orange text that reads on white


def step_tokens(panels: dict[str, list[tuple[int, int]]],
                title: str = "A 600-token prompt arrives; 4 requests decode"):
    """The tokens of each step as stacked bars, decode tokens under prefill tokens, one panel per
    schedule (stacked, on one y scale). ``panels`` maps a panel's title to its steps'
    ``(decode tokens, prefill tokens)``. A few decode tokens are too thin to see beside a long
    prompt's, so every bar carries its numbers, stacked as the bar is: the decode tokens in the bar's
    blue, and over them the prefill tokens in a darker orange."""
    if not panels:
        raise ValueError("panels must map at least one panel title to its steps' (decode, prefill) tokens")
    fig, axes = plt.subplots(len(panels), 1, figsize=(FIGURE_WIDTH, 2.6 + 2.6 * len(panels)),
                             sharex=True, sharey=True, layout="constrained", squeeze=False)
    fig.suptitle(title, fontsize=13)
    top = max(d + p for rows in panels.values() for d, p in rows)
    for ax, (name, rows) in zip(axes[:, 0], panels.items()):
        steps = range(1, len(rows) + 1)
        dec = [d for d, _ in rows]
        pre = [p for _, p in rows]
        ax.bar(steps, dec, color=COLORS["kv"], label="decode tokens, one per running request")
        ax.bar(steps, pre, bottom=dec, color=COLORS["tail"], label="prefill tokens of the new prompt")
        for x, d, p in zip(steps, dec, pre):       # the numbers stacked as the bar is
            ax.text(x, d + p + 0.02 * top, f"{d}", ha="center", va="bottom", fontsize=12,
                    color=COLORS["kv"], fontweight="bold")
            if p:
                ax.text(x, d + p + 0.11 * top, f"{p}", ha="center", va="bottom", fontsize=12,
                        color=_DARK_TAIL, fontweight="bold")
        ax.set_title(name, fontsize=13)
        ax.set_ylabel("tokens in the step", fontsize=12)
        ax.set_ylim(0, 1.3 * top)
        ax.tick_params(labelsize=12)
    axes[-1, 0].set_xlabel("step", fontsize=12)
    axes[-1, 0].set_xticks(list(range(1, max(len(r) for r in panels.values()) + 1)))
    legend_below(fig, axes[0, 0].get_legend_handles_labels()[0], ncols=1, fontsize=12)
    return fit(fig)


def budget_latencies(rows: list[dict], title: str = "What a token budget trades"):
    """One bar per token budget in two panels: the mean steps from a long prompt's arrival to its
    first token (top), and the largest step, in tokens, that a decoding request waited through
    (bottom, about that step's cost). ``rows``: one dict per budget with ``budget`` (an int, or
    ``None`` for no budget), ``steps_to_first`` and ``max_step_tokens``."""
    for key in ("budget", "steps_to_first", "max_step_tokens"):
        missing = [i for i, row in enumerate(rows) if key not in row]
        if missing:
            raise ValueError(f"rows must each have {key!r}; rows {missing} do not")
    labels = ["none" if row["budget"] is None else str(row["budget"]) for row in rows]
    # stacked, not side by side: each panel keeps the figure's whole width on a phone
    fig, (left, right) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 6.0), layout="constrained")
    fig.suptitle(title, fontsize=13)
    for ax, key, colour, ylabel in (
            (left, "steps_to_first", COLORS["tail"], "steps to first token\n(long prompts, mean)"),
            (right, "max_step_tokens", COLORS["kv"], "largest step a decode waited\nthrough (tokens)")):
        values = [row[key] for row in rows]
        bars = ax.bar(labels, values, color=colour)
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize=12)
        ax.set_xlabel("token budget (max_num_batched_tokens)", fontsize=12)
        ax.set_ylabel(ylabel, fontsize=12)
        ax.margins(y=0.15)
        ax.tick_params(labelsize=12)
    return fit(fig)


def _check_rows(rows: list[dict], keys: tuple[str, ...]) -> None:
    for key in keys:
        missing = [i for i, row in enumerate(rows) if key not in row]
        if missing:
            raise ValueError(f"rows must each have {key!r}; rows {missing} do not")


def latency_percentiles(rows: list[dict], label: str = "scheduling",
                        title: str = "Latency percentiles and throughput"):
    """Three stacked panels of horizontal bars, one colour per row (a scheduling order, say): TTFT
    at p50 / p90 / p99 (top), inter-token latency at p50 / p90 / p99 (middle, ms), throughput
    (bottom), each bar with its value written level at its end. ``rows``: dicts with ``label``,
    ``ttft_p50_s`` ... ``ttft_p99_s``, ``itl_p50_s`` ... ``itl_p99_s`` and ``tokens_per_s``."""
    qs = ("p50", "p90", "p99")
    _check_rows(rows, (label, "tokens_per_s") + tuple(f"{m}_{q}_s" for m in ("ttft", "itl") for q in qs))
    colours = [COLORS["kv"], COLORS["tail"], COLORS["shared"], COLORS["other"]]
    # stacked, not side by side: each panel keeps the figure's whole width on a phone; horizontal
    # bars, so that every value is written level, beside its bar, in a font a phone can read
    height = 0.8 / len(rows)
    fig, axes = plt.subplots(3, 1, figsize=(FIGURE_WIDTH, 3.0 + 2.2 * len(rows)), layout="constrained",
                             height_ratios=[len(qs), len(qs), 1.6])
    fig.suptitle(title, fontsize=13)
    for ax, metric, scale, xlabel, fmt in ((axes[0], "ttft", 1.0, "time to first token (s)", "%.3g"),
                                           (axes[1], "itl", 1e3, "inter-token latency (ms)", "%.3g")):
        for k, row in enumerate(rows):
            ys = [i + (k - (len(rows) - 1) / 2) * height for i in range(len(qs))]
            bars = ax.barh(ys, [row[f"{metric}_{q}_s"] * scale for q in qs], height,
                           label=str(row[label]), color=colours[k % len(colours)])
            ax.bar_label(bars, fmt=fmt, fontsize=12, padding=3)
        ax.set_yticks(range(len(qs)), qs)
        ax.invert_yaxis()                              # p50 at the top
        ax.set_xlabel(xlabel, fontsize=12)
        ax.tick_params(labelsize=12)
        ax.margins(x=0.22)
    legend_below(fig, axes[0].get_legend_handles_labels()[0], ncols=1, fontsize=12)
    bars = axes[2].barh(range(len(rows)), [row["tokens_per_s"] for row in rows], 0.7,
                        color=[colours[k % len(colours)] for k in range(len(rows))])
    axes[2].bar_label(bars, fmt="%.0f", fontsize=12, padding=3)
    axes[2].set_yticks([])                             # the colours say which row: the legend below
    axes[2].invert_yaxis()
    axes[2].set_xlabel("throughput (tokens per second)", fontsize=12)
    axes[2].tick_params(labelsize=12)
    axes[2].margins(x=0.22)
    return fit(fig)


def admission_policies(rows: list[dict], num_blocks: int,
                       title: str = "Three admission policies, one engine, one workload"):
    """One bar per admission policy in six panels (three rows of two), each titled with what it
    measures: throughput, preemptions, peak blocks in use (the cache's size dashed), prompt tokens
    found cached when a preempted request resumed, p99 time to first token and p99 inter-token
    latency. A colour per policy, named in one legend below the panels. ``rows``: dicts with
    ``admission``, ``tokens_per_s``, ``preemptions``, ``peak_blocks``, ``resumed_hit_tokens``,
    ``ttft_p99_s``, ``itl_p99_s``."""
    keys = ("tokens_per_s", "preemptions", "peak_blocks", "resumed_hit_tokens", "ttft_p99_s", "itl_p99_s")
    _check_rows(rows, ("admission",) + keys)
    names = {"on_demand": "on demand (vLLM)", "guaranteed": "guaranteed (TensorRT-LLM)",
             "estimated": "estimated (SGLang)"}
    colours = [COLORS["kv"], COLORS["shared"], COLORS["tail"], COLORS["other"]]
    fig, axes = plt.subplots(3, 2, figsize=(FIGURE_WIDTH, 9.6), layout="constrained")
    fig.suptitle(title, fontsize=13)
    panels = (("tokens_per_s", 1.0, "tokens per second", "%.0f"),
              ("preemptions", 1.0, "preemptions", "%d"),
              ("peak_blocks", 1.0, f"peak blocks in use (dashed: the cache, {num_blocks})", "%d"),
              ("resumed_hit_tokens", 1.0, "tokens found cached on resume", "%d"),
              ("ttft_p99_s", 1.0, "p99 TTFT (s)", "%.3g"),
              ("itl_p99_s", 1e3, "p99 ITL (ms)", "%.3g"))
    # the policies are told apart by colour (x tick labels of three policies in a half-width panel
    # run into each other at a size a phone can read)
    for ax, (key, scale, name, fmt) in zip(axes.flat, panels):
        bars = ax.bar(range(len(rows)), [row[key] * scale for row in rows],
                      color=[colours[k % len(colours)] for k in range(len(rows))])
        ax.bar_label(bars, fmt=fmt, fontsize=12)
        ax.set_title(wrap(name, FIGURE_WIDTH / 2, 12), fontsize=12)
        ax.set_xticks([])
        ax.tick_params(labelsize=12)
        ax.margins(y=0.25)
    peak = axes.flat[2]
    peak.axhline(num_blocks, color="black", linestyle="--", linewidth=1)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k % len(colours)]) for k in range(len(rows))]
    for handle, row in zip(handles, rows):
        handle.set_label(names.get(row["admission"], row["admission"]))
    legend_below(fig, handles, ncols=1, fontsize=12)
    return fit(fig)


def caps_sweep(rows: list[dict], title: str = "Replies end at EOS; clients ask for more"):
    """Three admission policies as the clients' ``max_tokens`` cap grows: throughput, goodput and p99
    inter-token latency against the cap, one line per policy. ``rows``: dicts with ``admission``,
    ``cap`` (``None``: each cap equal to its reply's length, drawn at the left as "= reply"),
    ``tokens_per_s``, ``goodput`` and ``itl_p99_s``."""
    _check_rows(rows, ("admission", "cap", "tokens_per_s", "goodput", "itl_p99_s"))
    caps = sorted({r["cap"] for r in rows if r["cap"] is not None})
    ticks = ["= reply"] + [f"{c:,}" for c in caps]
    where = {None: 0, **{c: i + 1 for i, c in enumerate(caps)}}
    styles = {"on_demand": (COLORS["kv"], "o", "on demand (vLLM)"),
              "guaranteed": (COLORS["shared"], "s", "guaranteed (TRT-LLM)"),
              "estimated": (COLORS["tail"], "^", "estimated (SGLang)")}
    fig, axes = plt.subplots(3, 1, figsize=(FIGURE_WIDTH, 8.4), sharex=True, layout="constrained")
    fig.suptitle(title, fontsize=13)
    panels = (("tokens_per_s", 1.0, "tokens per second"), ("goodput", 1.0, "goodput (req/s)"),
              ("itl_p99_s", 1e3, "p99 ITL (ms)"))
    for ax, (key, scale, ylabel) in zip(axes, panels):
        for policy in dict.fromkeys(r["admission"] for r in rows):
            colour, marker, label = styles.get(policy, (COLORS["tail"], "x", policy))
            points = sorted((where[r["cap"]], r[key] * scale) for r in rows if r["admission"] == policy)
            ax.plot(*zip(*points), marker=marker, color=colour, label=label)
        ax.set_ylabel(ylabel, fontsize=12)
        ax.tick_params(labelsize=12)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    legend_below(fig, axes[0].get_legend_handles_labels()[0], ncols=1, fontsize=12)
    axes[-1].set_xticks(range(len(ticks)), ticks)
    axes[-1].set_xlim(-0.45, len(ticks) - 0.55)      # "= reply" clear of the y tick labels
    axes[-1].set_xlabel("max_tokens each client asks for", fontsize=12)
    return fit(fig)


def lead_by_requests(equal: list[dict], mixes: list[dict], target: float = 2.0,
                     title: str = "pagedlib's lead over transformers' continuous batching"):
    """The stored peer comparison (:func:`pagedlib.bench.peer.measured`) as the ratio of tokens per
    CPU-second against the number of requests: a line per model for equal requests that decode
    together (``equal``), a marker per model for the ShareGPT-like mixes (``mixes``), and the
    ``target`` ratio dashed."""
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.6))
    colors = {"gpt2": COLORS["kv"], "llama": COLORS["shared"]}
    labels = {"gpt2": "GPT-2", "llama": "Llama (GQA)"}
    for model in sorted({r["model"] for r in equal + mixes}):
        color = colors.get(model, COLORS["tail"])
        rows = sorted((r["requests"], r["ratio"]) for r in equal if r["model"] == model)
        if rows:
            ax.plot(*zip(*rows), marker="o", color=color, label=f"{labels.get(model, model)}, decoding together")
        rows = sorted((r["requests"], r["ratio"]) for r in mixes if r["model"] == model)
        if rows:
            ax.plot(*zip(*rows), marker="s", linestyle=":", color=color,
                    label=f"{labels.get(model, model)}, ShareGPT-like mix")
    ax.axhline(target, color=COLORS["external"], linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ticks = sorted({r["requests"] for r in equal + mixes})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlabel("requests")
    ax.set_ylabel("tokens per CPU-second,\npagedlib / transformers")
    ax.set_ylim(bottom=0)
    ax.set_title(wrap(title, fontsize=12), fontsize=12)
    ax.legend(loc="upper left", fontsize=10)
    return fit(fig)
