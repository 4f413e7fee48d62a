"""What the kernels cost a GPU: ``python -m pagedlib.bench kernels [--resources]``.

``--resources`` (no GPU needed): compile every kernel (decode, split-K, merge, prefill, write, and the
mixed-batch varlen kernel with its merge)
ahead of time with exactly the launch configuration ``pagedlib.attention.kernels.launch`` chooses, for a T4
(sm_75), an A100 (sm_80) and an H100 (sm_90), and read from each compiled binary its registers per
thread, the bytes per thread spilled to local memory and its shared memory; from those and the
GPU's per-multiprocessor limits, how many programs fit one multiprocessor at once (occupancy).

Without ``--resources``, on a GPU: the decode kernel's bandwidth with the chosen configuration and
its neighbours (half and double the tile, the other warp count, one stage fewer or more), so the
choice can be confirmed on real hardware.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

from ..attention.kernels import launch
from ..attention.kernels.launch import SM_LIMITS
from ..output import Column, Columns, TableView
from ..validation import cdiv

CAPABILITIES = (75, 80, 90)                  # T4, A100, H100
DTYPES = {"fp16": torch.float16, "fp32": torch.float32}
HEAD_DIMS = (64, 80, 128, 256)
GROUPS = (1, 4, 8)
KERNELS = ("decode", "split", "merge", "prefill", "write", "varlen", "varlen_merge")
BLOCK_SIZE = 16                              # the course's page size (vLLM's default)
WRITE_KV_HEADS = 8                           # write_kv copies all KV heads of a token: Llama-3-8B's 8
HEADER = ("kernel capability dtype head_dim group tile warps stages registers spill_bytes shared_bytes "
          "programs_per_sm")


def programs_per_sm(capability: int, registers: int, shared_bytes: int, warps: int) -> int:
    """How many programs of a kernel fit one multiprocessor at once: the tightest of three limits.

    Registers are handed out per warp in units of 256 (8 per thread), and each of the SM's four
    partitions holds a quarter of the register file; shared memory counts what CUDA reserves per
    program; warps and programs have their own caps. 0 means the kernel cannot launch at all.
    """
    lim = SM_LIMITS[capability]
    if shared_bytes > lim.shared_per_program or registers > lim.max_registers:
        return 0
    per_warp = cdiv(registers * 32, 256) * 256
    by_registers = 4 * (lim.registers // 4 // per_warp) // warps
    per_program = shared_bytes + lim.reserved_shared
    by_shared = lim.shared_per_sm // per_program if per_program else lim.max_programs
    return min(by_registers, by_shared, lim.max_warps // warps, lim.max_programs)


# ---- compiling without a GPU ------------------------------------------------------------------
# Triton decides at import whether its own library functions (tl.max, tl.sum, ...) are interpreted,
# and a process with interpreted ones cannot compile. pagedlib turns the interpreter on where there
# is no GPU, so the compiling happens in a child process that imports triton before anything else.

CHILD = ("import os, sys; os.environ.pop('TRITON_INTERPRET', None); import triton; "
         "from pagedlib.bench.kernels import compile_jobs; compile_jobs(sys.stdin, sys.stdout)")
_RESULTS: dict[tuple, tuple[int, int, int]] = {}     # (kernel, capability, dtype, meta) -> resources


def jit_kernels() -> dict:
    """The kernels as ``JITFunction`` objects, loaded again as a private package with the
    interpreter off while their ``@triton.jit`` decorators run (importing pagedlib without a GPU
    turns it on, and interpreted kernels cannot be compiled)."""
    root = Path(launch.__file__).parent
    package = types.ModuleType("_pagedlib_compiled_kernels")
    package.__path__ = [str(root)]
    sys.modules[package.__name__] = package
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        modules = {}
        for name in ("decode", "split_k", "prefill", "write_kv", "varlen"):
            spec = importlib.util.spec_from_file_location(f"{package.__name__}.{name}", root / f"{name}.py")
            modules[name] = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = modules[name]
            spec.loader.exec_module(modules[name])
    finally:
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved
    return dict(decode=modules["decode"].decode_kernel, split=modules["split_k"].split_kernel,
                merge=modules["split_k"].merge_kernel, prefill=modules["prefill"].prefill_kernel,
                write=modules["write_kv"].write_kv_kernel, varlen=modules["varlen"].varlen_kernel,
                varlen_merge=modules["varlen"].varlen_merge_kernel)


# argument types as the launchers pass them; the rest are K/V-dtype pointers or int32 strides
ARG_TYPES = {"block_tables": "*i32", "seq_lens": "*i32", "query_start_loc": "*i32", "slot_mapping": "*i64",
             "partial_out": "*fp32", "partial_lse": "*fp32", "scale": "fp32", "qk_scale": "fp32", "num_splits": "i32",
             "num_seqs": "i32"}
UNALIGNED = {"stride_bt", "scale", "qk_scale", "num_splits", "num_seqs"}   # a block table row can be any length


def _signature(fn, dtype: str) -> tuple[dict, dict]:
    """Types of every argument, and the 16-divisibility the JIT would see: torch's allocations are
    16-byte aligned and every stride is a multiple of a head dim (64, 80, 128, 256 all divide by 16)."""
    signature, attrs = {}, {}
    for i, p in enumerate(fn.params):
        if p.is_constexpr:
            signature[p.name] = "constexpr"
            continue
        signature[p.name] = ARG_TYPES.get(p.name, "i32" if p.name.startswith("stride") else f"*{dtype}")
        if p.name not in UNALIGNED:
            attrs[(i,)] = [["tt.divisibility", 16]]
    return signature, attrs


def cuobjdump() -> str:
    """The path of the ``cuobjdump`` that ships in the triton wheel (NVIDIA's binary inspector)."""
    import triton
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: this triton wheel has no NVIDIA tools; install "
                                "triton's Linux x86-64 wheel to read registers and spills")
    return str(path)


