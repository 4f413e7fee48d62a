"""``python -m pagedlib.bench engine``: the serving engine against its baselines on one workload.

A mixed-length workload is drawn from the ShareGPT-like histogram (the PagedAttention paper's
Figure 11, ``pagedlib/data/sharegpt_lengths.csv``); each request gets random prompt tokens and
generates exactly its output length (greedy). The same random-initialised GPT-2 serves it three ways:

1. ``LLM``, paged, within a KV budget of ``--kv-slots`` token slots;
2. ``ReserveMaxLLM``, the same engine admitting a request only if ``--max-len`` slots can be reserved;
3. ``transformers``' ``generate`` in static, left-padded batches of ``--hf-batch-size``.

Capacity is the number of requests running at once while others wait (the cache is the limit then);
speed is generated tokens per second, each request counting only its own output tokens; latency is
each request's time to first token (TTFT, from the start of the run: every request arrives at once)
and time per output token after it (TPOT), as p50/p90/p99 over the requests (milliseconds).
``--max-num-batched-tokens`` sets the engines' token budget per step (chunked prefill). On a CPU the
engine's attention uses the PyTorch reference backend by default (``--backend torch``): Triton
interpreter timings mean nothing.
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time

import numpy as np
import torch

from .. import runtime
from ..engine.baseline import ReserveMaxLLM, hf_static_generate
from ..engine.llm import LLM, SamplingParams
from ..attention.backend import DEFAULT_BACKEND
from ..models.gpt2 import GPT2
from ..output import TableView
from . import peer


# Defaults of the options whose value depends on the run: (the engine bench, ``--against transformers``).
# The comparison's are the course's measured setup (chapter 10): a bigger model, and room for every
# request at once, on one torch thread.
MODE_DEFAULTS = {"requests": (48, 32), "max_len": (2048, 1024), "layers": (2, 4), "embd": (128, 256),
                 "threads": (None, 1)}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pagedlib.bench engine", description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=None, help="requests in the workload (default 48; 32 with "
                   "--against)")
    p.add_argument("--seed", type=int, default=0, help="seed of the workload and the model")
    p.add_argument("--kv-slots", type=int, default=None, help="KV budget in token slots, for both engines "
                   "(default 6144; with --against, requests x max-len: room for every request)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=None, help="context; what reserve-max reserves per request "
                   "(default 2048; 1024 with --against)")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=None,
                   help="token budget per engine step (default: none, whole prompts)")
    p.add_argument("--layers", type=int, default=None, help="default 2; 4 with --against")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--embd", type=int, default=None, help="hidden size (default 128; 256 with --against)")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--hf-batch-size", type=int, default=16, help="static batch size of transformers' generate")
    p.add_argument("--no-hf", action="store_true", help="skip transformers' static batching")
    p.add_argument("--backend", choices=("torch", "triton"), default=DEFAULT_BACKEND)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's; 1 with "
                   "--against)")
    p.add_argument("--quick", action="store_true", help="a tiny run (a smoke test, numbers mean little)")
    p.add_argument("--plot", default=None, help="write the scheduler timelines to this PNG")
    p.add_argument("--against", choices=("transformers",), default=None,
                   help="instead: LLM vs transformers' continuous batching on GPT-2 and Llama (bench/peer.py)")
    peer.add_arguments(p)
    args = p.parse_args(argv)
    for name, defaults in MODE_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, defaults[args.against is not None])
    if args.hf_page_size is None:
        args.hf_page_size = args.block_size if args.models == "smollm2" else 256
    if args.prefix_caching is None:
        args.prefix_caching = args.models == "smollm2"
    if args.kv_slots is None:       # with --against, room for every request; a real chat fits in 640 tokens
        args.kv_slots = (args.requests * (640 if args.models == "smollm2" else args.max_len) if args.against
                         else 6144)
    if args.quick:
        args.requests, args.kv_slots, args.max_len, args.layers, args.embd = 12, 512, 128, 1, 64
        args.hf_batch_size = 4
    return args


def build_model(args):
    """A random-initialised transformers GPT-2 and the same weights as a pagedlib GPT2."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel
    transformers.logging.set_verbosity_error()      # its config warns about GPT-2's eos id in a tiny vocab
    torch.manual_seed(args.seed)
    # Twice the context: a static batch runs every request for the batch's longest output, so the
    # padded batch can outgrow max_len (the surplus tokens are thrown away, but must be computable).
    config = GPT2Config(n_layer=args.layers, n_head=args.heads, n_embd=args.embd, vocab_size=args.vocab,
                        n_positions=2 * args.max_len, attn_implementation="eager",
                        initializer_range=0.2)   # larger than GPT-2's 0.02, so outputs depend on every K/V
    hf = GPT2LMHeadModel(config).eval().to(device=runtime.DEVICE, dtype=runtime.DTYPE)
    return hf, GPT2.from_hf(hf, backend=args.backend)


