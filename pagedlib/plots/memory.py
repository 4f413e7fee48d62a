"""Figures of the memory chapters (1-4, 6): KV sizes, reserve-max vs paged rows, fragmentation, block tables.

Every function returns a matplotlib Figure; those that draw one panel accept ``ax=`` to draw into an
existing axes (the widgets redraw that way). Legends go under the figure (``style.legend_below``),
one for the panels that share it, never over the data.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from ..memory.allocators import ContiguousAllocator
from ..memory.block_manager import BlockManager
from ..memory.capacity import GPUS, GiB, ModelSpec, Plan, model_spec, paged_plan
from .style import COLORS, FIGURE_WIDTH, PADDING_HATCH, legend_below, log2_ticks, wrap

__all__ = ["plot_rows", "plot_pool_timeline", "plot_waste_vs_block_size", "plot_block_tables",
           "plot_kv_memory", "plot_tp_vs_dp_attention", "plot_snapshot_distribution"]


def _axes(ax, figsize):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax


def plot_rows(plan: Plan, *, width: int | None = None, pool_slots: int | None = None, ax=None,
              legend: bool = True):
    """One row per request: real K/V in colour, the last page's unused tail, reserve-max padding hatched.

    ``width`` is the row length in token slots (default: the reserve-max slot, else the longest
    allocation); a paged row's slots past its pages are drawn as free. With ``pool_slots`` the
    title also gives the capacity of a pool that size. ``legend=False``: no legend (a caller that
    draws several panels writes its own).
    """
    fig, ax = _axes(ax, (FIGURE_WIDTH, 0.5 * plan.n_requests + 2.6))
    width = width or (plan.unit if plan.kind == "reserve-max" else max(r.allocated for r in plan.rows))
    for y, row in enumerate(plan.rows):
        ax.barh(y, row.length, color=COLORS["kv"], edgecolor="white", linewidth=0.5)
        if row.tail:
            ax.barh(y, row.tail, left=row.length, color=COLORS["tail"], edgecolor="white", linewidth=0.5)
        if row.padding:
            ax.barh(y, row.padding, left=row.length, color=COLORS["padding"], hatch=PADDING_HATCH,
                    edgecolor="white", linewidth=0.5, alpha=0.85)
        if row.allocated < width:
            ax.barh(y, width - row.allocated, left=row.allocated, color=COLORS["free"],
                    edgecolor="#d0d0d0", linewidth=0.5)
        ax.text(width * 1.01, y, f"{row.length:,} / {row.allocated:,}", va="center", fontsize=12)
    ax.set_yticks(range(plan.n_requests), [f"{r.request} ({r.length:,})" for r in plan.rows])
    ax.invert_yaxis()
    ax.set_xlim(0, width * 1.42)
    ax.set_xlabel("token slots (right: used / allocated)")
    what = f"max_len {plan.unit:,}" if plan.kind == "reserve-max" else f"pages of {plan.unit}"
    title = f"{plan.kind} ({what}): {plan.allocated:,} slots allocated, waste {plan.waste:.1%}"
    if pool_slots:
        title += f", {plan.capacity(pool_slots)} requests fit {pool_slots:,} slots"
    ax.set_title(wrap(title, FIGURE_WIDTH, 12), fontsize=12)
    handles = [Patch(color=COLORS["kv"], label="real K/V")]
    if plan.kind == "paged":
        handles += [Patch(color=COLORS["tail"], label="unused tail of the last page"),
                    Patch(facecolor=COLORS["free"], edgecolor="#d0d0d0", label="free (not allocated)")]
    else:
        handles += [Patch(facecolor=COLORS["padding"], hatch=PADDING_HATCH, edgecolor="white",
                          label="reserved, not written (yet or ever)")]
    if legend:
        legend_below(fig, handles, ncols=1 if plan.kind == "paged" else 2, fontsize=12)
    return fig


def plot_pool_timeline(allocator: ContiguousAllocator, *, ax=None):
    """The pool after every event of a replay: who owns which range, the holes, the refused requests.

    One row per step (time runs down). Real K/V in colour, reserved padding hatched, free holes in
    light grey, and holes too small for any waiting request (external fragmentation) in dark grey.
    A refused arrival is marked with a cross and its size. (Reserved but unwritten slots mix the
    paper's *reservation*, written later, and *internal fragmentation*, never written.)
    """
    history = allocator.history
    if not history:
        raise ValueError("the allocator has no history yet; call replay(events) first")
    fig, ax = _axes(ax, (FIGURE_WIDTH, 0.4 * len(history) + 2.8))
    pool = allocator.pool_slots
    for y, step in enumerate(history):
        need = min((allocator.reservation(n) for _, n in step.waiting), default=None)
        for seg in step.segments:
            if seg.owner is None:
                unusable = need is not None and seg.size < need
                ax.barh(y, seg.size, left=seg.start, color=COLORS["external" if unusable else "free"],
                        edgecolor="white", linewidth=0.5)
                continue
            ax.barh(y, seg.used, left=seg.start, color=COLORS["kv"], edgecolor="white", linewidth=0.5)
            if seg.size > seg.used:
                ax.barh(y, seg.size - seg.used, left=seg.start + seg.used, color=COLORS["padding"],
                        hatch=PADDING_HATCH, edgecolor="white", linewidth=0.5, alpha=0.85)
            if seg.size >= pool / 14:
                ax.text(seg.start + seg.size / 2, y, str(seg.owner), ha="center", va="center", fontsize=12,
                        bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none", alpha=0.8))
        if step.refused is not None:
            ax.plot(pool * 1.02, y, marker="x", color=COLORS["padding"], markersize=8, mew=2)
            ax.text(pool * 1.04, y, f"{step.refused}\nrefused", va="center", fontsize=12)
    ax.set_yticks(range(len(history)), [_event_label(s.event) for s in history], fontsize=12)
    ax.invert_yaxis()
    ax.set_xlim(0, pool * 1.3)
    ax.set_xlabel("token slot in the pool")
    ax.set_ylabel("event (time runs down)")
    refusals = "1 refusal" if allocator.refusals == 1 else f"{allocator.refusals} refusals"
    ax.set_title(wrap(f"{allocator.kind} allocator, {pool:,}-slot pool: {refusals}",
                      FIGURE_WIDTH, 12), fontsize=12)
    handles = [Patch(color=COLORS["kv"], label="real K/V"),
               Patch(facecolor=COLORS["padding"], hatch=PADDING_HATCH, edgecolor="white",
                     label="reserved, not written"),
               Patch(color=COLORS["free"], label="free hole"),
               Patch(color=COLORS["external"], label="hole too small to use"),
               plt.Line2D([], [], marker="x", color=COLORS["padding"], ls="", mew=2, label="refused arrival")]
    legend_below(fig, handles, fontsize=12)
    return fig


def _event_label(event: tuple) -> str:
    return f"+{event[1]} ({event[2]:,})" if event[0] == "arrive" else f"-{event[1]}"


def plot_waste_vs_block_size(lengths: Sequence[int],
                             block_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
                             *, max_len: int | None = None, pool_slots: int | None = None, ax=None):
    """Waste of the paged layout as pages grow: at most ``block_size - 1`` tokens per request.

    With ``max_len`` the reserve-max waste is drawn as a dashed line for comparison; with
    ``pool_slots`` each point is labelled with the number of requests of this mix that fit.
    """
    from ..memory.capacity import reserve_max_plan
    fig, ax = _axes(ax, (FIGURE_WIDTH, 3.8))
    plans = [paged_plan(lengths, p) for p in block_sizes]
    waste = [100 * p.waste for p in plans]
    ax.plot(block_sizes, waste, marker="o", color=COLORS["kv"], label="paged")
    if pool_slots:
        for x, y, plan in zip(block_sizes, waste, plans):
            ax.annotate(f"{plan.capacity(pool_slots)}", (x, y), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=12)
    if max_len:
        ax.axhline(100 * reserve_max_plan(lengths, max_len).waste, ls="--", color=COLORS["padding"],
                   label=f"reserve-max (max_len {max_len:,})")
    ax.set_xscale("log", base=2)
    log2_ticks(ax, block_sizes)
    ax.tick_params(axis="x", labelsize=12)
    ax.set_ylim(0, 100 if max_len else max(waste) * 1.25 + 1)
    ax.set_xlabel("page size (tokens)")
    ax.set_ylabel("waste (% of allocated slots)")
    note = " (labels: requests that fit the pool)" if pool_slots else ""
    ax.set_title(wrap(f"Bigger pages round each request up further{note}", FIGURE_WIDTH, 12),
                 fontsize=12)
    legend_below(fig, ax.get_legend_handles_labels()[0], fontsize=12)
    return fig


def plot_block_tables(bm: BlockManager, seq_ids: Sequence[Hashable] | None = None, *, ax=None):
    """Each sequence's logical blocks (left, one row each) pointing at physical blocks (right column).

    A logical block is filled in proportion to the tokens it holds and labelled with its physical
    block. Physical blocks held by one sequence are blue, shared ones (ref count > 1) green with
    their ref count, free ones grey; free blocks that still hold a cached prefix are outlined.
    """
    seq_ids = list(bm.seq_ids if seq_ids is None else seq_ids)
    n_blocks, bs = bm.num_blocks, bm.block_size
    tables = {s: bm.block_table(s) for s in seq_ids}
    max_logical = max((len(t) for t in tables.values()), default=1)
    height = max(n_blocks, 1.6 * len(seq_ids))
    fig, ax = _axes(ax, (min(FIGURE_WIDTH, 0.45 * max_logical + 3.4), 0.3 * height + 2.4))
    pool_x = max_logical + 3
    pool_step = height / n_blocks

    def box(x, y, colour, outline="#888888", lw=0.8, frac=1.0):
        ax.add_patch(plt.Rectangle((x, y), 0.9, 0.8, facecolor="white", edgecolor="none", zorder=2))
        ax.add_patch(plt.Rectangle((x, y), 0.9 * frac, 0.8, facecolor=colour, edgecolor="none", zorder=2))
        ax.add_patch(plt.Rectangle((x, y), 0.9, 0.8, facecolor="none", edgecolor=outline, lw=lw, zorder=3))

    def pool_y(b):
        return height - (b + 1) * pool_step + (pool_step - 0.8) / 2

    for b in range(n_blocks):
        ref = bm.ref_count(b)
        colour = COLORS["shared"] if ref > 1 else COLORS["kv"] if ref == 1 else COLORS["free"]
        cached_free = ref == 0 and bm.is_cached(b)
        box(pool_x, pool_y(b), colour, outline=COLORS["other"] if cached_free else "#888888",
            lw=1.8 if cached_free else 0.8)
        ax.text(pool_x + 0.45, pool_y(b) + 0.4, str(b), ha="center", va="center", fontsize=10, zorder=4,
                color="white" if ref else "black")
        if ref > 1:
            ax.text(pool_x + 1.0, pool_y(b) + 0.4, f"×{ref}", va="center", fontsize=10, color=COLORS["shared"])
    arrow_colours = [COLORS[c] for c in ("kv", "tail", "other", "accent", "padding", "shared")]
    for row, s in enumerate(seq_ids):
        y = height - (row + 0.5) * height / len(seq_ids) - 0.4
        n_tok = bm.num_tokens(s)
        colour_arrow = arrow_colours[row % len(arrow_colours)]
        for i, b in enumerate(tables[s]):
            frac = min(bs, n_tok - i * bs) / bs
            colour = COLORS["shared"] if bm.ref_count(b) > 1 else COLORS["kv"]
            box(i, y, colour, frac=frac)
            full = frac == 1.0
            ax.text(i + 0.45, y + 0.4, str(b), ha="center", va="center", fontsize=10, zorder=4,
                    color="white" if full else "black",
                    bbox=None if full else dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8))
            ax.annotate("", xy=(pool_x, pool_y(b) + 0.4), xytext=(i + 0.45, y + 0.4), zorder=1,
                        arrowprops=dict(arrowstyle="->", color=colour_arrow, alpha=0.55, lw=0.9))
        ax.text(-0.3, y + 0.4, f"{s}\n{n_tok} tokens", ha="right", va="center", fontsize=10, color=colour_arrow)
    ax.text(pool_x + 0.45, height + 0.3, "physical\nblocks", ha="center", va="bottom", fontsize=10)
    ax.text(max_logical / 2, height + 0.3, "logical blocks\n(label: physical block)", ha="center",
            va="bottom", fontsize=10)
    ax.set_xlim(-2.5, pool_x + 1.8)
    ax.set_ylim(-0.3, height + 1.4)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel(wrap(f"{bs} tokens per block; a logical block is filled in proportion to its tokens",
                       FIGURE_WIDTH, 10), fontsize=10)
    ax.set_title(wrap(f"Block tables: {len(seq_ids)} sequences, {bm.num_used_blocks} of {n_blocks} "
                      "blocks in use", FIGURE_WIDTH, 11), fontsize=11)
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    handles = [Patch(color=COLORS["kv"], label="one owner"),
               Patch(color=COLORS["shared"], label="shared (×ref count)"),
               Patch(facecolor=COLORS["free"], edgecolor="#888888", label="free")]
    if bm.enable_prefix_caching:
        handles.append(Patch(facecolor=COLORS["free"], edgecolor=COLORS["other"], lw=1.8,
                             label="free, prefix still cached"))
    legend_below(fig, handles)
    return fig


def plot_kv_memory(model: ModelSpec | str = "llama-2-7b", *,
                   batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
                   seq_lens: Sequence[int] = (512, 2048, 8192),
                   length_batches: Sequence[int] = (1, 8, 64),
                   gpus: Sequence[str] = ("T4", "A100-40GB", "H100-80GB", "H200")):
    """KV-cache size against batch size (top) and sequence length (bottom), beside GPU memory sizes.

    The top panel has a line per length in ``seq_lens``, the bottom one a line per batch size in
    ``length_batches``; ``model`` is a :class:`ModelSpec` or a key of ``pagedlib.MODELS``.

    ``2 * layers * kv_heads * head_dim * bytes`` per token, times tokens, times sequences. The
    horizontal lines are whole GPUs at their usable memory (``GPUS``; the weights are not even
    counted yet).
    """
    spec = model_spec(model)  # a KeyError that lists the known models
    # stacked, not side by side: each panel keeps the figure's whole width on a phone
    fig, (left, right) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 7.4), layout="constrained", sharey=True)
    shades = plt.cm.Blues(np.linspace(0.45, 0.95, max(len(seq_lens), len(length_batches))))
    b = np.array(batch_sizes, dtype=float)
    for colour, n in zip(shades, seq_lens):
        left.plot(b, b * n * spec.kv_bytes_per_token / GiB, marker="o", ms=3, color=colour, label=f"{n:,} tokens each")
    lens = np.array(sorted({2 ** k for k in range(7, 18)} | set(seq_lens)), dtype=float)
    for colour, bsz in zip(shades, length_batches):
        right.plot(lens, bsz * lens * spec.kv_bytes_per_token / GiB, marker="o", ms=3, color=colour,
                   label=f"batch {bsz}")
    for ax in (left, right):
        gpu_lines = [ax.axhline(GPUS[g].memory_gib, color=COLORS["padding"], ls=style, lw=1,
                                label=f"{g} ({GPUS[g].memory_gib:.1f} GiB usable)")
                     for g, style in zip(gpus, ["-", "--", "-.", ":", (0, (5, 1))])]
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="major")
        curves = [line for line in ax.get_lines() if line not in gpu_lines]
        ax.legend(handles=curves, fontsize=10, loc="lower right")
    # the GPUs are the same in both panels: one legend for them, under the figure
    fig.legend(handles=gpu_lines, loc="outside lower center", ncol=2, fontsize=10, frameon=False)
    left.set_xlabel("batch size (sequences)")
    right.set_xlabel("sequence length (tokens)")
    left.set_ylabel("KV cache (GiB)")
    right.set_ylabel("KV cache (GiB)")
    per_token = spec.kv_bytes_per_token / 1024
    fig.suptitle(f"{spec.name}: {per_token:,.0f} KiB of K/V per token", fontsize=12)
    left.set_title("grows with the batch", fontsize=11)
    right.set_title("and with the length", fontsize=11)
    return fig


def plot_tp_vs_dp_attention(counts: dict, *, seq_len: int, num_gpus: int, model: str = "DeepSeek-V3"):
    """Sequences a group of ``num_gpus`` GPUs holds at once, under tensor parallelism and under
    data-parallel attention, one pair of bars per GPU.

    ``counts`` maps a GPU name to ``(tensor_parallel, dp_attention)`` sequence counts for the whole
    group (:func:`pagedlib.memory.capacity.requests_per_group`).
    """
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.9), layout="constrained")
    names = list(counts)
    x = np.arange(len(names))
    tp = [counts[g][0] for g in names]
    dp = [counts[g][1] for g in names]
    bars_tp = ax.bar(x - 0.2, tp, 0.4, color=COLORS["padding"], hatch=PADDING_HATCH, edgecolor="white",
                     label="tensor parallel: a copy per GPU")
    bars_dp = ax.bar(x + 0.2, dp, 0.4, color=COLORS["kv"], label="DP attention: its own per GPU")
    for bars in (bars_tp, bars_dp):
        ax.bar_label(bars, fontsize=11, padding=2)
    ax.set_xticks(x, names)
    ax.set_ylabel(f"sequences on {num_gpus} GPUs")
    ax.set_ylim(0, 1.2 * max(dp + tp))
    ax.set_title(wrap(f"{model}, {seq_len // 1024}K tokens each: sequences that keep their "
                      f"latent cache on {num_gpus} GPUs", fontsize=12), fontsize=12)
    ax.legend(loc="upper left", fontsize=11, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return fig


def plot_snapshot_distribution(samples: dict, *, marks: dict | None = None, xlabel: str, title: str,
                               percent: bool = True, bins: int = 40):
    """Histograms of one quantity over many snapshots of a server (one per entry of ``samples``,
    label -> values), with vertical lines at ``marks`` (label -> value), such as the five-request
    snapshot's figure. ``percent`` shows fractions as percentages on the x axis."""
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.9), layout="constrained")
    scale = 100 if percent else 1
    palette = [COLORS["padding"], COLORS["kv"], COLORS["tail"], COLORS["shared"]]
    values = np.concatenate([np.asarray(v, dtype=float) for v in samples.values()]) * scale
    edges = np.linspace(values.min(), values.max(), bins + 1) if values.max() > values.min() else bins
    for colour, (label, v) in zip(palette, samples.items()):
        ax.hist(np.asarray(v, dtype=float) * scale, bins=edges, color=colour, alpha=0.75, label=label)
    for style, (label, value) in zip(["--", ":", "-."], (marks or {}).items()):
        ax.axvline(value * scale, color="black", ls=style, lw=1.5, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("snapshots")
    ax.set_title(wrap(title, fontsize=12), fontsize=12)
    legend_below(fig, ax.get_legend_handles_labels()[0], ncols=1, fontsize=12)
    ax.grid(axis="y", alpha=0.3)
    return fig
