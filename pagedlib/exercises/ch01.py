"""Chapter 1 exercises: the size of the KV cache, and how many requests fit a GPU.

Reference solutions are plain functions (or values); each name is then rebound to its Exercise, so
a notebook calls ``ex.kv_bytes_per_token.check(my_function)``.
"""
from . import OTHERWISE, Below, Exercise, OneOf, hide_helpers
from ..memory.capacity import GPU_MEMORY_UTILIZATION, GPUS, MODELS, ModelSpec


def kv_bytes_per_token(spec: ModelSpec) -> int:
    """Bytes of K and V that one token leaves in the cache, over all layers of the model `spec`."""
    return 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes


# ModelSpec's helpers that compute these exercises' answers: the learner's function gets a spec
# without them (the exercises say "do not call spec.kv_bytes_per_token / spec.kv_bytes")
_BYTE_HELPERS = ("kv_bytes_per_token", "kv_bytes_per_token_per_layer", "kv_bytes", "kv_bytes_per_token_at",
                 "block_bytes", "tokens_held")


def _spec_without_helpers(args: tuple) -> tuple:
    spec, *rest = args
    return (hide_helpers(spec, _BYTE_HELPERS,
                         "The function uses `spec.{name}`, which computes the answer itself: work it out "
                         "from the spec's fields (num_layers, num_kv_heads, head_dim, ...) instead."),
            *rest)


def _diagnose_bytes(answer, expected, args):
    spec = args[0]
    forgot_kv = answer * 2 == expected
    forgot_dtype = spec.dtype_bytes != 1 and answer * spec.dtype_bytes == expected
    if forgot_kv and forgot_dtype:       # a 2-byte dtype: the two slips give the same number
        return ("half the right size: count a key AND a value for every token, in bytes "
                "(dtype_bytes each), not in elements.")
    if forgot_kv:
        return "half the right size: the cache keeps a key AND a value for every token."
    if forgot_dtype:
        return (f"that counts elements; {spec.name} keeps dtype_bytes={spec.dtype_bytes} bytes per "
                f"element: multiply by dtype_bytes for bytes.")
    if answer == expected * spec.num_heads // spec.num_kv_heads and spec.num_heads != spec.num_kv_heads:
        return (f"{spec.name} uses grouped-query attention: only num_kv_heads={spec.num_kv_heads} "
                f"heads are cached, not num_heads={spec.num_heads}.")
    if answer == expected * 8:
        return "that is bits; the question asks for bytes."
    if answer * spec.num_layers == expected:
        return "that is one layer; every layer keeps its own K and V."
    return None


# the plain shape only: windows, latents and fixed state are exercise ch01.cache_bytes
# The fp32 case first: with a 2-byte dtype a forgotten dtype_bytes and a forgotten K-and-V give the
# same number, so the first case a slip fails on must tell them apart.
_SPECS = ([ModelSpec("tiny-fp32", 2, 4, 4, 16, 0, 128, dtype_bytes=4)]
          + [m for m in MODELS.values() if m.is_uniform])

kv_bytes_per_token = Exercise(
    "ch01.kv_bytes_per_token",
    "How many bytes of K and V does one token add to the cache of the model `spec` (a ModelSpec)?",
    kv_bytes_per_token,
    cases=[(s,) for s in _SPECS],
    diagnose=_diagnose_bytes,
    learner_args=_spec_without_helpers,
    hints=["Each layer stores, per token, one key vector and one value vector for every KV head.",
           "One vector has head_dim elements of dtype_bytes bytes each; use num_kv_heads, not num_heads.",
           "2 * num_layers * num_kv_heads * head_dim * dtype_bytes."],
    wrong=[lambda s: s.num_layers * s.num_kv_heads * s.head_dim * s.dtype_bytes,
           lambda s: 2 * s.num_layers * s.num_heads * s.head_dim * s.dtype_bytes,
           lambda s: 2 * s.num_layers * s.num_kv_heads * s.head_dim,
           lambda s: s.kv_bytes_per_token],
    explanation="K and V, in every layer, for every cached (KV) head: only KV heads are stored, "
                "so GQA shrinks the cache.",
)


