"""Figures of the kernel chapters (the GPU primer, 8 and 9): where a kernel's bytes live, and how fast.

- :func:`gpu_memory_hierarchy`: the GPU primer's picture, HBM, L2, shared memory and registers.
- :func:`cache_tile_addresses`: chapter 8's 4-D cache flattened into memory by its strides, and how
  ``rows[:, None] + dims[None, :]`` picks one page's tile of one K/V head out of it.
- :func:`decode_kernel_map`: chapter 8's decode grid, its tiles on their way up the memory
  hierarchy, and the arithmetic intensity of decode against prefill and the GPU's ridge point.
- :func:`block_size_kernel_side`: chapter 9's kernel side of the page size: what a tile of K/V
  touches at each page size (from the launch configuration), and what stays the same.
- :func:`split_k_ranges`: chapter 9's split-K ranges of each sequence and the log-sum-exp merge.
- :func:`varlen_launch`: chapter 9's one kernel for every step: one launch's programs over a mixed
  batch (packed tiles of tokens x GQA group, split-K for the decode rows, the programs that exit).
- :func:`kernel_bandwidth`: the benchmark's achieved bandwidth against context length.
- :func:`record_bandwidth`: the GPU record's decode bandwidth as a share of HBM peak, by batch.
- :func:`record_splits`: the GPU record's split-K sweep: the best split count's speed-up over the
  single pass, and the automatic choice's, by batch.

``GPU_SPECS`` holds the datasheet numbers the figures draw; :func:`attention_intensity` and
:func:`ridge_point` are the two numbers of a roofline argument.
"""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from ..memory.capacity import PEAK_BANDWIDTH_GBS, PEAK_FP16_TFLOPS
from ..attention.kernels.launch import SM_LIMITS, VARLEN_SPLIT_Q, kv_tile
from ..attention.kernels.split_k import split_ranges  # the kernel's rule, drawn here
from ..attention.kernels.varlen import varlen_programs  # the varlen kernel's programs, drawn here
from ..validation import cdiv
from .style import COLORS, FIGURE_WIDTH, SMALLEST_FONT, wrap

__all__ = ["GPU_SPECS", "cache_tile_addresses", "tile_offsets", "block_size_kernel_side", "tile_footprint",
           "attention_intensity", "ridge_point", "split_ranges", "gpu_memory_hierarchy", "decode_kernel_map",
           "split_k_ranges", "split_waves", "varlen_launch", "varlen_programs", "kernel_bandwidth", "read_bench_csv",
           "record_bandwidth", "record_splits"]


def _spec(sms: int, dram_gb: int, l2_mb: int, peaks: str, capability: int) -> dict[str, float]:
    """One GPU's numbers; bandwidth, FLOP/s and the SM's shared memory and registers come from their
    one home (``capacity`` for the peaks, ``kernels.launch.SM_LIMITS`` for the SM)."""
    sm = SM_LIMITS[capability]
    return dict(sms=sms, dram_gb=dram_gb, dram_gbs=PEAK_BANDWIDTH_GBS[peaks], l2_mb=l2_mb,
                smem_kb=sm.shared_per_sm // 1024, regs_kb=sm.registers * 4 // 1024,
                fp16_tflops=PEAK_FP16_TFLOPS[peaks])


# Vendor datasheet numbers, per GPU: streaming multiprocessors, DRAM (HBM, or GDDR6 on the T4) in GB
# and GB/s, L2 in MB, shared memory (the SRAM a program's tiles live in) and registers per SM in KB,
# dense fp16 tensor-core TFLOP/s.
GPU_SPECS: dict[str, dict[str, float]] = {
    "T4": _spec(40, 16, 4, "T4", 75),
    "A100 80GB": _spec(108, 80, 40, "A100 80GB", 80),
    "H100 SXM": _spec(132, 80, 50, "H100", 90),
}

_MEM_COLOURS = {"dram": COLORS["kv"], "l2": COLORS["accent"], "smem": COLORS["shared"],
                "regs": COLORS["tail"]}


def attention_intensity(query_rows: int, group: int, elem_bytes: int = 2) -> float:
    """FLOPs per byte of K/V read when ``query_rows`` tokens x ``group`` query heads use each K/V row.

    A K/V row of ``head_dim`` numbers costs ``2 * head_dim * elem_bytes`` bytes (K and V) and feeds
    ``2 * head_dim`` multiply-adds per query head and token (q . k, then p * v): 2 FLOPs each. Decode
    is ``query_rows = 1``; a prefill chunk whose K/V rows are each read once has one row per token.
    """
    flops = 2 * 2 * query_rows * group          # per K/V element pair: (q.k + p.v) x 2 FLOPs x users
    return flops / (2 * elem_bytes)


