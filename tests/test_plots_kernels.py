"""Kernel figures and the GPU primer: each figure draws its data; the primer's numbers are computed."""
import re
import struct
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import pytest

from pagedlib.plots import kernels  # noqa: E402
from pagedlib.plots.kernels import (GPU_SPECS, attention_intensity, ridge_point,  # noqa: E402
                                    split_ranges)

ROOT = Path(__file__).resolve().parent.parent
PRIMER = ROOT / "book" / "gpu-primer.md"


pytestmark = pytest.mark.usefixtures("close_figures")   # tests/conftest.py


def test_intensity_and_ridge_point():
    assert attention_intensity(1, 1) == 1.0            # fp16 decode, one query head per K/V head
    assert attention_intensity(1, 4) == 4.0
    assert attention_intensity(512, 4) == 2048.0
    assert attention_intensity(1, 4, elem_bytes=4) == 2.0
    assert round(ridge_point("H100 SXM")) == 295 and round(ridge_point("T4")) == 203


@pytest.mark.parametrize("n,splits,tile", [(5, 4, 32), (300, 4, 32), (130, 4, 32), (1, 1, 16),
                                           (1000, 7, 64), (64, 2, 32)])
def test_split_ranges_cover_the_sequence_in_tiles(n, splits, tile):
    ranges = split_ranges(n, splits, tile)
    assert len(ranges) == splits and ranges[0][0] == 0 and ranges[-1][1] == n
    for (a, b), (c, _) in zip(ranges, ranges[1:]):
        assert b == c and a <= b
    assert all(a % tile == 0 for a, b in ranges if b > a)


def test_decode_kernel_map_draws_the_intensities_and_ridges():
    fig = kernels.decode_kernel_map(group=4, chunk=512)
    bx = fig.axes[1]
    heights = [p.get_height() for p in bx.patches]
    assert heights == [1.0, 4.0, 8.0, 2048.0]
    assert len(bx.get_lines()) == len(GPU_SPECS) and bx.get_legend() is not None
    assert bx.get_ylabel() and fig.axes[0].get_title()


def test_split_k_ranges_draws_every_token_once():
    lens = [5, 40, 130, 300]
    fig = kernels.split_k_ranges(lens, 4, 32, lses=[1.0, 2.0, float("-inf"), 0.5])
    ax, bx = fig.axes
    widths = {}
    for p in ax.patches:
        row = round(p.get_y() + p.get_height() / 2)
        widths[row] = widths.get(row, 0) + p.get_width()
    assert [widths[r] for r in range(len(lens))] == lens
    texts = [t.get_text().replace("\n", " ") for t in ax.texts]
    assert "splits 1-3 empty" in texts and ax.get_legend() is not None
    weights = [p.get_height() for p in bx.patches]
    assert weights[2] == 0 and abs(sum(weights) - 1) < 1e-9     # an empty range weighs nothing


def test_gpu_memory_hierarchy_names_every_level():
    fig = kernels.gpu_memory_hierarchy("H100 SXM")
    text = " ".join(t.get_text().replace("\n", " ") for t in fig.axes[0].texts)
    for level in ("registers", "shared mem.", "L2 cache: 50 MB", "DRAM (HBM): 80 GB", "3,350 GB/s",
                  "SM 131"):
        assert level in text
    assert fig.axes[0].get_title()


def test_primer_numbers_are_the_computed_ones():
    text = PRIMER.read_text()
    for gpu, spec in GPU_SPECS.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {gpu} |"))
        assert f"{spec['fp16_tflops']:.0f} TFLOP/s" in row and f"{spec['dram_gbs']:,.0f} GB/s" in row
        assert f"{ridge_point(gpu):.0f} FLOPs per byte" in row
    assert f"about {attention_intensity(1, 4):.0f} FLOPs per byte" in text
    assert ridge_point("H100 SXM") / attention_intensity(1, 4) > 70 and "more than 70 times" in text
    assert f"about {attention_intensity(512, 4):,.0f} FLOPs per byte" in text
    h100, t4 = GPU_SPECS["H100 SXM"], GPU_SPECS["T4"]
    assert f"has {h100['sms']:.0f}, the T4 on Colab has {t4['sms']:.0f}" in text
    assert f"{h100['smem_kb']:.0f} KB per SM on an H100, {t4['smem_kb']:.0f} KB" in text
    assert f"{h100['l2_mb']:.0f} MB on an H100, {t4['l2_mb']:.0f} MB on a T4" in text


def test_primer_figure_is_sharp_and_described():
    text = PRIMER.read_text()
    image = re.search(r"```\{figure\} (\S+)", text).group(1)
    data = (PRIMER.parent / image).read_bytes()
    width = struct.unpack(">I", data[16:20])[0]          # PNG header: width in pixels
    shown = int(re.search(r":width: (\d+)px", text).group(1))   # CSS px on a desktop
    assert width >= 2 * shown                            # sharp on a 2x screen
    alt = re.search(r":alt: (.+)", text).group(1)
    assert len(alt) > 60 and not alt.endswith(".png")