def make_workload(args):
    """Prompts (random token ids) and output lengths with ShareGPT's length distribution; with
    ``--workload equal``, every request ``--prompt-len`` tokens long and generating ``--new-tokens``
    (so that ``--requests`` of them decode together from the first step to the last)."""
    from ..sim import Workload
    if getattr(args, "workload", "sharegpt") == "equal":
        rng = np.random.default_rng(args.seed)
        prompts = [rng.integers(0, args.vocab, args.prompt_len).tolist() for _ in range(args.requests)]
        return prompts, [args.new_tokens] * args.requests
    work = Workload.sharegpt(args.requests, seed=args.seed, max_len=args.max_len)
    rng = np.random.default_rng(args.seed)
    prompts = [rng.integers(0, args.vocab, int(n)).tolist() for n in work.prompt_lens]
    return prompts, [int(n) for n in work.output_lens]


def concurrency(metrics: dict) -> tuple[float, int]:
    """(mean running requests over the steps where others were waiting, peak running)."""
    hist = metrics["history"]
    busy = [h["running"] for h in hist if h["waiting"] > 0] or [h["running"] for h in hist]
    return float(np.mean(busy)), metrics["peak_running"]


PERCENTILES = (50, 90, 99)


def latency_ms(metrics, key: str) -> list[float]:
    """p50, p90, p99 of the requests' ``key`` (``ttft_s`` or ``tpot_s``), in milliseconds."""
    values = [r[key] for r in metrics["requests"]]
    return [1e3 * float(v) for v in np.percentile(values, PERCENTILES)]


