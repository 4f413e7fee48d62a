"""How long one engine step takes: the clock that turns Poisson arrivals (per second) into steps.

A decoding step of a big model is memory-bound: it reads all the weights once, plus the K/V of every
token stored for the running requests; prefilling a prompt is compute-bound. So a step costs

    seconds = weights_s + per_kv_token_s * kv_tokens + per_prefill_token_s * prefill_tokens

a **linear cost model**: the three costs add up, where a roofline would take the larger of the memory
time and the compute time. ``StepTime.from_peaks`` derives the three numbers from the model and the GPU, and an ``efficiency``: the
share of peak bandwidth and FLOP/s that a real engine reaches. ``OPT13B_A100`` is the paper's setup
with efficiency 0.5: our assumption, a round number, not fitted to the paper. A step of 30 requests
holding 14K tokens then takes 48 ms; OPT-13B on ShareGPT serves at most ~0.57 requests/s under Max,
~1.0 under Oracle and ~1.8 under paging.

How much the results depend on it (ShareGPT, 2,000 requests, 2 requests/s, average batch): the Orca
baselines are limited by memory for any efficiency up to 0.8 (Max 7.00, Pow2 9.5-9.6, Oracle
13.5-13.6). The paged policy's capacity is close to 2 requests/s, so its batch does depend on it:
34.6 at efficiency 0.3, 34.3 at 0.4, 33.2 at 0.5, 25.8 at 0.6, 17.4 at 0.8 (the queue no longer
grows, and the batch is just what Poisson arrivals bring).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..memory.capacity import MODELS, PEAK_BANDWIDTH_GBS, PEAK_FP16_TFLOPS

GB, TB = 10**9, 10**12


@dataclass(frozen=True)
class StepTime:
    """Seconds per step: ``weights_s + per_kv_token_s * kv_tokens + per_prefill_token_s * prefill``."""

    weights_s: float
    per_kv_token_s: float
    per_prefill_token_s: float

    def __call__(self, kv_tokens: int, prefill_tokens: int = 0) -> float:
        return (self.weights_s + self.per_kv_token_s * kv_tokens
                + self.per_prefill_token_s * prefill_tokens)

    @classmethod
    def from_peaks(cls, num_params: float, kv_bytes_per_token: float, bandwidth: float, flops: float,
                 efficiency: float = 0.5, bytes_per_param: int = 2) -> "StepTime":
        """From the model (parameters, K/V bytes per token) and the GPU's peaks (bytes/s, FLOP/s), each
        reached at ``efficiency``: the weights and the K/V at the memory's pace, each prefill token's
        2 x parameters FLOPs at the math units' pace, added up (a linear cost model)."""
        if not 0 < efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1]; got {efficiency}")
        return cls(weights_s=num_params * bytes_per_param / (bandwidth * efficiency),
                   per_kv_token_s=kv_bytes_per_token / (bandwidth * efficiency),
                   per_prefill_token_s=2 * num_params / (flops * efficiency))


# OPT-13B (12.85B parameters, fp16, 800 KiB of K/V per token: capacity.MODELS) on an A100-40GB
# (its peak bandwidth and fp16 FLOP/s: capacity.PEAK_BANDWIDTH_GBS, PEAK_FP16_TFLOPS)
OPT13B_A100 = StepTime.from_peaks(MODELS["opt-13b"].num_params, MODELS["opt-13b"].kv_bytes_per_token,
                                  PEAK_BANDWIDTH_GBS["A100 40GB"] * GB, PEAK_FP16_TFLOPS["A100 40GB"] * TB,
                                  efficiency=0.5, bytes_per_param=MODELS["opt-13b"].dtype_bytes)
