"""The launch configuration (pagedlib.attention.kernels.launch) and what it costs a GPU (pagedlib.bench.kernels).

No GPU needed: the kernels are compiled ahead of time for a T4 (sm_75), an A100 (sm_80) and an H100
(sm_90), and the compiled binaries' registers, spills and shared memory are read with the triton
wheel's cuobjdump. The full table (``python -m pagedlib.bench kernels --resources``) compiles about
260 configurations; the test here compiles the heaviest ones (head_dim 128 and 256, every kernel,
dtype and capability) once per run, in about a minute on one core.
"""
import dataclasses

import pytest
import torch

from pagedlib.bench import kernels as bench
from pagedlib.attention.kernels import launch
from pagedlib.attention.kernels.launch import LaunchConfig, launch_config

T4, A100, H100 = (7, 5), (8, 0), (9, 0)


# ---- the choices ---------------------------------------------------------------------------------
def test_a_t4_gets_small_tiles_and_no_pipeline():
    cfg = launch_config(128, torch.float16, 4, T4)
    assert (cfg.tile, cfg.tile_m, cfg.num_warps, cfg.num_stages) == (16, 16, 4, 1)


@pytest.mark.parametrize("capability", [A100, H100, (8, 9)])
def test_tensor_core_gpus_get_16_kb_tiles_and_three_stages(capability):
    cfg = launch_config(128, torch.float16, 8, capability)
    assert (cfg.tile, cfg.tile_m, cfg.num_warps, cfg.num_stages) == (64, 32, 4, 3)
    wide = launch_config(256, torch.bfloat16, 8, capability)
    assert (wide.tile, wide.num_warps) == (32, 8)


def test_fp32_runs_on_cuda_cores_at_full_precision_with_small_tiles_everywhere():
    for capability in (T4, A100, H100):
        cfg = launch_config(64, torch.float32, 1, capability)
        assert (cfg.tile, cfg.tile_m, cfg.dot_precision) == (16, 16, "ieee")
    assert launch_config(64, torch.float16, 1, H100).dot_precision == "tf32"


def test_padding_is_one_rule():
    cfg = launch_config(80, torch.float16, 5, H100)
    assert (cfg.head_dim_pad, cfg.group_pad, cfg.group) == (128, 16, 5)
    assert launch_config(8, torch.float16, 1, H100).head_dim_pad == 16        # tl.dot needs 16


def test_more_query_rows_or_wider_heads_get_eight_warps():
    assert launch_config(128, torch.float16, 16, H100).num_warps == 4
    assert launch_config(128, torch.float16, 32, H100).num_warps == 8         # 32 rows of 128
    assert launch_config(256, torch.float16, 1, T4).num_warps == 8


def test_the_interpreter_uses_big_tiles():
    cfg = launch_config(128, torch.float32, 4, None)
    assert (cfg.tile, cfg.tile_m) == (32, 32)


@pytest.mark.parametrize("head_dim,group,match", [(0, 1, "head_dim"), (64.0, 1, "head_dim"),
                                                  (64, 0, "group"), (64, True, "group")])
def test_bad_shapes_are_refused_by_name(head_dim, group, match):
    with pytest.raises(ValueError, match=match):
        launch_config(head_dim, torch.float16, group, H100)


