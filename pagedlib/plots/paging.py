"""Figures of chapter 4, pages and page tables: a block table drawn as arrows from a sequence's
logical pages to physical pages, and an animation of a paged pool over decode steps.

Both take plain data (dicts and lists), so the notebook's own ``PagePool`` and pagedlib's
``BlockManager`` can feed them alike.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib import animation
from matplotlib.patches import Patch, Rectangle

from .style import COLORS, FIGURE_WIDTH, fit, legend_below
from ..validation import cdiv

__all__ = ["plot_block_table_arrows", "PoolFrame", "animate_pool", "animation_html"]

# one colour per sequence, in order of first appearance (Okabe-Ito, then greys)
_OWNER_COLOURS = [COLORS[c] for c in ("kv", "tail", "shared", "other", "padding", "accent")] + [
    "#6E6E6E", "#B8860B"]


def _owner_colours(owners: Sequence[Hashable]) -> dict:
    colours: dict = {}
    for owner in owners:
        if owner is not None and owner not in colours:
            colours[owner] = _OWNER_COLOURS[len(colours) % len(_OWNER_COLOURS)]
    return colours


def _block_box(ax, x, y, colour, frac, label, *, w=0.9, h=0.8, text_colour="white"):
    """A page: outlined box, filled from the left in proportion to the tokens it holds."""
    ax.add_patch(Rectangle((x, y), w, h, facecolor=COLORS["free"], edgecolor="none", zorder=2))
    if frac > 0:
        ax.add_patch(Rectangle((x, y), w * frac, h, facecolor=colour, edgecolor="none", zorder=2))
    ax.add_patch(Rectangle((x, y), w, h, facecolor="none", edgecolor="#555555", lw=0.8, zorder=3))
    if label:
        ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=12, zorder=4,
                color=text_colour if frac >= 0.75 else "black")


def plot_block_table_arrows(tables: Mapping[Hashable, Sequence[int]], lengths: Mapping[Hashable, int],
                            num_blocks: int, block_size: int, *, ax=None):
    """Each sequence's logical pages (left, one row per sequence) with an arrow to the physical page
    that holds it (right, the pool in page-id order).

    ``tables`` maps a sequence to its block table (physical page ids in logical order), ``lengths``
    to its number of tokens. A page is filled in proportion to the tokens on it; free physical pages
    are light grey.
    """
    seqs = list(tables)
    if not seqs:
        raise ValueError("tables is empty: give at least one sequence's block table")
    for s in seqs:
        bad = [b for b in tables[s] if not 0 <= b < num_blocks]
        if bad:
            raise ValueError(f"tables[{s!r}] holds page ids {bad} outside 0..{num_blocks - 1} "
                             "(num_blocks); pass the pool's num_blocks")
        if len(tables[s]) != cdiv(lengths[s], block_size):
            raise ValueError(f"lengths[{s!r}] = {lengths[s]} tokens need "
                             f"{cdiv(lengths[s], block_size)} pages of {block_size}, but tables[{s!r}] "
                             f"holds {len(tables[s])}")
    colours = _owner_colours(seqs)
    owner_of = {b: s for s in seqs for b in tables[s]}
    max_logical = max(len(t) for t in tables.values())
    own = ax is None
    rows = max(num_blocks, 2 * len(seqs))
    if own:
        fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 0.36 * rows + 1.6), layout="constrained")
    fig = ax.figure
    pool_x = max_logical + 2.5
    step = rows / num_blocks

    def pool_y(b):
        return rows - (b + 1) * step + (step - 0.8) / 2

    def fill(s, i):
        return min(block_size, lengths[s] - i * block_size) / block_size

    for b in range(num_blocks):
        s = owner_of.get(b)
        if s is None:
            _block_box(ax, pool_x, pool_y(b), COLORS["free"], 0, f"{b}")
        else:
            i = list(tables[s]).index(b)
            _block_box(ax, pool_x, pool_y(b), colours[s], fill(s, i), f"{b}")
    for row, s in enumerate(seqs):
        y = rows - (row + 0.5) * rows / len(seqs) - 0.4
        ax.text(-0.3, y + 0.4, f"{s}\n{lengths[s]} tokens", ha="right", va="center", fontsize=12,
                color=colours[s])
        for i, b in enumerate(tables[s]):
            _block_box(ax, i, y, colours[s], fill(s, i), f"{i}")
            ax.annotate("", xy=(pool_x, pool_y(b) + 0.4), xytext=(i + 0.45, y + 0.4), zorder=1,
                        arrowprops=dict(arrowstyle="->", color=colours[s], lw=1.1, alpha=0.8))
    ax.text(max_logical / 2, rows + 0.35, "logical pages (label: logical index)", ha="center",
            va="bottom", fontsize=12)
    ax.text(pool_x + 0.45, rows + 0.35, "physical pages\n(label: page id)", ha="center",
            va="bottom", fontsize=12)
    ax.set_xlim(-2.6, pool_x + 1.6)
    ax.set_ylim(-0.3, rows + 1.6)
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    used = len(owner_of)
    ax.set_title(f"Block tables: {len(seqs)} sequences in {used} of {num_blocks} pages of "
                 f"{block_size} tokens", fontsize=12)
    handles = [Patch(color=colours[s], label=f"{s}'s pages") for s in seqs]
    handles.append(Patch(facecolor=COLORS["free"], edgecolor="#555555", label="free page"))
    if own:
        legend_below(fig, handles, fontsize=12)
    else:
        ax.legend(handles=handles, loc="lower left", ncol=min(len(handles), 2), fontsize=12,
                  frameon=False)
    return fit(fig)


@dataclass
class PoolFrame:
    """The paged pool after one decode step, for :func:`animate_pool`.

    ``owners[b]`` is the sequence holding physical page ``b`` (None when free) and ``fill[b]`` the
    tokens on it. ``running`` and ``waiting`` name the sequences in each state; ``note`` says what
    happened in this step (arrivals, finishes, a request that had to wait).
    """
    step: int
    owners: list
    fill: list[int]
    running: list = field(default_factory=list)
    waiting: list = field(default_factory=list)
    note: str = ""


def animate_pool(frames: Sequence[PoolFrame], block_size: int, *, columns: int = 12,
                 title: str = "A paged pool under continuous batching", interval: int = 600):
    """A matplotlib ``FuncAnimation`` of the pool over ``frames``: one box per physical page,
    coloured by the sequence holding it and filled in proportion to its tokens; under it the step,
    the running and waiting sequences, and the step's note."""
    if not frames:
        raise ValueError("frames is empty: record at least one PoolFrame")
    num_blocks = len(frames[0].owners)
    if any(len(f.owners) != num_blocks or len(f.fill) != num_blocks for f in frames):
        raise ValueError("every frame needs one owner and one fill count per page")
    colours = _owner_colours([o for f in frames for o in f.owners] +
                             [s for f in frames for s in f.waiting])
    rows = cdiv(num_blocks, columns)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 0.75 * rows + 2.2))
    fig.subplots_adjust(left=0.02, right=0.98, top=0.86, bottom=0.02)

    def draw(i: int):
        frame = frames[i]
        ax.clear()
        for b, (owner, n) in enumerate(zip(frame.owners, frame.fill)):
            x, y = b % columns, rows - 1 - b // columns
            if owner is None:
                _block_box(ax, x, y, COLORS["free"], 0, "")
            else:
                _block_box(ax, x, y, colours[owner], n / block_size, str(owner))
        free = sum(o is None for o in frame.owners)
        ax.text(0, -0.45, f"step {frame.step:>2} | running: {', '.join(map(str, frame.running)) or '-'}"
                f" | waiting: {', '.join(map(str, frame.waiting)) or '-'} | free pages: {free}",
                fontsize=10, va="top", family="monospace")
        ax.text(0, -1.05, frame.note, fontsize=10, va="top", color="#333333")
        ax.set_xlim(-0.1, columns)
        ax.set_ylim(-1.5, rows)
        ax.set_axis_off()
        ax.set_title(f"{title}: {num_blocks} pages of {block_size} tokens", fontsize=11)
        return []

    return animation.FuncAnimation(fig, draw, frames=len(frames), interval=interval, blit=False)


def animation_html(anim: animation.FuncAnimation, alt: str, *, max_bytes: int = 1_500_000) -> str:
    """The animation as a self-contained HTML/JS player (``to_jshtml``) with SVG frames and
    ``alt`` text on its image; a ``ValueError`` if it would exceed ``max_bytes``."""
    if not alt or not isinstance(alt, str):
        raise ValueError("alt must say what the animation shows, in words")
    with plt.rc_context({"animation.frame_format": "svg", "svg.fonttype": "none"}):
        text = anim.to_jshtml(default_mode="once")
    plt.close(anim._fig)
    text = text.replace("<img id=", f'<img alt="{html.escape(alt, quote=True)}" '
                        'style="max-width:100%;height:auto" id=', 1)
    if len(text.encode()) > max_bytes:
        raise ValueError(f"the animation's HTML is {len(text.encode()):,} bytes, more than max_bytes="
                         f"{max_bytes:,}: record fewer frames or fewer pages")
    return text