def ridge_point(gpu: str) -> float:
    """FLOPs per byte at which a kernel on ``gpu`` stops waiting for memory (peak FLOP/s / bandwidth)."""
    spec = GPU_SPECS[gpu]
    return spec["fp16_tflops"] * 1e12 / (spec["dram_gbs"] * 1e9)


def _box(ax, x, y, w, h, colour, text="", *, alpha=1.0, size=10, text_colour="white", **kw):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="black", lw=0.8, alpha=alpha,
                           **kw))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size,
                color=text_colour)


def _arrow(ax, start, end, colour="black", text="", **kw):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, lw=1.6,
                                 color=colour, **kw))
    if text:
        ax.text((start[0] + end[0]) / 2 + 0.12, (start[1] + end[1]) / 2, text, fontsize=10,
                va="center", color=colour)


def gpu_memory_hierarchy(gpu: str = "H100 SXM"):
    """The GPU primer's picture: SMs with registers and shared memory, the L2, and DRAM below."""
    spec = GPU_SPECS[gpu]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 5.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.2, 7.2)
    ax.axis("off")
    sm_w, dots_w = 4.1, 1.2            # two SMs drawn, the others stand in the dots between them
    for i, name in enumerate(["SM 0", "...", f"SM {int(spec['sms']) - 1}"]):
        x = 0.3 + (0 if i == 0 else sm_w if i == 1 else sm_w + dots_w)
        if name == "...":
            ax.text(x + dots_w / 2, 5.3, "...", ha="center", va="center", fontsize=18)
            continue
        ax.add_patch(Rectangle((x, 3.9), sm_w, 3.0, facecolor="white", edgecolor="black", lw=1.2))
        ax.text(x + sm_w / 2, 6.65, name, ha="center", va="center", fontsize=11, weight="bold")
        ax.text(x + sm_w / 2, 6.2, "4 schedulers,\nwarps of 32 threads", ha="center", va="center",
                fontsize=10)
        _box(ax, x + 0.15, 4.95, sm_w - 0.3, 0.75, _MEM_COLOURS["regs"],
             f"registers\n{spec['regs_kb']:.0f} KB", size=10, text_colour="black")
        _box(ax, x + 0.15, 4.05, sm_w - 0.3, 0.75, _MEM_COLOURS["smem"],
             f"shared mem.\n{spec['smem_kb']:.0f} KB", size=10)
    _box(ax, 0.3, 2.45, 9.4, 0.9, _MEM_COLOURS["l2"], f"L2 cache: {spec['l2_mb']:.0f} MB,\nshared by "
         f"all {spec['sms']:.0f} SMs", size=10, text_colour="black")
    _box(ax, 0.3, 0.1, 9.4, 1.55, _MEM_COLOURS["dram"],
         f"DRAM (HBM): {spec['dram_gb']:.0f} GB at {spec['dram_gbs']:,.0f} GB/s\n"
         "model weights and the KV cache's\npages live here", size=10)
    _arrow(ax, (5.0, 1.7), (5.0, 2.4), text="every byte read\ncomes up from here")
    _arrow(ax, (2.35, 3.4), (2.35, 3.85))
    _arrow(ax, (7.65, 3.4), (7.65, 3.85))
    ax.set_title(wrap(f"Inside a GPU ({gpu}): the higher, the smaller and faster", FIGURE_WIDTH, 12),
                 fontsize=12)
    fig.tight_layout()
    return fig


def tile_offsets(strides: tuple[int, ...], block: int, kv_head: int, block_size: int,
                 head_dim: int) -> list[list[int]]:
    """The element offsets a page's tile reads, as the kernel builds them:
    ``rows = block * stride_block + offsets * stride_token + kv_head * stride_head`` (one per token
    row), then ``rows[:, None] + dims[None, :]``: a ``[block_size, head_dim]`` grid of offsets."""
    stride_block, stride_token, stride_head, stride_dim = strides
    rows = [block * stride_block + t * stride_token + kv_head * stride_head for t in range(block_size)]
    return [[r + d * stride_dim for d in range(head_dim)] for r in rows]


