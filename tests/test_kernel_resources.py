"""The launch configuration (pagedlib.attention.kernels.launch) and what it costs a GPU (pagedlib.bench.kernels).

These tests pin what a configuration must do, not today's tuning: any tile, warp count or stage count
passes as long as the kernels' rules hold (tiles are powers of two that ``tl.dot`` and ``tl.arange``
accept and that cover the head dim and the GQA group) and, compiled ahead of time for a T4 (sm_75),
an A100 (sm_80) and an H100 (sm_90), every kernel spills nothing and fits the GPU's shared memory and
register file. A retune that keeps inside the hardware passes; one that spills or overflows fails,
and says which kernel, GPU, dtype, head dim and group. No GPU needed: registers, spills and shared
memory are read from the compiled binaries with the triton wheel's cuobjdump. The compile tests are
``slow`` (they run in ``make test`` and CI, whose Triton cache keeps a second run quick).
"""
import dataclasses
import inspect
import itertools

import pagedlib  # noqa: F401, I001  (first: sets TRITON_INTERPRET before triton is imported)
import pytest
import torch
import triton.language as tl
from pagedlib.attention.kernels import decode, launch, prefill, split_k, varlen, write_kv
from pagedlib.attention.kernels.launch import INTERPRETER, SM_LIMITS, LaunchConfig, launch_config
from pagedlib.bench import kernels as bench

T4, A100, H100 = (7, 5), (8, 0), (9, 0)
CAPABILITIES = [T4, A100, (8, 6), (8, 9), H100]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
HEAD_DIMS = [8, 32, 64, 80, 96, 112, 128, 192, 256]
GROUPS = [1, 2, 4, 5, 8, 16, 32, 64]
KERNELS = dict(decode=decode.decode_kernel, split=split_k.split_kernel, merge=split_k.merge_kernel,
               prefill=prefill.prefill_kernel, write=write_kv.write_kv_kernel, varlen=varlen.varlen_kernel,
               varlen_merge=varlen.varlen_merge_kernel)
OPTIONS = {"num_warps", "num_stages"}                        # launch options, not constexprs
BIG_GROUP = 32                                               # a multi-query model: 32 query heads per KV head


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def constexprs(kernel) -> set[str]:
    """The ``tl.constexpr`` parameters of a kernel (compiled or interpreted alike)."""
    return {name for name, p in inspect.signature(kernel.fn).parameters.items() if p.annotation is tl.constexpr}


# ---- what every configuration must satisfy -------------------------------------------------------
@pytest.mark.parametrize("capability", CAPABILITIES + [INTERPRETER], ids=lambda c: f"sm{c[0]}{c[1]}" if c else "interp")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_every_configuration_follows_the_kernels_rules(capability, dtype):
    for head_dim, group in itertools.product(HEAD_DIMS, GROUPS):
        cfg = launch_config(head_dim, dtype, group, capability)
        case = f"head_dim {head_dim}, group {group}: {cfg}"
        # the padded head dim covers the head dim, as a power of two of at least 16 (tl.dot), and no wider
        assert is_power_of_two(cfg.head_dim_pad) and cfg.head_dim_pad >= max(16, head_dim), case
        assert cfg.head_dim_pad < 2 * max(16, head_dim), case
        # the decode tile holds the whole GQA group; padded to the 16 rows tl.dot wants on tensor
        # cores only: on CUDA cores (a T4, fp32) the padded rows would be real multiply-adds
        tensor_cores = launch.uses_tensor_cores(dtype, capability)
        assert is_power_of_two(cfg.group_pad) and cfg.group_pad >= group, case
        assert cfg.group_pad < 2 * max(launch.MIN_DOT_ROWS if tensor_cores else 1, group), case
        assert cfg.group == group and cfg.head_dim == head_dim, case
        # K/V and query tiles: powers of two (tl.arange), at least 16 (tl.dot)
        for tile in (cfg.tile, cfg.prefill_rows, cfg.varlen_rows):
            assert is_power_of_two(tile) and tile >= 16, case
        # decode's tile: the same, or (the group unpadded, below 16 rows) a power of two no larger
        assert is_power_of_two(cfg.decode_tile) and cfg.decode_tile <= cfg.tile, case
        assert cfg.decode_tile == cfg.tile or cfg.group_pad < launch.MIN_DOT_ROWS, case
        # the varlen tile packs tile_q whole tokens x the group into its varlen_rows rows
        assert cfg.tile_q >= 1 and cfg.tile_q * group <= cfg.varlen_rows, case
        assert is_power_of_two(cfg.num_warps) and 1 <= cfg.num_warps <= 32 and cfg.num_stages >= 1, case
        # fp32 keeps full precision (no TF32 rounding)
        assert (cfg.dot_precision == "ieee") == (dtype == torch.float32), case
        if capability is not INTERPRETER:
            lim = SM_LIMITS[capability[0] * 10 + capability[1]]
            assert cfg.num_warps * 32 <= 1024 and cfg.num_warps <= lim.max_warps, case
            # the K and V tiles of every pipelined stage fit one program's shared memory
            kv_bytes = 2 * cfg.num_stages * cfg.tile * cfg.head_dim_pad * dtype.itemsize
            assert kv_bytes <= lim.shared_per_program, case


