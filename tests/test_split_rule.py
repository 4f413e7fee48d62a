"""The split-K rule (``launch.choose_num_splits``) and the grids it launches, as properties.

One rule for both entry points, FlashAttention-3's (``hopper/heuristics.h``, ``num_splits_heuristic``):
no split once the single pass fills 80% of a wave, every split more than 4 key tiles, the fewest
splits within 85% of the best wave efficiency. No GPU needed: the rule is arithmetic, and the entry
points' launches are recorded instead of run.
"""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from pagedlib.attention import triton_backend
from pagedlib.attention.kernels import launch
from pagedlib.attention.kernels.split_k import split_bounds, split_ranges
from pagedlib.attention.kernels.varlen import varlen_programs

H100_SMS = 132
sms_st = st.sampled_from([1, 8, 40, 46, 58, 78, 80, 108, 132, 144])   # T4 40, A100 108, H100 132 ...
programs_st = st.integers(1, 400)
per_sm_st = st.sampled_from([1, 2, 3, 4, 8])
tiles_st = st.integers(1, 4096)


@given(programs_st, tiles_st, sms_st, per_sm_st)
def test_no_split_once_the_single_pass_fills_four_fifths_of_a_wave(programs, key_tiles, sms, per_sm):
    s = launch.choose_num_splits(programs, key_tiles, sms, per_sm)
    if programs >= launch.FULL_WAVE * sms * per_sm:
        assert s == 1
    assert 1 <= s <= min(launch.MAX_SPLITS, sms * per_sm)


@given(programs_st, tiles_st, sms_st, per_sm_st)
def test_every_split_holds_more_than_four_key_tiles_and_none_is_empty(programs, key_tiles, sms, per_sm):
    s = launch.choose_num_splits(programs, key_tiles, sms, per_sm)
    if s > 1:
        bounds = split_bounds(key_tiles, s)
        held = [b - a for a, b in zip(bounds, bounds[1:])]
        assert min(held) > 4 and sum(held) == key_tiles


