"""Figures of chapters 5-7: pages reached through block tables, shared blocks, beam trees, prefix caches.

Every function returns a matplotlib Figure with a title and a legend, fonts of 12 pt or more and a
width of FIGURE_WIDTH, so that its text is 11 px or more on a 360 px phone. None of them draws crossing arrows:
block tables are rows of boxes, a block shared by neighbouring rows is one box spanning them, and a
beam tree is laid out by generation with each beam's children right under it.
"""
from __future__ import annotations

from typing import Hashable, Mapping, Sequence

import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

from ..memory.block_manager import BlockManager, block_hash
from .style import COLORS, PADDING_HATCH, FIGURE_WIDTH, fit, legend_below
from ..validation import cdiv

__all__ = ["plot_page_mapping", "plot_padded_vs_csr", "plot_shared_tables", "plot_beam_tree", "plot_hash_chains",
           "pool_states", "plot_pool_snapshots"]

FONT = 12                      # the smallest font: 11 px or more on a 360 px phone (tests/figures.py)
_SEQ_COLOURS = [COLORS["kv"], COLORS["other"], COLORS["shared"], COLORS["accent"]]
_STATE_COLOURS = {"in use": COLORS["kv"], "cached": COLORS["accent"], "empty": COLORS["free"]}


def _bare(ax) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)


def _page(ax, x, y, filled: int, slots: int, colour, width=1.0, height=0.7) -> None:
    """A page of ``slots`` slots at (x, y): the first ``filled`` coloured, the rest hatched."""
    w = width / slots
    for r in range(slots):
        used = r < filled
        ax.add_patch(Rectangle((x + r * w, y), w, height, facecolor=colour if used else COLORS["tail"],
                               hatch=None if used else PADDING_HATCH, edgecolor="white", lw=0.8))
    ax.add_patch(Rectangle((x, y), width, height, fill=False, edgecolor="black", lw=1))


def plot_page_mapping(tables: Sequence[Sequence[int]], seq_lens: Sequence[int], num_blocks: int,
                      block_size: int):
    """Each sequence's logical pages (top) and the physical blocks they land on in the pool (bottom).

    ``tables[s]`` lists the physical blocks of sequence ``s`` (no padding), ``seq_lens[s]`` its tokens.
    Every page of the pool is labelled with the sequence and logical page it holds ("s1 p2"), so the
    mapping reads without arrows; the unused slots of last pages are hatched, free blocks grey.
    """
    if len(tables) != len(seq_lens):
        raise ValueError(f"tables and seq_lens must have one entry per sequence; got {len(tables)} "
                         f"and {len(seq_lens)}")
    owner: dict[int, tuple[int, int, int]] = {}
    for s, (table, n) in enumerate(zip(tables, seq_lens)):
        for p, block in enumerate(table):
            if not 0 <= block < num_blocks:
                raise ValueError(f"tables[{s}][{p}] = {block} is not a block of a pool of {num_blocks}")
            owner[block] = (s, p, min(block_size, n - p * block_size))
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 1.2 * len(tables) + 2.6), layout="constrained")
    step, row = 1.25, 1.6          # a page is 1 wide; labels stand on two lines so they never touch
    wide = 1.7                     # logical pages stand further apart: "p0 →10" is wider than a page
    for s, (table, n) in enumerate(zip(tables, seq_lens)):           # logical pages, one row each
        y = 2.6 + (len(tables) - 1 - s) * row
        colour = _SEQ_COLOURS[s % len(_SEQ_COLOURS)]
        ax.text(-0.2, y + 0.35, f"seq {s} ({n} tokens)", ha="right", va="center", fontsize=FONT)
        for p, block in enumerate(table):
            _page(ax, p * wide, y, min(block_size, n - p * block_size), block_size, colour)
            ax.text(p * wide + 0.5, y + 0.75, f"p{p}\n→{block}", ha="center", va="bottom",
                    fontsize=FONT, linespacing=1.0)
    for b in range(num_blocks):                                       # the pool
        x = b * step
        if b in owner:
            s, p, filled = owner[b]
            _page(ax, x, 0, filled, block_size, _SEQ_COLOURS[s % len(_SEQ_COLOURS)])
            ax.text(x + 0.5, 0.75, f"s{s}\np{p}", ha="center", va="bottom", fontsize=FONT,
                    linespacing=1.0)
        else:
            ax.add_patch(Rectangle((x, 0), 1, 0.7, facecolor=COLORS["free"], edgecolor="black"))
        ax.text(x + 0.5, -0.15, str(b), ha="center", va="top", fontsize=FONT)
    ax.text(-0.2, 0.35, "pool", ha="right", va="center", fontsize=FONT)
    ax.set_xlim(-2.6, max(num_blocks, 4) * step)
    ax.set_ylim(-0.8, 2.6 + len(tables) * row + 0.1)
    _bare(ax)
    ax.set_xlabel("pool: physical block id (label: the sequence and logical page it holds)",
                  fontsize=FONT)
    ax.set_title(f"Block tables: logical page p → physical block ({block_size} slots per block)",
                 fontsize=FONT + 1)
    handles = [Patch(color=_SEQ_COLOURS[s % len(_SEQ_COLOURS)], label=f"K/V of seq {s}")
               for s in range(len(tables))]
    handles += [Patch(facecolor=COLORS["tail"], hatch=PADDING_HATCH, label="unused slot of a last page"),
                Patch(facecolor=COLORS["free"], edgecolor="black", label="free block")]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=FONT, frameon=False)
    return fit(fig)


