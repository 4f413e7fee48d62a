"""Chapter 1 exercises: the size of the KV cache.

Reference solutions are plain functions; each name is then rebound to its Exercise, so a notebook
calls ``ex.kv_bytes_per_token.check(my_function)``.
"""
from . import Exercise
from ..capacity import GPUS, MODELS, ModelSpec


def kv_bytes_per_token(spec: ModelSpec) -> int:
    """Bytes of K and V that one token leaves in the cache, over all layers of the model `spec`."""
    return 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes


def _diagnose_bytes(answer, expected, args):
    spec = args[0]
    if answer * 2 == expected:
        return "half the right size: the cache keeps a key AND a value for every token."
    if answer == expected * spec.num_heads // spec.num_kv_heads and spec.num_heads != spec.num_kv_heads:
        return (f"{spec.name} uses grouped-query attention: only num_kv_heads={spec.num_kv_heads} "
                f"heads are cached, not num_heads={spec.num_heads}.")
    if answer == expected * 8:
        return "that is bits; the question asks for bytes."
    if answer * spec.num_layers == expected:
        return "that is one layer; every layer keeps its own K and V."
    return None


_SPECS = list(MODELS.values()) + [ModelSpec("tiny-fp32", 2, 4, 4, 16, 0, 128, dtype_bytes=4)]

kv_bytes_per_token = Exercise(
    "ch01.kv_bytes_per_token",
    "How many bytes of K and V does one token add to the cache of the model `spec` (a ModelSpec)?",
    kv_bytes_per_token,
    cases=[(s,) for s in _SPECS],
    diagnose=_diagnose_bytes,
    hints=["Each layer stores, per token, one key vector and one value vector for every KV head.",
           "One vector has head_dim elements of dtype_bytes bytes each; use num_kv_heads, not num_heads.",
           "2 * num_layers * num_kv_heads * head_dim * dtype_bytes."],
    wrong=[lambda s: s.num_layers * s.num_kv_heads * s.head_dim * s.dtype_bytes,
           lambda s: 2 * s.num_layers * s.num_heads * s.head_dim * s.dtype_bytes],
)


def requests_that_fit(spec: ModelSpec, gpu_bytes: int, seq_len: int) -> int:
    """How many requests of `seq_len` tokens have room for their K/V on a GPU of `gpu_bytes` bytes,
    once the model's weights (``spec.weights_bytes``) are loaded. Zero if the weights do not fit."""
    free = gpu_bytes - spec.weights_bytes
    per_request = seq_len * 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes
    return max(free, 0) // per_request


def _diagnose_fit(answer, expected, args):
    spec, gpu_bytes, seq_len = args
    no_weights = gpu_bytes // (seq_len * spec.kv_bytes_per_token)
    if answer == no_weights and answer != expected:
        return "the weights are in GPU memory too: only what they leave free can hold K/V."
    if answer < 0:
        return "when the weights alone fill the GPU, no request fits: the answer is 0, not negative."
    if isinstance(answer, int) and answer == expected + 1:
        return "round down: a request whose K/V does not fit completely does not fit."
    return None


_FIT_CASES = [(MODELS[m], GPUS[g].memory_bytes, n) for m, g, n in [
    ("llama-3-8b", "A100-80GB", 2048), ("llama-3-8b", "T4", 2048), ("opt-13b", "A100-40GB", 2048),
    ("llama-2-7b", "A100-40GB", 4096), ("llama-3-70b", "T4", 2048), ("gpt2", "T4", 1024),
    ("mistral-7b", "H100-80GB", 32768)]]

requests_that_fit = Exercise(
    "ch01.requests_that_fit",
    "How many requests of `seq_len` tokens fit on a GPU of `gpu_bytes` bytes next to the weights?",
    requests_that_fit,
    cases=_FIT_CASES,
    diagnose=_diagnose_fit,
    hints=["First take away what the weights occupy: `spec.weights_bytes`.",
           "One request of seq_len tokens needs seq_len * (bytes per token) bytes of K/V.",
           "Divide what is left by one request's K/V bytes, rounding down; never go below 0."],
    wrong=[lambda spec, gpu_bytes, seq_len: gpu_bytes // (seq_len * spec.kv_bytes_per_token),
           lambda spec, gpu_bytes, seq_len: (gpu_bytes - spec.weights_bytes) // (seq_len * spec.kv_bytes_per_token)],
)