def cache_tile_addresses(shape: tuple[int, int, int, int] = (6, 4, 2, 8), block: int = 3,
                         kv_head: int = 1):
    """Chapter 8: a contiguous ``key_cache [num_blocks, block_size, num_kv_heads, head_dim]`` is one
    line of memory; its strides say how far apart neighbours are. Top: block ``block`` in memory,
    one token's ``stride_token`` elements per row (every K/V head's dims), the elements of K/V head
    ``kv_head`` highlighted. Bottom: the tile ``rows[:, None] + dims[None, :]``, a column of row
    starts plus a row of dims, every cell labelled with the offset it reads."""
    num_blocks, block_size, num_kv_heads, head_dim = shape
    strides = (block_size * num_kv_heads * head_dim, num_kv_heads * head_dim, head_dim, 1)
    tile = tile_offsets(strides, block, kv_head, block_size, head_dim)
    picked = {o for row in tile for o in row}
    base = block * strides[0]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(5.4, 8.0), height_ratios=[1, 1.45])
    # top: the block's elements in memory order, one token (stride_token elements) per row
    width = strides[1]
    for t in range(block_size):
        for i in range(width):
            offset = base + t * width + i
            colour = COLORS["kv"] if offset in picked else COLORS["free"]
            top.add_patch(Rectangle((i, t), 1, 1, facecolor=colour, edgecolor="white", lw=0.6))
        top.text(-0.4, t + 0.5, f"token {t}: {base + t * width}", ha="right", va="center", fontsize=10)
    for h in range(num_kv_heads):
        top.text(h * head_dim + head_dim / 2, -0.3, f"head {h}", ha="center", va="bottom", fontsize=10)
        if h:
            top.plot([h * head_dim] * 2, [0, block_size], color="black", lw=1.2)
    top.set_xlim(-7, width + 0.2)
    top.set_ylim(block_size + 0.2, -1.4)
    top.axis("off")
    top.set_title(f"block {block} of key_cache {list(shape)} in memory,\nstrides {strides}: "
                  f"K/V head {kv_head}'s elements in blue", fontsize=11)
    # bottom: the tile as a broadcast sum
    bottom.set_xlim(-3.6, head_dim + 0.2)
    bottom.set_ylim(block_size + 2.6, -1.9)
    bottom.axis("off")
    for d in range(head_dim):
        _box(bottom, d, -1.4, 1, 0.9, COLORS["accent"], str(d), size=10, text_colour="black")
    bottom.text(-2.1, -0.95, "dims[None, :]", ha="center", va="center", fontsize=10)
    for t in range(block_size):
        _box(bottom, -3.4, t, 2.6, 1, COLORS["tail"], str(tile[t][0]), size=10, text_colour="black")
        for d in range(head_dim):
            _box(bottom, d, t, 1, 1, COLORS["kv"], str(tile[t][d]), size=10)
    bottom.text(-2.1, -0.2, "rows[:, None]", ha="center", va="center", fontsize=10)
    r, c = block_size - 1, min(5, head_dim - 1)
    bottom.text(head_dim / 2 - 1.7, block_size + 0.8,
                "rows = block * stride_block\n+ offsets * stride_token + kv_head * stride_head",
                ha="center", va="center", fontsize=10)
    bottom.text(head_dim / 2 - 1.7, block_size + 2.1,
                f"row {r}, dim {c}: {block} x {strides[0]} + {r} x {strides[1]} + {kv_head} x "
                f"{strides[2]} + {c} = {tile[r][c]}", ha="center", va="center", fontsize=11)
    bottom.set_title("the tile rows[:, None] + dims[None, :]:\none offset per (row, dim)",
                     fontsize=11, pad=4)
    fig.tight_layout()
    return fig


def tile_footprint(block_size: int, head_dim: int = 128, seq_len: int = 2048, elem_bytes: int = 2) -> dict:
    """What one K tile of the course's kernels touches with pages of ``block_size`` tokens: the tile
    (``kv_tile``: tokens per step, the same at every page size), the distinct blocks it spans (at
    most one per token), the bytes of each contiguous load (one token's row of one K/V head), and a
    ``seq_len``-token request's block-table entries."""
    tile = kv_tile(head_dim)
    return dict(tile_tokens=tile, blocks_per_tile=cdiv(tile, block_size) if block_size < tile else 1,
                row_bytes=head_dim * elem_bytes, tile_bytes=tile * head_dim * elem_bytes,
                table_entries=cdiv(seq_len, block_size))


