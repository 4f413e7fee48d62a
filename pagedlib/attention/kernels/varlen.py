"""One kernel for every step: paged attention over a mixed batch of decode rows and prefill chunks (chapter 9).

Under a token budget (chapters 10 and 11) nearly every engine step is *mixed*: some sequences bring
one new token (decode), others a chunk of a prompt (chunked prefill). ``varlen_kernel`` serves all of
them in one launch, with the two ideas of chapters 8 and 9 combined:

- **Packed GQA tile.** A program owns ``TILE_Q`` consecutive new tokens of one sequence and the
  ``GROUP`` query heads that share one KV head: ``TILE_Q * GROUP`` rows of one ``[TILE_M,
  HEAD_DIM_PAD]`` query tile (row ``r`` is token ``r // GROUP``, head ``r % GROUP``). Every K/V row
  the program reads serves the whole tile, so a GQA group's cache is read once, not once per head.
  A decode row is a tile whose token count is 1.
- **A grid from shapes alone.** Sequence ``s``'s tiles are numbered from ``(query_start_loc[s] +
  (TILE_Q - 1) * s) // TILE_Q``, so ``(total_q + (TILE_Q - 1) * num_seqs) // TILE_Q`` programs per
  KV head are always enough, whatever the chunk lengths (``launch.varlen_tiles``): no value is read
  back to the host, so a CUDA graph can capture the launch. It is exact for a decode-only batch; a
  mixed one may get up to ``num_seqs - 1`` tile numbers past a sequence's last tile, whose programs
  find their sequence by binary search and exit.
- **Split-K for few rows.** A sequence with at most ``SPLIT_Q`` new tokens (decode rows; a few
  speculative tokens; never more than one tile) has too few tiles to keep a GPU busy over a long
  context, so with ``num_splits > 1`` its key range is cut into ``num_splits`` ranges: split 0 is
  its tile's program, splits 1 and up are ``num_seqs * (num_splits - 1)`` programs after the
  tiles, one per (split, sequence), which a sequence with a longer chunk leaves unused. Each split
  stores a partial output and log-sum-exp; ``varlen_merge_kernel`` combines them. Longer chunks have
  tiles enough and attend in one pass.
- **exp2.** Scores are computed in base 2: ``log2(e)`` is folded into ``scale``, so
  ``exp(x * scale) = exp2(x * scale * log2(e))`` and the softmax costs one ``exp2`` per score (the
  GPU's native instruction). Maxima and log-sum-exps are in base 2 too. The loop over the keys is
  chapter 8's ``attend_tiles``, with its compile-time switch ``BASE2`` on.
- **No NaN from masked tiles.** A row may see no key in a whole tile or a whole split (the causal
  mask, an empty split); its running max stays ``-inf`` and ``exp2(-inf - -inf)`` would be NaN, so
  the max is replaced by 0 where it is still ``-inf``. Cache slots a sequence does not own (past
  ``seq_len``, padded block-table entries) are never loaded: the masked loads return 0.
"""

import triton
import triton.language as tl

from .decode import attend_tiles, normalise
from .prefill import load_packed_queries
from .split_k import split_ranges

LOG2E = 1.4426950408889634     # log2(e): exp(x) = exp2(x * LOG2E)


def varlen_split_ranges(end: int, num_splits: int, tile: int) -> list[tuple[int, int]]:
    """The key ranges ``[start, stop)`` of one tile's splits, computed on the host (chapter 9's figure):
    keys ``0 .. end - 1``, their tiles shared out evenly (``split_bounds``). Keep it in step with the kernel."""
    return split_ranges(end, num_splits, tile)


