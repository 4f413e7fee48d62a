"""The GPU record: what the kernel chapters (8, 9) and the engine chapter (10) show without a GPU.

A GPU's timings cannot be made on a CPU (the Triton interpreter's timings mean nothing), so
``python -m pagedlib.bench gpu_record`` (run by ``scripts/gpu_check.sh`` on a CUDA GPU) measures, in
one process and within a time budget, each figure as a ratio or a fraction of a physical limit:

- ``correctness``: the kernel grid compiled natively (fp16, and bf16 where the GPU has it) against
  the PyTorch reference: decode (single pass, split-K, automatic), prefill and the one varlen kernel;
- ``bandwidth``: decode bandwidth of ``paged_attention`` and of the engine's ``paged_attention_varlen``
  against the GPU's HBM peak, batch 1-256, 1K-32K tokens, GQA groups 1/4/8, beside torch's SDPA
  over a contiguous cache of the same tokens;
- ``splits``: every split count's time against the single pass, and the automatic choice's time
  against the best split count (is the rule right?), for both entry points;
- ``block_size``: the block-size sweep (8-128) at fixed work;
- ``paging``: the price of paging: shuffled pages against an identity block table (each sequence
  contiguous in the pool), the same kernel on the same tokens;
- ``varlen``: the one kernel against the separate decode and prefill kernels on mixed batches;
- ``engine``: generated tokens/s of ``pagedlib.LLM`` against transformers' continuous batching on a
  random Llama of a 1B model's shape (fp16, greedy, outputs compared);
- ``goals``: the course's promises judged on the figures above (:data:`GOALS`);
- ``launch``: the launch rules the run used on that GPU (``launch_entry``), so a chapter can tell
  whether a stored record measured today's tiles (``launch_current``).

Every section is timed against its own budget and the record is written after each one, so a run cut
short keeps what it measured. ``--dry-run`` runs every section on the CPU through the interpreter
with tiny sizes (timings meaningless) to rehearse the script before GPU minutes are spent.
``attention`` and ``block_size`` keep the rows chapters 8 and 9 show (:data:`COLUMNS`).
"""
from __future__ import annotations

import argparse
import datetime
import json
import time
import traceback
from functools import partial
from pathlib import Path

from ..output import format_value
from ..validation import cdiv

RECORD = Path(__file__).resolve().parents[1] / "data" / "gpu_record.json"
# the benchmarks as the chapters run them (pagedlib.bench.attention's options)
CHAPTER8_ARGS = ["--batch", "1", "8", "32", "--context", "512", "2048", "8192", "--block-size", "16"]
CHAPTER9_ARGS = ["--batch", "8", "--context", "4096", "--block-size", "8", "16", "32", "64"]
# (header, row key, format) of the table a chapter shows
COLUMNS = [("batch", "batch", "{:,}"), ("context", "context", "{:,}"), ("block", "block_size", "{}"),
           ("splits", "num_splits", "{}"), ("paged us", "paged_us", "{:.1f}"),
           ("sdpa us", "sdpa_us", "{:.1f}"), ("GB/s", "paged_gbs", "{:.0f}"),
           ("of peak", "paged_frac_peak", "{:.0%}"), ("vs sdpa", "paged_vs_sdpa", "{:.2f}x"),
           ("vs ref", "paged_vs_ref", "{:.1f}x")]
CAPTION = ("paged us: the kernel's time per decode step on the GPU (replayed from a CUDA graph: "
           "the Python call that launches it is not counted); GB/s: the bandwidth it reached; of peak: "
           "that as a share of the GPU's datasheet peak; vs sdpa: SDPA's time over a contiguous "
           "cache divided by the kernel's (above 1, paging is faster); vs ref: how many times faster "
           "than the PyTorch gather (n/a: not timed, the gather is only run up to 64 x 2,048 tokens); "
           "splits: the split-K choice of chapter 9.")
# printed lines of at most 60 characters: a printed output keeps its lines on the site
MISSING = ("No GPU here and no stored GPU measurement: the cell\n"
           "checked the kernel's results in the interpreter only.")
SECTIONS = ("chapters", "correctness", "bandwidth", "splits", "block_size", "paging", "varlen", "engine")
# The promises, judged on the record: (name, what it says, section, key, comparison, threshold)
GOALS = [
    ("decode_bandwidth", "decode reaches >= 70% of HBM peak at batch >= 32 with 4K-token sequences",
     "bandwidth", "worst_frac_peak_b32_4k", ">=", 0.70),
    ("paging_price", "shuffled pages within 10% of an identity block table",
     "paging", "worst_identity_over_shuffled", ">=", 0.90),
    ("engine_lead", "pagedlib's engine ahead of transformers' continuous batching",
     "engine", "ratio", ">", 1.0),
    ("correct", "every kernel of the grid matches the reference", "correctness", "failed", "==", 0),
    ("engine_fidelity", "pagedlib's greedy tokens as close to the fp32 argmax as transformers' (at most "
     "twice as many tokens more than a near-tie below it)", "engine", "far_ratio", "<=", 2.0),
]


# ---- the launch rules a record measured -----------------------------------------------------------
LAUNCH_SHAPES = (1, 4, 8)      # GQA groups at head_dim 128, fp16: the record's models


