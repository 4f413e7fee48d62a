"""Benchmark of the paged decode kernel: ``python -m pagedlib.bench attention [options]``.

On a GPU, for every batch size x context length x block size it times (``triton.testing.do_bench``):

- ``paged``: ``pagedlib.paged_attention`` (num_splits chosen automatically) over a paged cache;
- ``sdpa``: ``torch`` scaled-dot-product attention over a *contiguous* cache of the same tokens;
- ``ref``: the plain-PyTorch reference ``paged_attention_ref`` (smaller cases only: it is slow);

and reports the achieved memory bandwidth (bytes of K/V, query and output over the time), that as a
fraction of the GPU's peak, and the speed relative to SDPA and to the reference. It prints a table,
writes a CSV and a plot. On a CPU the kernels run through the Triton interpreter, whose timings mean
nothing: there it checks correctness against the reference and says that timings need a GPU.

``--varlen`` times the one kernel for every step, ``paged_attention_varlen``, instead (GPU only):

- against the separate kernels on the same batch (``paged_attention`` for the decode rows plus
  ``paged_prefill`` for the chunks: two launches), for decode-only and mixed batches;
- the price of paging with that one kernel: the same decode batch with its pages shuffled over the
  pool, in order (identity block tables: each sequence contiguous) and in one page per sequence
  (``block_size = context``): the same kernel on the same tokens, so the difference is the paging.
"""
from __future__ import annotations

import argparse
import csv
import re
import sys
from functools import partial
from pathlib import Path

import torch

from .. import runtime
from ..memory.capacity import PEAK_BANDWIDTH_GBS   # matched against torch.cuda.get_device_name()
from ..output import Column, Columns
from ..validation import cdiv

FIELDS = ["batch", "context", "block_size", "num_splits", "paged_us", "sdpa_us", "ref_us",
          "paged_gbs", "sdpa_gbs", "paged_frac_peak", "paged_vs_sdpa", "paged_vs_ref", "max_err"]


def peak_bandwidth_gbs(name: str | None) -> float | None:
    """The peak bandwidth of a GPU from its CUDA name (e.g. 'NVIDIA A100-SXM4-80GB'), or None if unknown."""
    if not name:
        return None
    upper = name.upper()
    if "A100" in upper:
        return PEAK_BANDWIDTH_GBS["A100 80GB" if "80G" in upper else "A100 40GB"]
    if "H100" in upper:
        return PEAK_BANDWIDTH_GBS["H100 PCIe" if "PCIE" in upper else "H100"]
    for key in ("H200", "A10G", "L4", "T4"):
        if re.search(rf"\b{key}\b", upper):          # whole words: an L40S is not an L4
            return PEAK_BANDWIDTH_GBS[key]
    return None


def targets(rows: list[dict]) -> list[str]:
    """The issue's two targets, judged on the rows with context >= 2048 and batch >= 32."""
    big = [r for r in rows if r["context"] >= 2048 and r["batch"] >= 32]
    if not big:
        return ["targets need rows with context >= 2048 and batch >= 32"]
    frac = min(r["paged_frac_peak"] for r in big)
    ratio = min(r["paged_vs_sdpa"] for r in big)
    return [f"target >= 70% of peak bandwidth (context >= 2048, batch >= 32): worst {frac:.0%} "
            f"{'met' if frac >= 0.7 else 'NOT met'}",
            f"target within 10% of contiguous SDPA (same rows): worst speed ratio {ratio:.2f}x "
            f"{'met' if ratio >= 0.9 else 'NOT met'}"]