@pytest.mark.parametrize("capability", [T4, A100, H100], ids=["sm75", "sm80", "sm90"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("head_dim", [64, 80, 96, 112, 128, 256])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_the_varlen_tile_packs_tokens_x_group_into_decodes_rows(capability, dtype, head_dim, group):
    """paged_attention_varlen's tile is decode's: group_pad rows (16 here), now tile_q tokens x the
    group, with decode's tile, warps and stages, so its registers are decode's (no spills)."""
    cfg = launch_config(head_dim, dtype, group, capability)
    meta, decode = launch.varlen_meta(cfg, 16), launch.decode_meta(cfg, 16)
    assert meta["TILE_M"] == cfg.group_pad == 16
    assert meta["TILE_Q"] == 16 // group and meta["TILE_Q"] * group <= meta["TILE_M"]
    assert meta["SPLIT_Q"] == launch.VARLEN_SPLIT_Q
    for key in ("TILE", "HEAD_DIM_PAD", "num_stages", "DOT_PRECISION"):
        assert meta[key] == decode[key], key
    wide_fp32 = dtype == torch.float32 and head_dim > 128                       # 8 warps spilled there
    assert meta["num_warps"] == (launch.VARLEN_FP32_WIDE_WARPS if wide_fp32 else decode["num_warps"])
    merge = launch.varlen_merge_meta(cfg, 5)
    assert merge["SPLITS_PAD"] == 8 and merge["num_warps"] == launch.COPY_WARPS


def test_the_varlen_split_rule_counts_the_grids_tiles():
    cfg = launch_config(128, torch.float16, 8, H100)                             # tile_q 2
    # 4 decode rows, 8 KV heads: 4 // 2 + 4 = 6 tiles x 8 heads = 48 programs on 132 SMs: split
    assert launch.varlen_grid(4, 4, 8, cfg, 1) == (6, 8, 1)
    assert launch.varlen_num_splits(4, 4, 8, cfg, 8192, 132) == launch.choose_num_splits(6, 8, 8192, 132) > 1
    # a 4096-token prefill fills the GPU: no split
    assert launch.varlen_num_splits(4096, 2, 8, cfg, 8192, 132) == 1


# ---- occupancy arithmetic ------------------------------------------------------------------------
def test_programs_per_sm_takes_the_tightest_limit():
    # T4: 128 registers x 128 threads = 16K registers (4 of 64K); 16 KB of 64 KB shared (4); 8 by warps
    assert bench.programs_per_sm(75, 128, 16 * 1024, 4) == 4
    # registers are allocated 8 per thread at a time: 121 counts as 128
    assert bench.programs_per_sm(75, 121, 0, 4) == 4
    # 255 registers: a warp takes 8K, so 8 warps fit, 2 programs of 4 warps
    assert bench.programs_per_sm(75, 255, 0, 4) == 2
    # small kernels hit the warp cap (32 warps on a T4 = 8 programs of 4) or the program cap
    assert bench.programs_per_sm(75, 32, 0, 4) == 8
    assert bench.programs_per_sm(90, 32, 0, 1) == 32
    # an H100 reserves 1 KB per program: 227 KB asked leaves no room for a second one
    assert bench.programs_per_sm(90, 64, 227 * 1024, 4) == 1


def test_a_kernel_that_cannot_launch_fits_zero_programs():
    assert bench.programs_per_sm(75, 64, 64 * 1024 + 1, 4) == 0               # over a T4's 64 KB
    assert bench.programs_per_sm(80, 64, 164 * 1024, 4) == 0                  # over an A100's 163 KB


# ---- the table -----------------------------------------------------------------------------------
def row(**kw):
    base = dict(kernel="decode", capability=75, dtype="fp16", head_dim=128, group=8, tile="16", warps=4,
                stages=1, registers=127, spill_bytes=0, shared_bytes=16384, programs_per_sm=4)
    return base | kw


def test_the_table_has_the_exact_header_and_one_line_per_row():
    text = bench.format_table([row(), row(kernel="prefill", tile="16x16")])
    lines = text.splitlines()
    assert lines[0] == ("kernel capability dtype head_dim group tile warps stages registers spill_bytes "
                        "shared_bytes programs_per_sm")
    assert [line.split() for line in lines[1:]] == [
        ["decode", "75", "fp16", "128", "8", "16", "4", "1", "127", "0", "16384", "4"],
        ["prefill", "75", "fp16", "128", "8", "16x16", "4", "1", "127", "0", "16384", "4"]]


def test_problems_name_spills_and_overflows():
    assert bench.problems([row()]) == []
    spill, = bench.problems([row(spill_bytes=440, registers=255)])
    assert "440 bytes spilled" in spill and "sm_75" in spill
    over, = bench.problems([row(shared_bytes=65 * 1024, programs_per_sm=0)])
    assert "cannot launch" in over


def test_neighbours_change_one_thing_each():
    cfg = launch_config(128, torch.float16, 4, H100)
    named = dict(bench.neighbours(cfg))
    assert named["chosen"] == cfg and named["tile / 2"].tile == 32 and named["tile * 2"].tile == 128
    assert named["8 warps"].num_warps == 8 and named["stages - 1"].num_stages == 2
    for name, other in named.items():
        changed = [f for f in LaunchConfig.__dataclass_fields__ if getattr(other, f) != getattr(cfg, f)]
        assert len(changed) == (0 if name == "chosen" else 1), name


# ---- compiled for real ---------------------------------------------------------------------------
@pytest.mark.slow
def test_the_measurement_sees_a_spill():
    """The T4 used to get the H100's tile (64 tokens): its dots then need more than 255 registers."""
    old = dataclasses.replace(launch_config(128, torch.float16, 4, T4), tile=64)
    (registers, spills, shared), = bench.compile_resources([("decode", 75, "fp16", bench.launch_meta("decode", old))])
    assert registers == 255 and spills > 0


@pytest.mark.slow
def test_every_kernel_at_the_largest_head_dims_fits_every_gpu_without_spilling():
    rows = bench.resource_rows(head_dims=(128, 256), groups=(8,))
    assert len(rows) == len(bench.KERNELS) * 3 * 2 * 2
    assert bench.problems(rows) == []
    for r in rows:                                                # the launchers' own choices
        cfg = launch_config(r["head_dim"], bench.DTYPES[r["dtype"]], r["group"], divmod(r["capability"], 10))
        if r["kernel"] in ("decode", "split", "prefill"):
            assert (r["warps"], r["stages"]) == (cfg.num_warps, cfg.num_stages)
        assert r["registers"] <= 255 and r["programs_per_sm"] >= 1
    t4 = {r["kernel"]: r for r in rows if r["capability"] == 75 and r["dtype"] == "fp16" and r["head_dim"] == 128}
    assert t4["decode"]["tile"] == "16" and t4["prefill"]["tile"] == "16x16"


@pytest.mark.slow
def test_the_varlen_kernel_fits_every_gpu_without_spilling():
    """The varlen rows of the resource table, every capability, dtype, head_dim and group."""
    rows = bench.resource_rows(kernels=("varlen", "varlen_merge"))
    assert len(rows) == 2 * 3 * 2 * len(bench.HEAD_DIMS) * len(bench.GROUPS)
    assert bench.problems(rows) == []
    assert all(r["programs_per_sm"] >= 1 for r in rows)


@pytest.mark.slow
def test_the_command_line_prints_the_table_and_judges_it(capsys, monkeypatch):
    monkeypatch.setattr(bench, "HEAD_DIMS", (128,))              # compiled above: cached in this process
    monkeypatch.setattr(bench, "GROUPS", (8,))
    assert bench.main(["--resources", "--capability", "75", "90"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == bench.HEADER
    assert len(printed[1:printed.index("")]) == len(bench.KERNELS) * 2 * 2
    assert "no spills, all fit" in printed[-2]


def test_without_resources_or_a_gpu_the_command_says_what_to_run(capsys):
    import pagedlib
    if pagedlib.runtime.DEVICE.type == "cuda":
        pytest.skip("on a GPU the command times the neighbouring configurations")
    assert bench.main([]) == 0
    assert "--resources" in capsys.readouterr().out


def test_an_older_triton_is_told_it_cannot_make_the_report(monkeypatch):
    """triton 3.2 compiles ahead of time with another attribute form: say so, with the fix."""
    import triton
    monkeypatch.setattr(triton, "__version__", "3.2.0")
    assert not bench.report_supported()
    with pytest.raises(RuntimeError, match=r'needs triton >= 3\.3; this is triton 3\.2\.0: pip install "triton>=3\.3"'):
        bench.compile_resources([("decode", 75, "fp16", {})])
    monkeypatch.setattr(triton, "__version__", "3.9.0")
    assert bench.report_supported()
