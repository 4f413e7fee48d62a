"""How the attention kernels are launched (chapter 9): tile sizes, warps and pipeline stages.

A Triton kernel's speed and whether it runs at all depend on numbers chosen at launch, not in the
kernel: how many K/V tokens a program loads per step (``TILE``), how many new tokens a prefill
program owns (``TILE_M`` rows: new tokens x the GQA group), how many warps share the work (``num_warps``) and how many tiles the
compiler loads ahead (``num_stages``). ``launch_config`` chooses all of them from the head dim, the
dtype, the GQA group and the GPU's compute capability; every launcher in ``pagedlib.attention.triton_backend``
uses it, and ``python -m pagedlib.bench kernels --resources`` compiles every kernel with exactly
these choices to show the registers, spills and shared memory they cost on a T4, an A100 and an H100.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from ...validation import positive_int

MIN_DOT_ROWS = 16            # tl.dot wants at least 16 rows: on tensor cores the GQA group is padded to 16 query rows
KV_TILE_BYTES = 16 * 1024    # one K (or V) tile on tensor cores: 16 KB, within every GPU's shared memory
CUDA_CORE_TILE = 16          # K/V tokens per step where the dots run on CUDA cores (a T4, or fp32)
PREFILL_ROWS = 64            # prefill query rows (new tokens x the GQA group) per program on tensor cores:
                             # Hopper's wgmma takes 64 rows; on CUDA cores prefill packs MIN_DOT_ROWS
FOUR_WARP_ACC = 16 * 128     # accumulator elements (query rows x padded head dim) 4 warps hold on CUDA cores
FOUR_WARP_MMA_ACC = PREFILL_ROWS * 64    # ... and prefill's with tensor cores: at [64, 128] and 4 warps the
                                         # A100 build sat at 255 registers and spilled 16-80 bytes per thread
COPY_WARPS = 4               # merge and write_kv: element-wise kernels without a loop
INTERPRETER = None           # the "capability" of the Triton interpreter (CPU): no registers to spill


@dataclass(frozen=True)
class SMLimits:
    """One streaming multiprocessor's limits (CUDA programming guide, compute capabilities table)."""

    shared_per_sm: int          # bytes of shared memory for all resident programs
    shared_per_program: int     # the most one program (thread block) may have
    reserved_shared: int        # bytes CUDA keeps per program (1 KB from Ampere on)
    max_warps: int              # resident warps
    max_programs: int           # resident thread blocks
    registers: int = 64 * 1024  # 32-bit registers per SM, in 4 partitions
    max_registers: int = 255    # per thread


SM_LIMITS = {
    75: SMLimits(64 * 1024, 64 * 1024, 0, 32, 16),              # T4
    80: SMLimits(164 * 1024, 163 * 1024, 1024, 64, 32),         # A100
    86: SMLimits(100 * 1024, 99 * 1024, 1024, 48, 16),          # A10G, RTX 30xx
    89: SMLimits(100 * 1024, 99 * 1024, 1024, 48, 24),          # L4, RTX 40xx
    90: SMLimits(228 * 1024, 227 * 1024, 1024, 64, 32),         # H100, H200
}


def pad_head_dim(head_dim: int) -> int:
    """``HEAD_DIM_PAD``: a power of two, at least 16 (tl.arange needs a power of two, tl.dot 16)."""
    return max(16, triton.next_power_of_2(head_dim))


def pad_group(group: int) -> int:
    """The query rows of one GQA group, padded to a power of two of at least ``MIN_DOT_ROWS`` (what
    tl.dot needs): ``GROUP_PAD`` on tensor cores, and the varlen kernel's tile everywhere."""
    return max(MIN_DOT_ROWS, triton.next_power_of_2(group))