def launch_entry(capability: tuple[int, int] | None) -> dict:
    """What ``launch_config`` chooses on a GPU of this compute capability (fp16, head_dim 128, groups
    ``LAUNCH_SHAPES``): every field, by group. ``measure`` stores it as the record's ``launch``."""
    import dataclasses

    import torch

    from ..attention.kernels.launch import launch_config
    return {f"group {g}": dataclasses.asdict(launch_config(128, torch.float16, g, capability))
            for g in LAUNCH_SHAPES}


def launch_current(record: dict) -> bool:
    """True when ``record`` measured the launch rules this code applies on its GPU; False for a
    record made before the rules changed (or before records stored them)."""
    if "launch" not in record or record.get("capability") is None:
        return False
    return record["launch"] == launch_entry(tuple(record["capability"]))


def launch_changes(record: dict) -> list[str]:
    """The launch fields (group 4) that differ between the record and today's rules on its GPU,
    ``name: recorded -> now``; every field when the record stores none (then ``recorded`` is ``?``)."""
    capability = tuple(record.get("capability") or (9, 0))
    now = launch_entry(capability)["group 4"]
    then = record.get("launch", {}).get("group 4", {})
    return [f"{k}: {then.get(k, '?')} -> {v}" for k, v in now.items() if then.get(k) != v]


# ---- reading the record (the chapters) ------------------------------------------------------------
def load(path: Path | str = RECORD) -> dict | None:
    """The stored record, or None when none has been written yet."""
    path = Path(path)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    for key in ("gpu", "versions", "date", "attention", "block_size"):
        if key not in record:
            raise ValueError(f"{path} is not a GPU record (no {key!r}); rewrite it with "
                             "`python -m pagedlib.bench gpu_record` on a GPU")
    return record


def label(record: dict) -> str:
    """Short lines that say where the numbers come from: GPU, date, versions (not this machine)."""
    versions = ", ".join(f"{name} {v}" for name, v in record["versions"].items())
    return (f"Measured earlier, not on this machine:\n{record['gpu']}, {record['date']}\n{versions}")


def table_rows(rows: list[dict]) -> list[list[str]]:
    """The benchmark rows as the cells of the chapters' table."""
    return [[format_value(fmt, r[key]) for _, key, fmt in COLUMNS] for r in rows]


def show(rows: list[dict]) -> None:
    """Show benchmark rows as a table with the caption that says what each column is."""
    from ..output import show_table
    show_table(table_rows(rows), [h for h, _, _ in COLUMNS], caption=CAPTION)


def goal_lines(record: dict) -> list[str]:
    """One short line per goal: met or not, with the measured figure."""
    lines = []
    for g in record.get("goals", []):
        value = g["value"]
        shown = "not measured" if value is None else (f"{value:.2f}" if isinstance(value, float) else value)
        verdict = "met" if g["met"] else "NOT met"
        lines.append(f"{g['name']}: {shown} ({g['op']} {g['target']}): {verdict}")
    return lines


