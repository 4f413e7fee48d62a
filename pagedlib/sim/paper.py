"""The PagedAttention paper's numbers (Kwon et al., SOSP 2023) that the simulator is compared with.

OPT-13B on one A100-40GB: 12 GB of K/V cache at 800 KiB per token = 15,728 slots; max_len 2048.
"""
from __future__ import annotations

from ..memory.capacity import GiB, MODELS

OPT13B = MODELS["opt-13b"]                       # 800 KiB of K/V per token (fp16)
KV_SLOTS = 12 * GiB // OPT13B.kv_bytes_per_token   # 15,728 token slots
MAX_LEN = 2048

# Figure 2 (ShareGPT): share of K/V memory in each state, in percent.
# vLLM's bar gives only "96.3%" and small slivers; the ~1/~1/~1.7 split is read off the figure.
FIGURE2 = {
    "max":    {"token": 20.4, "reservation": 13.3, "internal": 57.3, "external": 8.9},
    "pow2":   {"token": 26.8, "reservation": 17.9, "internal": 13.6, "external": 41.6},
    "oracle": {"token": 38.2, "reservation": 25.2, "internal": 0.0, "external": 36.6},
    "paged":  {"token": 96.3, "reservation": 1.0, "internal": 1.0, "external": 1.7},
}
# The shares above that are read off a bar too thin to measure: approximate (the paper prints none).
FIGURE2_APPROXIMATE = {("paged", "reservation"), ("paged", "internal"), ("paged", "external")}

# Figure 13: average number of batched requests, OPT-13B.
FIGURE13 = {
    ("sharegpt", 2.0): {"max": 7.00, "pow2": 9.81, "oracle": 13.62, "paged": 30.42},
    ("alpaca", 30.0): {"max": 7.00, "pow2": 43.24, "oracle": 72.75, "paged": 132.44},
}

POLICY_LABELS = {"max": "Orca (Max)", "pow2": "Orca (Pow2)", "oracle": "Orca (Oracle)",
                 "paged": "vLLM (paged)"}