@pytest.mark.parametrize("group", GROUPS)
def test_the_varlen_launch_packs_the_group_into_one_tile_per_kv_head(group):
    cfg = launch_config(128, torch.float16, group, H100)
    meta = launch.varlen_meta(cfg, 16)
    assert meta["TILE_M"] == cfg.varlen_rows and meta["TILE_Q"] == cfg.tile_q and meta["GROUP"] == group
    assert meta["TILE_Q"] * group <= meta["TILE_M"] < 2 * max(meta["TILE_Q"] * group, launch.MIN_DOT_ROWS)
    assert meta["DOT_PRECISION"] == cfg.dot_precision and meta["SPLIT_Q"] == min(launch.VARLEN_SPLIT_Q, cfg.tile_q)
    # a sequence's tiles cover its new tokens: tile_q tokens each, at most one spare per sequence but one
    for total_q, num_seqs in [(1, 1), (4, 4), (37, 3), (4096, 2)]:
        tiles = launch.varlen_grid(total_q, num_seqs, 8, cfg, 1)[0]
        assert tiles == num_seqs + (total_q - num_seqs) // cfg.tile_q and tiles * cfg.tile_q >= total_q


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_every_launch_passes_exactly_the_kernels_constexprs(kernel):
    """A meta that forgets a constexpr, or still passes a renamed one, cannot launch."""
    for capability, dtype, group in itertools.product([T4, H100, INTERPRETER], DTYPES, [1, 8, BIG_GROUP]):
        meta = bench.launch_meta(kernel, launch_config(128, dtype, group, capability))
        assert set(meta) - OPTIONS == constexprs(KERNELS[kernel]), kernel
        assert OPTIONS <= set(meta), kernel