def plot_padded_vs_csr(tables: Sequence[Sequence[int]], seq_lens: Sequence[int], block_size: int):
    """The same block tables twice: padded with 0 into ``[num_seqs, max_blocks]`` (top) and as
    FlashInfer's CSR arrays ``indptr``, ``indices`` and ``last_page_len`` (bottom).

    Padding entries are grey and hatched; in the CSR row each sequence's pages are bracketed and
    its ``indptr`` offsets are written at the brackets' edges.
    """
    if len(tables) != len(seq_lens):
        raise ValueError(f"tables and seq_lens must have one entry per sequence; got {len(tables)} "
                         f"and {len(seq_lens)}")
    for s, (table, n) in enumerate(zip(tables, seq_lens)):
        if len(table) != cdiv(n, block_size):
            raise ValueError(f"tables[{s}] has {len(table)} pages but {n} tokens need "
                             f"{cdiv(n, block_size)} of {block_size}; give each table without padding")
    max_blocks = max(len(t) for t in tables)
    indptr = [0]
    for t in tables:
        indptr.append(indptr[-1] + len(t))
    last = [n - (len(t) - 1) * block_size for t, n in zip(tables, seq_lens)]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 0.6 * len(tables) + 3.2), layout="constrained")
    top = 2.4                                              # the padded table's bottom edge
    for s, table in enumerate(tables):
        y = top + (len(tables) - 1 - s) * 0.8
        colour = _SEQ_COLOURS[s % len(_SEQ_COLOURS)]
        ax.text(-0.2, y + 0.35, f"seq {s} ({seq_lens[s]} tokens)", ha="right", va="center",
                fontsize=FONT)
        for p in range(max_blocks):
            pad = p >= len(table)
            ax.add_patch(Rectangle((p, y), 0.95, 0.7, facecolor=COLORS["free"] if pad else colour,
                                   hatch=PADDING_HATCH if pad else None, edgecolor="black"))
            ax.text(p + 0.475, y + 0.35, "0" if pad else str(table[p]), ha="center", va="center",
                    fontsize=FONT, color="black" if pad else "white", fontweight="bold",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none") if pad else None)
    ax.text(max_blocks / 2, top + len(tables) * 0.8 + 0.05, "block_tables, padded with 0 "
            f"[{len(tables)}, {max_blocks}]", ha="center", va="bottom", fontsize=FONT)
    y = 0.6                                                # the CSR indices row
    for s, table in enumerate(tables):
        colour = _SEQ_COLOURS[s % len(_SEQ_COLOURS)]
        for j, block in enumerate(table):
            x = indptr[s] + j
            ax.add_patch(Rectangle((x, y), 0.95, 0.7, facecolor=colour, edgecolor="black"))
            ax.text(x + 0.475, y + 0.35, str(block), ha="center", va="center", fontsize=FONT,
                    color="white", fontweight="bold")
        ax.plot([indptr[s] + 0.02, indptr[s + 1] - 0.07], [y - 0.12] * 2, color=colour, lw=3)
        ax.text((indptr[s] + indptr[s + 1]) / 2, y - 0.22, str(last[s]),   # one number per
                ha="center", va="top", fontsize=FONT, gid="last_page_len")  # sequence: fits a page

    for offset in indptr:
        ax.text(offset - 0.025, y + 0.8, str(offset), ha="center", va="bottom", fontsize=FONT,
                fontweight="bold")
    ax.text(-0.2, y + 0.35, "indices", ha="right", va="center", fontsize=FONT)
    ax.text(-0.2, y + 0.95, "indptr", ha="right", va="center", fontsize=FONT)
    ax.text(-0.2, y - 0.22, "last_page_len", ha="right", va="top", fontsize=FONT)
    ax.set_xlim(-2.8, max(indptr[-1], max_blocks) + 0.3)
    ax.set_ylim(-0.6, top + len(tables) * 0.8 + 0.5)
    _bare(ax)
    n_pad = len(tables) * max_blocks - indptr[-1]
    ax.set_title(f"The same tables: padded ({n_pad} padding entries) or CSR (none)",
                 fontsize=FONT + 1)
    handles = [Patch(color=_SEQ_COLOURS[s % len(_SEQ_COLOURS)], label=f"pages of seq {s}")
               for s in range(len(tables))]
    handles.append(Patch(facecolor=COLORS["free"], hatch=PADDING_HATCH, edgecolor="black",
                         label="padding, never read"))
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=FONT, frameon=False)
    return fit(fig)


