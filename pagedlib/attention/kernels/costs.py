"""What a GPU kernel costs: the arithmetic of the page "What a GPU kernel costs" (before chapter 5).

Five rules of thumb a kernel writer checks before writing a line, each a small function here so the
page's numbers are computed, not typed:

- :func:`load_efficiency`: a warp's 32 loads are served in 32-byte sectors; neighbours in memory
  (coalesced) cost few sectors, a stride costs one sector per lane;
- :func:`bytes_in_flight`: Little's law, bandwidth x latency: the bytes that must be on their way
  at every moment to keep DRAM busy;
- :func:`programs_per_sm`: occupancy, how many programs an SM holds at once, and which of its
  registers, shared memory, warps or program slots runs out first;
- :func:`waves`: wave quantisation, a grid runs in whole waves of one program per SM slot;
- :func:`gemm_intensity` against :func:`decode_attention_intensity`: a weight GEMM's FLOPs per
  byte grow with the batch, decode attention's stay flat.

GPU numbers come from their one home: SMs per GPU and peak bandwidth from ``memory.capacity`` and
``plots.kernels.GPU_SPECS``, SM limits from :data:`.launch.SM_LIMITS`. The DRAM latency is an
assumption of the page, said so: :data:`ASSUMED_DRAM_LATENCY_NS`.
"""
from __future__ import annotations

import math

from .launch import SMLimits

WARP = 32                    # threads per warp, every NVIDIA GPU
SECTOR_BYTES = 32            # DRAM and L2 serve loads in 32-byte sectors (CUDA Best Practices Guide)
ASSUMED_DRAM_LATENCY_NS = 600   # an order of magnitude for a DRAM load's latency, not a datasheet figure


def sectors(elem_bytes: int, stride_elems: int, lanes: int = WARP) -> int:
    """32-byte sectors touched when ``lanes`` threads each load one element of ``elem_bytes``,
    ``stride_elems`` elements apart (1: neighbours, coalesced)."""
    addresses = {lane * stride_elems * elem_bytes // SECTOR_BYTES for lane in range(lanes)}
    last = {((lane * stride_elems + 1) * elem_bytes - 1) // SECTOR_BYTES for lane in range(lanes)}
    return len(addresses | last)


def load_efficiency(elem_bytes: int, stride_elems: int, lanes: int = WARP) -> float:
    """Useful bytes over bytes moved for one warp-wide load (1.0: every byte of every sector used)."""
    return lanes * elem_bytes / (sectors(elem_bytes, stride_elems, lanes) * SECTOR_BYTES)


def bytes_in_flight(bandwidth_gbs: float, latency_ns: float = ASSUMED_DRAM_LATENCY_NS) -> float:
    """Little's law: the bytes that must be requested and not yet returned, at every moment, to
    keep ``bandwidth_gbs`` busy when each load takes ``latency_ns``."""
    return bandwidth_gbs * 1e9 * latency_ns * 1e-9


def programs_per_sm(limits: SMLimits, warps: int, registers_per_thread: int,
                    shared_bytes: int = 0) -> tuple[int, str]:
    """(programs one SM holds at once, the resource that limits it) for programs of ``warps`` warps,
    ``registers_per_thread`` registers and ``shared_bytes`` of shared memory (allocation
    granularity ignored)."""
    by = {"warps": limits.max_warps // warps,
          "program slots": limits.max_programs,
          "registers": limits.registers // (registers_per_thread * WARP * warps)}
    if shared_bytes:
        by["shared memory"] = limits.shared_per_sm // (shared_bytes + limits.reserved_shared)
    limiter = min(by, key=lambda k: by[k])
    return by[limiter], limiter


def occupancy(limits: SMLimits, warps: int, registers_per_thread: int, shared_bytes: int = 0) -> float:
    """Resident warps over the SM's maximum: the share of warp slots that can hide latency."""
    n, _ = programs_per_sm(limits, warps, registers_per_thread, shared_bytes)
    return n * warps / limits.max_warps


def waves(programs: int, sms: int, per_sm: int = 1) -> tuple[int, float]:
    """(waves, share of SM slots busy over those waves) for a grid of ``programs`` on ``sms`` SMs
    holding ``per_sm`` programs each: the last wave runs whatever is left."""
    slots = sms * per_sm
    count = math.ceil(programs / slots)
    return count, programs / (count * slots)


def gemm_intensity(m: int, n: int, k: int, elem_bytes: int = 2) -> float:
    """FLOPs per byte of ``[m, k] @ [k, n]`` reading both inputs and writing the output once:
    a batch of ``m`` tokens through a weight of ``k x n``."""
    return 2 * m * n * k / (elem_bytes * (m * k + k * n + m * n))


def decode_attention_intensity(batch: int, group: int, elem_bytes: int = 2) -> float:
    """FLOPs per byte of K/V for one decode step of ``batch`` sequences: each sequence reads its own
    K/V, so the batch adds bytes as fast as FLOPs: ``2 * group / elem_bytes`` whatever ``batch``."""
    flops_per_row = batch * group * 2 * 2          # per K/V element pair, q.k and p.v, 2 FLOPs each
    bytes_per_row = batch * 2 * elem_bytes         # K and V of each sequence's own row
    return flops_per_row / bytes_per_row


__all__ = ["WARP", "SECTOR_BYTES", "ASSUMED_DRAM_LATENCY_NS", "sectors", "load_efficiency",
           "bytes_in_flight", "programs_per_sm", "occupancy", "waves", "gemm_intensity",
           "decode_attention_intensity"]