def block_size_kernel_side(head_dim: int = 128, seq_len: int = 2048,
                           block_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)):
    """Chapter 9: the kernel side of the page size. Top, what changes: the distinct blocks one K
    tile spans and a request's block-table entries. Bottom, what does not: the tile's bytes (so its
    registers and shared memory) and the bytes of each contiguous row load."""
    rows = [tile_footprint(b, head_dim, seq_len) for b in block_sizes]
    fig, (left, right) = plt.subplots(2, 1, figsize=(5.4, 7.6), sharex=True)
    left.plot(block_sizes, [r["blocks_per_tile"] for r in rows], "o-", color=COLORS["kv"],
              label=f"blocks a {rows[0]['tile_tokens']}-token K tile spans")
    left.plot(block_sizes, [r["table_entries"] for r in rows], "s--", color=COLORS["tail"],
              label=f"table entries, {seq_len:,}-token request")
    left.set_yscale("log", base=2)
    left.set_ylabel("count (log scale)")
    left.set_title("what the page size changes:\nlookups and scattering", fontsize=11)
    right.plot(block_sizes, [r["tile_bytes"] / 1024 for r in rows], "o-", color=COLORS["shared"],
               label=f"K tile: {rows[0]['tile_tokens']} tokens, {rows[0]['tile_bytes'] // 1024} KB")
    right.plot(block_sizes, [r["row_bytes"] / 1024 for r in rows], "s--", color=COLORS["other"],
               label=f"one load: a row of one head, {rows[0]['row_bytes']} B")
    right.set_yscale("log", base=2)
    right.set_ylim(0.1, 64)
    right.set_ylabel("KB (log scale)")
    right.set_title(f"what it does not: the tile and each load\n(head_dim {head_dim}, fp16)",
                    fontsize=11)
    right.set_xlabel("page size (tokens per block)")
    for ax in (left, right):
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xscale("log", base=2)
        ax.set_xticks(block_sizes, [str(b) for b in block_sizes])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend(fontsize=10, loc="upper right")
    fig.tight_layout()
    return fig


def decode_kernel_map(gpu: str = "H100 SXM", group: int = 4, chunk: int = 512):
    """Chapter 8: the decode grid and its tiles in the memory hierarchy, and arithmetic intensity.

    Top: a grid of (sequence, K/V head) programs, each on an SM, streams its sequence's pages from
    DRAM through L2 into shared memory one tile at a time, and keeps the online softmax's m, l and
    acc in registers. Bottom: FLOPs per byte of decode (GQA groups of 1, ``group`` and 2 x ``group``)
    and of a prefill chunk of ``chunk`` tokens, against the ridge points of the GPUs in GPU_SPECS.
    """
    # stacked, not side by side: each panel keeps the figure's whole width on a phone
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 9.0),
                                 gridspec_kw=dict(height_ratios=[1.25, 1]))
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 8.4)
    ax.axis("off")
    seq_colours = [COLORS["kv"], COLORS["padding"]]
    # DRAM with the two sequences' pages scattered over it
    _box(ax, 0.2, 0.1, 9.6, 1.9, "white")
    ax.text(5.0, 1.7, "DRAM: KV blocks of seq 0 and seq 1", fontsize=10, ha="center",
            va="center")
    for s, b in [(0, 0), (1, 1), (0, 3), (1, 5), (0, 6), (1, 8)]:
        _box(ax, 0.5 + b * 1.0, 0.35, 0.8, 0.9, seq_colours[s], str(s), size=10)
    _box(ax, 0.2, 2.5, 9.6, 0.8, _MEM_COLOURS["l2"], "L2 (shared)", size=10, text_colour="black")
    # two SMs, each running one program of the grid
    for i, colour in enumerate(seq_colours):
        x = 0.3 + i * 5.0
        ax.add_patch(Rectangle((x, 3.9), 4.4, 4.4, facecolor="white", edgecolor="black", lw=1.2))
        ax.text(x + 2.2, 7.8, f"SM {i}: program\n(seq {i}, K/V head 0)", ha="center", va="center",
                fontsize=10, weight="bold")
        _box(ax, x + 0.2, 4.05, 4.0, 1.3, _MEM_COLOURS["smem"], "shared memory:\none K, V tile",
             size=10)
        _box(ax, x + 0.2, 5.7, 4.0, 1.4, _MEM_COLOURS["regs"], "registers:\nq, m, l, acc",
             size=10, text_colour="black")
        _arrow(ax, (x + 2.2, 2.05), (x + 2.2, 2.45), colour=colour)
        _arrow(ax, (x + 2.2, 3.35), (x + 2.2, 4.0), colour=colour)
        _arrow(ax, (x + 2.2, 5.35), (x + 2.2, 5.7), colour=colour)
    ax.set_title(wrap("Decode grid: each program streams its pages, one tile per step", FIGURE_WIDTH, 11),
                 fontsize=11)

    cases = [("decode\nMHA", 1, 1), (f"decode\nGQA {group}", 1, group),
             (f"decode\nGQA {2 * group}", 1, 2 * group), (f"prefill\n{chunk} tok.", chunk, group)]
    values = [attention_intensity(q, g) for _, q, g in cases]
    bars = bx.bar(range(len(cases)), values, color=[COLORS["kv"]] * 3 + [COLORS["shared"]])
    for b, v in zip(bars, values):
        bx.text(b.get_x() + b.get_width() / 2, v * 1.15, f"{v:,.0f}", ha="center", fontsize=10)
    for name, style in zip(GPU_SPECS, [":", "-.", "--"]):
        bx.axhline(ridge_point(name), color=COLORS["external"], ls=style, lw=1.5,
                   label=f"{name} ridge: {ridge_point(name):.0f}")
    bx.set_yscale("log")
    bx.set_ylim(0.5, max(values) * 4)
    bx.set_xticks(range(len(cases)), [c[0] for c in cases], fontsize=10)
    bx.set_ylabel("FLOPs per byte", fontsize=10)
    bx.set_xlabel("fp16 attention (bars) vs GPUs (lines)", fontsize=10)
    bx.set_title("Arithmetic intensity: below the ridge, memory-bound", fontsize=11)
    bx.legend(fontsize=10, loc="upper left")
    fig.tight_layout()
    return fig