# ---- measuring ------------------------------------------------------------------------------------
class Budget:
    """Seconds left for a section; ``over()`` is True once they are spent."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def over(self) -> bool:
        return time.monotonic() > self.end


def make_timer(dry_run: bool, quick: bool = False, device_time: bool = True):
    """``timer(fn) -> ms``. On a GPU with ``device_time``: the kernels' own time, replayed from a CUDA
    graph (``triton.testing.do_bench_cudagraph``), so the Python call that launches them is not
    counted (it can take longer than a small kernel); a call that cannot be captured falls back to
    ``do_bench`` and is counted in ``timer.fallbacks``. Without ``device_time``: ``do_bench``, the
    time per call as a Python program sees it, launch overhead included. In a dry run: one call."""
    if dry_run:
        def once(fn):
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        once.fallbacks = 0
        return once
    import torch
    import triton.testing
    warmup, rep = (5, 20) if quick else (25, 100)

    def call(fn):
        return triton.testing.do_bench(fn, warmup=warmup, rep=rep)

    def graph(fn):
        # do_bench_cudagraph runs fn on a stream of its own, which does not wait for the default
        # stream: inputs still being written there (a block table from randperm) would be read
        # half-made, and a half-made block table points anywhere (an illegal address; seen on an
        # H200 before this line was added). Wait for them first.
        torch.cuda.synchronize()
        try:
            return triton.testing.do_bench_cudagraph(fn, rep=rep)
        except Exception:
            torch.cuda.synchronize()
            graph.fallbacks += 1
            return call(fn)

    graph.fallbacks = call.fallbacks = 0
    return graph if device_time else call


def decode_inputs(batch: int, context: int, block_size: int, num_heads: int, num_kv_heads: int,
                  head_dim: int, dtype, device, layout: str = "shuffled", seed: int = 0) -> dict:
    """A decode batch made on ``device`` (a GPU's pool is made there, not copied from the host):
    ``paged`` (paged_attention's arguments), ``varlen`` (paged_attention_varlen's) and a function
    ``contiguous()`` that gathers the same tokens into ``[batch, kv_heads, context, dim]`` for SDPA.
    ``layout``: "shuffled" pages over the pool, or "identity" (each sequence's pages in order)."""
    import torch
    gen = torch.Generator(device=device).manual_seed(seed)
    pages = cdiv(context, block_size)
    num_blocks = batch * pages
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    value_cache = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    ids = (torch.randperm(num_blocks, generator=gen, device=device) if layout == "shuffled"
           else torch.arange(num_blocks, device=device))
    block_tables = ids.view(batch, pages).to(torch.int32)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    query = torch.randn(batch, num_heads, head_dim, generator=gen, device=device, dtype=dtype)
    starts = torch.arange(batch + 1, dtype=torch.int32, device=device)

    def contiguous(cache):   # [batch, num_kv_heads, context, head_dim], token order restored
        rows = cache[block_tables.long()].flatten(1, 2)[:, :context]
        return rows.transpose(1, 2).contiguous()

    paged = (query, key_cache, value_cache, block_tables, seq_lens)
    return dict(paged=paged, varlen=(*paged, starts),
                contiguous=lambda: (contiguous(key_cache), contiguous(value_cache)))


def _dtype(name: str):
    import torch
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def correctness(cfg: dict, budget: Budget, log) -> dict:
    """The kernel grid against the reference (fp32 reference on the same rounded inputs)."""
    import torch

    from .. import runtime
    from ..attention.inputs import random_paged_inputs
    from ..attention.reference import paged_attention_ref, paged_prefill_ref
    from ..attention.triton_backend import paged_attention, paged_attention_varlen, paged_prefill

    rows, failed = [], 0
    for (heads, kv_heads), head_dim, block_size, lens in cfg["grid"]:
        for dname in cfg["dtypes"]:          # each shape in every dtype before the next shape
            dtype = _dtype(dname)
            tol = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 6e-2}[dname]
            if budget.over():
                log("correctness: out of time, grid cut short")
                return dict(rows=rows, failed=failed, cut_short=True)
            x = random_paged_inputs(lens, heads, kv_heads, head_dim, block_size, seed=0,
                                    device=runtime.DEVICE)
            args = [t.to(dtype) if t.is_floating_point() else t for t in x.args()]
            ref = paged_attention_ref(*[t.float() if t.is_floating_point() else t for t in args])
            starts = torch.tensor([0, *torch.tensor(lens).clamp(max=40).cumsum(0).tolist()],
                                  dtype=torch.int32, device=runtime.DEVICE)
            query = torch.randn(int(starts[-1]), heads, head_dim, device=runtime.DEVICE).to(dtype)
            pargs = (query, *args[1:], starts)
            pref = paged_prefill_ref(*[t.float() if t.is_floating_point() else t for t in pargs])
            cases = [("decode auto", partial(paged_attention, *args), ref),
                     ("decode 1 split", partial(paged_attention, *args, num_splits=1), ref),
                     ("decode 4 splits", partial(paged_attention, *args, num_splits=4), ref),
                     ("prefill", partial(paged_prefill, *pargs), pref),
                     ("varlen auto", partial(paged_attention_varlen, *pargs), pref),
                     ("varlen 4 splits", partial(paged_attention_varlen, *pargs, num_splits=4), pref)]
            for name, run, want in cases:
                try:
                    out = run().float()
                    # NaN in unowned slots: a kernel reading past an end gives NaN, not a number
                    err = (out - want).abs().max().item()
                    ok = bool(torch.isfinite(out).all()) and err <= tol
                except Exception as exc:          # a kernel that does not compile is a failure, recorded
                    err, ok = float("nan"), False
                    log(f"correctness: {name} {dname} failed to run: {exc!r}")
                failed += not ok
                rows.append(dict(kernel=name, dtype=dname, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                                 block_size=block_size, seq_lens=lens, max_err=err, ok=ok))
    log(f"correctness: {len(rows) - failed} of {len(rows)} cases within tolerance")
    return dict(rows=rows, failed=failed, cases=len(rows))


def _decode_row(batch, context, block_size, heads, kv_heads, head_dim, dtype, timer, device, peak,
                sdpa: bool = True, varlen: bool = True, ref: bool = False, call_timer=None,
                l2_bytes: int | None = None) -> dict:
    """Times one decode shape: the automatic paged kernel, the varlen kernel, SDPA contiguous
    (``timer``: device time), and with ``call_timer`` the paged kernel's time per Python call and the
    reference's. ``in_l2``: the K/V fit twice in the GPU's L2, so repeated runs read them from there."""
    import torch

    from ..attention.reference import paged_attention_ref
    from ..attention.triton_backend import paged_attention, paged_attention_varlen
    from .attention import decode_bytes, sdpa_decode

    x = decode_inputs(batch, context, block_size, heads, kv_heads, head_dim, dtype, device)
    out = paged_attention(*x["paged"])
    nbytes = decode_bytes(batch, context, heads, kv_heads, head_dim, dtype.itemsize)
    paged_ms = timer(partial(paged_attention, *x["paged"], validate=False))
    row = dict(batch=batch, context=context, block_size=block_size, heads=heads, kv_heads=kv_heads,
               group=heads // kv_heads, num_splits=chosen_splits(x["paged"]), paged_us=paged_ms * 1e3,
               paged_gbs=nbytes / paged_ms / 1e6)
    row["paged_frac_peak"] = row["paged_gbs"] / peak if peak else float("nan")
    row["in_l2"] = bool(l2_bytes and nbytes < 2 * l2_bytes)
    if call_timer is not None:
        row["paged_call_us"] = call_timer(partial(paged_attention, *x["paged"], validate=False)) * 1e3
    if varlen:
        ms = timer(partial(paged_attention_varlen, *x["varlen"], validate=False))
        row.update(varlen_us=ms * 1e3, varlen_gbs=nbytes / ms / 1e6,
                   varlen_frac_peak=nbytes / ms / 1e6 / peak if peak else float("nan"))
    if sdpa:
        keys, values = x["contiguous"]()
        err = (out.float() - sdpa_decode(x["paged"][0], keys, values).float()).abs().max().item()
        ms = timer(partial(sdpa_decode, x["paged"][0], keys, values))
        row.update(sdpa_us=ms * 1e3, sdpa_gbs=nbytes / ms / 1e6, paged_vs_sdpa=ms / paged_ms, max_err=err)
        del keys, values
    if ref:
        ms = (call_timer or timer)(partial(paged_attention_ref, *x["paged"]))
        row.update(ref_us=ms * 1e3, paged_vs_ref=ms / paged_ms)
    else:
        row.update(ref_us=float("nan"), paged_vs_ref=float("nan"))
    del x
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def chosen_splits(paged_args) -> int:
    """The split count ``paged_attention`` picks for these arguments."""
    from ..attention.triton_backend import decode_num_splits
    query, key_cache, _, block_tables, _ = paged_args
    return decode_num_splits(query, key_cache, block_tables)


def kv_bytes(batch, context, kv_heads, head_dim, elem_bytes) -> int:
    return 2 * batch * context * kv_heads * head_dim * elem_bytes


def bandwidth(cfg: dict, budget: Budget, log, timer, device, peak, call_timer=None, l2_bytes=None) -> dict:
    """Decode bandwidth over batch x context x GQA group (pages of 16, head_dim 128, fp16)."""
    dtype = _dtype("fp16")
    rows = []
    for group in cfg["groups"]:
        kv_heads = cfg["heads"] // group
        for batch in cfg["batches"]:
            for context in cfg["contexts"]:
                # SDPA needs a contiguous copy: K/V twice over
                if 2 * kv_bytes(batch, context, kv_heads, cfg["head_dim"], 2) > cfg["max_bytes"]:
                    continue
                if budget.over():
                    log("bandwidth: out of time, sweep cut short")
                    return dict(rows=rows, cut_short=True, **_bandwidth_summary(rows))
                rows.append(_decode_row(batch, context, 16, cfg["heads"], kv_heads, cfg["head_dim"], dtype,
                                        timer, device, peak, call_timer=call_timer, l2_bytes=l2_bytes))
                r = rows[-1]
                log(f"bandwidth: group {group} batch {batch} ctx {context}: paged {r['paged_frac_peak']:.0%} "
                    f"varlen {r['varlen_frac_peak']:.0%} of peak, vs sdpa {r['paged_vs_sdpa']:.2f}x")
    return dict(rows=rows, **_bandwidth_summary(rows))


def _bandwidth_summary(rows: list[dict]) -> dict:
    big = [r for r in rows if r["batch"] >= 32 and r["context"] >= 4096 and not r.get("in_l2")]
    return dict(worst_frac_peak_b32_4k=min((r["paged_frac_peak"] for r in big), default=None),
                worst_varlen_frac_peak_b32_4k=min((r["varlen_frac_peak"] for r in big), default=None),
                best_frac_peak=max((r["paged_frac_peak"] for r in rows), default=None))


def splits(cfg: dict, budget: Budget, log, timer, device) -> dict:
    """Every split count against the single pass, for both entry points; the automatic choice against
    the best count. ``auto_vs_best`` below 1: the rule leaves speed on the table."""
    dtype = _dtype("fp16")
    rows = []
    for context in cfg["contexts"]:
        for batch in cfg["batches"]:
            if budget.over():
                log("splits: out of time, sweep cut short")
                return dict(rows=rows, cut_short=True, **_splits_summary(rows))
            try:
                _split_row(rows, batch, context, cfg, log, timer, device, dtype)
            except Exception as exc:            # a GPU fault: keep the rows measured, name the call
                return dict(rows=rows, fault=dict(batch=batch, context=context, error=repr(exc)[:400]),
                            **_splits_summary(rows))
    return dict(rows=rows, **_splits_summary(rows))


def _split_row(rows, batch, context, cfg, log, timer, device, dtype) -> None:
    """One shape of the split-K sweep: both entry points, every split count and the automatic one."""
    from ..attention.triton_backend import paged_attention, paged_attention_varlen
    x = decode_inputs(batch, context, 16, cfg["heads"], cfg["kv_heads"], cfg["head_dim"], dtype, device)
    for entry, fn, args in (("paged_attention", paged_attention, x["paged"]),
                            ("paged_attention_varlen", paged_attention_varlen, x["varlen"])):
        for k in cfg["splits"]:      # one plain call each first: a fault is named, not replayed
            log(f"splits: calling {entry} b{batch} ctx {context} num_splits {k}")
            fn(*args, num_splits=k, validate=False)
            if device.type == "cuda":
                import torch
                torch.cuda.synchronize()
        times = {k: timer(partial(fn, *args, num_splits=k, validate=False)) for k in cfg["splits"]}
        auto = timer(partial(fn, *args, validate=False))
        best = min(times, key=times.get)
        rows.append(dict(entry=entry, batch=batch, context=context, kv_heads=cfg["kv_heads"],
                         programs=batch * cfg["kv_heads"], chosen=chosen_splits(x["paged"])
                         if entry == "paged_attention" else None,
                         us={str(k): t * 1e3 for k, t in times.items()}, auto_us=auto * 1e3,
                         best_splits=best, best_vs_single=times[1] / times[best],
                         auto_vs_single=times[1] / auto, auto_vs_best=times[best] / auto))
        r = rows[-1]
        log(f"splits: {entry[:18]:<18} b{batch:<3} ctx {context:<6} best {best:>2} "
            f"({r['best_vs_single']:.2f}x single) auto {r['auto_vs_best']:.2f} of best")
    del x


def _splits_summary(rows: list[dict]) -> dict:
    return dict(worst_auto_vs_best=min((r["auto_vs_best"] for r in rows), default=None),
                median_auto_vs_best=sorted(r["auto_vs_best"] for r in rows)[len(rows) // 2] if rows else None)


def block_sizes(cfg: dict, budget: Budget, log, timer, device, peak) -> dict:
    """The block-size sweep at fixed work (batch, context, GQA fixed; only the page size moves)."""
    dtype = _dtype("fp16")
    rows = []
    for block_size in cfg["block_sizes"]:
        if budget.over():
            log("block_size: out of time")
            return dict(rows=rows, cut_short=True)
        rows.append(_decode_row(cfg["batch"], cfg["context"], block_size, cfg["heads"], cfg["kv_heads"],
                                cfg["head_dim"], dtype, timer, device, peak))
        r = rows[-1]
        log(f"block_size {block_size}: paged {r['paged_frac_peak']:.0%} varlen {r['varlen_frac_peak']:.0%}")
    return dict(rows=rows)


def paging(cfg: dict, budget: Budget, log, timer, device) -> dict:
    """The price of paging: one kernel, the same tokens, pages shuffled or in order; SDPA beside."""
    from ..attention.triton_backend import paged_attention, paged_attention_varlen
    from .attention import sdpa_decode
    dtype = _dtype("fp16")
    rows = []
    for batch in cfg["batches"]:
        for context in cfg["contexts"]:
            if budget.over():
                log("paging: out of time")
                return dict(rows=rows, cut_short=True, **_paging_summary(rows))
            t = {}
            for layout in ("identity", "shuffled"):
                x = decode_inputs(batch, context, 16, cfg["heads"], cfg["kv_heads"], cfg["head_dim"], dtype,
                                  device, layout=layout)
                t["paged", layout] = timer(partial(paged_attention, *x["paged"], validate=False))
                t["varlen", layout] = timer(partial(paged_attention_varlen, *x["varlen"], validate=False))
                if layout == "identity":
                    keys, values = x["contiguous"]()
                    t["sdpa"] = timer(partial(sdpa_decode, x["paged"][0], keys, values))
                    del keys, values
                del x
            rows.append(dict(batch=batch, context=context,
                             paged_identity_over_shuffled=t["paged", "identity"] / t["paged", "shuffled"],
                             varlen_identity_over_shuffled=t["varlen", "identity"] / t["varlen", "shuffled"],
                             sdpa_over_paged_shuffled=t["sdpa"] / t["paged", "shuffled"],
                             us={f"{k[0]} {k[1]}" if isinstance(k, tuple) else k: v * 1e3 for k, v in t.items()}))
            r = rows[-1]
            log(f"paging: b{batch} ctx {context}: identity/shuffled paged {r['paged_identity_over_shuffled']:.2f} "
                f"varlen {r['varlen_identity_over_shuffled']:.2f}; sdpa/paged {r['sdpa_over_paged_shuffled']:.2f}")
    return dict(rows=rows, **_paging_summary(rows))


def _paging_summary(rows: list[dict]) -> dict:
    values = [r[k] for r in rows for k in ("paged_identity_over_shuffled", "varlen_identity_over_shuffled")]
    return dict(worst_identity_over_shuffled=min(values, default=None))


def varlen_mixes(cfg: dict, budget: Budget, log, timer) -> dict:
    """The one kernel against the separate kernels on decode-only and mixed batches (chapter 9)."""
    from .attention import parse_args, run_varlen
    args = parse_args(["--context", *map(str, cfg["contexts"]), "--block-size", "16",
                       "--chunk", str(cfg["chunk"])])
    rows = run_varlen(args, timer=timer)
    one = [r for r in rows if r["what"] == "one kernel vs separate"]
    ratios = ", ".join(f"{r['vs']:.2f}x" for r in one)
    log(f"varlen: one kernel vs separate: {ratios}")
    return dict(rows=rows)


def engine(cfg: dict, budget: Budget, log, device) -> dict:
    """pagedlib's LLM against transformers' continuous batching on a random Llama of a 1B model's
    shape, in fp16, greedy, on ShareGPT-like requests; alternating runs, best of each."""
    import numpy as np
    import torch
    import transformers

    from ..engine.llm import LLM, SamplingParams
    from ..models.loading import from_hf
    from ..sim import Workload
    from .peer import HFEngine

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    shape = cfg["model"]
    config = transformers.LlamaConfig(**shape, initializer_range=cfg["init"], tie_word_embeddings=True,
                                      attn_implementation="sdpa")
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    with torch.device(device):
        hf = transformers.LlamaForCausalLM(config)
    hf = hf.to(dtype).eval()
    model = from_hf(hf, backend="triton", dtype=dtype, device=device)
    work = Workload.sharegpt(cfg["requests"], seed=0, max_len=cfg["max_len"])
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, shape["vocab_size"], int(n)).tolist() for n in work.prompt_lens]
    budgets = [int(min(n, cfg["max_new_tokens"])) for n in work.output_lens]
    block = 16
    num_blocks = sum(len(p) + n for p, n in zip(prompts, budgets)) // block + 2 * len(prompts)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def ours():
        llm = LLM(model, num_blocks, block)
        sync()
        start = time.perf_counter()
        outs = llm.generate(prompts, [SamplingParams(max_new_tokens=n) for n in budgets], use_tqdm=False)
        sync()
        return outs, time.perf_counter() - start

    ours_warm = LLM(model, num_blocks, block)
    ours_warm.generate(prompts[:4], max_new_tokens=4, use_tqdm=False)
    peer = HFEngine(hf, num_blocks=num_blocks // (cfg["hf_page"] // block) + len(prompts),
                    page_size=cfg["hf_page"], max_batch_tokens=cfg["hf_max_batch_tokens"], timeout_s=300)
    peer.run(prompts[:4], [4] * 4)
    runs = []
    for _ in range(cfg["runs"]):
        if budget.over():
            break
        o, s = ours()
        t = peer.run(prompts, budgets)
        runs.append(dict(ours_s=s, theirs_s=t.seconds, ours_out=o, theirs_out=t.outputs))
    peer.close()
    tokens = sum(budgets)
    best_ours = min(r["ours_s"] for r in runs)
    best_theirs = min(r["theirs_s"] for r in runs)
    last = runs[-1]
    same = sum(x == y for x, y in zip(last["ours_out"], last["theirs_out"]))
    # Both engines judged by one referee: the same weights in fp32, teacher-forced on each engine's
    # own tokens. A greedy fp16 engine should pick the fp32 argmax, or a token within a near-tie of it.
    hf = hf.float()
    fidelity = {name: greedy_fidelity(hf, prompts, last[key], cfg["near_tie"])
                for name, key in (("pagedlib", "ours_out"), ("transformers", "theirs_out"))}
    result = dict(model=dict(shape, dtype=str(dtype).removeprefix("torch."), init=cfg["init"],
                             params_b=round(sum(p.numel() for p in hf.parameters()) / 1e9, 2)),
                  requests=len(prompts), generated_tokens=tokens, prompt_tokens=sum(map(len, prompts)),
                  transformers=transformers.__version__,
                  ours_tokens_per_s=tokens / best_ours, theirs_tokens_per_s=tokens / best_theirs,
                  ratio=best_theirs / best_ours, ratios=[r["theirs_s"] / r["ours_s"] for r in runs],
                  same_tokens=same, near_tie=cfg["near_tie"], fidelity=fidelity,
                  far_ratio=far_ratio(fidelity))
    log(f"engine: pagedlib {result['ours_tokens_per_s']:.0f} tok/s, transformers "
        f"{result['theirs_tokens_per_s']:.0f} tok/s: {result['ratio']:.2f}x; same tokens {same}/{len(prompts)}")
    for name, f in fidelity.items():
        log(f"engine: {name}: {f['argmax']}/{f['tokens']} tokens the fp32 argmax, {f['far']} more than "
            f"{cfg['near_tie']} below it (worst {f['worst_gap']:.3f}); first tokens {f['first_argmax']}/{len(prompts)}")
    hf = model = None                 # free them (a del would unbind the names ours() reads)
    return result


def far_ratio(fidelity: dict) -> float:
    """pagedlib's tokens more than a near-tie below the fp32 argmax, per such token of transformers'."""
    return fidelity["pagedlib"]["far"] / max(1, fidelity["transformers"]["far"])


def greedy_fidelity(hf, prompts: list[list[int]], outputs: list[list[int]], near_tie: float) -> dict:
    """How far an engine's greedy tokens are from ``hf``'s argmax, teacher-forced on those tokens:
    tokens that are the argmax, tokens more than ``near_tie`` below it (in ``hf``'s logits), the worst
    gap, and how many first tokens (which depend on the prompt alone) are the argmax."""
    import torch
    argmax = far = first = tokens = 0
    worst = 0.0
    with torch.inference_mode():
        for prompt, out in zip(prompts, outputs):
            if not out:
                continue
            ids = torch.tensor([prompt + out[:-1]], device=hf.device)
            logits = hf(ids).logits[0, len(prompt) - 1:].float()             # [len(out), vocab]
            chosen = logits.gather(1, torch.tensor(out, device=hf.device)[:, None])[:, 0]
            gap = logits.max(dim=1).values - chosen                          # 0 where chosen is the argmax
            tokens += len(out)
            argmax += int((gap == 0).sum())
            far += int((gap > near_tie).sum())
            first += int(gap[0] == 0)
            worst = max(worst, float(gap.max()))
    return dict(tokens=tokens, argmax=argmax, far=far, worst_gap=worst, first_argmax=first)


def judge(record: dict) -> list[dict]:
    """The goals (:data:`GOALS`) on the measured figures: value, target, met."""
    ops = {">=": lambda a, b: a >= b, ">": lambda a, b: a > b, "==": lambda a, b: a == b,
           "<=": lambda a, b: a <= b}
    goals = []
    for name, says, section, key, op, target in GOALS:
        value = (record.get(section) or {}).get(key)
        goals.append(dict(name=name, says=says, section=section, key=key, op=op, target=target, value=value,
                          met=value is not None and ops[op](value, target)))
    return goals


# The sizes of a real run, and of the CPU rehearsal (tiny, the same code paths).
FULL = dict(
    correctness=dict(dtypes=["fp16", "bf16"], grid=[
        ((32, 8), 128, 16, [1, 17, 300, 2085]), ((32, 32), 128, 16, [5, 640]), ((32, 4), 128, 32, [33, 4100]),
        ((8, 1), 64, 16, [16, 999]), ((6, 3), 256, 32, [33, 2085]), ((5, 1), 80, 8, [9, 64]),
        ((32, 8), 128, 128, [127, 129, 1024])]),
    bandwidth=dict(heads=32, head_dim=128, groups=[1, 4, 8], batches=[1, 8, 32, 64, 128, 256],
                   contexts=[1024, 4096, 16384, 32768], max_bytes=24e9),
    splits=dict(heads=32, kv_heads=8, head_dim=128, batches=[1, 2, 4, 8, 12, 16, 17, 24, 32, 64],
                contexts=[4096, 32768, 1024, 16384], splits=[1, 2, 3, 4, 6, 8, 12, 16, 32]),
    block_size=dict(heads=32, kv_heads=8, head_dim=128, batch=32, context=4096,
                    block_sizes=[8, 16, 32, 64, 128]),
    paging=dict(heads=32, kv_heads=8, head_dim=128, batches=[8, 32, 128], contexts=[4096, 16384]),
    varlen=dict(contexts=[2048], chunk=256),
    engine=dict(model=dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                           num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096),
                init=0.05, requests=64, max_len=1024, max_new_tokens=256, runs=2, hf_page=256,
                hf_max_batch_tokens=None, near_tie=0.05),
)
DRY = dict(
    correctness=dict(dtypes=["fp32"], grid=[((4, 2), 32, 8, [1, 17]), ((4, 4), 64, 16, [9])]),
    bandwidth=dict(heads=4, head_dim=32, groups=[1, 4], batches=[1, 2], contexts=[16, 40], max_bytes=1e9),
    splits=dict(heads=4, kv_heads=2, head_dim=32, batches=[1, 2], contexts=[48], splits=[1, 2, 4]),
    block_size=dict(heads=4, kv_heads=2, head_dim=32, batch=2, context=64, block_sizes=[8, 16]),
    paging=dict(heads=4, kv_heads=2, head_dim=32, batches=[2], contexts=[40]),
    varlen=dict(contexts=[32], chunk=8),
    engine=dict(model=dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256),
                init=0.3, requests=6, max_len=96, max_new_tokens=8, runs=1, hf_page=16,
                hf_max_batch_tokens=None, near_tie=0.05),
)
# seconds each section may take (a cut-short section keeps its rows and says so)
BUDGET_S = dict(correctness=60, bandwidth=80, splits=60, block_size=20, paging=30, varlen=30, engine=120)