def test_tile_offsets_are_the_flat_indices_of_the_cache():
    import torch
    cache = torch.arange(6 * 4 * 2 * 8).reshape(6, 4, 2, 8)         # each element holds its offset
    tile = kernels.tile_offsets(cache.stride(), block=3, kv_head=1, block_size=4, head_dim=8)
    assert torch.equal(torch.tensor(tile), cache[3, :, 1, :])
    assert tile[3][5] == 3 * 64 + 3 * 16 + 1 * 8 + 5 == 253


def test_cache_tile_addresses_draws_the_tile_and_one_address_by_hand():
    fig = kernels.cache_tile_addresses((6, 4, 2, 8), block=3, kv_head=1)
    top, bottom = fig.axes
    texts = " ".join(t.get_text() for t in bottom.texts)
    assert "3 x 64 + 3 x 16 + 1 x 8 + 5 = 253" in texts and "rows[:, None]" in texts
    assert "(64, 16, 8, 1)" in top.get_title()
    blue = [p for p in top.patches if p.get_facecolor()[:3] == matplotlib.colors.to_rgb(kernels.COLORS["kv"])]
    assert len(blue) == 4 * 8                                          # K/V head 1 of every token


def test_the_page_size_changes_the_blocks_a_tile_spans_not_the_tile():
    from pagedlib.attention.kernels.launch import kv_tile
    one, sixteen, big = (kernels.tile_footprint(b) for b in (1, 16, 256))
    assert one["tile_tokens"] == sixteen["tile_tokens"] == big["tile_tokens"] == kv_tile(128) == 64
    assert (one["blocks_per_tile"], sixteen["blocks_per_tile"], big["blocks_per_tile"]) == (64, 4, 1)
    assert one["row_bytes"] == big["row_bytes"] == 256 and sixteen["table_entries"] == 128
    fig = kernels.block_size_kernel_side()
    left, right = fig.axes
    assert [line.get_ydata()[0] for line in left.get_lines()] == [64, 2048]
    assert all(len(set(line.get_ydata())) == 1 for line in right.get_lines())   # flat: no change
    assert left.get_legend() and right.get_legend() and right.get_xlabel()


def test_varlen_programs_cover_every_new_token_once_in_the_upper_bound_grid():
    import random

    from pagedlib.attention.kernels.launch import launch_config, varlen_grid
    rng = random.Random(9)
    for _ in range(50):
        chunks = [rng.choice([0, 1, 1, 3, rng.randrange(1, 40)]) for _ in range(rng.randrange(1, 7))]
        contexts = [c + rng.randrange(0 if c else 1, 200) for c in chunks]
        group, splits = rng.choice([1, 4, 8]), rng.choice([1, 3])
        cfg = launch_config(64, __import__("torch").float16, group, (9, 0))
        programs = kernels.varlen_programs(chunks, contexts, cfg.tile_q, splits, 64, cfg.split_q)
        assert len(programs) == varlen_grid(sum(chunks), len(chunks), 1, cfg, splits)[0]
        owned = sorted((p["seq"], t) for p in programs if p["kind"] != "exits" and p["split"] == 0
                       for t in range(*p["tokens"]))
        assert owned == [(s, t) for s, c in enumerate(chunks) for t in range(c)]
        for p in programs:                             # a split sequence's splits tile its keys exactly
            if p["kind"] == "split" and p["split"] == 0:
                ranges = [q["keys"] for q in programs if q["seq"] == p["seq"] and q["kind"] == "split"]
                assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


def test_split_waves_draws_each_split_counts_waves_and_marks_the_choice():
    from pagedlib.attention.kernels.launch import choose_num_splits
    fig = kernels.split_waves(8, 512, 132, [1, 14, 17], per_sm=1, gpu="an H100")
    ax = fig.axes[0]
    # one empty box and one filled bar per wave: 1 + 1 + 2 waves
    assert len(ax.patches) == 2 * (1 + 1 + 2)
    assert [t.get_text() for t in ax.texts] == ["6%", "85%\nchosen", "52%"]
    assert choose_num_splits(8, 512, 132) == 14
    fig = kernels.split_waves(8, 512, 132, [16, 28], per_sm=4)             # waves of 528
    assert [t.get_text() for t in fig.axes[0].texts] == ["24%", "42%\nchosen"]


def test_varlen_launch_draws_one_bar_per_program_that_reads_keys():
    chunks, contexts = [1, 6, 1, 1], [300, 70, 40, 520]
    fig = kernels.varlen_launch(chunks, contexts, group=4, num_splits=3, tile=64)
    programs = kernels.varlen_programs(chunks, contexts, 4, 3, 64, 4)
    reading = [p for p in programs if p["kind"] != "exits" and p["keys"][1] > p["keys"][0]]
    ax = fig.axes[0]
    assert len(ax.patches) == len(reading) == 9          # 3 + 3 splits, 2 chunk tiles, 1 short decode
    assert sum("exits at once" in t.get_text() for t in ax.texts) == 2   # the chunk's 2 extra splits; no spare tile
    assert sorted(round(b.get_width()) for b in ax.patches) == sorted(p["keys"][1] - p["keys"][0] for p in reading)
    assert len(ax.get_title().splitlines()) == 2          # a short title; the batch goes in the caption