def test_the_varlen_split_rule_counts_the_grids_tiles():
    cfg = launch_config(128, torch.float16, 8, H100)
    tiles = launch.varlen_grid(4, 4, 8, cfg, 1)[0]                           # 4 decode rows, 8 KV heads
    assert tiles == 4
    auto = launch.auto_num_splits(4, 4, 8, cfg, 8192, 132, 4)
    assert auto == launch.choose_num_splits(4 * 8, 8192 // cfg.tile, 132, 4) > 1
    # a 4096-token prefill fills the GPU: no split
    assert launch.auto_num_splits(4096, 2, 8, cfg, 8192, 132, 4) == 1


@pytest.mark.parametrize("head_dim,group,match", [(0, 1, "head_dim"), (64.0, 1, "head_dim"),
                                                  (64, 0, "group"), (64, True, "group")])
def test_bad_shapes_are_refused_by_name(head_dim, group, match):
    with pytest.raises(ValueError, match=match):
        launch_config(head_dim, torch.float16, group, H100)


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
    assert bench.programs_per_sm(90, 256, 0, 4) == 0                          # over 255 registers a thread
    assert bench.programs_per_sm(75, 255, 0, 32) == 0                         # 1,024 threads x 255 > 64K


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
    assert named["chosen"] == cfg
    knobs = {"tile": ("tile", "decode_tile"), "warps": ("num_warps", "decode_warps"), "stages": ("num_stages",)}
    for name, other in named.items():
        changed = {f for f in LaunchConfig.__dataclass_fields__ if getattr(other, f) != getattr(cfg, f)}
        turned = [k for k, fields in knobs.items() if changed & set(fields)]
        assert changed <= {f for fields in knobs.values() for f in fields}, name
        assert len(turned) == (0 if name == "chosen" else 1), name
    if "tile / 2" in named:
        assert named["tile / 2"].decode_tile * 2 == cfg.decode_tile
    assert named["tile * 2"].decode_tile == cfg.decode_tile * 2
    warps, = [other for name, other in named.items() if name.endswith(" warps")]
    assert warps.decode_warps != cfg.decode_warps


@pytest.mark.parametrize("resources,verdict,code", [((96, 0, 8192), "no spills, all fit", 0),
                                                    ((255, 64, 8192), "bytes spilled per thread", 1),
                                                    ((96, 0, 300 * 1024), "cannot launch", 1)])
def test_the_command_line_prints_the_table_and_judges_it(capsys, monkeypatch, resources, verdict, code):
    """The printing and the verdict, from given resources (each test compiles for itself, or not at all)."""
    monkeypatch.setattr(bench, "compile_resources", lambda jobs: [resources] * len(jobs))
    monkeypatch.setattr(bench, "HEAD_DIMS", (128,))
    monkeypatch.setattr(bench, "GROUPS", (8,))
    assert bench.main(["--resources", "--capability", "75", "90"]) == code
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == bench.HEADER
    assert len(printed[1:printed.index("")]) == len(bench.KERNELS) * 2 * 2
    assert verdict in "\n".join(printed[printed.index(""):])


def test_without_resources_or_a_gpu_the_command_says_what_to_run(capsys):
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


# ---- compiled for real ---------------------------------------------------------------------------
def assert_fits(rows: list[dict]) -> None:
    """No row spills, and each fits its GPU's shared memory and register file with a program to spare."""
    assert bench.problems(rows) == []
    for r in rows:
        lim = SM_LIMITS[r["capability"]]
        what = f"{r['kernel']} sm_{r['capability']} {r['dtype']} head_dim {r['head_dim']} group {r['group']}"
        assert r["registers"] <= lim.max_registers, what
        assert r["registers"] * 32 * r["warps"] <= lim.registers, what
        assert r["shared_bytes"] <= lim.shared_per_program and r["programs_per_sm"] >= 1, what


@pytest.mark.slow
def test_the_measurement_sees_a_spill():
    """A T4 given an H100's decode (64-token tile, the group padded to 16 rows): its dots on CUDA
    cores need more than 255 registers."""
    too_big = dataclasses.replace(launch_config(128, torch.float16, 4, T4), tile=64, decode_tile=64, group_pad=16)
    (registers, spills, shared), = bench.compile_resources([("decode", 75, "fp16", bench.launch_meta("decode", too_big))])
    assert registers == 255 and spills > 0


@pytest.mark.slow
def test_every_launch_configuration_compiles_for_every_gpu_without_spilling_and_fits():
    """Every kernel x sm_75/80/90 x fp16/fp32 x the table's head dims and groups, plus a 32-head group."""
    rows = bench.resource_rows()
    assert len(rows) == len(bench.KERNELS) * len(bench.CAPABILITIES) * len(bench.DTYPES) * len(bench.HEAD_DIMS) \
        * len(bench.GROUPS)
    rows += bench.resource_rows(head_dims=(128, 256), groups=(BIG_GROUP,), kernels=("decode", "split", "varlen"))
    assert_fits(rows)
    for r in rows:                                                # compiled with the launchers' own choices
        cfg = launch_config(r["head_dim"], bench.DTYPES[r["dtype"]], r["group"], divmod(r["capability"], 10))
        assert r["stages"] == cfg.num_stages or r["kernel"] in ("merge", "write", "varlen_merge"), r


# ---- a T4 decodes without padding the group: FMA per K/V byte in the PTX -----------------------------
def test_a_t4_decodes_the_gqa_group_without_padded_rows():
    """On sm_75 tl.dot lowers to fused multiply-adds (no mma in the PTX), so the 16-row padding of a
    group of 4 was 4x the work: the unpadded decode does about a quarter of the FMAs per K/V byte."""
    cfg = launch_config(128, torch.float16, 4, T4)
    assert cfg.group_pad == 4 and launch_config(128, torch.float16, 4, H100).group_pad == launch.MIN_DOT_ROWS
    now = launch.decode_meta(cfg, 16)
    padded = {**now, "GROUP_PAD": launch.MIN_DOT_ROWS, "TILE": cfg.tile, "num_warps": cfg.num_warps}   # before
    h100 = launch.decode_meta(launch_config(128, torch.float16, 4, H100), 16)
    new, old, hopper = bench.ptx_counts([("decode", 75, "fp16", now), ("decode", 75, "fp16", padded),
                                         ("decode", 90, "fp16", h100)])

    def fma_per_kv_byte(counts, meta):
        kv_bytes = 2 * meta["TILE"] * meta["HEAD_DIM_PAD"] * 2                    # K and V tiles, fp16
        return counts["fma"] * 32 * meta["num_warps"] / kv_bytes
    assert new["mma"] == old["mma"] == 0 and hopper["mma"] > 0      # CUDA cores on a T4, mma on an H100
    before, after = fma_per_kv_byte(old, padded), fma_per_kv_byte(new, now)
    assert after < before / 3, (before, after)                      # 16 rows -> 4: about 4x fewer