def _compile_one(kernels: dict, kernel: str, capability: int, dtype: str, meta: dict) -> tuple[int, int, int]:
    """(registers per thread, spill bytes per thread, shared bytes per program) of one compiled kernel.

    The spill bytes are the per-thread local memory (cuobjdump's STACK + LOCAL), where registers
    that do not fit go; Triton's own ``n_spills`` reads the same attribute on a GPU. Shared memory is
    Triton's dynamic allocation plus any static shared memory.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = kernels[kernel]
    options = dict(meta)
    constexprs = {p.name: options.pop(p.name) for p in fn.params if p.is_constexpr}
    signature, attrs = _signature(fn, dtype)
    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                              target=GPUTarget("cuda", capability, 32), options=options)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([cuobjdump(), "--dump-resource-usage", cubin.name], capture_output=True,
                               text=True, check=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
    if found is None:
        raise RuntimeError(f"cannot read the resource usage of {kernel} for sm_{capability}: {usage!r}")
    registers, stack, static_shared, local = map(int, found.groups())
    return registers, stack + local, compiled.metadata.shared + static_shared


PTX_PATTERNS = {"fma": r"\bfma\.rn\.f32\b", "mma": r"\b(?:mma\.sync|wgmma\.mma_async)\b"}


def ptx_jobs(jobs, results) -> None:
    """The child process of :func:`ptx_counts`: one JSON job ``[kernel, capability, dtype, meta]``
    per line in, one JSON ``{pattern name: count in the PTX}`` per line out."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernels = jit_kernels()
    for line in jobs:
        kernel, capability, dtype, meta = json.loads(line)
        fn, options = kernels[kernel], dict(meta)
        constexprs = {p.name: options.pop(p.name) for p in fn.params if p.is_constexpr}
        signature, attrs = _signature(fn, dtype)
        ptx = triton.compile(ASTSource(fn, signature, constexprs, attrs),
                             target=GPUTarget("cuda", capability, 32), options=options).asm["ptx"]
        results.write(json.dumps({k: len(re.findall(p, ptx)) for k, p in PTX_PATTERNS.items()}) + "\n")
        results.flush()


PTX_CHILD = ("import os, sys; os.environ.pop('TRITON_INTERPRET', None); import triton; "
             "from pagedlib.bench.kernels import ptx_jobs; ptx_jobs(sys.stdin, sys.stdout)")


