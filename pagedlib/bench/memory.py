"""``python -m pagedlib.bench memory``: how fast the block manager's bookkeeping is (pure Python, CPU).

Three measurements, each the best of ``--repeat`` runs:

1. allocate + free: ``--live`` prompts of ``--prompt-len`` tokens are allocated, then freed, over and
   over; blocks per second counts every block handed out and taken back. Run at several pool sizes:
   O(1) free lists keep the rate flat as the pool grows (a scan of the pool would not).
2. append: one token at a time onto running sequences (the decode path), tokens per second.
3. prefix-cache lookup: the cost per full block of naming it (a chained BLAKE2 hash), finding it
   and checking its tokens and parent, measured with ``can_allocate`` on a cached prompt; and
   allocate + free of that prompt when every block but the last hits.

``--against nano-vllm PATH`` instead runs the serving trace of :mod:`pagedlib.bench.serving_trace`
(ShareGPT-like lengths, ten shared system prompts, 64 running, prefix caching on) through pagedlib's
block manager and nano-vllm's (from its checkout at PATH), alternating, and prints both ops/s and
their ratio; without the checkout (or its ``xxhash`` dependency) it says so and skips.
"""
from __future__ import annotations

import argparse
import random
import shlex
import sys
import time

from ..memory.block_manager import BlockManager
from ..output import TableView
from ..validation import cdiv


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pagedlib.bench memory", description=__doc__.split("\n")[0])
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=512, help="tokens per prompt")
    p.add_argument("--pools", default="1024,65536,1048576", help="pool sizes in blocks, comma separated")
    p.add_argument("--live", type=int, default=16, help="prompts allocated at once before they are freed")
    p.add_argument("--rounds", type=int, default=200, help="allocate-all / free-all rounds per measurement")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--against", nargs=2, metavar=("nano-vllm", "PATH"),
                   help="compare with nano-vllm's block manager on the serving trace, from its checkout at PATH")
    p.add_argument("--prefix-caching-hash", default="builtin", choices=("blake2", "sha256", "builtin"),
                   help="pagedlib's block name on the serving trace")
    p.add_argument("--requests", type=int, default=600, help="requests in the serving trace")
    return p.parse_args(argv)


def against_nano(args: argparse.Namespace, argv: list[str]) -> int:
    from .serving_trace import compare
    engine, path = args.against
    if engine != "nano-vllm":
        print(f"--against: only nano-vllm is known; got {engine!r}")
        return 2
    result = compare(path, repeat=args.repeat, block_size=args.block_size, num_requests=args.requests,
                     prefix_caching_hash=args.prefix_caching_hash)
    if isinstance(result, str):
        print(f"skipped the comparison with nano-vllm: {result}")
        return 0
    print(f"serving trace: {args.requests} ShareGPT-like requests, 10 shared system prompts, 64 running, "
          f"prefix caching on, block_size={args.block_size}, {result['events']:,} operations, "
          f"{result['num_blocks']:,} blocks; best of {args.repeat}, alternating")
    print(TableView([[f"pagedlib ({args.prefix_caching_hash})", f"{result['pagedlib_ops_s']:,.0f} ops/s"],
                     ["nano-vllm", f"{result['nano_ops_s']:,.0f} ops/s"],
                     ["ratio pagedlib / nano-vllm", f"{result['ratio']:.2f}x"]], ["block manager", "result"]).text())
    print(f"\nreproduce: python -m pagedlib.bench memory {shlex.join(argv)}")
    return 0


def best_of(repeat: int, fn) -> float:
    """The shortest wall time of ``repeat`` calls of ``fn`` (seconds)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def alloc_free_rate(num_blocks: int, args: argparse.Namespace) -> float:
    """Blocks allocated plus blocks freed per second, ``--live`` prompts at a time, in a pool of ``num_blocks``.

    The pool is first churned (half filled, drained in a shuffled order) so free block ids are
    scattered, as in a running engine. The live set is the same for every pool size, so any growth
    of the cost with the pool would come from the allocator scanning it.
    """
    bm = BlockManager(num_blocks, args.block_size)
    prompt = list(range(args.prompt_len))
    per_seq = cdiv(args.prompt_len, args.block_size)
    if args.live * per_seq > num_blocks:
        raise ValueError(f"--live {args.live} prompts of {per_seq} blocks do not fit a pool of {num_blocks}")
    churn = list(range(num_blocks // 2 // per_seq))
    for s in churn:
        bm.allocate(s, prompt)
    random.Random(args.seed).shuffle(churn)
    for s in churn:
        bm.free(s)
    live = range(args.live)

    def run():
        for _ in range(args.rounds):
            for s in live:
                bm.allocate(s, prompt)
            for s in live:
                bm.free(s)

    return 2 * args.rounds * args.live * per_seq / best_of(args.repeat, run)


def append_rate(args: argparse.Namespace, num_blocks: int = 16384, n_seqs: int = 64, steps: int = 256) -> float:
    """Tokens appended per second across ``n_seqs`` running sequences (the decode step's bookkeeping)."""
    def run():
        bm = BlockManager(num_blocks, args.block_size)
        for s in range(n_seqs):
            bm.allocate(s, [1] * 7)
        for _ in range(steps):
            for s in range(n_seqs):
                bm.append(s)

    return n_seqs * steps / best_of(args.repeat, run)


def prefix_costs(args: argparse.Namespace) -> tuple[float, float, int]:
    """(seconds per block of a cache lookup, allocate+free blocks/s on hits, blocks looked up)."""
    bm = BlockManager(4096, args.block_size, enable_prefix_caching=True)
    prompt = [random.Random(args.seed).randrange(50_000) for _ in range(args.prompt_len + 1)]
    bm.allocate("warm", prompt)
    bm.free("warm")
    full_blocks = len(prompt) // args.block_size
    lookups = 200

    def lookup():
        for _ in range(lookups):
            bm.can_allocate(prompt)

    per_block = best_of(args.repeat, lookup) / (lookups * full_blocks)
    n_blocks = cdiv(len(prompt), args.block_size)

    def hit_alloc_free():
        for i in range(lookups):
            assert bm.allocate(i, prompt) > 0
            bm.free(i)

    rate = 2 * lookups * n_blocks / best_of(args.repeat, hit_alloc_free)
    return per_block, rate, full_blocks


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.against:
        return against_nano(args, argv)
    pools = [int(p) for p in args.pools.split(",")]
    print(f"block manager bookkeeping (pure Python), block_size={args.block_size}, "
          f"{args.live} live prompts of {args.prompt_len} tokens, best of {args.repeat}")
    rows = [[f"allocate + free, pool of {n:,} blocks", f"{alloc_free_rate(n, args):,.0f} blocks/s"] for n in pools]
    rows.append(["append (decode step), 64 sequences", f"{append_rate(args):,.0f} tokens/s"])
    per_block, rate, n = prefix_costs(args)
    rows += [[f"prefix-cache lookup ({n} full blocks)", f"{per_block * 1e6:.2f} us/block"],
             ["allocate + free, all blocks but last hit", f"{rate:,.0f} blocks/s"]]
    print(TableView(rows, ["measurement", "result"]).text())
    print(f"\nreproduce: python -m pagedlib.bench memory {shlex.join(argv)}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