def _runs(column: Sequence[int | None]) -> list[tuple[int, int, int | None]]:
    """Runs of equal neighbours: ``[(first_row, last_row, value), ...]``."""
    runs: list[tuple[int, int, int | None]] = []
    for row, value in enumerate(column):
        if runs and runs[-1][2] == value and value is not None:
            runs[-1] = (runs[-1][0], row, value)
        else:
            runs.append((row, row, value))
    return runs


def _draw_tables(ax, bm: BlockManager, seq_ids: Sequence[Hashable], x_scale: float = 1.0,
                 label_rows: bool = True) -> bool:
    """Rows of block tables into ``ax``; a block held by neighbouring rows is one box spanning them.

    Row ``r`` occupies y in ``[-r - 1, -r]``; logical block ``i`` spans x in ``[i, i + 1) * x_scale``.
    Returns whether any block drawn is held by one table only (blue).
    """
    any_own = False
    bs = bm.block_size
    tables = [bm.block_table(s) for s in seq_ids]
    lens = [bm.num_tokens(s) for s in seq_ids]
    width = max((len(t) for t in tables), default=0)
    for i in range(width):
        column = [t[i] if i < len(t) else None for t in tables]
        for first, last, block in _runs(column):
            if block is None:
                continue
            ref = bm.ref_count(block)
            any_own |= ref == 1
            colour = COLORS["shared"] if ref > 1 else COLORS["kv"]
            filled = min(bs, lens[first] - i * bs) / bs
            x0, y0, h = i * x_scale + 0.06 * x_scale, -last - 0.92, last - first + 0.84
            w = 0.88 * x_scale
            ax.add_patch(Rectangle((x0, y0), w, h, facecolor="white", edgecolor="none"))
            ax.add_patch(Rectangle((x0, y0), w * filled, h, facecolor=colour, edgecolor="none"))
            ax.add_patch(Rectangle((x0, y0), w, h, fill=False, edgecolor="black", lw=1))
            label = f"{block}" + (f"\n×{ref}" if ref > 1 and h > 1.5 else f" ×{ref}" if ref > 1 else "")
            full = filled == 1.0                          # a partly filled box: label on white
            ax.text(x0 + w / 2, y0 + h / 2, label, ha="center", va="center", fontsize=FONT,
                    color="white" if full else "black", fontweight="bold",
                    bbox=None if full else dict(boxstyle="round,pad=0.15", fc="white", ec="none"))
    if label_rows:
        for r, (s, n) in enumerate(zip(seq_ids, lens)):
            ax.text(-0.15 * x_scale, -r - 0.5, f"{s} ({n} tokens)", ha="right", va="center",
                    fontsize=FONT)
    return any_own