def kv_tile(head_dim: int, dtype: torch.dtype = torch.float16) -> int:
    """Tokens of K/V per step on tensor cores: as many as fit a 16 KB tile, between 16 and 64.

    fp16 and bf16: 64 tokens up to head_dim 128, 32 at head_dim 256. fp32 rows are twice as wide,
    so half as many (32 at head_dim 128, 16 at 256), but fp32 dots never run on tensor cores here
    (see ``launch_config``), so ``CUDA_CORE_TILE`` caps them anyway.
    """
    row_bytes = pad_head_dim(head_dim) * dtype.itemsize
    return max(16, min(64, KV_TILE_BYTES // row_bytes))


def uses_tensor_cores(dtype: torch.dtype, capability: tuple[int, int] | None) -> bool:
    """True where Triton compiles the kernels' ``tl.dot`` to tensor-core instructions (mma).

    Ampere (sm_80) and newer, for fp16 and bf16. A T4 (sm_75) gets dots made of fused multiply-adds
    on CUDA cores with this Triton, and so does fp32 everywhere: the kernels ask for full fp32
    precision (``input_precision="ieee"``), which tensor cores do not offer. The interpreter counts
    as tensor cores: it has no registers, and bigger tiles mean fewer interpreted steps.
    """
    if capability is INTERPRETER:
        return True
    return tuple(capability) >= (8, 0) and dtype in (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class LaunchConfig:
    """Every number the attention kernels are launched with, besides the shapes of the inputs."""

    head_dim: int
    head_dim_pad: int        # HEAD_DIM_PAD
    group: int               # GROUP: query heads per KV head
    group_pad: int           # GROUP_PAD: decode rows per program (the group, padded for tl.dot on tensor cores)
    varlen_rows: int         # TILE_M of the varlen kernel: tile_q tokens x the group, at least MIN_DOT_ROWS
    decode_tile: int         # TILE of decode and split-K: ``tile``, less where the group is unpadded
    decode_warps: int        # their warps: ``num_warps``, or by the unpadded group's own accumulator
    tile: int                # TILE: K/V tokens per step of the loop
    prefill_rows: int        # TILE_M of prefill: prefill_tile_q tokens x the group, >= PREFILL_ROWS on tensor cores
    prefill_warps: int       # prefill's warps, by its accumulator (prefill_warps)
    num_warps: int           # varlen (decode_warps: decode and split-K; prefill_warps); merge and write_kv: COPY_WARPS
    num_stages: int          # tiles loaded ahead by the software pipeline
    dot_precision: str       # "ieee" (true fp32) or "tf32" (ignored for fp16 and bf16)

    @property
    def tile_q(self) -> int:
        """``TILE_Q``: new tokens per program of the varlen kernel, whose packed tile has ``varlen_rows``
        rows, each (token, query head of the group): 16 tokens at group 1, 2 at group 8, 1 past 16."""
        return self.varlen_rows // self.group

    @property
    def split_q(self) -> int:
        """``SPLIT_Q``: the varlen kernel splits the keys of a sequence with at most this many new
        tokens: ``VARLEN_SPLIT_Q``, but no more than one tile holds (``tile_q``), so a split sequence
        is one tile and each of its splits one program (``varlen_grid``)."""
        return min(VARLEN_SPLIT_Q, self.tile_q)

    @property
    def prefill_tile_q(self) -> int:
        """``TILE_Q`` of ``prefill_kernel``: new tokens per program, whose packed tile has
        ``prefill_rows`` rows (64 tokens at group 1 on tensor cores, 16 at group 4, 8 at group 8;
        16 / group on CUDA cores)."""
        return self.prefill_rows // self.group


FMA_PRODUCT_PER_WARP = 1024  # elements of the [rows, TILE, head_dim] product one warp holds (32 a thread)


def decode_tile(tile: int, group_pad: int, head_dim_pad: int, num_warps: int) -> int:
    """Decode's K/V tokens per step: ``tile``, except where the group is not padded to
    ``MIN_DOT_ROWS`` (CUDA cores): there ``attend_tiles`` multiplies a ``[rows, TILE, head_dim]``
    product out in registers, so ``TILE`` shrinks until it fits ``FMA_PRODUCT_PER_WARP`` elements a
    warp (8 tokens at group 4 and head_dim 128, 4 at group 8): no spill (``bench kernels --resources``)."""
    if group_pad >= MIN_DOT_ROWS:
        return tile
    fits = FMA_PRODUCT_PER_WARP * num_warps // (group_pad * head_dim_pad)
    return max(1, min(tile, 1 << (max(1, fits).bit_length() - 1)))


def prefill_rows(group: int, tensor_cores: bool) -> int:
    """Rows of prefill's packed query tile (new tokens x the GQA group): a power of two holding the
    whole group, at least ``PREFILL_ROWS`` (64) where ``tl.dot`` runs on tensor cores, so each K/V
    tile loaded serves 64 rows and Hopper can use ``wgmma``; at least ``MIN_DOT_ROWS`` (16) where it
    runs as fused multiply-adds on CUDA cores (a T4, fp32), whose operands sit in registers."""
    return max(PREFILL_ROWS if tensor_cores else MIN_DOT_ROWS, triton.next_power_of_2(group))


def prefill_warps(rows: int, head_dim_pad: int, tensor_cores: bool) -> int:
    """Prefill's warps: 4 while its fp32 accumulator ``[rows, head_dim_pad]`` fits what 4 warps
    hold (``FOUR_WARP_MMA_ACC`` on tensor cores: 32 registers a thread, the rest for the query
    tile, the scores and the pipelined K/V fragments; ``FOUR_WARP_ACC`` on CUDA cores, where the
    dot's operands take registers too), else 8, as decode's. (``fp32_tile_warps`` can override it
    for the 16-row fp32 tile.)"""
    per_four = FOUR_WARP_MMA_ACC if tensor_cores else FOUR_WARP_ACC
    return 4 if rows * head_dim_pad <= per_four else 8


def launch_config(head_dim: int, dtype: torch.dtype, group: int,
                  capability: tuple[int, int] | None) -> LaunchConfig:
    """Tile sizes, warps and pipeline stages for one model shape on one GPU.

    ``capability`` is the GPU's ``(major, minor)`` compute capability (``(7, 5)`` for a T4,
    ``(9, 0)`` for an H100), or ``None`` for the interpreter. Why each choice:

    - ``tile``: on tensor cores, ``kv_tile``'s 16 KB: big tiles mean few loop steps, and the data
      passes through shared memory. On CUDA cores (a T4; fp32) each thread keeps whole rows of both
      operands of every dot in registers, so a 64-token tile needs more than the 255 registers a
      thread may have and spills to memory; 16 tokens fit every head dim up to 256.
    - ``prefill_rows``: prefill's packed tile, new tokens x the GQA group: 64 rows on tensor cores,
      16 on CUDA cores (the same register argument, for the query rows); ``prefill_tile_q`` new
      tokens each (``prefill_rows``).
    - ``num_warps``: 4 warps (128 threads) hold decode's ``[16, 128]`` fp32 accumulator in 16
      registers a thread; wider rows (head_dim 256) or bigger groups (more than 16 query heads per
      KV head) get 8 warps, so no thread holds more. Prefill's ``[64, 64]`` tile on tensor cores
      fits 4 warps, its ``[64, 128]`` and ``[64, 256]`` take 8 (``prefill_warps``; ``python -m
      pagedlib.bench kernels --resources``).
    - ``num_stages``: 3 from Ampere on, which copies tiles into shared memory asynchronously
      (``cp.async``): the next tiles' loads are in flight while this one is computed. A T4 has no
      asynchronous copy, so there is nothing to pipeline: 1.
    - ``dot_precision``: fp32 inputs ask for "ieee", or the GPU would round them to TF32.
    """
    positive_int("head_dim", head_dim)
    positive_int("group (num_heads // num_kv_heads)", group)
    tensor_cores = uses_tensor_cores(dtype, capability)
    head_dim_pad, varlen_rows = pad_head_dim(head_dim), pad_group(group)
    # decode rows: padded to MIN_DOT_ROWS only where tl.dot runs on tensor cores; on CUDA cores the
    # padded rows would be real multiply-adds, so the group is padded to a power of two only
    group_pad = varlen_rows if tensor_cores else triton.next_power_of_2(group)
    num_warps = 4 if varlen_rows * head_dim_pad <= FOUR_WARP_ACC else 8
    decode_warps = 4 if group_pad * head_dim_pad <= FOUR_WARP_ACC else 8
    tile = kv_tile(head_dim, dtype) if tensor_cores else min(kv_tile(head_dim, dtype), CUDA_CORE_TILE)
    rows = prefill_rows(group, tensor_cores)
    async_copy = capability is INTERPRETER or tuple(capability) >= (8, 0)
    return LaunchConfig(head_dim=head_dim, head_dim_pad=head_dim_pad, group=group, group_pad=group_pad,
                        varlen_rows=varlen_rows, decode_tile=decode_tile(tile, group_pad, head_dim_pad, decode_warps),
                        decode_warps=decode_warps,
                        tile=tile, prefill_rows=rows,
                        prefill_warps=prefill_warps(rows, head_dim_pad, tensor_cores), num_warps=num_warps,
                        num_stages=3 if async_copy else 1,
                        dot_precision="ieee" if dtype == torch.float32 else "tf32")


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of a CUDA device, or ``INTERPRETER`` (None) for tensors on the CPU."""
    if device.type != "cuda":
        return INTERPRETER
    return torch.cuda.get_device_capability(device)


# The keyword arguments of each kernel launch: one definition, used by the launchers in
# pagedlib.attention.triton_backend and by the ahead-of-time compile of pagedlib.bench.kernels.
def _loop_meta(cfg: LaunchConfig, block_size: int) -> dict:
    """What every kernel that walks a sequence with ``attend_tiles`` takes."""
    return dict(BLOCK_SIZE=block_size, TILE=cfg.tile, HEAD_DIM=cfg.head_dim, HEAD_DIM_PAD=cfg.head_dim_pad,
                DOT_PRECISION=cfg.dot_precision, num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def decode_meta(cfg: LaunchConfig, block_size: int) -> dict:
    """Constexprs and options of ``decode_kernel`` and ``split_kernel``."""
    return dict(GROUP=cfg.group, GROUP_PAD=cfg.group_pad,
                **{**_loop_meta(cfg, block_size), "TILE": cfg.decode_tile, "num_warps": cfg.decode_warps})


def prefill_meta(cfg: LaunchConfig, block_size: int) -> dict:
    """Constexprs and options of ``prefill_kernel``: the packed tile is ``prefill_rows`` rows of
    ``prefill_tile_q`` tokens x the GQA group, launched with ``prefill_warps`` (``fp32_tile_warps``
    for the 16-row fp32 tile it shares with the varlen kernel)."""
    warps = fp32_tile_warps(cfg, cfg.prefill_rows) or cfg.prefill_warps
    return dict(GROUP=cfg.group, TILE_M=cfg.prefill_rows, TILE_Q=cfg.prefill_tile_q,
                **{**_loop_meta(cfg, block_size), "num_warps": warps})


def prefill_grid(max_query_len: int, num_seqs: int, num_kv_heads: int, cfg: LaunchConfig) -> tuple[int, int, int]:
    """``prefill_kernel``'s grid: one program per (sequence, KV head, ``prefill_tile_q`` new tokens of
    the longest chunk); a shorter chunk's programs past its last tile exit at once."""
    return (num_seqs, num_kv_heads, triton.cdiv(max_query_len, cfg.prefill_tile_q))


VARLEN_FP32_WIDE_WARPS = 4   # the 16-row fp32 tile's warps at head_dim 256 (see fp32_tile_warps)
VARLEN_FP32_128_WARPS = 8    # ... and at head_dim 128
VARLEN_SPLIT_Q = 4   # the varlen kernel splits the keys of sequences with at most this many new tokens (and one tile)


def fp32_tile_warps(cfg: LaunchConfig, rows: int) -> int | None:
    """The warps of the packed 16-row fp32 tile (the varlen kernel's, and prefill's on CUDA cores),
    where the general rule spilled; None elsewhere (the general rule holds).

    - head_dim 256: with 8 warps the varlen kernel spilled 8-16 bytes per thread on sm_75 and sm_80
      (group 1) and prefill 32 on sm_90 (group 4, ``bench kernels --resources``); 4 warps hold it in
      about 160 registers with no spill. A tile of more rows (a group past 16) keeps 8 warps: with
      4, group 32 spilled 1,144 bytes per thread on sm_90.
    - head_dim 128: with 4 warps the varlen kernel (its split programs after the tiles) sat at 72
      registers and spilled 8 bytes per thread on sm_75 (group 4 or 8); 8 warps hold the [16, 128]
      fp32 tile in about 64 registers, no spill.
    """
    if cfg.dot_precision != "ieee" or rows != MIN_DOT_ROWS:
        return None
    if cfg.head_dim_pad >= 256:
        return VARLEN_FP32_WIDE_WARPS
    if cfg.head_dim_pad == 128:
        return VARLEN_FP32_128_WARPS
    return None


def varlen_meta(cfg: LaunchConfig, block_size: int) -> dict:
    """Constexprs and options of ``varlen_kernel``: the packed tile is ``varlen_rows`` rows of
    ``tile_q`` tokens x the GQA group, the same rows and registers as ``decode_kernel``'s (warps by
    ``fp32_tile_warps`` for fp32)."""
    meta = dict(GROUP=cfg.group, TILE_M=cfg.varlen_rows, TILE_Q=cfg.tile_q, SPLIT_Q=cfg.split_q,
                **_loop_meta(cfg, block_size))
    meta["num_warps"] = fp32_tile_warps(cfg, cfg.varlen_rows) or meta["num_warps"]
    return meta


def varlen_merge_meta(cfg: LaunchConfig, num_splits: int) -> dict:
    """Constexprs and options of ``varlen_merge_kernel``."""
    return dict(SPLIT_Q=cfg.split_q, SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=cfg.head_dim,
                HEAD_DIM_PAD=cfg.head_dim_pad, num_warps=COPY_WARPS, num_stages=1)


def varlen_tiles(total_q: int, num_seqs: int, tile_q: int) -> int:
    """How many (tokens x group) tiles the varlen kernel launches per KV head, from shapes alone: an
    upper bound on ``sum(cdiv(chunk_s, tile_q))`` over the sequences, whatever their chunk lengths.

    ``cdiv(c, q) = 1 + (c - 1) // q``, and a sum of floors is at most the floor of the sum, so
    ``num_seqs + (total_q - num_seqs) // tile_q`` tiles are always enough: exactly enough for a
    decode-only batch (one tile per sequence) or one sequence, and at most ``num_seqs - 1`` too many
    otherwise (the rounding). Sequence ``s``'s tiles are numbered from ``(query_start_loc[s] +
    (tile_q - 1) * s) // tile_q`` (``varlen_first_tile``), so no chunk length is read back to the host.
    """
    return (total_q + (tile_q - 1) * num_seqs) // tile_q


def varlen_first_tile(query_start: int, seq: int, tile_q: int) -> int:
    """The number of sequence ``seq``'s first tile, its chunk starting at row ``query_start``
    (the kernel's ``find_sequence`` uses the same formula)."""
    return (query_start + (tile_q - 1) * seq) // tile_q


def varlen_grid(total_q: int, num_seqs: int, num_kv_heads: int, cfg: LaunchConfig,
                num_splits: int) -> tuple[int, int]:
    """The varlen kernel's grid from shapes alone: ``(tiles + num_seqs * (num_splits - 1), num_kv_heads)``.

    The first ``varlen_tiles`` programs of each KV head are the tiles (split 0 of a split sequence,
    the whole key range of the others); the next ``num_seqs * (num_splits - 1)`` are splits 1 to
    ``num_splits - 1`` of each sequence, which only a sequence that is split (at most
    ``varlen_split_q`` new tokens: one tile) uses. So a fixed ``num_splits`` adds programs per
    sequence, not per tile: a 2,048-token chunk gets no extra program that only exits, except one
    per split for its own (unsplit) sequence."""
    return (varlen_tiles(total_q, num_seqs, cfg.tile_q) + num_seqs * (num_splits - 1), num_kv_heads)


def auto_num_splits(total_q: int, num_seqs: int, num_kv_heads: int, cfg: LaunchConfig, max_seq_len: int,
                    sms: int, per_sm: int) -> int:
    """``num_splits=None`` for both entry points, ``paged_attention`` (``total_q == num_seqs``: one new
    token each) and ``paged_attention_varlen``: ``choose_num_splits`` with the single pass's
    programs, ``varlen_tiles`` per KV head (``num_seqs`` for decode), the key tiles of the longest
    sequence the block table can hold (shapes only), and waves of ``sms * per_sm`` programs
    (``resident_programs``). It depends on the batch, so a sequence's output may differ in its last
    bits from one batch to the next; pass a fixed ``num_splits`` for batch-invariant results."""
    programs = varlen_tiles(total_q, num_seqs, cfg.tile_q) * num_kv_heads
    return choose_num_splits(programs, triton.cdiv(max_seq_len, cfg.tile), sms, per_sm)


def merge_meta(cfg: LaunchConfig, num_splits: int) -> dict:
    """Constexprs and options of ``merge_kernel`` (the partial outputs are ``head_dim`` wide)."""
    return dict(SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=cfg.head_dim,
                HEAD_DIM_PAD=cfg.head_dim_pad, num_warps=COPY_WARPS, num_stages=1)


def write_meta(head_dim: int, num_kv_heads: int, block_size: int) -> dict:
    """Constexprs and options of ``write_kv_kernel``."""
    return dict(NUM_KV_HEADS=num_kv_heads, HEADS_PAD=triton.next_power_of_2(num_kv_heads),
                BLOCK_SIZE=block_size, HEAD_DIM=head_dim, HEAD_DIM_PAD=pad_head_dim(head_dim),
                num_warps=COPY_WARPS, num_stages=1)


# -- split-K: how many ranges a decode splits each sequence into ------------------------------------
# The rule of FlashAttention-3's num_splits_heuristic (hopper/heuristics.h), in the course's units:
# programs are the single pass's (sequence or tile, KV head) programs, key tiles the TILE-token steps
# of the longest sequence.
FULL_WAVE = 0.8              # no split once the single pass fills 80% of the SMs (one wave)
MIN_TILES_PER_SPLIT = 5      # every split holds more than 4 key tiles: fewer cost more to merge than they gain
WAVE_SLACK = 0.85            # the fewest splits whose wave efficiency is within 85% of the best
MAX_SPLITS = 32              # and never more (the merge kernels hold every split's partials at once)


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; 1 on the CPU (the interpreter runs one program at a time)."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


ASSUMED_REGISTERS = 128   # registers per thread the occupancy estimate assumes: the decode kernels
                          # compile to 56-128 (``bench kernels --resources``; the exact count is the compiler's)
UNKNOWN_PER_SM = 4        # programs per SM where the GPU is unknown (the interpreter): an H100's, head_dim 128


def resident_programs(cfg: LaunchConfig, dtype: torch.dtype, capability: tuple[int, int] | None) -> int:
    """How many decode programs one SM holds at once (occupancy): a wave is ``sms`` times this.

    The tightest of the SM's limits (``SM_LIMITS``) for programs of ``cfg.num_warps`` warps,
    ``ASSUMED_REGISTERS`` registers a thread, and the shared memory of one K and one V tile of ``tile`` (the
    compiled kernels allocate that plus up to a quarter more for the pipeline). 4 on a T4, an A100
    or an H100 at head_dim 128 (the resource table measures 4 there), 2 at head_dim 256.
    """
    limits = SM_LIMITS.get(None if capability is INTERPRETER else 10 * capability[0] + capability[1])
    if limits is None:
        return UNKNOWN_PER_SM
    by_registers = limits.registers // (ASSUMED_REGISTERS * 32 * cfg.decode_warps)
    shared = 2 * cfg.tile * cfg.head_dim_pad * dtype.itemsize + limits.reserved_shared
    return max(1, min(by_registers, limits.shared_per_sm // shared, limits.max_warps // cfg.decode_warps,
                      limits.max_programs))


def wave_efficiency(programs: int, sms: int, per_sm: int = 1) -> float:
    """How full the GPU's waves are: ``programs`` equal programs run in ``ceil(programs / slots)``
    waves of ``slots = sms * per_sm`` programs (``per_sm`` resident on each SM at once); 1.0 when the
    last wave is full, 0.5 when half of it idles."""
    waves = programs / (sms * per_sm)
    return waves / math.ceil(waves)


def split_candidates(key_tiles: int, sms: int) -> list[int]:
    """The split counts the rule may choose: 1 to ``MAX_SPLITS`` (and at most one per SM), as long as
    every split holds at least ``MIN_TILES_PER_SPLIT`` key tiles, i.e. ``key_tiles // s >= 5``."""
    return list(range(1, max(1, min(MAX_SPLITS, sms, key_tiles // MIN_TILES_PER_SPLIT)) + 1))


def choose_num_splits(programs: int, key_tiles: int, sms: int, per_sm: int = 1) -> int:
    """How many ranges to split each sequence's keys into (split-K), for both entry points.

    ``programs``: what the single pass launches (sequences or tiles, times KV heads); ``key_tiles``:
    the ``TILE``-token steps of the longest sequence; ``sms``: the GPU's multiprocessors, each
    holding ``per_sm`` programs at once (``resident_programs``): a wave is ``sms * per_sm`` programs.

    1. The single pass fills at least ``FULL_WAVE`` (80%) of one wave: 1, no split.
    2. Otherwise, among ``split_candidates`` (each split holds more than 4 key tiles), the wave
       efficiency of ``programs * s`` programs (``wave_efficiency``); take the smallest ``s`` within
       ``WAVE_SLACK`` (85%) of the best: fewer splits mean less to merge.

    FlashAttention-3's ``num_splits_heuristic`` counts waves of one program per SM; on an H200 the
    course's decode kernels ran as waves of 4 per SM (one SM's resident programs), and splitting
    paid up to that: 16 sequences x 8 KV heads = 128 programs ran fastest in 4 splits.
    """
    programs = max(1, programs)
    slots = sms * per_sm
    if programs >= FULL_WAVE * slots:
        return 1
    candidates = split_candidates(key_tiles, slots)
    efficiency = {s: wave_efficiency(programs * s, slots) for s in candidates}
    best = max(efficiency.values())
    return min(s for s in candidates if efficiency[s] >= WAVE_SLACK * best)
