"""Draw the intro page's "idea in one picture": the five example requests, reserve-max above, paged below.

    python scripts/intro_picture.py      # writes book/images/idea-in-one-picture.png (2x PNG)

Both panels come from pagedlib (``reserve_max_plan``, ``paged_plan``, ``plots.plot_rows``), so the
picture shows the same numbers as chapters 2 and 4; tests/test_site.py checks that the committed PNG
is current in size and sharp enough (2x).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "book" / "images" / "idea-in-one-picture.png"
LENGTHS = [512, 37, 1900, 128, 4]          # the course's five example requests
MAX_LEN, PAGE, POOL = 2048, 16, 40_960


def draw():
    """The figure: one row per request under reserve-max (top) and in pages of 16 tokens (bottom)."""
    sys.path.insert(0, str(ROOT))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pagedlib import paged_plan, reserve_max_plan
    from pagedlib.plots import plot_rows

    from matplotlib.patches import Patch

    from pagedlib.plots import COLORS, PADDING_HATCH
    from pagedlib.plots.style import FIGURE_WIDTH, fit

    reserve, paged = reserve_max_plan(LENGTHS, MAX_LEN), paged_plan(LENGTHS, PAGE)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 6.6), layout="constrained",
                                   sharex=True)
    plot_rows(reserve, width=MAX_LEN, ax=top, legend=False)    # one legend for both, below
    plot_rows(paged, width=MAX_LEN, ax=bottom, legend=False)
    for ax in (top, bottom):
        ax.set_title("")                       # plot_rows's own title; ours goes on the left
    top.set_xlabel("")
    top.set_title(f"Reserve the maximum ({MAX_LEN:,} slots each): {reserve.waste:.1%} wasted, "
                  f"{reserve.capacity(POOL)} requests fit", fontsize=12, loc="left")
    bottom.set_title(f"Pages of {PAGE} tokens, taken as tokens arrive: {paged.waste:.1%} wasted, "
                     f"{paged.capacity(POOL)} fit", fontsize=12, loc="left")
    bottom.set_xlabel(f"token slots (right: used / allocated); a pool of {POOL:,} slots")
    fig.legend(handles=[Patch(color=COLORS["kv"], label="K/V of real tokens"),
                        Patch(facecolor=COLORS["padding"], hatch=PADDING_HATCH, edgecolor="white",
                              label="internal fragmentation (never written)"),
                        Patch(color=COLORS["tail"], label="unused tail of a page"),
                        Patch(facecolor=COLORS["free"], edgecolor="#d0d0d0", label="free for others")],
               loc="outside lower center", ncol=2, fontsize=10, frameon=False)
    return fit(fig)


def main() -> None:
    from pagedlib.plots.display import png_2x

    fig = draw()
    png, width, height = png_2x(fig)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(png)
    print(f"wrote {OUT.relative_to(ROOT)}: {width}x{height} CSS px, stored at 2x")


if __name__ == "__main__":
    main()