def run_engine(llm: LLM, prompts, outputs) -> tuple[list, dict]:
    """Outputs, and the engine's metrics with the wall-clock time and speed of the whole run."""
    params = [SamplingParams(max_new_tokens=n) for n in outputs]
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - start
    m = llm.metrics
    return outs, {"metrics": m, "wall_s": wall, "wall_tokens_per_s": m["tokens_generated"] / wall,
                  "ttft_ms": latency_ms(m, "ttft_s"), "tpot_ms": latency_ms(m, "tpot_s")}


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    command = "python -m pagedlib.bench engine " + shlex.join(argv)
    if args.against:
        code = peer.main(args, *make_workload(args))
        print(f"\nreproduce: {command}")
        return code
    hf, model = build_model(args)
    prompts, outputs = make_workload(args)
    num_usable_blocks = args.kv_slots // args.block_size
    print(f"model: random GPT-2, {args.layers} layers, {args.heads} heads, n_embd {args.embd}, vocab "
          f"{args.vocab}, requests up to {args.max_len} tokens ({model.num_parameters() / 1e6:.2f} M parameters)")
    print(f"workload: {len(prompts)} ShareGPT-like requests, prompt mean {np.mean(list(map(len, prompts))):.0f}, "
          f"output mean {np.mean(outputs):.0f} tokens ({sum(outputs)} to generate)")
    print(f"KV budget: {args.kv_slots} token slots = {num_usable_blocks} blocks of {args.block_size}; "
          f"device {runtime.DEVICE.type}, attention backend {args.backend}, torch threads {torch.get_num_threads()}")
    if runtime.DEVICE.type == "cpu" and args.backend == "torch":
        print("note: on a CPU attention is the batched PyTorch reference, not a tuned kernel; the capacity\n"
              "      ratio does not depend on the hardware.")
    if runtime.INTERPRET and args.backend == "triton":
        print("note: Triton runs through the interpreter here: its timings mean nothing (capacity still does).")

    if args.quick:
        print("quick run: a smoke test, its numbers mean little")
    LLM(model, 8, args.block_size).generate([[1, 2, 3]], max_new_tokens=2, use_tqdm=False)   # warm-up
    paged = LLM(model, num_usable_blocks, args.block_size, max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens)
    paged_outs, pm = run_engine(paged, prompts, outputs)
    reserve = ReserveMaxLLM(model, num_usable_blocks, args.block_size, max_num_seqs=args.max_num_seqs,
                            max_len=args.max_len, max_num_batched_tokens=args.max_num_batched_tokens)
    reserve_outs, rm = run_engine(reserve, prompts, outputs)
    rows = [("paged (LLM)", pm, *concurrency(pm["metrics"])), ("reserve-max", rm, *concurrency(rm["metrics"]))]
    if not args.no_hf:
        hf_outs, hm = hf_static_generate(hf, prompts, outputs, args.hf_batch_size)
        hm["wall_s"], hm["wall_tokens_per_s"] = hm["elapsed_s"], hm["tokens_per_s"]

    print()
    budget = args.max_num_batched_tokens or "none (whole prompts)"
    print(f"token budget per step: {budget}; TTFT and TPOT in ms, p50/p90/p99 over the requests")
    table = []
    for name, m, mean_run, peak in rows:
        ttft, tpot = "/".join(f"{v:.0f}" for v in m["ttft_ms"]), "/".join(f"{v:.1f}" for v in m["tpot_ms"])
        table.append([name, f"{mean_run:.1f}", peak, m["metrics"]["preemptions"], m["metrics"]["steps"],
                      f"{m['wall_s']:.1f}", f"{m['wall_tokens_per_s']:.0f}", ttft, tpot])
    if not args.no_hf:
        table.append([f"transformers static b={args.hf_batch_size}", args.hf_batch_size, "", "", "",
                      f"{hm['wall_s']:.1f}", f"{hm['wall_tokens_per_s']:.0f}", "", ""])
    print(TableView(table, ["engine", "running (busy)", "peak", "preempt", "steps", "seconds", "tokens/s",
                            "TTFT p50/p90/p99", "TPOT p50/p90/p99"]).text())
    capacity = rows[0][2] / rows[1][2]
    print(f"\ncapacity, paged vs reserve-max: {capacity:.1f}x requests at once (target >= 3x)")
    if not args.no_hf:
        speed = pm["wall_tokens_per_s"] / hm["wall_tokens_per_s"]
        print(f"speed, paged vs transformers static batching: {speed:.2f}x tokens/s "
              f"({hm['tokens_computed']} token positions computed by static batching for {hm['tokens_generated']} useful)")
        same = sum(a == b for a, b in zip(paged_outs, hf_outs))
        print(f"outputs identical to transformers: {same}/{len(prompts)} requests")
    print(f"outputs identical, paged vs reserve-max: {sum(a == b for a, b in zip(paged_outs, reserve_outs))}/{len(prompts)}")
    if args.plot:
        from ..plots.engine import compare_timelines
        fig = compare_timelines({"paged (LLM)": pm["metrics"], "reserve-max": rm["metrics"]})
        fig.savefig(args.plot, dpi=120, bbox_inches="tight")
        print(f"plot: {args.plot}")
    print(f"\nreproduce: {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