def split_k_ranges(seq_lens: list[int], num_splits: int, tile: int, lses: list[float] | None = None):
    """Chapter 9: each sequence's tokens cut into split-K ranges, and how one sequence's are merged.

    Top: one row per sequence, its ranges (:func:`split_ranges`) coloured by split, empty ranges
    marked. Bottom (when ``lses``, the log-sum-exps of the last sequence's ranges, are given): each
    range's weight in the merge, softmax(lse), with empty ranges at 0.
    """
    palette = [COLORS["kv"], COLORS["tail"], COLORS["shared"], COLORS["other"], COLORS["accent"],
               COLORS["padding"]]
    nrows = 2 if lses is not None else 1
    top = 1.6 + 0.6 * len(seq_lens)
    # stacked, not side by side: each panel keeps the figure's whole width on a phone
    fig, axes = plt.subplots(nrows, 1, figsize=(FIGURE_WIDTH, top + 2.8 * (nrows - 1)), squeeze=False,
                             gridspec_kw=dict(height_ratios=[top, 2.8][:nrows]))
    ax = axes[0][0]
    for row, n in enumerate(seq_lens):
        for split, (start, end) in enumerate(split_ranges(n, num_splits, tile)):
            colour = palette[split % len(palette)]
            if end > start:
                ax.barh(row, end - start, left=start, color=colour, edgecolor="white", height=0.6)
                if end - start >= 0.06 * max(seq_lens):         # a label only where it fits
                    ax.text((start + end) / 2, row, str(split), ha="center", va="center",
                            fontsize=10, color="white")
        empty = [s for s, (a, b) in enumerate(split_ranges(n, num_splits, tile)) if b <= a]
        if empty:
            ax.text(n + max(seq_lens) * 0.02, row, f"splits {empty[0]}-{empty[-1]}\nempty"
                    if len(empty) > 1 else f"split {empty[0]}\nempty", va="center", fontsize=10,
                    color=COLORS["external"])
    ax.set_yticks(range(len(seq_lens)), [f"seq {i}\n({n} tokens)" for i, n in enumerate(seq_lens)],
                  fontsize=10)
    ax.invert_yaxis()
    ax.set_xlim(0, max(seq_lens) * 1.45)
    ax.set_xlabel(wrap(f"token position (ranges of whole tiles of {tile})", FIGURE_WIDTH, 10),
                  fontsize=10)
    ax.set_title(f"{num_splits} programs per sequence and K/V head", fontsize=11)
    ax.legend(handles=[Patch(color=palette[s % len(palette)], label=f"split {s}")
                       for s in range(num_splits)], fontsize=10, loc="upper right",
              ncol=2 if num_splits > 3 else 1)
    if lses is not None:
        import torch
        bx = axes[1][0]
        weights = torch.tensor(lses, dtype=torch.float64).softmax(dim=0).tolist()
        bx.bar(range(len(weights)), weights, color=[palette[s % len(palette)] for s in range(len(weights))])
        for s, w in enumerate(weights):
            bx.text(s, w + 0.02, f"{w:.2f}", ha="center", fontsize=10)
        bx.set_ylim(0, 1.25)
        bx.set_xticks(range(len(weights)), [f"{s}" for s in range(len(weights))], fontsize=10)
        bx.set_xlabel("split", fontsize=10)
        bx.set_ylabel("weight softmax(lse)", fontsize=10)
        bx.set_title(f"Merge of seq {len(seq_lens) - 1}", fontsize=11)
        bx.text(0.98, 0.93, "out = sum over r of\nweight_r x o_r", transform=bx.transAxes,
                ha="right", va="top", fontsize=10)
    fig.tight_layout()
    return fig


