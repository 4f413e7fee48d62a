"""paged_attention_varlen, the one kernel for a mixed batch, against a gather-and-softmax reference.

The grid is vLLM's kernel-test grid (tests/kernels/attention/test_triton_unified_attention.py): heads
(40, 40) and (64, 8), head sizes 64, 80, 96, 112, 128, 256, block sizes 16 and 32, fp16 and fp32.
Each case is a random mix of decode rows (one new token over a cached context) and prefill chunks
(a chunk over a cached prefix, or a whole prompt), contexts up to 2k tokens. As in the engine, block
0 is the null block that no sequence owns: every padded block-table entry names it, and it holds NaN,
like every other slot no sequence owns. A kernel that reads one of them gives NaN, and fails.

The interpreter runs on two shared CPU cores, so the default run takes a seeded sample of the grid in
which every listed value appears at least once (``SAMPLE``, marked slow: the quick loop keeps the
pieces below, every path of the kernel, one pass, split, empty splits and exits, at small head dims
in fp32 and fp16); the full grid runs on a GPU only (``scripts/gpu_check.sh``), where it is compiled.
Tolerances as in tests/test_attention.py: fp32 1e-5, fp16 3e-3 (probabilities go to P @ V in fp16).
"""
import itertools
import random
from dataclasses import dataclass

import pytest
import torch

import pagedlib
from pagedlib.attention.kernels.launch import VARLEN_SPLIT_Q, device_capability, launch_config, varlen_grid
from pagedlib import paged_attention_varlen
from pagedlib.attention.inputs import nan_caches

DEVICE = pagedlib.runtime.DEVICE
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=3e-3, rtol=3e-3)}
HEADS = [(40, 40), (64, 8)]
HEAD_SIZES = [64, 80, 96, 112, 128, 256]
BLOCK_SIZES = [16, 32]
DTYPES = [torch.float16, torch.float32]
GRID = list(itertools.product(HEADS, HEAD_SIZES, BLOCK_SIZES, DTYPES))
NULL_BLOCK = 0                     # the engine's null block: owned by no sequence, named by every padding entry


def sample_grid(seed: int = 25) -> list[tuple]:
    """One case per head size, the other axes cycled from a seeded shuffle: every value appears."""
    rng = random.Random(seed)
    others = list(itertools.product(HEADS, BLOCK_SIZES, DTYPES))
    rng.shuffle(others)
    cases = [(heads, head_size, block, dtype) for head_size, (heads, block, dtype)
             in zip(HEAD_SIZES, itertools.cycle(others))]
    for axis, values in enumerate((HEADS, HEAD_SIZES, BLOCK_SIZES, DTYPES)):
        assert {c[axis] for c in cases} == set(values), f"the sample misses a value of axis {axis}"
    return cases


SAMPLE = sample_grid()


def case_id(case) -> str:
    (h, kv), d, b, dtype = case
    return f"heads{h}:{kv}-d{d}-bs{b}-{str(dtype).split('.')[-1]}"


@dataclass
class Batch:
    """One step's inputs; ``args()`` in the order of paged_attention_varlen."""

    query: torch.Tensor
    key_cache: torch.Tensor
    value_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor

    def args(self):
        return (self.query, self.key_cache, self.value_cache, self.block_tables, self.seq_lens,
                self.query_start_loc)