def requests_that_fit(spec: ModelSpec, gpu_bytes: int, seq_len: int) -> int:
    """How many requests of `seq_len` tokens have room for their K/V on a GPU of `gpu_bytes` usable
    bytes, when the engine takes GPU_MEMORY_UTILIZATION of them and the weights come first.
    Zero if the weights do not fit."""
    budget = int(gpu_bytes * GPU_MEMORY_UTILIZATION) - spec.weights_bytes
    per_request = seq_len * 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes
    return max(budget, 0) // per_request


def _diagnose_fit(answer, expected, args):
    spec, gpu_bytes, seq_len = args
    per_request = seq_len * spec.kv_bytes_per_token
    if answer == max(gpu_bytes - spec.weights_bytes, 0) // per_request != expected:
        return ("that uses all of the GPU's memory; an engine takes only GPU_MEMORY_UTILIZATION "
                "of it and leaves the rest as headroom.")
    if answer in {gpu_bytes // per_request, int(gpu_bytes * GPU_MEMORY_UTILIZATION) // per_request} \
            and answer != expected:
        return "the weights are in GPU memory too: only what they leave free can hold K/V."
    if answer == max(int(gpu_bytes * 0.9) - spec.weights_bytes, 0) // per_request != expected:
        return ("that is vLLM's default before v0.21 (0.9); use GPU_MEMORY_UTILIZATION, today's "
                "default, which the course uses everywhere.")
    if answer < 0:
        return "when the weights alone fill the budget, no request fits: the answer cannot be negative."
    if isinstance(answer, int) and answer == expected + 1:
        return "round down: a request whose K/V does not fit completely does not fit."
    return None


_FIT_CASES = [(MODELS[m], GPUS[g].memory_bytes, n) for m, g, n in [
    ("llama-3-8b", "A100-80GB", 2048), ("llama-3-8b", "T4", 2048), ("llama-3-8b", "L4", 2048),
    ("opt-13b", "A100-40GB", 2048), ("llama-2-7b", "A100-40GB", 4096), ("llama-3-70b", "T4", 2048),
    ("gpt2", "T4", 1024), ("llama-3.1-8b", "H100-80GB", 32768)]]

requests_that_fit = Exercise(
    "ch01.requests_that_fit",
    "How many requests of `seq_len` tokens fit on a GPU of `gpu_bytes` usable bytes, when the engine "
    "takes GPU_MEMORY_UTILIZATION of them and the weights come first?",
    requests_that_fit,
    cases=_FIT_CASES,
    diagnose=_diagnose_fit,
    hints=["The engine's budget is a fraction of the GPU, and the weights take their share of it "
           "before any K/V.",
           "Budget: int(gpu_bytes * GPU_MEMORY_UTILIZATION) - spec.weights_bytes. One request needs "
           "seq_len * (bytes per token) of K/V.",
           "max(budget, 0) // (seq_len * kv_bytes_per_token(spec))"],
    wrong=[lambda spec, gpu_bytes, seq_len: gpu_bytes // (seq_len * spec.kv_bytes_per_token),
           lambda spec, gpu_bytes, seq_len:
           max(gpu_bytes - spec.weights_bytes, 0) // (seq_len * spec.kv_bytes_per_token),
           lambda spec, gpu_bytes, seq_len:
           (int(gpu_bytes * 0.9) - spec.weights_bytes) // (seq_len * spec.kv_bytes_per_token)],
    explanation="Weights first, then whole requests' K/V in what is left of the engine's share; "
                "a budget below zero holds no request.",
)

# Predict: Llama-3-8B in fp16, requests of 2,048 tokens, on Colab's free GPU.
t4_llama3 = requests_that_fit.reference(MODELS["llama-3-8b"], GPUS["T4"].memory_bytes, 2048)


# no digit zero in these messages: the contract tests check that no message reveals the answer
_PER_REQUEST = 2048 * MODELS["llama-3-8b"].kv_bytes_per_token
_AS_SOLD = 16 * 2**30
_CARELESS = sorted({(_AS_SOLD - MODELS["llama-3-8b"].weights_bytes) // _PER_REQUEST,
                    _AS_SOLD // _PER_REQUEST, GPUS["T4"].memory_bytes // _PER_REQUEST,
                    int(GPUS["T4"].memory_bytes * GPU_MEMORY_UTILIZATION) // _PER_REQUEST})
_T4_MISTAKES = [
    (OneOf(*_CARELESS), "that takes the T4 as sold (16 GB) or leaves out the weights. Compare the usable "
                        "memory that torch reports with the size of Llama-3-8B's fp16 weights."),
    (Below(0), "a count of requests cannot be negative."),
    (OTHERWISE, "start with the weights: how much of the T4's usable memory do they leave?"),
]

t4_llama3 = Exercise(
    "ch01.t4_llama3",
    "Predict: how many 2,048-token requests of Llama-3-8B (fp16) fit on Colab's T4? (The next "
    "exercise writes the function that counts them for any model and GPU.)",
    t4_llama3,
    mistakes=_T4_MISTAKES,
    hints=["The weights come first. Compare them with the T4's usable memory, not with its box.",
           "Llama-3-8B has about 8.03 billion parameters of 2 bytes; the T4's usable memory is "
           "`GPUS['T4'].memory_gib` GiB, and the engine takes GPU_MEMORY_UTILIZATION (92%) of that.",
           "budget = GPU_MEMORY_UTILIZATION * GPUS['T4'].memory_bytes - MODELS['llama-3-8b'].weights_bytes; "
           "when the budget is below zero, no request fits, else budget // (2048 * bytes per token)."],
    wrong=[4, 52, -3],
    explanation="Its fp16 weights (about 15 GiB) are larger than the T4's 14.6 usable GiB: the model "
                "needs smaller weights (int8, int4) or a bigger GPU.",
)


# ---- beyond one shape: windows, latents, fixed state, KV dtype --------------------------------------
def cache_bytes(spec: ModelSpec, num_tokens: int) -> int:
    """Bytes of cache that one sequence of `num_tokens` tokens keeps, for any shape of `spec`
    (tensor_parallel_size 1): global layers keep every token, windowed layers at most
    `sliding_window`, an MLA layer one latent of `kv_latent_dim` elements per token (K and V share
    it), and a hybrid's state layers `state_bytes_per_seq` in all, whatever the length."""
    if spec.kv_latent_dim is not None:
        per_token_per_layer = spec.kv_latent_dim * spec.kv_element_bytes
    else:
        per_token_per_layer = 2 * spec.num_kv_heads * spec.head_dim * spec.kv_element_bytes
    window = num_tokens if spec.sliding_window is None else min(num_tokens, spec.sliding_window)
    tokens = spec.num_global_layers * num_tokens + spec.num_windowed_layers * window
    return int(tokens * per_token_per_layer) + spec.state_bytes_per_seq


def _naive_cache_bytes(spec: ModelSpec, n: int) -> int:
    return n * 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * spec.dtype_bytes


def _diagnose_cache(answer, expected, args):
    spec, n = args
    if not isinstance(answer, int):
        return None
    if spec.kv_latent_dim is not None and answer == 2 * expected:
        return (f"{spec.name} uses MLA: one latent of kv_latent_dim elements per token and layer stands "
                "for both K and V, so there is no factor 2.")
    if spec.num_windowed_layers and answer == spec.replace(sliding_window=None).kv_bytes(n):
        return (f"{spec.name}'s {spec.num_windowed_layers} windowed layers keep at most sliding_window="
                f"{spec.sliding_window} tokens each, not all {n:,}.")
    if spec.num_global_layers and spec.num_windowed_layers and \
            answer == spec.replace(num_sliding_layers=spec.num_attention_layers).kv_bytes(n):
        return (f"only num_windowed_layers={spec.num_windowed_layers} layers have the window; the "
                f"num_global_layers={spec.num_global_layers} global ones keep every token.")
    if spec.num_state_layers and answer == expected - spec.state_bytes_per_seq:
        return (f"{spec.name} is a hybrid: its {spec.num_state_layers} state layers keep "
                "state_bytes_per_seq bytes per sequence, whatever its length; add them.")
    if spec.num_state_layers and answer == spec.replace(num_state_layers=0, state_bytes_per_layer=0).kv_bytes(n):
        return (f"only num_attention_layers={spec.num_attention_layers} layers cache K/V per token; the "
                "other layers keep a fixed state instead (state_bytes_per_seq).")
    if spec.kv_dtype_bytes is not None and answer == spec.replace(kv_dtype_bytes=None).kv_bytes(n):
        return (f"the cache is kept in kv_dtype_bytes={spec.kv_dtype_bytes} bytes per element, not the "
                f"weights' dtype_bytes={spec.dtype_bytes}: use spec.kv_element_bytes.")
    if answer == _naive_cache_bytes(spec, n) != expected:
        return (f"that is 2 x layers x kv_heads x head_dim x dtype_bytes x tokens, the plain shape; "
                f"{spec.name} is not plain: look at its sliding_window, kv_latent_dim, "
                f"num_state_layers and kv_dtype_bytes.")
    return None


_CACHE_CASES = [(MODELS[m], n) for m, n in [
    ("llama-3.1-8b", 32_768), ("mistral-7b-v0.1", 2_000), ("mistral-7b-v0.1", 32_768),
    ("gemma-3-27b", 500), ("gemma-3-27b", 131_072), ("gpt-oss-120b", 65_536), ("deepseek-v3", 131_072),
    ("qwen3-coder-next", 0), ("qwen3-coder-next", 262_144)]] + [
    (MODELS["llama-3.1-8b"].replace(name="llama-3.1-8b-fp8-kv", kv_dtype_bytes=1), 131_072),
    (MODELS["qwen3-8b"].replace(name="qwen3-8b-4bit-kv", kv_dtype_bytes=0.5), 40_960)]

cache_bytes = Exercise(
    "ch01.cache_bytes",
    "How many bytes of cache does one sequence of `num_tokens` tokens keep, for a model `spec` of any "
    "shape (sliding windows, MLA latent, hybrid state, KV dtype; tensor_parallel_size 1)?",
    cache_bytes,
    cases=_CACHE_CASES,
    diagnose=_diagnose_cache,
    learner_args=_spec_without_helpers,
    hints=["Count, layer by layer, how many tokens each layer keeps and how many bytes one token costs "
           "it; then add what does not depend on the length at all.",
           "Global layers (spec.num_global_layers) keep num_tokens; windowed ones (spec.num_windowed_layers) "
           "min(num_tokens, spec.sliding_window). Per token and layer: 2 * num_kv_heads * head_dim "
           "elements, or kv_latent_dim for MLA, of spec.kv_element_bytes each. Plus spec.state_bytes_per_seq.",
           "tokens = global * n + windowed * min(n, window); int(tokens * per_token_per_layer) + "
           "spec.state_bytes_per_seq"],
    wrong=[_naive_cache_bytes,
           lambda spec, n: cache_bytes.reference(spec.replace(sliding_window=None), n),
           lambda spec, n: cache_bytes.reference(spec, n) - spec.state_bytes_per_seq + (
               cache_bytes.reference(spec, n) if spec.kv_latent_dim is not None else 0),
           lambda spec, n: spec.kv_bytes(n)],
    why="each layer keeps what its kind keeps: all tokens, a window, one latent, or a fixed state.",
    explanation="The plain formula counts one figure per token for every layer. Windowed layers stop "
                "growing at their window, an MLA latent replaces K and V heads, state layers cost a "
                "fixed amount per sequence, and the KV dtype sets the bytes per element.",
)