def _table_legend(fig, first: Sequence = (), own: bool = True, ncols: int = 2) -> None:
    """The block tables' legend under the figure, after ``first`` (another panel's entries); the
    blue "held by one table" entry only where ``own`` (a figure with such a block)."""
    own_entry = [Patch(color=COLORS["kv"], label="block held by one table")] if own else []
    legend_below(fig, [*first, *own_entry,
                       Patch(color=COLORS["shared"], label="shared block (×ref count)"),
                       Patch(facecolor="white", edgecolor="black", label="not yet written")],
                 ncols=ncols, fontsize=FONT)


def plot_shared_tables(bm: BlockManager, seq_ids: Sequence[Hashable] | None = None, *,
                       title: str | None = None):
    """The block tables of ``seq_ids`` as rows of boxes, each labelled with its physical block.

    Column ``i`` is logical block (page) ``i``. A physical block held by neighbouring rows is drawn once,
    as one box spanning them, green with its ref count; a block held by one table is blue. Each box
    is filled as far as its tokens go.
    """
    seq_ids = list(bm.seq_ids if seq_ids is None else seq_ids)
    if not seq_ids:
        raise ValueError("seq_ids is empty: give at least one live sequence to draw")
    width = max(len(bm.block_table(s)) for s in seq_ids)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 0.55 * len(seq_ids) + 1.9), layout="constrained")
    own = _draw_tables(ax, bm, seq_ids)
    for i in range(width):
        ax.text(i + 0.5, 0.15, f"page {i}", ha="center", va="bottom", fontsize=FONT)
    ax.set_xlim(-2.6, max(width, 4) + 0.1)       # columns wide enough for "page 10"
    ax.set_ylim(-len(seq_ids) - 0.1, 0.7)
    _bare(ax)
    ax.set_xlabel(f"columns: logical pages of each table ({bm.block_size} tokens each); "
                  "box label: physical block", fontsize=FONT)
    ax.set_title(title or f"{len(seq_ids)} block tables, {bm.num_used_blocks} physical blocks in use",
                 fontsize=FONT + 1)
    _table_legend(fig, own=own)
    return fit(fig)