def make_batch(chunks: list[int], contexts: list[int], num_heads: int, num_kv_heads: int, head_dim: int,
               block_size: int, dtype=torch.float32, *, seed: int = 0, extra_columns: int = 1,
               scale_q: float = 1.0) -> Batch:
    """Sequence s has ``contexts[s]`` tokens in the cache, its last ``chunks[s]`` new this step.

    Its pages are drawn at random from blocks 1.. (block 0 is the null block); the block table is
    padded with ``extra_columns`` more entries naming the null block. Every slot no sequence owns,
    the null block included, holds NaN.
    """
    gen = torch.Generator().manual_seed(seed)
    pages = [-(-n // block_size) for n in contexts]
    num_blocks = 1 + sum(pages) + 3                                        # + a few spare blocks, also NaN
    ids = 1 + torch.randperm(num_blocks - 1, generator=gen)[:sum(pages)]
    max_blocks = max(pages) + extra_columns
    tables = torch.full((len(contexts), max_blocks), NULL_BLOCK, dtype=torch.int32)
    first = 0
    for s, p in enumerate(pages):
        tables[s, :p] = ids[first:first + p].to(torch.int32)
        first += p
    key_cache, value_cache = nan_caches(tables, contexts, num_blocks, block_size, num_kv_heads, head_dim, gen)
    query = torch.randn(sum(chunks), num_heads, head_dim, generator=gen) * scale_q
    starts = torch.tensor([0, *itertools.accumulate(chunks)], dtype=torch.int32)
    to = dict(device=DEVICE)
    return Batch(query.to(dtype=dtype, **to), key_cache.to(dtype=dtype, **to), value_cache.to(dtype=dtype, **to),
                 tables.to(**to), torch.tensor(contexts, dtype=torch.int32, device=DEVICE), starts.to(**to))


def random_mix(rng: random.Random, block_size: int, num_seqs: int = 5, longest: int = 2048,
               longest_chunk: int | None = None):
    """(chunks, contexts): decode rows, prefill chunks over a cached prefix and whole prompts, mixed;
    a decode row at a context near ``longest``, a chunk over a prefix of about half of it, ragged edges
    (1 token, a page, a page plus one) among the rest. ``longest_chunk`` caps the new tokens of any
    sequence (the interpreter's time goes with them)."""
    chunks, contexts = [], []
    cap = longest_chunk or longest
    for s in range(num_seqs):
        kind = ("decode", "chunk", "prompt", "decode")[s % 4]
        if s == 0:
            context = longest - rng.randrange(40)
        elif s == 1:
            context = longest // 2 + rng.randrange(block_size)
        else:
            context = rng.choice([1, block_size, block_size + 1, rng.randrange(2, min(300, longest))])
        if kind == "decode":
            chunk = 1
        elif kind == "chunk":
            chunk = rng.randrange(1, min(context, cap) + 1)
        else:
            chunk = context = min(context, cap)
        chunks.append(chunk)
        contexts.append(context)
    order = list(range(num_seqs))
    rng.shuffle(order)
    return [chunks[i] for i in order], [contexts[i] for i in order]


def reference(b: Batch, scale: float | None = None) -> torch.Tensor:
    """Gather each sequence's K/V through its block table, then causal softmax attention in fp64."""
    q_all = b.query.double()
    num_heads, head_dim = q_all.shape[1:]
    scale = head_dim ** -0.5 if scale is None else scale
    out = torch.zeros_like(q_all)
    starts, block_size = b.query_start_loc.tolist(), b.key_cache.shape[1]
    for s, n in enumerate(b.seq_lens.tolist()):
        first, last = starts[s], starts[s + 1]
        pages = b.block_tables[s, :-(-n // block_size)].long()
        k = b.key_cache[pages].flatten(0, 1)[:n].double()                 # [n, kv_heads, dim]
        v = b.value_cache[pages].flatten(0, 1)[:n].double()
        group = num_heads // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        q = q_all[first:last]
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        q_pos = n - (last - first) + torch.arange(last - first)
        scores = scores.masked_fill(torch.arange(n)[None, :] > q_pos[:, None].to(scores.device), float("-inf"))
        out[first:last] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)
    return out.to(b.query.dtype)


def check(b: Batch, **kwargs):
    out = paged_attention_varlen(*b.args(), **kwargs)
    assert out.shape == b.query.shape and out.dtype == b.query.dtype
    assert torch.isfinite(out).all(), "NaN from a slot no sequence owns (or the null block) leaked into the output"
    torch.testing.assert_close(out, reference(b), **TOL[b.query.dtype])
    return out


def grid_case(case, num_splits, seed: int, longest: int = 2048, num_seqs: int = 5, longest_chunk=None):
    (num_heads, num_kv_heads), head_dim, block_size, dtype = case
    rng = random.Random(seed)
    chunks, contexts = random_mix(rng, block_size, num_seqs, longest=longest, longest_chunk=longest_chunk)
    return make_batch(chunks, contexts, num_heads, num_kv_heads, head_dim, block_size, dtype, seed=seed)


# ---- the grid ---------------------------------------------------------------------------------------
@pytest.mark.slow   # an interpreter grid, about 75 s of CPU: `make test` and CI run it, `make unit` leaves it out
@pytest.mark.parametrize("case", SAMPLE, ids=case_id)
def test_mixed_batch_matches_the_reference(case):
    # split-K on (num_splits 3) for the sample: every case runs both paths, the split and the one-pass;
    # one case reaches a 2k context, the others 256 tokens, chunks of at most 24 new tokens (the
    # interpreter's time goes with the query tiles and the heads: the full grid has whole prompts)
    i = SAMPLE.index(case)
    check(grid_case(case, 3, seed=i, longest=2048 if i == 0 else 256, num_seqs=4, longest_chunk=24),
          num_splits=3)


if DEVICE.type == "cuda":   # the whole grid compiled on a GPU (scripts/gpu_check.sh runs this file):
    # through the interpreter one case takes minutes, 432 of them hours, so a CPU runs SAMPLE above
    @pytest.mark.slow
    @pytest.mark.parametrize("num_splits", [1, None, 4], ids=lambda s: f"splits{s}")
    @pytest.mark.parametrize("case", GRID, ids=case_id)
    def test_full_grid(case, num_splits):
        check(grid_case(case, num_splits, seed=GRID.index(case)), num_splits=num_splits)


# ---- the pieces -------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_splits", [1, 2, 5])
def test_decode_only_prefill_only_and_mixed_agree_with_the_reference(num_splits):
    for chunks, contexts in [([1, 1, 1], [1, 37, 300]),                  # decode only
                             ([5, 40, 17], [5, 40, 60]),                 # prefill only (one over a prefix)
                             ([1, 12, 1, 3], [90, 12, 17, 4])]:          # mixed; 3 new tokens <= SPLIT_Q
        check(make_batch(chunks, contexts, 8, 2, 64, 16), num_splits=num_splits)


def test_a_sequence_with_no_new_tokens_gets_no_rows_and_harms_none():
    b = make_batch([3, 0, 1], [7, 20, 33], 4, 4, 32, 16)
    check(b, num_splits=2)


def test_query_rows_past_split_q_take_the_one_pass_path_and_both_paths_agree():
    # the same sequence with SPLIT_Q + 1 new tokens (one pass) and with SPLIT_Q (split): both exact
    for group in (2, 8):                                                 # split_q 4 (tile_q 8), 2 (tile_q 2)
        split_q = launch_config(64, torch.float32, group, device_capability(DEVICE)).split_q
        assert split_q == min(VARLEN_SPLIT_Q, 16 // group)
        for chunk in (split_q, split_q + 1):
            check(make_batch([chunk], [200], group, 1, 64, 16, seed=chunk), num_splits=4)


def test_more_splits_than_tiles_leaves_empty_splits_harmless():
    # 3 tokens over 8 splits: most splits have no key at all (lse -inf); a causal row whose
    # split holds only later keys is fully masked: neither may produce NaN
    check(make_batch([2, 1], [3, 2], 4, 1, 64, 16), num_splits=8)


def test_a_row_that_sees_no_key_of_its_split_gives_no_nan():
    # context 3 tiles + 2, its last 4 tokens new, 4 splits of one tile each: the last split holds
    # keys 3t and 3t+1 only, so the rows at 3t-2 and 3t-1 see none of them (the causal mask): their
    # running max stays -inf through a whole tile, and exp2(-inf - -inf) would be NaN
    tile = launch_config(64, torch.float32, 4, device_capability(DEVICE)).tile
    check(make_batch([4], [3 * tile + 2], 4, 1, 64, 16), num_splits=4)


def test_large_scores_do_not_overflow_exp2():
    # scores of several hundred: the running max must be subtracted before exp2
    check(make_batch([1, 9], [70, 40], 4, 2, 64, 16, scale_q=30.0), num_splits=3)


def test_grid_is_an_upper_bound_from_shapes_alone_and_exact_for_decode():
    cfg = launch_config(64, torch.float16, 8, (9, 0))
    assert cfg.tile_q == 2                                               # 16 rows = 2 tokens x 8 heads
    rng = random.Random(0)
    for _ in range(200):
        chunks = [rng.choice([0, 1, 1, 2, 3, rng.randrange(60)]) for _ in range(rng.randrange(1, 9))]
        needed = sum(-(-c // cfg.tile_q) for c in chunks)
        assert needed <= varlen_grid(sum(chunks), len(chunks), 1, cfg, 1)[0] <= needed + len(chunks) - 1
        assert varlen_grid(len(chunks), len(chunks), 1, cfg, 1)[0] == len(chunks)      # decode: one each


def test_no_host_sync_the_launch_reads_no_tensor_value(monkeypatch):
    # validate=False must never turn a tensor into a Python number (a GPU sync, not capturable)
    b = make_batch([1, 6], [30, 6], 4, 2, 32, 16)
    for name in ("item", "tolist", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, lambda *a, _n=name: pytest.fail(f"Tensor.{_n} on the hot path"))
    out = paged_attention_varlen(*b.args(), num_splits=2, validate=False)
    monkeypatch.undo()
    torch.testing.assert_close(out, reference(b), **TOL[torch.float32])


def test_a_fixed_split_count_is_batch_invariant():
    # the same sequence alone and inside a bigger batch: bit-identical with num_splits fixed
    alone = make_batch([1], [700], 8, 2, 64, 16, torch.float16, seed=3)
    big = make_batch([1, 30, 1, 2], [700, 30, 90, 45], 8, 2, 64, 16, torch.float16, seed=3)
    # put the lone sequence's data into the big batch's first sequence
    big.query[0] = alone.query[0]
    pages = -(-700 // 16)
    big.key_cache[big.block_tables[0, :pages].long()] = alone.key_cache[alone.block_tables[0, :pages].long()]
    big.value_cache[big.block_tables[0, :pages].long()] = alone.value_cache[alone.block_tables[0, :pages].long()]
    for splits in (1, 3):
        a = paged_attention_varlen(*alone.args(), num_splits=splits)[0]
        b = paged_attention_varlen(*big.args(), num_splits=splits)[0]
        assert torch.equal(a, b), f"num_splits={splits}: the output depends on the batch"


# ---- bad inputs -------------------------------------------------------------------------------------
def small():
    return make_batch([1, 3], [5, 9], 4, 2, 16, 16)


BAD = {
    "int_cache": (lambda b: b.update(key_cache=b["key_cache"].int(), value_cache=b["value_cache"].int()),
                  ["key_cache"]),
    "table_int64": (lambda b: b.update(block_tables=b["block_tables"].long()), ["block_tables", "int32"]),
    "starts_length": (lambda b: b.update(query_start_loc=b["query_start_loc"][:-1]),
                      ["query_start_loc", "num_seqs + 1"]),
    "starts_not_total": (lambda b: b.update(query_start_loc=torch.tensor([0, 1, 3], dtype=torch.int32,
                                                                          device=DEVICE)), ["num_tokens = 4"]),
    "chunk_longer_than_context": (lambda b: b.update(seq_lens=torch.tensor([5, 2], dtype=torch.int32,
                                                                           device=DEVICE)), ["sequence 1"]),
    "heads_not_a_multiple": (lambda b: b.update(query=b["query"][:, :3]), ["multiple", "num_kv_heads"]),
    "dtype_mismatch": (lambda b: b.update(query=b["query"].half()), ["query", "dtype"]),
    "block_outside_cache": (lambda b: b["block_tables"].__setitem__((0, 0), 999), ["block_tables[0, 0]"]),
    "splits_zero": (lambda b: b.update(num_splits=0), ["num_splits"]),
    "splits_float": (lambda b: b.update(num_splits=2.0), ["num_splits"]),
    "scale_nan": (lambda b: b.update(scale=float("nan")), ["scale"]),
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_refused_with_a_clear_error(name):
    b = small()
    kwargs = dict(zip(("query", "key_cache", "value_cache", "block_tables", "seq_lens", "query_start_loc"),
                      b.args()))
    change, words = BAD[name]
    change(kwargs)
    with pytest.raises(ValueError) as err:
        paged_attention_varlen(**kwargs)
    for word in words:
        assert word in str(err.value), f"{name}: {word!r} not in {err.value}"


# ---- the engine ---------------------------------------------------------------------------------------
def spy_on_the_kernels(monkeypatch):
    """Record every varlen launch as (new tokens per sequence); fail on the chapter 8/9 kernels."""
    from pagedlib.attention import triton_backend
    launches = []
    real = triton_backend.paged_attention_varlen

    def spy(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, *args, **kwargs):
        launches.append((query_start_loc[1:] - query_start_loc[:-1]).tolist())
        return real(query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("the engine's Triton backend called a chapter 8/9 kernel, not paged_attention_varlen")

    monkeypatch.setattr(triton_backend, "paged_attention_varlen", spy)
    monkeypatch.setattr(triton_backend, "paged_attention", refuse)
    monkeypatch.setattr(triton_backend, "paged_prefill", refuse)
    return launches


def test_the_triton_backend_serves_every_step_mixed_or_not_with_one_varlen_launch(monkeypatch):
    from test_llama import assert_matches_transformers, paged, random_prompts
    launches = spy_on_the_kernels(monkeypatch)
    name = "gqa8_2"                                           # 8 query heads over 2 KV heads: GQA packing
    llm = pagedlib.LLM(paged(name, "triton", layers=1), num_usable_blocks=24, block_size=4, max_num_seqs=3,
                       max_num_batched_tokens=8)
    assert_matches_transformers(llm, name, random_prompts(3, lo=5, hi=14, seed=4), 5, layers=1)
    steps = llm.metrics["history"]
    assert len(launches) == len(steps)                        # one launch per step (one layer)
    mixed = [c for c in launches if any(n == 1 for n in c) and any(n > 1 for n in c)]
    decode_only = [c for c in launches if all(n == 1 for n in c)]
    assert mixed, f"no mixed step among {launches}: the token budget should mix decode rows and chunks"
    assert decode_only, "no decode-only step: the last steps of the run decode only"


# ---- the benchmark (its GPU timings need a GPU; its code path runs here with a stub timer) -----------
def test_varlen_bench_rows_one_kernel_vs_separate_and_the_price_of_paging(monkeypatch):
    from pagedlib.bench import attention as bench
    monkeypatch.setattr(bench, "MIXES", [(3, 0), (2, 2)])
    args = bench.parse_args(["--varlen", "--context", "40", "--block-size", "16", "--heads", "4", "2",
                             "--head-dim", "32", "--dtype", "fp32", "--chunk", "5"])
    calls = []
    rows = bench.run_varlen(args, timer=lambda fn: (calls.append(fn()), 1.0)[1])   # runs each timed function once
    assert [r["what"] for r in rows] == ["one kernel vs separate"] * 2 + ["price of paging"] * 3
    assert [(r["layout"], r["block_size"]) for r in rows[2:]] == [("identity", 16), ("shuffled", 16), ("one_page", 40)]
    assert len(calls) == 2 * 2 + 3 and all(torch.isfinite(c).all() for c in calls)


def test_the_mixed_bench_batch_gives_both_paths_the_same_rows():
    from pagedlib.bench.attention import mixed_inputs, separate_kernels
    for layout in ("shuffled", "identity", "one_page"):
        x = mixed_inputs(2, 2, 6, 37, 16, 4, 1, 32, torch.float32, layout=layout)
        b = Batch(*x["args"])
        torch.testing.assert_close(separate_kernels(x), reference(b), **TOL[torch.float32])
        torch.testing.assert_close(paged_attention_varlen(*x["args"]), reference(b), **TOL[torch.float32])
