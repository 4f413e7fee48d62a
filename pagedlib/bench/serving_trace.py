"""The serving trace the block manager is compared on with nano-vllm's (``python -m pagedlib.bench
memory --against nano-vllm PATH``): the bookkeeping of a running engine, without a model.

ShareGPT-like prompt and output lengths (:meth:`pagedlib.sim.Workload.sharegpt`), each prompt opened
by one of ten shared system prompts, 64 requests running at once, prefix caching on. The trace is a
list of events, the same for both managers: ``("admit", r)`` (find the cached prefix, take blocks for
the prompt, commit its full blocks), ``("decode", r, token)`` (a slot for the token sampled last,
commit the block it completes) and ``("free", r)``. Each event is one operation; ops/s is events over
the best of ``repeat`` runs, the two managers alternating in one process.

nano-vllm's code is not part of pagedlib: it is read from a checkout given on the command line
(``git show HEAD:nanovllm/engine/...`` into a temporary folder) and imported from there.
"""
from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..memory.block_manager import BlockManager

NANO_FILES = ("nanovllm/engine/block_manager.py", "nanovllm/engine/sequence.py", "nanovllm/sampling_params.py")


def make_trace(num_requests: int = 600, running: int = 64, system_prompts: int = 10, system_len: int = 256,
               seed: int = 0, max_len: int = 2048) -> tuple[list[list[int]], list[tuple]]:
    """(every request's prompt, the events), as described in the module docstring."""
    from ..sim.workload import Workload
    work = Workload.sharegpt(num_requests, seed=seed, max_len=max_len - system_len)
    rng = random.Random(seed)
    systems = [[rng.randrange(32_000) for _ in range(system_len)] for _ in range(system_prompts)]
    prompts = [systems[i % system_prompts] + [rng.randrange(32_000) for _ in range(int(p))]
               for i, p in enumerate(work.prompt_lens)]
    outputs = [int(o) for o in work.output_lens]
    events: list[tuple] = []
    queue, live, left = list(range(num_requests)), [], {}
    while queue or live:
        while queue and len(live) < running:
            r = queue.pop(0)
            events.append(("admit", r))
            live.append(r)
            left[r] = outputs[r]
        for r in list(live):                       # one decode step over the running requests
            events.append(("decode", r, rng.randrange(32_000)))
            left[r] -= 1
            if not left[r]:
                events.append(("free", r))
                live.remove(r)
    return prompts, events


def pool_size(prompts, block_size: int, running: int = 64, max_len: int = 2048) -> int:
    """Blocks enough that neither manager runs out (the trace measures bookkeeping, not preemption):
    ``running`` requests of ``max_len`` tokens, twice over, so cached prefixes are rarely evicted."""
    return 2 * running * (max(max_len, max(len(p) for p in prompts)) // block_size + 1)


def run_pagedlib(prompts, events, num_blocks: int, block_size: int, prefix_caching_hash: str = "builtin") -> float:
    """Seconds pagedlib's :class:`BlockManager` takes for the trace."""
    bm = BlockManager(num_blocks, block_size, enable_prefix_caching=True, prefix_caching_hash=prefix_caching_hash)
    tokens = {}
    allocate, append, commit, free = bm.allocate, bm.append, bm.commit, bm.free
    start = time.perf_counter()
    for event in events:
        kind, r = event[0], event[1]
        if kind == "decode":
            toks = tokens[r]
            toks.append(event[2])
            append(r)
            commit(r, len(toks), toks)
        elif kind == "admit":
            toks = tokens[r] = list(prompts[r])
            allocate(r, toks)
        else:
            free(r)
            del tokens[r]
    return time.perf_counter() - start


def load_nano(path: str | Path):
    """nano-vllm's ``BlockManager`` and ``Sequence`` from the checkout at ``path`` (a work tree or a
    bare git folder), or a string saying why not."""
    path = Path(path)
    folder = Path(tempfile.mkdtemp(prefix="pagedlib-nano-"))
    for name in NANO_FILES:
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (path / name).is_file():
            target.write_text((path / name).read_text())
            continue
        shown = subprocess.run(["git", "-C", str(path), "show", f"HEAD:{name}"], capture_output=True, text=True)
        if shown.returncode:
            return f"no {name} in {path} (neither a file nor in git HEAD): pass the nano-vllm checkout"
        target.write_text(shown.stdout)
    for pkg in ("nanovllm", "nanovllm/engine"):
        (folder / pkg / "__init__.py").write_text("")
    try:
        import xxhash  # noqa: F401  (nano-vllm's block manager hashes with it)
    except ImportError:
        return "nano-vllm's block manager needs the xxhash package (pip install xxhash)"
    sys.path.insert(0, str(folder))
    try:
        from nanovllm.engine.block_manager import BlockManager as NanoBlockManager
        from nanovllm.engine.sequence import Sequence as NanoSequence
    except Exception as exc:                       # noqa: BLE001  (report, do not crash the benchmark)
        return f"importing nano-vllm from {path} failed: {type(exc).__name__}: {exc}"
    finally:
        sys.path.remove(str(folder))
    return NanoBlockManager, NanoSequence


def run_nano(nano, prompts, events, num_blocks: int, block_size: int) -> float:
    """Seconds nano-vllm's block manager takes for the same trace, driven as its scheduler drives it."""
    NanoBlockManager, NanoSequence = nano
    NanoSequence.block_size = block_size
    bm = NanoBlockManager(num_blocks, block_size)
    seqs = {}
    for event in events:                           # its Sequence objects, made before the clock starts
        if event[0] == "admit":
            seqs[event[1]] = NanoSequence(list(prompts[event[1]]))
    can_allocate, allocate, deallocate = bm.can_allocate, bm.allocate, bm.deallocate
    can_append, may_append, hash_blocks = bm.can_append, bm.may_append, bm.hash_blocks
    start = time.perf_counter()
    for event in events:
        kind, seq = event[0], seqs[event[1]]
        if kind == "decode":
            seq.append_token(event[2])
            assert can_append(seq)
            may_append(seq)
            seq.num_scheduled_tokens = 1
            hash_blocks(seq)
            seq.num_cached_tokens += 1
        elif kind == "admit":
            cached = can_allocate(seq)
            assert cached >= 0
            allocate(seq, cached)
            seq.num_scheduled_tokens = len(seq) - seq.num_cached_tokens
            hash_blocks(seq)
            seq.num_cached_tokens = len(seq)
        else:
            deallocate(seq)
    return time.perf_counter() - start


def compare(path, repeat: int = 3, block_size: int = 16, num_requests: int = 600,
            prefix_caching_hash: str = "builtin") -> dict | str:
    """Best-of-``repeat`` ops/s of both managers on the trace, alternating; or why nano-vllm is absent."""
    nano = load_nano(path)
    if isinstance(nano, str):
        return nano
    prompts, events = make_trace(num_requests)
    num_blocks = pool_size(prompts, block_size)
    ours, theirs = [], []
    for _ in range(repeat):
        theirs.append(run_nano(nano, prompts, events, num_blocks, block_size))
        ours.append(run_pagedlib(prompts, events, num_blocks, block_size, prefix_caching_hash))
    ops = len(events)
    return {"events": ops, "pagedlib_ops_s": ops / min(ours), "nano_ops_s": ops / min(theirs),
            "ratio": min(theirs) / min(ours), "num_blocks": num_blocks}