def measure(dry_run: bool = False, out: Path = RECORD, sections=SECTIONS, log=print) -> dict:
    """Run the sections on this machine (a CUDA GPU, or the interpreter with ``dry_run``); the record
    is written to ``out`` after each section."""
    import torch
    import triton

    from .. import runtime
    from .attention import parse_args, peak_bandwidth_gbs

    if runtime.DEVICE.type != "cuda" and not dry_run:
        raise RuntimeError("a GPU record needs a CUDA GPU: this machine runs Triton's interpreter "
                           "(rehearse with --dry-run)")
    device = runtime.DEVICE
    sizes = DRY if dry_run else FULL
    name = runtime.gpu_name() or "CPU (dry run: the interpreter, timings meaningless)"
    peak = peak_bandwidth_gbs(runtime.gpu_name()) if not dry_run else 1.0
    props = torch.cuda.get_device_properties(0) if device.type == "cuda" else None
    record = {"gpu": name, "versions": {"torch": torch.__version__, "triton": triton.__version__,
                                        "CUDA": torch.version.cuda},
              "date": datetime.date.today().isoformat(), "dry_run": dry_run, "peak_gbs": peak,
              "sms": props.multi_processor_count if props else None,
              "capability": list(torch.cuda.get_device_capability(0)) if props else None,
              "attention": [], "block_size": [], "errors": {}, "seconds": {}}
    timer, quick = make_timer(dry_run), make_timer(dry_run, quick=True)
    call = make_timer(dry_run, quick=True, device_time=False)
    l2_bytes = props.L2_cache_size if props else None
    record["l2_bytes"] = l2_bytes
    record["launch"] = launch_entry(tuple(record["capability"]) if props else None)
    record["timing"] = ("device time: triton.testing.do_bench_cudagraph (the kernels replayed from a "
                        "CUDA graph, launch overhead excluded, L2 not flushed); call time: do_bench")

    def save():
        record["goals"] = judge(record)
        out.write_text(json.dumps(record, indent=1, default=float) + "\n")

    def chapter_rows(argv, budget):
        a = parse_args(argv)
        if dry_run:
            a = argparse.Namespace(batch=[1, 2], context=[16, 40], block_size=a.block_size[:2], heads=[4, 2],
                                   head_dim=32)
        return [_decode_row(b, c, bs, a.heads[0], a.heads[1], a.head_dim, _dtype("fp16"), timer, device, peak,
                            varlen=False, ref=b * c <= 64 * 2048, call_timer=call, l2_bytes=l2_bytes)
                for bs in a.block_size for b in a.batch for c in a.context if not budget.over()]

    runners = dict(
        correctness=lambda b: correctness(sizes["correctness"], b, log),
        bandwidth=lambda b: bandwidth(sizes["bandwidth"], b, log, quick, device, peak, call, l2_bytes),
        splits=lambda b: splits(sizes["splits"], b, log, quick, device),
        block_size=lambda b: block_sizes(sizes["block_size"], b, log, timer, device, peak),
        paging=lambda b: paging(sizes["paging"], b, log, timer, device),
        varlen=lambda b: varlen_mixes(sizes["varlen"], b, log, timer),
        engine=lambda b: engine(sizes["engine"], b, log, device))
    for section in sections:
        start = time.monotonic()
        try:
            if section == "chapters":     # the rows chapters 8 and 9 show, as their cells measure them
                b = Budget(40)
                record["attention"] = chapter_rows(CHAPTER8_ARGS, b)
                record["block_size"] = chapter_rows(CHAPTER9_ARGS, b)
                log(f"chapters: {len(record['attention'])} + {len(record['block_size'])} rows")
            else:
                result = runners[section](Budget(BUDGET_S[section] * (0.2 if dry_run else 1) + (60 if dry_run else 0)))
                record[section if section != "block_size" else "block_sweep"] = result
                if "fault" in result:
                    record["errors"][section] = result["fault"]
                    log(f"{section}: FAULT {result['fault']}")
        except Exception as exc:            # one section's failure must not cost the others' minutes
            record["errors"][section] = traceback.format_exc(limit=6)
            log(f"{section}: FAILED {exc!r}")
        record["seconds"][section] = round(time.monotonic() - start, 1)
        record["graph_fallbacks"] = timer.fallbacks + quick.fallbacks
        save()
        if section in record["errors"]:
            break                        # after a GPU fault this process's CUDA context is unusable
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return record