def split_waves(programs: int, key_tiles: int, sms: int, splits: list[int], per_sm: int = 1, gpu: str = ""):
    """Chapter 9: the programs of each split count in ``splits``, as the GPU runs them, in waves.

    One row per split count ``s``: ``programs * s`` programs fill waves of ``sms * per_sm`` seats
    (``per_sm`` programs resident on each SM at a time), drawn left to right, each wave a box whose
    filled part is its programs; the label gives the wave efficiency (``launch.wave_efficiency``). The row of the rule's choice
    (``launch.choose_num_splits``) is marked; counts the rule may not take (a split of fewer than
    ``MIN_TILES_PER_SPLIT`` key tiles) are grey.
    """
    from ..attention.kernels.launch import choose_num_splits, split_candidates, wave_efficiency
    chosen = choose_num_splits(programs, key_tiles, sms, per_sm)
    slots = sms * per_sm                                           # seats in one wave
    allowed = set(split_candidates(key_tiles, slots))
    best = max(wave_efficiency(programs * s, slots) for s in allowed)
    most_waves = max(cdiv(programs * s, slots) for s in splits)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 1.6 + 0.55 * len(splits)))
    for row, s in enumerate(splits):
        total = programs * s
        colour = COLORS["kv"] if s == chosen else COLORS["tail"] if s in allowed else COLORS["padding"]
        for wave in range(cdiv(total, slots)):
            filled = min(slots, total - wave * slots)
            ax.barh(row, slots, left=wave * slots, height=0.6, color="white", edgecolor="black", lw=0.8)
            ax.barh(row, filled, left=wave * slots, height=0.6, color=colour, edgecolor="black", lw=0.8)
        eff = wave_efficiency(total, slots)
        mark = "\nchosen" if s == chosen else "" if s in allowed else "\ntoo small"
        ax.text(most_waves * slots * 1.02, row, f"{eff:.0%}{mark}", va="center", fontsize=10)
    ax.set_yticks(range(len(splits)), [f"{s} split{'s' if s > 1 else ''}\n{programs * s} programs"
                                       for s in splits], fontsize=10)
    ax.invert_yaxis()
    ax.set_xlim(0, most_waves * slots * 1.3)
    ax.set_xticks([w * slots for w in range(most_waves + 1)])
    ax.set_xlabel(wrap(f"seats, {sms} SMs x {per_sm} = {slots} a wave; right: how full the waves are "
                       f"(the rule takes the fewest splits within 85% of the best, {best:.0%})",
                       FIGURE_WIDTH - 1, 10),
                  fontsize=10)
    ax.set_title(wrap(f"{programs} programs{' on ' + gpu if gpu else ''}, in waves", FIGURE_WIDTH, 11),
                 fontsize=11)
    fig.tight_layout()
    return fig