def plot_beam_tree(parents: Sequence[Sequence[int]], bm: BlockManager, beams: Sequence[Hashable],
                   prompt_len: int):
    """A beam search as a tree laid out by generation (top) over the final beams' block tables (bottom).

    ``parents[t][j]`` is the index, among the beams of step ``t``, of the parent of beam ``j`` of step
    ``t + 1`` (step 0 is the prompt, one beam); each step's list must be sorted, as a beam search that
    keeps children next to their parents produces, so that no two edges cross. Beams whose line
    reaches a final beam are coloured, dead ends grey. Both panels share the x axis: token position.
    ``beams`` are the final beams in ``bm``, in the order of the last step.
    """
    for t, step in enumerate(parents):
        if list(step) != sorted(step):
            raise ValueError(f"parents[{t}] = {list(step)} must be sorted so that children sit under "
                             "their parents; sort each step's parents")
        width = 1 if t == 0 else len(parents[t - 1])
        if any(not 0 <= p < width for p in step):
            raise ValueError(f"parents[{t}] names a beam outside 0..{width - 1}")
    if len(beams) != len(parents[-1]):
        raise ValueError(f"beams must be the {len(parents[-1])} beams of the last step; got {len(beams)}")
    steps = len(parents)
    alive = [set() for _ in range(steps + 1)]            # alive[t]: beams of step t with a descendant
    alive[steps] = set(range(len(parents[-1])))
    for t in range(steps, 0, -1):
        alive[t - 1] = {parents[t - 1][j] for j in alive[t]}
    k = max(len(p) for p in parents)
    bs = bm.block_size
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 6.4), layout="constrained", sharex=True,
                                      gridspec_kw={"height_ratios": [1.1, 1]})

    def y_of(t, j):                                      # step t's beams spread over the same height
        n = 1 if t == 0 else len(parents[t - 1])
        return -(j + 0.5) * k / n

    top.add_patch(Rectangle((0, y_of(0, 0) - 0.2), prompt_len, 0.4, facecolor=COLORS["shared"]))
    top.text(prompt_len / 2, y_of(0, 0) + 0.3, "prompt", ha="center", va="bottom", fontsize=FONT)
    for t in range(1, steps + 1):
        x, x_parent = prompt_len + t - 0.5, prompt_len + t - 1.5 if t > 1 else prompt_len
        for j, p in enumerate(parents[t - 1]):
            live = j in alive[t]
            colour = COLORS["kv"] if live else COLORS["external"]
            top.plot([x_parent, x], [y_of(t - 1, p), y_of(t, j)], color=colour,
                     lw=2.2 if live else 1.0, zorder=1)
            top.plot([x], [y_of(t, j)], "o", ms=6 if live else 4, color=colour, zorder=2)
    for i in range(1, (prompt_len + steps) // bs + 1):    # block boundaries, on both panels
        for ax in (top, bottom):
            ax.axvline(i * bs, color="#BBBBBB", lw=0.8, ls=":", zorder=0)
    top.set_ylim(-k - 0.3, 0.9)
    top.set_yticks([])
    top.set_title(f"Beam search, width {len(beams)}, {steps} steps: the tree by generation (top) "
                  "and the final beams' blocks (bottom)", fontsize=FONT + 1)
    for side in ("left", "right", "top"):
        top.spines[side].set_visible(False)
    tree_handles = [plt.Line2D([], [], color=COLORS["kv"], lw=2.2, marker="o",
                               label="on the line of a final beam"),
                    plt.Line2D([], [], color=COLORS["external"], marker="o",
                               label="dropped (its blocks are freed)")]
    own = _draw_tables(bottom, bm, beams, x_scale=bs, label_rows=False)
    for r in range(len(beams)):
        bottom.text(prompt_len + steps + 0.3, -r - 0.5, f"beam {r}", va="center", fontsize=FONT)
    bottom.set_ylim(-len(beams) - 0.1, 0.1)
    bottom.set_yticks([])
    for side in ("left", "right", "top"):
        bottom.spines[side].set_visible(False)
    bottom.set_xlim(-0.5, prompt_len + steps + 3.2)
    bottom.set_xlabel(f"token position (dotted lines: block boundaries every {bs} tokens; "
                      "box label: physical block)", fontsize=FONT)
    bottom.tick_params(labelsize=FONT)
    _table_legend(fig, first=tree_handles, own=own, ncols=1)                # one legend under both panels, off the tree
    return fit(fig)


def plot_hash_chains(prompts: Mapping[Hashable, Sequence[int]], block_size: int):
    """Each prompt's blocks (one row per prompt, in arrival order) with their chained names.

    A full block shows the first hex digits of its name (:func:`pagedlib.memory.block_manager.block_hash`,
    chained on the block before it); green if an earlier prompt already had that name, blue if the
    name is new. A partly filled last block has no name (hatched): it is not final yet.
    """
    if not prompts:
        raise ValueError("prompts is empty: give at least one prompt to draw")
    names = list(prompts)
    width = max(cdiv(len(p), block_size) for p in prompts.values())
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 0.95 * len(names) + 1.9), layout="constrained")
    seen: set[bytes] = set()
    for r, name in enumerate(names):
        tokens = list(prompts[name])
        parent, new = b"", set()
        for i in range(cdiv(len(tokens), block_size)):
            block = tokens[i * block_size:(i + 1) * block_size]
            x, y = i * 1.6, -r - 0.85
            if len(block) == block_size:
                parent = block_hash(parent, block)
                colour = COLORS["shared"] if parent in seen else COLORS["kv"]
                new.add(parent)
                ax.add_patch(Rectangle((x, y), 1.4, 0.7, facecolor=colour, edgecolor="black"))
                ax.text(x + 0.7, y + 0.35, parent.hex()[:4], ha="center", va="center",
                        fontsize=FONT, color="white", fontweight="bold", family="monospace")
                if i:
                    ax.annotate("", xy=(x, y + 0.35), xytext=(x - 0.2, y + 0.35),
                                arrowprops=dict(arrowstyle="->", color="black", lw=1))
            else:
                ax.add_patch(Rectangle((x, y), 1.4 * len(block) / block_size, 0.7,
                                       facecolor=COLORS["tail"], hatch=PADDING_HATCH,
                                       edgecolor="black"))
                ax.add_patch(Rectangle((x, y), 1.4, 0.7, fill=False, edgecolor="black", ls="--"))
                ax.text(x + 0.7, y - 0.05, "no name", ha="center", va="top", fontsize=FONT)
        seen |= new
        ax.text(-0.2, -r - 0.5, f"{name} ({len(tokens)} tokens)", ha="right", va="center",
                fontsize=FONT)
    ax.set_xlim(-3.0, width * 1.6)
    ax.set_ylim(-len(names) - 0.3, 0.1)
    _bare(ax)
    ax.set_xlabel(f"blocks of {block_size} tokens; each full block's name hashes the name before "
                  "it (→) and its own tokens", fontsize=FONT)
    ax.set_title("Prompts arriving one after another: block names, and which were seen before",
                 fontsize=FONT + 1)
    fig.legend(handles=[Patch(color=COLORS["kv"], label="new name"),
                        Patch(color=COLORS["shared"], label="name seen in an earlier prompt"),
                        Patch(facecolor=COLORS["tail"], hatch=PADDING_HATCH,
                              label="partly filled: no name")],
               loc="outside lower center", ncol=1, fontsize=FONT, frameon=False)
    return fit(fig)