SUMMARIES = {"splits": _splits_summary, "bandwidth": _bandwidth_summary, "paging": _paging_summary}


def combine(paths: list[Path], out: Path) -> dict:
    """One record from the parts that separate processes measured (``gpu_check.sh`` runs groups of
    sections apart, so a GPU fault in one costs only that group): each part's measured sections, errors
    and seconds; the goals judged again on the whole."""
    record: dict = {}
    for path in paths:
        part = json.loads(Path(path).read_text())
        for key, value in part.items():
            if key in ("errors", "seconds"):
                record.setdefault(key, {}).update(value)
            elif key in ("attention", "block_size"):
                if value or key not in record:
                    record[key] = value
            elif key in SUMMARIES and key in record and "rows" in record[key]:
                rows = record[key]["rows"] + value["rows"]     # one section measured in several parts
                record[key] = {**record[key], **value, "rows": rows, **SUMMARIES[key](rows)}
            elif key not in record or key in SECTIONS or key == "block_sweep":
                record[key] = value
    record["goals"] = judge(record)
    out.write_text(json.dumps(record, indent=1, default=float) + "\n")
    return record


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedlib.bench gpu_record",
                                     description="measure the GPU record chapters 8-10 show")
    parser.add_argument("--out", default=str(RECORD), help=f"where to write it (default {RECORD})")
    parser.add_argument("--dry-run", action="store_true",
                        help="rehearse every section on the CPU (interpreter, tiny sizes, timings meaningless)")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--split-contexts", type=int, nargs="+", default=None,
                        help="the context lengths of the split-K sweep (default: all of it)")
    parser.add_argument("--combine", nargs="+", default=None, metavar="PART",
                        help="instead of measuring: combine these parts into --out")
    a = parser.parse_args(argv)
    out = Path(a.out)
    if a.combine:
        record = combine([Path(p) for p in a.combine], out)
        print(f"combined {len(a.combine)} parts into {out}")
        print("\n".join(goal_lines(record)))
        return 0
    if a.split_contexts:
        for sizes in (FULL, DRY):
            sizes["splits"] = dict(sizes["splits"], contexts=a.split_contexts)
    record = measure(dry_run=a.dry_run, out=out, sections=a.sections)
    print(f"wrote {out}: {label(record)}")
    print("\n".join(goal_lines(record)))
    if record["errors"]:
        print(f"sections that failed: {', '.join(record['errors'])}")
    return 1 if record["errors"] else 0