def varlen_launch(chunks: list[int], contexts: list[int], group: int, num_splits: int, tile: int,
                  tile_m: int = 16, split_q: int = VARLEN_SPLIT_Q):
    """Chapter 9: one launch of ``paged_attention_varlen`` over a mixed batch, for one KV head.

    One row per program of the grid (``launch.varlen_grid``: the tiles, then splits 1 and up of each
    sequence; from shapes alone), top to bottom: the bar is the keys the program reads (x axis:
    key position), coloured by sequence; its label says which new tokens it owns (``tile_q =
    tile_m // group`` tokens x the group's heads make its ``tile_m`` rows) and, for a split
    sequence's programs, which split. Programs that exit at once are grey rows marked "exits".
    """
    tile_q = tile_m // group
    programs = varlen_programs(chunks, contexts, tile_q, num_splits, tile, min(split_q, tile_q))
    palette = [COLORS["kv"], COLORS["tail"], COLORS["shared"], COLORS["other"], COLORS["accent"],
               COLORS["padding"]]
    longest = max(contexts)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 1.4 + 0.32 * len(programs)))
    labels = []
    for row, p in enumerate(programs):
        colour = palette[p["seq"] % len(palette)]
        decode = chunks[p["seq"]] == 1
        if p["kind"] == "exits":
            ax.text(longest * 0.01, row, "exits at once", va="center", fontsize=10, color=COLORS["external"])
            what = f"seq {p['seq']}"
        else:
            start, stop = p["keys"]
            split = f"split {p['split']}" if p["kind"] == "split" else ""
            if stop > start:
                ax.barh(row, stop - start, left=start, color=colour, height=0.7, edgecolor="white")
                if split:
                    ax.text(stop + longest * 0.01, row, split, va="center", fontsize=10)
            else:
                ax.text(longest * 0.01, row, f"{split}: no keys (weight 0)", va="center",
                        fontsize=10, color=COLORS["external"])
            lo, hi = p["tokens"]
            if not decode:                               # the causal edge: the tile's first new token
                ax.plot([contexts[p["seq"]] - chunks[p["seq"]] + lo] * 2, [row - 0.35, row + 0.35],
                        color="black", lw=1.5)
            what = f"seq {p['seq']} " + ("decode" if decode else f"new {lo}-{hi - 1}")
        labels.append(f"{p['tile']}" + (f".{p['split']}" if num_splits > 1 else "") + f" {what}")
    ax.set_yticks(range(len(programs)), labels, fontsize=10)
    ax.set_ylabel("program (tile.split)", fontsize=10)
    ax.invert_yaxis()
    ax.set_xlim(0, longest * 1.18)
    ax.set_xlabel(wrap("key position read by the program (black tick: the causal edge of a chunk's tile)",
                       0.75 * FIGURE_WIDTH, 10), fontsize=10)
    # two short lines; the batch's sequences (which decode, which bring a chunk) go in the caption
    ax.set_title(f"One launch, one K/V head: {len(programs)} programs\n"
                 f"(tiles of {tile_q} tokens x {group} heads, {num_splits} splits)", fontsize=10)
    fig.tight_layout()
    return fig


_BATCH_COLOURS = [COLORS["kv"], COLORS["tail"], COLORS["shared"], COLORS["other"], COLORS["accent"],
                  COLORS["padding"]]