def varlen_programs(chunks: list[int], contexts: list[int], tile_q: int, num_splits: int, tile: int,
                    split_q: int) -> list[dict]:
    """What each program of one KV head does, computed on the host (chapter 9's figure; keep it in step
    with ``varlen_kernel``). Sequence ``s`` has ``contexts[s]`` tokens, its last ``chunks[s]`` new;
    ``split_q`` is the launch's ``LaunchConfig.split_q`` (at most ``tile_q``).

    One dict per program of the grid (``launch.varlen_grid``): the tiles first, then splits 1 to
    ``num_splits - 1`` of each sequence. Each has ``tile``, ``split``, ``seq``, the chunk's new tokens
    it owns ``tokens = (lo, hi)``, the keys it reads ``keys = (start, stop)`` and ``kind``: "one
    pass", "split" (its partials go to the merge) or "exits" (a tile number past its sequence's last
    tile, which the shape-only grid may hold, or a split of a sequence that is not split)."""
    num_seqs = len(chunks)
    starts = [0]
    for c in chunks:
        starts.append(starts[-1] + c)
    first_tiles = [(starts[s] + (tile_q - 1) * s) // tile_q for s in range(num_seqs)]
    num_tiles = (starts[-1] + (tile_q - 1) * num_seqs) // tile_q
    slots = [(t, 0, max(s for s, first in enumerate(first_tiles) if first <= t)) for t in range(num_tiles)]
    slots += [(first_tiles[seq], split, seq) for split in range(1, num_splits) for seq in range(num_seqs)]
    programs = []
    for t, split, seq in slots:
        local = t - first_tiles[seq]
        chunk, context = chunks[seq], contexts[seq]
        split_seq = chunk <= split_q and num_splits > 1
        if local * tile_q >= chunk or (split > 0 and not split_seq):
            programs.append(dict(tile=t, split=split, seq=seq, tokens=(0, 0), keys=(0, 0), kind="exits"))
            continue
        end = min(context - chunk + (local + 1) * tile_q, context)
        keys = varlen_split_ranges(end, num_splits, tile)[split] if split_seq else (0, end)
        programs.append(dict(tile=t, split=split, seq=seq, tokens=(local * tile_q, min((local + 1) * tile_q, chunk)),
                             keys=keys, kind="split" if split_seq else "one pass"))
    return programs


@triton.jit
def find_sequence(query_start_loc, tile, num_seqs, TILE_Q: tl.constexpr):
    """The sequence whose tiles include ``tile``: the last ``s`` whose first tile,
    ``(query_start_loc[s] + (TILE_Q - 1) * s) // TILE_Q`` (``launch.varlen_first_tile``), is ``<= tile``."""
    lo = 0
    hi = num_seqs
    while lo < hi:                                                 # binary search over the tile starts
        mid = (lo + hi) // 2
        first_tile = (tl.load(query_start_loc + mid).to(tl.int64) + (TILE_Q - 1) * mid) // TILE_Q
        if first_tile <= tile:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def varlen_kernel(out, partial_out, partial_lse, query, key_cache, value_cache, block_tables, seq_lens,
                  query_start_loc, qk_scale, num_seqs, num_splits,
                  stride_qt, stride_qh, stride_ot, stride_oh,
                  stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, stride_bt,
                  GROUP: tl.constexpr, TILE_M: tl.constexpr, TILE_Q: tl.constexpr, SPLIT_Q: tl.constexpr,
                  BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                  HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Causal attention of one tile of (new tokens x GQA group) over one key range of its sequence.

    Grid: (tiles + num_seqs * (num_splits - 1), num_kv_heads) (``launch.varlen_grid``): program
    ``p < tiles`` is tile ``p`` (split 0), program ``tiles + (split - 1) * num_seqs + s`` is split
    ``split`` of sequence ``s``'s one tile. query and out are [total_q, num_heads, head_dim]. A
    sequence with at most SPLIT_Q (<= TILE_Q) new tokens and num_splits > 1 writes partial_out
    [num_seqs * SPLIT_Q, num_heads, num_splits, HEAD_DIM] and partial_lse [num_seqs * SPLIT_Q,
    num_heads, num_splits] (fp32, base 2) for varlen_merge_kernel; every other sequence writes out
    directly.
    """
    tl.static_assert(SPLIT_Q <= TILE_Q, "a split sequence must be one tile")
    pid = tl.program_id(0)
    kv_head = tl.program_id(1).to(tl.int64)
    num_tiles = tl.num_programs(0) - num_seqs * (num_splits - 1)   # the tiles come first
    in_tiles = pid < num_tiles
    extra = tl.maximum(pid - num_tiles, 0)                         # split >= 1 of one sequence's only tile
    seq = tl.where(in_tiles, find_sequence(query_start_loc, pid, num_seqs, TILE_Q), extra % num_seqs)
    split = tl.where(in_tiles, 0, 1 + extra // num_seqs)
    first_row = tl.load(query_start_loc + seq)
    first_tile = ((first_row.to(tl.int64) + (TILE_Q - 1) * seq) // TILE_Q).to(tl.int32)
    local_tile = tl.where(in_tiles, pid - first_tile, 0)           # tile number inside the sequence
    chunk_len = tl.load(query_start_loc + seq + 1) - first_row     # this sequence's new tokens
    split_seq = (chunk_len <= SPLIT_Q) & (num_splits > 1)          # few rows: split the keys
    if (local_tile * TILE_Q >= chunk_len) | ((split > 0) & (chunk_len > SPLIT_Q)):
        return                                                     # past the last tile, or an unsplit sequence's split
    seq_len = tl.load(seq_lens + seq)
    cached = seq_len - chunk_len                                   # tokens before the chunk

    # the packed tile: row r is new token (local_tile * TILE_Q + r // GROUP), query head r % GROUP of the group
    q, tok, q_pos, token_row, heads, row_ok, q_mask = load_packed_queries(query, first_row, local_tile, chunk_len,
                                                                          cached, kv_head, stride_qt, stride_qh,
                                                                          GROUP, TILE_M, TILE_Q, HEAD_DIM,
                                                                          HEAD_DIM_PAD)
    rows = tl.arange(0, TILE_M)
    offs_d = tl.arange(0, HEAD_DIM_PAD)

    # keys 0 .. the tile's last position, their tiles shared out evenly into splits (one unless split_seq)
    end = tl.minimum(cached + (local_tile + 1) * TILE_Q, seq_len)
    splits = tl.where(split_seq, num_splits, 1)
    key_tiles = tl.cdiv(end, TILE)
    fewest = key_tiles // splits                                   # each split's tiles; the first
    more = key_tiles - fewest * splits                             # `more` splits hold one more
    start = tl.minimum((split * fewest + tl.minimum(split, more)) * TILE, end)
    stop = tl.minimum(start + (fewest + (split < more).to(tl.int32)) * TILE, end)   # start == stop: empty
    split_col = tl.where(split_seq, split, -1)                     # the partials' column; -1: one pass

    acc, m_i, l_i = attend_tiles(q, q_pos, start, stop, block_tables + seq.to(tl.int64) * stride_bt,
                                 key_cache, value_cache, stride_kb, stride_kt, stride_vb, stride_vt,
                                 kv_head * stride_kh, kv_head * stride_vh, qk_scale,
                                 BLOCK_SIZE, TILE, HEAD_DIM, HEAD_DIM_PAD, DOT_PRECISION, BASE2=True)
    result = normalise(acc, l_i)                                   # [TILE_M, HEAD_DIM_PAD]; 0 if no key

    # one pass: straight to the output (the scalar choice as a [TILE_M] tensor: the interpreter
    # mishandles a scalar `&` a tensor)
    one_pass = (rows * 0 + split_col) < 0                          # [TILE_M]
    tl.store(out + token_row[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
             result.to(out.dtype.element_ty), mask=q_mask & one_pass[:, None])
    # split: the range's output and base-2 log-sum-exp, for the merge
    has_keys = l_i > 0
    lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
    num_heads = tl.num_programs(1) * GROUP
    part = ((seq.to(tl.int64) * SPLIT_Q + tok) * num_heads + heads) * num_splits + split_col   # [TILE_M]
    part_ok = row_ok & (one_pass == 0)
    tl.store(partial_out + part[:, None] * HEAD_DIM + offs_d[None, :], result,
             mask=part_ok[:, None] & (offs_d < HEAD_DIM)[None, :])
    tl.store(partial_lse + part, lse, mask=part_ok)


@triton.jit
def varlen_merge_kernel(out, partial_out, partial_lse, query_start_loc, num_splits, stride_ot, stride_oh,
                        SPLIT_Q: tl.constexpr, SPLITS_PAD: tl.constexpr,
                        HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr):
    """out[row, head] = the splits' outputs weighted by exp2(lse_i - max lse), normalised.

    Grid: (num_seqs, num_heads): program (seq, head) merges the new tokens of sequence seq if it
    was split (at most SPLIT_Q new tokens), one after the other, else exits.
    """
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    first_row = tl.load(query_start_loc + seq)
    chunk_len = tl.load(query_start_loc + seq + 1) - first_row
    if chunk_len > SPLIT_Q:
        return                                                     # not split: the tile wrote out itself
    splits = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    split_ok = splits < num_splits
    d_ok = offs_d < HEAD_DIM
    for i in range(0, chunk_len):
        part = ((seq * SPLIT_Q + i) * tl.num_programs(1) + head) * num_splits + splits      # [SPLITS_PAD]
        lse = tl.load(partial_lse + part, mask=split_ok, other=float("-inf"))
        top = tl.max(lse, axis=0)
        top = tl.where(top == float("-inf"), 0.0, top)             # no split saw a key: weights all 0
        weight = tl.exp2(lse - top)                                # empty splits get 0
        total = tl.sum(weight, axis=0)
        weight = weight / tl.where(total > 0, total, 1.0)
        parts = tl.load(partial_out + part[:, None] * HEAD_DIM + offs_d[None, :],
                        mask=split_ok[:, None] & d_ok[None, :], other=0.0)   # [SPLITS_PAD, HEAD_DIM_PAD]
        result = tl.sum(weight[:, None] * parts, axis=0)
        tl.store(out + (first_row + i) * stride_ot + head * stride_oh + offs_d,
                 result.to(out.dtype.element_ty), mask=d_ok)