@given(programs_st, tiles_st, sms_st, per_sm_st)
def test_the_choice_is_the_fewest_splits_within_85_percent_of_the_best_wave(programs, key_tiles, sms, per_sm):
    s = launch.choose_num_splits(programs, key_tiles, sms, per_sm)
    slots = sms * per_sm                                 # a wave: every SM holds per_sm programs
    if programs >= 0.8 * slots:
        return
    allowed = [k for k in range(1, min(launch.MAX_SPLITS, slots) + 1) if k == 1 or key_tiles // k >= 5]

    def efficiency(k):                                   # waves / ceil(waves), written out again
        waves = programs * k / slots
        return waves / math.ceil(waves)
    best = max(efficiency(k) for k in allowed)
    assert efficiency(s) >= 0.85 * best
    assert all(efficiency(k) < 0.85 * best for k in allowed if k < s)


@given(programs_st, tiles_st, st.integers(1, 4096), sms_st, per_sm_st)
def test_longer_sequences_never_get_fewer_splits(programs, key_tiles, more, sms, per_sm):
    longer = launch.choose_num_splits(programs, key_tiles + more, sms, per_sm)
    assert longer >= launch.choose_num_splits(programs, key_tiles, sms, per_sm)


@given(tiles_st, sms_st, per_sm_st, st.integers(0, 400))
def test_a_batch_that_fills_the_gpu_stays_unsplit_as_it_grows(key_tiles, sms, per_sm, more):
    full = math.ceil(launch.FULL_WAVE * sms * per_sm)
    assert launch.choose_num_splits(full + more, key_tiles, sms, per_sm) == 1


def test_the_h200_measurements_choices_on_an_h100_sized_gpu():
    # Llama-3-8B (8 KV heads), head_dim 128, fp16, 16k context: the split counts the H200 record
    # ran fastest (lead's run, 2026-12-04): batch 8 -> 8, 16 -> 4, 32 -> 2, 64 -> 1; each within 15%
    cfg = launch.launch_config(128, torch.float16, 4, (9, 0))
    per_sm = launch.resident_programs(cfg, torch.float16, (9, 0))
    assert per_sm == 4                                   # the resource table's 4 programs per SM
    got = {b: launch.auto_num_splits(b, b, 8, cfg, 16384, H100_SMS, per_sm) for b in (1, 8, 16, 17, 32, 64)}
    assert got == {1: 28, 8: 7, 16: 4, 17: 7, 32: 2, 64: 1}


def test_no_jump_between_16_and_17_sequences():
    # the old rule gave 16 sequences x 8 KV heads (128 programs) 3 splits and 17 sequences 1; waves
    # of 4 programs per SM: 16 -> 4 splits (512 programs, 97% of a wave), 17 -> 7 (952, 90% of 2)
    assert [launch.choose_num_splits(n * 8, 16384 // 64, H100_SMS, 4) for n in (15, 16, 17)] == [4, 4, 7]
    assert [launch.choose_num_splits(n * 8, 16384 // 64, H100_SMS, 1) for n in (14, 15, 16, 17)] == [1, 1, 1, 1]


# ---- both entry points take the same decision ----------------------------------------------------
class Recorder:
    """Stands in for a Triton kernel: records the grid and the arguments of each launch."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __getitem__(self, grid):
        return lambda *args, **meta: self.log.append((self.name, tuple(grid), args))


def record_launches(monkeypatch, sms):
    log = []
    for name in ("decode_kernel", "split_kernel", "merge_kernel", "varlen_kernel", "varlen_merge_kernel"):
        monkeypatch.setattr(triton_backend, name, Recorder(name, log))
    monkeypatch.setattr(triton_backend, "num_sms", lambda device: sms)
    return log


def decode_inputs(num_seqs, num_kv_heads, group, max_blocks, head_dim=64, block_size=16):
    query = torch.zeros(num_seqs, num_kv_heads * group, head_dim)
    cache = torch.zeros(2, block_size, num_kv_heads, head_dim)
    tables = torch.zeros(num_seqs, max_blocks, dtype=torch.int32)
    seq_lens = torch.ones(num_seqs, dtype=torch.int32)
    return query, cache, cache.clone(), tables, seq_lens


def decode_splits(log):
    (name, grid, _), *_ = log
    return 1 if name == "decode_kernel" else grid[2]


def varlen_splits(log):
    (name, grid, args), *_ = log
    assert name == "varlen_kernel"
    return args[11]                                      # varlen_kernel(..., num_seqs, num_splits, ...)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 4, 8, 32]), st.integers(1, 600),
       st.sampled_from([40, 108, 132]))
def test_paged_attention_and_the_varlen_kernel_split_a_decode_batch_alike(num_seqs, num_kv_heads, group,
                                                                          max_blocks, sms):
    with pytest.MonkeyPatch.context() as mp:
        log = record_launches(mp, sms)
        x = decode_inputs(num_seqs, num_kv_heads, group, max_blocks)
        triton_backend.paged_attention(*x, validate=False)
        decode = decode_splits(log)
        log.clear()
        qsl = torch.arange(num_seqs + 1, dtype=torch.int32)
        triton_backend.paged_attention_varlen(*x, qsl, validate=False)
        assert varlen_splits(log) == decode
        cfg = launch.launch_config(64, torch.float32, group, launch.INTERPRETER)
        assert decode == launch.choose_num_splits(num_seqs * num_kv_heads, math.ceil(max_blocks * 16 / cfg.tile), sms,
                                                  launch.UNKNOWN_PER_SM)       # the interpreter: no SM limits


# ---- no program that only exits -----------------------------------------------------------------
group_st = st.sampled_from([1, 2, 4, 8, 16, 32])


@given(st.lists(st.integers(1, 3000), min_size=1, max_size=12), group_st, st.integers(1, 8))
def test_a_decode_batch_launches_no_program_that_only_exits(contexts, group, num_splits):
    cfg = launch.launch_config(128, torch.float16, group, (9, 0))
    chunks = [1] * len(contexts)
    programs = varlen_programs(chunks, contexts, cfg.tile_q, num_splits, cfg.tile, cfg.split_q)
    assert len(programs) == launch.varlen_grid(len(chunks), len(chunks), 1, cfg, num_splits)[0]
    assert [p["kind"] for p in programs if p["kind"] == "exits"] == []


@given(st.lists(st.integers(0, 300), min_size=1, max_size=10), group_st, st.integers(1, 8))
def test_a_fixed_split_count_adds_programs_per_split_sequence_not_per_tile(chunks, group, num_splits):
    cfg = launch.launch_config(128, torch.float16, group, (9, 0))
    contexts = [c + 50 for c in chunks]
    programs = varlen_programs(chunks, contexts, cfg.tile_q, num_splits, cfg.tile, cfg.split_q)
    assert len(programs) == launch.varlen_grid(sum(chunks), len(chunks), 1, cfg, num_splits)[0]
    tiles = launch.varlen_tiles(sum(chunks), len(chunks), cfg.tile_q)
    # the tiles: at most num_seqs - 1 spare tile numbers (the shape-only bound's rounding)
    assert sum(p["kind"] == "exits" for p in programs[:tiles]) <= len(chunks) - 1
    # splits 1 and up: one program per (split, sequence), used unless the sequence has more than one tile's tokens
    unsplit = sum(not 0 < c <= cfg.split_q for c in chunks) if num_splits > 1 else 0
    assert sum(p["kind"] == "exits" for p in programs[tiles:]) == unsplit * (num_splits - 1)


def test_a_2048_token_chunk_at_8_splits_launches_its_tiles_and_seven_spare_programs():
    # the old grid launched (2048 // tile_q + 1) x 8 programs per KV head, 7 of every 8 exiting
    cfg = launch.launch_config(128, torch.float16, 4, (9, 0))
    programs = varlen_programs([2048], [2048], cfg.tile_q, 8, cfg.tile, cfg.split_q)
    assert len(programs) == 2048 // cfg.tile_q + 7
    assert sum(p["kind"] == "exits" for p in programs) == 7


@given(st.integers(0, 5000), st.integers(1, 32), st.sampled_from([16, 32, 64]))
def test_split_ranges_share_the_tiles_evenly_and_cover_the_sequence(seq_len, num_splits, tile):
    ranges = split_ranges(seq_len, num_splits, tile)
    assert ranges[0][0] == 0 and ranges[-1][1] == seq_len
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    tiles = [math.ceil((b - a) / tile) for a, b in ranges]
    assert max(tiles) - min(tiles) <= 1


@given(programs_st, tiles_st, sms_st, per_sm_st)
def test_chapter_9s_reference_solution_is_the_librarys_rule(programs, key_tiles, sms, per_sm):
    from pagedlib.exercises import ch09
    assert ch09.num_splits.reference(programs, key_tiles, sms, per_sm) == launch.choose_num_splits(
        programs, key_tiles, sms, per_sm)


# ---- NaN guards: a sequence with no token ---------------------------------------------------------
def test_split_k_gives_an_empty_sequence_zeros_like_the_single_pass():
    from pagedlib.attention.inputs import random_paged_inputs
    x = random_paged_inputs([0, 40, 0], num_heads=4, num_kv_heads=2, head_dim=32, block_size=16, seed=1)
    args = x.args()
    one = triton_backend.paged_attention(*args, num_splits=1, validate=False)
    split = triton_backend.paged_attention(*args, num_splits=3, validate=False)
    assert torch.isfinite(split).all(), "the merge of a sequence with no token gave NaN"
    assert (split[0] == 0).all() and (split[2] == 0).all() and (one[0] == 0).all()
    torch.testing.assert_close(split, one)


def test_the_merge_checker_tries_two_empty_ranges():
    # the solution the old hints gave: right on every case but (empty, empty), where it gives NaN
    from pagedlib.exercises import ch09

    def unguarded(o1, lse1, o2, lse2):
        lse = torch.logaddexp(lse1, lse2)
        return torch.exp(lse1 - lse) * o1 + torch.exp(lse2 - lse) * o2, lse
    result = ch09.merge_partials.check(unguarded)
    assert not result.correct and "two empty ranges" in result.message
    empty = (torch.zeros(4), torch.tensor(float("-inf")))
    out, lse = ch09.merge_partials.reference(*empty, *empty)
    assert (out == 0).all() and lse == float("-inf")