def read_bench_csv(path: str | Path) -> list[dict]:
    """The rows written by ``python -m pagedlib.bench attention``, with numbers parsed."""
    with Path(path).open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def kernel_bandwidth(rows: list[dict], peak_gbs: float | None = None, gpu: str | None = None,
                     block_size: int | None = None):
    """Achieved memory bandwidth of paged decode (solid) and contiguous SDPA (dashed) vs context length.

    ``rows`` are benchmark rows (dicts with batch, context, block_size, paged_gbs, sdpa_gbs), e.g.
    from :func:`read_bench_csv`; one line per batch size, for one ``block_size`` (default: the
    smallest in the rows). ``peak_gbs`` draws the GPU's peak bandwidth as a ceiling.
    """
    block_size = block_size or min(r["block_size"] for r in rows)
    rows = [r for r in rows if r["block_size"] == block_size]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 5.4), layout="constrained")
    for colour, batch in zip(_BATCH_COLOURS * 4, sorted({r["batch"] for r in rows})):
        mine = sorted((r for r in rows if r["batch"] == batch), key=lambda r: r["context"])
        ctx = [r["context"] for r in mine]
        ax.plot(ctx, [r["paged_gbs"] for r in mine], "o-", color=colour, label=f"paged, batch {int(batch)}")
        ax.plot(ctx, [r["sdpa_gbs"] for r in mine], "s--", color=colour, alpha=0.6,
                label=f"SDPA, batch {int(batch)}")
    if peak_gbs:
        levels = (1.0, 0.7)
        for level in levels:
            ax.axhline(level * peak_gbs, color=COLORS["external"], lw=1, ls="-" if level == 1 else ":")
        # named on a right-hand axis, where no line or marker can sit on them
        names = ax.secondary_yaxis("right")
        names.set_yticks([level * peak_gbs for level in levels], ["peak", "70% target"], fontsize=10,
                         color=COLORS["external"])
        names.tick_params(length=0)
        ax.set_ylim(0, peak_gbs * 1.1)
    contexts = sorted({r["context"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(contexts, [str(int(c)) for c in contexts])
    ax.minorticks_off()
    ax.set_xlabel(f"context (tokens per sequence, pages of {int(block_size)})")
    ax.set_ylabel("achieved bandwidth (GB/s)")
    where = f" on {gpu}" if gpu else ""
    ax.set_title(wrap(f"Decode{where}: paged vs SDPA", FIGURE_WIDTH, 12))
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=10,
               frameon=False)
    ax.grid(alpha=0.3)
    return fig


def record_bandwidth(record: dict, group: int = 4, key: str = "paged_frac_peak"):
    """The GPU record's decode bandwidth as a share of the GPU's HBM peak against batch size, one line
    per context length, for one GQA ``group`` (query heads per K/V head); ``key`` "varlen_frac_peak"
    draws the engine's kernel instead. The dotted line is the 70% goal."""
    rows = [r for r in record["bandwidth"]["rows"] if r["group"] == group]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.8), layout="constrained")
    markers = "os^D"
    for colour, marker, context in zip(_BATCH_COLOURS * 2, markers * 2, sorted({r["context"] for r in rows})):
        mine = sorted((r for r in rows if r["context"] == context), key=lambda r: r["batch"])
        ax.plot([r["batch"] for r in mine], [100 * r[key] for r in mine], marker + "-", color=colour,
                label=f"{context // 1024}K tokens")
    ax.axhline(70, color=COLORS["external"], ls=":", lw=1)
    ax.text(1, 71, "70% goal", color=COLORS["external"], fontsize=SMALLEST_FONT)
    batches = sorted({r["batch"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.minorticks_off()
    ax.set_ylim(0, 100)
    ax.set_xlabel("batch (sequences decoding)")
    ax.set_ylabel("% of HBM peak")
    ax.set_title(wrap(f"Decode bandwidth on {record['gpu']}, GQA group {group}", FIGURE_WIDTH, 12))
    ax.legend(title="context", loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def record_splits(record: dict, context: int = 16384, entry: str = "paged_attention"):
    """The GPU record's split-K sweep at one context length: the best split count's speed-up over the
    single pass (what splitting can give) and the automatic choice's (what the rule took), by batch."""
    rows = sorted((r for r in record["splits"]["rows"] if r["context"] == context and r["entry"] == entry),
                  key=lambda r: r["batch"])
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.8), layout="constrained")
    batches = [r["batch"] for r in rows]
    ax.plot(batches, [r["best_vs_single"] for r in rows], "o-", color=COLORS["kv"], label="best split count")
    ax.plot(batches, [r["auto_vs_single"] for r in rows], "s--", color=COLORS["tail"], label="automatic choice")
    ax.axhline(1, color=COLORS["external"], lw=1)
    sms = record.get("sms")
    if sms:
        full = sms / rows[0]["kv_heads"] if rows else None     # batch at which the single pass fills the SMs
        ax.axvline(full, color=COLORS["external"], ls=":", lw=1)
        ax.text(full * 0.93, ax.get_ylim()[1] * 0.5, "one program\nper SM", fontsize=SMALLEST_FONT,
                color=COLORS["external"], ha="right")
    ax.set_xscale("log", base=2)
    ticks = [b for b in batches if b & (b - 1) == 0]             # powers of two: labels that do not collide
    ax.set_xticks(ticks, [str(b) for b in ticks])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch (sequences decoding)")
    ax.set_ylabel("speed-up over one split")
    ax.set_title(wrap(f"Split-K on {record['gpu']}, {context // 1024}K tokens", FIGURE_WIDTH, 12))
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)
    return fig


if __name__ == "__main__":      # python -m pagedlib.plots.kernels: the GPU primer's picture
    out = Path(__file__).resolve().parents[2] / "book" / "images" / "gpu-memory-hierarchy.png"
    out.parent.mkdir(exist_ok=True)
    from pagedlib.plots.display import png_metadata
    fig = gpu_memory_hierarchy()      # 3x: sharp at 520 px on any screen
    fig.savefig(out, dpi=300, metadata=png_metadata(fig, 300))
    print(f"wrote {out}")