def ptx_counts(jobs: list[tuple]) -> list[dict]:
    """For each ``(kernel, capability, dtype, meta)``, compiled ahead of time (no GPU needed): how
    many fp32 fused multiply-adds (``fma``) and tensor-core instructions (``mma``) its PTX holds.
    The PTX is one thread's code, each loop body once: ``fma * 32 * num_warps`` is the program's
    multiply-adds per step of its loop."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = str(Path(launch.__file__).parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    lines = "".join(json.dumps(list(job)) + "\n" for job in jobs)
    done = subprocess.run([sys.executable, "-c", PTX_CHILD], input=lines, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"compiling the kernels failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def compile_jobs(jobs, results) -> None:
    """The child process: one JSON job ``[kernel, capability, dtype, meta]`` per line in, one JSON
    ``[registers, spill_bytes, shared_bytes]`` per line out."""
    kernels = jit_kernels()
    for line in jobs:
        kernel, capability, dtype, meta = json.loads(line)
        results.write(json.dumps(_compile_one(kernels, kernel, capability, dtype, meta)) + "\n")
        results.flush()


REPORT_MIN_TRITON = (3, 3)   # compile attributes as a dict of divisibility hints; 3.2 took an AttrsDescriptor


def report_supported() -> bool:
    """Whether this triton can compile the kernels ahead of time the way :func:`compile_resources`
    asks (triton >= 3.3: the drift check saw 3.2 fail with "'dict' object has no attribute 'hash'")."""
    import triton
    return tuple(int(part) for part in triton.__version__.split(".")[:2]) >= REPORT_MIN_TRITON


def compile_resources(jobs: list[tuple]) -> list[tuple[int, int, int]]:
    """Resources of each ``(kernel, capability, dtype, meta)``: compiled in a child process, each
    configuration once per process (and Triton's on-disk cache makes a second run quick)."""
    if not report_supported():
        import triton
        raise RuntimeError(f"the resource report needs triton >= {'.'.join(map(str, REPORT_MIN_TRITON))}; "
                           f"this is triton {triton.__version__}: pip install \"triton>=3.3\"")
    keys = [(kernel, capability, dtype, json.dumps(meta, sort_keys=True)) for kernel, capability, dtype, meta in jobs]
    todo = list(dict.fromkeys(k for k in keys if k not in _RESULTS))
    if todo:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        root = str(Path(launch.__file__).parents[2])                  # the directory that holds pagedlib
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        lines = "".join(json.dumps([k, c, d, json.loads(m)]) + "\n" for k, c, d, m in todo)
        done = subprocess.run([sys.executable, "-c", CHILD], input=lines, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"compiling the kernels failed:\n{done.stderr[-3000:]}")
        for key, line in zip(todo, done.stdout.splitlines()):
            _RESULTS[key] = tuple(json.loads(line))
    return [_RESULTS[k] for k in keys]


def launch_meta(kernel: str, cfg: launch.LaunchConfig) -> dict:
    """The keyword arguments the launcher in ``pagedlib.attention.triton_backend`` passes to ``kernel``."""
    if kernel in ("decode", "split"):
        return launch.decode_meta(cfg, BLOCK_SIZE)
    if kernel == "prefill":
        return launch.prefill_meta(cfg, BLOCK_SIZE)
    if kernel == "merge":
        from ..attention.triton_backend import MAX_SPLITS
        return launch.merge_meta(cfg, MAX_SPLITS)                    # the widest merge
    if kernel == "varlen":
        return launch.varlen_meta(cfg, BLOCK_SIZE)
    if kernel == "varlen_merge":
        from ..attention.triton_backend import MAX_SPLITS
        return launch.varlen_merge_meta(cfg, MAX_SPLITS)
    return launch.write_meta(cfg.head_dim, WRITE_KV_HEADS, BLOCK_SIZE)


def _tile(kernel: str, cfg: launch.LaunchConfig) -> str:
    if kernel in ("decode", "split"):
        return str(cfg.decode_tile)
    if kernel == "prefill":
        return f"{cfg.prefill_tile_q}*{cfg.group}x{cfg.tile}"        # (new tokens * group) rows x K/V tokens
    if kernel == "varlen":
        return f"{cfg.tile_q}*{cfg.group}x{cfg.tile}"                # (new tokens * group) rows x K/V tokens
    return "-"                                                       # merge and write have no tile loop


def resource_rows(capabilities=CAPABILITIES, dtypes=tuple(DTYPES), head_dims=HEAD_DIMS, groups=GROUPS,
                  kernels=KERNELS) -> list[dict]:
    """One row per kernel x capability x dtype x head_dim x group: the launch configuration
    ``launch_config`` chooses and what the compiled kernel costs with it (see ``HEADER``)."""
    cases = [(kernel, capability, dtype, head_dim, group) for kernel in kernels for capability in capabilities
             for dtype in dtypes for head_dim in head_dims for group in groups]
    configs = [launch.launch_config(head_dim, DTYPES[dtype], group, divmod(capability, 10))
               for _, capability, dtype, head_dim, group in cases]
    metas = [launch_meta(case[0], cfg) for case, cfg in zip(cases, configs)]
    resources = compile_resources([(case[0], case[1], case[2], meta) for case, meta in zip(cases, metas)])
    rows = []
    for (kernel, capability, dtype, head_dim, group), cfg, meta, (registers, spills, shared) in zip(
            cases, configs, metas, resources):
        rows.append(dict(kernel=kernel, capability=capability, dtype=dtype, head_dim=head_dim, group=group,
                         tile=_tile(kernel, cfg), warps=meta["num_warps"], stages=meta["num_stages"],
                         registers=registers, spill_bytes=spills, shared_bytes=shared,
                         programs_per_sm=programs_per_sm(capability, registers, shared, meta["num_warps"])))
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a whitespace-separated table under ``HEADER``, columns aligned."""
    names = HEADER.split()
    lines = TableView([[str(r[n]) for n in names] for r in rows], names).text().splitlines()
    lines[0] = HEADER                                                # the header exactly, for parsers
    return "\n".join(lines)


def print_resources(capabilities=CAPABILITIES, dtypes=tuple(DTYPES), head_dims=HEAD_DIMS, groups=GROUPS,
                    kernels=KERNELS) -> None:
    """Compile and print the table; a notebook cell: ``print_resources((75, 90), ("fp16",), groups=(8,))``."""
    print(format_table(resource_rows(capabilities, dtypes, head_dims, groups, kernels)))


def problems(rows: list[dict]) -> list[str]:
    """Every row that spills or does not fit its GPU (its shared memory, or no program per SM)."""
    found = []
    for r in rows:
        what = f"{r['kernel']} sm_{r['capability']} {r['dtype']} head_dim {r['head_dim']} group {r['group']}"
        if r["spill_bytes"]:
            found.append(f"{what}: {r['spill_bytes']} bytes spilled per thread ({r['registers']} registers)")
        if r["shared_bytes"] > SM_LIMITS[r["capability"]].shared_per_program or r["programs_per_sm"] < 1:
            found.append(f"{what}: {r['shared_bytes']} bytes of shared memory, {r['programs_per_sm']} "
                         "programs per SM: it cannot launch")
    return found


# ---- bandwidth on a GPU -----------------------------------------------------------------------

def neighbours(cfg: launch.LaunchConfig) -> list[tuple[str, launch.LaunchConfig]]:
    """The chosen configuration and its neighbours: half and double the tile, the other warp count,
    one pipeline stage fewer and one more (those that exist)."""
    out = [("chosen", cfg)]
    # decode runs with decode_tile and decode_warps (launch.launch_config): vary those with the rest
    smallest = 16 if cfg.group_pad >= launch.MIN_DOT_ROWS else 1    # tl.dot wants 16; the FMA path less
    if cfg.decode_tile > smallest:
        out.append(("tile / 2", replace(cfg, tile=max(16, cfg.tile // 2), decode_tile=cfg.decode_tile // 2)))
    if cfg.decode_tile < 128:
        out.append(("tile * 2", replace(cfg, tile=cfg.tile * 2, decode_tile=cfg.decode_tile * 2)))
    other = 4 if cfg.decode_warps == 8 else 8
    out.append((f"{other} warps", replace(cfg, num_warps=other, decode_warps=other)))
    if cfg.num_stages > 1:
        out.append(("stages - 1", replace(cfg, num_stages=cfg.num_stages - 1)))
    out.append(("stages + 1", replace(cfg, num_stages=cfg.num_stages + 1)))
    return out


def time_neighbours(args: argparse.Namespace) -> list[dict]:
    """Decode bandwidth (GB/s) of each neighbour of the chosen configuration, on this GPU."""
    import triton.testing
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    from ..attention.triton_backend import paged_attention
    from .attention import decode_bytes, gpu_inputs
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    num_heads, num_kv_heads = args.heads
    paged_args, _, _ = gpu_inputs(args.batch, args.context, BLOCK_SIZE, num_heads, num_kv_heads,
                                  args.head_dim, dtype)
    chosen = launch.launch_config(args.head_dim, dtype, num_heads // num_kv_heads,
                                  launch.device_capability(paged_args[0].device))
    want = paged_attention(*paged_args, num_splits=1)
    nbytes = decode_bytes(args.batch, args.context, num_heads, num_kv_heads, args.head_dim, dtype.itemsize)
    rows = []
    for name, cfg in neighbours(chosen):
        try:
            got = paged_attention(*paged_args, num_splits=1, config=cfg)
            err = (got.float() - want.float()).abs().max().item()
            ms = triton.testing.do_bench(partial(paged_attention, *paged_args, num_splits=1, validate=False,
                                                 config=cfg))
            rows.append(dict(name=name, tile=cfg.decode_tile, warps=cfg.decode_warps, stages=cfg.num_stages,
                             us=ms * 1e3, gbs=nbytes / ms / 1e6, max_err=err))
        except (OutOfResources, CompilationError) as e:                # a neighbour that does not fit
            if name == "chosen":
                raise
            rows.append(dict(name=name, tile=cfg.decode_tile, warps=cfg.decode_warps, stages=cfg.num_stages,
                             us=float("nan"), gbs=float("nan"), max_err=float("nan"), error=str(e)[:60]))
        print(NEIGHBOUR_TABLE.line(rows[-1]), flush=True)
    return rows


NEIGHBOUR_TABLE = Columns(
    Column("name", "config", 12, left=True), Column("tile", "tile", 5), Column("warps", "warps", 6),
    Column("stages", "stages", 7), Column("us", "us", 10, "{:.1f}"), Column("gbs", "GB/s", 8, "{:.0f}"),
    Column("max_err", "max err", 9, "{:.1e}"), Column("error", "", 0, left=True))


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pagedlib.bench kernels", description=__doc__.split("\n\n")[0])
    p.add_argument("--resources", action="store_true",
                   help="compile every kernel for sm_75/80/90 and print registers, spills, shared memory")
    p.add_argument("--capability", type=int, nargs="+", default=list(CAPABILITIES), choices=sorted(SM_LIMITS))
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--heads", type=int, nargs=2, default=[32, 8], metavar=("NUM_HEADS", "NUM_KV_HEADS"))
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], default="fp16")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.resources:
        rows = resource_rows(tuple(args.capability), tuple(DTYPES), HEAD_DIMS, GROUPS, KERNELS)
        print(format_table(rows))
        found = problems(rows)
        print("\n" + ("\n".join(found) if found else f"all {len(rows)} configurations: no spills, all fit"))
        print(f"reproduce: python -m pagedlib.bench kernels {' '.join(argv)}")
        return 1 if found else 0
    from .. import runtime
    if runtime.DEVICE.type != "cuda":
        print("No CUDA GPU: timings need one. Without a GPU, run with --resources to see what each kernel "
              "costs a T4, an A100 and an H100.")
        return 0
    print(f"{runtime.gpu_name()}: decode, batch {args.batch}, context {args.context}, heads "
          f"{args.heads[0]}:{args.heads[1]}, head_dim {args.head_dim}, {args.dtype}, block_size {BLOCK_SIZE}")
    print(NEIGHBOUR_TABLE.header())
    rows = time_neighbours(args)
    timed = [r for r in rows if r["gbs"] == r["gbs"]]
    best = max(timed, key=lambda r: r["gbs"])
    print(f"\nbest: {best['name']} ({best['gbs']:.0f} GB/s); chosen: {rows[0]['gbs']:.0f} GB/s "
          f"({rows[0]['gbs'] / best['gbs']:.0%} of the best)")
    print(f"reproduce: python -m pagedlib.bench kernels {' '.join(argv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