def decode_bytes(batch: int, context: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 elem_bytes: int) -> int:
    """Bytes a decode step must move: every K and V row of every sequence, the query and the output."""
    kv = 2 * batch * context * num_kv_heads * head_dim
    q_and_out = 2 * batch * num_heads * head_dim
    return (kv + q_and_out) * elem_bytes


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pagedlib.bench attention", description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--context", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--block-size", type=int, nargs="+", default=[16, 32])
    p.add_argument("--heads", type=int, nargs=2, default=[32, 8], metavar=("NUM_HEADS", "NUM_KV_HEADS"))
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], default="fp16")
    p.add_argument("--ref-max-tokens", type=int, default=64 * 2048,
                   help="time the slow PyTorch reference only up to this many cached tokens")
    p.add_argument("--out", default="bench_attention", help="file stem for the CSV and the PNG")
    p.add_argument("--varlen", action="store_true",
                   help="time paged_attention_varlen against the separate kernels, and the price of paging")
    p.add_argument("--chunk", type=int, default=VARLEN_CHUNK, help="--varlen: new tokens per prefill chunk")
    return p.parse_args(argv)


def gpu_inputs(batch: int, context: int, block_size: int, num_heads: int, num_kv_heads: int,
               head_dim: int, dtype: torch.dtype, seed: int = 0):
    """A paged cache with each sequence's pages shuffled over the pool, and the same tokens contiguous."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pages = cdiv(context, block_size)
    num_blocks = batch * pages
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.randn(shape, generator=gen, device="cuda", dtype=dtype)
    value_cache = torch.randn(shape, generator=gen, device="cuda", dtype=dtype)
    block_tables = torch.randperm(num_blocks, generator=gen, device="cuda").view(batch, pages).to(torch.int32)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    query = torch.randn(batch, num_heads, head_dim, generator=gen, device="cuda", dtype=dtype)

    def contiguous(cache):   # [batch, num_kv_heads, context, head_dim], token order restored
        rows = cache[block_tables.long()].flatten(1, 2)[:, :context]       # [batch, context, kv_heads, dim]
        return rows.transpose(1, 2).contiguous()

    return (query, key_cache, value_cache, block_tables, seq_lens), contiguous(key_cache), contiguous(value_cache)


def sdpa_decode(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """torch SDPA decode over a contiguous cache: query [batch, heads, dim], keys [batch, kv_heads, ctx, dim]."""
    q = query[:, :, None, :]                                                # [batch, heads, 1, dim]
    out = torch.nn.functional.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
    return out[:, :, 0]


def run_gpu(args: argparse.Namespace) -> list[dict]:
    import triton.testing

    from ..attention.triton_backend import decode_num_splits, paged_attention
    from ..attention.reference import paged_attention_ref

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    runtime.check_dtype(dtype)
    num_heads, num_kv_heads = args.heads
    peak = peak_bandwidth_gbs(runtime.gpu_name())
    rows = []
    for block_size in args.block_size:
        for batch in args.batch:
            for context in args.context:
                paged_args, keys, values = gpu_inputs(batch, context, block_size, num_heads, num_kv_heads,
                                                      args.head_dim, dtype)
                splits = decode_num_splits(paged_args[0], paged_args[1], paged_args[3])
                out = paged_attention(*paged_args)                          # checked once, with validation
                err = (out.float() - sdpa_decode(paged_args[0], keys, values).float()).abs().max().item()
                paged_ms = triton.testing.do_bench(partial(paged_attention, *paged_args, validate=False))
                sdpa_ms = triton.testing.do_bench(partial(sdpa_decode, paged_args[0], keys, values))
                ref_ms = (triton.testing.do_bench(partial(paged_attention_ref, *paged_args), rep=50)
                          if batch * context <= args.ref_max_tokens else float("nan"))
                nbytes = decode_bytes(batch, context, num_heads, num_kv_heads, args.head_dim, dtype.itemsize)
                paged_gbs, sdpa_gbs = nbytes / paged_ms / 1e6, nbytes / sdpa_ms / 1e6
                rows.append(dict(batch=batch, context=context, block_size=block_size, num_splits=splits,
                                 paged_us=paged_ms * 1e3, sdpa_us=sdpa_ms * 1e3, ref_us=ref_ms * 1e3,
                                 paged_gbs=paged_gbs, sdpa_gbs=sdpa_gbs,
                                 paged_frac_peak=paged_gbs / peak if peak else float("nan"),
                                 paged_vs_sdpa=sdpa_ms / paged_ms, paged_vs_ref=ref_ms / paged_ms,
                                 max_err=err))
                print(format_row(rows[-1]), flush=True)
                del paged_args, keys, values
                torch.cuda.empty_cache()
    return rows


DECODE_TABLE = Columns(
    Column("batch", "batch", 5), Column("context", "context", 7), Column("block_size", "block", 5),
    Column("num_splits", "splits", 6), Column("paged_us", "paged us", 9, "{:.1f}"),
    Column("sdpa_us", "sdpa us", 9, "{:.1f}"), Column("ref_us", "ref us", 10, "{:.1f}"),
    Column("paged_gbs", "GB/s", 8, "{:.0f}"), Column("paged_frac_peak", "of peak", 7, "{:.0%}"),
    Column("paged_vs_sdpa", "vs sdpa", 9, "{:.2f}x"), Column("paged_vs_ref", "vs ref", 9, "{:.1f}x"),
    Column("max_err", "max err", 8, "{:.1e}"))
HEADER = DECODE_TABLE.header()
format_row = DECODE_TABLE.line


# (num_heads, num_kv_heads), head_dim, block_size, seq_lens: small enough for the interpreter
CPU_TABLE = Columns(
    Column("kernel", "kernel", 22, left=True), Column("heads", "heads", 6), Column("head_dim", "head_dim", 8),
    Column("block", "block", 5), Column("seq_lens", "seq_lens", 18, left=True),
    Column("err", "max err", 8, "{:.1e}"), Column("ok", "ok", 3, left=True))
CPU_CASES = [((8, 2), 128, 16, [1, 16, 17, 300]), ((5, 1), 80, 8, [9, 64]), ((6, 3), 256, 32, [33, 2085])]


def check_cpu() -> int:
    """Correctness of every kernel path through the interpreter, on small cases; returns the exit code."""
    from ..attention.triton_backend import paged_attention, paged_attention_varlen, paged_prefill
    from ..attention.reference import paged_attention_ref, paged_prefill_ref
    from ..attention.inputs import random_paged_inputs

    print("No CUDA GPU: Triton runs through the interpreter, whose timings mean nothing. Timings need a GPU;\n"
          "checking correctness against the PyTorch reference instead (fp32, NaN in unowned slots).\n")
    print(CPU_TABLE.header())
    worst, failed = 0.0, 0
    for heads, head_dim, block_size, lens in CPU_CASES:
        x = random_paged_inputs(lens, *heads, head_dim, block_size, seed=0)
        ref = paged_attention_ref(*x.args())
        cases = [("decode single pass", paged_attention(*x.args(), num_splits=1), ref),
                 ("decode split-K (4)", paged_attention(*x.args(), num_splits=4), ref)]
        starts = torch.tensor([0, *torch.tensor(lens).clamp(max=40).cumsum(0).tolist()], dtype=torch.int32)
        query = torch.randn(int(starts[-1]), heads[0], head_dim)
        pargs = (query, x.key_cache, x.value_cache, x.block_tables, x.seq_lens, starts)
        cases.append(("prefill (chunk <= 40)", paged_prefill(*pargs), paged_prefill_ref(*pargs)))
        cases.append(("varlen (one launch)", paged_attention_varlen(*pargs), paged_prefill_ref(*pargs)))
        cases.append(("varlen split-K (4)", paged_attention_varlen(*pargs, num_splits=4), paged_prefill_ref(*pargs)))
        for name, out, want in cases:
            err = (out - want).abs().max().item()
            ok = err <= 1e-4 and bool(torch.isfinite(out).all())
            failed += not ok
            worst = max(worst, err)
            print(CPU_TABLE.line(dict(kernel=name, heads=f"{heads[0]}:{heads[1]}", head_dim=head_dim,
                                      block=block_size, seq_lens=lens, err=err, ok="yes" if ok else "NO")))
    print(f"\n{'all correct' if not failed else f'{failed} FAILED'} (worst error {worst:.1e}). "
          "For timings and bandwidth run this on a GPU: python -m pagedlib.bench attention")
    return 1 if failed else 0


# ---- the one kernel: paged_attention_varlen ------------------------------------------------------
VARLEN_FIELDS = ["what", "decode_rows", "chunks", "chunk", "context", "block_size", "layout", "us", "vs"]
MIXES = [(32, 0), (8, 4), (32, 4), (64, 2)]      # (decode rows, prefill chunks) per batch
VARLEN_CHUNK = 256                               # new tokens per prefill chunk (a chunked-prefill budget's share)


def mixed_inputs(num_decode: int, num_chunks: int, chunk: int, context: int, block_size: int, num_heads: int,
                 num_kv_heads: int, head_dim: int, dtype: torch.dtype, *, layout: str = "shuffled",
                 device=None, seed: int = 0) -> dict:
    """One step's batch: ``num_decode`` sequences with one new token and ``num_chunks`` with ``chunk``
    new ones, every sequence ``context`` tokens in the cache (decode rows first). ``layout`` places the
    pages: "shuffled" over the pool, "identity" in order (each sequence contiguous), or "one_page":
    one block of ``context`` tokens per sequence (``block_size`` is then ignored).

    Returns the varlen arguments (``args``) and the same batch for the separate kernels: ``decode``
    (``paged_attention``'s arguments) and ``prefill`` (``paged_prefill``'s, with ``max_query_len``).
    """
    device = device or runtime.DEVICE
    gen = torch.Generator().manual_seed(seed)
    if layout == "one_page":
        block_size = context
    batch = num_decode + num_chunks
    pages = cdiv(context, block_size)
    num_blocks = batch * pages
    ids = torch.randperm(num_blocks, generator=gen) if layout == "shuffled" else torch.arange(num_blocks)
    if layout not in ("shuffled", "identity", "one_page"):
        raise ValueError(f"layout must be 'shuffled', 'identity' or 'one_page'; got {layout!r}")
    block_tables = ids.view(batch, pages).to(torch.int32)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.randn(shape, generator=gen).to(dtype)
    value_cache = torch.randn(shape, generator=gen).to(dtype)
    chunks = [1] * num_decode + [chunk] * num_chunks
    query = torch.randn(sum(chunks), num_heads, head_dim, generator=gen).to(dtype)
    starts = torch.tensor([0, *torch.tensor(chunks).cumsum(0).tolist()], dtype=torch.int32)
    seq_lens = torch.full((batch,), context, dtype=torch.int32)
    to = lambda t: t.to(device)
    query, key_cache, value_cache, block_tables, seq_lens, starts = map(
        to, (query, key_cache, value_cache, block_tables, seq_lens, starts))
    d = num_decode
    prefill_starts = starts[d:] - starts[d]
    return dict(args=(query, key_cache, value_cache, block_tables, seq_lens, starts),
                decode=(query[:d], key_cache, value_cache, block_tables[:d], seq_lens[:d]),
                prefill=(query[d:], key_cache, value_cache, block_tables[d:], seq_lens[d:], prefill_starts),
                max_query_len=chunk if num_chunks else 0)


def separate_kernels(x: dict) -> torch.Tensor:
    """The same batch through the chapter 8/9 kernels: decode rows, then the chunks (two launches)."""
    from ..attention.triton_backend import paged_attention, paged_prefill
    outs = []
    if x["decode"][0].shape[0]:
        outs.append(paged_attention(*x["decode"], validate=False))
    if x["prefill"][0].shape[0]:
        outs.append(paged_prefill(*x["prefill"], max_query_len=x["max_query_len"], validate=False))
    return torch.cat(outs)


def run_varlen(args: argparse.Namespace, timer=None) -> list[dict]:
    """Rows of VARLEN_FIELDS: one kernel vs the separate kernels, then the price of paging.
    ``timer(fn) -> ms`` defaults to ``triton.testing.do_bench`` (a GPU); the tests pass a stub."""
    from ..attention.triton_backend import paged_attention_varlen
    if timer is None:
        import triton.testing
        timer = triton.testing.do_bench
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    num_heads, num_kv_heads = args.heads
    shape = (num_heads, num_kv_heads, args.head_dim, dtype)
    rows = []
    for context in args.context:
        for num_decode, num_chunks in MIXES:
            x = mixed_inputs(num_decode, num_chunks, min(args.chunk, context), context, args.block_size[0], *shape)
            one = paged_attention_varlen(*x["args"])                    # checked once, with validation
            err = (one.float() - separate_kernels(x).float()).abs().max().item()
            if err > 2e-2:
                raise AssertionError(f"paged_attention_varlen differs from the separate kernels by {err:.2e}")
            one_ms = timer(partial(paged_attention_varlen, *x["args"], validate=False))
            sep_ms = timer(partial(separate_kernels, x))
            rows.append(dict(what="one kernel vs separate", decode_rows=num_decode, chunks=num_chunks,
                             chunk=x["max_query_len"], context=context, block_size=args.block_size[0],
                             layout="shuffled", us=one_ms * 1e3, vs=sep_ms / one_ms))
            print(format_varlen_row(rows[-1]), flush=True)
        batch = MIXES[0][0]
        times = {}
        for layout in ("identity", "shuffled", "one_page"):
            for block_size in (args.block_size if layout != "one_page" else [context]):
                x = mixed_inputs(batch, 0, 1, context, block_size, *shape, layout=layout)
                times[layout, block_size] = timer(partial(paged_attention_varlen, *x["args"], validate=False))
        base = times["one_page", context]
        for (layout, block_size), ms in times.items():
            rows.append(dict(what="price of paging", decode_rows=batch, chunks=0, chunk=0, context=context,
                             block_size=block_size, layout=layout, us=ms * 1e3, vs=base / ms))
            print(format_varlen_row(rows[-1]), flush=True)
    return rows


VARLEN_TABLE = Columns(
    Column("what", "what", 24, left=True), Column("decode_rows", "decode", 6), Column("chunks", "chunks", 6),
    Column("chunk", "chunk", 5), Column("context", "context", 7), Column("block_size", "block", 6),
    Column("layout", "layout", 9, left=True), Column("us", "us", 9, "{:.1f}"), Column("vs", "vs", 7, "{:.2f}x"))
"""``vs``: the separate kernels' time over the one kernel's (> 1: one kernel is faster), or for the
price of paging one page per sequence's time over this layout's (< 1: paging costs)."""
VARLEN_HEADER = VARLEN_TABLE.header()
format_varlen_row = VARLEN_TABLE.line


def main_varlen(args: argparse.Namespace, argv: list[str]) -> int:
    print(f"{runtime.gpu_name()}: paged_attention_varlen; heads {args.heads[0]}:{args.heads[1]}, head_dim "
          f"{args.head_dim}, {args.dtype}; vs = separate kernels' time / one kernel's (one kernel vs "
          f"separate), or one page per sequence's time / this layout's (price of paging)\n{VARLEN_HEADER}")
    rows = run_varlen(args)
    csv_path = Path(f"{args.out}_varlen.csv")
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=VARLEN_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nwrote {csv_path}\nreproduce: python -m pagedlib.bench attention " + " ".join(argv))
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if runtime.DEVICE.type != "cuda":
        return check_cpu()
    if args.varlen:
        return main_varlen(args, argv)
    name = runtime.gpu_name()
    peak = peak_bandwidth_gbs(name)
    print(f"{name}: peak bandwidth {peak or 'unknown'} GB/s; heads {args.heads[0]}:{args.heads[1]}, "
          f"head_dim {args.head_dim}, {args.dtype}\n{HEADER}")
    rows = run_gpu(args)
    csv_path, png_path = Path(f"{args.out}.csv"), Path(f"{args.out}.png")
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    from ..plots.kernels import kernel_bandwidth
    kernel_bandwidth(rows, peak_gbs=peak, gpu=name).savefig(png_path, dpi=120, bbox_inches="tight")
    print("\n" + "\n".join(targets(rows)))
    print(f"\nwrote {csv_path} and {png_path}\nreproduce: python -m pagedlib.bench attention "
          + " ".join(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