def pool_states(bm: BlockManager) -> list[str]:
    """The state of every block of ``bm``: "in use", "cached" (free, still named) or "empty"."""
    return ["in use" if bm.ref_count(b) else "cached" if bm.is_cached(b) else "empty"
            for b in range(bm.num_blocks)]


def plot_pool_snapshots(snapshots: Sequence[tuple[str, Sequence[str], Sequence[str]]]):
    """A pool over time: one row per snapshot ``(label, states, contents)``, one column per block.

    ``states`` come from :func:`pool_states`; ``contents`` label each block with what it holds (for
    example "A0", request A's logical block 0), and are left out for empty blocks.
    """
    if not snapshots:
        raise ValueError("snapshots is empty: take at least one with pool_states")
    num_blocks = len(snapshots[0][1])
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 0.5 * len(snapshots) + 1.6), layout="constrained")
    for row, (label, states, contents) in enumerate(snapshots):
        if len(states) != num_blocks or len(contents) != num_blocks:
            raise ValueError(f"snapshot {row} ({label!r}) must give one state and one label per block")
        for b, (state, text) in enumerate(zip(states, contents)):
            if state not in _STATE_COLOURS:
                raise ValueError(f"snapshot {row}: unknown state {state!r}; use pool_states()")
            ax.add_patch(Rectangle((b, -row - 0.9), 0.92, 0.8, facecolor=_STATE_COLOURS[state],
                                   edgecolor="black", lw=0.6))
            ax.text(b + 0.46, -row - 0.5, text if state != "empty" else "", ha="center", va="center",
                    fontsize=FONT, color="white" if state == "in use" else "black")
    ax.set_yticks([-r - 0.5 for r in range(len(snapshots))], [s[0] for s in snapshots],
                  fontsize=FONT)
    ax.set_xticks([b + 0.46 for b in range(num_blocks)], range(num_blocks), fontsize=FONT)
    ax.set_xlim(-0.1, num_blocks)
    ax.set_ylim(-len(snapshots) - 0.1, 0.05)
    ax.tick_params(length=0)
    for side in ("right", "top", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("physical block id", fontsize=FONT)
    fig.suptitle(f"A pool of {num_blocks} blocks over time (top to bottom)",   # centred on the figure,
                 fontsize=FONT + 1)                                          # not on the panel
    fig.legend(handles=[Patch(color=c, label=s) for s, c in _STATE_COLOURS.items()],
               loc="outside lower center", ncol=2, fontsize=FONT, frameon=False)
    return fit(fig)
