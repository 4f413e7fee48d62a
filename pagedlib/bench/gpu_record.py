"""The stored GPU record: the kernel measurements chapters 8 and 9 show when they run without a GPU.

A GPU's timings cannot be made on a CPU (the Triton interpreter's timings mean nothing), so
``python -m pagedlib.bench gpu_record`` (run by ``scripts/gpu_check.sh`` on a CUDA GPU) measures the
two benchmarks the chapters run, chapter 8's bandwidth grid and chapter 9's block-size sweep, and
writes them to ``pagedlib/data/gpu_record.json`` with the GPU's name, the versions and the date.
A chapter run on a GPU measures fresh numbers instead; run without one, it shows this record,
labelled as such, or says in one line that no record exists yet.
"""
from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path

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
CAPTION = ("paged us: the kernel's time per decode step; GB/s: the bandwidth it reached; of peak: "
           "that as a share of the GPU's datasheet peak; vs sdpa: SDPA's time over a contiguous "
           "cache divided by the kernel's (above 1, paging is faster); vs ref: how many times faster "
           "than the PyTorch gather; splits: the split-K choice of chapter 9.")
# printed lines of at most 88 characters: a printed output keeps its lines on the site
MISSING = ("No GPU here, and no stored GPU record yet (`bash scripts/gpu_check.sh` on a CUDA GPU\n"
           "writes one): no timings, only the interpreter's correctness check.")


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
    """One line that says where the numbers come from: GPU, versions, date."""
    versions = ", ".join(f"{name} {v}" for name, v in record["versions"].items())
    return (f"Stored GPU record (scripts/gpu_check.sh), not measured now:\n"
            f"{record['gpu']}, {versions}, {record['date']}")


def table_rows(rows: list[dict]) -> list[list[str]]:
    """The benchmark rows as the cells of the chapters' table."""
    return [[fmt.format(r[key]) for _, key, fmt in COLUMNS] for r in rows]


def show(rows: list[dict]) -> None:
    """Show benchmark rows as a table with the caption that says what each column is."""
    from ..plots.table import show_table
    show_table(table_rows(rows), [h for h, _, _ in COLUMNS], caption=CAPTION)


def measure() -> dict:
    """Run both chapters' benchmarks on this GPU; returns the record (needs CUDA)."""
    import torch
    import triton

    from .. import runtime
    from .attention import parse_args, run_gpu

    if runtime.DEVICE.type != "cuda":
        raise RuntimeError("a GPU record needs a CUDA GPU: this machine runs Triton's interpreter")
    return {"gpu": runtime.gpu_name(),
            "versions": {"torch": torch.__version__, "triton": triton.__version__,
                         "CUDA": torch.version.cuda},
            "date": datetime.date.today().isoformat(),
            "attention": run_gpu(parse_args(CHAPTER8_ARGS)),
            "block_size": run_gpu(parse_args(CHAPTER9_ARGS))}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pagedlib.bench gpu_record",
                                     description="measure the GPU record chapters 8 and 9 show")
    parser.add_argument("--out", default=str(RECORD), help=f"where to write it (default {RECORD})")
    out = Path(parser.parse_args(argv).out)
    record = measure()
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}: {label(record)}")
    return 0
